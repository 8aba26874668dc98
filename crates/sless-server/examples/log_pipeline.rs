//! Benchmark of the invocation-record pipeline: pushes records through the
//! real `InvocationLog` (bounded buffer, batch writer) into a PostgreSQL (or
//! SQLite) store and prints records per second. Run by bench/run.sh:
//!
//!     cargo run --release -p sless-server --example log_pipeline -- postgres://root@127.0.0.1:5432/test 200000

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sless_api::LogLine;
use sless_driver::TriggerKind;
use sless_server::invocations::{InvocationLog, LogSettings};
use sless_server::record::{Queued, Text};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let admin_url = args
        .next()
        .unwrap_or_else(|| "postgres://root@127.0.0.1:5432/test".into());
    let total: u64 = args.next().map(|n| n.parse()).transpose()?.unwrap_or(200_000);

    // A private database, dropped at the end (or the SQLite file given).
    let postgres = admin_url.starts_with("postgres");
    let name = format!("sless_bench_{:08x}", rand::random::<u32>());
    let url = if postgres {
        use sqlx::Connection;
        let (base, _) = admin_url.rsplit_once('/').expect("database URL has a path");
        let mut admin = sqlx::PgConnection::connect(&admin_url).await?;
        sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await?;
        format!("{base}/{name}")
    } else {
        admin_url.clone()
    };
    let store = sless_server::store::open(&url).await?;
    let log = InvocationLog::start(
        store,
        LogSettings {
            buffer: 100_000,
            buffer_bytes: usize::MAX,
            batch: 2000,
            flush_interval: Duration::from_millis(50),
            retention: Duration::from_secs(86_400),
            keep: i64::MAX,
            keep_per_function: i64::MAX,
            max_bytes: i64::MAX,
            enabled: true,
            leading: tokio::sync::watch::channel(true).1,
        },
    );
    let record = |i: u64| Queued {
        namespace: Text::new("bench"),
        function: Text::new(&format!("fn-{}", i % 10)),
        request_id: Text::new(&format!("{i:016x}")),
        id: (sless_server::store::now().timestamp_micros() as u64, i as u32),
        started_at: sless_server::store::now(),
        version: 1,
        alias: None,
        kind: TriggerKind::Http,
        status: 200,
        duration_ms: 1.25,
        error: None,
        bytes_in: 17,
        bytes_out: 42,
        cold_start: false,
        logs: vec![LogLine {
            stream: "stdout".into(),
            text: "hello from the handler\n".into(),
        }],
        logs_truncated: false,
    };
    let started = Instant::now();
    let mut sent = 0;
    while sent < total {
        // Offer records as fast as the buffer takes them, like a busy gateway.
        while sent < total && log.backlog() < 90_000 {
            log.record(record(sent));
            sent += 1;
        }
        tokio::task::yield_now().await;
    }
    while log.written.load(Ordering::Relaxed) + log.dropped.load(Ordering::Relaxed) < total {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let written = log.written.load(Ordering::Relaxed);
    println!(
        "log pipeline: {written} records written to {} in {secs:.2} s = {:.0} records/s (dropped {}; target >= 20000/s)",
        if postgres { "PostgreSQL" } else { "SQLite" },
        written as f64 / secs,
        log.dropped.load(Ordering::Relaxed)
    );
    drop(log);
    if postgres {
        use sqlx::Connection;
        let mut admin = sqlx::PgConnection::connect(&admin_url).await?;
        sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut admin)
            .await?;
    }
    Ok(())
}
