//! The store's part for versions and aliases (tables of
//! `migrations/*/…_versions.sql`): a row per built version, immutable but
//! for the spec of the newest, and a row per alias. Written once for both
//! databases, as `sql.rs` is.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sless_api::AliasSpec;

use crate::error::Result;

/// One built version as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct VersionRecord {
    pub namespace: String,
    pub function: String,
    pub version: u64,
    pub code_hash: String,
    pub artifact: String,
    pub artifact_digest: Option<String>,
    /// The spec it runs with (a `FunctionSpec` as JSON).
    pub spec: Value,
    pub built_at: DateTime<Utc>,
    /// What its artifact takes ([`sless_driver::Built::bytes`]; 0 for
    /// versions recorded before sizes were, until a sweep measures them).
    pub artifact_bytes: u64,
    /// The size of the uploaded archive it was built from.
    pub archive_bytes: u64,
}

/// What one version keeps, without its spec: what a namespace's storage
/// is summed from.
#[derive(Debug, Clone, PartialEq)]
pub struct VersionSize {
    pub namespace: String,
    pub function: String,
    pub version: u64,
    pub code_hash: String,
    pub artifact: String,
    pub artifact_bytes: u64,
    pub archive_bytes: u64,
}

/// One alias as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct AliasRecord {
    pub namespace: String,
    pub function: String,
    pub name: String,
    pub spec: AliasSpec,
    pub updated_at: DateTime<Utc>,
}

/// Versions and aliases of functions. Each method is one statement.
#[async_trait]
pub trait VersionStore: Send + Sync {
    /// Records a built version; one already recorded stays as it was
    /// (versions are immutable; a resumed rollout records it again).
    async fn put_version(&self, version: &VersionRecord) -> Result<()>;
    async fn version(&self, namespace: &str, function: &str, version: u64) -> Result<Option<VersionRecord>>;
    /// A function's versions, newest first.
    async fn versions(&self, namespace: &str, function: &str) -> Result<Vec<VersionRecord>>;
    /// Replaces the spec a version runs with (only while it is the newest).
    async fn set_version_spec(&self, namespace: &str, function: &str, version: u64, spec: &Value) -> Result<()>;
    async fn delete_version(&self, namespace: &str, function: &str, version: u64) -> Result<()>;
    /// Creates or moves an alias in one statement; true when it was created.
    async fn put_alias(&self, alias: &AliasRecord) -> Result<bool>;
    async fn alias(&self, namespace: &str, function: &str, name: &str) -> Result<Option<AliasRecord>>;
    /// A function's aliases, by name.
    async fn aliases(&self, namespace: &str, function: &str) -> Result<Vec<AliasRecord>>;
    /// Every alias of every function (what a replica routes by).
    async fn all_aliases(&self) -> Result<Vec<AliasRecord>>;
    async fn delete_alias(&self, namespace: &str, function: &str, name: &str) -> Result<bool>;
    /// Whether any function's version or status still names `artifact`
    /// (artifacts are content-addressed: functions with the same code share one).
    async fn artifact_in_use(&self, artifact: &str) -> Result<bool>;
    /// Every artifact a function's version or status names, in two reads
    /// (what a sweep of many artifacts asks, where one
    /// [`VersionStore::artifact_in_use`] each would read every status each
    /// time).
    async fn artifacts_in_use(&self) -> Result<std::collections::HashSet<String>>;
    /// Every upload a function's version was built from, or its status
    /// names (the code it waits for, serves or rolls out), as
    /// `(namespace, function, code_hash)`: the archives in use, in two reads.
    /// A function whose status does not read has [`ANY_CODE`] in use.
    async fn codes_in_use(&self) -> Result<std::collections::HashSet<(String, String, String)>>;
    /// What every version of a namespace's functions keeps, by function,
    /// newest first.
    async fn version_sizes(&self, namespace: &str) -> Result<Vec<VersionSize>>;
    /// The versions recorded before their sizes were (both 0).
    async fn unsized_versions(&self) -> Result<Vec<VersionSize>>;
    /// The functions with more than `keep` versions, as `(namespace,
    /// function)`: those a lowered `SLESS_KEEP_VERSIONS` leaves to prune.
    async fn functions_past(&self, keep: usize) -> Result<Vec<(String, String)>>;
    /// Records what a version keeps (once measured).
    async fn set_version_bytes(&self, version: &VersionSize) -> Result<()>;
    /// Every alias of a namespace's functions.
    async fn namespace_aliases(&self, namespace: &str) -> Result<Vec<AliasRecord>>;
    /// Forgets every version and alias of a deleted function.
    async fn forget_versions(&self, namespace: &str, function: &str) -> Result<()>;
}

/// The statement that records version `v`, its values bound: one for
/// `put_version` and for the Ready transaction of `Store::record_version`.
macro_rules! insert_version {
    ($v:expr) => {
        sqlx::query(
            "INSERT INTO function_versions \
             (namespace, function, version, code_hash, artifact, artifact_digest, spec, built_at, \
              artifact_bytes, archive_bytes) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
             ON CONFLICT (namespace, function, version) DO NOTHING",
        )
        .bind(&$v.namespace)
        .bind(&$v.function)
        .bind($v.version as i64)
        .bind(&$v.code_hash)
        .bind(&$v.artifact)
        .bind(&$v.artifact_digest)
        .bind($v.spec.to_string())
        .bind($crate::store::sql::time_text(&$v.built_at))
        .bind($crate::store::versions::stored_bytes($v.artifact_bytes))
        .bind($crate::store::versions::stored_bytes($v.archive_bytes))
    };
}

/// Implements [`VersionStore`] for a store struct with a `pool` field.
macro_rules! version_store {
    ($store:ident) => {
        mod version_store {
            use async_trait::async_trait;
            use sqlx::Row;

            use super::$store;
            use $crate::error::{Error, Result};
            use $crate::store::versions::{read_bytes, AliasRecord, VersionRecord, VersionSize, VersionStore};

            type DbRow = <$crate::store::sql::sqlx_db!($store) as sqlx::Database>::Row;

            use $crate::store::sql::{parse_time, time_text};

            fn version_of(row: &DbRow) -> Result<VersionRecord> {
                Ok(VersionRecord {
                    namespace: row.try_get("namespace")?,
                    function: row.try_get("function")?,
                    version: row.try_get::<i64, _>("version")? as u64,
                    code_hash: row.try_get("code_hash")?,
                    artifact: row.try_get("artifact")?,
                    artifact_digest: row.try_get("artifact_digest")?,
                    spec: serde_json::from_str(row.try_get::<&str, _>("spec")?)
                        .map_err(|e| Error::internal(format!("bad version spec in store: {e}")))?,
                    built_at: parse_time(row.try_get::<&str, _>("built_at")?)?,
                    artifact_bytes: read_bytes(row.try_get("artifact_bytes")?),
                    archive_bytes: read_bytes(row.try_get("archive_bytes")?),
                })
            }

            fn size_of(row: &DbRow) -> Result<VersionSize> {
                Ok(VersionSize {
                    namespace: row.try_get("namespace")?,
                    function: row.try_get("function")?,
                    version: row.try_get::<i64, _>("version")? as u64,
                    code_hash: row.try_get("code_hash")?,
                    artifact: row.try_get("artifact")?,
                    artifact_bytes: read_bytes(row.try_get("artifact_bytes")?),
                    archive_bytes: read_bytes(row.try_get("archive_bytes")?),
                })
            }

            fn alias_of(row: &DbRow) -> Result<AliasRecord> {
                Ok(AliasRecord {
                    namespace: row.try_get("namespace")?,
                    function: row.try_get("function")?,
                    name: row.try_get("name")?,
                    spec: sless_api::AliasSpec {
                        version: row.try_get::<i64, _>("version")? as u64,
                        weights: serde_json::from_str(row.try_get::<&str, _>("weights")?)
                            .map_err(|e| Error::internal(format!("bad alias weights in store: {e}")))?,
                    },
                    updated_at: parse_time(row.try_get::<&str, _>("updated_at")?)?,
                })
            }

            const VERSION_COLUMNS: &str = "namespace, function, version, code_hash, artifact, artifact_digest, spec, \
                 built_at, artifact_bytes, archive_bytes";
            const ALIAS_COLUMNS: &str = "namespace, function, name, version, weights, updated_at";

            #[async_trait]
            impl VersionStore for $store {
                async fn put_version(&self, v: &VersionRecord) -> Result<()> {
                    $crate::store::versions::insert_version!(v)
                        .execute(&self.pool)
                    .await?;
                    Ok(())
                }

                async fn version(&self, namespace: &str, function: &str, version: u64) -> Result<Option<VersionRecord>> {
                    let sql = format!(
                        "SELECT {VERSION_COLUMNS} FROM function_versions \
                         WHERE namespace = $1 AND function = $2 AND version = $3"
                    );
                    let row = sqlx::query(&sql)
                        .bind(namespace)
                        .bind(function)
                        .bind(version as i64)
                        .fetch_optional(&self.pool)
                        .await?;
                    row.as_ref().map(version_of).transpose()
                }

                async fn versions(&self, namespace: &str, function: &str) -> Result<Vec<VersionRecord>> {
                    let sql = format!(
                        "SELECT {VERSION_COLUMNS} FROM function_versions \
                         WHERE namespace = $1 AND function = $2 ORDER BY version DESC"
                    );
                    let rows = sqlx::query(&sql)
                        .bind(namespace)
                        .bind(function)
                        .fetch_all(&self.pool)
                        .await?;
                    rows.iter().map(version_of).collect()
                }

                async fn set_version_spec(
                    &self,
                    namespace: &str,
                    function: &str,
                    version: u64,
                    spec: &serde_json::Value,
                ) -> Result<()> {
                    sqlx::query(
                        "UPDATE function_versions SET spec = $1 \
                         WHERE namespace = $2 AND function = $3 AND version = $4",
                    )
                    .bind(spec.to_string())
                    .bind(namespace)
                    .bind(function)
                    .bind(version as i64)
                    .execute(&self.pool)
                    .await?;
                    Ok(())
                }

                async fn delete_version(&self, namespace: &str, function: &str, version: u64) -> Result<()> {
                    sqlx::query("DELETE FROM function_versions WHERE namespace = $1 AND function = $2 AND version = $3")
                        .bind(namespace)
                        .bind(function)
                        .bind(version as i64)
                        .execute(&self.pool)
                        .await?;
                    Ok(())
                }

                async fn put_alias(&self, a: &AliasRecord) -> Result<bool> {
                    let weights = serde_json::to_string(&a.spec.weights).map_err(Error::internal)?;
                    // Whether it existed only decides 201 or 200; the move
                    // itself is one statement, so a reader sees the alias
                    // before or after it, never half of it.
                    let existed = self.alias(&a.namespace, &a.function, &a.name).await?.is_some();
                    sqlx::query(
                        "INSERT INTO function_aliases (namespace, function, name, version, weights, updated_at) \
                         VALUES ($1, $2, $3, $4, $5, $6) \
                         ON CONFLICT (namespace, function, name) DO UPDATE \
                         SET version = excluded.version, weights = excluded.weights, updated_at = excluded.updated_at",
                    )
                    .bind(&a.namespace)
                    .bind(&a.function)
                    .bind(&a.name)
                    .bind(a.spec.version as i64)
                    .bind(weights)
                    .bind(time_text(&a.updated_at))
                    .execute(&self.pool)
                    .await?;
                    let created = !existed;
                    Ok(created)
                }

                async fn alias(&self, namespace: &str, function: &str, name: &str) -> Result<Option<AliasRecord>> {
                    let sql = format!(
                        "SELECT {ALIAS_COLUMNS} FROM function_aliases WHERE namespace = $1 AND function = $2 AND name = $3"
                    );
                    let row = sqlx::query(&sql)
                        .bind(namespace)
                        .bind(function)
                        .bind(name)
                        .fetch_optional(&self.pool)
                        .await?;
                    row.as_ref().map(alias_of).transpose()
                }

                async fn aliases(&self, namespace: &str, function: &str) -> Result<Vec<AliasRecord>> {
                    let sql = format!(
                        "SELECT {ALIAS_COLUMNS} FROM function_aliases WHERE namespace = $1 AND function = $2 ORDER BY name"
                    );
                    let rows = sqlx::query(&sql)
                        .bind(namespace)
                        .bind(function)
                        .fetch_all(&self.pool)
                        .await?;
                    rows.iter().map(alias_of).collect()
                }

                async fn all_aliases(&self) -> Result<Vec<AliasRecord>> {
                    let sql = format!("SELECT {ALIAS_COLUMNS} FROM function_aliases ORDER BY namespace, function, name");
                    let rows = sqlx::query(&sql).fetch_all(&self.pool).await?;
                    rows.iter().map(alias_of).collect()
                }

                async fn delete_alias(&self, namespace: &str, function: &str, name: &str) -> Result<bool> {
                    let done = sqlx::query("DELETE FROM function_aliases WHERE namespace = $1 AND function = $2 AND name = $3")
                        .bind(namespace)
                        .bind(function)
                        .bind(name)
                        .execute(&self.pool)
                        .await?;
                    Ok(done.rows_affected() > 0)
                }

                async fn artifact_in_use(&self, artifact: &str) -> Result<bool> {
                    // `1` is an INT4 in PostgreSQL: read as an i64 it failed
                    // there, and pruning kept every artifact.
                    let used: Option<i32> = sqlx::query_scalar(
                        "SELECT 1 FROM function_versions WHERE artifact = $1 \
                         UNION ALL SELECT 1 FROM resources WHERE kind = 'function' AND status LIKE $2 LIMIT 1",
                    )
                    .bind(artifact)
                    .bind(format!("%{artifact}%"))
                    .fetch_optional(&self.pool)
                    .await?;
                    Ok(used.is_some())
                }

                async fn artifacts_in_use(&self) -> Result<std::collections::HashSet<String>> {
                    let mut used: std::collections::HashSet<String> =
                        sqlx::query_scalar("SELECT DISTINCT artifact FROM function_versions")
                            .fetch_all(&self.pool)
                            .await?
                            .into_iter()
                            .collect();
                    let statuses: Vec<String> = sqlx::query_scalar("SELECT status FROM resources WHERE kind = 'function'")
                        .fetch_all(&self.pool)
                        .await?;
                    for status in statuses {
                        let Ok(status) = serde_json::from_str::<serde_json::Value>(&status) else { continue };
                        // The serving version's, and the one rolling out.
                        for named in [&status["artifact"], &status["rollout"]["artifact"]] {
                            if let Some(artifact) = named.as_str() {
                                used.insert(artifact.to_string());
                            }
                        }
                    }
                    Ok(used)
                }

                async fn codes_in_use(&self) -> Result<std::collections::HashSet<(String, String, String)>> {
                    let mut used: std::collections::HashSet<(String, String, String)> =
                        sqlx::query_as("SELECT DISTINCT namespace, function, code_hash FROM function_versions")
                            .fetch_all(&self.pool)
                            .await?
                            .into_iter()
                            .collect();
                    let statuses: Vec<(String, String, String)> =
                        sqlx::query_as("SELECT namespace, name, status FROM resources WHERE kind = 'function'")
                            .fetch_all(&self.pool)
                            .await?;
                    for (namespace, name, status) in statuses {
                        let Ok(status) = serde_json::from_str::<serde_json::Value>(&status) else {
                            // Unreadable: every upload of the function stays.
                            used.insert((namespace, name, $crate::store::versions::ANY_CODE.to_string()));
                            continue;
                        };
                        let named = [&status["code_hash"], &status["built_hash"], &status["rollout"]["built_hash"]];
                        for code in named.into_iter().filter_map(serde_json::Value::as_str) {
                            used.insert((namespace.clone(), name.clone(), code.to_string()));
                        }
                    }
                    Ok(used)
                }

                async fn version_sizes(&self, namespace: &str) -> Result<Vec<VersionSize>> {
                    let rows = sqlx::query(
                        "SELECT namespace, function, version, code_hash, artifact, artifact_bytes, archive_bytes \
                         FROM function_versions WHERE namespace = $1 ORDER BY function, version DESC",
                    )
                    .bind(namespace)
                    .fetch_all(&self.pool)
                    .await?;
                    rows.iter().map(size_of).collect()
                }

                async fn unsized_versions(&self) -> Result<Vec<VersionSize>> {
                    let rows = sqlx::query(
                        "SELECT namespace, function, version, code_hash, artifact, artifact_bytes, archive_bytes \
                         FROM function_versions WHERE artifact_bytes = 0 AND archive_bytes = 0",
                    )
                    .fetch_all(&self.pool)
                    .await?;
                    rows.iter().map(size_of).collect()
                }

                async fn functions_past(&self, keep: usize) -> Result<Vec<(String, String)>> {
                    let rows = sqlx::query(
                        "SELECT namespace, function FROM function_versions \
                         GROUP BY namespace, function HAVING COUNT(*) > $1",
                    )
                    .bind(keep as i64)
                    .fetch_all(&self.pool)
                    .await?;
                    rows.iter()
                        .map(|row| Ok((row.try_get("namespace")?, row.try_get("function")?)))
                        .collect()
                }

                async fn set_version_bytes(&self, v: &VersionSize) -> Result<()> {
                    sqlx::query(
                        "UPDATE function_versions SET artifact_bytes = $1, archive_bytes = $2 \
                         WHERE namespace = $3 AND function = $4 AND version = $5",
                    )
                    .bind($crate::store::versions::stored_bytes(v.artifact_bytes))
                    .bind($crate::store::versions::stored_bytes(v.archive_bytes))
                    .bind(&v.namespace)
                    .bind(&v.function)
                    .bind(v.version as i64)
                    .execute(&self.pool)
                    .await?;
                    Ok(())
                }

                async fn namespace_aliases(&self, namespace: &str) -> Result<Vec<AliasRecord>> {
                    let sql = format!("SELECT {ALIAS_COLUMNS} FROM function_aliases WHERE namespace = $1");
                    let rows = sqlx::query(&sql).bind(namespace).fetch_all(&self.pool).await?;
                    rows.iter().map(alias_of).collect()
                }

                async fn forget_versions(&self, namespace: &str, function: &str) -> Result<()> {
                    let mut tx = self.pool.begin().await?;
                    sqlx::query("DELETE FROM function_aliases WHERE namespace = $1 AND function = $2")
                        .bind(namespace)
                        .bind(function)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query("DELETE FROM function_versions WHERE namespace = $1 AND function = $2")
                        .bind(namespace)
                        .bind(function)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok(())
                }
            }
        }
    };
}

pub(crate) use {insert_version, version_store};

/// The code hash [`VersionStore::codes_in_use`] names for every upload of
/// a function whose status does not read (no sha256 is `*`).
pub const ANY_CODE: &str = "*";

/// A size as a column holds it (BIGINT: signed).
pub(crate) fn stored_bytes(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// A size read from a column.
pub(crate) fn read_bytes(stored: i64) -> u64 {
    u64::try_from(stored).unwrap_or(0)
}
