//! What every request handler shares.

use std::sync::Arc;

use object_store::ObjectStore;

use crate::archive::ArchiveRules;
use crate::config::Config;
use crate::store::Store;

/// Shared by every handler through axum's router state.
pub struct AppState {
    pub config: Config,
    pub store: Arc<dyn Store>,
    pub blobs: Arc<dyn ObjectStore>,
    pub archive_rules: ArchiveRules,
    /// sha256 of the admin token.
    pub admin_hash: String,
}
