//! `sless async NAME [ID]`: the records of a function's asynchronous calls
//! (`sless invoke --async`): one event's state and attempts, or a list.

use clap::Args;

use super::context::ConnArgs;
use super::output::{first_line, or_dash, print_json, time, OutputFormat, Table};

#[derive(Args)]
pub struct AsyncArgs {
    /// Function name.
    #[arg(value_parser = super::names::function)]
    pub name: String,
    /// An event id (as `sless invoke --async` printed it): show that one.
    pub id: Option<String>,
    /// Only events in this state: queued, running, succeeded or failed.
    #[arg(long)]
    pub status: Option<String>,
    /// Events to list at most.
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
}

pub async fn run(args: AsyncArgs, conn: &ConnArgs) -> anyhow::Result<()> {
    let cx = conn.context()?;
    let items = match &args.id {
        Some(id) => vec![cx.client.get_async_invocation(&cx.namespace, &args.name, id).await?],
        None => {
            let page = cx
                .client
                .list_async_invocations(&cx.namespace, &args.name, args.status.as_deref(), Some(args.limit))
                .await?;
            if cx.output == OutputFormat::Json {
                return print_json(&page);
            }
            page.items
        }
    };
    if cx.output == OutputFormat::Json {
        return print_json(&items[0]);
    }
    if items.is_empty() {
        eprintln!("no asynchronous calls of {} yet", args.name);
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
    table.print()
}
