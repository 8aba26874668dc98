//! `sless deploy DIR`: zip the directory, create the function or update its
//! spec, upload the code, wait for the build and print the URL (or the
//! build log when it failed).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use clap::{Args, ValueEnum};
use serde_json::{json, Map, Value};
use sless_api::{Function, FunctionCreate, FunctionSpec, Network, Phase, Runtime};
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
    #[arg(long)]
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
    /// Return once the code is uploaded, without waiting for the build.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for the build [default: the function's build timeout + 60 s].
    #[arg(long, value_name = "SECONDS")]
    pub wait_timeout: Option<u64>,
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

pub async fn run(args: DeployArgs, conn: &ConnArgs) -> anyhow::Result<()> {
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
}
