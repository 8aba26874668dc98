//! The cluster shape's store: PostgreSQL, shared by every server replica.

use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

/// The advisory lock key that serializes migrations ("sless-mig").
const MIGRATION_LOCK: i64 = 0x736c_6573_732d_6d69;

/// PostgreSQL-backed [`super::Store`].
pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await
            .map_err(|e| anyhow::anyhow!("connecting to PostgreSQL (SLESS_DATABASE_URL): {e}"))?;
        let store = PostgresStore { pool };
        // Replicas starting together migrate one at a time: a session lock
        // held on a connection of its own while the migrations run.
        use sqlx::Connection;
        let mut lock = sqlx::PgConnection::connect(url).await?;
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut lock)
            .await?;
        let migrated = store.migrate(super::migrations::POSTGRES).await;
        let _ = lock.close().await;
        migrated?;
        Ok(store)
    }
}

super::sql::sql_store!(PostgresStore);
super::versions::version_store!(PostgresStore);
super::secrets::secret_store!(PostgresStore);
