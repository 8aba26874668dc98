//! The durable queue of asynchronous events, behind its own small trait:
//! stored in groups before the caller's 202 (`insert`), claimed in bounded
//! pages under a lease (`claim`; on PostgreSQL with `FOR UPDATE SKIP
//! LOCKED`, so replicas never take the same row), finished in groups. One
//! implementation per database; the SQL they share is here.

#[macro_use]
mod sql;
mod postgres;
mod sqlite;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use sless_api::{AsyncInvocation, AsyncStatus};

use crate::error::{Error, Result};
#[cfg(doc)]
use crate::store::page::Fitting;
use crate::store::page::Page;

pub use postgres::PostgresEvents;
pub use sqlite::SqliteEvents;

/// An event as it is accepted. Times are microseconds since the epoch.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub id: String,
    pub namespace: String,
    pub function: String,
    pub request_id: String,
    pub method: String,
    pub path: String,
    pub query: String,
    /// The request's headers as a JSON array of `[name, value]` pairs.
    pub headers: String,
    pub body: bytes::Bytes,
    pub created_at: i64,
    /// For an event carrying another's outcome to a function destination.
    pub source: Option<String>,
    /// Stored parked (see [`Finish::parked`]) until then, when its
    /// function cannot run as it is accepted; None: due at once.
    pub parked_until: Option<i64>,
}

/// An event taken for an attempt; `attempts` counts this one.
#[derive(Debug, Clone)]
pub struct ClaimedEvent {
    pub event: NewEvent,
    pub attempts: u32,
    /// The claim's token: a finish or renewal with another token changes nothing.
    pub claim: String,
}

/// What became of a claimed event.
#[derive(Debug, Clone)]
pub struct Finish {
    pub id: String,
    pub claim: String,
    pub status: AsyncStatus,
    pub attempts: u32,
    /// Queued again: when the next attempt may start.
    pub due_at: i64,
    pub succeeded_attempt: Option<u32>,
    pub last_error: Option<String>,
    pub last_status: Option<u16>,
    pub destination_error: Option<String>,
    /// An event for a function destination, stored with the outcome.
    pub then: Option<NewEvent>,
    /// Queued to wait for its function to be able to run (it is off, or
    /// has no ready version): taken again when `wake` is called for the
    /// function, or at `due_at` (when it would expire), not polled.
    pub parked: bool,
}

/// Events waiting (queued or running) for one function.
#[derive(Debug, Clone, PartialEq)]
pub struct Backlog {
    pub namespace: String,
    pub function: String,
    pub events: u64,
    /// What they hold as stored: body, headers, path and query.
    pub bytes: u64,
    /// When the oldest one was accepted (microseconds).
    pub oldest: i64,
}

#[async_trait]
pub trait EventStore: Send + Sync + 'static {
    /// Stores events in one transaction: all durable, or none.
    async fn insert(&self, events: &[NewEvent]) -> Result<()>;
    /// The namespaces with an event whose time has come (queued and due, or
    /// running with an expired lease), by name.
    async fn due_namespaces(&self, now: i64) -> Result<Vec<String>>;
    /// Takes at most `limit` of `namespace`'s events whose time has come,
    /// oldest due first, marks them running until `lease_until` under
    /// `claim`, and counts an attempt for each.
    async fn claim(
        &self,
        namespace: &str,
        now: i64,
        lease_until: i64,
        limit: i64,
        claim: &str,
    ) -> Result<Vec<ClaimedEvent>>;
    /// Extends the leases of events still held under their claims.
    async fn renew(&self, held: &[(String, String)], lease_until: i64) -> Result<()>;
    /// Writes outcomes (and destination events) in one transaction; an
    /// outcome whose claim was taken over changes nothing.
    async fn finish(&self, done: &[Finish]) -> Result<()>;
    /// Puts every running event back in the queue (a single server's start:
    /// nothing can be running elsewhere). The attempt it was counted for
    /// stays counted.
    async fn release_all(&self, now: i64) -> Result<u64>;
    /// Puts events still held under their claims back in the queue, due at
    /// `now`, without counting the attempt they were taken for (a replica
    /// shutting down with attempts under way); `why` becomes their last error.
    async fn release(&self, held: &[(String, String)], now: i64, why: &str) -> Result<()>;
    async fn get(&self, namespace: &str, function: &str, id: &str) -> Result<Option<AsyncInvocation>>;
    /// A function's events, newest first, older than `before` (an id): at
    /// most `limit` of them and `max_bytes` of their JSON, at least one
    /// ([`Fitting`]). Read a row at a time: what it holds is the page and
    /// the first record past it.
    async fn list(
        &self,
        namespace: &str,
        function: &str,
        status: Option<AsyncStatus>,
        before: Option<&str>,
        limit: i64,
        max_bytes: usize,
    ) -> Result<Page<AsyncInvocation>>;
    /// Waiting events per function.
    async fn backlog(&self) -> Result<Vec<Backlog>>;
    /// Deletes finished events last changed before `before`; returns how many.
    async fn prune(&self, before: i64) -> Result<u64>;
    /// Makes a function's parked events accepted before `created_before`
    /// due at `now`; returns how many.
    async fn wake(&self, namespace: &str, function: &str, created_before: i64, now: i64) -> Result<u64>;
}

/// Columns of a record read back (`get`, `list`).
const RECORD_COLUMNS: &str = "id, namespace, function, request_id, status, attempts, succeeded_attempt, \
     last_error, last_status, due_at, destination_error, source, created_at, updated_at";

/// Columns of a claimed event (the `RETURNING` of a claim).
const CLAIM_COLUMNS: &str =
    "id, namespace, function, request_id, method, path, query, headers, body, attempts, created_at, source, claim";

const INSERT: &str = "INSERT INTO async_events (id, namespace, function, request_id, method, path, query, headers, \
     body, status, attempts, due_at, created_at, updated_at, source, claim) ";

/// `due_namespaces`' statement (`$1` now): it steps from one namespace to
/// the next through the index `async_events_due_by_namespace`, and looks at
/// each one's earliest due event, so its cost grows with the namespaces
/// waiting, not with their events.
const DUE_NAMESPACES: &str = "WITH RECURSIVE names(name) AS ( \
     SELECT MIN(namespace) FROM async_events WHERE status IN ('queued', 'running') \
     UNION ALL SELECT (SELECT MIN(namespace) FROM async_events \
     WHERE status IN ('queued', 'running') AND namespace > names.name) FROM names WHERE names.name IS NOT NULL) \
     SELECT name FROM names WHERE name IS NOT NULL AND (SELECT MIN(due_at) FROM async_events \
     WHERE status IN ('queued', 'running') AND namespace = names.name) <= $1";

/// A parked event's `claim` (a queued event's is otherwise NULL).
const PARKED: &str = "parked";

const FINISH: &str = "UPDATE async_events SET status = $1, attempts = $2, due_at = $3, succeeded_attempt = $4, \
     last_error = $5, last_status = $6, destination_error = $7, updated_at = $8, claim = $12, \
     body = CASE WHEN $1 IN ('succeeded', 'failed') THEN $9 ELSE body END \
     WHERE id = $10 AND claim = $11";

/// Uses the partial index `async_events_parked`, so it costs nothing for a
/// function with nothing parked.
const WAKE: &str = "UPDATE async_events SET due_at = $1, updated_at = $1, claim = NULL \
     WHERE namespace = $2 AND function = $3 AND status = 'queued' AND claim = 'parked' AND created_at < $4";

const BACKLOG: &str = "SELECT namespace, function, COUNT(*) AS events, MIN(created_at) AS oldest, \
     SUM(COALESCE(LENGTH(body), 0) + LENGTH(headers) + LENGTH(path) + LENGTH(query)) AS bytes FROM async_events \
     WHERE status IN ('queued', 'running') GROUP BY namespace, function";

/// Microseconds since the epoch as a time.
pub fn time_of(micros: i64) -> DateTime<Utc> {
    Utc.timestamp_micros(micros).single().unwrap_or_default()
}

/// Now in microseconds since the epoch.
pub fn now_micros() -> i64 {
    Utc::now().timestamp_micros()
}

/// A record from a row of [`RECORD_COLUMNS`].
fn record<'r, R>(row: &'r R) -> Result<AsyncInvocation>
where
    R: sqlx::Row,
    &'static str: sqlx::ColumnIndex<R>,
    String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<String>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<i64>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let status: String = row.try_get("status")?;
    let status = AsyncStatus::parse(&status)
        .ok_or_else(|| Error::internal(format!("bad async event status {status:?} in store")))?;
    let due_at: i64 = row.try_get("due_at")?;
    Ok(AsyncInvocation {
        id: row.try_get("id")?,
        namespace: row.try_get("namespace")?,
        function: row.try_get("function")?,
        request_id: row.try_get("request_id")?,
        status,
        attempts: row.try_get::<i64, _>("attempts")? as u32,
        succeeded_attempt: row.try_get::<Option<i64>, _>("succeeded_attempt")?.map(|n| n as u32),
        last_error: row.try_get("last_error")?,
        last_status: row.try_get::<Option<i64>, _>("last_status")?.map(|n| n as u16),
        next_attempt_at: (status == AsyncStatus::Queued).then(|| time_of(due_at)),
        destination_error: row.try_get("destination_error")?,
        source: row.try_get("source")?,
        created_at: time_of(row.try_get("created_at")?),
        updated_at: time_of(row.try_get("updated_at")?),
    })
}

/// A claimed event from a row of [`CLAIM_COLUMNS`].
fn claimed<'r, R>(row: &'r R) -> Result<ClaimedEvent>
where
    R: sqlx::Row,
    &'static str: sqlx::ColumnIndex<R>,
    String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<String>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Vec<u8>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    Ok(ClaimedEvent {
        event: NewEvent {
            id: row.try_get("id")?,
            namespace: row.try_get("namespace")?,
            function: row.try_get("function")?,
            request_id: row.try_get("request_id")?,
            method: row.try_get("method")?,
            path: row.try_get("path")?,
            query: row.try_get("query")?,
            headers: row.try_get("headers")?,
            body: row.try_get::<Vec<u8>, _>("body")?.into(),
            created_at: row.try_get("created_at")?,
            source: row.try_get("source")?,
            parked_until: None,
        },
        attempts: row.try_get::<i64, _>("attempts")? as u32,
        claim: row.try_get::<Option<String>, _>("claim")?.unwrap_or_default(),
    })
}

/// A waiting count from a row of [`BACKLOG`].
fn backlog<'r, R>(row: &'r R) -> Result<Backlog>
where
    R: sqlx::Row,
    &'static str: sqlx::ColumnIndex<R>,
    String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    Ok(Backlog {
        namespace: row.try_get("namespace")?,
        function: row.try_get("function")?,
        events: row.try_get::<i64, _>("events")?.max(0) as u64,
        bytes: row.try_get::<i64, _>("bytes")?.max(0) as u64,
        oldest: row.try_get("oldest")?,
    })
}

/// `list`'s statement: `$1` namespace, `$2` function, `$3` before, `$4`
/// how many rows at most (the limit, and one to tell whether more are
/// left), and `$5` the status when one is asked for.
fn list_sql(with_status: bool) -> String {
    format!(
        "SELECT {RECORD_COLUMNS} FROM async_events WHERE namespace = $1 AND function = $2 AND id < $3 {} \
         ORDER BY id DESC LIMIT $4",
        if with_status { "AND status = $5" } else { "" }
    )
}

/// Rows per multi-row INSERT: 16 parameters each, below both databases' limits.
const INSERT_ROWS: usize = 1000;
