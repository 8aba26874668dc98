//! Build slots: which builds run at once (one of the namespace's, then
//! one of the server's two), how a build past its share hands its slot on
//! and runs on as a long build, and what a build waiting or running says
//! in its function's status meanwhile.

use std::sync::Arc;

use sless_api::Phase;
use sless_driver::FunctionKey;

use super::{Deployer, BUILD_NOTICE_AFTER, CONCURRENT_BUILDS};
use crate::error::{Error, Result};
use crate::metrics::Held;
use crate::store::Kind;

/// A build slot held: one of the server's two, or a long build's, each
/// counted in the metrics while held.
pub(super) struct Slot<'a> {
    _permit: tokio::sync::SemaphorePermit<'a>,
    _counted: Held<'a>,
}

impl Deployer {
    /// Says in the status of a function still waiting for the build of
    /// `code_hash` that the build runs (unless the status moved meanwhile).
    pub(super) async fn note_build_running(
        &self,
        key: &FunctionKey,
        code_hash: &str,
        runtime: sless_api::Runtime,
        since: chrono::DateTime<chrono::Utc>,
    ) {
        let (tool, file) = match runtime {
            sless_api::Runtime::Python311 => ("pip", "requirements.txt"),
            sless_api::Runtime::Nodejs20 => ("npm", "package.json"),
        };
        let message = format!(
            "build running since {} UTC: {tool} installs the dependencies of {file}; its log follows when it ends",
            since.format("%H:%M:%S")
        );
        self.note_while_building(key, code_hash, message).await;
    }

    /// Writes `message` in the status of a function still waiting for the
    /// build of `code_hash` (unless the status moved meanwhile).
    async fn note_while_building(&self, key: &FunctionKey, code_hash: &str, message: String) {
        let noted = async {
            let Some((_, mut status, stored)) = self.load_stored(key).await? else {
                return Ok(());
            };
            if status.phase != Phase::Building || status.code_hash.as_deref() != Some(code_hash) {
                return Ok(());
            }
            status.message = message;
            let new = serde_json::to_value(&status).map_err(Error::internal)?;
            self.store
                .swap_status(Kind::Function, &key.namespace, &key.name, &stored, &new)
                .await?;
            Ok::<(), Error>(())
        };
        if let Err(e) = noted.await {
            tracing::warn!(function = %key, error = %e, "noting a build's progress failed");
        }
    }

    /// Takes a build slot for the build of `code_hash`: first one of the
    /// namespace's, then one of the server's. A build that waits for
    /// either says so in its function's status, and for which.
    pub(super) async fn build_slot(
        &self,
        key: &FunctionKey,
        code_hash: &str,
    ) -> Result<(tokio::sync::OwnedSemaphorePermit, Slot<'_>)> {
        let _waiting = Held::on(&self.metrics.builds_waiting);
        let own = self
            .namespace_builds
            .lock()
            .unwrap()
            .entry(key.namespace.clone())
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(self.namespace_build_slots)))
            .clone();
        let since = crate::store::now().format("%H:%M:%S");
        let own = self
            .waiting_noted(key, code_hash, own.acquire_owned(), || {
                format!(
                    "waiting since {since} UTC for a build slot of namespace {}: it builds {} at once (the server's SLESS_NS_MAX_BUILDS), and its other builds hold them",
                    key.namespace, self.namespace_build_slots
                )
            })
            .await?;
        let server = self
            .waiting_noted(key, code_hash, self.builds.acquire(), || {
                format!(
                    "waiting since {since} UTC for a build slot: the server's {CONCURRENT_BUILDS} build slots are taken (a build gives its slot on after SLESS_BUILD_SHARE_SEC, {}s, when a long build's is free)",
                    self.build_share.as_secs()
                )
            })
            .await?;
        Ok((
            own,
            Slot {
                _permit: server,
                _counted: Held::on(&self.metrics.builds_running),
            },
        ))
    }

    /// Waits for `permit`; past [`BUILD_NOTICE_AFTER`], says so with
    /// `waiting()` in the status of the function whose build waits.
    async fn waiting_noted<P>(
        &self,
        key: &FunctionKey,
        code_hash: &str,
        permit: impl std::future::Future<Output = std::result::Result<P, tokio::sync::AcquireError>>,
        waiting: impl FnOnce() -> String,
    ) -> Result<P> {
        tokio::pin!(permit);
        tokio::select! {
            permit = &mut permit => return permit.map_err(Error::internal),
            () = tokio::time::sleep(BUILD_NOTICE_AFTER) => {}
        }
        self.note_while_building(key, code_hash, waiting()).await;
        permit.await.map_err(Error::internal)
    }

    /// Once the build in `slot` has had its share of the build slots,
    /// swaps its slot for a long build's when one is free (the slot goes
    /// to the next build waiting); never returns.
    pub(super) async fn run_on_as_long<'a>(&'a self, key: &FunctionKey, slot: &std::sync::Mutex<Slot<'a>>) {
        tokio::time::sleep(self.build_share.saturating_sub(BUILD_NOTICE_AFTER)).await;
        if let Ok(long) = self.long_builds.acquire().await {
            *slot.lock().unwrap() = Slot {
                _permit: long,
                _counted: Held::on(&self.metrics.builds_long),
            };
            tracing::info!(function = %key, "a build past its share of the build slots runs on as a long build");
        }
        std::future::pending().await
    }
}
