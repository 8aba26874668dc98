//! The `sless` binary: `sless server` runs the platform; every other
//! subcommand is the command-line client (`cli`).

mod cli;
mod instance;

/// The gateway allocates per request (headers, frames, records); mimalloc
/// makes that markedly cheaper than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser)]
#[command(name = "sless", version, about = "Self-hosted Function-as-a-Service")]
struct Cli {
    /// The client's connection and output flags: global, so they go before
    /// or after the subcommand (`sless -n demo trigger ls`).
    #[command(flatten)]
    conn: cli::ConnArgs,
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the server's variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run the server (embedded default: SQLite and a local code directory under ./sless-data).
    Server(sless_server::Config),
    /// Run one function instance (inside a pod of the Kubernetes driver).
    #[command(hide = true)]
    Instance(instance::InstanceArgs),
    #[command(flatten)]
    Client(cli::Command),
}

fn main() -> anyhow::Result<()> {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let config = match cli.command {
        Command::Server(config) => config,
        Command::Instance(args) => std::process::exit(run_instance(args)),
        Command::Client(command) => std::process::exit(cli::main(command, cli.conn, Cli::command)),
    };
    if let Some(flag) = cli::ConnArgs::given_on_command_line(&matches) {
        Cli::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                format!("{flag} is a client flag; `sless server` does not take it (see `sless server --help`)"),
            )
            .exit();
    }
    // A descriptor the server inherited without close-on-exec (a shell's
    // `exec 9>file`, a supervisor's socket) would pass to every process it
    // starts: the zygotes, which run as root, and the builds, which run a
    // tenant's install scripts. None of them is the server's to hand on.
    // Still one thread here, as marking them all at once needs.
    close_fds::set_fds_cloexec(3, &[]);
    init_tracing();
    // One thread gets the current-thread scheduler: no wake-ups across
    // threads, and a woken task runs after those already ready, so the frames
    // queued for an instance in one pass over the ready connections leave in
    // one write.
    let runtime = match config.worker_threads() {
        1 => tokio::runtime::Builder::new_current_thread().enable_all().build()?,
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build()?,
    };
    runtime.block_on(sless_server::server::run(config))
}

fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SLESS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn")),
        )
        .with_writer(|| LossyStderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Stderr for the log, where a line that cannot be written (a full disk, a
/// closed pipe) is dropped: the server serves on without its log, and
/// writes again once there is room. With plain stderr, tracing reports the
/// failed write with `eprintln!`, which panics: the task that logged died,
/// and once that was the accept loop's, every request hung.
struct LossyStderr;

impl std::io::Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `sless instance`: its exit code (see `instance::serve`).
fn run_instance(args: instance::InstanceArgs) -> i32 {
    init_tracing();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("sless instance: {e}");
            return 1;
        }
    };
    match runtime.block_on(instance::run(args)) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("{e:#}");
            1
        }
    }
}
