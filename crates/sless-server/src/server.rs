//! Start-up and shutdown: open the store and code store, join the other
//! replicas (PostgreSQL), bind, serve until SIGTERM or Ctrl-C, then hand
//! the leader's work back at once and drain in-flight requests.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::archive::ArchiveRules;
use crate::config::Config;
use crate::state::AppState;
use crate::{auth, blobs, http, store};

/// Code uploads one namespace has under way at once (each held whole, up
/// to `SLESS_MAX_UPLOAD_BYTES`, until checked); more wait their turn.
const UPLOADS_PER_NAMESPACE: usize = 2;

/// Code uploads of one namespace that wait for a turn (holding their
/// connection, their bodies unread); more are refused (429) at once.
const UPLOADS_WAITING_PER_NAMESPACE: usize = 8;

/// How long a shutdown waits for the invocation records of the calls that
/// ended to be stored, after the grace period for the calls themselves.
const RECORDS_WRITE_GRACE: Duration = Duration::from_secs(5);

/// Runs the server until a shutdown signal; returns once in-flight requests
/// have finished (or the grace period ran out).
pub async fn run(config: Config) -> anyhow::Result<()> {
    config.validate()?;
    // A cluster that cannot be reached is said at once, before anything starts.
    let kube_client = match config.driver {
        crate::config::DriverKind::Kubernetes => Some(crate::kube_options::connect(&config.kube).await?),
        crate::config::DriverKind::Local => None,
    };
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|e| anyhow::anyhow!("creating data dir {}: {e}", config.data_dir.display()))?;
    let store = store::open(&config.database_url()).await?;
    let blobs = blobs::open(&config.blob_settings()).await?;
    make_private(&config);
    let check_metrics = Arc::new(sless_codecheck::CheckMetrics::new());
    let code_check = sless_codecheck::build(&config.code_check(), check_metrics.clone())
        .map_err(|e| anyhow::anyhow!("code check settings: {e}"))?;
    let secrets = crate::secrets::Secrets::start(
        store.clone(),
        config.secret_key.as_deref(),
        config.secret_key_previous.as_deref(),
        &config.data_dir,
        config.shared(),
    )
    .await?;
    let admin_hash = auth::admin_token_hash(config.admin_token.as_deref(), &config.data_dir)?;
    let open_files = crate::listener::raise_open_files_limit();
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("listening on {} (SLESS_LISTEN): {e}", config.listen))?;
    let addr = listener.local_addr()?;
    let mut config = config;
    config.listen = addr;
    let cluster = if config.shared() {
        crate::cluster::Cluster::join(&config.database_url(), &addr.to_string()).await?
    } else {
        crate::cluster::Cluster::single()
    };
    let grace = Duration::from_secs(config.shutdown_grace_sec);
    let archive_rules = ArchiveRules {
        max_unpacked_bytes: config.max_unpacked_bytes,
        max_entries: config.max_archive_entries,
        // Off, the gate reads nothing: archives are checked in a fixed buffer.
        keep_contents: config.code_check != sless_codecheck::Mode::Off,
        ..ArchiveRules::default()
    };
    let driver: Arc<dyn sless_driver::Driver> = match kube_client {
        Some(client) => Arc::new(crate::kube_options::driver(&config, client, blobs.clone())?),
        None => Arc::new(local_driver(&config, blobs.clone())?),
    };
    let metrics = Arc::new(crate::metrics::Metrics::default());
    let log = crate::invocations::InvocationLog::start(
        store.clone(),
        crate::invocations::LogSettings {
            buffer: config.invocation_buffer,
            buffer_bytes: config.invocation_buffer_bytes,
            batch: 2000,
            flush_interval: Duration::from_millis(50),
            retention: Duration::from_secs(config.invocation_retention_days * 86_400),
            keep: config.invocation_keep,
            keep_per_function: config.invocation_keep_per_function,
            max_bytes: config.invocation_max_bytes,
            enabled: config.invocation_log,
            leading: cluster.leadership.watch(),
        },
    );
    let routes = Arc::new(crate::routes::Routes::default());
    let versions = crate::versions::Versions::new(
        store.clone(),
        blobs.clone(),
        driver.clone(),
        routes.clone(),
        cluster.leadership.clone(),
        secrets.clone(),
        config.keep_versions as usize,
    );
    versions.start_sweeping();
    let records = log.clone();
    let invoker = Arc::new(crate::invoker::Invoker {
        driver: driver.clone(),
        routes: routes.clone(),
        versions: versions.clone(),
        log,
        metrics: metrics.clone(),
    });
    let deployer = crate::deploy::Deployer::new(
        store.clone(),
        blobs.clone(),
        driver.clone(),
        versions.clone(),
        metrics.clone(),
        crate::deploy::UploadChecks {
            archive_rules,
            code_check,
            namespace_builds: config.ns_max_builds as usize,
            build_share: Duration::from_secs(config.build_share_sec.into()),
            long_builds: config.max_long_builds as usize,
            namespace_storage_bytes: u64::from(config.ns_max_storage_mb) << 20,
        },
        cluster.clone(),
    );
    deployer.restore_all().await?;
    deployer.start_sweeping(Duration::from_secs(config.artifact_sweep_sec));
    let triggers = crate::triggers::Triggers::start(
        store.clone(),
        invoker.clone(),
        Duration::from_millis(config.cron_tick_ms),
        cluster.leadership.clone(),
        crate::triggers::brokers::BrokerAllowList::parse(&config.amqp_allowed_hosts).map_err(anyhow::Error::msg)?,
        config.max_invoke_bytes,
        Duration::from_millis(config.async_retry_base_ms),
    )
    .await?;
    let jobs = crate::jobs::Jobs::new(
        store.clone(),
        invoker.clone(),
        config.ns_max_job_runs as usize,
        cluster.leadership.clone(),
    );
    let async_invocations = crate::async_invoke::AsyncInvocations::start(
        store::open_events(&config.database_url()).await?,
        store.clone(),
        invoker.clone(),
        crate::async_invoke::destinations::Publisher::new(
            crate::triggers::brokers::BrokerAllowList::parse(&config.amqp_allowed_hosts).map_err(anyhow::Error::msg)?,
        ),
        crate::async_invoke::AsyncSettings {
            max_backlog: config.async_max_backlog,
            max_backlog_bytes: config.async_max_backlog_mb << 20,
            delivery: crate::async_invoke::DeliverySettings {
                concurrency: config.async_concurrency,
                namespace_concurrency: config
                    .async_ns_concurrency
                    .unwrap_or(config.async_concurrency - config.async_concurrency / 4),
                retry_base: Duration::from_millis(config.async_retry_base_ms),
                lease: Duration::from_secs(60),
                max_outcome_bytes: config.async_max_event_bytes,
            },
            retention: Duration::from_secs(config.invocation_retention_days * 86_400),
            single: !config.shared(),
        },
        cluster.clone(),
    )
    .await?;
    let reconciler = crate::cluster::reconcile::Reconciler::start(
        cluster.clone(),
        crate::cluster::reconcile::Parts {
            store: store.clone(),
            deployer: deployer.clone(),
            triggers: triggers.clone(),
            jobs: jobs.clone(),
        },
    )
    .await;
    let ns_max_calls = config.ns_max_calls as usize;
    let state = Arc::new(AppState {
        config,
        store,
        blobs,
        check_metrics,
        driver: driver.clone(),
        invoker,
        metrics,
        deployer,
        routes,
        versions,
        triggers: triggers.clone(),
        jobs,
        async_invocations,
        cluster: cluster.clone(),
        admin_hash,
        secrets,
        follows: Arc::new(crate::state::Slots::new(crate::http::invocations::MAX_FOLLOWS)),
        record_reads: Arc::new(crate::state::Slots::new(crate::http::invocations::MAX_RECORD_READS)),
        calls: Arc::new(crate::state::Slots::new(ns_max_calls)),
        api_bodies: Arc::new(crate::state::Slots::new(crate::auth::API_BODIES_PER_NAMESPACE)),
        uploads: crate::state::Gates::new(UPLOADS_PER_NAMESPACE).waiting_at_most(UPLOADS_WAITING_PER_NAMESPACE),
        quota_turns: crate::state::Gates::new(1),
    });
    tracing::info!(%addr, database = %redact(&state.config.database_url()),
        replica = cluster.replica(), leader = cluster.is_leader(),
        worker_threads = state.config.worker_threads(), "sless server started");
    crate::say(&format!("sless: listening on http://{addr}"));

    // Half the descriptors at most for connections: the rest stay for the
    // instances' pipes, the store and the builds.
    let limits = crate::listener::Limits {
        max_connections: state.config.max_connections.min((open_files / 2).max(64) as usize),
        header_timeout: Duration::from_secs(state.config.header_timeout_sec),
        idle_timeout: Duration::from_secs(state.config.idle_connection_timeout_sec),
        body_timeout: Duration::from_secs(state.config.body_timeout_sec),
        write_timeout: Duration::from_secs(state.config.write_timeout_sec),
    };
    tracing::info!(
        max_connections = limits.max_connections,
        open_files,
        "connection limits"
    );
    let deliveries = state.async_invocations.clone();
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let connections = state.metrics.connections.clone();
    let follows = records.clone();
    let serve = crate::listener::serve(listener, http::app(state), limits, connections, async move {
        shutdown_signal().await;
        tracing::info!("shutting down: draining in-flight requests (a second signal exits at once)");
        exit_on_second_signal();
        // Live tails end now: they would hold the drain to its grace.
        follows.end_follows();
        let _ = stop_tx.send(true);
    });
    let serve = tokio::spawn(serve);
    let _ = stop_rx.changed().await;
    // The leader's work stops and the lock goes first, so another replica
    // takes over while this one drains.
    reconciler.shutdown().await;
    // Calls in flight (over HTTP and from cron ticks) and asynchronous
    // attempts under way drain together, within the one grace period.
    let drained = async { tokio::join!(serve, deliveries.drain(), triggers.drain()).0 };
    tokio::select! {
        result = drained => result?,
        _ = async { tokio::time::sleep(grace).await } => {
            tracing::warn!(grace_sec = grace.as_secs(), "grace period over; exiting with requests still in flight");
        }
    }
    deliveries.hand_back().await;
    triggers.shutdown().await;
    // The records of the calls that ended are stored before the process
    // ends (the writer waits 50 ms to fill a batch, and then takes a moment).
    if tokio::time::timeout(RECORDS_WRITE_GRACE, records.close())
        .await
        .is_err()
    {
        tracing::warn!("invocation records still unwritten at exit");
    }
    cluster.leave().await;
    driver.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

/// A second SIGTERM or Ctrl-C during the drain exits at once (status 1),
/// as an impatient operator means it; the next start on the data dir
/// cleans up what the server leaves. Registered before it returns, so a
/// signal from then on is seen.
fn exit_on_second_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut interrupt)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
        else {
            return;
        };
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = interrupt.recv() => {}
            }
            crate::say_error("sless: a second signal: exiting without waiting for what is under way");
            std::process::exit(1);
        });
    }
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// A database URL with its password hidden, for logs.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// The data dir is traversable by sandboxed users (0711); what is inside and
/// private is readable by the server alone.
fn make_private(config: &Config) {
    use std::os::unix::fs::PermissionsExt;
    let data = &config.data_dir;
    let mut private = vec![data.join("blobs"), data.join("admin-token")];
    for suffix in ["", "-wal", "-shm"] {
        private.push(data.join(format!("sless.db{suffix}")));
    }
    for path in private {
        let mode = if path.is_dir() { 0o700 } else { 0o600 };
        if path.exists() {
            if let Err(e) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)) {
                tracing::warn!(path = %path.display(), error = %e, "could not make a data file private");
            }
        }
    }
}

/// The local driver (the embedded default) as `config` says.
fn local_driver(
    config: &Config,
    blobs: Arc<dyn object_store::ObjectStore>,
) -> anyhow::Result<sless_driver_local::LocalDriver> {
    sless_driver_local::LocalDriver::start(
        &config.data_dir,
        sless_driver_local::LocalSettings {
            python: config.python.clone(),
            node: config.node.clone(),
            npm: config.npm.clone(),
            build_env: config.build_env(),
            max_build_bytes: config.max_build_mb << 20,
            warm_per_runtime: config.warm_instances,
            python_zygote: config.python_zygote,
            node_zygote: config.node_zygote,
            pool: sless_driver_local::PoolSettings {
                idle_timeout: Duration::from_secs(config.idle_timeout_sec),
                max_queue: config.max_queue,
                load_timeout: Duration::from_secs(30),
                max_response_bytes: config.max_response_bytes,
            },
            isolation: sless_driver_local::IsolationSettings {
                network: config.network_isolation,
                private_egress: sless_driver_local::PrivateEgress::parse_all(&config.private_egress)
                    .map_err(anyhow::Error::msg)?,
            },
            // The quotas on what a namespace declares bound what it runs too.
            namespace_limits: sless_driver_local::NamespaceLimits {
                instances: config.ns_max_instances,
                memory_mb: config.ns_max_memory_mb.into(),
            },
        },
        // Replicas fetch what another one built from the object store.
        config.shared().then_some(blobs),
    )
}
