//! `sless async NAME [ID]`: the records of a function's asynchronous calls
//! (`sless invoke --async`): one event's state and attempts, or a list.

use clap::Args;
use sless_client::api::AsyncInvocationPage;

use super::context::ConnArgs;
use super::output::{first_line, or_dash, print_json, time, OutputFormat, Table};
use super::pages;

#[derive(Args)]
pub struct AsyncArgs {
    /// Function name.
    #[arg(value_parser = super::names::function)]
    pub name: String,
    /// An event id (as `sless invoke --async` printed it): show that one.
    #[arg(value_parser = super::names::event_id)]
    pub id: Option<String>,
    /// Only events in this state: queued, running, succeeded or failed.
    #[arg(long)]
    pub status: Option<String>,
    /// At most this many, newest first (up to 10000).
    #[arg(long, default_value_t = 20, value_parser = pages::limit)]
    pub limit: u32,
    /// Only events older than this id (the previous list's last).
    #[arg(long, value_name = "ID", value_parser = super::names::before)]
    pub before: Option<String>,
}

pub async fn run(args: AsyncArgs, conn: &ConnArgs) -> anyhow::Result<()> {
    let cx = conn.context()?;
    let (items, next_before) = match &args.id {
        Some(id) => {
            let event = cx.client.get_async_invocation(&cx.namespace, &args.name, id).await?;
            if cx.output == OutputFormat::Json {
                return print_json(&event);
            }
            (vec![event], None)
        }
        None => {
            let listed = pages::follow(args.limit, args.before.clone(), |before, limit| {
                let (client, namespace, name, status) = (&cx.client, &cx.namespace, &args.name, args.status.as_deref());
                async move {
                    let page = client
                        .list_async_invocations(namespace, name, status, Some(limit), before.as_deref())
                        .await?;
                    Ok::<_, sless_client::Error>((page.items, page.next_before))
                }
            })
            .await?;
            if cx.output == OutputFormat::Json {
                return print_json(&AsyncInvocationPage {
                    items: listed.items,
                    next_before: listed.next_before,
                });
            }
            (listed.items, listed.next_before)
        }
    };
    if items.is_empty() {
        match &args.before {
            Some(before) => eprintln!("no asynchronous calls of {} older than {before}", args.name),
            None => eprintln!("no asynchronous calls of {} yet", args.name),
        }
        return Ok(());
    }
    let mut table = Table::new(&["ID", "CREATED", "STATUS", "ATTEMPTS", "SUCCEEDED", "NEXT", "ERROR"]);
    for e in &items {
        table.row(vec![
            e.id.clone(),
            time(Some(e.created_at)),
            e.status.as_str().to_string(),
            e.attempts.to_string(),
            or_dash(e.succeeded_attempt),
            time(e.next_attempt_at),
            or_dash(
                e.last_error
                    .as_deref()
                    .or(e.destination_error.as_deref())
                    .map(|text| first_line(text, 60)),
            ),
        ]);
    }
    table.print()?;
    if let Some(next) = next_before {
        let status = match &args.status {
            Some(status) => format!(" --status {status}"),
            None => String::new(),
        };
        eprintln!(
            "more: sless async {}{status} --limit {} --before {next}",
            args.name, args.limit
        );
    }
    Ok(())
}
