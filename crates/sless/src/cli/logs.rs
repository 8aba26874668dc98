//! `sless logs NAME [-f]` (what handlers printed) and `sless invocations
//! NAME` (one row per call).

use clap::Args;

use super::context::ConnArgs;
use super::output::{first_line, or_dash, print_json, printable, say, time, write_stdout, OutputFormat, Table};

#[derive(Args)]
pub struct LogsArgs {
    /// Function name.
    #[arg(value_parser = super::names::function)]
    pub name: String,
    /// Keep printing new lines as handlers print them (until interrupted).
    #[arg(short, long)]
    pub follow: bool,
    /// Start with the last N lines [default: the server's].
    #[arg(long, value_name = "N")]
    pub tail: Option<u32>,
}

#[derive(Args)]
pub struct InvocationsArgs {
    /// Function name.
    #[arg(value_parser = super::names::function)]
    pub name: String,
    /// At most this many, newest first.
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    /// Only invocations older than this id (the previous page's last).
    #[arg(long, value_name = "ID")]
    pub before: Option<String>,
}

pub async fn logs(args: LogsArgs, conn: &ConnArgs) -> anyhow::Result<()> {
    let cx = conn.context()?;
    let json = cx.output == OutputFormat::Json;
    if !args.follow {
        let text = cx.client.logs(&cx.namespace, &args.name, args.tail).await?;
        if json {
            let lines: String = text.lines().map(|line| format!("{}\n", line_json(line))).collect();
            return write_stdout(lines.as_bytes());
        }
        let mut text = printable(&text).into_owned();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        return write_stdout(text.as_bytes());
    }
    let mut stream = cx.client.follow_logs(&cx.namespace, &args.name, args.tail).await?;
    while let Some(line) = stream.next_line().await? {
        // Each line flushed: a pipe reader wants it now, not at 8 KiB.
        if json {
            say(line_json(&line))?;
        } else {
            say(printable(&line))?;
        }
    }
    Ok(())
}

/// A log line (`{time} {request_id} {stream} {text}`) as one JSON object
/// (`-o json` prints one a line).
fn line_json(line: &str) -> serde_json::Value {
    let mut parts = line.splitn(4, ' ');
    let mut next = || parts.next().unwrap_or_default();
    let (time, request_id, stream, text) = (next(), next(), next(), next());
    serde_json::json!({"time": time, "request_id": request_id, "stream": stream, "text": text})
}

pub async fn invocations(args: InvocationsArgs, conn: &ConnArgs) -> anyhow::Result<()> {
    let cx = conn.context()?;
    let page = cx
        .client
        .list_invocations(&cx.namespace, &args.name, Some(args.limit), args.before.as_deref())
        .await?;
    if cx.output == OutputFormat::Json {
        return print_json(&page);
    }
    if page.items.is_empty() {
        eprintln!("no invocations of {} yet", args.name);
        return Ok(());
    }
    // ALIAS: the alias the call was addressed to (`NAME@ALIAS`), whose
    // VERSION served it; `-` for a plain or by-number call.
    let mut table = Table::new(&[
        "ID", "STARTED", "TRIGGER", "STATUS", "DURATION", "VERSION", "ALIAS", "COLD", "LOGS", "ERROR",
    ]);
    for i in &page.items {
        table.row(vec![
            i.id.clone(),
            time(Some(i.started_at)),
            i.trigger.clone(),
            i.status.clone(),
            format!("{:.1}ms", i.duration_ms),
            i.version.to_string(),
            or_dash(i.alias.as_ref()),
            if i.cold_start { "yes" } else { "no" }.into(),
            format!("{}{}", i.logs.len(), if i.logs_truncated { "+" } else { "" }),
            or_dash(i.error.as_deref().map(|e| first_line(e, 60))),
        ]);
    }
    table.print()?;
    if let Some(next) = &page.next_before {
        eprintln!(
            "more: sless invocations {} --limit {} --before {next}",
            args.name, args.limit
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::line_json;

    #[test]
    fn a_log_line_as_json_keeps_its_text_whole() {
        let line = "2026-12-07T12:00:00.000Z 0123abcd stdout hello  world {\"a\": 1}";
        assert_eq!(
            line_json(line),
            serde_json::json!({"time": "2026-12-07T12:00:00.000Z", "request_id": "0123abcd",
                "stream": "stdout", "text": "hello  world {\"a\": 1}"})
        );
    }
}
