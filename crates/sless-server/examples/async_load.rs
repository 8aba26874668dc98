//! Load generator for the asynchronous path: `CONNECTIONS` keep-alive
//! connections each send pipelined `POST /fn/{ns}/{name}` requests with
//! `X-Sless-Invocation-Type: Event` until `TOTAL` were answered, and the
//! rate of 202s is printed (with any other status counted). Driven by
//! bench/async_events.py:
//!
//!     cargo run --release -p sless-server --example async_load -- 127.0.0.1:8080 /fn/bench/sink 100000 32

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Requests in flight per connection.
const PIPELINE: u64 = 32;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:8080".into());
    let path = args.next().unwrap_or_else(|| "/fn/bench/sink".into());
    let total: u64 = args.next().map(|n| n.parse()).transpose()?.unwrap_or(100_000);
    let connections: u64 = args.next().map(|n| n.parse()).transpose()?.unwrap_or(32);
    let body = br#"{"order": 12345, "items": ["a", "b", "c"], "note": "an event of about a hundred bytes"}"#;
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\nx-sless-invocation-type: Event\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{}",
        body.len(),
        std::str::from_utf8(body)?
    );
    let sent = Arc::new(AtomicU64::new(0));
    let accepted = Arc::new(AtomicU64::new(0));
    let other = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (addr, request) = (addr.clone(), request.clone());
        let (sent, accepted, other) = (sent.clone(), accepted.clone(), other.clone());
        tasks.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(&addr).await?;
            stream.set_nodelay(true)?;
            let mut buf = Vec::with_capacity(64 * 1024);
            loop {
                let n = (0..PIPELINE)
                    .take_while(|_| sent.fetch_add(1, Ordering::Relaxed) < total)
                    .count();
                if n == 0 {
                    return Ok::<_, anyhow::Error>(());
                }
                stream.write_all(request.repeat(n).as_bytes()).await?;
                let mut answered = 0;
                while answered < n {
                    match parse_response(&buf) {
                        Some((status, len)) => {
                            if status == 202 {
                                accepted.fetch_add(1, Ordering::Relaxed);
                            } else {
                                other.fetch_add(1, Ordering::Relaxed);
                            }
                            buf.drain(..len);
                            answered += 1;
                        }
                        None => {
                            if stream.read_buf(&mut buf).await? == 0 {
                                anyhow::bail!("the server closed the connection");
                            }
                        }
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    let accepted = accepted.load(Ordering::Relaxed);
    println!(
        "accepted {accepted} events in {secs:.2} s: {:.0} events/s (other answers: {})",
        accepted as f64 / secs,
        other.load(Ordering::Relaxed)
    );
    Ok(())
}

/// The status and total length of the first complete response in `buf`.
fn parse_response(buf: &[u8]) -> Option<(u16, usize)> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..head_end]).ok()?;
    let status = head.get(9..12)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    (buf.len() >= head_end + length).then_some((status, head_end + length))
}
