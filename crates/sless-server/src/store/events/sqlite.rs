//! The event queue in the embedded default's SQLite file, on connections of
//! its own whose commits are synchronous (`FULL`): an event acknowledged
//! with a 202 survives a crash of the machine, not only of the process. One
//! server uses the file, so claims need no row locks. Every write goes
//! through one connection: SQLite has one writer at a time, and a second
//! writing connection would wait for the lock in its busy handler's
//! sleeps (milliseconds each) where this one waits in a queue.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;

pub struct SqliteEvents {
    pool: SqlitePool,
    writes: SqlitePool,
}

impl SqliteEvents {
    /// Opens the (already migrated) database at `url`.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| anyhow::anyhow!("SLESS_DATABASE_URL {url:?}: {e}"))?
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10));
        let open = |connections| {
            SqlitePoolOptions::new()
                .max_connections(connections)
                .connect_with(options.clone())
        };
        let (pool, writes) = tokio::try_join!(open(2), open(1))
            .map_err(|e| anyhow::anyhow!("opening SQLite database {url:?} for events: {e}"))?;
        Ok(SqliteEvents { pool, writes })
    }
}

event_store!(SqliteEvents, sqlx::Sqlite, "");
