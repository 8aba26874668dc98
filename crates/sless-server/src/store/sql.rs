//! The SQL both stores share. The statements are portable (`$n` parameters in
//! order, TEXT columns), so one macro body implements [`super::Store`] for each
//! pool type instead of writing every query twice.

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};

/// A time as the stores keep it: RFC 3339 in UTC with microseconds (text
/// that sorts as the times do).
pub fn time_text(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// A time the stores kept.
pub fn parse_time(s: &str) -> Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| Error::internal(format!("bad timestamp {s:?} in store: {e}")))
}

/// Implements `Store` and `migrate` for a struct with a `pool` field.
macro_rules! sql_store {
    ($store:ident) => {
        use async_trait::async_trait;
        use chrono::{DateTime, Utc};
        use sqlx::Row;

        use $crate::error::{Error, Result};
        use $crate::store::{Kind, Record, Store, TokenRecord};

        use $crate::store::sql::{parse_time, time_text};

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
                let newest: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM schema_migrations")
                    .fetch_one(&self.pool)
                    .await?;
                super::migrations::refuse_newer(newest, migrations)?;
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

            /// A stored resource; one that does not read back is an error
            /// that names it and says how to get rid of it.
            fn record(kind: Kind, row: &<$crate::store::sql::sqlx_db!($store) as sqlx::Database>::Row) -> Result<Record> {
                let namespace: String = row.try_get("namespace")?;
                let name: String = row.try_get("name")?;
                let decoded = (|| {
                    Ok::<_, Error>((
                        parse_json(row.try_get::<&str, _>("spec")?)?,
                        parse_json(row.try_get::<&str, _>("status")?)?,
                        parse_time(row.try_get::<&str, _>("created_at")?)?,
                        parse_time(row.try_get::<&str, _>("updated_at")?)?,
                    ))
                })();
                match decoded {
                    Ok((spec, status, created_at, updated_at)) => Ok(Record {
                        namespace,
                        name,
                        spec,
                        status,
                        created_at,
                        updated_at,
                    }),
                    Err(e) => Err($crate::store::unreadable(kind, &namespace, &name, e)),
                }
            }

            /// The records of `rows` that read back; the others are
            /// reported in the log and left out, so one bad record cannot
            /// stop a list or the server's start.
            fn readable(kind: Kind, rows: &[<$crate::store::sql::sqlx_db!($store) as sqlx::Database>::Row]) -> Vec<Record> {
                rows.iter()
                    .filter_map(|row| match Self::record(kind, row) {
                        Ok(record) => Some(record),
                        Err(e) => {
                            tracing::warn!(kind = kind.as_str(), error = %e, "left out a stored record that cannot be read");
                            None
                        }
                    })
                    .collect()
            }

            /// Sets one JSON column (`spec` or `status`) and `updated_at`.
            /// Compare-and-set of the status; `detail`, when given, is
            /// written with it (`Some(None)` clears it).
            async fn swap(
                &self,
                kind: Kind,
                namespace: &str,
                name: &str,
                expected: &serde_json::Value,
                new: &serde_json::Value,
                detail: Option<Option<&str>>,
            ) -> Result<bool> {
                let done = sqlx::query(
                    "UPDATE resources SET status = $1, updated_at = $2, \
                     detail = CASE WHEN $8 THEN $7 ELSE detail END \
                     WHERE kind = $3 AND namespace = $4 AND name = $5 AND status = $6",
                )
                .bind(json_text(new))
                .bind(time_text(&$crate::store::now()))
                .bind(kind.as_str())
                .bind(namespace)
                .bind(name)
                .bind(json_text(expected))
                .bind(detail.flatten())
                .bind(detail.is_some())
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() == 1)
            }

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

            /// Stores what is left of a trimmed chunk, or deletes it when nothing is.
            async fn rewrite_chunk(
                tx: &mut sqlx::Transaction<'_, $crate::store::sql::sqlx_db!($store)>,
                row: &<$crate::store::sql::sqlx_db!($store) as sqlx::Database>::Row,
                trimmed: Option<(String, i64, Vec<u8>)>,
            ) -> Result<()> {
                let namespace: &str = row.try_get("namespace")?;
                let function: &str = row.try_get("function")?;
                let last_id: &str = row.try_get("last_id")?;
                match trimmed {
                    Some((first_id, records, data)) => {
                        sqlx::query(
                            "UPDATE invocation_chunks SET first_id = $1, records = $2, data = $3 \
                             WHERE namespace = $4 AND function = $5 AND last_id = $6",
                        )
                        .bind(first_id)
                        .bind(records)
                        .bind(data)
                        .bind(namespace)
                        .bind(function)
                        .bind(last_id)
                        .execute(&mut **tx)
                        .await?;
                    }
                    None => {
                        sqlx::query("DELETE FROM invocation_chunks WHERE namespace = $1 AND function = $2 AND last_id = $3")
                            .bind(namespace)
                            .bind(function)
                            .bind(last_id)
                            .execute(&mut **tx)
                            .await?;
                    }
                }
                Ok(())
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
                row.as_ref().map(|row| Self::record(kind, row)).transpose()
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
                Ok(Self::readable(kind, &rows))
            }

            async fn list_all(&self, kind: Kind) -> Result<Vec<Record>> {
                let sql = format!(
                    "SELECT {RESOURCE_COLUMNS} FROM resources WHERE kind = $1 ORDER BY namespace, name"
                );
                let rows = sqlx::query(&sql).bind(kind.as_str()).fetch_all(&self.pool).await?;
                Ok(Self::readable(kind, &rows))
            }

            async fn namespaces(&self, limit: i64) -> Result<Vec<String>> {
                Ok(sqlx::query_scalar(
                    "SELECT DISTINCT namespace FROM resources ORDER BY namespace LIMIT $1",
                )
                .bind(limit)
                .fetch_all(&self.pool)
                .await?)
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
                self.swap(kind, namespace, name, expected, new, None).await
            }

            async fn swap_status_and_detail(
                &self,
                kind: Kind,
                namespace: &str,
                name: &str,
                expected: &serde_json::Value,
                new: &serde_json::Value,
                detail: Option<&str>,
            ) -> Result<bool> {
                self.swap(kind, namespace, name, expected, new, Some(detail)).await
            }

            async fn detail(&self, kind: Kind, namespace: &str, name: &str) -> Result<Option<String>> {
                let detail: Option<Option<String>> = sqlx::query_scalar(
                    "SELECT detail FROM resources WHERE kind = $1 AND namespace = $2 AND name = $3",
                )
                .bind(kind.as_str())
                .bind(namespace)
                .bind(name)
                .fetch_optional(&self.pool)
                .await?;
                Ok(detail.flatten())
            }

            async fn record_version(
                &self,
                v: &$crate::store::VersionRecord,
                expected: &serde_json::Value,
                status: &serde_json::Value,
                fence: Option<i64>,
            ) -> Result<$crate::store::Recorded> {
                use $crate::store::Recorded;
                let mut tx = self.pool.begin().await?;
                // Several replicas (PostgreSQL): the epoch is read FOR SHARE,
                // so a replica taking the lead waits to bump it until this
                // transaction ends, and one that bumped it first makes this
                // one write nothing. A transaction left open by a writer cut
                // off on the way is ended by the database within the leader
                // lock's session limit, which lets the next leader's bump
                // through.
                if let Some(epoch) = fence {
                    let limit = $crate::cluster::leader::SESSION_IDLE_LIMIT.as_millis();
                    sqlx::query("SELECT set_config('idle_in_transaction_session_timeout', $1, true)")
                        .bind(limit.to_string())
                        .execute(&mut *tx)
                        .await?;
                    let now: i64 = sqlx::query_scalar("SELECT epoch FROM cluster_leader WHERE id = 1 FOR SHARE")
                        .fetch_one(&mut *tx)
                        .await?;
                    if now != epoch {
                        tx.rollback().await?;
                        return Ok(Recorded::Fenced);
                    }
                }
                // The status first (alone, SQLite): a write, so SQLite takes
                // its write lock before anything else in this transaction.
                let swapped = sqlx::query(
                    "UPDATE resources SET status = $1, updated_at = $2 \
                     WHERE kind = 'function' AND namespace = $3 AND name = $4 AND status = $5",
                )
                .bind(json_text(status))
                .bind(time_text(&$crate::store::now()))
                .bind(&v.namespace)
                .bind(&v.function)
                .bind(json_text(expected))
                .execute(&mut *tx)
                .await?;
                if swapped.rows_affected() != 1 {
                    tx.rollback().await?;
                    return Ok(Recorded::Moved);
                }
                $crate::store::versions::insert_version!(v)
                    .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(Recorded::Done)
            }

            async fn insert_chunks(&self, chunks: &[$crate::store::chunks::Chunk]) -> Result<()> {
                // One multi-row INSERT per thousand chunks (6 bound parameters
                // each, well below both databases' limits); each statement is a
                // round trip to the database, for SQLite a wake-up of its worker
                // thread. A batch's chunks are written together or not at all.
                let mut tx = self.pool.begin().await?;
                for group in chunks.chunks(1000) {
                    let mut insert = sqlx::QueryBuilder::new(
                        "INSERT INTO invocation_chunks (namespace, function, first_id, last_id, records, data) ",
                    );
                    insert.push_values(group, |mut row, chunk| {
                        row.push_bind(&chunk.namespace)
                            .push_bind(&chunk.function)
                            .push_bind(&chunk.first_id)
                            .push_bind(&chunk.last_id)
                            .push_bind(chunk.records)
                            .push_bind(&chunk.data);
                    });
                    insert.build().execute(&mut *tx).await?;
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
                max_bytes: usize,
            ) -> Result<$crate::store::chunks::RecordPage> {
                use futures::TryStreamExt;
                let mut newest =
                    $crate::store::chunks::Newest::new(namespace, function, limit.max(0) as usize, max_bytes, before);
                let mut rows = sqlx::query(
                    "SELECT last_id, data FROM invocation_chunks WHERE namespace = $1 AND function = $2 \
                     AND first_id < $3 ORDER BY last_id DESC",
                )
                .bind(namespace)
                .bind(function)
                // Ids are lowercase hex: "g" sorts after every one.
                .bind(before.unwrap_or("g"))
                .fetch(&self.pool);
                while let Some(row) = rows.try_next().await? {
                    if newest.complete(row.try_get::<&str, _>("last_id")?) {
                        break;
                    }
                    newest.add(row.try_get::<&[u8], _>("data")?)?;
                }
                Ok(newest.into_page())
            }

            async fn prune_invocations(
                &self,
                cutoff: DateTime<Utc>,
                keep: i64,
                keep_per_function: i64,
                max_bytes: i64,
            ) -> Result<u64> {
                use $crate::store::chunks::{decode, without};
                // Ids start with the start time in hex microseconds.
                let cutoff_id = format!("{:016x}", cutoff.timestamp_micros().max(0));
                let mut removed = 0i64;
                let mut tx = self.pool.begin().await?;
                // Past retention: whole chunks (a write first, so SQLite takes
                // its write lock before this transaction reads anything), then
                // the older part of the chunks that straddle the cutoff.
                let gone: Vec<i64> = sqlx::query_scalar("DELETE FROM invocation_chunks WHERE last_id < $1 RETURNING records")
                    .bind(&cutoff_id)
                    .fetch_all(&mut *tx)
                    .await?;
                removed += gone.iter().sum::<i64>();
                let straddling = sqlx::query(
                    "SELECT namespace, function, last_id, records, data FROM invocation_chunks WHERE first_id < $1",
                )
                .bind(&cutoff_id)
                .fetch_all(&mut *tx)
                .await?;
                for row in &straddling {
                    // A chunk that does not decode goes whole: it cannot be trimmed.
                    let trimmed = without(row.try_get("data")?, |id| id < cutoff_id.as_str()).unwrap_or(None);
                    removed += row.try_get::<i64, _>("records")? - trimmed.as_ref().map_or(0, |t| t.1);
                    Self::rewrite_chunk(&mut tx, row, trimmed).await?;
                }
                // Over the count, per function and then per namespace (one
                // function's calls never prune another tenant's records, nor
                // all of its neighbours'): the chunks past the newest `keep`
                // records of the group, and the older part of the one that
                // crosses it.
                for (per_function, keep) in [(true, keep_per_function), (false, keep)] {
                    let (partition, same_group) = if per_function {
                        ("namespace, function", "namespace = $1 AND function = $3")
                    } else {
                        ("namespace", "namespace = $1")
                    };
                    let boundaries = sqlx::query(&format!(
                        "SELECT namespace, function, last_id, records, data, seen - records AS newer FROM \
                         (SELECT namespace, function, last_id, data, records, \
                          CAST(SUM(records) OVER (PARTITION BY {partition} ORDER BY last_id DESC ROWS UNBOUNDED PRECEDING) AS BIGINT) AS seen \
                          FROM invocation_chunks) counted \
                         WHERE seen > $1 AND seen - records <= $1"
                    ))
                    .bind(keep)
                    .fetch_all(&mut *tx)
                    .await?;
                    for row in &boundaries {
                        let delete = format!(
                            "DELETE FROM invocation_chunks WHERE {same_group} AND last_id < $2 RETURNING records"
                        );
                        let mut delete = sqlx::query_scalar(&delete)
                            .bind(row.try_get::<&str, _>("namespace")?)
                            .bind(row.try_get::<&str, _>("last_id")?);
                        if per_function {
                            delete = delete.bind(row.try_get::<&str, _>("function")?);
                        }
                        let gone: Vec<i64> = delete.fetch_all(&mut *tx).await?;
                        removed += gone.iter().sum::<i64>();
                        let (namespace, function, data) =
                            (row.try_get("namespace")?, row.try_get("function")?, row.try_get("data")?);
                        // A chunk's records are in id order: keep its last `room`.
                        let room = (keep - row.try_get::<i64, _>("newer")?).max(0) as usize;
                        let trimmed = match decode(namespace, function, data) {
                            Ok(records) => {
                                let cut = records.get(records.len().saturating_sub(room)).map(|r| r.id.clone());
                                without(data, |id| cut.as_ref().is_none_or(|c| id < c.as_str()))?
                            }
                            Err(_) => None,
                        };
                        removed += row.try_get::<i64, _>("records")? - trimmed.as_ref().map_or(0, |t| t.1);
                        Self::rewrite_chunk(&mut tx, row, trimmed).await?;
                    }
                }
                // Over the size, per namespace: whole chunks past the newest
                // `max_bytes` of stored data.
                let gone: Vec<i64> = sqlx::query_scalar(
                    "DELETE FROM invocation_chunks WHERE (namespace, function, last_id) IN \
                     (SELECT namespace, function, last_id FROM \
                      (SELECT namespace, function, last_id, \
                       CAST(SUM(LENGTH(data)) OVER (PARTITION BY namespace ORDER BY last_id DESC ROWS UNBOUNDED PRECEDING) AS BIGINT) AS bytes \
                       FROM invocation_chunks) sized WHERE bytes > $1) \
                     RETURNING records",
                )
                .bind(max_bytes)
                .fetch_all(&mut *tx)
                .await?;
                removed += gone.iter().sum::<i64>();
                tx.commit().await?;
                Ok(removed as u64)
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
