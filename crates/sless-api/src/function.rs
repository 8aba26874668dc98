//! Functions: what the user declares (spec) and what sless reports (status).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The language runtime a function runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub enum Runtime {
    #[serde(rename = "python3.11")]
    Python311,
    #[serde(rename = "nodejs20")]
    Nodejs20,
}

impl Runtime {
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Python311 => "python3.11",
            Runtime::Nodejs20 => "nodejs20",
        }
    }
}

impl std::fmt::Display for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the user declares about a function. Every field but `runtime` has a
/// default; unknown fields are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FunctionSpec {
    pub runtime: Runtime,
    /// `module.func` (Python) or `file.export` (Node).
    #[serde(default = "default_entrypoint")]
    pub entrypoint: String,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default = "default_memory_mb")]
    pub memory_mb: u32,
    #[serde(default = "default_timeout_sec")]
    pub timeout_sec: u32,
    /// Invocations one instance serves at the same time.
    #[serde(default = "default_concurrency")]
    pub concurrency: u32,
    #[serde(default)]
    pub min_instances: u32,
    #[serde(default = "default_max_instances")]
    pub max_instances: u32,
    /// Fixed instance count: absent/null = autoscale between min and max,
    /// 0 = off (the gateway answers 503), N = pinned to N instances.
    #[serde(default)]
    pub replicas: Option<u32>,
    #[serde(default = "default_build_timeout_sec")]
    pub build_timeout_sec: u32,
    /// Delivery of asynchronous calls (`X-Sless-Invocation-Type: Event`):
    /// retries, maximum event age, destinations; absent = the defaults.
    #[serde(rename = "async", default, skip_serializing_if = "Option::is_none")]
    pub async_settings: Option<crate::AsyncSettings>,
    /// What an instance (and the function's build) may reach on the
    /// network.
    #[serde(default)]
    pub network: Network,
    /// Size in MiB of an instance's writable /tmp (and /dev/shm, which
    /// shares it); what is written there counts towards `memory_mb`.
    #[serde(default = "default_tmp_mb")]
    pub tmp_mb: u32,
    /// Whether a public caller of `/fn` learns an unhandled exception's
    /// type and message (for development); by default it gets
    /// "the function failed" and the request id, the message goes to the
    /// invocation record.
    #[serde(default)]
    pub expose_errors: bool,
    /// Environment variables taken from secrets of the namespace
    /// (`[{"secret": "db", "key": "password", "env": "DB_PASSWORD"}]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_from_secrets: Vec<crate::SecretEnv>,
    /// Secrets of the namespace mounted as read-only files,
    /// `/secrets/{secret}/{key}` (`[{"secret": "tls"}]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_files: Vec<crate::SecretFiles>,
}

/// The network of a function's instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// Outbound connections to the internet; the host's loopback and
    /// addresses, link-local and private ranges are unreachable (unless
    /// the operator opened a private destination to the namespace).
    #[default]
    Internet,
    /// Loopback only.
    None,
}

impl Network {
    pub fn as_str(self) -> &'static str {
        match self {
            Network::Internet => "internet",
            Network::None => "none",
        }
    }
}

/// The largest values a server accepts in a spec (its configuration sets
/// them; `Default` is the widest any server accepts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecLimits {
    pub memory_mb: u32,
    /// `max_instances`, `min_instances` and `replicas`.
    pub instances: u32,
    pub timeout_sec: u32,
    pub build_timeout_sec: u32,
    pub tmp_mb: u32,
}

impl Default for SpecLimits {
    fn default() -> Self {
        SpecLimits {
            memory_mb: 16384,
            instances: 1000,
            timeout_sec: 3600,
            build_timeout_sec: 7200,
            tmp_mb: 16384,
        }
    }
}

fn default_entrypoint() -> String {
    "handler.handle".to_string()
}
/// The `memory_mb` of a function that names none.
pub fn default_memory_mb() -> u32 {
    256
}
fn default_timeout_sec() -> u32 {
    30
}
fn default_concurrency() -> u32 {
    8
}
fn default_max_instances() -> u32 {
    4
}
fn default_build_timeout_sec() -> u32 {
    300
}
fn default_tmp_mb() -> u32 {
    64
}

/// What a function's `env` may hold, names and values together: every
/// replica reads every function's spec whenever the store changes, and
/// every instance gets it.
pub const MAX_ENV_BYTES: usize = 64 * 1024;

/// The longest `entrypoint` (`module.function`, `file.export`).
pub const MAX_ENTRYPOINT_CHARS: usize = 256;

impl FunctionSpec {
    /// Limits that the JSON types alone cannot express.
    pub fn check(&self) -> Result<(), String> {
        self.check_field().map_err(|(_, message)| message)
    }

    /// [`FunctionSpec::check`], naming the field that breaks a limit.
    pub fn check_field(&self) -> Result<(), (&'static str, String)> {
        self.check_within(&SpecLimits::default())
    }

    /// [`FunctionSpec::check_field`] against a server's own maxima.
    pub fn check_within(&self, limits: &SpecLimits) -> Result<(), (&'static str, String)> {
        let in_range = |field: &'static str, v: u32, lo: u32, hi: u32| {
            if v < lo || v > hi {
                Err((field, format!("{field} must be between {lo} and {hi}, got {v}")))
            } else {
                Ok(())
            }
        };
        in_range("memory_mb", self.memory_mb, 16, limits.memory_mb)?;
        in_range("timeout_sec", self.timeout_sec, 1, limits.timeout_sec)?;
        in_range("concurrency", self.concurrency, 1, 1000)?;
        in_range("max_instances", self.max_instances, 1, limits.instances)?;
        in_range("build_timeout_sec", self.build_timeout_sec, 1, limits.build_timeout_sec)?;
        in_range("tmp_mb", self.tmp_mb, 1, limits.tmp_mb)?;
        if let Some(replicas) = self.replicas.filter(|r| *r > self.max_instances) {
            return Err((
                "replicas",
                format!(
                    "replicas ({replicas}) must not exceed max_instances ({})",
                    self.max_instances
                ),
            ));
        }
        if self.min_instances > self.max_instances {
            return Err((
                "min_instances",
                format!(
                    "min_instances ({}) must not exceed max_instances ({})",
                    self.min_instances, self.max_instances
                ),
            ));
        }
        if self.entrypoint.len() > MAX_ENTRYPOINT_CHARS {
            return Err((
                "entrypoint",
                format!(
                    "entrypoint must be at most {MAX_ENTRYPOINT_CHARS} characters, got {}",
                    self.entrypoint.len()
                ),
            ));
        }
        let bad_entrypoint = || {
            (
                "entrypoint",
                format!("entrypoint {:?} must look like module.function", self.entrypoint),
            )
        };
        let (module, func) = self.entrypoint.rsplit_once('.').ok_or_else(bad_entrypoint)?;
        if module.is_empty() || func.is_empty() {
            return Err(bad_entrypoint());
        }
        if let Some(settings) = &self.async_settings {
            settings.check_field()?;
        }
        let env_bytes: usize = self.env.iter().map(|(key, value)| key.len() + value.len()).sum();
        if env_bytes > MAX_ENV_BYTES {
            return Err((
                "env",
                format!(
                    "env holds {env_bytes} bytes of names and values, more than the {MAX_ENV_BYTES} a function may (Lambda takes 4 KiB): put larger values in a secret mounted as files (secret_files)"
                ),
            ));
        }
        for (key, value) in &self.env {
            if !is_variable_name(key) {
                return Err(("env", format!("env key {key:?} is not a valid variable name")));
            }
            if is_reserved(key) {
                return Err((
                    "env",
                    format!("env key {key:?} is reserved: sless sets {RESERVED_ENV}* itself"),
                ));
            }
            if value.contains('\0') {
                return Err((
                    "env",
                    format!("env value of {key:?} holds a NUL character, which an environment cannot carry"),
                ));
            }
        }
        self.check_secret_refs()
    }

    /// The names of the secrets the function uses (as env or files), each once.
    pub fn secret_names(&self) -> std::collections::BTreeSet<&str> {
        let env = self.env_from_secrets.iter().map(|e| e.secret.as_str());
        env.chain(self.secret_files.iter().map(|f| f.secret.as_str())).collect()
    }

    /// What `env_from_secrets` and `secret_files` must be, the store aside
    /// (that the secrets and keys exist is the server's check).
    fn check_secret_refs(&self) -> Result<(), (&'static str, String)> {
        use crate::MAX_SECRET_REFS;
        let secret_name =
            |field, name: &str| crate::validate_name("secret", name).map_err(|e| (field, format!("{field}: {e}")));
        if self.env_from_secrets.len() > MAX_SECRET_REFS {
            return Err((
                "env_from_secrets",
                format!(
                    "env_from_secrets has {} entries; at most {MAX_SECRET_REFS} are allowed",
                    self.env_from_secrets.len()
                ),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for entry in &self.env_from_secrets {
            secret_name("env_from_secrets", &entry.secret)?;
            crate::validate_secret_key(&entry.key)
                .map_err(|e| ("env_from_secrets", format!("env_from_secrets: {e}")))?;
            if !is_variable_name(&entry.env) {
                return Err((
                    "env_from_secrets",
                    format!("env_from_secrets: {:?} is not a valid variable name", entry.env),
                ));
            }
            if is_reserved(&entry.env) {
                return Err((
                    "env_from_secrets",
                    format!(
                        "env_from_secrets: {:?} is reserved: sless sets {RESERVED_ENV}* itself",
                        entry.env
                    ),
                ));
            }
            if self.env.contains_key(&entry.env) || !seen.insert(entry.env.as_str()) {
                return Err((
                    "env_from_secrets",
                    format!(
                        "env_from_secrets: variable {:?} is set twice (in env or env_from_secrets)",
                        entry.env
                    ),
                ));
            }
        }
        if self.secret_files.len() > MAX_SECRET_REFS {
            return Err((
                "secret_files",
                format!(
                    "secret_files has {} entries; at most {MAX_SECRET_REFS} are allowed",
                    self.secret_files.len()
                ),
            ));
        }
        let mut mounted = std::collections::BTreeSet::new();
        for entry in &self.secret_files {
            secret_name("secret_files", &entry.secret)?;
            if !mounted.insert(entry.secret.as_str()) {
                return Err((
                    "secret_files",
                    format!("secret_files: secret {:?} is mounted twice", entry.secret),
                ));
            }
        }
        Ok(())
    }
}

/// `^[A-Za-z_][A-Za-z0-9_]*$`
/// The start of the environment variables the platform sets in an
/// instance (`SLESS_SECRETS_DIR`, say): a function's own would be
/// overridden without a word, or would reach what the shims read.
pub const RESERVED_ENV: &str = "SLESS_";

fn is_reserved(name: &str) -> bool {
    name.starts_with(RESERVED_ENV)
}

fn is_variable_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Where a function is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub enum Phase {
    #[default]
    Pending,
    Building,
    Ready,
    Failed,
}

/// What sless reports about a function.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct FunctionStatus {
    pub phase: Phase,
    pub message: String,
    /// sha256 of the last uploaded zip.
    pub code_hash: Option<String>,
    /// Increments on each successful build; 0 before the first.
    pub version: u64,
    /// Public invoke URL.
    pub url: Option<String>,
    pub last_built_at: Option<DateTime<Utc>>,
    /// The code-safety gate's decision on the last upload.
    pub validation: Option<String>,
    /// The built artifact serving `version` (driver-specific id).
    pub artifact: Option<String>,
    /// The code_hash `artifact` was built from.
    pub built_hash: Option<String>,
    /// sha256 of `artifact`'s tarball in the object store, when replicas
    /// share state: what a replica that fetches it checks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifact_digest: Option<String>,
    /// A new version built and serving on the replica that built it, while
    /// the other replicas take it up; it becomes `version` (and the phase
    /// `Ready`) once every live replica serves it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Rollout>,
    /// Why calls get no answer from the function now (no code yet, the
    /// only build failed, every trigger disabled, replicas 0); absent while
    /// it serves. Worked out when the function is read, never stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_serving: Option<String>,
}

/// A version on its way to every replica (see [`FunctionStatus::rollout`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Rollout {
    pub version: u64,
    pub artifact: String,
    pub artifact_digest: Option<String>,
    /// The code_hash the version was built from.
    pub built_hash: String,
}

/// `POST /v1/namespaces/{ns}/functions` body: a name and the spec.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FunctionCreate {
    pub name: String,
    #[serde(flatten)]
    pub spec: FunctionSpec,
}

/// A function as the API returns it.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Function {
    pub name: String,
    pub namespace: String,
    #[serde(flatten)]
    pub spec: FunctionSpec,
    pub status: FunctionStatus,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}
