//! The command-line client: every `sless` subcommand but `server`. Each
//! talks to a sless server through `sless_client::Client`; people get
//! tables, scripts get `--output json`, and any failure is a non-zero exit
//! with the server's message.

mod archive;
mod completions;
mod config;
mod context;
mod deploy;
mod functions;
mod invoke;
mod jobs;
mod login;
mod logs;
mod output;
mod progress;
mod triggers;

use clap::Subcommand;

/// The client's subcommands (flattened next to `server`).
#[derive(Subcommand)]
pub enum Command {
    /// Save a server URL, token and namespace for the other commands.
    Login(login::LoginArgs),
    /// Zip a directory and deploy it as a function; wait until it is Ready.
    Deploy(deploy::DeployArgs),
    /// List the functions of a namespace.
    #[command(visible_alias = "list")]
    Ls(functions::ListArgs),
    /// Show one function.
    Get(functions::GetArgs),
    /// Delete a function.
    #[command(visible_alias = "delete")]
    Rm(functions::RemoveArgs),
    /// Call a function through the public gateway and print its answer.
    Invoke(invoke::InvokeArgs),
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
    /// Print a shell completion script.
    Completions(completions::CompletionsArgs),
}

/// Runs `command` and returns the process exit code. `top` builds the whole
/// command tree (for completions).
pub fn main(command: Command, top: fn() -> clap::Command) -> i32 {
    if let Command::Completions(args) = &command {
        completions::print(args, top());
        return 0;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return 1;
        }
    };
    match runtime.block_on(run(command)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {}", output::printable(&format!("{e:#}")));
            1
        }
    }
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Login(args) => login::run(args).await,
        Command::Deploy(args) => deploy::run(args).await,
        Command::Ls(args) => functions::list(args).await,
        Command::Get(args) => functions::get(args).await,
        Command::Rm(args) => functions::remove(args).await,
        Command::Invoke(args) => invoke::run(args).await,
        Command::Logs(args) => logs::logs(args).await,
        Command::Invocations(args) => logs::invocations(args).await,
        Command::Trigger(command) => triggers::run(command).await,
        Command::Job(command) => jobs::run(command).await,
        Command::Completions(_) => unreachable!("handled before the runtime starts"),
    }
}
