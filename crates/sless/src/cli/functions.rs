//! `sless ls`, `sless get NAME`, `sless rm NAME`: functions as tables, details
//! or JSON.

use clap::Args;
use sless_api::{Function, Phase};

use super::context::ConnArgs;
use super::output::{age, first_line, or_dash, print_json, say, time, Details, OutputFormat, Table};

#[derive(Args)]
pub struct GetArgs {
    /// Function name.
    #[arg(value_parser = super::names::function)]
    pub name: String,
}

#[derive(Args)]
pub struct RemoveArgs {
    /// Function name.
    #[arg(value_parser = super::names::function)]
    pub name: String,
    /// Also delete the triggers and jobs that name the function (without
    /// it, a function they name is not deleted).
    #[arg(long)]
    pub cascade: bool,
}

pub async fn list(conn: &ConnArgs) -> anyhow::Result<()> {
    let cx = conn.context()?;
    let functions = cx.client.list_functions(&cx.namespace).await?;
    if cx.output == OutputFormat::Json {
        return print_json(&functions);
    }
    let mut table = Table::new(&["NAME", "RUNTIME", "PHASE", "VERSION", "AGE", "URL"]);
    for f in &functions {
        table.row(vec![
            f.name.clone(),
            f.spec.runtime.to_string(),
            match f.status.not_serving {
                Some(_) => format!("{:?} (not serving)", f.status.phase),
                None => format!("{:?}", f.status.phase),
            },
            f.status.version.to_string(),
            age(f.created_at),
            or_dash(f.status.url.as_ref()),
        ]);
    }
    if functions.is_empty() {
        eprintln!("no functions in namespace {}", cx.namespace);
    } else {
        table.print()?;
    }
    Ok(())
}

pub async fn get(args: GetArgs, conn: &ConnArgs) -> anyhow::Result<()> {
    let cx = conn.context()?;
    let function = cx.client.get_function(&cx.namespace, &args.name).await?;
    match cx.output {
        OutputFormat::Json => print_json(&function),
        OutputFormat::Table => details(&function).print(),
    }
}

pub async fn remove(args: RemoveArgs, conn: &ConnArgs) -> anyhow::Result<()> {
    let cx = conn.context()?;
    if args.cascade {
        cx.client.delete_function_cascade(&cx.namespace, &args.name).await?;
    } else {
        cx.client.delete_function(&cx.namespace, &args.name).await?;
    }
    if cx.output == OutputFormat::Table {
        say(format_args!("function {} deleted", args.name))?;
    }
    Ok(())
}

/// A function for people: spec, then status.
pub fn details(f: &Function) -> Details {
    let spec = &f.spec;
    let status = &f.status;
    let scaling = match spec.replicas {
        Some(n) => format!("{n} replicas (fixed)"),
        None => format!(
            "{}-{} instances, {} requests each",
            spec.min_instances, spec.max_instances, spec.concurrency
        ),
    };
    let env = spec
        .env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut d = Details::default();
    d.field("name", &f.name)
        .field("namespace", &f.namespace)
        .field("runtime", spec.runtime)
        .field("entrypoint", &spec.entrypoint)
        .field("memory", format!("{} MB", spec.memory_mb))
        .field("timeout", format!("{} s", spec.timeout_sec))
        .field("network", spec.network.as_str())
        .field("tmp", format!("{} MB", spec.tmp_mb))
        .field("scaling", scaling)
        .field("env", if env.is_empty() { "-".into() } else { env })
        .field("secrets", secrets(spec))
        .field("async", async_line(spec.async_settings.clone().unwrap_or_default()))
        .field("phase", phase(f))
        .field("version", status.version)
        .field("url", or_dash(status.url.as_ref()))
        .field("code hash", or_dash(status.code_hash.as_ref()))
        .field("last built", time(status.last_built_at))
        .field("validation", or_dash(status.validation.as_ref()))
        .field("created", time(Some(f.created_at)))
        .field(
            "message",
            if status.message.is_empty() {
                "-".to_string()
            } else {
                status.message.trim_end().to_string()
            },
        );
    d
}

/// The secrets a function takes: `ENV=SECRET/KEY` and `/secrets/SECRET`.
fn secrets(spec: &sless_api::FunctionSpec) -> String {
    let env = spec
        .env_from_secrets
        .iter()
        .map(|e| format!("{}={}/{}", e.env, e.secret, e.key));
    let files = spec.secret_files.iter().map(|f| format!("/secrets/{}", f.secret));
    let all: Vec<String> = env.chain(files).collect();
    if all.is_empty() {
        "-".into()
    } else {
        all.join("\n")
    }
}

/// Asynchronous delivery in one line.
fn async_line(settings: sless_api::AsyncSettings) -> String {
    let place = |d: &Option<sless_api::Destination>| match d {
        None => "-".to_string(),
        Some(d) => match (&d.function, &d.queue) {
            (Some(function), _) => format!("function:{function}"),
            (None, Some(queue)) => format!("amqp:{queue}"),
            (None, None) => "-".to_string(),
        },
    };
    format!(
        "{} {}, events expire after {} s, on failure {}, on success {}",
        settings.retry_limit,
        if settings.retry_limit == 1 { "retry" } else { "retries" },
        settings.max_event_age_sec,
        place(&settings.on_failure),
        place(&settings.on_success)
    )
}

/// The phase, and next to it why the function does not serve (or which
/// version still serves after a failed update).
fn phase(f: &Function) -> String {
    let status = &f.status;
    match (&status.not_serving, status.phase) {
        (Some(why), phase) => format!("{phase:?} (not serving: {why})"),
        (None, Phase::Failed) => format!("Failed (version {} still serving)", status.version),
        (None, phase) => format!("{phase:?}"),
    }
}

/// One line about a function's state, for progress displays.
pub fn phase_line(f: &Function) -> String {
    let message = first_line(&f.status.message, 80);
    if message.is_empty() {
        format!("{:?}", f.status.phase)
    } else {
        format!("{:?}: {message}", f.status.phase)
    }
}
