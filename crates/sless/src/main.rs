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

/// The subcommands that are not the client: `server`, and `instance` (a
/// process in a sandbox or a pod, configured by its own flags).
const NOT_THE_CLIENT: [&str; 2] = ["server", "instance"];

/// The command tree `sless` parses: the client flags are global, but the
/// subcommands that are not the client take them only to refuse them
/// (`sless server --token x` is a mistake worth naming), hidden from their
/// help.
fn command() -> clap::Command {
    NOT_THE_CLIENT.into_iter().fold(Cli::command(), |command, name| {
        command.mut_subcommand(name, cli::ConnArgs::refused_by)
    })
}

/// Exits with a usage error when a client flag was typed for `server` or
/// `instance`: the error names the flag and the subcommand, under that
/// subcommand's usage.
fn refuse_client_flags(matches: &clap::ArgMatches) {
    let Some((name, given)) = matches.subcommand() else {
        return;
    };
    if !NOT_THE_CLIENT.contains(&name) {
        return;
    }
    if let Some(flag) = cli::ConnArgs::given_on_command_line(given) {
        // Built, so that the subcommand's usage reads `sless server ...`.
        let mut top = command();
        top.build();
        let subcommand = top.find_subcommand_mut(name).expect("a subcommand of the tree");
        subcommand
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                format!("{flag} is a client flag; `sless {name}` does not take it (see `sless {name} --help`)"),
            )
            .exit();
    }
}

/// The command tree completion scripts offer: what `sless --help` shows.
/// The hidden `instance` is left out, and the client flags are offered
/// where they apply, on the top-level command and under each client
/// subcommand, never under `server` (clap's completions would offer hidden
/// subcommands and arguments too, so they are not in this tree at all).
fn offered() -> clap::Command {
    let full = Cli::command();
    let client_flags: Vec<clap::Arg> = full.get_arguments().cloned().collect();
    let subcommands = full
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set())
        .map(|sub| match sub.get_name() {
            "server" => sub.clone(),
            _ => sub.clone().args(client_flags.iter().cloned()),
        });
    clap::Command::new("sless")
        .version(env!("CARGO_PKG_VERSION"))
        .about(full.get_about().cloned().unwrap_or_default())
        .args(client_flags.iter().map(|flag| flag.clone().global(false)))
        .subcommands(subcommands)
}

fn main() {
    let matches = command().get_matches();
    refuse_client_flags(&matches);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let config = match cli.command {
        Command::Server(config) => config,
        Command::Instance(args) => std::process::exit(run_instance(args)),
        Command::Client(command) => std::process::exit(cli::main(command, cli.conn, offered)),
    };
    // A descriptor the server inherited without close-on-exec (a shell's
    // `exec 9>file`, a supervisor's socket) would pass to every process it
    // starts: the zygotes, which run as root, and the builds, which run a
    // tenant's install scripts. None of them is the server's to hand on.
    // Still one thread here, as marking them all at once needs.
    close_fds::set_fds_cloexec(3, &[]);
    init_tracing();
    // The error and its causes on one line; a backtrace (with
    // RUST_BACKTRACE set) helps no one whose port is taken.
    if let Err(e) = serve(config) {
        sless_server::say_error(&format!("sless server: {e:#}"));
        std::process::exit(1);
    }
}

fn serve(config: sless_server::Config) -> anyhow::Result<()> {
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

#[cfg(test)]
mod tests {
    use clap::FromArgMatches;

    use super::{command, offered, Cli, Command};

    /// Every subcommand's arguments are consistent with the global client
    /// flags (clap checks this only when a subcommand is built: the
    /// Kubernetes driver's pods run `sless instance`, whose `--namespace`
    /// once clashed with the client's and stopped every pod at start).
    #[test]
    fn every_subcommand_builds() {
        command().debug_assert();
        offered().debug_assert();
        for args in [["sless", "instance", "--help"], ["sless", "server", "--help"]] {
            let e = command().try_get_matches_from(args).expect_err("help");
            assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp, "{e}");
        }
    }

    /// `sless instance` runs in a sandbox or a pod, configured by its own
    /// flags: its help lists those, not the client's.
    #[test]
    fn instance_help_lists_only_its_own_flags() {
        let e = command()
            .try_get_matches_from(["sless", "instance", "--help"])
            .expect_err("help");
        let help = e.to_string();
        assert!(help.contains("--code-dir <CODE_DIR>"), "{help}");
        for client in ["Client options", "--endpoint", "--token", "--namespace", "--output"] {
            assert!(!help.contains(client), "instance help lists {client}:\n{help}");
        }
    }

    /// `sless -n demo server` is refused after parsing; what it parsed to
    /// shows that a client flag (or `SLESS_NAMESPACE`) never reaches the
    /// server's `namespace` (`--k8s-namespace`).
    #[test]
    fn the_client_namespace_is_not_the_servers() {
        let matches = command()
            .try_get_matches_from(["sless", "-n", "demo", "server"])
            .unwrap();
        let cli = Cli::from_arg_matches(&matches).unwrap();
        assert_eq!(cli.conn.namespace.as_deref(), Some("demo"));
        let Command::Server(config) = cli.command else {
            panic!("not the server")
        };
        assert_eq!(config.kube.namespace, "sless");
    }
}
