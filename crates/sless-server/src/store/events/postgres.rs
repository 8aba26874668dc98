//! The event queue in PostgreSQL, shared by every replica: a claim locks
//! the rows it takes with `FOR UPDATE SKIP LOCKED`, so two replicas never
//! take the same event, and neither waits for the other.

use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

pub struct PostgresEvents {
    pool: PgPool,
    /// The same pool: PostgreSQL writes concurrently.
    writes: PgPool,
}

impl PostgresEvents {
    /// Connects to the (already migrated) database at `url`.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await
            .map_err(|e| anyhow::anyhow!("connecting to PostgreSQL (SLESS_DATABASE_URL) for events: {e}"))?;
        Ok(PostgresEvents {
            writes: pool.clone(),
            pool,
        })
    }
}

event_store!(PostgresEvents, sqlx::Postgres, " FOR UPDATE SKIP LOCKED");
