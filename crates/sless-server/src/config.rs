//! The server's configuration: every field a flag with a `SLESS_*` variable
//! behind it, checked once at start with messages that name the bad value.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// Which execution backend runs functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DriverKind {
    Local,
    Kubernetes,
}

/// `sless server` options.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Address the API and the gateway listen on.
    #[arg(long, env = "SLESS_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Directory for the embedded default's state (SQLite file, code archives, admin token).
    #[arg(long, env = "SLESS_DATA_DIR", default_value = "./sless-data")]
    pub data_dir: PathBuf,

    /// `sqlite://PATH` or `postgres://...`; default: `sqlite://{data_dir}/sless.db`.
    #[arg(long, env = "SLESS_DATABASE_URL")]
    pub database_url: Option<String>,

    /// Where code archives (and, with PostgreSQL, built artifacts) go:
    /// `file://DIR` or `s3://BUCKET[/PREFIX]`; default: `file://{data_dir}/blobs`.
    #[arg(long, env = "SLESS_BLOB_URL")]
    pub blob_url: Option<String>,

    /// How an S3 code store is reached (`SLESS_S3_*`).
    #[command(flatten)]
    pub s3: crate::blobs::S3Options,

    /// Execution backend.
    #[arg(long, env = "SLESS_DRIVER", value_enum, default_value = "local")]
    pub driver: DriverKind,

    /// The Kubernetes driver's settings (`SLESS_K8S_*`).
    #[command(flatten)]
    pub kube: crate::kube_options::KubeOptions,

    /// Base URL users reach the gateway at; default: `http://{listen}`.
    #[arg(long, env = "SLESS_EXTERNAL_URL")]
    pub external_url: Option<String>,

    /// Admin bearer token; when unset, one is generated on first start and kept in the data dir.
    #[arg(long, env = "SLESS_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// Key that seals secrets at rest: 32 bytes, base64. When unset, one is
    /// generated on first start and kept in the data dir (`secret-key`,
    /// mode 0600); replicas on one PostgreSQL must all be given the same key.
    #[arg(long, env = "SLESS_SECRET_KEY", hide_env_values = true)]
    pub secret_key: Option<String>,

    /// The key before `SLESS_SECRET_KEY` (rotation): values it sealed are
    /// still read, and at start every one is sealed again with the new key.
    #[arg(long, env = "SLESS_SECRET_KEY_PREVIOUS", hide_env_values = true)]
    pub secret_key_previous: Option<String>,

    /// Largest accepted code upload (zip) in bytes.
    #[arg(long, env = "SLESS_MAX_UPLOAD_BYTES", default_value_t = 50 * 1024 * 1024)]
    pub max_upload_bytes: usize,

    /// Largest unpacked size of a code archive in bytes.
    #[arg(long, env = "SLESS_MAX_UNPACKED_BYTES", default_value_t = 250 * 1024 * 1024)]
    pub max_unpacked_bytes: u64,

    /// Most a build may write into its function's directory, in MiB: the
    /// unpacked archive and what installing its dependencies adds (a
    /// package's setup.py or npm install script runs the tenant's code,
    /// which could otherwise fill the server's disk). A build that
    /// installs runs in a tmpfs of this size, counted towards its 4 GiB of
    /// memory, and is copied to disk when it ends.
    #[arg(long, env = "SLESS_MAX_BUILD_MB", default_value_t = 1024)]
    pub max_build_mb: u64,

    /// Most entries a code archive may hold.
    #[arg(long, env = "SLESS_MAX_ARCHIVE_ENTRIES", default_value_t = 10_000)]
    pub max_archive_entries: usize,

    /// Largest JSON request body under /v1 in bytes.
    #[arg(long, env = "SLESS_MAX_JSON_BYTES", default_value_t = 1024 * 1024)]
    pub max_json_bytes: usize,

    /// Code-safety gate on uploads: off, static (rules), or llm (rules, then an LLM reviewer).
    #[arg(long, env = "SLESS_CODE_CHECK", default_value = "off")]
    pub code_check: sless_codecheck::Mode,

    /// OpenAI-compatible endpoint for the LLM reviewer (base URL or .../v1/chat/completions).
    #[arg(long, env = "SLESS_LLM_ENDPOINT")]
    pub llm_endpoint: Option<String>,

    /// Bearer key for the LLM endpoint.
    #[arg(long, env = "SLESS_LLM_API_KEY", hide_env_values = true)]
    pub llm_api_key: Option<String>,

    /// Model name sent to the LLM endpoint.
    #[arg(long, env = "SLESS_LLM_MODEL", default_value = "gpt-4o-mini")]
    pub llm_model: String,

    /// Seconds to wait for the LLM reviewer.
    #[arg(long, env = "SLESS_LLM_TIMEOUT", default_value_t = 15)]
    pub llm_timeout: u64,

    /// File whose text replaces the reviewer's system prompt.
    #[arg(long, env = "SLESS_LLM_PROMPT_FILE")]
    pub llm_prompt_file: Option<PathBuf>,

    /// What an LLM failure does: open (warn, continue, status "unchecked") or closed (refuse with 503).
    #[arg(long, env = "SLESS_LLM_FAIL_MODE", default_value = "open")]
    pub llm_fail_mode: sless_codecheck::FailMode,

    /// Most bytes of text sent to the LLM reviewer; above it the review is skipped.
    #[arg(long, env = "SLESS_LLM_SIZE_BUDGET", default_value_t = 100 * 1024)]
    pub llm_size_budget: usize,

    /// Largest request body the /fn gateway passes to a handler.
    #[arg(long, env = "SLESS_MAX_INVOKE_BYTES", default_value_t = 6 * 1024 * 1024)]
    pub max_invoke_bytes: usize,

    /// Largest asynchronous call (`X-Sless-Invocation-Type: Event`), as it
    /// is stored until delivered: its body, path, query and headers.
    #[arg(long, env = "SLESS_ASYNC_MAX_EVENT_BYTES", default_value_t = 256 * 1024)]
    pub async_max_event_bytes: usize,

    /// Asynchronous events waiting (queued or running) per namespace at
    /// most; more are refused with 429.
    #[arg(long, env = "SLESS_ASYNC_MAX_BACKLOG", default_value_t = 200_000)]
    pub async_max_backlog: u64,

    /// What the asynchronous events waiting per namespace hold at most, in
    /// MiB (bodies, headers, paths and queries as stored); more are
    /// refused with 429. Anyone may call `/fn` asynchronously: without it,
    /// 200,000 events of 256 KiB were 50 GiB of one namespace's on disk.
    #[arg(long, env = "SLESS_ASYNC_MAX_BACKLOG_MB", default_value_t = 1024)]
    pub async_max_backlog_mb: u64,

    /// Asynchronous events this server delivers at once.
    #[arg(long, env = "SLESS_ASYNC_CONCURRENCY", default_value_t = 64)]
    pub async_concurrency: usize,

    /// Asynchronous events of one namespace this server delivers at once
    /// (default: three quarters of SLESS_ASYNC_CONCURRENCY), so that one tenant's
    /// slow events leave slots to the others.
    #[arg(long, env = "SLESS_ASYNC_NS_CONCURRENCY")]
    pub async_ns_concurrency: Option<usize>,

    /// Wait after an asynchronous event's first failed attempt, in
    /// milliseconds; doubled after each further one (at most 5 minutes).
    #[arg(long, env = "SLESS_ASYNC_RETRY_BASE_MS", default_value_t = 1000)]
    pub async_retry_base_ms: u64,

    /// Largest response a handler may give (body); the shim refuses a
    /// larger one with a 500, and the server closes an instance that sends more.
    #[arg(long, env = "SLESS_MAX_RESPONSE_BYTES", default_value_t = 6 * 1024 * 1024)]
    pub max_response_bytes: usize,

    /// Connections open at once at most; beyond it the connection idle
    /// longest is closed to make room, or, when every one serves a request,
    /// the new one gets a 503 (also capped at half the open-files limit).
    #[arg(long, env = "SLESS_MAX_CONNECTIONS", default_value_t = 4096)]
    pub max_connections: usize,

    /// Seconds a client has to send a request's head, from its first byte.
    #[arg(long, env = "SLESS_HEADER_TIMEOUT_SEC", default_value_t = 10)]
    pub header_timeout_sec: u64,

    /// Seconds a kept-alive connection may sit idle between requests: longer
    /// than clients keep pooled connections (reqwest 90 s, browsers less),
    /// so none sends a request on a connection the server is closing.
    #[arg(long, env = "SLESS_IDLE_CONNECTION_TIMEOUT_SEC", default_value_t = 120)]
    pub idle_connection_timeout_sec: u64,

    /// Seconds a client has to send a request's whole body.
    #[arg(long, env = "SLESS_BODY_TIMEOUT_SEC", default_value_t = 60)]
    pub body_timeout_sec: u64,

    /// Seconds a response write may make no progress (a client that does
    /// not read) before the connection is closed.
    #[arg(long, env = "SLESS_WRITE_TIMEOUT_SEC", default_value_t = 30)]
    pub write_timeout_sec: u64,

    /// RabbitMQ brokers amqp triggers may connect to, comma-separated
    /// `host` or `host:port`; empty (the default): none.
    #[arg(long, env = "SLESS_AMQP_ALLOWED_HOSTS", value_delimiter = ',')]
    pub amqp_allowed_hosts: Vec<String>,

    /// Bearer token that may read `/metrics` besides the admin token.
    #[arg(long, env = "SLESS_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,

    /// Seconds an instance may sit idle before it is stopped (scale to zero).
    #[arg(long, env = "SLESS_IDLE_TIMEOUT_SEC", default_value_t = 300)]
    pub idle_timeout_sec: u64,

    /// Requests that may wait for an instance per function; beyond it callers get 429.
    #[arg(long, env = "SLESS_MAX_QUEUE", default_value_t = 100)]
    pub max_queue: usize,

    /// Largest `memory_mb` a function may ask for.
    #[arg(long, env = "SLESS_MAX_MEMORY_MB", default_value_t = 4096)]
    pub max_memory_mb: u32,

    /// Largest `max_instances` (and so `min_instances` and `replicas`) of a function.
    #[arg(long, env = "SLESS_MAX_INSTANCES", default_value_t = 100)]
    pub max_instances: u32,

    /// Largest `timeout_sec` of a function.
    #[arg(long, env = "SLESS_MAX_TIMEOUT_SEC", default_value_t = 900)]
    pub max_timeout_sec: u32,

    /// Largest `build_timeout_sec` of a function.
    #[arg(long, env = "SLESS_MAX_BUILD_TIMEOUT_SEC", default_value_t = 3600)]
    pub max_build_timeout_sec: u32,

    /// Largest `tmp_mb` (an instance's /tmp) of a function.
    #[arg(long, env = "SLESS_MAX_TMP_MB", default_value_t = 1024)]
    pub max_tmp_mb: u32,

    /// Network namespaces for instances and builds: internet egress through
    /// pasta, the host's loopback and addresses and private ranges refused
    /// (needs root and the passt and nftables packages). Off: they share the host's network.
    #[arg(long, env = "SLESS_NETWORK_ISOLATION", default_value_t = true, action = clap::ArgAction::Set)]
    pub network_isolation: bool,

    /// Private destinations opened to one namespace's functions:
    /// `namespace=IPv4[/prefix][:port]`, comma separated (e.g. `billing=10.0.0.5:5432`).
    #[arg(long, env = "SLESS_PRIVATE_EGRESS", value_delimiter = ',')]
    pub private_egress: Vec<String>,

    /// Functions one namespace may hold.
    #[arg(long, env = "SLESS_NS_MAX_FUNCTIONS", default_value_t = 200)]
    pub ns_max_functions: u32,

    /// Instances one namespace may have at most (max_instances summed over
    /// its functions), and may run at once on this server (local driver:
    /// draining instances and job runs included).
    #[arg(long, env = "SLESS_NS_MAX_INSTANCES", default_value_t = 400)]
    pub ns_max_instances: u32,

    /// Memory one namespace may use at most (memory_mb x max_instances
    /// summed over its functions), and its running instances' memory_mb
    /// summed on this server (local driver).
    #[arg(long, env = "SLESS_NS_MAX_MEMORY_MB", default_value_t = 131_072)]
    pub ns_max_memory_mb: u32,

    /// Builds one namespace runs at once (the others wait); the server runs
    /// two, so one namespace never holds both.
    #[arg(long, env = "SLESS_NS_MAX_BUILDS", default_value_t = 1)]
    pub ns_max_builds: u32,

    /// How long a build holds one of the server's two build slots: one
    /// still running after that runs on as a long build (beside them, up
    /// to SLESS_MAX_LONG_BUILDS) and its slot goes to the next build, so
    /// slow builds of a few namespaces do not hold every other one back.
    #[arg(long, env = "SLESS_BUILD_SHARE_SEC", default_value_t = 60)]
    pub build_share_sec: u32,

    /// Long builds (past SLESS_BUILD_SHARE_SEC) run at once at most,
    /// beside the two build slots; more keep their slot until one ends.
    #[arg(long, env = "SLESS_MAX_LONG_BUILDS", default_value_t = 2)]
    pub max_long_builds: u32,

    /// Job runs one namespace has under way at once; another is a 429.
    #[arg(long, env = "SLESS_NS_MAX_JOB_RUNS", default_value_t = 4)]
    pub ns_max_job_runs: u32,

    /// Triggers one namespace may hold (the cron loop reads every trigger
    /// twice a second, and each may carry an event).
    #[arg(long, env = "SLESS_NS_MAX_TRIGGERS", default_value_t = 400)]
    pub ns_max_triggers: u32,

    /// Jobs one namespace may hold (the leader reads every job of every
    /// namespace as it starts and converges runs, each with its event and
    /// its last result).
    #[arg(long, env = "SLESS_NS_MAX_JOBS", default_value_t = 400)]
    pub ns_max_jobs: u32,

    /// What one namespace's kept versions may take, in MiB: their artifacts
    /// (installed dependencies included) and uploaded archives. A build
    /// that would take the namespace past it fails, and the version before
    /// keeps serving. 75 GiB, as Lambda's code storage per account.
    #[arg(long, env = "SLESS_NS_MAX_STORAGE_MB", default_value_t = 76_800)]
    pub ns_max_storage_mb: u32,

    /// Calls of one namespace's functions through `/fn` under way at once
    /// on this replica (each holds a connection, from its head to its
    /// answer, queued or running); another is a 429, as Lambda's
    /// concurrency limit. Keeps one tenant's slow functions, or a flood of
    /// calls to them, from taking every connection the server has.
    #[arg(long, env = "SLESS_NS_MAX_CALLS", default_value_t = 1000)]
    pub ns_max_calls: u32,

    /// Pre-started generic interpreters kept per runtime for fast cold starts.
    #[arg(long, env = "SLESS_WARM_INSTANCES", default_value_t = 2)]
    pub warm_instances: usize,

    /// Python instances are forks of one interpreter that has imported the
    /// shim (a zygote), each confined as a sandbox of its own, instead of new
    /// interpreters (needs root; off: a new interpreter per instance).
    #[arg(long, env = "SLESS_PYTHON_ZYGOTE", default_value_t = true, action = clap::ArgAction::Set)]
    pub python_zygote: bool,

    /// Node instances are forks of a node that loaded the shim (a zygote per
    /// heap size), each confined as a sandbox of its own, instead of a new
    /// node per instance (needs the Python zygote on; off: a new node, from
    /// a startup snapshot, per instance).
    #[arg(long, env = "SLESS_NODE_ZYGOTE", default_value_t = true, action = clap::ArgAction::Set)]
    pub node_zygote: bool,

    /// Python 3.11 interpreter that runs handlers and pip (must live under /usr for the sandbox).
    #[arg(long, env = "SLESS_PYTHON", default_value = "/usr/bin/python3.11")]
    pub python: String,

    /// Node.js 20 binary that runs handlers.
    #[arg(long, env = "SLESS_NODE", default_value = "/usr/bin/node")]
    pub node: String,

    /// npm used for Node builds.
    #[arg(long, env = "SLESS_NPM", default_value = "/usr/bin/npm")]
    pub npm: String,

    /// Package index of Python builds (a PEP 503 simple index, e.g. a mirror); default: pip's (PyPI).
    #[arg(long, env = "SLESS_PIP_INDEX_URL")]
    pub pip_index_url: Option<String>,

    /// Registry of Node builds (e.g. a mirror); default: npm's (registry.npmjs.org).
    #[arg(long, env = "SLESS_NPM_REGISTRY")]
    pub npm_registry: Option<String>,

    /// Record every invocation (off only to measure the log pipeline's cost).
    #[arg(long, env = "SLESS_INVOCATION_LOG", default_value_t = true, action = clap::ArgAction::Set)]
    pub invocation_log: bool,

    /// Invocation records waiting to be written at most; beyond it they are dropped and counted.
    /// One namespace holds at most three times what is free of it (three quarters alone).
    #[arg(long, env = "SLESS_INVOCATION_BUFFER", default_value_t = 100_000)]
    pub invocation_buffer: usize,

    /// Bytes of invocation records (their output included) waiting to be written at most,
    /// shared between namespaces as the records are.
    #[arg(long, env = "SLESS_INVOCATION_BUFFER_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub invocation_buffer_bytes: usize,

    /// Days invocation records are kept.
    #[arg(long, env = "SLESS_INVOCATION_RETENTION_DAYS", default_value_t = 7)]
    pub invocation_retention_days: u64,

    /// Most invocation records kept per namespace.
    #[arg(long, env = "SLESS_INVOCATION_KEEP", default_value_t = 100_000)]
    pub invocation_keep: i64,

    /// Most invocation records kept per function (so one busy function does
    /// not prune its namespace neighbours' history).
    #[arg(long, env = "SLESS_INVOCATION_KEEP_PER_FUNCTION", default_value_t = 20_000)]
    pub invocation_keep_per_function: i64,

    /// Most bytes of stored (compressed) invocation records kept per namespace.
    #[arg(long, env = "SLESS_INVOCATION_MAX_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub invocation_max_bytes: i64,

    /// Versions of a function whose artifacts and archives are kept (the
    /// newest ones; versions an alias points at are kept besides).
    #[arg(long, env = "SLESS_KEEP_VERSIONS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub keep_versions: u32,

    /// How often (seconds) a server removes the artifacts on its disk that
    /// no version uses (a replica keeps its copies of versions the leader
    /// pruned, and of deleted functions, until then).
    #[arg(long, env = "SLESS_ARTIFACT_SWEEP_SEC", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub artifact_sweep_sec: u64,

    /// How often (milliseconds) the scheduler looks for due cron ticks.
    #[arg(long, env = "SLESS_CRON_TICK_MS", default_value_t = 500)]
    pub cron_tick_ms: u64,

    /// Seconds to let in-flight requests finish after SIGTERM.
    #[arg(long, env = "SLESS_SHUTDOWN_GRACE_SEC", default_value_t = 30)]
    pub shutdown_grace_sec: u64,

    /// Threads serving the API and the gateway; default: half the CPUs with
    /// the local driver (its instances run on this machine and need the
    /// rest), every CPU otherwise.
    #[arg(long, env = "SLESS_WORKER_THREADS")]
    pub worker_threads: Option<std::num::NonZeroUsize>,
}

impl Config {
    /// What every build's environment gets besides its own: the package
    /// index and registry, when set.
    pub fn build_env(&self) -> Vec<(String, String)> {
        let pip = self
            .pip_index_url
            .iter()
            .map(|url| ("PIP_INDEX_URL".to_string(), url.clone()));
        let npm = self
            .npm_registry
            .iter()
            .map(|url| ("npm_config_registry".to_string(), url.clone()));
        pip.chain(npm).collect()
    }

    /// The database URL in force.
    pub fn database_url(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", self.data_dir.join("sless.db").display()))
    }

    /// The blob store URL in force.
    pub fn blob_url(&self) -> String {
        self.blob_url
            .clone()
            .unwrap_or_else(|| format!("file://{}", self.data_dir.join("blobs").display()))
    }

    /// External base URL without a trailing slash.
    pub fn external_url(&self) -> String {
        match &self.external_url {
            Some(url) => url.trim_end_matches('/').to_string(),
            None => format!("http://{}", self.listen),
        }
    }

    /// Threads the server runs on.
    pub fn worker_threads(&self) -> usize {
        if let Some(n) = self.worker_threads {
            return n.get();
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        match self.driver {
            DriverKind::Local => (cpus / 2).max(1),
            DriverKind::Kubernetes => cpus,
        }
    }

    /// Whether several replicas may share this server's state (PostgreSQL):
    /// then a leader is elected and built artifacts go to the object store.
    pub fn shared(&self) -> bool {
        !self.database_url().starts_with("sqlite:")
    }

    /// How the code store is reached.
    pub fn blob_settings(&self) -> crate::blobs::BlobSettings {
        crate::blobs::BlobSettings {
            url: self.blob_url(),
            s3: self.s3.clone(),
        }
    }

    /// The code-safety gate's settings.
    pub fn code_check(&self) -> sless_codecheck::CheckConfig {
        sless_codecheck::CheckConfig {
            mode: self.code_check,
            llm_endpoint: self.llm_endpoint.clone(),
            llm_api_key: self.llm_api_key.clone(),
            llm_model: self.llm_model.clone(),
            llm_timeout: std::time::Duration::from_secs(self.llm_timeout),
            llm_prompt_file: self.llm_prompt_file.clone(),
            fail_mode: self.llm_fail_mode,
            size_budget_bytes: self.llm_size_budget,
        }
    }

    /// The largest values a function's spec may hold on this server.
    pub fn spec_limits(&self) -> sless_api::SpecLimits {
        sless_api::SpecLimits {
            memory_mb: self.max_memory_mb,
            instances: self.max_instances,
            timeout_sec: self.max_timeout_sec,
            build_timeout_sec: self.max_build_timeout_sec,
            tmp_mb: self.max_tmp_mb,
        }
    }

    /// Refuses settings that cannot work, naming the setting and its value.
    pub fn validate(&self) -> anyhow::Result<()> {
        let db = self.database_url();
        if !(db.starts_with("sqlite:") || db.starts_with("postgres://") || db.starts_with("postgresql://")) {
            anyhow::bail!("SLESS_DATABASE_URL {db:?}: expected sqlite://PATH or postgres://...");
        }
        if !(1..=10_000).contains(&self.async_concurrency) {
            anyhow::bail!(
                "SLESS_ASYNC_CONCURRENCY {}: expected 1 to 10000",
                self.async_concurrency
            );
        }
        if let Some(n) = self.async_ns_concurrency {
            if !(1..=self.async_concurrency).contains(&n) {
                anyhow::bail!(
                    "SLESS_ASYNC_NS_CONCURRENCY {n}: expected 1 to SLESS_ASYNC_CONCURRENCY ({})",
                    self.async_concurrency
                );
            }
        }
        if !(1..=3_600_000).contains(&self.async_retry_base_ms) {
            anyhow::bail!(
                "SLESS_ASYNC_RETRY_BASE_MS {}: expected 1 to 3600000",
                self.async_retry_base_ms
            );
        }
        let blob = self.blob_url();
        match blob.strip_prefix("s3://") {
            Some(rest) if rest.split('/').next().unwrap_or("").is_empty() => {
                anyhow::bail!("SLESS_BLOB_URL {blob:?}: expected s3://BUCKET[/PREFIX]")
            }
            Some(_) => {}
            None if !blob.starts_with("file://") => {
                anyhow::bail!("SLESS_BLOB_URL {blob:?}: expected file://DIR or s3://BUCKET[/PREFIX]")
            }
            None => {}
        }
        if let Some(endpoint) = &self.s3.endpoint {
            if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
                anyhow::bail!("SLESS_S3_ENDPOINT {endpoint:?}: expected an http:// or https:// URL");
            }
        }
        if self.s3.access_key_id.is_some() != self.s3.secret_access_key.is_some() {
            anyhow::bail!("SLESS_S3_ACCESS_KEY_ID and SLESS_S3_SECRET_ACCESS_KEY go together: set both or neither");
        }
        if self.driver == DriverKind::Kubernetes {
            self.kube.validate(&blob)?;
        }
        let urls = [
            ("SLESS_EXTERNAL_URL", &self.external_url),
            ("SLESS_PIP_INDEX_URL", &self.pip_index_url),
            ("SLESS_NPM_REGISTRY", &self.npm_registry),
        ];
        for (name, url) in urls {
            if let Some(url) = url {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    anyhow::bail!("{name} {url:?}: expected an http:// or https:// URL");
                }
            }
        }
        // Handlers and builds run on this machine with the local driver only.
        let local_runtimes = [
            ("SLESS_PYTHON", &self.python),
            ("SLESS_NODE", &self.node),
            ("SLESS_NPM", &self.npm),
        ];
        for (name, path) in local_runtimes.into_iter().filter(|_| self.driver == DriverKind::Local) {
            if !std::path::Path::new(path).exists() {
                anyhow::bail!("{name} {path:?}: no such file; install it or point {name} at the binary");
            }
        }
        // At least a spec's defaults (a function that sets nothing fits),
        // at most what any server accepts.
        let widest = sless_api::SpecLimits::default();
        let defaults: sless_api::FunctionSpec = serde_json::from_value(serde_json::json!({"runtime": "python3.11"}))
            .expect("a runtime is all a spec needs");
        for (name, value, lo, hi) in [
            (
                "SLESS_MAX_MEMORY_MB",
                self.max_memory_mb,
                defaults.memory_mb,
                widest.memory_mb,
            ),
            (
                "SLESS_MAX_INSTANCES",
                self.max_instances,
                defaults.max_instances,
                widest.instances,
            ),
            (
                "SLESS_MAX_TIMEOUT_SEC",
                self.max_timeout_sec,
                defaults.timeout_sec,
                widest.timeout_sec,
            ),
            (
                "SLESS_MAX_BUILD_TIMEOUT_SEC",
                self.max_build_timeout_sec,
                defaults.build_timeout_sec,
                widest.build_timeout_sec,
            ),
            ("SLESS_MAX_TMP_MB", self.max_tmp_mb, defaults.tmp_mb, widest.tmp_mb),
            ("SLESS_NS_MAX_FUNCTIONS", self.ns_max_functions, 1, u32::MAX),
            ("SLESS_NS_MAX_INSTANCES", self.ns_max_instances, 1, u32::MAX),
            ("SLESS_NS_MAX_MEMORY_MB", self.ns_max_memory_mb, 16, u32::MAX),
            ("SLESS_NS_MAX_BUILDS", self.ns_max_builds, 1, 64),
            ("SLESS_BUILD_SHARE_SEC", self.build_share_sec, 1, 86_400),
            ("SLESS_MAX_LONG_BUILDS", self.max_long_builds, 0, 64),
            ("SLESS_NS_MAX_JOB_RUNS", self.ns_max_job_runs, 1, u32::MAX),
            ("SLESS_NS_MAX_TRIGGERS", self.ns_max_triggers, 1, u32::MAX),
            ("SLESS_NS_MAX_CALLS", self.ns_max_calls, 1, u32::MAX),
            ("SLESS_NS_MAX_JOBS", self.ns_max_jobs, 1, u32::MAX),
            ("SLESS_NS_MAX_STORAGE_MB", self.ns_max_storage_mb, 1, u32::MAX),
        ] {
            if !(lo..=hi).contains(&value) {
                anyhow::bail!("{name} {value}: expected a value between {lo} and {hi}");
            }
        }
        if self.async_max_backlog_mb == 0 {
            anyhow::bail!("SLESS_ASYNC_MAX_BACKLOG_MB 0: expected at least 1 (MiB)");
        }
        let unpacked_mb = self.max_unpacked_bytes.div_ceil(1 << 20);
        if !(unpacked_mb.max(64)..=3072).contains(&self.max_build_mb) {
            anyhow::bail!(
                "SLESS_MAX_BUILD_MB {}: expected a value between {} (SLESS_MAX_UNPACKED_BYTES, in MiB, or 64) and 3072 (a build has 4 GiB of memory, which its directory counts towards)",
                self.max_build_mb,
                unpacked_mb.max(64)
            );
        }
        sless_driver_local::PrivateEgress::parse_all(&self.private_egress).map_err(anyhow::Error::msg)?;
        crate::triggers::brokers::BrokerAllowList::parse(&self.amqp_allowed_hosts).map_err(anyhow::Error::msg)?;
        if let Some(token) = &self.metrics_token {
            if token.len() < 16 {
                anyhow::bail!("SLESS_METRICS_TOKEN is too short: use at least 16 characters");
            }
        }
        for (name, key) in [
            ("SLESS_SECRET_KEY", &self.secret_key),
            ("SLESS_SECRET_KEY_PREVIOUS", &self.secret_key_previous),
        ] {
            if let Some(key) = key {
                crate::secrets::decode_key(key).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
            }
        }
        if self.secret_key_previous.is_some() && self.secret_key.is_none() {
            anyhow::bail!("SLESS_SECRET_KEY_PREVIOUS is set without SLESS_SECRET_KEY: rotation needs the new key too");
        }
        if let Some(token) = &self.admin_token {
            if token.len() < 16 {
                anyhow::bail!("SLESS_ADMIN_TOKEN is too short: use at least 16 characters");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        config: Config,
    }

    fn with(args: &[&str]) -> Result<(), String> {
        let config = Command::try_parse_from(std::iter::once("sless").chain(args.iter().copied()))
            .unwrap()
            .config;
        config.validate().map_err(|e| e.to_string())
    }

    #[test]
    fn a_namespaces_async_share_is_at_most_the_servers_slots() {
        assert_eq!(
            with(&["--async-concurrency", "8", "--async-ns-concurrency", "8"]),
            Ok(())
        );
        for share in ["0", "9"] {
            let error = with(&["--async-concurrency", "8", "--async-ns-concurrency", share]).unwrap_err();
            assert!(error.contains("SLESS_ASYNC_NS_CONCURRENCY"), "{error}");
        }
    }

    /// A build's directory holds at least an unpacked archive, and fits in
    /// the build's memory, which its tmpfs counts towards.
    #[test]
    fn a_build_s_directory_holds_an_archive_and_fits_its_memory() {
        assert_eq!(with(&["--max-build-mb", "3072"]), Ok(()));
        assert_eq!(
            with(&["--max-build-mb", "100", "--max-unpacked-bytes", "104857600"]),
            Ok(())
        );
        for (mb, unpacked) in [("3073", "1048576"), ("200", "262144000"), ("63", "1048576")] {
            let error = with(&["--max-build-mb", mb, "--max-unpacked-bytes", unpacked]).unwrap_err();
            assert!(error.starts_with(&format!("SLESS_MAX_BUILD_MB {mb}:")), "{error}");
        }
    }
}
