//! `sless invoke NAME`: one call through the public gateway. The answer's
//! body goes to stdout as is; a status of 400 or more is a failure. With
//! `--async` the call is stored and delivered later: the event's id is
//! printed (`sless async NAME ID` shows what became of it).

use std::io::{IsTerminal, Read};

use anyhow::{bail, Context as _};
use clap::Args;
use serde_json::{json, Map, Value};
use sless_client::{InvokeRequest, InvokeResponse, Method};

use super::context::ConnArgs;
use super::output::{print_json, write_stdout, OutputFormat};

#[derive(Args)]
pub struct InvokeArgs {
    /// Function name; `NAME@VERSION` or `NAME@ALIAS` calls that version
    /// (`hello@7`) or what that alias points at (`hello@live`).
    #[arg(value_parser = super::names::invoked)]
    pub name: String,
    /// Request body: JSON or text, `@FILE` to read a file, `@-` for stdin.
    #[arg(short, long)]
    pub data: Option<String>,
    /// HTTP method [default: POST with --data, else GET].
    #[arg(short = 'X', long)]
    pub method: Option<String>,
    /// Path after the function's name, with an optional query: `/users/1?full=true`.
    #[arg(long, default_value = "")]
    pub path: String,
    /// Extra request header `Name: value` (repeatable).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
    /// Asynchronous call: stored at once (202) and delivered later with
    /// retries; prints the event's id.
    #[arg(long = "async")]
    pub asynchronous: bool,
}

fn parse_header(text: &str) -> Result<(String, String), String> {
    match text.split_once(':') {
        Some((name, value)) if !name.trim().is_empty() => Ok((name.trim().to_string(), value.trim().to_string())),
        _ => Err(format!("expected `Name: value`, got {text:?}")),
    }
}

pub async fn run(args: InvokeArgs, conn: &ConnArgs) -> anyhow::Result<()> {
    let cx = conn.context()?;
    let body = match &args.data {
        None => Vec::new(),
        Some(data) => read_data(data)?,
    };
    let method = match &args.method {
        Some(method) => Method::from_bytes(method.to_ascii_uppercase().as_bytes())
            .with_context(|| format!("{method:?} is not an HTTP method"))?,
        None if args.data.is_some() => Method::POST,
        None => Method::GET,
    };
    let mut headers = args.headers.clone();
    let has_content_type = headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("content-type"));
    if !body.is_empty() && !has_content_type {
        let kind = if serde_json::from_slice::<Value>(&body).is_ok() {
            "application/json"
        } else {
            "text/plain; charset=utf-8"
        };
        headers.push(("content-type".into(), kind.into()));
    }
    if args.asynchronous {
        headers.push(("x-sless-invocation-type".into(), "Event".into()));
    }
    let request = InvokeRequest {
        method,
        path: args.path.clone(),
        headers,
        body,
    };
    let response = cx.client.invoke(&cx.namespace, &args.name, request).await?;
    if args.asynchronous && response.status.as_u16() == 202 {
        let accepted: sless_client::api::AsyncAccepted =
            serde_json::from_slice(&response.body).context("the server's 202 is not an event record")?;
        return match cx.output {
            OutputFormat::Json => print_json(&accepted),
            OutputFormat::Table => {
                write_stdout(format!("{}\n", accepted.id).as_bytes())?;
                eprintln!(
                    "queued; see what became of it: sless async {} {}",
                    args.name, accepted.id
                );
                Ok(())
            }
        };
    }
    // sless's own error (no such function, version or alias, a limit, a
    // failed handler it hides) is said once, on stderr, as every command
    // says the server's errors; what a handler answered goes to stdout
    // whatever its status.
    let sless_error = if response.status.as_u16() >= 400 {
        response.sless_error()
    } else {
        None
    };
    match cx.output {
        OutputFormat::Json => print_json(&as_json(&response))?,
        OutputFormat::Table if sless_error.is_some() => {}
        OutputFormat::Table => {
            let terminal = std::io::stdout().is_terminal();
            if terminal {
                // What a handler answers is shown, not obeyed, on a terminal;
                // a pipe or a file gets the bytes as they are.
                let text = String::from_utf8_lossy(&response.body);
                write_stdout(super::output::printable(&text).as_bytes())?;
            } else {
                write_stdout(&response.body)?;
            }
            if terminal && !response.body.is_empty() && !response.body.ends_with(b"\n") {
                write_stdout(b"\n")?;
            }
        }
    }
    if response.status.as_u16() >= 400 {
        // `error: <message> (<status>)`, as for every other command, with
        // the call's request id (its invocation record's).
        let why = sless_error.unwrap_or_else(|| format!("{} answered with an error status", args.name));
        let request_id = response
            .request_id()
            .map(|id| format!(", request {id}"))
            .unwrap_or_default();
        bail!("{why} ({}{request_id})", response.status);
    }
    Ok(())
}

/// `--data`: the text itself, `@FILE`, or `@-` for stdin.
fn read_data(data: &str) -> anyhow::Result<Vec<u8>> {
    match data.strip_prefix('@') {
        Some("-") => {
            let mut bytes = Vec::new();
            std::io::stdin()
                .read_to_end(&mut bytes)
                .context("cannot read the body from stdin")?;
            Ok(bytes)
        }
        Some(path) => std::fs::read(path).with_context(|| format!("cannot read {path}")),
        None => Ok(data.as_bytes().to_vec()),
    }
}

/// `{"status", "headers", "body"}`, the body parsed when it is JSON.
fn as_json(response: &InvokeResponse) -> Value {
    let headers: Map<String, Value> = response
        .headers
        .iter()
        .map(|(name, value)| (name.to_string(), json!(String::from_utf8_lossy(value.as_bytes()))))
        .collect();
    let body = serde_json::from_slice::<Value>(&response.body)
        .unwrap_or_else(|_| json!(String::from_utf8_lossy(&response.body)));
    json!({
        "status": response.status.as_u16(),
        "headers": headers,
        "body": body,
    })
}
