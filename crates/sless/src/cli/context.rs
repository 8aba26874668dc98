//! Where a command talks to: endpoint, token and namespace from flags, then
//! `SLESS_*` variables, then the config saved by `sless login`.

use anyhow::{bail, Context as _};
use clap::Args;
use sless_client::Client;

use super::config::SavedConfig;
use super::output::OutputFormat;

/// The connection flags every client command takes, before or after its
/// name (global flags of the top-level command). Their ids are their own
/// (`client-*`): clap hands a global flag's value to any argument of a
/// subcommand with the same id, and `sless server` has a `namespace` of its
/// own (`--k8s-namespace`), which `-n` or `SLESS_NAMESPACE` must not set.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Client options")]
pub struct ConnArgs {
    /// Server URL [default: the one saved by `sless login`].
    #[arg(
        id = "client-endpoint",
        long = "endpoint",
        value_name = "ENDPOINT",
        env = "SLESS_ENDPOINT",
        global = true
    )]
    pub endpoint: Option<String>,
    /// Bearer token [default: the one saved by `sless login` for this endpoint].
    #[arg(
        id = "client-token",
        long = "token",
        value_name = "TOKEN",
        env = "SLESS_TOKEN",
        global = true,
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Namespace [default: the one saved by `sless login`, else "default"].
    #[arg(
        id = "client-namespace",
        short = 'n',
        long = "namespace",
        value_name = "NAMESPACE",
        env = "SLESS_NAMESPACE",
        global = true
    )]
    pub namespace: Option<String>,
    /// How to print results: tables for people, JSON for scripts.
    #[arg(
        id = "client-output",
        short = 'o',
        long = "output",
        value_name = "OUTPUT",
        value_enum,
        global = true,
        default_value = "table"
    )]
    pub output: OutputFormat,
}

impl ConnArgs {
    /// The first of these flags typed on the command line (not taken from
    /// the environment or a default) for the subcommand that parsed
    /// `matches`, as `--name`: `sless server` and `sless instance` refuse
    /// them rather than ignore them.
    pub fn given_on_command_line(matches: &clap::ArgMatches) -> Option<String> {
        ["endpoint", "token", "namespace", "output"]
            .into_iter()
            .find(|flag| {
                matches.value_source(&format!("client-{flag}")) == Some(clap::parser::ValueSource::CommandLine)
            })
            .map(|flag| format!("--{flag}"))
    }

    /// `command` (`sless server`, `sless instance`) with these flags as
    /// hidden arguments of its own: clap then does not hand it (nor its
    /// subcommands) the global ones, nor list them in its help, yet one
    /// typed after it still parses, so that `given_on_command_line` can
    /// refuse it by name.
    pub fn refused_by(mut command: clap::Command) -> clap::Command {
        for flag in ConnArgs::augment_args(clap::Command::new("client")).get_arguments() {
            let refused = flag.clone().global(false).hide(true).env(None).default_value(None);
            command = command.arg(refused);
        }
        command
    }
}

/// A resolved connection: what a command needs to run.
pub struct Context {
    pub client: Client,
    pub namespace: String,
    pub output: OutputFormat,
}

impl ConnArgs {
    /// Resolves the connection. The saved token is used only with the saved
    /// endpoint, so pointing `--endpoint` elsewhere never sends it to
    /// another server.
    pub fn context(&self) -> anyhow::Result<Context> {
        let saved = SavedConfig::load()?;
        let endpoint = match (&self.endpoint, &saved.endpoint) {
            (Some(endpoint), _) | (None, Some(endpoint)) => endpoint.clone(),
            (None, None) => bail!(
                "no server configured: run `sless login URL --token TOKEN`, or set SLESS_ENDPOINT and SLESS_TOKEN"
            ),
        };
        let token = match &self.token {
            Some(token) => token.clone(),
            None if saved.is_for(&endpoint) => saved.token.clone().unwrap_or_default(),
            None => String::new(),
        };
        if token.is_empty() {
            bail!("no token for {endpoint}: run `sless login {endpoint}`, or pass --token / set SLESS_TOKEN");
        }
        let namespace = self.namespace_or(&saved);
        self.check_namespace(&namespace)?;
        let client = Client::new(&endpoint, token).context("cannot use the endpoint")?;
        Ok(Context {
            client,
            namespace,
            output: self.output,
        })
    }

    /// Refuses a namespace that is not a DNS label before any request
    /// (the server could only answer that no route matches), saying where
    /// it came from.
    pub fn check_namespace(&self, namespace: &str) -> anyhow::Result<()> {
        sless_api::validate_name("namespace", namespace).map_err(|e| {
            let from = match self.namespace {
                Some(_) => "-n/--namespace or SLESS_NAMESPACE",
                None => "the config `sless login` saved",
            };
            anyhow::anyhow!("{e} (from {from})")
        })
    }

    /// The namespace: flag or env, else the saved one, else "default".
    pub fn namespace_or(&self, saved: &SavedConfig) -> String {
        self.namespace
            .clone()
            .or_else(|| saved.namespace.clone())
            .unwrap_or_else(|| "default".to_string())
    }
}
