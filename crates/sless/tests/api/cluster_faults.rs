//! Replicas that lose the database without dying, through a TCP proxy the
//! test owns (the shared PostgreSQL itself is never stopped): a leader cut
//! off by a black hole steps down and another takes over within seconds.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use super::cluster::hello_zip_text;
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
