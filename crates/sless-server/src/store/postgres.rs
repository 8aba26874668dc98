//! The cluster shape's store: PostgreSQL, shared by every server replica.

use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

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
        store.migrate(super::migrations::POSTGRES).await?;
        Ok(store)
    }
}

super::sql::sql_store!(PostgresStore);
