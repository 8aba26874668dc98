//! The event queue in the embedded default's SQLite file, on a pool of its
//! own whose commits are synchronous (`FULL`): an event acknowledged with a
//! 202 survives a crash of the machine, not only of the process. One
//! server uses the file, so claims need no row locks.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;

pub struct SqliteEvents {
    pool: SqlitePool,
}

impl SqliteEvents {
    /// Opens the (already migrated) database at `url`.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| anyhow::anyhow!("SLESS_DATABASE_URL {url:?}: {e}"))?
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(2)
            .connect_with(options)
            .await
            .map_err(|e| anyhow::anyhow!("opening SQLite database {url:?} for events: {e}"))?;
        Ok(SqliteEvents { pool })
    }
}

event_store!(SqliteEvents, sqlx::Sqlite, "");
