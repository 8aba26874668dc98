//! Durable state behind one small trait, with a SQLite and a PostgreSQL
//! implementation chosen once at start from the database URL.

pub mod chunks;
pub mod events;
mod migrations;
pub mod page;
mod postgres;
pub mod secrets;
mod sql;
mod sqlite;
pub mod versions;

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::error::Result;

pub use postgres::PostgresStore;
pub use secrets::{SecretRecord, SecretStore};
pub use sqlite::SqliteStore;
pub use versions::{AliasRecord, VersionRecord, VersionStore};

/// The kinds of namespaced resources the store holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Function,
    Trigger,
    Job,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Function => "function",
            Kind::Trigger => "trigger",
            Kind::Job => "job",
        }
    }
}

/// What [`Store::record_version`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The version and the status are written.
    Done,
    /// Nothing written: the status is no longer the one expected.
    Moved,
    /// Nothing written: another replica has taken the lead since the
    /// writer's fence was taken.
    Fenced,
}

/// One stored resource: its spec and status as JSON documents.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub namespace: String,
    pub name: String,
    pub spec: Value,
    pub status: Value,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A stored bearer token: only the sha256 of the secret is kept.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRecord {
    pub id: String,
    pub name: String,
    pub hash: String,
    pub namespaces: Vec<String>,
    pub admin: bool,
    pub created_at: DateTime<Utc>,
}

/// Durable state. Every method is one transaction; nothing above this trait
/// knows which database is running.
#[async_trait]
pub trait Store: VersionStore + SecretStore + Send + Sync + 'static {
    /// Inserts a new resource; `Error::Conflict` when the name is taken.
    async fn create(&self, kind: Kind, record: &Record) -> Result<()>;
    /// One resource; [`unreadable`] when it does not read back.
    async fn get(&self, kind: Kind, namespace: &str, name: &str) -> Result<Option<Record>>;
    /// Resources of one namespace, ordered by name; records that do not
    /// read back are left out (and logged), so one cannot stop a list.
    async fn list(&self, kind: Kind, namespace: &str) -> Result<Vec<Record>>;
    /// Resources of every namespace, ordered by namespace and name; records
    /// that do not read back are left out (and logged).
    async fn list_all(&self, kind: Kind) -> Result<Vec<Record>>;
    /// The namespaces that hold any resource, by name, at most `limit`.
    async fn namespaces(&self, limit: i64) -> Result<Vec<String>>;
    /// Replaces spec and status; `Error::NotFound` when it is gone.
    async fn update(&self, kind: Kind, record: &Record) -> Result<()>;
    /// Replaces only the status (spec edits and status updates never overwrite each other).
    async fn update_status(&self, kind: Kind, namespace: &str, name: &str, status: &Value) -> Result<()>;
    /// Replaces only the spec.
    async fn update_spec(&self, kind: Kind, namespace: &str, name: &str, spec: &Value) -> Result<()>;
    /// Returns whether a resource was deleted (whether or not it reads back).
    async fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Result<bool>;

    /// Sets the status only if it still equals `expected` (compare-and-set):
    /// how several servers agree on who fires a cron tick.
    async fn swap_status(&self, kind: Kind, namespace: &str, name: &str, expected: &Value, new: &Value)
        -> Result<bool>;

    /// [`Store::swap_status`], and sets the record's detail (a large part
    /// kept out of what lists read: a job's result) in the same write.
    async fn swap_status_and_detail(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        expected: &Value,
        new: &Value,
        detail: Option<&str>,
    ) -> Result<bool>;

    /// The record's detail (see [`Store::swap_status_and_detail`]).
    async fn detail(&self, kind: Kind, namespace: &str, name: &str) -> Result<Option<String>>;

    /// Records a built version and makes `status` the function's status in
    /// one transaction, if its status still equals `expected`
    /// (compare-and-set, as [`Store::swap_status`]) and, with a `fence`
    /// (several replicas), the leader epoch is still that one (the writer
    /// still leads: [`crate::cluster::Leadership::fence`]); otherwise
    /// nothing is written. A version already recorded stays as it was
    /// ([`VersionStore::put_version`]).
    async fn record_version(
        &self,
        version: &VersionRecord,
        expected: &Value,
        status: &Value,
        fence: Option<i64>,
    ) -> Result<Recorded>;

    /// Appends records already cut into chunks ([`chunks::chunks_of`]) in
    /// one transaction.
    async fn insert_chunks(&self, chunks: &[chunks::Chunk]) -> Result<()>;
    /// A function's invocations, newest first, older than `before` (an
    /// id): at most `limit` of them and `max_bytes` of their JSON, at least
    /// one ([`chunks::Newest`]).
    async fn list_invocations(
        &self,
        namespace: &str,
        function: &str,
        before: Option<&str>,
        limit: i64,
        max_bytes: usize,
    ) -> Result<chunks::RecordPage>;
    /// Deletes records started before `cutoff`, and per namespace all but
    /// the newest `keep` records and the chunks past the newest `max_bytes`
    /// of stored data; returns how many went.
    async fn prune_invocations(
        &self,
        cutoff: DateTime<Utc>,
        keep: i64,
        keep_per_function: i64,
        max_bytes: i64,
    ) -> Result<u64>;

    async fn create_token(&self, token: &TokenRecord) -> Result<()>;
    async fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>>;
    async fn list_tokens(&self) -> Result<Vec<TokenRecord>>;
    async fn delete_token(&self, id: &str) -> Result<bool>;
}

/// The error for a stored resource that does not read back (written by an
/// older version, or damaged): it names the resource and the way out.
pub fn unreadable(kind: Kind, namespace: &str, name: &str, why: impl std::fmt::Display) -> crate::Error {
    crate::Error::Internal(format!(
        "the stored {} {name:?} in namespace {namespace:?} cannot be read ({why}); delete it and create it again",
        kind.as_str()
    ))
}

/// Now, at the precision the store keeps (microseconds), so a record reads
/// back exactly as it was written.
pub fn now() -> DateTime<Utc> {
    use chrono::SubsecRound;
    Utc::now().trunc_subsecs(6)
}

/// Opens the queue of asynchronous events in the store named by `url`
/// (after [`open`] has migrated it).
pub async fn open_events(url: &str) -> anyhow::Result<Arc<dyn events::EventStore>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(events::PostgresEvents::connect(url).await?))
    } else {
        Ok(Arc::new(events::SqliteEvents::connect(url).await?))
    }
}

/// A SQLite store in a directory of its own under the temp dir, for
/// tests: the store and the directory, to remove once done.
#[cfg(test)]
pub async fn open_in_temp(tag: &str) -> (Arc<dyn Store>, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("sless-{tag}-{:016x}", rand::random::<u64>()));
    let store = open(&format!("sqlite://{}/t.db", dir.display())).await.unwrap();
    (store, dir)
}

/// Opens (creating where needed) and migrates the store named by `url`.
pub async fn open(url: &str) -> anyhow::Result<Arc<dyn Store>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(PostgresStore::connect(url).await?))
    } else {
        Ok(Arc::new(SqliteStore::connect(url).await?))
    }
}
