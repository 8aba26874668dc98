//! `sless instance generic`: a warm pool's instance. It starts the shim of
//! its runtime before it knows its function (the slow part of a cold
//! start: the interpreter and the shim's imports), answers `GET /ready`
//! with `generic`, and takes ONE `POST /specialize` on its readiness port:
//! with the pool's token, the function's artifact (a presigned GET, its
//! sha256 checked) and spec. It then loads the handler and serves frames
//! exactly as a function pod does, for good: a second specialization is
//! refused (409), a load failure ends the process (the driver deletes the
//! pod). The pod never holds the object store's credentials.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use sless_driver_k8s::warm::{Specialization, GENERIC_READY, MAX_SPECIALIZATION_BYTES, SPECIALIZE_PATH};
use sless_driver_local::standalone::{GenericShim, Standalone};
use sless_driver_local::StartFailure;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Mutex};

use super::serve::{bind_frames, serve_spec, standalone_spec, supervise, LOAD_FAILED};
use super::InstanceConfig;

/// How long the artifact's download may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// A specialized instance, handed from the endpoint to the main task.
struct Specialized {
    config: InstanceConfig,
    instance: Arc<Standalone>,
}

/// What the readiness port's handlers share.
struct Generic {
    config: InstanceConfig,
    token: String,
    /// The waiting shim, until a specialization takes it.
    shim: Mutex<Option<GenericShim>>,
    /// A specialization has started (the shim is gone from `shim`).
    taken: AtomicBool,
    /// The handler is loaded and frames are served.
    loaded: Arc<AtomicBool>,
    /// Where the specialized instance (or a load failure's exit code) goes.
    handoff: Mutex<Option<oneshot::Sender<Result<Specialized, i32>>>>,
    /// The frame port, bound before the shim started (which holds a copy).
    frames: Arc<OwnedFd>,
}

pub async fn run(config: InstanceConfig) -> anyhow::Result<i32> {
    let runtime = config.runtime()?;
    let token = config
        .warm_token
        .clone()
        .filter(|t| !t.is_empty())
        .context("SLESS_INSTANCE_WARM_TOKEN is not set")?;
    let mut placeholder = config.clone();
    placeholder.namespace = "sless-warm".into();
    placeholder.function = "generic".into();
    let frames = bind_frames(&config)?;
    let mut spec = standalone_spec(&placeholder, runtime, Default::default());
    spec.serve = Some(serve_spec(&placeholder, runtime, &frames));
    let shim = GenericShim::spawn(&spec)
        .await
        .map_err(|e| anyhow::anyhow!("the generic shim could not start: {e}"))?;
    let mut died = shim.died();
    let (handoff, handed) = oneshot::channel();
    let state = Arc::new(Generic {
        config: config.clone(),
        token,
        shim: Mutex::new(Some(shim)),
        taken: AtomicBool::new(false),
        loaded: Arc::new(AtomicBool::new(false)),
        handoff: Mutex::new(Some(handoff)),
        frames,
    });
    let listener = TcpListener::bind(config.ready_listen)
        .await
        .map_err(|e| anyhow::anyhow!("SLESS_INSTANCE_READY_LISTEN {}: {e}", config.ready_listen))?;
    let app = Router::new()
        .route("/ready", get(readiness))
        .route(SPECIALIZE_PATH, post(specialize))
        .layer(DefaultBodyLimit::max(MAX_SPECIALIZATION_BYTES))
        .with_state(state.clone());
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the readiness port stopped");
        }
    });
    tracing::info!(runtime = runtime.as_str(), "generic instance ready");
    tokio::pin!(handed);
    let outcome = loop {
        tokio::select! {
            outcome = &mut handed => break outcome,
            _ = died.changed(), if !state.taken.load(Ordering::SeqCst) => {
                if state.taken.load(Ordering::SeqCst) {
                    // The load under way owns the shim's fate (and answers it).
                    continue;
                }
                let reason = died.borrow().clone().unwrap_or_default();
                tracing::error!("the generic shim died: {reason}");
                return Ok(1);
            }
        }
    };
    match outcome {
        Ok(Ok(specialized)) => supervise(&specialized.config, specialized.instance, state.loaded.clone()).await,
        Ok(Err(code)) => {
            // Let the endpoint's answer (the load error) go out first.
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok(code)
        }
        Err(_) => anyhow::bail!("the specialization endpoint went away"),
    }
}

/// 200 `generic` while waiting, 200 `ready` once loaded, 503 in between;
/// one answer per connection, as `ready.rs` answers a probe.
async fn readiness(State(state): State<Arc<Generic>>) -> (StatusCode, [(&'static str, &'static str); 1], &'static str) {
    let close = [("connection", "close")];
    if state.loaded.load(Ordering::SeqCst) {
        (StatusCode::OK, close, "ready\n")
    } else if !state.taken.load(Ordering::SeqCst) {
        (StatusCode::OK, close, GENERIC_READY)
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, close, "specializing\n")
    }
}

type Refusal = (StatusCode, String);

/// Takes the one specialization: checks the token and the request, then
/// fetches, loads and starts serving; 200 once frames are served.
async fn specialize(
    State(state): State<Arc<Generic>>,
    headers: HeaderMap,
    Json(request): Json<Specialization>,
) -> Result<Json<serde_json::Value>, Refusal> {
    let offered = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if !same_secret(offered.as_bytes(), state.token.as_bytes()) {
        return Err((StatusCode::UNAUTHORIZED, "not this pool's token\n".into()));
    }
    check(&state.config, &request)?;
    let Some(shim) = state.shim.lock().await.take() else {
        return Err((StatusCode::CONFLICT, "this pod has been specialized already\n".into()));
    };
    state.taken.store(true, Ordering::SeqCst);
    let started = Instant::now();
    let handoff = state.handoff.lock().await.take();
    let result = load(&state.config, shim, &state.frames, &request).await;
    let (outcome, answer) = match result {
        Ok(specialized) => {
            state.loaded.store(true, Ordering::SeqCst);
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            tracing::info!(function = %request.function, version = request.version, ms, "specialized");
            (
                Ok(specialized),
                Ok(Json(serde_json::json!({ "loaded": true, "ms": ms }))),
            )
        }
        Err((code, refusal)) => {
            tracing::error!(function = %request.function, error = %refusal.1, "specialization failed");
            (Err(code), Err(refusal))
        }
    };
    if let Some(handoff) = handoff {
        let _ = handoff.send(outcome);
    }
    answer
}

/// What a generic pod refuses before it gives its shim away.
fn check(config: &InstanceConfig, request: &Specialization) -> Result<(), Refusal> {
    let bad = |why: String| Err((StatusCode::BAD_REQUEST, why + "\n"));
    if Some(request.runtime.as_str()) != config.runtime.as_deref() {
        return bad(format!(
            "this pod runs {}, not {}",
            config.runtime.as_deref().unwrap_or("?"),
            request.runtime
        ));
    }
    if let Some(limit) = config.memory_mb.filter(|limit| request.memory_mb > *limit) {
        return bad(format!(
            "this pod has {limit} MiB, the function wants {}",
            request.memory_mb
        ));
    }
    if request.concurrency == 0 || request.timeout_sec == 0 {
        return bad("concurrency and timeout_sec must be at least 1".into());
    }
    if request.digest.len() != 64 || !request.digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        return bad("digest: expected a sha256 in hex".into());
    }
    if !request.artifact_url.starts_with("http://") && !request.artifact_url.starts_with("https://") {
        return bad("artifact_url: expected an http(s) URL".into());
    }
    Ok(())
}

/// Fetches and checks the artifact, loads the handler, which then serves
/// `frames`; a load failure is the user's (exit [`LOAD_FAILED`], 422).
async fn load(
    config: &InstanceConfig,
    shim: GenericShim,
    frames: &Arc<OwnedFd>,
    request: &Specialization,
) -> Result<Specialized, (i32, Refusal)> {
    let internal = |e: String| (1, (StatusCode::INTERNAL_SERVER_ERROR, e + "\n"));
    let tarball = fetch(&request.artifact_url)
        .await
        .map_err(|e| internal(format!("{e:#}")))?;
    sless_driver_local::standalone::unpack_artifact(tarball, &config.code_dir, &request.digest)
        .await
        .map_err(|e| internal(format!("the artifact {e}")))?;
    let code = config.code_dir.clone();
    tokio::task::spawn_blocking(move || read_only(&code))
        .await
        .map_err(|e| internal(e.to_string()))?
        .map_err(|e| internal(format!("making the code read-only: {e}")))?;
    let mut config = config.clone();
    config.namespace = request.namespace.clone();
    config.function = request.function.clone();
    config.version = request.version;
    config.entrypoint = request.entrypoint.clone();
    config.concurrency = request.concurrency;
    config.timeout_sec = request.timeout_sec;
    let runtime = config.runtime().map_err(|e| internal(e.to_string()))?;
    let mut spec = standalone_spec(&config, runtime, request.env.clone());
    spec.memory_mb = Some(request.memory_mb);
    spec.serve = Some(serve_spec(&config, runtime, frames));
    let instance = match shim.load(&spec).await {
        Ok(instance) => Arc::new(instance),
        Err(StartFailure::Load(error)) => {
            return Err((LOAD_FAILED, (StatusCode::UNPROCESSABLE_ENTITY, format!("{error}\n"))))
        }
        Err(StartFailure::Start(error)) => return Err(internal(error)),
    };
    Ok(Specialized { config, instance })
}

/// Takes the write bits off everything under `dir` and `dir` itself
/// (symbolic links left as they are): a function's own pods mount their
/// code read-only, and a handler behaves the same in a generic pod (its
/// writes to its code fail; Python writes no bytecode cache there). The
/// handler runs as the pod's one user, so this is parity, not a wall.
fn read_only(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            read_only(&entry.path())?;
        } else if entry.file_type()?.is_file() {
            let mode = entry.metadata()?.permissions().mode();
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(mode & !0o222))?;
        }
    }
    let mode = std::fs::metadata(dir)?.permissions().mode();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode & !0o222))
}

/// The artifact's tarball from its presigned URL (never printed: it is a
/// credential while it lasts), as it comes.
async fn fetch(url: &str) -> anyhow::Result<impl futures::Stream<Item = Result<bytes::Bytes, String>> + Unpin> {
    let response = reqwest::Client::new()
        .get(url)
        .timeout(FETCH_TIMEOUT)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("fetching the artifact: {}", e.without_url()))?;
    let status = response.status();
    if !status.is_success() {
        anyhow::bail!("fetching the artifact: the object store answered {status}");
    }
    Ok(Box::pin(futures::stream::try_unfold(
        response,
        |mut response| async move {
            let chunk = response.chunk().await.map_err(|e| e.without_url().to_string())?;
            Ok(chunk.map(|chunk| (chunk, response)))
        },
    )))
}

/// Compares two secrets in time independent of where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
