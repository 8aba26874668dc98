//! The event queue's SQL, one body for both pools: the statements are
//! portable (`$n` parameters in order), and only the claim's row locking
//! differs (PostgreSQL's replicas skip each other's locked rows; SQLite has
//! one server and no row locks).

/// Implements `EventStore` for `$store` (a struct with a `pool` field of
/// database `$db` for reads and a `writes` one for every statement that
/// writes); `$lock` ends the claim's inner SELECT.
macro_rules! event_store {
    ($store:ident, $db:ty, $lock:expr) => {
        use async_trait::async_trait;
        use sless_api::{AsyncInvocation, AsyncStatus};

        use super::{Backlog, ClaimedEvent, EventStore, Finish, NewEvent};
        use crate::error::Result;
        use crate::store::page::{Fitting, Page};

        #[async_trait]
        impl EventStore for $store {
            async fn insert(&self, events: &[NewEvent]) -> Result<()> {
                if events.len() <= super::INSERT_ROWS {
                    // One statement is its own transaction: a round trip
                    // to the database, not three.
                    insert_statement(events).build().execute(&self.writes).await?;
                    return Ok(());
                }
                let mut tx = self.writes.begin().await?;
                for group in events.chunks(super::INSERT_ROWS) {
                    insert_statement(group).build().execute(&mut *tx).await?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn due_namespaces(&self, now: i64) -> Result<Vec<String>> {
                // On the writing connection, as the claim that follows: both
                // see the same commits, and on SQLite reads this frequent
                // on the other connections would hold back checkpoints.
                let rows: Vec<(String,)> = sqlx::query_as(super::DUE_NAMESPACES)
                    .bind(now)
                    .fetch_all(&self.writes)
                    .await?;
                Ok(rows.into_iter().map(|(name,)| name).collect())
            }

            async fn claim(
                &self,
                namespace: &str,
                now: i64,
                lease_until: i64,
                limit: i64,
                claim: &str,
            ) -> Result<Vec<ClaimedEvent>> {
                let sql = format!(
                    "UPDATE async_events SET status = 'running', due_at = $1, claim = $2, attempts = attempts + 1, updated_at = $3 \
                     WHERE id IN (SELECT id FROM async_events WHERE namespace = $5 AND status IN ('queued', 'running') \
                     AND due_at <= $3 ORDER BY due_at LIMIT $4{}) RETURNING {}",
                    $lock,
                    super::CLAIM_COLUMNS
                );
                let rows = sqlx::query(&sql)
                    .bind(lease_until)
                    .bind(claim)
                    .bind(now)
                    .bind(limit)
                    .bind(namespace)
                    .fetch_all(&self.writes)
                    .await?;
                rows.iter().map(super::claimed).collect()
            }

            async fn renew(&self, held: &[(String, String)], lease_until: i64) -> Result<()> {
                let mut tx = self.writes.begin().await?;
                for (id, claim) in held {
                    sqlx::query("UPDATE async_events SET due_at = $1 WHERE id = $2 AND claim = $3 AND status = 'running'")
                        .bind(lease_until)
                        .bind(id)
                        .bind(claim)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn finish(&self, done: &[Finish]) -> Result<()> {
                let mut tx = self.writes.begin().await?;
                let now = super::now_micros();
                for f in done {
                    let updated = sqlx::query(super::FINISH)
                        .bind(f.status.as_str())
                        .bind(i64::from(f.attempts))
                        .bind(f.due_at)
                        .bind(f.succeeded_attempt.map(i64::from))
                        .bind(&f.last_error)
                        .bind(f.last_status.map(i64::from))
                        .bind(&f.destination_error)
                        .bind(now)
                        .bind(&[][..] as &[u8])
                        .bind(&f.id)
                        .bind(&f.claim)
                        .bind(f.parked.then_some(super::PARKED))
                        .execute(&mut *tx)
                        .await?;
                    if let (1, Some(then)) = (updated.rows_affected(), &f.then) {
                        insert_statement(std::slice::from_ref(then))
                            .build()
                            .execute(&mut *tx)
                            .await?;
                    }
                }
                tx.commit().await?;
                Ok(())
            }

            async fn release(&self, held: &[(String, String)], now: i64, why: &str) -> Result<()> {
                let mut tx = self.writes.begin().await?;
                for (id, claim) in held {
                    sqlx::query(
                        "UPDATE async_events SET status = 'queued', due_at = $1, claim = NULL, attempts = attempts - 1, \
                         last_error = $2, updated_at = $1 WHERE id = $3 AND claim = $4 AND status = 'running'",
                    )
                    .bind(now)
                    .bind(why)
                    .bind(id)
                    .bind(claim)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn release_all(&self, now: i64) -> Result<u64> {
                let done = sqlx::query(
                    "UPDATE async_events SET status = 'queued', due_at = $1, claim = NULL, updated_at = $1 WHERE status = 'running'",
                )
                .bind(now)
                .execute(&self.writes)
                .await?;
                Ok(done.rows_affected())
            }

            async fn get(&self, namespace: &str, function: &str, id: &str) -> Result<Option<AsyncInvocation>> {
                let sql = format!(
                    "SELECT {} FROM async_events WHERE id = $1 AND namespace = $2 AND function = $3",
                    super::RECORD_COLUMNS
                );
                let row = sqlx::query(&sql)
                    .bind(id)
                    .bind(namespace)
                    .bind(function)
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref().map(super::record).transpose()
            }

            async fn list(
                &self,
                namespace: &str,
                function: &str,
                status: Option<AsyncStatus>,
                before: Option<&str>,
                limit: i64,
                max_bytes: usize,
            ) -> Result<Page<AsyncInvocation>> {
                use futures::TryStreamExt;
                let sql = super::list_sql(status.is_some());
                let mut query = sqlx::query(&sql)
                    .bind(namespace)
                    .bind(function)
                    // Ids are lowercase hex: "g" sorts after every one.
                    .bind(before.unwrap_or("g"))
                    .bind(limit.max(0) + 1);
                if let Some(status) = status {
                    query = query.bind(status.as_str());
                }
                let mut page = Fitting::new(limit.max(0) as usize, max_bytes);
                let mut rows = query.fetch(&self.pool);
                while !page.full() {
                    let Some(row) = rows.try_next().await? else {
                        break;
                    };
                    page.add([super::record(&row)?]);
                }
                Ok(page.into_page())
            }

            async fn backlog(&self) -> Result<Vec<Backlog>> {
                let rows = sqlx::query(super::BACKLOG).fetch_all(&self.pool).await?;
                rows.iter().map(super::backlog).collect()
            }

            async fn prune(&self, before: i64) -> Result<u64> {
                let done = sqlx::query("DELETE FROM async_events WHERE status IN ('succeeded', 'failed') AND updated_at < $1")
                    .bind(before)
                    .execute(&self.writes)
                    .await?;
                Ok(done.rows_affected())
            }

            async fn wake(&self, namespace: &str, function: &str, created_before: i64, now: i64) -> Result<u64> {
                let done = sqlx::query(super::WAKE)
                    .bind(now)
                    .bind(namespace)
                    .bind(function)
                    .bind(created_before)
                    .execute(&self.writes)
                    .await?;
                Ok(done.rows_affected())
            }
        }

        /// One multi-row INSERT of `events`, queued.
        fn insert_statement(events: &[NewEvent]) -> sqlx::QueryBuilder<'_, $db> {
            let mut insert = sqlx::QueryBuilder::new(super::INSERT);
            insert.push_values(events, |mut row, e| {
                row.push_bind(&e.id)
                    .push_bind(&e.namespace)
                    .push_bind(&e.function)
                    .push_bind(&e.request_id)
                    .push_bind(&e.method)
                    .push_bind(&e.path)
                    .push_bind(&e.query)
                    .push_bind(&e.headers)
                    .push_bind(&e.body[..])
                    .push_bind(AsyncStatus::Queued.as_str())
                    .push_bind(0i64)
                    .push_bind(e.parked_until.unwrap_or(e.created_at))
                    .push_bind(e.created_at)
                    .push_bind(e.created_at)
                    .push_bind(&e.source)
                    .push_bind(e.parked_until.map(|_| super::PARKED));
            });
            insert
        }
    };
}
