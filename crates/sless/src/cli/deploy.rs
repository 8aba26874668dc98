//! `sless deploy DIR`: zip the directory, create the function or update its
//! spec, upload the code, wait for the build and print the URL (or the
//! build log when it failed).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use clap::{Args, ValueEnum};
use serde_json::{json, Map, Value};
use sless_api::{
    AsyncSettings, Destination, DestinationType, Function, FunctionCreate, FunctionSpec, Network, Phase, Runtime,
    SecretEnv, SecretFiles,
};
use sless_client::Wait;

use super::archive::{human_bytes, zip_dir};
use super::context::{ConnArgs, Context};
use super::functions::phase_line;
use super::output::{print_json, say, OutputFormat};
use super::progress::Spinner;

#[derive(Args)]
pub struct DeployArgs {
    /// Directory with the handler code (.git, node_modules and __pycache__ are left out).
    pub dir: PathBuf,
    /// Function name [default: the directory's name].
    #[arg(long, value_parser = super::names::function)]
    pub name: Option<String>,
    /// Runtime; needed to create the function, and cannot change afterwards.
    #[arg(long, value_enum)]
    pub runtime: Option<RuntimeArg>,
    /// `module.function` (Python) or `file.export` (Node) [server default: handler.handle].
    #[arg(long)]
    pub entrypoint: Option<String>,
    /// Environment variable KEY=VALUE (repeatable); given at all, it replaces the function's whole env.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Memory limit in MB.
    #[arg(long, value_name = "MB")]
    pub memory: Option<u32>,
    /// Time limit of one invocation, in seconds.
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u32>,
    /// Network of the instances and the build: internet (default) or none (loopback only).
    #[arg(long, value_enum)]
    pub network: Option<NetworkArg>,
    /// Size of the instances' /tmp in MB.
    #[arg(long = "tmp", value_name = "MB")]
    pub tmp: Option<u32>,
    /// Whether callers of /fn see an unhandled exception's message (for development).
    #[arg(long, value_name = "BOOL")]
    pub expose_errors: Option<bool>,
    /// An environment variable taken from a secret of the namespace (repeatable); given at all, it
    /// replaces the function's whole list.
    #[arg(long = "secret-env", value_name = "ENV=SECRET/KEY", value_parser = parse_secret_env)]
    pub secret_env: Vec<SecretEnv>,
    /// A secret of the namespace mounted as files, /secrets/SECRET/KEY (repeatable); given at all, it
    /// replaces the function's whole list.
    #[arg(long = "secret-files", value_name = "SECRET")]
    pub secret_files: Vec<String>,
    /// Asynchronous calls: retries after a failed attempt, 0-10 [server default: 2].
    #[arg(long, value_name = "N")]
    pub async_retries: Option<u32>,
    /// Asynchronous calls: seconds after which an undelivered event fails, 60-21600 [server default: 21600].
    #[arg(long, value_name = "SECONDS")]
    pub async_max_age: Option<u32>,
    /// Asynchronous calls: where a finally failed event goes: function:NAME, amqp:QUEUE@BROKER_URL, or none.
    #[arg(long, value_name = "DESTINATION", value_parser = parse_destination)]
    pub on_failure: Option<DestinationArg>,
    /// Asynchronous calls: where the record of a delivered event goes (as --on-failure).
    #[arg(long, value_name = "DESTINATION", value_parser = parse_destination)]
    pub on_success: Option<DestinationArg>,
    /// Empty a list the function has (repeatable): env, secret-env or secret-files.
    #[arg(long, value_enum, value_name = "LIST")]
    pub clear: Vec<ClearArg>,
    /// Return once the code is uploaded, without waiting for the build.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for the build [default: the function's build timeout + 60 s].
    #[arg(long, value_name = "SECONDS")]
    pub wait_timeout: Option<u64>,
}

/// `--clear` values: the lists a flag given at all replaces whole, which
/// no value of that flag can empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClearArg {
    Env,
    SecretEnv,
    SecretFiles,
}

impl DeployArgs {
    /// A list both cleared and given is a mistake, not a choice.
    fn check(&self) -> anyhow::Result<()> {
        for (clear, given, flag) in [
            (ClearArg::Env, !self.env.is_empty(), "--env"),
            (ClearArg::SecretEnv, !self.secret_env.is_empty(), "--secret-env"),
            (ClearArg::SecretFiles, !self.secret_files.is_empty(), "--secret-files"),
        ] {
            if given && self.clear.contains(&clear) {
                anyhow::bail!("{flag} and --clear {} together: give one", &flag[2..]);
            }
        }
        Ok(())
    }
}

/// `--network` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NetworkArg {
    Internet,
    None,
}

impl From<NetworkArg> for Network {
    fn from(network: NetworkArg) -> Self {
        match network {
            NetworkArg::Internet => Network::Internet,
            NetworkArg::None => Network::None,
        }
    }
}

/// `--runtime` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RuntimeArg {
    #[value(name = "python3.11", alias = "python")]
    Python311,
    #[value(name = "nodejs20", alias = "node")]
    Nodejs20,
}

impl From<RuntimeArg> for Runtime {
    fn from(arg: RuntimeArg) -> Runtime {
        match arg {
            RuntimeArg::Python311 => Runtime::Python311,
            RuntimeArg::Nodejs20 => Runtime::Nodejs20,
        }
    }
}

fn parse_env(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {text:?}")),
    }
}

/// A `--on-failure`/`--on-success` value: a destination, or none (remove it).
#[derive(Debug, Clone, PartialEq)]
pub struct DestinationArg(Option<Destination>);

fn parse_destination(text: &str) -> Result<DestinationArg, String> {
    let usage = "expected function:NAME, amqp:QUEUE@BROKER_URL or none";
    if text == "none" {
        return Ok(DestinationArg(None));
    }
    let destination = match text.split_once(':') {
        Some(("function", name)) if !name.is_empty() => Destination {
            kind: DestinationType::Function,
            function: Some(name.to_string()),
            broker_url: None,
            queue: None,
        },
        Some(("amqp", rest)) => match rest.split_once('@') {
            Some((queue, url)) if !queue.is_empty() && !url.is_empty() => Destination {
                kind: DestinationType::Amqp,
                function: None,
                broker_url: Some(url.to_string()),
                queue: Some(queue.to_string()),
            },
            _ => {
                return Err(format!(
                    "{usage}; got {text:?} (the queue, then @, then the broker's URL)"
                ))
            }
        },
        _ => return Err(format!("{usage}; got {text:?}")),
    };
    Ok(DestinationArg(Some(destination)))
}

fn parse_secret_env(text: &str) -> Result<SecretEnv, String> {
    let usage = || format!("expected ENV=SECRET/KEY, got {text:?}");
    let (env, source) = text.split_once('=').ok_or_else(usage)?;
    let (secret, key) = source.split_once('/').ok_or_else(usage)?;
    if env.is_empty() || secret.is_empty() || key.is_empty() {
        return Err(usage());
    }
    Ok(SecretEnv {
        secret: secret.to_string(),
        key: key.to_string(),
        env: env.to_string(),
    })
}

impl DeployArgs {
    fn secret_files(&self) -> Vec<SecretFiles> {
        let files = self
            .secret_files
            .iter()
            .map(|secret| SecretFiles { secret: secret.clone() });
        files.collect()
    }

    /// The asynchronous settings `current` would have with the flags
    /// applied (None: no flag about them).
    fn async_settings(&self, current: Option<&AsyncSettings>) -> Option<AsyncSettings> {
        let given = self.async_retries.is_some()
            || self.async_max_age.is_some()
            || self.on_failure.is_some()
            || self.on_success.is_some();
        if !given {
            return None;
        }
        let mut settings = current.cloned().unwrap_or_default();
        if let Some(retries) = self.async_retries {
            settings.retry_limit = retries;
        }
        if let Some(age) = self.async_max_age {
            settings.max_event_age_sec = age;
        }
        if let Some(DestinationArg(destination)) = &self.on_failure {
            settings.on_failure = destination.clone();
        }
        if let Some(DestinationArg(destination)) = &self.on_success {
            settings.on_success = destination.clone();
        }
        Some(settings)
    }
}

pub async fn run(args: DeployArgs, conn: &ConnArgs) -> anyhow::Result<()> {
    args.check()?;
    let cx = conn.context()?;
    let name = match &args.name {
        Some(name) => name.clone(),
        None => default_name(&args.dir)?,
    };
    let archive = zip_dir(&args.dir)?;
    for link in &archive.skipped_links {
        eprintln!("warning: left out symlink {}", link.display());
    }

    let function = apply_spec(&cx, &name, &args).await?;
    eprintln!(
        "uploading {} ({} files, {} unpacked) to function {name}",
        human_bytes(archive.zip.len() as u64),
        archive.files,
        human_bytes(archive.unpacked_bytes)
    );
    let uploaded = cx.client.upload_code(&cx.namespace, &name, archive.zip).await?;
    let code_hash = uploaded.status.code_hash.clone().unwrap_or_default();
    if args.no_wait {
        return report(&cx, &uploaded);
    }

    let timeout = args
        .wait_timeout
        .unwrap_or(u64::from(function.spec.build_timeout_sec) + 60);
    let spinner = Spinner::start(format!("building {name}"));
    let built = cx
        .client
        .wait_for_build(
            &cx.namespace,
            &name,
            &code_hash,
            Wait::new(Duration::from_secs(timeout)),
            |f| spinner.set_message(format!("building {name}: {}", phase_line(f))),
        )
        .await?;
    drop(spinner);
    if built.status.phase == Phase::Failed {
        if cx.output == OutputFormat::Json {
            print_json(&built)?;
        }
        eprintln!("build log:\n{}", built.status.message.trim_end());
        bail!("the build of function {name:?} failed");
    }
    eprintln!("function {name} is ready (version {})", built.status.version);
    report(&cx, &built)
}

/// The URL for people, the function for scripts.
fn report(cx: &Context, function: &Function) -> anyhow::Result<()> {
    match cx.output {
        OutputFormat::Json => print_json(function),
        OutputFormat::Table => {
            let url = match &function.status.url {
                Some(url) => url.clone(),
                None => cx.client.function_url(&function.namespace, &function.name).to_string(),
            };
            say(url)
        }
    }
}

/// The directory's own name, when it is a valid function name.
fn default_name(dir: &std::path::Path) -> anyhow::Result<String> {
    let absolute = dir
        .canonicalize()
        .with_context(|| format!("cannot read {}", dir.display()))?;
    let name = absolute
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    sless_api::validate_name("function", &name)
        .map_err(|e| anyhow!("{e}; the directory's name cannot be the function's: pass --name"))?;
    Ok(name)
}

/// Creates the function from the flags, or brings an existing one's spec in
/// line with them (only the fields given); returns it.
async fn apply_spec(cx: &Context, name: &str, args: &DeployArgs) -> anyhow::Result<Function> {
    let existing = match cx.client.get_function(&cx.namespace, name).await {
        Ok(function) => Some(function),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e.into()),
    };
    let existing = match existing {
        Some(function) => function,
        None => {
            let runtime = args.runtime.ok_or_else(|| {
                anyhow!("function {name:?} does not exist yet: pass --runtime python3.11 or --runtime nodejs20 to create it")
            })?;
            let create = FunctionCreate {
                name: name.to_string(),
                spec: new_spec(runtime.into(), args)?,
            };
            match cx.client.create_function(&cx.namespace, &create).await {
                Ok(function) => {
                    eprintln!("created function {name} ({})", function.spec.runtime);
                    return Ok(function);
                }
                // Created by someone else meanwhile: update it like any other.
                Err(e) if e.is_conflict() => cx.client.get_function(&cx.namespace, name).await?,
                Err(e) => return Err(e.into()),
            }
        }
    };
    if let Some(runtime) = args.runtime.map(Runtime::from) {
        if runtime != existing.spec.runtime {
            bail!(
                "function {name:?} runs {}, not {runtime}; the runtime cannot change: `sless rm {name}` first to start over",
                existing.spec.runtime
            );
        }
    }
    let patch = spec_patch(&existing.spec, args);
    if patch.is_empty() {
        return Ok(existing);
    }
    let updated = cx
        .client
        .patch_function(&cx.namespace, name, &Value::Object(patch))
        .await?;
    eprintln!("updated function {name}");
    Ok(updated)
}

/// A spec with the server's defaults for everything the flags leave out.
fn new_spec(runtime: Runtime, args: &DeployArgs) -> anyhow::Result<FunctionSpec> {
    let mut spec = json!({ "runtime": runtime });
    if let Some(entrypoint) = &args.entrypoint {
        spec["entrypoint"] = json!(entrypoint);
    }
    if !args.env.is_empty() {
        spec["env"] = json!(args.env.iter().cloned().collect::<BTreeMap<_, _>>());
    }
    if let Some(memory) = args.memory {
        spec["memory_mb"] = json!(memory);
    }
    if let Some(timeout) = args.timeout {
        spec["timeout_sec"] = json!(timeout);
    }
    if let Some(network) = args.network {
        spec["network"] = json!(Network::from(network));
    }
    if let Some(tmp) = args.tmp {
        spec["tmp_mb"] = json!(tmp);
    }
    if let Some(expose) = args.expose_errors {
        spec["expose_errors"] = json!(expose);
    }
    if !args.secret_env.is_empty() {
        spec["env_from_secrets"] = json!(args.secret_env);
    }
    if !args.secret_files.is_empty() {
        spec["secret_files"] = json!(args.secret_files());
    }
    if let Some(settings) = args.async_settings(None) {
        spec["async"] = json!(settings);
    }
    Ok(serde_json::from_value(spec)?)
}

/// The merge patch that takes `current` to what the flags say.
fn spec_patch(current: &FunctionSpec, args: &DeployArgs) -> Map<String, Value> {
    let mut patch = Map::new();
    if let Some(entrypoint) = &args.entrypoint {
        if *entrypoint != current.entrypoint {
            patch.insert("entrypoint".into(), json!(entrypoint));
        }
    }
    if let Some(memory) = args.memory {
        if memory != current.memory_mb {
            patch.insert("memory_mb".into(), json!(memory));
        }
    }
    if let Some(timeout) = args.timeout {
        if timeout != current.timeout_sec {
            patch.insert("timeout_sec".into(), json!(timeout));
        }
    }
    if let Some(network) = args.network.map(Network::from) {
        if network != current.network {
            patch.insert("network".into(), json!(network));
        }
    }
    if let Some(tmp) = args.tmp {
        if tmp != current.tmp_mb {
            patch.insert("tmp_mb".into(), json!(tmp));
        }
    }
    if let Some(expose) = args.expose_errors {
        if expose != current.expose_errors {
            patch.insert("expose_errors".into(), json!(expose));
        }
    }
    if !args.secret_env.is_empty() && args.secret_env != current.env_from_secrets {
        patch.insert("env_from_secrets".into(), json!(args.secret_env));
    }
    if !args.secret_files.is_empty() && args.secret_files() != current.secret_files {
        patch.insert("secret_files".into(), json!(args.secret_files()));
    }
    if let Some(wanted) = args.async_settings(current.async_settings.as_ref()) {
        // A merge patch of the changed fields; null removes a destination.
        let now = current.async_settings.clone().unwrap_or_default();
        let mut changed = Map::new();
        if wanted.retry_limit != now.retry_limit {
            changed.insert("retry_limit".into(), json!(wanted.retry_limit));
        }
        if wanted.max_event_age_sec != now.max_event_age_sec {
            changed.insert("max_event_age_sec".into(), json!(wanted.max_event_age_sec));
        }
        if wanted.on_failure != now.on_failure {
            changed.insert("on_failure".into(), json!(wanted.on_failure));
        }
        if wanted.on_success != now.on_success {
            changed.insert("on_success".into(), json!(wanted.on_success));
        }
        if !changed.is_empty() {
            patch.insert("async".into(), Value::Object(changed));
        }
    }
    if !args.env.is_empty() {
        let wanted: BTreeMap<String, String> = args.env.iter().cloned().collect();
        let mut env = Map::new();
        for key in current.env.keys().filter(|k| !wanted.contains_key(*k)) {
            env.insert(key.clone(), Value::Null);
        }
        for (key, value) in &wanted {
            if current.env.get(key) != Some(value) {
                env.insert(key.clone(), json!(value));
            }
        }
        if !env.is_empty() {
            patch.insert("env".into(), Value::Object(env));
        }
    }
    // null resets a field to its default: the empty list.
    for (clear, field, held) in [
        (ClearArg::Env, "env", !current.env.is_empty()),
        (
            ClearArg::SecretEnv,
            "env_from_secrets",
            !current.env_from_secrets.is_empty(),
        ),
        (ClearArg::SecretFiles, "secret_files", !current.secret_files.is_empty()),
    ] {
        if held && args.clear.contains(&clear) {
            patch.insert(field.into(), Value::Null);
        }
    }
    patch
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use serde_json::json;

    use super::{spec_patch, DeployArgs};

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: DeployArgs,
    }

    fn args(argv: &[&str]) -> DeployArgs {
        Cmd::parse_from(std::iter::once("deploy").chain(argv.iter().copied())).args
    }

    #[test]
    fn patches_only_what_the_flags_change() {
        let current = serde_json::from_value(json!({
            "runtime": "python3.11", "env": {"KEEP": "1", "DROP": "2"}, "memory_mb": 128
        }))
        .unwrap();
        let patch = spec_patch(&current, &args(&["dir", "--memory", "128", "--timeout", "5"]));
        assert_eq!(json!(patch), json!({"timeout_sec": 5}));
        let patch = spec_patch(&current, &args(&["dir", "--env", "KEEP=1", "--env", "NEW=x=y"]));
        assert_eq!(json!(patch), json!({"env": {"DROP": null, "NEW": "x=y"}}));
        assert!(spec_patch(&current, &args(&["dir"])).is_empty());
        let patch = spec_patch(
            &current,
            &args(&["dir", "--network", "none", "--tmp", "32", "--expose-errors", "true"]),
        );
        assert_eq!(
            json!(patch),
            json!({"network": "none", "tmp_mb": 32, "expose_errors": true})
        );
        let patch = spec_patch(&current, &args(&["dir", "--network", "internet", "--tmp", "64"]));
        assert!(patch.is_empty(), "{patch:?}");
    }

    #[test]
    fn secret_and_async_flags_patch_their_fields() {
        let current = serde_json::from_value(json!({
            "runtime": "python3.11",
            "env_from_secrets": [{"secret": "db", "key": "password", "env": "DB_PASSWORD"}],
            "async": {"retry_limit": 1, "on_failure": {"type": "function", "function": "dlq"}}
        }))
        .unwrap();
        let same = ["dir", "--secret-env", "DB_PASSWORD=db/password", "--async-retries", "1"];
        assert!(spec_patch(&current, &args(&same)).is_empty());
        let patch = spec_patch(
            &current,
            &args(&[
                "dir",
                "--secret-env",
                "TOKEN=api/token",
                "--secret-files",
                "tls",
                "--async-max-age",
                "600",
                "--on-failure",
                "none",
                "--on-success",
                "amqp:done@amqp://guest:guest@127.0.0.1:5672/%2f",
            ]),
        );
        assert_eq!(
            json!(patch),
            json!({
                "env_from_secrets": [{"secret": "api", "key": "token", "env": "TOKEN"}],
                "secret_files": [{"secret": "tls"}],
                "async": {
                    "max_event_age_sec": 600,
                    "on_failure": null,
                    "on_success": {"type": "amqp", "broker_url": "amqp://guest:guest@127.0.0.1:5672/%2f", "queue": "done"}
                }
            })
        );
    }

    #[test]
    fn malformed_secret_and_destination_flags_say_the_form() {
        let parse = |argv: &[&str]| {
            Cmd::try_parse_from(std::iter::once("deploy").chain(argv.iter().copied()))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(parse(&["dir", "--secret-env", "DB_PASSWORD"]).contains("ENV=SECRET/KEY"));
        assert!(parse(&["dir", "--on-failure", "queue:x"]).contains("function:NAME, amqp:QUEUE@BROKER_URL or none"));
        assert!(parse(&["dir", "--on-failure", "amqp:x"]).contains("@"));
    }

    #[test]
    fn clear_empties_the_lists_it_names() {
        let current = serde_json::from_value(json!({
            "runtime": "python3.11", "env": {"A": "1"},
            "env_from_secrets": [{"secret": "db", "key": "password", "env": "DB_PASSWORD"}],
        }))
        .unwrap();
        let patch = spec_patch(
            &current,
            &args(&[
                "dir",
                "--clear",
                "env",
                "--clear",
                "secret-env",
                "--clear",
                "secret-files",
            ]),
        );
        assert_eq!(
            json!(patch),
            json!({"env": null, "env_from_secrets": null}),
            "secret_files held none"
        );
        let both = args(&["dir", "--env", "A=2", "--clear", "env"])
            .check()
            .unwrap_err()
            .to_string();
        assert!(both.contains("--env and --clear env together"), "{both}");
        assert!(args(&["dir", "--secret-env", "X=s/k", "--clear", "env"])
            .check()
            .is_ok());
    }
}
