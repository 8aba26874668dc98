//! A typed async client for the sless REST API: functions, triggers, jobs,
//! versions and aliases, secrets, invocations, logs and the public invoke gateway. Shared by the `sless`
//! CLI and the Terraform provider; the wire types come from `sless-api`.
//!
//! ```no_run
//! # async fn demo() -> sless_client::Result<()> {
//! let client = sless_client::Client::new("http://127.0.0.1:8080", "my-token")?;
//! for function in client.list_functions("default").await? {
//!     println!("{} {:?}", function.name, function.status.phase);
//! }
//! # Ok(())
//! # }
//! ```

mod async_invocations;
mod error;
mod functions;
mod gateway;
mod http;
mod jobs;
mod logs;
mod secrets;
mod triggers;
mod versions;
mod wait;

pub use error::{Error, Result};
pub use gateway::{InvokeRequest, InvokeResponse};
pub use logs::{LogPage, LogStream};
pub use reqwest::{Method, StatusCode};
pub use sless_api as api;
pub use wait::Wait;

pub use http::Client;
