//! Replicas that lose the database without dying, through a TCP proxy the
//! test owns (the shared PostgreSQL itself is never stopped): a leader cut
//! off by a black hole steps down and another takes over within seconds;
//! a replica back from an outage or a stall does not answer with a
//! version older than one a client has seen Ready.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use super::cluster::{answer, create, hello_zip_text, upload};
use super::harness::{eventually, PgDb, S3Server, Server, TcpProxy};

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
    follower
        .deploy(
            "ns",
            "after",
            json!({"runtime": "python3.11"}),
            &[("handler.py", &hello_zip_text())],
        )
        .await;
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
