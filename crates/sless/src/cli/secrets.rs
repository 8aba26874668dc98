//! `sless secret create|set|ls|get|rm`: namespace secrets that functions
//! take as environment variables (`env_from_secrets`) or files under
//! `/secrets` (`secret_files`). Values come from a flag, a file or stdin;
//! the server never gives them back, so nothing here prints one.

use std::collections::BTreeMap;
use std::io::Read as _;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use sless_api::{Secret, SecretCreate, SecretPatch};

use super::context::ConnArgs;
use super::output::{age, print_json, say, time, Details, OutputFormat, Table};

#[derive(Subcommand)]
pub enum SecretCommand {
    /// Create a secret from values given as flags, files or stdin.
    Create(ValuesArgs),
    /// Set (or, with --remove, drop) keys of a secret; functions that use it roll.
    Set(SetArgs),
    /// List the secrets of a namespace (names and keys, never values).
    #[command(visible_alias = "list")]
    Ls,
    /// Show one secret's keys and when it changed.
    Get(Named),
    /// Delete a secret (refused while a function uses it).
    #[command(visible_alias = "delete")]
    Rm(Named),
}

#[derive(Args)]
pub struct Named {
    /// Secret name.
    #[arg(value_parser = super::names::secret)]
    pub name: String,
}

#[derive(Args)]
pub struct ValuesArgs {
    /// Secret name.
    #[arg(value_parser = super::names::secret)]
    pub name: String,
    /// A key and its value, e.g. `--literal user=app` (the value is visible
    /// to other users of this machine in the process list: prefer
    /// --from-file or --from-stdin for anything sensitive).
    #[arg(long = "literal", value_name = "KEY=VALUE")]
    pub literals: Vec<String>,
    /// A key and the file holding its value, e.g. `--from-file tls.key=./key.pem`.
    #[arg(long = "from-file", value_name = "KEY=PATH")]
    pub files: Vec<String>,
    /// A key whose value is read from stdin (one final newline is dropped).
    #[arg(long = "from-stdin", value_name = "KEY")]
    pub stdin: Option<String>,
}

#[derive(Args)]
pub struct SetArgs {
    #[command(flatten)]
    pub values: ValuesArgs,
    /// Keys to remove.
    #[arg(long = "remove", value_name = "KEY")]
    pub remove: Vec<String>,
}

pub async fn run(command: SecretCommand, conn: &ConnArgs) -> anyhow::Result<()> {
    let cx = conn.context()?;
    match command {
        SecretCommand::Create(args) => {
            let data = values(&args)?;
            let secret = cx
                .client
                .create_secret(&cx.namespace, &SecretCreate { name: args.name, data })
                .await?;
            show(cx.output, &secret)
        }
        SecretCommand::Set(args) => {
            let mut data: BTreeMap<String, Option<String>> =
                values(&args.values)?.into_iter().map(|(k, v)| (k, Some(v))).collect();
            for key in args.remove {
                data.insert(key, None);
            }
            anyhow::ensure!(
                !data.is_empty(),
                "nothing to change: give --literal, --from-file, --from-stdin or --remove"
            );
            let secret = cx
                .client
                .patch_secret(&cx.namespace, &args.values.name, &SecretPatch { data })
                .await?;
            show(cx.output, &secret)
        }
        SecretCommand::Ls => {
            let secrets = cx.client.list_secrets(&cx.namespace).await?;
            if cx.output == OutputFormat::Json {
                return print_json(&secrets);
            }
            if secrets.is_empty() {
                eprintln!("no secrets in namespace {}", cx.namespace);
                return Ok(());
            }
            let mut table = Table::new(&["NAME", "KEYS", "CHANGED"]);
            for s in &secrets {
                table.row(vec![s.name.clone(), s.keys.join(","), age(s.updated_at)]);
            }
            table.print()
        }
        SecretCommand::Get(args) => {
            let secret = cx.client.get_secret(&cx.namespace, &args.name).await?;
            show(cx.output, &secret)
        }
        SecretCommand::Rm(args) => {
            cx.client.delete_secret(&cx.namespace, &args.name).await?;
            if cx.output == OutputFormat::Table {
                say(format_args!("secret {} deleted", args.name))?;
            }
            Ok(())
        }
    }
}

/// The values the flags name, read from where they say.
fn values(args: &ValuesArgs) -> anyhow::Result<BTreeMap<String, String>> {
    let mut data = BTreeMap::new();
    let mut put = |key: &str, value: String| -> anyhow::Result<()> {
        anyhow::ensure!(!key.is_empty(), "a key must not be empty");
        anyhow::ensure!(
            data.insert(key.to_string(), value).is_none(),
            "key {key:?} is given twice"
        );
        Ok(())
    };
    for literal in &args.literals {
        let (key, value) = literal.split_once('=').context("--literal takes KEY=VALUE")?;
        put(key, value.to_string())?;
    }
    for file in &args.files {
        let (key, path) = file.split_once('=').context("--from-file takes KEY=PATH")?;
        let bytes = std::fs::read(path).with_context(|| format!("reading {path}"))?;
        let text = String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("{path} is not UTF-8 text"))?;
        put(key, text)?;
    }
    if let Some(key) = &args.stdin {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the value from stdin (it must be UTF-8 text)")?;
        if text.ends_with('\n') {
            text.pop();
            if text.ends_with('\r') {
                text.pop();
            }
        }
        put(key, text)?;
    }
    Ok(data)
}

fn show(output: OutputFormat, secret: &Secret) -> anyhow::Result<()> {
    if output == OutputFormat::Json {
        return print_json(secret);
    }
    let mut d = Details::default();
    d.field("name", &secret.name)
        .field("namespace", &secret.namespace)
        .field("keys", secret.keys.join(","))
        .field("created", time(Some(secret.created_at)))
        .field("changed", time(Some(secret.updated_at)));
    d.print()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_files_make_the_values() {
        let dir = std::env::temp_dir().join(format!("sless-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pem");
        std::fs::write(&file, "line\n").unwrap();
        let args = ValuesArgs {
            name: "db".into(),
            literals: vec!["user=app=1".into()],
            files: vec![format!("pem={}", file.display())],
            stdin: None,
        };
        let data = values(&args).unwrap();
        assert_eq!(data["user"], "app=1");
        assert_eq!(data["pem"], "line\n");
        let twice = ValuesArgs {
            literals: vec!["a=1".into(), "a=2".into()],
            ..args
        };
        assert!(values(&twice).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
