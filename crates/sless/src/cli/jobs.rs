//! `sless job run|ls|get|rm`: a function run once with a JSON event. `run`
//! creates the job or raises its run_id, waits, and prints the result.

use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};
use sless_api::{Job, JobCreate, JobPhase, JobSpec};
use sless_client::Wait;

use super::context::{ConnArgs, Context};
use super::output::{age, compact, or_dash, print_json, say, time, Details, OutputFormat, Table};
use super::progress::Spinner;

#[derive(Subcommand)]
pub enum JobCommand {
    /// Run a job (creating it, or starting its next run), wait, print the result.
    Run(RunArgs),
    /// List the jobs of a namespace.
    #[command(visible_alias = "list")]
    Ls,
    /// Show one job and its latest run.
    Get(Named),
    /// Delete a job.
    #[command(visible_alias = "delete")]
    Rm(Named),
}

#[derive(Args)]
pub struct Named {
    /// Job name.
    #[arg(value_parser = super::names::job)]
    pub name: String,
}

#[derive(Args)]
pub struct RunArgs {
    /// Job name.
    #[arg(value_parser = super::names::job)]
    pub name: String,
    /// The function to run; needed to create the job [default: the job's].
    #[arg(long, value_parser = super::names::function)]
    pub function: Option<String>,
    /// The handler's event (JSON) [default: the job's, else {}].
    #[arg(long, value_name = "JSON")]
    pub event: Option<String>,
    /// Return once the run has started.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for the run [default: the job's wait timeout + the function's timeout + 60 s].
    #[arg(long, value_name = "SECONDS")]
    pub wait_timeout: Option<u64>,
}

pub async fn run(command: JobCommand, conn: &ConnArgs) -> anyhow::Result<()> {
    match command {
        JobCommand::Run(args) => run_job(args, conn).await,
        JobCommand::Ls => list(conn).await,
        JobCommand::Get(args) => {
            let cx = conn.context()?;
            let job = cx.client.get_job(&cx.namespace, &args.name).await?;
            match cx.output {
                OutputFormat::Json => print_json(&job),
                OutputFormat::Table => details(&job).print(),
            }
        }
        JobCommand::Rm(args) => {
            let cx = conn.context()?;
            cx.client.delete_job(&cx.namespace, &args.name).await?;
            if cx.output == OutputFormat::Table {
                say(format_args!("job {} deleted", args.name))?;
            }
            Ok(())
        }
    }
}

async fn run_job(args: RunArgs, conn: &ConnArgs) -> anyhow::Result<()> {
    let cx = conn.context()?;
    let event = match &args.event {
        Some(text) => Some(serde_json::from_str::<Value>(text).context("--event must be JSON, e.g. '{\"a\": 1}'")?),
        None => None,
    };
    let (job, run_id) = start_run(&cx, &args, event).await?;
    if args.no_wait {
        return match cx.output {
            OutputFormat::Json => print_json(&job),
            OutputFormat::Table => say(format_args!("job {} run {run_id} started", job.name)),
        };
    }
    let timeout = match args.wait_timeout {
        Some(secs) => secs,
        None => default_wait(&cx, &job).await,
    };
    let spinner = Spinner::start(format!("job {} run {run_id}", job.name));
    let done = cx
        .client
        .wait_for_job(
            &cx.namespace,
            &job.name,
            run_id,
            Wait::new(Duration::from_secs(timeout)),
            |j| spinner.set_message(format!("job {} run {run_id}: {:?}", j.name, j.status.phase)),
        )
        .await?;
    drop(spinner);
    match cx.output {
        OutputFormat::Json => print_json(&done)?,
        OutputFormat::Table => {
            if let Some(result) = &done.status.result {
                print_json(result)?;
            }
        }
    }
    match done.status.phase {
        JobPhase::Succeeded => Ok(()),
        JobPhase::Failed => Err(anyhow!(
            "job {} run {} failed: {}",
            done.name,
            done.status.run_id,
            done.status.error.as_deref().unwrap_or("no error message")
        )),
        other => bail!("job {} run {} ended {other:?}", done.name, done.status.run_id),
    }
}

/// Creates the job with run_id 1, or patches an existing one to its next
/// run_id (with the new function/event, if given). Returns the job and the
/// run to wait for.
async fn start_run(cx: &Context, args: &RunArgs, event: Option<Value>) -> anyhow::Result<(Job, u64)> {
    let ns = &cx.namespace;
    let existing = match cx.client.get_job(ns, &args.name).await {
        Ok(job) => Some(job),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e.into()),
    };
    if existing.is_none() {
        let function = args
            .function
            .clone()
            .ok_or_else(|| anyhow!("job {:?} does not exist yet: pass --function to create it", args.name))?;
        let mut spec = json!({ "function": function, "run_id": 1 });
        if let Some(event) = &event {
            spec["event"] = event.clone();
        }
        let create = JobCreate {
            name: args.name.clone(),
            spec: serde_json::from_value::<JobSpec>(spec)?,
        };
        match cx.client.create_job(ns, &create).await {
            Ok(job) => return Ok((job, 1)),
            Err(e) if !e.is_conflict() => return Err(e.into()),
            Err(_) => {} // created meanwhile: run it as an existing job
        }
    }
    let job = match existing {
        Some(job) => job,
        None => cx.client.get_job(ns, &args.name).await?,
    };
    let run_id = job.spec.run_id.max(job.status.run_id) + 1;
    let mut patch = Map::new();
    patch.insert("run_id".into(), json!(run_id));
    if let Some(function) = &args.function {
        if *function != job.spec.function {
            patch.insert("function".into(), json!(function));
        }
    }
    if let Some(event) = event {
        if event != job.spec.event {
            patch.insert("event".into(), merge_diff(&job.spec.event, &event));
        }
    }
    let job = cx.client.patch_job(ns, &args.name, &Value::Object(patch)).await?;
    Ok((job, run_id))
}

/// The JSON merge patch (RFC 7396) that turns `old` into `new`: objects
/// are patched key by key (removed keys become null), anything else is
/// replaced whole.
fn merge_diff(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = Map::new();
            for key in old.keys().filter(|k| !new.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            for (key, value) in new {
                match old.get(key) {
                    Some(before) if before == value => {}
                    Some(before) => {
                        patch.insert(key.clone(), merge_diff(before, value));
                    }
                    None => {
                        patch.insert(key.clone(), value.clone());
                    }
                }
            }
            Value::Object(patch)
        }
        _ => new.clone(),
    }
}

/// The job may wait for its function to be ready, then runs up to the
/// function's timeout.
async fn default_wait(cx: &Context, job: &Job) -> u64 {
    let function_timeout = cx
        .client
        .get_function(&cx.namespace, &job.spec.function)
        .await
        .map(|f| u64::from(f.spec.timeout_sec))
        .unwrap_or(3600);
    u64::from(job.spec.wait_timeout_sec) + function_timeout + 60
}

async fn list(conn: &ConnArgs) -> anyhow::Result<()> {
    let cx = conn.context()?;
    let jobs = cx.client.list_jobs(&cx.namespace).await?;
    if cx.output == OutputFormat::Json {
        return print_json(&jobs);
    }
    if jobs.is_empty() {
        eprintln!("no jobs in namespace {}", cx.namespace);
        return Ok(());
    }
    let mut table = Table::new(&["NAME", "FUNCTION", "PHASE", "RUN", "STARTED", "FINISHED", "AGE"]);
    for j in &jobs {
        table.row(vec![
            j.name.clone(),
            j.spec.function.clone(),
            format!("{:?}", j.status.phase),
            j.status.run_id.to_string(),
            time(j.status.started_at),
            time(j.status.finished_at),
            age(j.created_at),
        ]);
    }
    table.print()
}

fn details(j: &Job) -> Details {
    let mut d = Details::default();
    d.field("name", &j.name)
        .field("namespace", &j.namespace)
        .field("function", &j.spec.function)
        .field("event", compact(&j.spec.event))
        .field("run id", j.spec.run_id)
        .field("phase", format!("{:?}", j.status.phase))
        .field("last run", j.status.run_id)
        .field("started", time(j.status.started_at))
        .field("finished", time(j.status.finished_at))
        .field("result", or_dash(j.status.result.as_ref().map(compact)))
        .field("error", or_dash(j.status.error.as_ref()))
        .field("invocation", or_dash(j.status.invocation_id.as_ref()))
        .field("created", time(Some(j.created_at)));
    d
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::merge_diff;

    #[test]
    fn merge_diffs_replace_events_exactly() {
        let old = json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1]});
        let new = json!({"b": {"c": 2, "d": 4}, "e": [2], "f": "x"});
        assert_eq!(
            merge_diff(&old, &new),
            json!({"a": null, "b": {"d": 4}, "e": [2], "f": "x"})
        );
        assert_eq!(merge_diff(&old, &json!([1])), json!([1]));
    }
}
