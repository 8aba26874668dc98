//! `sless trigger create|ls|get|rm|enable|disable`: what fires functions
//! besides a direct call (http routes, cron schedules, RabbitMQ queues).

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::Value;
use sless_api::{Trigger, TriggerCreate, TriggerSpec, TriggerType};

use super::context::ConnArgs;
use super::output::{age, compact, or_dash, print_json, say, time, Details, OutputFormat, Table};

#[derive(Subcommand)]
pub enum TriggerCommand {
    /// Create a trigger.
    Create(CreateArgs),
    /// List the triggers of a namespace.
    #[command(visible_alias = "list")]
    Ls,
    /// Show one trigger.
    Get(Named),
    /// Delete a trigger.
    #[command(visible_alias = "delete")]
    Rm(Named),
    /// Let a trigger fire its function again.
    Enable(Named),
    /// Stop a trigger firing (changed in place; the trigger stays).
    Disable(Named),
}

#[derive(Args)]
pub struct Named {
    /// Trigger name.
    #[arg(value_parser = super::names::trigger)]
    pub name: String,
}

#[derive(Args)]
pub struct CreateArgs {
    /// Trigger name.
    #[arg(value_parser = super::names::trigger)]
    pub name: String,
    /// The function it fires.
    #[arg(long, value_parser = super::names::function)]
    pub function: String,
    /// What fires it.
    #[arg(long = "type", value_enum)]
    pub kind: KindArg,
    /// cron: 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first, e.g. "*/5 * * * *".
    #[arg(long)]
    pub schedule: Option<String>,
    /// cron: IANA time zone of the schedule [server default: UTC].
    #[arg(long)]
    pub timezone: Option<String>,
    /// cron: the JSON event passed to the handler.
    #[arg(long, value_name = "JSON")]
    pub event: Option<String>,
    /// amqp: broker URL, e.g. amqp://guest:guest@127.0.0.1:5672/%2f.
    #[arg(long)]
    pub broker_url: Option<String>,
    /// amqp: queue to consume.
    #[arg(long)]
    pub queue: Option<String>,
    /// amqp: messages in flight at once.
    #[arg(long)]
    pub prefetch: Option<u16>,
    /// amqp: retries before a message is dead-lettered.
    #[arg(long)]
    pub retry_limit: Option<u32>,
    /// amqp: queue for messages whose retries ran out.
    #[arg(long)]
    pub dead_letter_queue: Option<String>,
    /// Create it switched off.
    #[arg(long)]
    pub disabled: bool,
}

/// `--type` values.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum KindArg {
    Http,
    Cron,
    Amqp,
}

impl From<KindArg> for TriggerType {
    fn from(kind: KindArg) -> TriggerType {
        match kind {
            KindArg::Http => TriggerType::Http,
            KindArg::Cron => TriggerType::Cron,
            KindArg::Amqp => TriggerType::Amqp,
        }
    }
}

pub async fn run(command: TriggerCommand, conn: &ConnArgs) -> anyhow::Result<()> {
    match command {
        TriggerCommand::Create(args) => create(args, conn).await,
        TriggerCommand::Ls => list(conn).await,
        TriggerCommand::Get(args) => {
            let cx = conn.context()?;
            let trigger = cx.client.get_trigger(&cx.namespace, &args.name).await?;
            show(cx.output, &trigger)
        }
        TriggerCommand::Rm(args) => {
            let cx = conn.context()?;
            cx.client.delete_trigger(&cx.namespace, &args.name).await?;
            if cx.output == OutputFormat::Table {
                say(format_args!("trigger {} deleted", args.name))?;
            }
            Ok(())
        }
        TriggerCommand::Enable(args) => set_enabled(args, conn, true).await,
        TriggerCommand::Disable(args) => set_enabled(args, conn, false).await,
    }
}

async fn create(args: CreateArgs, conn: &ConnArgs) -> anyhow::Result<()> {
    let cx = conn.context()?;
    let event = match &args.event {
        Some(text) => Some(serde_json::from_str::<Value>(text).context("--event must be JSON, e.g. '{\"a\": 1}'")?),
        None => None,
    };
    let create = TriggerCreate {
        name: args.name.clone(),
        spec: TriggerSpec {
            function: args.function.clone(),
            kind: args.kind.into(),
            enabled: !args.disabled,
            schedule: args.schedule.clone(),
            timezone: args.timezone.clone(),
            event,
            broker_url: args.broker_url.clone(),
            queue: args.queue.clone(),
            prefetch: args.prefetch,
            retry_limit: args.retry_limit,
            dead_letter_queue: args.dead_letter_queue.clone(),
        },
    };
    let trigger = cx.client.create_trigger(&cx.namespace, &create).await?;
    show(cx.output, &trigger)
}

async fn list(conn: &ConnArgs) -> anyhow::Result<()> {
    let cx = conn.context()?;
    let triggers = cx.client.list_triggers(&cx.namespace).await?;
    if cx.output == OutputFormat::Json {
        return print_json(&triggers);
    }
    if triggers.is_empty() {
        eprintln!("no triggers in namespace {}", cx.namespace);
        return Ok(());
    }
    let mut table = Table::new(&[
        "NAME",
        "TYPE",
        "FUNCTION",
        "ENABLED",
        "SOURCE",
        "FIRED",
        "LAST FIRED",
        "AGE",
    ]);
    for t in &triggers {
        table.row(vec![
            t.name.clone(),
            t.spec.kind.as_str().into(),
            t.spec.function.clone(),
            t.spec.enabled.to_string(),
            source(t),
            or_dash(t.status.fired),
            time(t.status.last_fired_at),
            age(t.created_at),
        ]);
    }
    table.print()
}

async fn set_enabled(args: Named, conn: &ConnArgs, enabled: bool) -> anyhow::Result<()> {
    let cx = conn.context()?;
    let trigger = cx
        .client
        .set_trigger_enabled(&cx.namespace, &args.name, enabled)
        .await?;
    match cx.output {
        OutputFormat::Json => print_json(&trigger),
        OutputFormat::Table => {
            let state = if trigger.spec.enabled { "enabled" } else { "disabled" };
            say(format_args!("trigger {} {state}", trigger.name))
        }
    }
}

/// Where the trigger's work comes from, in one cell.
fn source(t: &Trigger) -> String {
    match t.spec.kind {
        TriggerType::Http => or_dash(t.status.url.as_ref()),
        TriggerType::Cron => format!(
            "{} {}",
            t.spec.schedule.as_deref().unwrap_or("-"),
            t.spec.timezone.as_deref().unwrap_or("UTC")
        ),
        TriggerType::Amqp => or_dash(t.spec.queue.as_ref()),
    }
}

/// `amqp://user:***@host/vhost`: the password stays off the screen.
/// The queue failed messages go to: the one given, else the server's
/// default, `{queue}.dead`.
fn dead_letters(given: Option<&str>, queue: Option<&str>) -> String {
    match (given, queue) {
        (Some(dead), _) => dead.to_string(),
        (None, Some(queue)) => format!("{queue}.dead"),
        (None, None) => "-".to_string(),
    }
}

fn hide_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((credentials, host)) = rest.rsplit_once('@') else {
        return url.to_string();
    };
    match credentials.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

fn show(output: OutputFormat, t: &Trigger) -> anyhow::Result<()> {
    if output == OutputFormat::Json {
        return print_json(t);
    }
    let spec = &t.spec;
    let mut d = Details::default();
    d.field("name", &t.name)
        .field("namespace", &t.namespace)
        .field("type", spec.kind.as_str())
        .field("function", &spec.function)
        .field("enabled", spec.enabled);
    match spec.kind {
        TriggerType::Http => {
            d.field("url", or_dash(t.status.url.as_ref()));
        }
        TriggerType::Cron => {
            d.field("schedule", or_dash(spec.schedule.as_ref()))
                .field("timezone", spec.timezone.as_deref().unwrap_or("UTC"))
                .field("event", or_dash(spec.event.as_ref().map(compact)))
                .field(
                    "next fire",
                    if spec.enabled {
                        time(t.status.next_fire_at)
                    } else {
                        "- (disabled)".to_string()
                    },
                );
        }
        TriggerType::Amqp => {
            d.field("broker", or_dash(spec.broker_url.as_deref().map(hide_password)))
                .field("queue", or_dash(spec.queue.as_ref()))
                .field("prefetch", or_dash(spec.prefetch))
                .field("retry limit", or_dash(spec.retry_limit))
                .field(
                    "dead letters",
                    dead_letters(spec.dead_letter_queue.as_deref(), spec.queue.as_deref()),
                );
        }
    }
    if let Some(fired) = t.status.fired {
        d.field("fired", fired);
    }
    d.field("last fired", time(t.status.last_fired_at))
        .field("last error", or_dash(t.status.last_error.as_ref()))
        .field("created", time(Some(t.created_at)));
    d.print()
}

#[cfg(test)]
mod tests {
    use super::{dead_letters, hide_password};

    #[test]
    fn dead_letters_name_the_server_s_default_queue() {
        assert_eq!(dead_letters(Some("failed"), Some("orders")), "failed");
        assert_eq!(dead_letters(None, Some("orders")), "orders.dead");
        assert_eq!(dead_letters(None, None), "-");
    }

    #[test]
    fn broker_passwords_are_hidden() {
        assert_eq!(
            hide_password("amqp://guest:secret@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert_eq!(hide_password("amqp://host/"), "amqp://host/");
    }
}
