//! `sless ls`, `sless get NAME`, `sless rm NAME`: functions as tables, details
//! or JSON.

use clap::Args;
use sless_api::Function;

use super::context::ConnArgs;
use super::output::{age, first_line, or_dash, print_json, time, Details, OutputFormat, Table};

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Args)]
pub struct GetArgs {
    /// Function name.
    pub name: String,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Args)]
pub struct RemoveArgs {
    /// Function name.
    pub name: String,
    #[command(flatten)]
    pub conn: ConnArgs,
}

pub async fn list(args: ListArgs) -> anyhow::Result<()> {
    let cx = args.conn.context()?;
    let functions = cx.client.list_functions(&cx.namespace).await?;
    if cx.output == OutputFormat::Json {
        return print_json(&functions);
    }
    let mut table = Table::new(&["NAME", "RUNTIME", "PHASE", "VERSION", "AGE", "URL"]);
    for f in &functions {
        table.row(vec![
            f.name.clone(),
            f.spec.runtime.to_string(),
            format!("{:?}", f.status.phase),
            f.status.version.to_string(),
            age(f.created_at),
            or_dash(f.status.url.as_ref()),
        ]);
    }
    if functions.is_empty() {
        eprintln!("no functions in namespace {}", cx.namespace);
    } else {
        table.print();
    }
    Ok(())
}

pub async fn get(args: GetArgs) -> anyhow::Result<()> {
    let cx = args.conn.context()?;
    let function = cx.client.get_function(&cx.namespace, &args.name).await?;
    match cx.output {
        OutputFormat::Json => print_json(&function),
        OutputFormat::Table => {
            details(&function).print();
            Ok(())
        }
    }
}

pub async fn remove(args: RemoveArgs) -> anyhow::Result<()> {
    let cx = args.conn.context()?;
    cx.client.delete_function(&cx.namespace, &args.name).await?;
    if cx.output == OutputFormat::Table {
        println!("function {} deleted", args.name);
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
        .field("scaling", scaling)
        .field("env", if env.is_empty() { "-".into() } else { env })
        .field("phase", format!("{:?}", status.phase))
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

/// One line about a function's state, for progress displays.
pub fn phase_line(f: &Function) -> String {
    let message = first_line(&f.status.message, 80);
    if message.is_empty() {
        format!("{:?}", f.status.phase)
    } else {
        format!("{:?}: {message}", f.status.phase)
    }
}
