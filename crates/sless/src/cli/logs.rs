//! `sless logs NAME [-f]` (what handlers printed) and `sless invocations
//! NAME` (one row per call).

use clap::Args;
use sless_client::api::InvocationPage;

use super::context::ConnArgs;
use super::output::{first_line, or_dash, print_json, printable, say, time, write_stdout, OutputFormat, Table};
use super::pages;

#[derive(Args)]
pub struct LogsArgs {
    /// Function name.
    #[arg(value_parser = super::names::function)]
    pub name: String,
    /// Keep printing new lines as handlers print them (until interrupted).
    #[arg(short, long)]
    pub follow: bool,
    /// Start with the last N lines (up to 10000).
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = tail)]
    pub tail: u32,
    /// Only lines of calls older than this invocation id (as a `more:`
    /// line gives it).
    #[arg(long, value_name = "ID", value_parser = super::names::before, conflicts_with = "follow")]
    pub before: Option<String>,
}

#[derive(Args)]
pub struct InvocationsArgs {
    /// Function name.
    #[arg(value_parser = super::names::function)]
    pub name: String,
    /// At most this many, newest first (up to 10000).
    #[arg(long, default_value_t = 20, value_parser = pages::limit)]
    pub limit: u32,
    /// Only invocations older than this id (the previous list's last).
    #[arg(long, value_name = "ID", value_parser = super::names::before)]
    pub before: Option<String>,
}

pub async fn logs(args: LogsArgs, conn: &ConnArgs) -> anyhow::Result<()> {
    let cx = conn.context()?;
    let json = cx.output == OutputFormat::Json;
    if !args.follow {
        let history = history(&cx, &args).await?;
        let text: String = history.newest_first.iter().rev().map(String::as_str).collect();
        if json {
            let lines: String = text.lines().map(|line| format!("{}\n", line_json(line))).collect();
            write_stdout(lines.as_bytes())?;
        } else {
            let mut text = printable(&text).into_owned();
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            write_stdout(text.as_bytes())?;
        }
        match history.next_before {
            Some(next) => eprintln!("{}", older_lines(&args, &next)),
            None if args.tail > 0 && history.lines >= args.tail as usize => {
                eprintln!("{}", more_logs(&args.name, args.tail))
            }
            None => {}
        }
        return Ok(());
    }
    let mut stream = cx
        .client
        .follow_logs(&cx.namespace, &args.name, Some(args.tail))
        .await?;
    if let Some(next) = &stream.next_before {
        eprintln!("{}", older_lines(&args, next));
    }
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

/// The most lines `sless logs` asks for: the server's bound on `tail`.
const MAX_TAIL: u32 = 10_000;

/// The most bytes of history `sless logs` gathers before it prints them
/// (oldest first, so all at once): sixteen of the server's answers at
/// their bound (4 MiB), where 10 000 lines of a few hundred bytes take a
/// few MiB.
const MAX_HISTORY_BYTES: usize = 64 << 20;

/// The most answers `sless logs` asks for: each looks through up to 200
/// calls, some of which may have printed nothing.
const MAX_HISTORY_ANSWERS: usize = 50;

/// The lines `sless logs` prints, gathered an answer at a time.
struct History {
    /// The answers' text, the newest lines first.
    newest_first: Vec<String>,
    lines: usize,
    /// Where older lines begin, when some are left.
    next_before: Option<String>,
}

/// The last `--tail` lines of calls older than `--before`: the server
/// answers a bounded part of them at a time (200 calls, 4 MiB), and says
/// where older ones begin; its answers are followed up to `--tail` lines,
/// [`MAX_HISTORY_BYTES`] or [`MAX_HISTORY_ANSWERS`], whichever comes first.
async fn history(cx: &super::context::Context, args: &LogsArgs) -> anyhow::Result<History> {
    let mut history = History {
        newest_first: Vec::new(),
        lines: 0,
        next_before: args.before.clone(),
    };
    let mut bytes = 0;
    loop {
        let left = args.tail.saturating_sub(history.lines as u32);
        let page = cx
            .client
            .logs(&cx.namespace, &args.name, Some(left), history.next_before.as_deref())
            .await?;
        history.lines += page.text.lines().count();
        bytes += page.text.len();
        history.newest_first.push(page.text);
        history.next_before = page.next_before;
        let enough = history.lines >= args.tail as usize
            || bytes >= MAX_HISTORY_BYTES
            || history.newest_first.len() >= MAX_HISTORY_ANSWERS;
        if history.next_before.is_none() || enough {
            return Ok(history);
        }
    }
}

/// What to say when older lines are left, and the command that prints them.
fn older_lines(args: &LogsArgs, next_before: &str) -> String {
    format!(
        "more: older lines are left: sless logs {} --tail {} --before {next_before}",
        args.name, args.tail
    )
}

/// `--tail`, checked as clap parses it.
fn tail(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(tail) if tail <= MAX_TAIL => Ok(tail),
        _ => Err(format!("expected a number from 0 to {MAX_TAIL}")),
    }
}

/// What to say when the logs filled `--tail` inside one call: older lines
/// may be left (the server does not say whether they are), and how to see
/// them.
fn more_logs(name: &str, tail: u32) -> String {
    if tail < MAX_TAIL {
        let more = tail.saturating_mul(10).min(MAX_TAIL);
        return format!("more: older lines may be left: sless logs {name} --tail {more}");
    }
    format!("more: older lines may be left past the {MAX_TAIL} `sless logs` prints; each call's output: sless invocations {name} -o json")
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
    let listed = pages::follow(args.limit, args.before.clone(), |before, limit| {
        let (client, namespace, name) = (&cx.client, &cx.namespace, &args.name);
        async move {
            let page = client
                .list_invocations(namespace, name, Some(limit), before.as_deref())
                .await?;
            Ok::<_, sless_client::Error>((page.items, page.next_before))
        }
    })
    .await?;
    let page = InvocationPage {
        items: listed.items,
        next_before: listed.next_before,
    };
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
