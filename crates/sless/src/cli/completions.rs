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

pub fn print(args: &CompletionsArgs, mut command: clap::Command) {
    clap_complete::generate(args.shell, &mut command, "sless", &mut std::io::stdout());
}
