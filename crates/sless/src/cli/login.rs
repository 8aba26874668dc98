//! `sless login`: checks a server URL and token against the server, then
//! saves them (with the namespace) for the other commands.

use std::io::{BufRead, IsTerminal, Write};
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _};
use clap::Args;
use serde_json::json;
use sless_client::Client;

use super::config::SavedConfig;
use super::context::ConnArgs;
use super::output::{print_json, say, OutputFormat};

#[derive(Args)]
pub struct LoginArgs {
    /// Server URL, e.g. http://127.0.0.1:8080 [default: --endpoint, SLESS_ENDPOINT, the saved one].
    pub url: Option<String>,
}

pub async fn run(args: LoginArgs, conn: &ConnArgs) -> anyhow::Result<()> {
    let saved = SavedConfig::load()?;
    let Some(endpoint) = args
        .url
        .clone()
        .or_else(|| conn.endpoint.clone())
        .or_else(|| saved.endpoint.clone())
    else {
        bail!("which server? run `sless login URL`, e.g. `sless login http://127.0.0.1:8080`");
    };
    if let Some(namespace) = &conn.namespace {
        conn.check_namespace(namespace)?;
    }
    let token = match &conn.token {
        Some(token) => token.clone(),
        None => read_token()?,
    };
    if token.is_empty() {
        bail!("no token given: pass --token, set SLESS_TOKEN, or type it when asked");
    }
    let client = Client::new(&endpoint, token.clone())?;
    let namespace = match &conn.namespace {
        Some(namespace) => namespace.clone(),
        None => default_namespace(&client, &endpoint, conn.namespace_or(&saved)).await?,
    };
    client
        .list_functions(&namespace)
        .await
        .with_context(|| format!("login to {endpoint} (namespace {namespace:?}) failed"))?;
    let path = SavedConfig {
        endpoint: Some(endpoint.clone()),
        token: Some(token),
        namespace: Some(namespace.clone()),
    }
    .save()?;
    match conn.output {
        OutputFormat::Json => print_json(&json!({
            "endpoint": endpoint,
            "namespace": namespace,
            "config": path,
        }))?,
        OutputFormat::Table => say(format_args!(
            "Logged in to {endpoint} (namespace {namespace}); saved to {}",
            path.display()
        ))?,
    }
    Ok(())
}

/// The namespace to log in to when none was given: the saved one (or
/// `default`) when the token covers it, else the token's only namespace;
/// a token of several that cover neither has to be told which.
async fn default_namespace(client: &Client, endpoint: &str, fallback: String) -> anyhow::Result<String> {
    let who = client
        .whoami()
        .await
        .with_context(|| format!("login to {endpoint} failed"))?;
    if who.admin || who.namespaces.contains(&fallback) {
        return Ok(fallback);
    }
    match who.namespaces.as_slice() {
        [only] => Ok(only.clone()),
        many => bail!(
            "token {:?} covers the namespaces {}, not {fallback:?}: pick one with `-n NAMESPACE`",
            who.name,
            many.join(", ")
        ),
    }
}

/// Reads the token from stdin: asked for, without echo, on a terminal.
fn read_token() -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    let interactive = stdin.is_terminal();
    if interactive {
        eprint!("Token: ");
        std::io::stderr().flush()?;
        set_echo(false);
    }
    let mut line = String::new();
    let read = stdin.lock().read_line(&mut line);
    if interactive {
        set_echo(true);
        eprintln!();
    }
    read.context("cannot read the token from stdin")?;
    Ok(line.trim().to_string())
}

/// Best effort: `stty` on the terminal (no unsafe termios calls here).
fn set_echo(on: bool) {
    let _ = Command::new("stty")
        .arg(if on { "echo" } else { "-echo" })
        .stdin(Stdio::inherit())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
