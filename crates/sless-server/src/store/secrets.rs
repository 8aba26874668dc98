//! The store's part for secrets (table of `migrations/*/…_secrets.sql`):
//! a row per secret holding its values sealed (never in clear) and the id
//! of the key that sealed them. Written once for both databases, as
//! `versions.rs` is. Changes that race are compare-and-set on the sealed
//! data, so a rotation never overwrites a value written meanwhile.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::error::Result;

/// One secret as stored: `data` maps each key to its sealed value.
#[derive(Debug, Clone, PartialEq)]
pub struct SecretRecord {
    pub namespace: String,
    pub name: String,
    /// The id of the key every value of `data` is sealed with.
    pub key_id: String,
    pub data: BTreeMap<String, String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Secrets of namespaces. Each method is one statement.
#[async_trait]
pub trait SecretStore: Send + Sync {
    /// Inserts a new secret; `Error::Conflict` when the name is taken.
    async fn create_secret(&self, secret: &SecretRecord) -> Result<()>;
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<SecretRecord>>;
    /// A namespace's secrets, by name.
    async fn secrets(&self, namespace: &str) -> Result<Vec<SecretRecord>>;
    /// Every secret (what a rotation re-seals).
    async fn all_secrets(&self) -> Result<Vec<SecretRecord>>;
    /// Replaces data, key id and update time if the stored data is still
    /// `before` (compare-and-set); false when it changed or is gone.
    async fn replace_secret(&self, secret: &SecretRecord, before: &BTreeMap<String, String>) -> Result<bool>;
    async fn delete_secret(&self, namespace: &str, name: &str) -> Result<bool>;
    async fn count_secrets(&self, namespace: &str) -> Result<i64>;
}

/// Implements [`SecretStore`] for a store struct with a `pool` field.
macro_rules! secret_store {
    ($store:ident) => {
        mod secret_store {
            use std::collections::BTreeMap;

            use async_trait::async_trait;
            use sqlx::Row;

            use super::$store;
            use $crate::error::{Error, Result};
            use $crate::store::secrets::{SecretRecord, SecretStore};

            type DbRow = <$crate::store::sql::sqlx_db!($store) as sqlx::Database>::Row;

            use $crate::store::sql::{parse_time, time_text};

            fn data_text(data: &BTreeMap<String, String>) -> Result<String> {
                serde_json::to_string(data).map_err(Error::internal)
            }

            fn secret_of(row: &DbRow) -> Result<SecretRecord> {
                let name: String = row.try_get("name")?;
                Ok(SecretRecord {
                    namespace: row.try_get("namespace")?,
                    data: serde_json::from_str(row.try_get::<&str, _>("data")?)
                        .map_err(|e| Error::internal(format!("the stored secret {name:?} cannot be read: {e}")))?,
                    name,
                    key_id: row.try_get("key_id")?,
                    created_at: parse_time(row.try_get::<&str, _>("created_at")?)?,
                    updated_at: parse_time(row.try_get::<&str, _>("updated_at")?)?,
                })
            }

            const COLUMNS: &str = "namespace, name, key_id, data, created_at, updated_at";

            #[async_trait]
            impl SecretStore for $store {
                async fn create_secret(&self, s: &SecretRecord) -> Result<()> {
                    let done = sqlx::query(
                        "INSERT INTO secrets (namespace, name, key_id, data, created_at, updated_at) \
                         VALUES ($1, $2, $3, $4, $5, $6)",
                    )
                    .bind(&s.namespace)
                    .bind(&s.name)
                    .bind(&s.key_id)
                    .bind(data_text(&s.data)?)
                    .bind(time_text(&s.created_at))
                    .bind(time_text(&s.updated_at))
                    .execute(&self.pool)
                    .await;
                    match done {
                        Ok(_) => Ok(()),
                        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Err(Error::Conflict(format!(
                            "secret {:?} already exists in namespace {:?}",
                            s.name, s.namespace
                        ))),
                        Err(e) => Err(e.into()),
                    }
                }

                async fn secret(&self, namespace: &str, name: &str) -> Result<Option<SecretRecord>> {
                    let sql = format!("SELECT {COLUMNS} FROM secrets WHERE namespace = $1 AND name = $2");
                    let row = sqlx::query(&sql)
                        .bind(namespace)
                        .bind(name)
                        .fetch_optional(&self.pool)
                        .await?;
                    row.as_ref().map(secret_of).transpose()
                }

                async fn secrets(&self, namespace: &str) -> Result<Vec<SecretRecord>> {
                    let sql = format!("SELECT {COLUMNS} FROM secrets WHERE namespace = $1 ORDER BY name");
                    let rows = sqlx::query(&sql).bind(namespace).fetch_all(&self.pool).await?;
                    rows.iter().map(secret_of).collect()
                }

                async fn all_secrets(&self) -> Result<Vec<SecretRecord>> {
                    let sql = format!("SELECT {COLUMNS} FROM secrets ORDER BY namespace, name");
                    let rows = sqlx::query(&sql).fetch_all(&self.pool).await?;
                    rows.iter().map(secret_of).collect()
                }

                async fn replace_secret(&self, s: &SecretRecord, before: &BTreeMap<String, String>) -> Result<bool> {
                    let done = sqlx::query(
                        "UPDATE secrets SET key_id = $1, data = $2, updated_at = $3 \
                         WHERE namespace = $4 AND name = $5 AND data = $6",
                    )
                    .bind(&s.key_id)
                    .bind(data_text(&s.data)?)
                    .bind(time_text(&s.updated_at))
                    .bind(&s.namespace)
                    .bind(&s.name)
                    .bind(data_text(before)?)
                    .execute(&self.pool)
                    .await?;
                    Ok(done.rows_affected() > 0)
                }

                async fn delete_secret(&self, namespace: &str, name: &str) -> Result<bool> {
                    let done = sqlx::query("DELETE FROM secrets WHERE namespace = $1 AND name = $2")
                        .bind(namespace)
                        .bind(name)
                        .execute(&self.pool)
                        .await?;
                    Ok(done.rows_affected() > 0)
                }

                async fn count_secrets(&self, namespace: &str) -> Result<i64> {
                    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM secrets WHERE namespace = $1")
                        .bind(namespace)
                        .fetch_one(&self.pool)
                        .await?;
                    Ok(count)
                }
            }
        }
    };
}

pub(crate) use secret_store;
