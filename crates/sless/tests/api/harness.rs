//! Starts the real `sless` binary on a free port with a private data dir and,
//! for PostgreSQL, a private database; cleans both up afterwards.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;

pub const ADMIN: &str = "test-admin-token-0123456789";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// `postgres://` URL of the server that holds the test databases.
fn pg_admin_url() -> String {
    std::env::var("SLESS_TEST_PG").unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/test".into())
}

/// A private PostgreSQL database, dropped when the test ends.
pub struct PgDb {
    pub name: String,
}

impl PgDb {
    pub async fn create() -> PgDb {
        use sqlx::Connection;
        let name = format!("sless_t_{}", hex_id());
        let mut conn = sqlx::PgConnection::connect(&pg_admin_url())
            .await
            .expect("PostgreSQL on 127.0.0.1:5432 is required for these tests (set SLESS_TEST_PG to point elsewhere)");
        sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .expect("create test database");
        PgDb { name }
    }

    pub fn url(&self) -> String {
        let base = pg_admin_url();
        let (prefix, _) = base.rsplit_once('/').expect("database URL has a path");
        format!("{prefix}/{}", self.name)
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args([
                &pg_admin_url(),
                "-q",
                "-c",
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Polls `check` until it returns `Ok`, at most for `timeout`; panics with
/// the last `Err` (what was seen instead). The one way tests wait for a
/// condition (as kube-rs's `await_condition`), instead of sleeping.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(seen) if std::time::Instant::now() >= deadline => {
                panic!("condition not met within {timeout:?}: {seen}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(25)).await,
        }
    }
}

/// The S3 server (`s3s-fs`) tests store code and artifacts in: the fake
/// cluster's, shared.
pub use sless_fake_cluster::S3Server;

/// The most memory process `pid` (running) has had resident, in bytes.
pub fn peak_memory(pid: u32) -> u64 {
    sless_fake_cluster::peak_memory(pid).unwrap_or_else(|| panic!("no VmHWM for process {pid}"))
}

pub fn hex_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// A running server and what it needs to be restarted on the same state.
pub struct Server {
    pub url: String,
    pub admin: String,
    pub data_dir: tempfile::TempDir,
    pub db: Option<PgDb>,
    pub extra_env: Vec<(String, String)>,
    child: Option<Child>,
    /// Lines the server printed on stdout (the listen line, a generated token).
    pub stdout_lines: Vec<String>,
    /// Where the server's log (stderr) goes, appended across restarts;
    /// None: the test's own stderr.
    pub log_file: Option<std::path::PathBuf>,
    /// A file the server is started holding open as fd 9, without
    /// close-on-exec, as a shell's `exec 9<>FILE` leaves it.
    pub inherits: Option<std::path::PathBuf>,
    client: reqwest::Client,
}

impl Server {
    pub async fn start(backend: Backend) -> Server {
        Server::start_with(backend, &[]).await
    }

    pub async fn start_with(backend: Backend, env: &[(&str, &str)]) -> Server {
        let db = match backend {
            Backend::Sqlite => None,
            Backend::Postgres => Some(PgDb::create().await),
        };
        let mut server = Server {
            url: String::new(),
            admin: ADMIN.into(),
            data_dir: tempfile::tempdir().expect("temp dir"),
            db,
            extra_env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            child: None,
            stdout_lines: Vec::new(),
            log_file: None,
            inherits: None,
            client: reqwest::Client::new(),
        };
        server.extra_env.push(("SLESS_ADMIN_TOKEN".into(), ADMIN.into()));
        server.spawn();
        server
    }

    /// Three servers, one per way a Node shim starts: a fork of the Node
    /// zygote; from the startup snapshot, waiting in the pool; from the
    /// snapshot, started for the cold start that waits for it (no warm
    /// shims: it is told so by a variable it removes before the handler loads).
    pub async fn node_shim_starts() -> [Server; 3] {
        [
            Server::start(Backend::Sqlite).await,
            Server::start_with(Backend::Sqlite, &[("SLESS_NODE_ZYGOTE", "false")]).await,
            Server::start_with(
                Backend::Sqlite,
                &[("SLESS_WARM_INSTANCES", "0"), ("SLESS_NODE_ZYGOTE", "false")],
            )
            .await,
        ]
    }

    /// [`Server::start_with`], with the server's log kept in a file of the
    /// data dir (`log_file`) for the test to read.
    pub async fn start_logged(backend: Backend, env: &[(&str, &str)]) -> Server {
        let db = match backend {
            Backend::Sqlite => None,
            Backend::Postgres => Some(PgDb::create().await),
        };
        let data_dir = tempfile::tempdir().expect("temp dir");
        let mut server = Server {
            url: String::new(),
            admin: ADMIN.into(),
            log_file: Some(data_dir.path().join("server.log")),
            data_dir,
            db,
            extra_env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            child: None,
            stdout_lines: Vec::new(),
            inherits: None,
            client: reqwest::Client::new(),
        };
        server.extra_env.push(("SLESS_ADMIN_TOKEN".into(), ADMIN.into()));
        server.spawn();
        server
    }

    /// `sless server` on this server's data dir / database, with its settings.
    fn command(&self) -> Command {
        let mut cmd = match &self.inherits {
            Some(file) => {
                let mut shell = Command::new("/bin/sh");
                shell.args(["-c", r#"exec 9<>"$0" && exec "$1" server"#]);
                shell.arg(file).arg(env!("CARGO_BIN_EXE_sless"));
                shell
            }
            None => {
                let mut server = Command::new(env!("CARGO_BIN_EXE_sless"));
                server.arg("server");
                server
            }
        };
        cmd.env("SLESS_LISTEN", "127.0.0.1:0")
            .env("SLESS_DATA_DIR", self.data_dir.path())
            .env("SLESS_LOG", "info")
            .env_remove("SLESS_ADMIN_TOKEN")
            .env_remove("SLESS_DATABASE_URL")
            // The machine's RabbitMQ (and the tests' proxies to it), as an operator would allow it.
            .env("SLESS_AMQP_ALLOWED_HOSTS", "127.0.0.1");
        if let Some(db) = &self.db {
            cmd.env("SLESS_DATABASE_URL", db.url());
        }
        for (k, v) in &self.extra_env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Starts the binary on the same data dir / database, which must
    /// refuse to start; what it printed on stderr.
    pub fn refused_start(&self) -> String {
        let log = self.data_dir.path().join("refused-start.log");
        let mut child = self
            .command()
            .env("RUST_BACKTRACE", "0")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn sless server");
        let exited = (0..600).find_map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            child.try_wait().expect("wait")
        });
        let _ = child.kill();
        let _ = child.wait();
        let stderr = std::fs::read_to_string(&log).unwrap_or_default();
        match exited {
            Some(status) if !status.success() => stderr,
            _ => panic!("the server did not refuse to start ({exited:?}): {stderr}"),
        }
    }

    /// Starts the binary on the same data dir / database.
    pub fn spawn(&mut self) {
        let mut cmd = self.command();
        cmd.stdout(Stdio::piped()).stderr(match &self.log_file {
            Some(path) => Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .expect("server log file"),
            ),
            None => Stdio::inherit(),
        });
        let mut child = cmd.spawn().expect("spawn sless server");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        self.stdout_lines.clear();
        loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("server printed its listen address within 60 s");
            self.stdout_lines.push(line.clone());
            if let Some(addr) = line.strip_prefix("sless: listening on ") {
                self.url = addr.trim().to_string();
                break;
            }
        }
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || while rx.recv().is_ok() {});
        self.child = Some(child);
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGKILL: no chance to flush or clean up.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait for the exit status.
    pub fn terminate_wait(&mut self) -> std::process::ExitStatus {
        Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("kill -TERM");
        self.wait_exit()
    }

    /// Waits (up to 30 s) for the server to exit, after a signal the test sent.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        for _ in 0..300 {
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        panic!("server did not exit within 30 s of SIGTERM");
    }

    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    pub fn request(&self, method: Method, path: &str, token: Option<&str>) -> reqwest::RequestBuilder {
        let mut req = self.client.request(method, format!("{}{path}", self.url));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        req
    }

    /// Every page of the list at `path` (with its query, but no `before`),
    /// following `next_before` from the newest: each page's size as sent,
    /// and the page.
    pub async fn pages(&self, path: &str) -> Vec<(usize, Value)> {
        let mut pages = Vec::new();
        let mut before = String::new();
        loop {
            let response = self
                .request(Method::GET, &format!("{path}&before={before}"), Some(&self.admin))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            let body = response.bytes().await.unwrap();
            let page: Value = serde_json::from_slice(&body).unwrap();
            let next = page["next_before"].as_str().map(str::to_string);
            pages.push((body.len(), page));
            match next {
                Some(next) => before = next,
                None => return pages,
            }
        }
    }

    /// [`Server::pages`] once they hold `items` items in all.
    pub async fn pages_holding(&self, path: &str, items: usize) -> Vec<(usize, Value)> {
        eventually(Duration::from_secs(120), || async {
            let pages = self.pages(path).await;
            let held: usize = pages.iter().map(|(_, p)| p["items"].as_array().unwrap().len()).sum();
            match held == items {
                true => Ok(pages),
                false => Err(format!("{held} of {items} items")),
            }
        })
        .await
    }

    /// Sends JSON (or nothing) as admin and returns status and JSON body.
    pub async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        self.call_as(Some(&self.admin.clone()), method, path, body).await
    }

    pub async fn call_as(
        &self,
        token: Option<&str>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self.request(method, path, token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        read(req.send().await.expect("request sent")).await
    }

    pub async fn upload(&self, ns: &str, name: &str, zip: Vec<u8>) -> (StatusCode, Value) {
        let req = self
            .request(
                Method::PUT,
                &format!("/v1/namespaces/{ns}/functions/{name}/code"),
                Some(&self.admin),
            )
            .header("content-type", "application/zip")
            .body(zip);
        read(req.send().await.expect("request sent")).await
    }

    /// Creates a scoped token and returns its secret.
    pub async fn token_for(&self, namespaces: &[&str]) -> String {
        let (status, body) = self
            .call(
                Method::POST,
                "/v1/tokens",
                Some(serde_json::json!({"name": format!("t-{}", hex_id()), "namespaces": namespaces})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body["token"].as_str().expect("token").to_string()
    }
}

impl Server {
    /// The artifacts on the server's disk (directories not hidden), sorted.
    pub fn artifacts(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.data_path().join("artifacts"))
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|name| !name.starts_with('.'))
            .collect();
        names.sort();
        names
    }

    /// Runs `sql` on the server's database (what an older server left, a
    /// record changed behind its back).
    pub async fn run_sql(&self, sql: &str) {
        use sqlx::Connection;
        match &self.db {
            Some(db) => {
                let mut conn = sqlx::PgConnection::connect(&db.url()).await.unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
            }
            None => {
                let url = format!("sqlite://{}", self.data_dir.path().join("sless.db").display());
                let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
            }
        }
    }

    /// The uploaded archives of a function kept on the server's disk.
    pub fn archives(&self, ns: &str, function: &str) -> usize {
        let dir = self.data_path().join("blobs/archives").join(ns).join(function);
        std::fs::read_dir(dir).map_or(0, |entries| entries.count())
    }

    /// The data dir the server runs on (a replica's may be another's).
    pub fn data_path(&self) -> std::path::PathBuf {
        self.extra_env
            .iter()
            .rev()
            .find(|(k, _)| k == "SLESS_DATA_DIR")
            .map(|(_, v)| std::path::PathBuf::from(v))
            .unwrap_or_else(|| self.data_dir.path().to_path_buf())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
        // A killed server cannot undo its mounts: what the next server on
        // this data dir would do at start is done now, so none stays.
        sless_driver_local::remove_leftovers(&self.data_path());
    }
}

/// Status and JSON body (Null when the body is empty); panics on a non-JSON body.
pub async fn read(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let text = response.text().await.expect("body");
    if text.is_empty() {
        return (status, Value::Null);
    }
    assert!(
        content_type.starts_with("application/json"),
        "{status}: non-JSON body ({content_type}): {text}"
    );
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status}: bad JSON {e}: {text}")),
    )
}

/// A zip built from `(name, contents)` pairs, deflated.
pub fn zip_of(files: &[(&str, &[u8])]) -> Vec<u8> {
    use std::io::Write;
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, contents) in files {
        writer.start_file(*name, options).expect("start file");
        writer.write_all(contents).expect("write file");
    }
    writer.finish().expect("finish zip").into_inner()
}

pub fn hello_zip() -> Vec<u8> {
    zip_of(&[(
        "handler.py",
        b"def handle(event, context):\n    return {'hello': 'world'}\n",
    )])
}

/// Runs each listed async test fn against both stores.
#[macro_export]
macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name($crate::api::harness::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name($crate::api::harness::Backend::Postgres).await
                }
            )*
        }
    };
}

/// The most bytes of records one answer holds (README, Limits): a page of
/// invocation records or of asynchronous events, a log's history.
pub const ANSWER_BYTES: usize = 4 << 20;

impl Server {
    /// Creates (or updates) a function, uploads `files` and waits until the
    /// uploaded code is Ready; returns the function.
    pub async fn deploy(&self, ns: &str, name: &str, spec: Value, files: &[(&str, &[u8])]) -> Value {
        let mut body = spec.clone();
        body["name"] = Value::String(name.into());
        let (status, created) = self
            .call(Method::POST, &format!("/v1/namespaces/{ns}/functions"), Some(body))
            .await;
        if status == StatusCode::CONFLICT {
            let (status, patched) = self
                .call(
                    Method::PATCH,
                    &format!("/v1/namespaces/{ns}/functions/{name}"),
                    Some(spec),
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{patched}");
        } else {
            assert_eq!(status, StatusCode::CREATED, "{created}");
        }
        let (status, uploaded) = self.upload(ns, name, zip_of(files)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{uploaded}");
        let hash = uploaded["status"]["code_hash"].as_str().unwrap().to_string();
        self.wait_built(ns, name, &hash).await
    }

    /// Like [`Server::deploy`] for code that must not go live: waits for the
    /// build to end and panics unless it is Failed; returns the function.
    pub async fn deploy_fails(&self, ns: &str, name: &str, spec: Value, files: &[(&str, &[u8])]) -> Value {
        let mut body = spec.clone();
        body["name"] = Value::String(name.into());
        let (status, _) = self
            .call(Method::POST, &format!("/v1/namespaces/{ns}/functions"), Some(body))
            .await;
        assert!(
            status == StatusCode::CREATED || status == StatusCode::CONFLICT,
            "{status}"
        );
        let (status, uploaded) = self.upload(ns, name, zip_of(files)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{uploaded}");
        let hash = uploaded["status"]["code_hash"].as_str().unwrap().to_string();
        let function = self.wait_build_end(ns, name, &hash).await;
        assert_eq!(function["status"]["phase"], "Failed", "{}", function["status"]);
        function
    }

    /// Waits until the build of `code_hash` has finished; panics unless it is Ready.
    pub async fn wait_built(&self, ns: &str, name: &str, code_hash: &str) -> Value {
        let function = self.wait_build_end(ns, name, code_hash).await;
        assert_eq!(
            function["status"]["phase"], "Ready",
            "build failed: {}",
            function["status"]
        );
        function
    }

    /// Waits until the build of `code_hash` has finished, Ready or Failed.
    pub async fn wait_build_end(&self, ns: &str, name: &str, code_hash: &str) -> Value {
        eventually(Duration::from_secs(120), || async {
            let (_, function) = self
                .call(Method::GET, &format!("/v1/namespaces/{ns}/functions/{name}"), None)
                .await;
            let status = &function["status"];
            let done = match status["phase"].as_str() {
                Some("Ready") => status["built_hash"] == code_hash,
                Some("Failed") => status["code_hash"] == code_hash,
                _ => false,
            };
            if done {
                Ok(function)
            } else {
                Err(format!("build did not finish: {function}"))
            }
        })
        .await
    }

    /// Calls the public gateway; returns status, headers and body text.
    pub async fn invoke(
        &self,
        method: Method,
        path: &str,
        body: &str,
    ) -> (StatusCode, reqwest::header::HeaderMap, String) {
        let response = self
            .request(method, path, None)
            .body(body.to_string())
            .send()
            .await
            .expect("request sent");
        let status = response.status();
        let headers = response.headers().clone();
        (status, headers, response.text().await.expect("body"))
    }

    /// One sample of a Prometheus metric, e.g. `sless_instances{namespace="a",function="b"}`.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let text = self
            .request(Method::GET, "/metrics", Some(&self.admin))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().parse().ok()))
    }

    /// Polls `series` until it equals `value` (within `secs`).
    pub async fn wait_metric(&self, series: &str, value: f64, secs: u64) {
        eventually(Duration::from_secs(secs), || async {
            match self.metric(series).await {
                Some(got) if got == value => Ok(()),
                got => Err(format!("{series} is at {got:?}, expected {value}")),
            }
        })
        .await
    }
}

impl Server {
    /// A second server on the same database and data dir (a replica).
    pub async fn start_sharing(other: &Server) -> Server {
        let mut env: Vec<(String, String)> = other.extra_env.clone();
        env.push(("SLESS_DATA_DIR".into(), other.data_dir.path().display().to_string()));
        if let Some(db) = &other.db {
            env.push(("SLESS_DATABASE_URL".into(), db.url()));
        }
        let mut server = Server {
            url: String::new(),
            admin: other.admin.clone(),
            data_dir: tempfile::tempdir().expect("temp dir"),
            db: None,
            extra_env: env,
            child: None,
            stdout_lines: Vec::new(),
            log_file: None,
            inherits: None,
            client: reqwest::Client::new(),
        };
        server.spawn();
        server
    }

    /// Polls GET `path` until `done` holds for the JSON body (within `secs`).
    pub async fn wait_for(&self, path: &str, secs: u64, done: impl Fn(&Value) -> bool) -> Value {
        eventually(Duration::from_secs(secs), || async {
            let (_, body) = self.call(Method::GET, path, None).await;
            if done(&body) {
                Ok(body)
            } else {
                Err(format!("{path} never reached the expected state: {body}"))
            }
        })
        .await
    }

    /// A replica of its own (own data dir) on `db_url` with `env`.
    pub fn replica(db_url: &str, env: &[(String, String)]) -> Server {
        let mut extra_env: Vec<(String, String)> = env.to_vec();
        extra_env.push(("SLESS_DATABASE_URL".into(), db_url.into()));
        extra_env.push(("SLESS_ADMIN_TOKEN".into(), ADMIN.into()));
        let mut server = Server {
            url: String::new(),
            admin: ADMIN.into(),
            data_dir: tempfile::tempdir().expect("temp dir"),
            db: None,
            extra_env,
            child: None,
            stdout_lines: Vec::new(),
            log_file: None,
            inherits: None,
            client: reqwest::Client::new(),
        };
        server.spawn();
        server
    }

    /// Whether this server says it leads (false when it does not answer).
    pub async fn leads(&self) -> bool {
        match self.request(Method::GET, "/healthz", None).send().await {
            Ok(response) => response
                .json::<Value>()
                .await
                .is_ok_and(|health| health["leader"] == true),
            Err(_) => false,
        }
    }

    /// Invocation records of a function (newest first, up to 1000).
    pub async fn records(&self, ns: &str, name: &str) -> Vec<Value> {
        let (status, page) = self
            .call(
                Method::GET,
                &format!("/v1/namespaces/{ns}/functions/{name}/invocations?limit=1000"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        page["items"].as_array().unwrap().clone()
    }

    /// The invocation records of a function once `done` holds for them
    /// (records are written in batches, so they come a moment after the call).
    pub async fn records_until(&self, ns: &str, name: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let done = &done;
        eventually(Duration::from_secs(15), || async move {
            let records = self.records(ns, name).await;
            if done(&records) {
                Ok(records)
            } else {
                Err(format!("the records of {ns}/{name} never got there: {records:?}"))
            }
        })
        .await
    }
}

/// A TCP proxy owned by a test, to cut a connection to a shared service
/// (PostgreSQL, RabbitMQ) without stopping the service itself: `up` false
/// closes every connection and refuses new ones (a reset); `held` true
/// keeps them open but passes nothing either way (a black hole, which no
/// keepalive notices); `hold_at` sets `held` when a client sends those
/// bytes (once), before they pass: a statement's text, which a client
/// sends the first time it runs it on a connection (no TLS on loopback),
/// stops a write at that statement.
pub struct TcpProxy {
    pub port: u16,
    pub up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub held: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub hold_at: std::sync::Arc<std::sync::Mutex<Option<Vec<u8>>>>,
}

/// Whether `sent` holds the bytes `hold_at` waits for (then no longer waited for).
fn trips(hold_at: &std::sync::Mutex<Option<Vec<u8>>>, sent: &[u8]) -> bool {
    let mut hold_at = hold_at.lock().unwrap();
    let tripped = hold_at
        .as_ref()
        .is_some_and(|pattern| sent.windows(pattern.len()).any(|w| w == pattern.as_slice()));
    if tripped {
        *hold_at = None;
    }
    tripped
}

impl TcpProxy {
    pub async fn start(target: u16) -> TcpProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let held = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let hold_at = std::sync::Arc::new(std::sync::Mutex::new(None::<Vec<u8>>));
        let flag = up.clone();
        let hold = held.clone();
        let trip = hold_at.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                if !flag.load(std::sync::atomic::Ordering::SeqCst) {
                    continue; // dropped: the connection closes at once
                }
                let (flag, hold, trip) = (flag.clone(), hold.clone(), trip.clone());
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    let (mut cr, mut cw) = client.split();
                    let (mut sr, mut sw) = server.split();
                    let mut a = [0u8; 16384];
                    let mut b = [0u8; 16384];
                    // What the client sent when `hold_at` tripped, passed once released.
                    let mut stopped: Option<Vec<u8>> = None;
                    loop {
                        if hold.load(std::sync::atomic::Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            if !flag.load(std::sync::atomic::Ordering::SeqCst) {
                                break;
                            }
                            continue;
                        }
                        if let Some(sent) = stopped.take() {
                            if tokio::io::AsyncWriteExt::write_all(&mut sw, &sent).await.is_err() {
                                break;
                            }
                        }
                        tokio::select! {
                            n = tokio::io::AsyncReadExt::read(&mut cr, &mut a) => match n {
                                Ok(0) | Err(_) => break,
                                Ok(n) if trips(&trip, &a[..n]) => {
                                    hold.store(true, std::sync::atomic::Ordering::SeqCst);
                                    stopped = Some(a[..n].to_vec());
                                }
                                Ok(n) => { if tokio::io::AsyncWriteExt::write_all(&mut sw, &a[..n]).await.is_err() { break } }
                            },
                            n = tokio::io::AsyncReadExt::read(&mut sr, &mut b) => match n { Ok(0) | Err(_) => break, Ok(n) => { if tokio::io::AsyncWriteExt::write_all(&mut cw, &b[..n]).await.is_err() { break } } },
                            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                        }
                        if !flag.load(std::sync::atomic::Ordering::SeqCst) {
                            break;
                        }
                    }
                });
            }
        });
        TcpProxy {
            port,
            up,
            held,
            hold_at,
        }
    }
}

/// A job-style invocation of `event` with `request_id`, as the driver gets it.
pub fn event_call(request_id: &str, event: Value) -> sless_driver::Invocation {
    sless_driver::Invocation {
        kind: sless_driver::TriggerKind::Job,
        request_id: request_id.into(),
        method: "POST".into(),
        path: String::new(),
        query: String::new(),
        headers: vec![],
        body: bytes::Bytes::new(),
        event: Some(event),
    }
}
