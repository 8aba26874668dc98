//! Acceptance tests: real Terraform (plan, apply, import, destroy) driving
//! the freshly built provider against a real sless server.

mod alias;
mod asynchronous;
mod destroy;
mod example;
mod failures;
mod harness;
mod import;
mod large;
mod lifecycle;
mod secret;
