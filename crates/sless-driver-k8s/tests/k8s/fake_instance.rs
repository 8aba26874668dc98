//! A stand-in for a pod's `sless instance serve` on 127.0.0.1: it opens
//! each connection with the HELLO of the version it claims to serve and
//! answers every INVOKE with a 200 whose body echoes the call's event,
//! after one line of stdout (and `sleep_ms` of the event, if it says so).
//! The frames are the real ones.

use std::net::SocketAddr;

use sless_driver::{LogChunk, OutputStream};
use sless_driver_local::frame::{self, kind};
use sless_driver_local::standalone::answer_frames;
use sless_driver_local::Output;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// Starts an instance of `namespace/function@version`; its address.
pub async fn start(namespace: &str, function: &str, version: u64) -> SocketAddr {
    start_tagged(namespace, function, version, "").await
}

/// The same, its answers naming it (`"pod": tag`) unless `tag` is empty.
pub async fn start_tagged(namespace: &str, function: &str, version: u64, tag: &str) -> SocketAddr {
    let tag = tag.to_string();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hello = frame::encode(
        kind::HELLO,
        0,
        serde_json::json!({"runtime": "python3.11", "namespace": namespace, "function": function,
                           "version": version, "concurrency": 4})
        .to_string()
        .as_bytes(),
    );
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let hello = hello.clone();
            let tag = tag.clone();
            tokio::spawn(async move {
                stream.write_all(&hello).await.unwrap();
                while let Ok(Some(invoke)) = frame::read(&mut stream).await {
                    assert_eq!(invoke.kind, kind::INVOKE);
                    let (head, _body) = frame::split_head(invoke.payload).unwrap();
                    let head: serde_json::Value = serde_json::from_slice(&head).unwrap();
                    if let Some(ms) = head["event"]["sleep_ms"].as_u64() {
                        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                    }
                    let output = Output {
                        status: 200,
                        headers: vec![("content-type".into(), "application/json".into())],
                        body: if tag.is_empty() {
                            serde_json::json!({"event": head["event"]})
                        } else {
                            serde_json::json!({"event": head["event"], "pod": tag})
                        }
                        .to_string()
                        .into(),
                        logs: vec![LogChunk {
                            stream: OutputStream::Stdout,
                            text: "handled\n".into(),
                        }],
                        logs_truncated: false,
                    };
                    if stream.write_all(&answer_frames(invoke.id, &output)).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}
