//! `sless completions SHELL`: a completion script for bash, zsh, fish,
//! elvish or PowerShell on stdout.

use clap::Args;
use clap_complete::Shell;

#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

pub fn print(args: &CompletionsArgs, mut command: clap::Command) -> anyhow::Result<()> {
    // Generated whole first: clap_complete panics when its writer fails.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "sless", &mut script);
    super::output::write_stdout(&script)
}
