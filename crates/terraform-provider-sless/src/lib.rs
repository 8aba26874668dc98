//! The sless Terraform provider: `sless_function`, `sless_trigger`,
//! `sless_job` and `sless_alias` resources over the REST API, served with Terraform's plugin
//! protocol v6 by the `tf-provider` framework.
//!
//! What the resources share is written once in `resource` (the Terraform
//! calls, IDs, import, patches, which changes replace); each resource module
//! says only what differs: its attribute table, its plan logic in plain
//! functions over its state struct (no I/O, so the unit tests check what a
//! change plans without a server), and its REST calls through
//! `sless-client`. `resource`'s module doc says how to add one.

mod alias;
mod code;
mod connection;
mod convert;
mod diagnostics;
mod function;
mod job;
mod number;
mod provider;
mod resource;
mod schema;
mod secret;
mod trigger;

pub use provider::SlessProvider;

/// The provider's type name: resources are `sless_function`, `sless_trigger`,
/// `sless_job` and `sless_alias`.
pub const PROVIDER_NAME: &str = "sless";

#[cfg(test)]
mod proposal;
#[cfg(test)]
mod protocol_tests;
