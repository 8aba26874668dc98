//! A namespace's quota turn among replicas: a PostgreSQL session-level
//! advisory lock keyed on the namespace, taken after the replica's own
//! turn (see [`crate::quota::turn`]) and held until the turn ends, so a
//! quota check and the change it allows happen in one replica at a time.
//!
//! The locks live on connections of a small pool of their own: a turn
//! reads through the store's pool while it holds its lock, and were the
//! locks taken from that pool, a burst of turns in many namespaces could
//! hold every connection and wait forever for one to read with. A turn
//! that cannot get a connection, or waits too long for another replica's
//! turn ([`TURN_WAIT`], as long as for this replica's), is refused (503)
//! instead of hanging.
//!
//! **Invariant:** a connection goes back to the pool only once its lock is
//! released. A session lock lasts as long as the session, so a connection
//! whose unlock failed, or whose lock request was given up half way, is
//! closed, which releases whatever it held.

use std::str::FromStr;
use std::time::Duration;

use sha2::{Digest, Sha256};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres};

/// The first half of a turn's two-int lock key ("slqt"); the second is the
/// namespace's hash. PostgreSQL keeps two-int keys apart from the one-bigint
/// keys of the migrations and the leader, so they never meet.
pub const QUOTA_LOCK_CLASS: i32 = 0x736c_7174;
/// Turns this replica holds or waits for at once, over all namespaces (one
/// per namespace at most: the replica's own turn comes first).
const CONNECTIONS: u32 = 6;
/// How long a turn waits for a connection (opening one included).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a turn waits for the one before it on its namespace: this
/// replica's own ([`crate::quota::turn`]), then another replica's (the
/// `lock_timeout` of these connections). Turns last a few reads and a write.
pub const TURN_WAIT: Duration = Duration::from_secs(10);
/// How long an unlock may take before its connection is closed instead.
const UNLOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// The lock key of `namespace`'s turn. Every replica must compute the same
/// one, whatever its build, hence SHA-256 rather than the std hasher.
pub fn lock_key(namespace: &str) -> (i32, i32) {
    let digest = Sha256::digest(namespace.as_bytes());
    let hash = i32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    (QUOTA_LOCK_CLASS, hash)
}

/// The connections this replica takes namespace locks on.
pub struct NamespaceLocks {
    pool: PgPool,
}

impl NamespaceLocks {
    /// Locks on the PostgreSQL at `url`; connects on the first turn.
    pub fn new(url: &str) -> anyhow::Result<NamespaceLocks> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| anyhow::anyhow!("SLESS_DATABASE_URL: {e}"))?
            .options([("lock_timeout", format!("{}ms", TURN_WAIT.as_millis()))]);
        let pool = PgPoolOptions::new()
            .max_connections(CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy_with(options);
        Ok(NamespaceLocks { pool })
    }

    /// Waits for `namespace`'s lock; it is released when the lock drops.
    pub async fn lock(&self, namespace: &str) -> sqlx::Result<NamespaceLock> {
        let conn = self.pool.acquire().await?;
        // Held from before the request: given up half way (an error, or the
        // caller gone), its drop closes the session the lock may come to.
        let mut lock = NamespaceLock {
            conn: Some(conn),
            key: lock_key(namespace),
            held: false,
        };
        let conn = lock.conn.as_mut().expect("just set");
        sqlx::query("SELECT pg_advisory_lock($1, $2)")
            .bind(lock.key.0)
            .bind(lock.key.1)
            .execute(&mut **conn)
            .await?;
        lock.held = true;
        Ok(lock)
    }
}

/// A namespace's lock among replicas, held until dropped.
pub struct NamespaceLock {
    conn: Option<PoolConnection<Postgres>>,
    key: (i32, i32),
    held: bool,
}

impl Drop for NamespaceLock {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) if self.held => {
                runtime.spawn(unlock(conn, self.key));
            }
            // Not known to hold it, or no runtime to unlock on: closing the
            // session releases whatever it holds or comes to hold.
            _ => drop(conn.detach()),
        }
    }
}

/// Releases the lock on `conn` and gives the connection back, or closes it
/// when the release fails.
async fn unlock(mut conn: PoolConnection<Postgres>, key: (i32, i32)) {
    let unlock = sqlx::query_scalar::<_, bool>("SELECT pg_advisory_unlock($1, $2)")
        .bind(key.0)
        .bind(key.1)
        .fetch_one(&mut *conn);
    match tokio::time::timeout(UNLOCK_TIMEOUT, unlock).await {
        Ok(Ok(true)) => {}
        outcome => {
            let error = match outcome {
                Ok(Ok(_)) => "the lock was not held".to_string(),
                Ok(Err(e)) => e.to_string(),
                Err(_) => "timed out".to_string(),
            };
            tracing::warn!(%error, "releasing a namespace's quota lock failed; closing its connection");
            drop(conn.detach());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_has_the_same_key_in_every_build() {
        // Replicas of different builds (a rolling upgrade) must agree.
        assert_eq!(lock_key("ns"), (QUOTA_LOCK_CLASS, 0x7bfb_a6e0));
        assert_ne!(lock_key("ns").1, lock_key("ns2").1);
    }
}
