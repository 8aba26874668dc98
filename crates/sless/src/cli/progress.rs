//! A spinner on stderr while waiting for the server, shown only when stderr
//! is a terminal (scripts and logs get plain lines instead).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// Spins until dropped; clears its line when it goes.
pub struct Spinner {
    bar: Option<ProgressBar>,
}

impl Spinner {
    pub fn start(message: impl Into<String>) -> Spinner {
        let message = message.into();
        if !std::io::stderr().is_terminal() {
            eprintln!("{message}");
            return Spinner { bar: None };
        }
        let bar = ProgressBar::new_spinner();
        bar.set_style(ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("the template is valid"));
        bar.set_message(message);
        bar.enable_steady_tick(Duration::from_millis(100));
        Spinner { bar: Some(bar) }
    }

    /// Replaces the spinner's message (nothing when not on a terminal).
    pub fn set_message(&self, message: impl Into<String>) {
        if let Some(bar) = &self.bar {
            bar.set_message(message.into());
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}
