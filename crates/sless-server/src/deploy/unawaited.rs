//! A build its function no longer awaits stops at once: while the driver
//! builds, the store's status of the function is read every
//! [`LOOK_EVERY`], and once the function is deleted or a newer upload took
//! its place (on whichever replica it came), the build is dropped. Its
//! processes die with it (the driver's contract for a dropped build), its
//! build slots go to the next build waiting (the newer upload's, often),
//! and what it made so far is removed. Run on, it held its namespace's
//! slot up to its `build_timeout_sec`, and the newer upload waited.

use std::time::Duration;

use sless_api::Runtime;
use sless_driver::FunctionKey;

use super::Deployer;

/// How often a running build looks whether its function still awaits it.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Why a build under way is no longer awaited.
pub(super) enum Unawaited {
    /// The function was deleted.
    Deleted,
    /// The function awaits another upload's build now.
    Superseded,
}

impl Deployer {
    /// Returns once the function no longer awaits the build of `code_hash`
    /// (the code it serves, for a rebuild): the function is gone, or its
    /// status names other code. A store that does not answer is asked
    /// again at the next look; the build runs on meanwhile.
    pub(super) async fn unawaited(&self, key: &FunctionKey, code_hash: &str) -> Unawaited {
        loop {
            tokio::time::sleep(LOOK_EVERY).await;
            match self.load(key).await {
                Ok(None) => return Unawaited::Deleted,
                Ok(Some((_, status))) if status.code_hash.as_deref() != Some(code_hash) => {
                    return Unawaited::Superseded
                }
                Ok(Some(_)) => {}
                Err(e) => {
                    tracing::debug!(function = %key, error = %e, "cannot tell whether the function still awaits its build")
                }
            }
        }
    }

    /// Ends the build of `code_hash` that was stopped (dropped) because its
    /// function no longer awaits it: what it made is removed, as after a
    /// superseded build that ran to its end (the artifact, if it got as far
    /// as one, and the upload), and nothing is recorded. The function's
    /// status is the newer upload's, or gone.
    pub(super) async fn stopped(&self, key: &FunctionKey, code_hash: &str, runtime: Runtime, why: Unawaited) {
        match why {
            Unawaited::Deleted => {
                tracing::info!(function = %key, %code_hash, "build stopped: the function was deleted")
            }
            Unawaited::Superseded => {
                tracing::info!(function = %key, %code_hash, "build stopped: a newer upload superseded it")
            }
        }
        // The same code uploaded again meanwhile (A, B, then A again) is
        // built anew once this build's place is free (`spawn_build`), from
        // the upload and any artifact this one leaves.
        if let Ok(Some((_, status))) = self.load(key).await {
            if status.code_hash.as_deref() == Some(code_hash) {
                return;
            }
        }
        let artifact = match self.driver.fingerprint(runtime, code_hash).await {
            Ok(artifact) if self.driver.has_artifact(&artifact).await.unwrap_or(false) => Some(artifact),
            _ => None,
        };
        self.made_no_version(key, code_hash, artifact.as_ref()).await;
    }
}
