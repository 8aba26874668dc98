//! `sless versions FUNCTION [--rm N]` and `sless alias set|ls|get|rm`: the
//! built versions of a function (one deleted), and the aliases that point
//! at them (with an optional canary share to a second version).

use anyhow::Context as _;
use clap::{Args, Subcommand};
use sless_api::{Alias, AliasSpec};

use super::archive::human_bytes;
use super::context::ConnArgs;
use super::output::{age, print_json, say, time, Details, OutputFormat, Table};

#[derive(Args)]
pub struct VersionsArgs {
    /// Function name.
    #[arg(value_parser = super::names::function)]
    pub function: String,
}

#[derive(Args)]
pub struct ListArgs {
    /// Function name.
    #[arg(value_parser = super::names::function)]
    pub function: String,
    /// Delete this version instead (not the serving one, nor one an alias
    /// points at): its artifact and upload go, and the room they took in
    /// the namespace's storage quota.
    #[arg(long, value_name = "VERSION")]
    pub rm: Option<u64>,
}

#[derive(Subcommand)]
pub enum AliasCommand {
    /// Point an alias at a version (creates it, or moves it atomically;
    /// rollback is setting it back).
    Set(SetArgs),
    /// List a function's aliases.
    #[command(visible_alias = "list")]
    Ls(VersionsArgs),
    /// Show one alias.
    Get(Named),
    /// Delete an alias.
    #[command(visible_alias = "delete")]
    Rm(Named),
}

#[derive(Args)]
pub struct Named {
    /// Function name.
    #[arg(value_parser = super::names::function)]
    pub function: String,
    /// Alias name.
    #[arg(value_parser = super::names::alias)]
    pub alias: String,
}

#[derive(Args)]
pub struct SetArgs {
    /// Function name.
    #[arg(value_parser = super::names::function)]
    pub function: String,
    /// Alias name (a DNS label that starts with a letter; not `latest`,
    /// which the plain URL already means).
    #[arg(value_parser = super::names::new_alias)]
    pub alias: String,
    /// The version it points at.
    pub version: u64,
    /// Send a share of the calls to another version, e.g. `--canary 8=0.1`.
    #[arg(long, value_name = "VERSION=SHARE")]
    pub canary: Option<String>,
}

/// `sless versions FUNCTION [--rm N]`.
pub async fn list(args: ListArgs, conn: &ConnArgs) -> anyhow::Result<()> {
    let cx = conn.context()?;
    if let Some(version) = args.rm {
        cx.client.delete_version(&cx.namespace, &args.function, version).await?;
        if cx.output == OutputFormat::Table {
            say(format_args!("version {version} of {} deleted", args.function))?;
        }
        return Ok(());
    }
    let versions = cx.client.list_versions(&cx.namespace, &args.function).await?;
    if cx.output == OutputFormat::Json {
        return print_json(&versions);
    }
    if versions.is_empty() {
        eprintln!("function {} has no built version yet", args.function);
        return Ok(());
    }
    // SIZE is what the version keeps (its artifact and its upload), what
    // the namespace's storage quota counts.
    let mut table = Table::new(&["VERSION", "LATEST", "ALIASES", "CODE", "SIZE", "BUILT"]);
    for v in &versions {
        table.row(vec![
            v.version.to_string(),
            if v.latest { "*".into() } else { String::new() },
            v.aliases.join(","),
            v.code_hash.chars().take(12).collect(),
            human_bytes(v.artifact_bytes + v.archive_bytes),
            time(Some(v.built_at)),
        ]);
    }
    table.print()
}

pub async fn run(command: AliasCommand, conn: &ConnArgs) -> anyhow::Result<()> {
    let cx = conn.context()?;
    match command {
        AliasCommand::Set(args) => {
            let spec = AliasSpec {
                version: args.version,
                weights: match &args.canary {
                    Some(canary) => [parse_canary(canary)?].into_iter().collect(),
                    None => Default::default(),
                },
            };
            let alias = cx
                .client
                .put_alias(&cx.namespace, &args.function, &args.alias, &spec)
                .await?;
            show(cx.output, &alias)
        }
        AliasCommand::Ls(args) => {
            let aliases = cx.client.list_aliases(&cx.namespace, &args.function).await?;
            if cx.output == OutputFormat::Json {
                return print_json(&aliases);
            }
            if aliases.is_empty() {
                eprintln!("function {} has no aliases", args.function);
                return Ok(());
            }
            let mut table = Table::new(&["NAME", "VERSION", "CANARY", "URL", "MOVED"]);
            for a in &aliases {
                table.row(vec![
                    a.name.clone(),
                    a.spec.version.to_string(),
                    canary(a),
                    a.url.clone(),
                    age(a.updated_at),
                ]);
            }
            table.print()
        }
        AliasCommand::Get(args) => {
            let alias = cx.client.get_alias(&cx.namespace, &args.function, &args.alias).await?;
            show(cx.output, &alias)
        }
        AliasCommand::Rm(args) => {
            cx.client
                .delete_alias(&cx.namespace, &args.function, &args.alias)
                .await?;
            if cx.output == OutputFormat::Table {
                say(format_args!("alias {} of {} deleted", args.alias, args.function))?;
            }
            Ok(())
        }
    }
}

/// `8=0.1` as the weights entry `("8", 0.1)`.
fn parse_canary(text: &str) -> anyhow::Result<(String, f64)> {
    let (version, share) = text
        .split_once('=')
        .context("--canary takes VERSION=SHARE, e.g. 8=0.1")?;
    let version: u64 = version
        .trim()
        .parse()
        .context("--canary: the version must be a number")?;
    let share: f64 = share
        .trim()
        .parse()
        .context("--canary: the share must be a number between 0 and 1")?;
    Ok((version.to_string(), share))
}

/// `8 (10%)`, or `-` without a canary.
fn canary(alias: &Alias) -> String {
    match alias.spec.weights.iter().next() {
        Some((version, share)) => format!("{version} ({}%)", (share * 100.0 * 100.0).round() / 100.0),
        None => "-".into(),
    }
}

fn show(output: OutputFormat, alias: &Alias) -> anyhow::Result<()> {
    if output == OutputFormat::Json {
        return print_json(alias);
    }
    let mut d = Details::default();
    d.field("name", &alias.name)
        .field("function", &alias.function)
        .field("namespace", &alias.namespace)
        .field("version", alias.spec.version)
        .field("canary", canary(alias))
        .field("url", &alias.url)
        .field("moved", time(Some(alias.updated_at)));
    d.print()
}

#[cfg(test)]
mod tests {
    use super::parse_canary;

    #[test]
    fn canaries_read_version_and_share() {
        assert_eq!(parse_canary("8=0.1").unwrap(), ("8".to_string(), 0.1));
        for bad in ["8", "x=0.1", "8=x", "=0.1"] {
            assert!(parse_canary(bad).is_err(), "{bad}");
        }
    }
}
