//! What every request handler shares.

use std::sync::Arc;

use object_store::ObjectStore;

use crate::config::Config;
use crate::deploy::Deployer;
use crate::store::Store;
use sless_codecheck::CheckMetrics;
use sless_driver::Driver;

/// Shared by every handler through axum's router state.
pub struct AppState {
    pub config: Config,
    pub store: Arc<dyn Store>,
    pub blobs: Arc<dyn ObjectStore>,
    pub check_metrics: Arc<CheckMetrics>,
    pub driver: Arc<dyn Driver>,
    pub invoker: Arc<crate::invoker::Invoker>,
    pub metrics: Arc<crate::metrics::Metrics>,
    pub deployer: Arc<Deployer>,
    /// Where `$latest` and the aliases send calls.
    pub routes: Arc<crate::routes::Routes>,
    /// Versions besides `$latest` on this replica.
    pub versions: Arc<crate::versions::Versions>,
    pub triggers: Arc<crate::triggers::Triggers>,
    pub jobs: Arc<crate::jobs::Jobs>,
    /// Asynchronous calls: accepted here, delivered by every replica.
    pub async_invocations: Arc<crate::async_invoke::AsyncInvocations>,
    /// This replica among the others: leadership, the `/fn` fence.
    pub cluster: Arc<crate::cluster::Cluster>,
    /// sha256 of the admin token.
    pub admin_hash: String,
    /// Seals and opens secret values.
    pub secrets: Arc<crate::secrets::Secrets>,
}
