//! The SQL both stores share. The statements are portable (`$n` parameters in
//! order, TEXT columns), so one macro body implements [`super::Store`] for each
//! pool type instead of writing every query twice.

/// Implements `Store` and `migrate` for a struct with a `pool` field.
macro_rules! sql_store {
    ($store:ident) => {
        use async_trait::async_trait;
        use chrono::{DateTime, Utc};
        use sqlx::Row;

        use $crate::error::{Error, Result};
        use $crate::store::{Kind, Record, Store, TokenRecord};
        use sless_api::{InvocationRecord, LogLine};

        fn parse_time(s: &str) -> Result<DateTime<Utc>> {
            DateTime::parse_from_rfc3339(s)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| Error::internal(format!("bad timestamp {s:?} in store: {e}")))
        }

        fn time_text(t: &DateTime<Utc>) -> String {
            t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
        }

        fn json_text(v: &serde_json::Value) -> String {
            v.to_string()
        }

        fn parse_json(s: &str) -> Result<serde_json::Value> {
            serde_json::from_str(s).map_err(|e| Error::internal(format!("bad JSON in store: {e}")))
        }

        impl $store {
            /// Applies every migration newer than the recorded version.
            async fn migrate(&self, migrations: super::migrations::Migrations) -> anyhow::Result<()> {
                sqlx::raw_sql(
                    "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, applied_at TEXT NOT NULL)",
                )
                .execute(&self.pool)
                .await?;
                for (version, sql) in migrations {
                    let mut tx = self.pool.begin().await?;
                    let done: Option<i64> =
                        sqlx::query_scalar("SELECT version FROM schema_migrations WHERE version = $1")
                            .bind(*version)
                            .fetch_optional(&mut *tx)
                            .await?;
                    if done.is_some() {
                        continue;
                    }
                    sqlx::raw_sql(sql).execute(&mut *tx).await?;
                    sqlx::query("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)")
                        .bind(*version)
                        .bind(time_text(&Utc::now()))
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    tracing::info!(version, "applied database migration");
                }
                Ok(())
            }

            fn record(row: &<$crate::store::sql::sqlx_db!($store) as sqlx::Database>::Row) -> Result<Record> {
                Ok(Record {
                    namespace: row.try_get("namespace")?,
                    name: row.try_get("name")?,
                    spec: parse_json(row.try_get::<&str, _>("spec")?)?,
                    status: parse_json(row.try_get::<&str, _>("status")?)?,
                    created_at: parse_time(row.try_get::<&str, _>("created_at")?)?,
                    updated_at: parse_time(row.try_get::<&str, _>("updated_at")?)?,
                })
            }

            /// Sets one JSON column (`spec` or `status`) and `updated_at`.
            async fn update_column(
                &self,
                column: &'static str,
                kind: Kind,
                namespace: &str,
                name: &str,
                value: &serde_json::Value,
            ) -> Result<()> {
                let sql = format!(
                    "UPDATE resources SET {column} = $1, updated_at = $2 WHERE kind = $3 AND namespace = $4 AND name = $5"
                );
                let done = sqlx::query(&sql)
                    .bind(json_text(value))
                    .bind(time_text(&$crate::store::now()))
                    .bind(kind.as_str())
                    .bind(namespace)
                    .bind(name)
                    .execute(&self.pool)
                    .await?;
                if done.rows_affected() == 0 {
                    return Err(Error::NotFound(format!(
                        "{} {:?} not found in namespace {:?}",
                        kind.as_str(),
                        name,
                        namespace
                    )));
                }
                Ok(())
            }

            fn invocation(row: &<$crate::store::sql::sqlx_db!($store) as sqlx::Database>::Row) -> Result<InvocationRecord> {
                let logs: Vec<LogLine> = serde_json::from_str(row.try_get::<&str, _>("logs")?)
                    .map_err(|e| Error::internal(format!("bad invocation logs in store: {e}")))?;
                Ok(InvocationRecord {
                    id: row.try_get("id")?,
                    namespace: row.try_get("namespace")?,
                    function: row.try_get("function")?,
                    version: row.try_get::<i64, _>("version")? as u64,
                    trigger: row.try_get("trigger")?,
                    request_id: row.try_get("request_id")?,
                    started_at: parse_time(row.try_get::<&str, _>("started_at")?)?,
                    duration_ms: row.try_get("duration_ms")?,
                    status: row.try_get("status")?,
                    error: row.try_get("error")?,
                    bytes_in: row.try_get::<i64, _>("bytes_in")? as u64,
                    bytes_out: row.try_get::<i64, _>("bytes_out")? as u64,
                    cold_start: row.try_get("cold_start")?,
                    logs,
                    logs_truncated: row.try_get("logs_truncated")?,
                })
            }

            fn token(row: &<$crate::store::sql::sqlx_db!($store) as sqlx::Database>::Row) -> Result<TokenRecord> {
                let namespaces: String = row.try_get("namespaces")?;
                Ok(TokenRecord {
                    id: row.try_get("id")?,
                    name: row.try_get("name")?,
                    hash: row.try_get("hash")?,
                    namespaces: serde_json::from_str(&namespaces)
                        .map_err(|e| Error::internal(format!("bad token namespaces in store: {e}")))?,
                    admin: row.try_get("admin")?,
                    created_at: parse_time(row.try_get::<&str, _>("created_at")?)?,
                })
            }
        }


        /// One multi-row INSERT of `chunk`.
        async fn insert_rows(
            tx: &mut sqlx::Transaction<'_, $crate::store::sql::sqlx_db!($store)>,
            chunk: &[InvocationRecord],
        ) -> Result<()> {
            let mut query = sqlx::QueryBuilder::new(
                "INSERT INTO invocations (id, namespace, function, version, trigger, request_id, started_at, \
                 duration_ms, status, error, bytes_in, bytes_out, cold_start, logs, logs_truncated) ",
            );
            query.push_values(chunk, |mut row, r| {
                row.push_bind(r.id.clone())
                    .push_bind(r.namespace.clone())
                    .push_bind(r.function.clone())
                    .push_bind(r.version as i64)
                    .push_bind(r.trigger.clone())
                    .push_bind(r.request_id.clone())
                    .push_bind(time_text(&r.started_at))
                    .push_bind(r.duration_ms)
                    .push_bind(r.status.clone())
                    .push_bind(r.error.clone())
                    .push_bind(r.bytes_in as i64)
                    .push_bind(r.bytes_out as i64)
                    .push_bind(r.cold_start)
                    .push_bind(serde_json::to_string(&r.logs).unwrap_or_else(|_| "[]".into()))
                    .push_bind(r.logs_truncated);
            });
            query.build().persistent(true).execute(&mut **tx).await?;
            Ok(())
        }

        /// Rows per statement for SQLite (a statement per size is cached).
        const SQLITE_ROWS: usize = 64;

        const RESOURCE_COLUMNS: &str = "namespace, name, spec, status, created_at, updated_at";

        #[async_trait]
        impl Store for $store {
            async fn create(&self, kind: Kind, r: &Record) -> Result<()> {
                let result = sqlx::query(
                    "INSERT INTO resources (kind, namespace, name, spec, status, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(kind.as_str())
                .bind(&r.namespace)
                .bind(&r.name)
                .bind(json_text(&r.spec))
                .bind(json_text(&r.status))
                .bind(time_text(&r.created_at))
                .bind(time_text(&r.updated_at))
                .execute(&self.pool)
                .await;
                match result {
                    Ok(_) => Ok(()),
                    Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Err(Error::Conflict(format!(
                        "{} {:?} already exists in namespace {:?}",
                        kind.as_str(),
                        r.name,
                        r.namespace
                    ))),
                    Err(e) => Err(e.into()),
                }
            }

            async fn get(&self, kind: Kind, namespace: &str, name: &str) -> Result<Option<Record>> {
                let sql = format!(
                    "SELECT {RESOURCE_COLUMNS} FROM resources WHERE kind = $1 AND namespace = $2 AND name = $3"
                );
                let row = sqlx::query(&sql)
                    .bind(kind.as_str())
                    .bind(namespace)
                    .bind(name)
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref().map(Self::record).transpose()
            }

            async fn list(&self, kind: Kind, namespace: &str) -> Result<Vec<Record>> {
                let sql = format!(
                    "SELECT {RESOURCE_COLUMNS} FROM resources WHERE kind = $1 AND namespace = $2 ORDER BY name"
                );
                let rows = sqlx::query(&sql)
                    .bind(kind.as_str())
                    .bind(namespace)
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map(Self::record).collect()
            }

            async fn list_all(&self, kind: Kind) -> Result<Vec<Record>> {
                let sql = format!(
                    "SELECT {RESOURCE_COLUMNS} FROM resources WHERE kind = $1 ORDER BY namespace, name"
                );
                let rows = sqlx::query(&sql).bind(kind.as_str()).fetch_all(&self.pool).await?;
                rows.iter().map(Self::record).collect()
            }

            async fn update(&self, kind: Kind, r: &Record) -> Result<()> {
                let done = sqlx::query(
                    "UPDATE resources SET spec = $1, status = $2, updated_at = $3 \
                     WHERE kind = $4 AND namespace = $5 AND name = $6",
                )
                .bind(json_text(&r.spec))
                .bind(json_text(&r.status))
                .bind(time_text(&r.updated_at))
                .bind(kind.as_str())
                .bind(&r.namespace)
                .bind(&r.name)
                .execute(&self.pool)
                .await?;
                if done.rows_affected() == 0 {
                    return Err(Error::NotFound(format!(
                        "{} {:?} not found in namespace {:?}",
                        kind.as_str(),
                        r.name,
                        r.namespace
                    )));
                }
                Ok(())
            }

            async fn update_status(&self, kind: Kind, namespace: &str, name: &str, status: &serde_json::Value) -> Result<()> {
                self.update_column("status", kind, namespace, name, status).await
            }

            async fn update_spec(&self, kind: Kind, namespace: &str, name: &str, spec: &serde_json::Value) -> Result<()> {
                self.update_column("spec", kind, namespace, name, spec).await
            }

            async fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Result<bool> {
                let done = sqlx::query("DELETE FROM resources WHERE kind = $1 AND namespace = $2 AND name = $3")
                    .bind(kind.as_str())
                    .bind(namespace)
                    .bind(name)
                    .execute(&self.pool)
                    .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn swap_status(
                &self,
                kind: Kind,
                namespace: &str,
                name: &str,
                expected: &serde_json::Value,
                new: &serde_json::Value,
            ) -> Result<bool> {
                let done = sqlx::query(
                    "UPDATE resources SET status = $1, updated_at = $2 \
                     WHERE kind = $3 AND namespace = $4 AND name = $5 AND status = $6",
                )
                .bind(json_text(new))
                .bind(time_text(&$crate::store::now()))
                .bind(kind.as_str())
                .bind(namespace)
                .bind(name)
                .bind(json_text(expected))
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn insert_invocations(&self, records: &[InvocationRecord]) -> Result<()> {
                // Rows per statement: 16 parameters each stays under both
                // databases' parameter limits.
                const ROWS: usize = 1000;
                let mut tx = self.pool.begin().await?;
                if <$crate::store::sql::sqlx_db!($store) as sqlx::Database>::NAME == "SQLite" {
                    // In-process behind one worker thread per connection:
                    // statements of a fixed row count are prepared once and
                    // reused; the rest go one row at a time.
                    let mut chunks = records.chunks_exact(SQLITE_ROWS);
                    for chunk in &mut chunks {
                        insert_rows(&mut tx, chunk).await?;
                    }
                    for record in chunks.remainder() {
                        insert_rows(&mut tx, std::slice::from_ref(record)).await?;
                    }
                } else {
                    // Over the network: as few round trips as possible.
                    for chunk in records.chunks(ROWS) {
                        insert_rows(&mut tx, chunk).await?;
                    }
                }
                tx.commit().await?;
                Ok(())
            }

            async fn list_invocations(
                &self,
                namespace: &str,
                function: &str,
                before: Option<&str>,
                limit: i64,
            ) -> Result<Vec<InvocationRecord>> {
                const COLUMNS: &str = "id, namespace, function, version, trigger, request_id, started_at, duration_ms, \
                                       status, error, bytes_in, bytes_out, cold_start, logs, logs_truncated";
                let rows = match before {
                    Some(before) => {
                        let sql = format!(
                            "SELECT {COLUMNS} FROM invocations WHERE namespace = $1 AND function = $2 \
                             AND id < $3 ORDER BY id DESC LIMIT $4"
                        );
                        sqlx::query(&sql).bind(namespace).bind(function).bind(before).bind(limit).fetch_all(&self.pool).await?
                    }
                    None => {
                        let sql = format!(
                            "SELECT {COLUMNS} FROM invocations WHERE namespace = $1 AND function = $2 \
                             ORDER BY id DESC LIMIT $3"
                        );
                        sqlx::query(&sql).bind(namespace).bind(function).bind(limit).fetch_all(&self.pool).await?
                    }
                };
                rows.iter().map(Self::invocation).collect()
            }

            async fn prune_invocations(&self, cutoff: DateTime<Utc>, keep: i64) -> Result<u64> {
                // Ids start with the start time in hex microseconds.
                let cutoff_id = format!("{:016x}", cutoff.timestamp_micros().max(0));
                let old = sqlx::query("DELETE FROM invocations WHERE id < $1")
                    .bind(cutoff_id)
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
                let surplus = sqlx::query(
                    "DELETE FROM invocations WHERE id <= \
                     (SELECT id FROM invocations ORDER BY id DESC LIMIT 1 OFFSET $1)",
                )
                .bind(keep)
                .execute(&self.pool)
                .await?
                .rows_affected();
                Ok(old + surplus)
            }

            async fn create_token(&self, t: &TokenRecord) -> Result<()> {
                let namespaces = serde_json::to_string(&t.namespaces).map_err(Error::internal)?;
                sqlx::query(
                    "INSERT INTO tokens (id, name, hash, namespaces, admin, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(&t.id)
                .bind(&t.name)
                .bind(&t.hash)
                .bind(namespaces)
                .bind(t.admin)
                .bind(time_text(&t.created_at))
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>> {
                let row = sqlx::query("SELECT id, name, hash, namespaces, admin, created_at FROM tokens WHERE hash = $1")
                    .bind(hash)
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref().map(Self::token).transpose()
            }

            async fn list_tokens(&self) -> Result<Vec<TokenRecord>> {
                let rows = sqlx::query("SELECT id, name, hash, namespaces, admin, created_at FROM tokens ORDER BY created_at, id")
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map(Self::token).collect()
            }

            async fn delete_token(&self, id: &str) -> Result<bool> {
                let done = sqlx::query("DELETE FROM tokens WHERE id = $1").bind(id).execute(&self.pool).await?;
                Ok(done.rows_affected() > 0)
            }
        }
    };
}

/// The sqlx database type behind each store.
macro_rules! sqlx_db {
    (SqliteStore) => {
        sqlx::Sqlite
    };
    (PostgresStore) => {
        sqlx::Postgres
    };
}

pub(crate) use {sql_store, sqlx_db};
