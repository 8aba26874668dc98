//! The Kubernetes driver's tests, one binary: the objects it applies
//! (snapshots), the install manifests (rendered by kubectl), and the
//! driver's reconcile scenarios against a mocked API server.

mod api_server;
mod fake_instance;
mod install;
mod objects;
mod reconcile;
mod watch;
