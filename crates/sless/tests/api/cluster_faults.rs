//! Replicas that lose the database without dying, through a TCP proxy the
//! test owns (the shared PostgreSQL itself is never stopped): a leader cut
//! off by a black hole steps down and another takes over within seconds;
//! a replica back from an outage or a stall does not answer with a
//! version older than one a client has seen Ready.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::cluster::{answer, create, deploy_hello, upload};
use super::harness::{eventually, zip_of, PgDb, S3Server, Server, TcpProxy};

/// `db`'s URL through `proxy`.
fn through(proxy: &TcpProxy, db: &PgDb) -> String {
    db.url().replace(":5432/", &format!(":{}/", proxy.port))
}

// Multi-threaded: the proxy must keep running while the harness blocks on
// a server's start-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_black_holed_from_the_database_steps_down_before_another_takes_over() {
    let proxy = TcpProxy::start(5432).await;
    let db = PgDb::create().await;
    let s3 = S3Server::start().await;
    let leader = Server::replica(&through(&proxy, &db), &s3.env());
    assert!(leader.leads().await, "the first replica leads");
    let follower = Server::replica(&db.url(), &s3.env());
    assert!(!follower.leads().await, "one leader only");

    // Nothing passes, nothing is closed: PostgreSQL keeps the session that
    // holds the lock until it ends it itself.
    proxy.held.store(true, Ordering::SeqCst);
    let cut = Instant::now();
    eventually(Duration::from_secs(30), || async {
        let (old, new) = (leader.leads().await, follower.leads().await);
        assert!(!(old && new), "two replicas lead at once");
        if new {
            Ok(())
        } else {
            Err(format!(
                "the follower does not lead (the cut-off leader says it leads: {old})"
            ))
        }
    })
    .await;
    println!("another replica leads {:?} after the cut", cut.elapsed());
    // The leader's work goes on there: a build.
    deploy_hello(&follower, "after").await;
    let (status, _, body) = follower.invoke(Method::GET, "/fn/ns/after", "").await;
    assert_eq!(status, 200, "{body}");
    assert!(!leader.leads().await, "the cut-off replica no longer leads");
    proxy.held.store(false, Ordering::SeqCst);
}

/// Calls `/fn/ns/{name}` on `server` until it answers with version `v`;
/// every answer before that must be a 503 (fenced), never an older
/// version. Returns how many 503s came first.
async fn refuses_until_it_serves(server: &Server, name: &str, v: u64) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut refused = 0;
    loop {
        let (status, _, body) = server.invoke(Method::GET, &format!("/fn/ns/{name}"), "").await;
        if status == 200 {
            let got: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(
                got["v"], v,
                "after {refused} refusals the replica answered with a version before the one Ready"
            );
            return refused;
        }
        assert_eq!(status, 503, "{body}");
        refused += 1;
        assert!(Instant::now() < deadline, "still refusing after 60 s: {body}");
    }
}

/// A leader on the database itself and a follower on `follower_url`;
/// version 1 of `f` Ready and served by both.
async fn pair_serving_v1(db: &PgDb, s3: &S3Server, follower_url: &str) -> (Server, Server) {
    let leader = Server::replica(&db.url(), &s3.env());
    assert!(leader.leads().await, "the first replica leads");
    let follower = Server::replica(follower_url, &s3.env());
    create(&leader, "f").await;
    let hash = upload(&leader, "f", 1).await;
    leader.wait_built("ns", "f", &hash).await;
    assert_eq!(answer(&follower, "f").await, Some(1));
    (leader, follower)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_back_from_a_database_outage_serves_no_version_older_than_ready() {
    let proxy = TcpProxy::start(5432).await;
    let db = PgDb::create().await;
    let s3 = S3Server::start().await;
    let (leader, follower) = pair_serving_v1(&db, &s3, &through(&proxy, &db)).await;

    proxy.up.store(false, Ordering::SeqCst);
    eventually(Duration::from_secs(10), || async {
        let (status, _, body) = follower.invoke(Method::GET, "/fn/ns/f", "").await;
        if status == 503 {
            Ok(())
        } else {
            Err(format!("the cut-off replica still answers: {status} {body}"))
        }
    })
    .await;
    // Ready once the cut-off replica is counted out.
    let hash = upload(&leader, "f", 2).await;
    leader.wait_built("ns", "f", &hash).await;
    proxy.up.store(true, Ordering::SeqCst);
    let refused = refuses_until_it_serves(&follower, "f", 2).await;
    println!("{refused} calls refused after the outage, then version 2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_resumed_after_a_stall_serves_no_version_older_than_ready() {
    let db = PgDb::create().await;
    let s3 = S3Server::start().await;
    let (leader, follower) = pair_serving_v1(&db, &s3, &db.url()).await;

    let pid = follower.pid().to_string();
    let signal = |name: &str| {
        let status = std::process::Command::new("kill").args([name, &pid]).status().unwrap();
        assert!(status.success());
    };
    signal("-STOP");
    // Ready once the stalled replica is counted out.
    let hash = upload(&leader, "f", 2).await;
    leader.wait_built("ns", "f", &hash).await;
    signal("-CONT");
    let refused = refuses_until_it_serves(&follower, "f", 2).await;
    println!("{refused} calls refused after the stall, then version 2");
}

/// Gates a test opens, on loopback: `GET /{name}/gate` waits until the
/// test opens gate `name`, then answers 200. What a build step or a
/// handler does next happens when the test says, on the replica it says.
struct Gate {
    port: u16,
    state: Arc<Mutex<GateState>>,
}

#[derive(Default)]
struct GateState {
    /// Calls that reached each gate.
    reached: HashMap<String, usize>,
    /// Calls whose caller went away while they waited (its process ended).
    dropped: HashMap<String, usize>,
    open: HashSet<String>,
}

impl Gate {
    async fn start() -> Gate {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(GateState::default()));
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(Gate::answer(socket, shared.clone()));
            }
        });
        Gate { port, state }
    }

    async fn answer(mut socket: tokio::net::TcpStream, state: Arc<Mutex<GateState>>) {
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        let line = String::from_utf8_lossy(&request)
            .lines()
            .next()
            .unwrap_or("")
            .to_string();
        let path = line.split(' ').nth(1).unwrap_or("");
        let Some(name) = path.strip_prefix('/').and_then(|p| p.strip_suffix("/gate")) else {
            let _ = socket
                .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .await;
            return;
        };
        let name = name.to_string();
        *state.lock().unwrap().reached.entry(name.clone()).or_default() += 1;
        loop {
            if state.lock().unwrap().open.contains(&name) {
                let _ = socket
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\ngo")
                    .await;
                return;
            }
            tokio::select! {
                _ = socket.read(&mut buf) => {
                    *state.lock().unwrap().dropped.entry(name).or_default() += 1;
                    return;
                }
                _ = tokio::time::sleep(Duration::from_millis(25)) => {}
            }
        }
    }

    /// The base URL of gate `name` (its call is this plus `gate`).
    fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}/", self.port)
    }

    fn open(&self, name: &str) {
        self.state.lock().unwrap().open.insert(name.to_string());
    }

    /// Waits until a call waits at gate `name`.
    async fn reached(&self, name: &str) {
        eventually(Duration::from_secs(120), || async {
            match self.state.lock().unwrap().reached.get(name) {
                Some(_) => Ok(()),
                None => Err(format!("nothing reached gate {name}")),
            }
        })
        .await
    }

    fn dropped(&self, name: &str) -> usize {
        self.state.lock().unwrap().dropped.get(name).copied().unwrap_or(0)
    }
}

/// A replica's settings: the bucket, and builds and instances that reach
/// the test's loopback, with gate `gate` as the npm registry its builds
/// are told of (which is how a build step knows which replica runs it).
fn gated_env(s3: &S3Server, gate: &Gate, name: &str) -> Vec<(String, String)> {
    let mut env = s3.env();
    env.push(("SLESS_NETWORK_ISOLATION".into(), "false".into()));
    env.push(("SLESS_NPM_REGISTRY".into(), gate.url(name)));
    env
}

/// Node code whose build waits at the gate of the replica that builds it
/// (npm's preinstall script of the code's own package.json).
fn gated_build() -> Vec<u8> {
    let package =
        br#"{"name": "gated", "version": "1.0.0", "private": true, "scripts": {"preinstall": "node gate.js"}}"#;
    let gate = br#"const http = require("http");
const url = process.env.npm_config_registry + "gate";
function call() {
  http.get(url, (res) => {
    res.resume();
    if (res.statusCode === 200) process.exit(0);
    setTimeout(call, 100);
  }).on("error", () => setTimeout(call, 100));
}
call();
"#;
    zip_of(&[
        ("package.json", package),
        ("gate.js", gate),
        ("handler.js", b"exports.handle = () => ({v: 'gated'});\n"),
    ])
}

/// Waits until `server` runs no build (waiting, running or long).
async fn no_build_on(server: &Server) {
    eventually(Duration::from_secs(120), || async {
        let mut under_way = 0.0;
        for state in ["waiting", "running", "long"] {
            under_way += server
                .metric(&format!("sless_builds{{state=\"{state}\"}}"))
                .await
                .ok_or("no sless_builds metric")?;
        }
        if under_way == 0.0 {
            Ok(())
        } else {
            Err(format!("{under_way} builds under way"))
        }
    })
    .await
}

/// The version numbers recorded for `ns/name`, newest first.
async fn recorded_versions(server: &Server, name: &str) -> Vec<u64> {
    let (status, body) = server
        .call(
            Method::GET,
            &format!("/v1/namespaces/ns/functions/{name}/versions"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_u64().unwrap())
        .collect()
}

/// A leader (`old`, whose database link goes through `proxy`) and a
/// follower (`new`), each building at a gate of its own name; node
/// function `f` made, nothing uploaded.
async fn gated_pair(gate: &Gate, proxy: &TcpProxy, db: &PgDb, s3: &S3Server) -> (Server, Server) {
    let old = Server::replica(&through(proxy, db), &gated_env(s3, gate, "old"));
    assert!(old.leads().await, "the first replica leads");
    let new = Server::replica(&db.url(), &gated_env(s3, gate, "new"));
    assert!(!new.leads().await, "one leader only");
    let (status, body) = old
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "f", "runtime": "nodejs20"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    (old, new)
}

/// What one upload leaves once every build of it ended: one version, the
/// one the status serves, with no rollout of another pending.
async fn one_version_of_one_upload(server: &Server, hash: &str) {
    let (_, function) = server.call(Method::GET, "/v1/namespaces/ns/functions/f", None).await;
    let status = &function["status"];
    assert_eq!(
        recorded_versions(server, "f").await,
        [1],
        "one upload, one version: {status}"
    );
    assert_eq!(
        (&status["phase"], &status["version"], &status["built_hash"]),
        (&json!("Ready"), &json!(1), &json!(hash)),
        "{status}"
    );
    assert!(
        status["rollout"].is_null(),
        "a rollout of a version never recorded: {status}"
    );
}

/// The leader loses its lock while it builds an upload; the next leader
/// builds the same upload and makes version 1 of it. The deposed leader's
/// build, ending after that, made version 2 of the same upload (its
/// version number is the stored one plus one, and the compare-and-set of
/// the status compared with what it wrote itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_deposed_while_it_builds_makes_no_second_version_of_the_upload() {
    let gate = Gate::start().await;
    let proxy = TcpProxy::start(5432).await;
    let db = PgDb::create().await;
    let s3 = S3Server::start().await;
    let (old, new) = gated_pair(&gate, &proxy, &db, &s3).await;
    let (status, body) = old.upload("ns", "f", gated_build()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let hash = body["status"]["code_hash"].as_str().unwrap().to_string();
    gate.reached("old").await;

    // Its sessions end (the lock's with them): the other replica leads.
    proxy.up.store(false, Ordering::SeqCst);
    eventually(Duration::from_secs(30), || async {
        if new.leads().await {
            Ok(())
        } else {
            Err("the follower does not lead".to_string())
        }
    })
    .await;
    proxy.up.store(true, Ordering::SeqCst);
    gate.reached("new").await;
    gate.open("new");
    new.wait_built("ns", "f", &hash).await;
    // Now the deposed leader's build ends.
    gate.open("old");
    no_build_on(&old).await;
    one_version_of_one_upload(&new, &hash).await;
}

/// The leader's transaction that records the version is sent while it
/// still leads, and held on the way (the proxy stops at its INSERT); the
/// lock's session ends meanwhile, and another replica takes over and
/// starts building the same upload (held as it reads the archive). The
/// held transaction then committed version 1, and the new leader's build
/// made version 2 of the same upload: a check that the writer leads, made
/// before the transaction, cannot see this; the leader epoch checked in
/// it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_write_held_until_another_leads_records_nothing() {
    let gate = Gate::start().await;
    let db_link = TcpProxy::start(5432).await;
    let db = PgDb::create().await;
    let s3 = S3Server::start().await;
    let bucket_link = TcpProxy::start(port_of(&s3)).await;
    let old = Server::replica(&through(&db_link, &db), &gated_env(&s3, &gate, "old"));
    assert!(old.leads().await, "the first replica leads");
    let new = Server::replica(&db.url(), &bucket_through(gated_env(&s3, &gate, "new"), &bucket_link));
    create(&old, "f").await;
    *db_link.hold_at.lock().unwrap() = Some(b"INSERT INTO function_versions".to_vec());
    *bucket_link.hold_at.lock().unwrap() = Some(b"sless/archives/ns/f/".to_vec());
    let hash = upload(&old, "f", 1).await;
    eventually(Duration::from_secs(120), || async {
        match db_link.held.load(Ordering::SeqCst) {
            true => Ok(()),
            false => Err("the leader has not recorded the version yet".to_string()),
        }
    })
    .await;
    eventually(Duration::from_secs(60), || async {
        match (new.leads().await, bucket_link.held.load(Ordering::SeqCst)) {
            (true, true) => Ok(()),
            seen => Err(format!("the follower leads, and reads the upload's archive: {seen:?}")),
        }
    })
    .await;
    // The held write goes on (or finds its session ended), then the new
    // leader's build.
    db_link.held.store(false, Ordering::SeqCst);
    no_build_on(&old).await;
    bucket_link.held.store(false, Ordering::SeqCst);
    no_build_on(&new).await;
    one_version_of_one_upload(&new, &hash).await;
}

/// The port of `s3`'s endpoint.
fn port_of(s3: &S3Server) -> u16 {
    s3.env()
        .iter()
        .find(|(k, _)| k == "SLESS_S3_ENDPOINT")
        .and_then(|(_, v)| v.rsplit(':').next()?.parse().ok())
        .unwrap()
}

/// `env` with the bucket reached through `proxy`.
fn bucket_through(mut env: Vec<(String, String)>, proxy: &TcpProxy) -> Vec<(String, String)> {
    for (k, v) in &mut env {
        if k == "SLESS_S3_ENDPOINT" {
            *v = format!("http://127.0.0.1:{}", proxy.port);
        }
    }
    env
}

/// Python code that waits at the gate its event names (`url`), then answers.
const WAITS_AT_THE_GATE: &[u8] = b"import urllib.request\n\ndef handle(event, context):\n    urllib.request.urlopen(event['url']).read()\n    return {'passed': True}\n";

/// A leader black-holed from the database (its lease runs out, then its
/// session ends and another takes over) stops its job runs when it stops
/// leading. Its reconciler, whose step waited for the database (here held
/// in the middle of its heartbeat's statement, which names the replica),
/// stopped them only once that answered again: the run went on after the
/// new leader had said it was interrupted (a call of the handler under
/// way, while the user may start the next run), and its outcome could
/// then be written over the new leader's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_database_stops_its_job_runs_and_writes_no_outcome() {
    let gate = Gate::start().await;
    let proxy = TcpProxy::start(5432).await;
    let db = PgDb::create().await;
    let s3 = S3Server::start().await;
    let old = Server::replica(&through(&proxy, &db), &gated_env(&s3, &gate, "old"));
    assert!(old.leads().await, "the first replica leads");
    let new = Server::replica(&db.url(), &gated_env(&s3, &gate, "new"));
    old.deploy(
        "ns",
        "waits",
        json!({"runtime": "python3.11", "timeout_sec": 120}),
        &[("handler.py", WAITS_AT_THE_GATE)],
    )
    .await;
    let event = json!({"url": format!("{}gate", gate.url("job"))});
    let (status, body) = new
        .call(
            Method::POST,
            "/v1/namespaces/ns/jobs",
            Some(json!({"name": "long", "function": "waits", "run_id": 1, "event": event})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    gate.reached("job").await;

    let (_, health) = old.call(Method::GET, "/healthz", None).await;
    let replica = health["replica"].as_str().unwrap().as_bytes().to_vec();
    *proxy.hold_at.lock().unwrap() = Some(replica);
    let job = new
        .wait_for("/v1/namespaces/ns/jobs/long", 60, |j| j["status"]["phase"] == "Failed")
        .await;
    assert!(new.leads().await);
    let interrupted = job["status"].clone();
    assert!(
        interrupted["error"].as_str().unwrap().contains("interrupted"),
        "{interrupted}"
    );
    // The deposed leader's call of the handler has ended (its instance
    // stopped), though the database still does not answer it.
    eventually(Duration::from_secs(30), || async {
        match gate.dropped("job") {
            1 => Ok(()),
            n => Err(format!(
                "{n} calls of the handler stopped: the deposed leader still runs the job"
            )),
        }
    })
    .await;
    // Back in touch, it writes nothing over the new leader's outcome.
    gate.open("job");
    proxy.held.store(false, Ordering::SeqCst);
    eventually(Duration::from_secs(60), || async {
        match old.invoke(Method::GET, "/fn/ns/nothing-here", "").await.0 {
            StatusCode::SERVICE_UNAVAILABLE => Err("the deposed leader is still fenced".to_string()),
            _ => Ok(()),
        }
    })
    .await;
    let (_, job) = new.call(Method::GET, "/v1/namespaces/ns/jobs/long", None).await;
    assert_eq!(job["status"], interrupted, "one outcome per run");
}

/// Version `v` of function `f`: it prints its event (the record of the
/// call says which version got it) and answers with `v`.
fn printing_version(v: u32) -> Vec<u8> {
    zip_of(&[(
        "handler.py",
        format!("def handle(event, context):\n    print('got', event)\n    return {{'v': {v}}}\n").as_bytes(),
    )])
}

/// A replica back from a database outage delivers no asynchronous event
/// until it serves the version made Ready while it was away: here its
/// copy of that version cannot be fetched (the bucket is held from it),
/// the only other replica's one delivery slot is taken, and an event
/// accepted after version 2 was Ready went to version 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_catching_up_after_an_outage_delivers_no_event_to_the_version_before() {
    let gate = Gate::start().await;
    let db_link = TcpProxy::start(5432).await;
    let db = PgDb::create().await;
    let s3 = S3Server::start().await;
    let bucket_link = TcpProxy::start(port_of(&s3)).await;
    let mut leader_env = gated_env(&s3, &gate, "leader");
    leader_env.push(("SLESS_ASYNC_CONCURRENCY".into(), "1".into()));
    let leader = Server::replica(&db.url(), &leader_env);
    assert!(leader.leads().await, "the first replica leads");
    let follower_env = bucket_through(gated_env(&s3, &gate, "follower"), &bucket_link);
    let follower = Server::replica(&through(&db_link, &db), &follower_env);
    let follower_id = follower.call(Method::GET, "/healthz", None).await.1["replica"]
        .as_str()
        .unwrap()
        .to_string();
    leader
        .deploy(
            "ns",
            "blocker",
            json!({"runtime": "python3.11", "timeout_sec": 120}),
            &[("handler.py", WAITS_AT_THE_GATE)],
        )
        .await;
    create(&leader, "f").await;
    let (_, body) = leader.upload("ns", "f", printing_version(1)).await;
    leader
        .wait_built("ns", "f", body["status"]["code_hash"].as_str().unwrap())
        .await;
    assert_eq!(answer(&follower, "f").await, Some(1));

    db_link.up.store(false, Ordering::SeqCst);
    eventually(Duration::from_secs(10), || async {
        match follower.invoke(Method::GET, "/fn/ns/f", "").await.0 {
            StatusCode::SERVICE_UNAVAILABLE => Ok(()),
            other => Err(format!("the cut-off replica still answers: {other}")),
        }
    })
    .await;
    // The leader's one delivery slot is taken (the follower claims nothing now).
    let blocker = format!("{}gate", gate.url("blocker"));
    let response = leader
        .request(Method::POST, "/fn/ns/blocker", None)
        .header("x-sless-invocation-type", "Event")
        .body(json!({"url": blocker}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    gate.reached("blocker").await;
    let (_, body) = leader.upload("ns", "f", printing_version(2)).await;
    leader
        .wait_built("ns", "f", body["status"]["code_hash"].as_str().unwrap())
        .await;
    let response = leader
        .request(Method::POST, "/fn/ns/f", None)
        .header("x-sless-invocation-type", "Event")
        .body(r#"{"marker": "after-v2"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let location = response.headers()["location"].to_str().unwrap().to_string();

    // Back in touch with the database, not with the bucket: it cannot
    // deploy version 2, and stays fenced.
    bucket_link.held.store(true, Ordering::SeqCst);
    let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(&db.url())
        .await
        .unwrap();
    let back: f64 = sqlx::query_scalar("SELECT extract(epoch FROM now())::float8")
        .fetch_one(&mut admin)
        .await
        .unwrap();
    db_link.up.store(true, Ordering::SeqCst);
    let admin = tokio::sync::Mutex::new(admin);
    eventually(Duration::from_secs(60), || {
        let (admin, event, follower, leader) = (&admin, &location, &follower, &leader);
        let follower_id = follower_id.as_str();
        async move {
            let mut admin = admin.lock().await;
            let (_, record) = leader.call(Method::GET, event, None).await;
            if record["status"] != "queued" {
                return Ok(()); // delivered already: which version got it is asserted below
            }
            let heartbeat: f64 = sqlx::query_scalar(
                "SELECT extract(epoch FROM heartbeat_at)::float8 FROM cluster_replicas WHERE id = $1",
            )
            .bind(follower_id)
            .fetch_one(&mut *admin)
            .await
            .unwrap();
            let holds_off = follower.metric("sless_async_delivery_fenced").await == Some(1.0);
            if heartbeat > back && holds_off {
                Ok(())
            } else {
                Err(format!(
                    "event {record}; follower heartbeat {heartbeat}, holding deliveries off: {holds_off}"
                ))
            }
        }
    })
    .await;
    bucket_link.held.store(false, Ordering::SeqCst);
    let got = eventually(Duration::from_secs(90), || async {
        leader
            .records("ns", "f")
            .await
            .into_iter()
            .find(|r| r["logs"].to_string().contains("after-v2"))
            .ok_or_else(|| "the event accepted after version 2 is not delivered yet".to_string())
    })
    .await;
    assert_eq!(got["version"], 2, "the event accepted after version 2 was Ready: {got}");
    gate.open("blocker");
}
