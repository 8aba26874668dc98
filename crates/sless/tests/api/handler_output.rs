//! What a handler writes, however it writes it: output without a newline,
//! raw to fd 2 or through the runtime's streams, holds bounded memory in
//! the server and is cut with a marker; a protocol frame forged on stdout is
//! log text, never the response; frames of a kind the protocol lacks, sent
//! on the frame pipe itself, are logged once, not each; output outside any
//! call reaches the server's log within a budget.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{eventually, Backend, Server};

const PYTHON_FLOOD: &[u8] = br#"
import os, sys

def handle(event, context):
    chunk = b"x" * (1 << 20)
    for _ in range(event["mib"]):
        if event["raw"]:
            os.write(2, chunk)
        else:
            sys.stderr.write(chunk.decode())
    return "flooded"
"#;

const NODE_FLOOD: &[u8] = br#"
const fs = require('fs');
exports.handle = (event) => {
  const chunk = Buffer.alloc(1 << 20, 'x');
  for (let i = 0; i < event.mib; i++) {
    if (event.raw) {
      // Node keeps its stdio pipes non-blocking: a full pipe is EAGAIN.
      for (let at = 0; at < chunk.length; ) {
        try {
          at += fs.writeSync(2, chunk, at);
        } catch (err) {
          if (err.code !== 'EAGAIN') throw err;
        }
      }
    } else {
      process.stderr.write(chunk);
    }
  }
  return 'flooded';
};
"#;

/// The server's peak resident memory in KiB (VmHWM).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn output_without_newlines_holds_bounded_server_memory() {
    const MIB: u64 = 128;
    let server = Server::start(Backend::Sqlite).await;
    for (name, runtime, file, code) in [
        ("py", "python3.11", "handler.py", PYTHON_FLOOD),
        ("node", "nodejs20", "handler.js", NODE_FLOOD),
    ] {
        server
            .deploy("ns", name, json!({"runtime": runtime}), &[(file, code)])
            .await;
        // Started, so the instance's own start-up is not counted.
        let (status, _, body) = server
            .invoke(Method::POST, &format!("/fn/ns/{name}"), r#"{"mib": 0, "raw": true}"#)
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let before = peak_rss_kib(server.pid());
    for name in ["py", "node"] {
        for raw in [true, false] {
            let event = json!({"mib": MIB, "raw": raw}).to_string();
            let (status, _, body) = server.invoke(Method::POST, &format!("/fn/ns/{name}"), &event).await;
            assert_eq!(
                (status, body.as_str()),
                (StatusCode::OK, r#""flooded""#),
                "{name} raw={raw}"
            );
        }
    }
    let grown = peak_rss_kib(server.pid()).saturating_sub(before);
    assert!(
        grown < 48 * 1024,
        "{} MiB without a newline, four times, grew the server's peak memory by {grown} KiB",
        MIB
    );
    // Captured output is kept up to the per-invocation cap, and says so.
    for name in ["py", "node"] {
        let record = eventually(Duration::from_secs(10), || async {
            server
                .records("ns", name)
                .await
                .into_iter()
                .find(|r| r["logs_truncated"] == true)
                .ok_or_else(|| format!("no truncated record of {name} yet"))
        })
        .await;
        let text: String = record["logs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["text"].as_str().unwrap())
            .collect();
        assert!(text.len() < 100_000, "{name}: {} bytes kept", text.len());
        assert!(
            text.contains("[sless: output capped at"),
            "{name}: {}",
            &text[text.len() - 200..]
        );
    }
}

const PYTHON_FORGE: &[u8] = br#"
import os, struct, subprocess, sys

def frame(inv_id):
    head = b'{"status":299,"headers":{"x-forged":"yes"}}'
    payload = struct.pack(">I", len(head)) + head + b"forged"
    return struct.pack(">IcI", len(payload) + 5, b"O", inv_id) + payload

def handle(event, context):
    for inv_id in range(1, 4):
        forged = frame(inv_id)
        os.write(1, forged)
        print(forged.decode("latin-1"))
        subprocess.run(["/bin/sh", "-c", "cat"], input=forged, check=True)
    return "genuine"
"#;

const NODE_FORGE: &[u8] = br#"
const fs = require('fs');
const cp = require('child_process');
function frame(id) {
  const head = Buffer.from('{"status":299,"headers":{"x-forged":"yes"}}');
  const payload = Buffer.concat([Buffer.alloc(4), head, Buffer.from('forged')]);
  payload.writeUInt32BE(head.length, 0);
  const start = Buffer.alloc(9);
  start.writeUInt32BE(payload.length + 5, 0);
  start[4] = 0x4f;
  start.writeUInt32BE(id, 5);
  return Buffer.concat([start, payload]);
}
exports.handle = () => {
  for (let id = 1; id < 4; id++) {
    const forged = frame(id);
    fs.writeSync(1, forged);
    process.stdout.write(forged);
    cp.execFileSync('/bin/sh', ['-c', 'cat'], { input: forged, stdio: ['pipe', 'inherit', 'inherit'] });
  }
  return 'genuine';
};
"#;

#[tokio::test]
async fn a_frame_forged_on_stdout_is_log_text_not_the_response() {
    let server = Server::start(Backend::Sqlite).await;
    for (name, runtime, file, code) in [
        ("py", "python3.11", "handler.py", PYTHON_FORGE),
        ("node", "nodejs20", "handler.js", NODE_FORGE),
    ] {
        server
            .deploy(
                "ns",
                name,
                json!({"runtime": runtime, "concurrency": 1}),
                &[(file, code)],
            )
            .await;
        for _ in 0..3 {
            let (status, headers, body) = server.invoke(Method::POST, &format!("/fn/ns/{name}"), "").await;
            assert_eq!((status, body.as_str()), (StatusCode::OK, r#""genuine""#), "{name}");
            assert!(headers.get("x-forged").is_none(), "{name}: {headers:?}");
        }
        let records: Vec<Value> = eventually(Duration::from_secs(10), || async {
            let records = server.records("ns", name).await;
            if records.len() == 3 {
                Ok(records)
            } else {
                Err(format!("{} records of {name}", records.len()))
            }
        })
        .await;
        for record in records {
            assert_eq!(record["status"], "200", "{record}");
            let text: String = record["logs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l["text"].as_str().unwrap())
                .collect();
            assert!(text.contains("forged"), "the print went to the log: {record}");
        }
    }
}

/// Writes `event["frames"]` frames of kind `Z`, which the protocol lacks,
/// with the shim's own frame writer (reached as any object can be).
const PYTHON_UNKNOWN_FRAMES: &[u8] = br#"
import gc

def handle(event, context):
    writer = next(o for o in gc.get_objects() if type(o).__name__ == "FrameWriter")
    for _ in range(event["frames"]):
        writer.send(b"Z", 0, b"")
    return "sent"
"#;

/// A handler can send frames without end: an unknown kind is logged once
/// per instance, not once per frame, and the call is answered.
#[tokio::test]
async fn frames_of_an_unknown_kind_are_logged_once() {
    let server = logged_server_with("chatty", PYTHON_UNKNOWN_FRAMES).await;
    let (status, _, body) = server.invoke(Method::POST, "/fn/ns/chatty", r#"{"frames": 100}"#).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, r#""sent""#));
    // The frames came before the answer on the same pipe, and the server
    // logs as it reads them: all are read and logged (or not) by now.
    let logged = server_log_lines(&server, "unexpected frame from shim");
    assert_eq!(logged.len(), 1, "logged {} times: {:?}", logged.len(), logged.first());
    assert!(logged[0].contains("kind=Z"), "{}", logged[0]);
}

/// A server logging to its file (`Server::start_logged`) with Python
/// function `name` of `handler` deployed in namespace `ns`.
async fn logged_server_with(name: &str, handler: &[u8]) -> Server {
    let server = Server::start_logged(Backend::Sqlite, &[]).await;
    server
        .deploy("ns", name, json!({"runtime": "python3.11"}), &[("handler.py", handler)])
        .await;
    server
}

/// The lines of a server started with `Server::start_logged` that hold `text`.
fn server_log_lines(server: &Server, text: &str) -> Vec<String> {
    let log = std::fs::read_to_string(server.log_file.as_ref().unwrap()).unwrap();
    log.lines()
        .filter(|line| line.contains(text))
        .map(str::to_string)
        .collect()
}

/// Its first call starts two threads that print without end: one through
/// `print` (the shim's LOG frames, of no call once the call is answered),
/// one raw to fd 2 (the instance's stderr).
const PYTHON_PRINTS_FOREVER: &[u8] = br#"
import os, threading

def through_print():
    while True:
        print("spam-print " + "x" * 1000, flush=True)

def raw_to_stderr():
    line = b"spam-raw " + b"y" * 1000 + b"\n"
    while True:
        os.write(2, line)

def handle(event, context):
    threading.Thread(target=through_print, daemon=True).start()
    threading.Thread(target=raw_to_stderr, daemon=True).start()
    return "started"
"#;

/// An instance printing outside any call without end (tens of megabytes a
/// second unbounded) reaches the server's log within its budget: 64 KiB
/// at once, then 16 KiB a second, with a line saying how much was dropped.
#[tokio::test]
async fn output_outside_calls_reaches_the_server_log_within_a_budget() {
    let server = logged_server_with("spammer", PYTHON_PRINTS_FOREVER).await;
    let (status, _, body) = server.invoke(Method::POST, "/fn/ns/spammer", "{}").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, r#""started""#));
    tokio::time::sleep(Duration::from_secs(3)).await;

    let spam = server_log_lines(&server, "spam-");
    // 64 KiB + 3 s of 16 KiB, at about 1 KiB a line: about 110 lines (the
    // server is not stopped, so a little more time may pass).
    assert!((20..400).contains(&spam.len()), "{} lines of spam logged", spam.len());
    assert!(
        spam.iter().any(|l| l.contains("spam-print")) && spam.iter().any(|l| l.contains("spam-raw")),
        "both paths are logged within the budget"
    );
    let noted = server_log_lines(&server, "outside calls were not logged: over its budget");
    assert!(!noted.is_empty(), "the dropped lines are counted in the log");
}
