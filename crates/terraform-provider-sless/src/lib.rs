//! The sless Terraform provider: `sless_function`, `sless_trigger` and
//! `sless_job` resources over the REST API, served with Terraform's plugin
//! protocol v6 by the `tf-provider` framework.
//!
//! Each resource keeps its plan logic in plain functions over its state
//! struct (no I/O), so the unit tests can check what a change plans without a
//! server; the `Resource` impls around them do the REST calls through
//! `sless-client`.

mod code;
mod connection;
mod convert;
mod diagnostics;
mod function;
mod job;
mod provider;
mod schema;
mod trigger;

pub use provider::SlessProvider;

/// The provider's type name: resources are `sless_function`, `sless_trigger`
/// and `sless_job`.
pub const PROVIDER_NAME: &str = "sless";

#[cfg(test)]
mod proposal;
#[cfg(test)]
mod protocol_tests;
