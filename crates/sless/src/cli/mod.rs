//! The command-line client: every `sless` subcommand but `server`. Each
//! talks to a sless server through `sless_client::Client`; people get
//! tables, scripts get `--output json`, and any failure is a non-zero exit
//! with the server's message.

mod archive;
mod async_calls;
mod completions;
mod config;
mod context;
mod deploy;
mod functions;
mod invoke;
mod jobs;
mod login;
mod logs;
mod names;
mod output;
mod pages;
mod progress;
mod secrets;
mod triggers;
mod versions;

use clap::Subcommand;

pub use context::ConnArgs;

/// The client's subcommands (flattened next to `server`).
#[derive(Subcommand)]
pub enum Command {
    /// Save a server URL, token and namespace for the other commands.
    Login(login::LoginArgs),
    /// Zip a directory and deploy it as a function; wait until it is Ready.
    Deploy(deploy::DeployArgs),
    /// List the functions of a namespace.
    #[command(visible_alias = "list")]
    Ls,
    /// Show one function.
    Get(functions::GetArgs),
    /// Delete a function (refused while triggers or jobs name it, unless --cascade).
    #[command(visible_alias = "delete")]
    Rm(functions::RemoveArgs),
    /// Call a function through the public gateway and print its answer.
    Invoke(invoke::InvokeArgs),
    /// Show a function's asynchronous calls (`invoke --async`), or one by id.
    Async(async_calls::AsyncArgs),
    /// Print (or follow) what a function's handlers printed.
    Logs(logs::LogsArgs),
    /// List a function's recent invocations, newest first.
    Invocations(logs::InvocationsArgs),
    /// Manage triggers (http, cron, amqp).
    #[command(subcommand)]
    Trigger(triggers::TriggerCommand),
    /// Run functions once with an event, and manage those jobs.
    #[command(subcommand)]
    Job(jobs::JobCommand),
    /// List a function's built versions (call one with `sless invoke NAME@VERSION`, or `/fn/{ns}/{name}@{version}`), or delete one (`--rm N`).
    Versions(versions::ListArgs),
    /// Point aliases at versions (call one with `sless invoke NAME@ALIAS`, or `/fn/{ns}/{name}@{alias}`), with an optional canary.
    #[command(subcommand)]
    Alias(versions::AliasCommand),
    /// Manage secrets (env_from_secrets, secret_files): values go in, never out.
    #[command(subcommand)]
    Secret(secrets::SecretCommand),
    /// Print a shell completion script.
    Completions(completions::CompletionsArgs),
}

/// Runs `command` with the connection flags `conn` (given before or after
/// the subcommand) and returns the process exit code. `top` builds the
/// command tree completion scripts offer.
pub fn main(command: Command, conn: ConnArgs, top: fn() -> clap::Command) -> i32 {
    let result = match &command {
        Command::Completions(args) => completions::print(args, top()),
        _ => match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime.block_on(run(command, &conn)),
            Err(e) => Err(anyhow::Error::new(e).context("cannot start the async runtime")),
        },
    };
    match result {
        Ok(()) => 0,
        // The reader of our stdout is gone (`| head`): nothing to say to it.
        Err(e) if e.is::<output::StdoutClosed>() => 0,
        Err(e) => {
            eprintln!("error: {}", output::printable(&format!("{e:#}")));
            if let Some(hint) = unreachable_hint(&e) {
                eprintln!("hint: {hint}");
            }
            1
        }
    }
}

/// For a server that could not be reached at all: where the CLI looked and
/// how to point it elsewhere.
fn unreachable_hint(e: &anyhow::Error) -> Option<String> {
    let endpoint = e
        .chain()
        .find_map(|cause| cause.downcast_ref::<sless_client::Error>()?.unreachable_server())?;
    Some(format!(
        "is `sless server` running at {endpoint}? To use another server, run `sless login URL` (or pass --endpoint)"
    ))
}

async fn run(command: Command, conn: &ConnArgs) -> anyhow::Result<()> {
    match command {
        Command::Login(args) => login::run(args, conn).await,
        Command::Deploy(args) => deploy::run(args, conn).await,
        Command::Ls => functions::list(conn).await,
        Command::Get(args) => functions::get(args, conn).await,
        Command::Rm(args) => functions::remove(args, conn).await,
        Command::Invoke(args) => invoke::run(args, conn).await,
        Command::Async(args) => async_calls::run(args, conn).await,
        Command::Logs(args) => logs::logs(args, conn).await,
        Command::Invocations(args) => logs::invocations(args, conn).await,
        Command::Trigger(command) => triggers::run(command, conn).await,
        Command::Job(command) => jobs::run(command, conn).await,
        Command::Versions(args) => versions::list(args, conn).await,
        Command::Alias(command) => versions::run(command, conn).await,
        Command::Secret(command) => secrets::run(command, conn).await,
        Command::Completions(_) => unreachable!("handled before the runtime starts"),
    }
}
