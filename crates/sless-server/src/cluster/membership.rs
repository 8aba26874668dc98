//! What replicas on one PostgreSQL tell each other (tables of
//! `migrations/postgres/0005_cluster.sql`): the change counter they poll,
//! a heartbeat each (on the database's clock), and the version of each
//! function each one serves, which is how a new version waits for every
//! live replica before it is called Ready.

use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use sless_driver::FunctionKey;

/// A replica is live while its heartbeat is younger than this. A replica
/// that could not write one for [`crate::cluster::FENCE_AFTER`] (shorter)
/// stops answering `/fn` itself, so a replica counted out serves nothing.
pub const LIVENESS: Duration = Duration::from_secs(3);

/// This replica's membership.
pub struct Membership {
    pool: PgPool,
    pub replica: String,
}

impl Membership {
    /// Joins the replicas of the database at `url` as `replica`.
    pub async fn join(url: &str, replica: String, address: &str) -> anyhow::Result<Membership> {
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(5))
            .connect(url)
            .await
            .map_err(|e| anyhow::anyhow!("connecting to PostgreSQL (SLESS_DATABASE_URL): {e}"))?;
        let membership = Membership { pool, replica };
        sqlx::query(
            "INSERT INTO cluster_replicas (id, address) VALUES ($1, $2) \
             ON CONFLICT (id) DO UPDATE SET address = $2, heartbeat_at = now()",
        )
        .bind(&membership.replica)
        .bind(address)
        .execute(&membership.pool)
        .await?;
        Ok(membership)
    }

    /// The change counter of the resources replicas converge on.
    pub async fn revision(&self) -> sqlx::Result<i64> {
        sqlx::query_scalar("SELECT value FROM cluster_revision WHERE id = 1")
            .fetch_one(&self.pool)
            .await
    }

    /// Says this replica is alive (and whether it leads); returns how many
    /// other replicas are live.
    pub async fn heartbeat(&self, leader: bool) -> sqlx::Result<i64> {
        sqlx::query(
            "INSERT INTO cluster_replicas (id, address, leader) VALUES ($1, '', $2) \
             ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), leader = $2",
        )
        .bind(&self.replica)
        .bind(leader)
        .execute(&self.pool)
        .await?;
        sqlx::query_scalar(
            "SELECT count(*) FROM cluster_replicas WHERE id <> $1 AND heartbeat_at > now() - make_interval(secs => $2)",
        )
        .bind(&self.replica)
        .bind(LIVENESS.as_secs_f64())
        .fetch_one(&self.pool)
        .await
    }

    /// Records that this replica serves `version` of `key` (or nothing older).
    pub async fn serving(&self, key: &FunctionKey, version: u64) -> sqlx::Result<()> {
        sqlx::query(
            "INSERT INTO served_versions (replica, namespace, name, version) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (replica, namespace, name) DO UPDATE SET version = $4",
        )
        .bind(&self.replica)
        .bind(&key.namespace)
        .bind(&key.name)
        .bind(version as i64)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Forgets what this replica served of a deleted function.
    pub async fn forget(&self, key: &FunctionKey) -> sqlx::Result<()> {
        sqlx::query("DELETE FROM served_versions WHERE replica = $1 AND namespace = $2 AND name = $3")
            .bind(&self.replica)
            .bind(&key.namespace)
            .bind(&key.name)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Forgets what every replica served of a deleted function.
    pub async fn forget_everywhere(&self, key: &FunctionKey) -> sqlx::Result<()> {
        sqlx::query("DELETE FROM served_versions WHERE namespace = $1 AND name = $2")
            .bind(&key.namespace)
            .bind(&key.name)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The live replicas that do not serve `version` of `key` yet.
    pub async fn lagging(&self, key: &FunctionKey, version: u64) -> sqlx::Result<Vec<String>> {
        sqlx::query_scalar(
            "SELECT r.id FROM cluster_replicas r LEFT JOIN served_versions s \
               ON s.replica = r.id AND s.namespace = $1 AND s.name = $2 \
             WHERE r.heartbeat_at > now() - make_interval(secs => $4) \
               AND (s.version IS NULL OR s.version < $3) ORDER BY r.id",
        )
        .bind(&key.namespace)
        .bind(&key.name)
        .bind(version as i64)
        .bind(LIVENESS.as_secs_f64())
        .fetch_all(&self.pool)
        .await
    }

    /// Leaves at shutdown: no one waits for this replica any more.
    pub async fn leave(&self) {
        let _ = sqlx::query("DELETE FROM served_versions WHERE replica = $1")
            .bind(&self.replica)
            .execute(&self.pool)
            .await;
        let _ = sqlx::query("DELETE FROM cluster_replicas WHERE id = $1")
            .bind(&self.replica)
            .execute(&self.pool)
            .await;
    }

    /// Drops the rows of replicas dead for a minute (the leader's chore).
    pub async fn sweep(&self) -> sqlx::Result<()> {
        sqlx::query(
            "DELETE FROM served_versions WHERE replica IN \
             (SELECT id FROM cluster_replicas WHERE heartbeat_at < now() - interval '60 seconds')",
        )
        .execute(&self.pool)
        .await?;
        sqlx::query("DELETE FROM cluster_replicas WHERE heartbeat_at < now() - interval '60 seconds'")
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
