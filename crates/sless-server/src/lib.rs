//! The sless server: configuration, durable store, code archives, auth, the
//! REST API and the invoke gateway. `server::run` is the entry point.

pub mod archive;
pub mod async_invoke;
pub mod auth;
pub mod blobs;
pub mod bounds;
pub mod cluster;
pub mod config;
pub mod deploy;
pub mod error;
#[cfg(test)]
mod fuzz;
pub mod http;
pub mod invocation_stats;
pub mod invocations;
pub mod invoker;
pub mod jobs;
pub mod kube_options;
pub mod listener;
pub mod live_log;
pub mod metrics;
mod periodic;
pub mod quota;
pub mod record;
pub mod routes;
pub mod secrets;
pub mod server;
pub mod state;
pub mod store;
pub mod triggers;
pub mod versions;

pub use config::Config;
pub use error::{Error, Result};

/// A line for the person who started the server, on stdout (the listen
/// address, a generated token). A stdout that cannot be written (a full
/// disk, a closed pipe) loses the line; `println!` would panic instead.
pub fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// [`say`], on stderr: why the server did not start or stopped.
pub fn say_error(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}
