//! The embedded default's store: one SQLite file in WAL mode.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;

/// SQLite-backed [`super::Store`].
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| anyhow::anyhow!("SLESS_DATABASE_URL {url:?}: {e}"))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        if let Some(parent) = options.get_filename().parent() {
            std::fs::create_dir_all(parent)?;
        }
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .map_err(|e| anyhow::anyhow!("opening SQLite database {url:?}: {e}"))?;
        let store = SqliteStore { pool };
        store.migrate(super::migrations::SQLITE).await?;
        Ok(store)
    }
}

super::sql::sql_store!(SqliteStore);
super::versions::version_store!(SqliteStore);
super::secrets::secret_store!(SqliteStore);
