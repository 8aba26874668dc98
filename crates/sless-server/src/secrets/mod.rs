//! Secrets at rest and on their way to functions: the keys that seal them
//! (`SLESS_SECRET_KEY`, or a key generated into the data dir; during a
//! rotation `SLESS_SECRET_KEY_PREVIOUS` too), sealing and opening the
//! values of a stored secret, the re-sealing of everything with the new
//! key at start, and the values a function's spec asks for, decrypted for
//! a deploy.
//!
//! **Invariant:** a value is in clear only in memory, between a request
//! and the store or between the store and the driver; it is never logged,
//! never in an error message (errors name the secret and the key), never
//! in a response.

mod cipher;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use sless_api::FunctionSpec;
use sless_driver::{SecretFile, SecretValues};

pub use cipher::decode_key;
use cipher::{Place, SealingKey, KEY_LEN};

use crate::error::{Error, Result};
use crate::store::{Kind, SecretRecord, Store};

/// The file a generated key is kept in, in the data dir.
const KEY_FILE: &str = "secret-key";

/// The keys: the one that seals, and the one before it (a rotation).
pub struct Secrets {
    store: Arc<dyn Store>,
    current: SealingKey,
    previous: Option<SealingKey>,
}

impl Secrets {
    /// The keys from the configuration (or the data dir's key file, made
    /// on first start), checked against the store: every stored secret
    /// must open with one of them. Then, when a previous key is given,
    /// everything it sealed is sealed again with the current one.
    pub async fn start(
        store: Arc<dyn Store>,
        key: Option<&str>,
        previous: Option<&str>,
        data_dir: &Path,
        shared: bool,
    ) -> anyhow::Result<Arc<Secrets>> {
        let current = match key {
            Some(text) => decode_key(text).map_err(|e| anyhow::anyhow!("SLESS_SECRET_KEY: {e}"))?,
            None => key_file(data_dir)?,
        };
        if key.is_none() && shared {
            tracing::warn!(
                "SLESS_SECRET_KEY is not set: this replica seals secrets with a key of its own data dir, \
                 which the other replicas cannot open; give every replica the same SLESS_SECRET_KEY"
            );
        }
        let previous = previous
            .map(|text| decode_key(text).map_err(|e| anyhow::anyhow!("SLESS_SECRET_KEY_PREVIOUS: {e}")))
            .transpose()?;
        let secrets = Arc::new(Secrets {
            store,
            current: SealingKey::new(&current),
            previous: previous.as_ref().map(SealingKey::new),
        });
        secrets.rotate().await?;
        Ok(secrets)
    }

    fn key_for(&self, id: &str) -> Option<&SealingKey> {
        std::iter::once(&self.current)
            .chain(self.previous.as_ref())
            .find(|k| k.id() == id)
    }

    /// Seals every value of `data` for secret `name` with the current key.
    pub fn seal(&self, namespace: &str, name: &str, data: &BTreeMap<String, String>) -> SecretRecord {
        let sealed = data
            .iter()
            .map(|(key, value)| {
                let place = Place {
                    namespace,
                    secret: name,
                    key,
                };
                (key.clone(), self.current.seal(&place, value.as_bytes()))
            })
            .collect();
        let now = crate::store::now();
        SecretRecord {
            namespace: namespace.to_string(),
            name: name.to_string(),
            key_id: self.current.id().to_string(),
            data: sealed,
            created_at: now,
            updated_at: now,
        }
    }

    /// The values of a stored secret, in clear.
    pub fn open(&self, record: &SecretRecord) -> Result<BTreeMap<String, String>> {
        let unreadable = |why: &str| {
            Error::Internal(format!(
                "secret {:?} in namespace {:?} cannot be decrypted: {why}",
                record.name, record.namespace
            ))
        };
        let key = self.key_for(&record.key_id).ok_or_else(|| {
            unreadable("it was sealed with a key that is neither SLESS_SECRET_KEY nor SLESS_SECRET_KEY_PREVIOUS")
        })?;
        record
            .data
            .iter()
            .map(|(name, sealed)| {
                let place = Place {
                    namespace: &record.namespace,
                    secret: &record.name,
                    key: name,
                };
                let value = key
                    .open(&place, sealed)
                    .ok_or_else(|| unreadable(&format!("the value of key {name:?} is damaged")))?;
                let value = String::from_utf8(value)
                    .map_err(|_| unreadable(&format!("the value of key {name:?} is not text")))?;
                Ok((name.clone(), value))
            })
            .collect()
    }

    /// Seals again, with the current key, every secret another key sealed;
    /// refuses to start when a secret opens with no key given.
    async fn rotate(&self) -> anyhow::Result<()> {
        let mut resealed = 0;
        for record in self.store.all_secrets().await? {
            if record.key_id == self.current.id() {
                continue;
            }
            let values = self.open(&record).map_err(|e| {
                anyhow::anyhow!(
                    "{e}; start with the key that sealed it as SLESS_SECRET_KEY_PREVIOUS (a generated key is in the data dir's {KEY_FILE})"
                )
            })?;
            let mut again = self.seal(&record.namespace, &record.name, &values);
            again.created_at = record.created_at;
            // The values did not change: functions need not roll.
            again.updated_at = record.updated_at;
            // Written meanwhile (by a replica with the new key): done already.
            if self.store.replace_secret(&again, &record.data).await? {
                resealed += 1;
            }
        }
        if resealed > 0 {
            tracing::info!(
                secrets = resealed,
                key = self.current.id(),
                "secrets sealed again with the new key"
            );
        }
        Ok(())
    }

    /// The values `spec` asks for, for a deploy. The error names the
    /// secret or key that is missing (the function cannot start).
    pub async fn resolve(&self, namespace: &str, spec: &FunctionSpec) -> Result<SecretValues, String> {
        let mut values = SecretValues::default();
        let names = spec.secret_names();
        if names.is_empty() {
            return Ok(values);
        }
        let mut opened = BTreeMap::new();
        for name in names {
            let record = self
                .store
                .secret(namespace, name)
                .await
                .map_err(|e| format!("reading secret {name:?}: {e}"))?
                .ok_or_else(|| format!("secret {name:?} does not exist in namespace {namespace:?}"))?;
            opened.insert(name, self.open(&record).map_err(|e| e.to_string())?);
        }
        for entry in &spec.env_from_secrets {
            let value = opened[entry.secret.as_str()].get(&entry.key).ok_or_else(|| {
                format!(
                    "env_from_secrets: secret {:?} has no key {:?} (for {})",
                    entry.secret, entry.key, entry.env
                )
            })?;
            if value.contains('\0') {
                return Err(format!(
                    "env_from_secrets: the value of secret {:?} key {:?} holds a NUL character, which an environment \
                     cannot carry (for {}); use it as a file (secret_files) instead",
                    entry.secret, entry.key, entry.env
                ));
            }
            values.env.push((entry.env.clone(), value.clone()));
        }
        for entry in &spec.secret_files {
            for (key, value) in &opened[entry.secret.as_str()] {
                values.files.push(SecretFile {
                    secret: entry.secret.clone(),
                    key: key.clone(),
                    value: value.clone().into_bytes(),
                });
            }
        }
        Ok(values)
    }
}

/// Checks a spec's references against the namespace's secrets: a missing
/// secret or key is a 400 naming the field.
pub async fn check_refs(store: &dyn Store, namespace: &str, spec: &FunctionSpec) -> Result<()> {
    let mut keys: BTreeMap<&str, Option<SecretRecord>> = BTreeMap::new();
    for name in spec.secret_names() {
        keys.insert(name, store.secret(namespace, name).await?);
    }
    let missing = |field: &str, name: &str| {
        Error::invalid(
            field,
            format!("{field}: secret {name:?} does not exist in namespace {namespace:?}"),
        )
    };
    for entry in &spec.env_from_secrets {
        let record = keys[entry.secret.as_str()]
            .as_ref()
            .ok_or_else(|| missing("env_from_secrets", &entry.secret))?;
        if !record.data.contains_key(&entry.key) {
            return Err(Error::invalid(
                "env_from_secrets",
                format!("env_from_secrets: secret {:?} has no key {:?}", entry.secret, entry.key),
            ));
        }
    }
    for entry in &spec.secret_files {
        if keys[entry.secret.as_str()].is_none() {
            return Err(missing("secret_files", &entry.secret));
        }
    }
    Ok(())
}

/// How a function uses a secret.
#[derive(Debug, Clone, Default)]
pub struct Use {
    pub function: String,
    /// The keys its `env_from_secrets` takes.
    pub env_keys: Vec<String>,
    pub files: bool,
}

/// The functions of `namespace` that use secret `name`, by name.
pub async fn users(store: &dyn Store, namespace: &str, name: &str) -> Result<Vec<Use>> {
    let mut uses = Vec::new();
    for record in store.list(Kind::Function, namespace).await? {
        let Ok(spec) = serde_json::from_value::<FunctionSpec>(record.spec) else {
            continue;
        };
        let env_keys: Vec<String> = spec
            .env_from_secrets
            .iter()
            .filter(|e| e.secret == name)
            .map(|e| e.key.clone())
            .collect();
        let files = spec.secret_files.iter().any(|f| f.secret == name);
        if files || !env_keys.is_empty() {
            uses.push(Use {
                function: record.name,
                env_keys,
                files,
            });
        }
    }
    Ok(uses)
}

/// The data dir's key: read, or made (0600) on first start.
fn key_file(data_dir: &Path) -> anyhow::Result<[u8; KEY_LEN]> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = data_dir.join(KEY_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => return decode_key(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display())),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            anyhow::bail!("reading the secret key {}: {e}", path.display())
        }
        Err(_) => {}
    }
    let key = cipher::generate_key();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| anyhow::anyhow!("writing the secret key {}: {e}", path.display()))?;
    file.write_all(cipher::encode_key(&key).as_bytes())?;
    file.sync_all()?;
    tracing::info!(path = %path.display(), "generated the key that seals secrets (set SLESS_SECRET_KEY to choose one)");
    Ok(key)
}
