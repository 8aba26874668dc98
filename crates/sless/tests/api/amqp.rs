//! RabbitMQ triggers against the broker on 127.0.0.1:5672: messages handled
//! and acked, retries spaced out then the dead-letter queue, a message too
//! large for a call dead-lettered unhandled, bodies that are not JSON (text,
//! binary in base64, JSON too deep to parse) passed whole or dead-lettered
//! with the reason, a busy function holding
//! messages back instead of failing them, queues declared by others used as
//! they are, a connection cut mid-stream and a stop with nothing lost, a
//! trigger's consumer replaced on each change (never two) and gone with its
//! delete, not brought back by a convergence pass that read the store
//! before, and `amqps://` over TLS.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, QueueDeclareOptions, QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{eventually, hex_id, Backend, Server, TcpProxy};

const BROKER: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

const CONSUMER: &[u8] = br#"
import json
import socket
import time

def handle(event, context):
    if not isinstance(event, dict) or "id" not in event:
        print("event", json.dumps(event))
        return "done"
    print("message", event.get("id"), context.trigger)
    if event.get("gate"):
        # Tells the test on 127.0.0.1 that this call has started.
        socket.create_connection(("127.0.0.1", event["gate"])).close()
    if event.get("fail"):
        raise RuntimeError("cannot handle this message")
    time.sleep(event.get("sleep", 0))
    return "done"
"#;

async fn channel() -> (Connection, Channel) {
    let connection = Connection::connect(BROKER, ConnectionProperties::default())
        .await
        .expect("RabbitMQ on 127.0.0.1:5672 is required for these tests");
    let channel = connection.create_channel().await.unwrap();
    (connection, channel)
}

async fn declare(channel: &Channel, queue: &str) -> u32 {
    let options = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(queue.into(), options, FieldTable::default())
        .await
        .unwrap()
        .message_count()
}

async fn publish(channel: &Channel, queue: &str, body: Value) {
    publish_with(channel, queue, body, BasicProperties::default()).await
}

async fn publish_with(channel: &Channel, queue: &str, body: Value, properties: BasicProperties) {
    publish_bytes(channel, queue, body.to_string().as_bytes(), properties).await
}

async fn publish_bytes(channel: &Channel, queue: &str, body: &[u8], properties: BasicProperties) {
    channel
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            body,
            properties,
        )
        .await
        .unwrap()
        .await
        .unwrap();
}

async fn setup(broker: &str, queue: &str, extra: Value) -> Server {
    setup_with(broker, queue, extra, &[]).await
}

async fn setup_with(broker: &str, queue: &str, extra: Value, env: &[(&str, &str)]) -> Server {
    setup_on(Backend::Sqlite, broker, queue, extra, env).await
}

async fn setup_on(backend: Backend, broker: &str, queue: &str, extra: Value, env: &[(&str, &str)]) -> Server {
    let function = json!({"runtime": "python3.11", "concurrency": 4});
    setup_function(backend, broker, queue, function, extra, env).await
}

/// A server whose function `consumer` (spec `function`) has the amqp
/// trigger `queue` on `queue`, with `extra` in the trigger's spec.
async fn setup_function(
    backend: Backend,
    broker: &str,
    queue: &str,
    function: Value,
    extra: Value,
    env: &[(&str, &str)],
) -> Server {
    let server = Server::start_with(backend, env).await;
    server
        .deploy("ns", "consumer", function, &[("handler.py", CONSUMER)])
        .await;
    let mut body =
        json!({"name": "queue", "type": "amqp", "function": "consumer", "broker_url": broker, "queue": queue});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let (status, created) = server
        .call(Method::POST, "/v1/namespaces/ns/triggers", Some(body))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    server
}

/// Waits until the function has `n` amqp invocation records.
async fn amqp_records(server: &Server, n: usize, secs: u64) -> Vec<Value> {
    eventually(Duration::from_secs(secs), || async {
        let records: Vec<Value> = server
            .records("ns", "consumer")
            .await
            .into_iter()
            .filter(|r| r["trigger"] == "amqp")
            .collect();
        if records.len() >= n {
            Ok(records)
        } else {
            Err(format!("only {} of {n} messages handled", records.len()))
        }
    })
    .await
}

/// How many consumers `queue` has and how many messages it holds ready
/// (not counting those delivered and unacked), by a passive declare. A
/// passive declare of a missing queue closes its channel, so each look
/// uses a channel of its own.
async fn queue_counts(connection: &Connection, queue: &str) -> Result<(u32, u32), String> {
    let channel = connection.create_channel().await.map_err(|e| e.to_string())?;
    let options = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let declared = channel
        .queue_declare(queue.into(), options, FieldTable::default())
        .await
        .map_err(|e| format!("queue not there yet: {e}"))?;
    let _ = channel.close(200, "looked".into()).await;
    Ok((declared.consumer_count(), declared.message_count()))
}

/// Waits until the trigger's consumer is attached to `queue` (it declares
/// the queue itself).
async fn consumer_attached(connection: &Connection, queue: &str) {
    eventually(Duration::from_secs(30), || async {
        match queue_counts(connection, queue).await?.0 {
            0 => Err("no consumer yet".into()),
            _ => Ok(()),
        }
    })
    .await
}

/// Waits until `queue` has exactly `consumers` consumers.
async fn consumers_become(connection: &Connection, queue: &str, consumers: u32) {
    eventually(Duration::from_secs(30), || async {
        match queue_counts(connection, queue).await? {
            (n, _) if n == consumers => Ok(()),
            (n, _) => Err(format!("{n} consumers on {queue}, not {consumers}")),
        }
    })
    .await
}

/// Waits until `queue` holds no ready message.
async fn drained(channel: &Channel, queue: &str) {
    eventually(Duration::from_secs(30), || async {
        match declare(channel, queue).await {
            0 => Ok(()),
            n => Err(format!("{n} messages still in {queue}")),
        }
    })
    .await
}

/// The first message in dead-letter queue `dead`, waited for. (A get from
/// a queue not declared yet closes its channel: one channel per look.)
async fn dead_letter(conn: &Connection, dead: &str) -> lapin::message::BasicGetMessage {
    eventually(Duration::from_secs(30), || async {
        conn.create_channel()
            .await
            .map_err(|e| e.to_string())?
            .basic_get(dead.into(), BasicGetOptions { no_ack: true })
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "not in the dead-letter queue yet".to_string())
    })
    .await
}

/// Ends a test: stops its server (whose consumer would declare a deleted
/// queue again) and deletes the queues the test used, so none is left on
/// the shared broker. Deleting a queue that is not there is no error.
async fn remove_queues(server: Server, channel: &Channel, queues: &[&str]) {
    drop(server);
    for queue in queues {
        channel
            .queue_delete((*queue).into(), QueueDeleteOptions::default())
            .await
            .unwrap_or_else(|e| panic!("deleting {queue}: {e}"));
    }
}

/// The reason a dead letter carries in `x-sless-error`.
fn error_header(message: &lapin::message::BasicGetMessage) -> String {
    let headers = message.delivery.properties.headers().clone().unwrap_or_default();
    match headers.inner().get("x-sless-error") {
        Some(AMQPValue::LongString(error)) => error.to_string(),
        other => panic!("no error header: {other:?}"),
    }
}

fn printed_ids(records: &[Value]) -> BTreeSet<u64> {
    records
        .iter()
        .flat_map(|r| r["logs"].as_array().unwrap().clone())
        .filter_map(|l| {
            l["text"]
                .as_str()
                .and_then(|t| t.split_whitespace().nth(1))
                .and_then(|id| id.parse().ok())
        })
        .collect()
}

#[tokio::test]
async fn messages_are_handled_and_acked() {
    let queue = format!("sless-test-{}", hex_id());
    let (conn, channel) = channel().await;
    let server = setup(BROKER, &queue, json!({"prefetch": 2})).await;
    consumer_attached(&conn, &queue).await;
    for id in 0..5 {
        publish(&channel, &queue, json!({"id": id})).await;
    }
    let records = amqp_records(&server, 5, 30).await;
    assert_eq!(printed_ids(&records), (0..5).collect());
    assert!(records.iter().all(|r| r["status"] == "ok"), "{records:?}");
    drained(&channel, &queue).await;
    let (_, trigger) = server.call(Method::GET, "/v1/namespaces/ns/triggers/queue", None).await;
    assert_eq!(trigger["status"]["last_error"], Value::Null, "{trigger}");
    remove_queues(server, &channel, &[&queue, &format!("{queue}.dead")]).await;
}

#[tokio::test]
async fn failures_retry_then_go_to_the_dead_letter_queue() {
    let queue = format!("sless-test-{}", hex_id());
    let dead = format!("{queue}.failed");
    let (conn, channel) = channel().await;
    let server = setup(BROKER, &queue, json!({"retry_limit": 2, "dead_letter_queue": dead})).await;
    // A queue name is an AMQP short string: a longer one is refused, named.
    let long = json!({"name": "long", "type": "amqp", "function": "consumer", "broker_url": BROKER,
        "queue": queue, "dead_letter_queue": "d".repeat(256)});
    let (status, refused) = server
        .call(Method::POST, "/v1/namespaces/ns/triggers", Some(long))
        .await;
    assert_eq!(
        (status, refused["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("dead_letter_queue")),
        "{refused}"
    );
    // A failure sent back to the queue it came from would be tried forever.
    let looping = json!({"name": "looping", "type": "amqp", "function": "consumer", "broker_url": BROKER,
        "queue": queue, "dead_letter_queue": queue});
    let (status, refused) = server
        .call(Method::POST, "/v1/namespaces/ns/triggers", Some(looping))
        .await;
    assert_eq!(
        (status, refused["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("dead_letter_queue")),
        "{refused}"
    );
    assert!(refused["error"].as_str().unwrap().contains("own queue"), "{refused}");
    // Consuming another trigger's dead letters is fine (disabled here, so
    // it leaves them to this test).
    let dead_letters = json!({"name": "dead-letters", "type": "amqp", "function": "consumer", "broker_url": BROKER,
        "queue": dead, "enabled": false});
    let (status, created) = server
        .call(Method::POST, "/v1/namespaces/ns/triggers", Some(dead_letters))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    consumer_attached(&conn, &queue).await;
    publish(&channel, &queue, json!({"id": 7, "fail": true})).await;
    // Dead-lettered after the last try: no try comes after it.
    let message = dead_letter(&conn, &dead).await;
    let records = amqp_records(&server, 3, 30).await;
    assert!(records.iter().all(|r| r["status"] == "error"), "{records:?}");
    assert_eq!(records.len(), 3, "one try and two retries, no more");
    assert_eq!(
        serde_json::from_slice::<Value>(&message.delivery.data).unwrap()["id"],
        7
    );
    let headers = message.delivery.properties.headers().clone().unwrap();
    assert!(
        matches!(headers.inner().get("x-sless-retries"), Some(AMQPValue::LongLongInt(2))),
        "{headers:?}"
    );
    assert_eq!(declare(&channel, &queue).await, 0);
    let (_, trigger) = server.call(Method::GET, "/v1/namespaces/ns/triggers/queue", None).await;
    assert!(
        trigger["status"]["last_error"]
            .as_str()
            .unwrap()
            .contains("cannot handle"),
        "{trigger}"
    );
    remove_queues(server, &channel, &[&queue, &dead]).await;
}

/// A message larger than a call may be (`SLESS_MAX_INVOKE_BYTES`) is not
/// handed to the function: it goes to the dead-letter queue at once, with
/// the reason, and the next message is handled.
#[tokio::test]
async fn a_message_larger_than_a_call_is_dead_lettered_unhandled() {
    let queue = format!("sless-test-{}", hex_id());
    let dead = format!("{queue}.dead");
    let (conn, channel) = channel().await;
    let server = setup_with(BROKER, &queue, json!({}), &[("SLESS_MAX_INVOKE_BYTES", "4096")]).await;
    consumer_attached(&conn, &queue).await;
    publish(&channel, &queue, json!({"id": 1, "pad": "x".repeat(5000)})).await;
    publish(&channel, &queue, json!({"id": 2})).await;
    let message = dead_letter(&conn, &dead).await;
    assert_eq!(
        serde_json::from_slice::<Value>(&message.delivery.data).unwrap()["id"],
        1
    );
    let error = error_header(&message);
    assert!(error.contains("SLESS_MAX_INVOKE_BYTES"), "{error}");
    let records = amqp_records(&server, 1, 30).await;
    assert_eq!(
        printed_ids(&records),
        BTreeSet::from([2]),
        "only the small message is handled"
    );
    drained(&channel, &queue).await;
    remove_queues(server, &channel, &[&queue, &dead]).await;
}

/// The event of a body that is not JSON: its text, or (not UTF-8) its
/// bytes in base64 with `isBase64Encoded`, none lost; JSON as deep as the
/// parser goes (127 levels) is JSON, and deeper is its text (as an HTTP
/// body that deep is); none is dead-lettered.
#[tokio::test]
async fn bodies_that_are_not_json_reach_the_handler_whole() {
    let queue = format!("sless-test-{}", hex_id());
    let dead = format!("{queue}.dead");
    let (conn, channel) = channel().await;
    let server = setup(BROKER, &queue, json!({"retry_limit": 0})).await;
    consumer_attached(&conn, &queue).await;
    let binary: &[u8] = &[0xff, 0x00, 0xfe, b'a', 0x80];
    let nested = |depth: usize| format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
    for body in [
        "plain text, not JSON".as_bytes(),
        binary,
        nested(127).as_bytes(),
        nested(128).as_bytes(),
    ] {
        publish_bytes(&channel, &queue, body, BasicProperties::default()).await;
    }
    let records = amqp_records(&server, 4, 30).await;
    let events: Vec<Value> = records
        .iter()
        .filter_map(|r| r["logs"][0]["text"].as_str()?.strip_prefix("event "))
        .map(|printed| serde_json::from_str(printed.trim()).unwrap())
        .collect();
    assert_eq!(events.len(), 4, "{records:?}");
    assert!(events.contains(&json!("plain text, not JSON")), "{events:?}");
    let encoded = events
        .iter()
        .find(|e| e["isBase64Encoded"] == true)
        .unwrap_or_else(|| panic!("no binary event: {events:?}"));
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded["body"].as_str().unwrap())
        .unwrap();
    assert_eq!(decoded, binary, "{encoded}");
    assert!(
        events.contains(&serde_json::from_str::<Value>(&nested(127)).unwrap()),
        "127 levels come as JSON"
    );
    assert!(events.contains(&json!(nested(128))), "128 levels come as text");
    drained(&channel, &queue).await;
    remove_queues(server, &channel, &[&queue, &dead]).await;
}

// Multi-threaded: the proxy must keep running while the harness blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_loses_no_message() {
    let queue = format!("sless-test-{}", hex_id());
    let proxy = TcpProxy::start(5672).await;
    let broker = format!("amqp://guest:guest@127.0.0.1:{}/%2f", proxy.port);
    let (conn, channel) = channel().await;
    let server = setup(&broker, &queue, json!({"prefetch": 2})).await;
    consumer_attached(&conn, &queue).await;
    for id in 0..20 {
        publish(&channel, &queue, json!({"id": id, "sleep": 0.1})).await;
    }
    amqp_records(&server, 5, 30).await;
    // Cut the consumer's connection mid-stream for a second (an outage,
    // not a wait), then let it back.
    proxy.up.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.up.store(true, Ordering::SeqCst);
    eventually(Duration::from_secs(60), || async {
        let handled = printed_ids(&amqp_records(&server, 1, 5).await);
        if handled == (0..20).collect() {
            Ok(())
        } else {
            Err(format!("messages lost: handled {handled:?}"))
        }
    })
    .await;
    drained(&channel, &queue).await;
    remove_queues(server, &channel, &[&queue, &format!("{queue}.dead")]).await;
}

/// A TLS front for the broker on 127.0.0.1:5672, with a certificate of its
/// own for 127.0.0.1: answers its port, the certificate's PEM file (for
/// `SSL_CERT_FILE`) and how many TLS handshakes it completed.
async fn tls_front(dir: &std::path::Path) -> (u16, std::path::PathBuf, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let rcgen::CertifiedKey { cert, key_pair } =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let pem = dir.join("broker.pem");
    std::fs::write(&pem, cert.pem()).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key_pair.serialize_der().into());
    let config =
        rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let handshakes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = handshakes.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let (acceptor, counted) = (acceptor.clone(), counted.clone());
            tokio::spawn(async move {
                let Ok(mut client) = acceptor.accept(client).await else {
                    return; // a client that did not trust the certificate
                };
                counted.fetch_add(1, Ordering::SeqCst);
                let Ok(mut broker) = tokio::net::TcpStream::connect("127.0.0.1:5672").await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut client, &mut broker).await;
            });
        }
    });
    (port, pem, handshakes)
}

/// `amqps://` is AMQP over TLS, the certificate checked against the
/// machine's trusted ones (`SSL_CERT_FILE` names them here): a trigger on a
/// TLS front of the broker handles its messages, and a server that does
/// not trust the front's certificate does not connect, saying why in the
/// trigger's status. (The client once had no TLS built in and spoke plain
/// AMQP to an `amqps://` broker.)
#[tokio::test]
async fn an_amqps_broker_is_reached_over_tls_with_its_certificate_checked() {
    let dir = tempfile::tempdir().unwrap();
    let (port, pem, handshakes) = tls_front(dir.path()).await;
    let broker = format!("amqps://guest:guest@127.0.0.1:{port}/%2f");
    let queue = format!("sless-test-{}", hex_id());
    let (conn, channel) = channel().await;
    let pem_path = pem.to_str().unwrap();
    let server = setup_with(&broker, &queue, json!({}), &[("SSL_CERT_FILE", pem_path)]).await;
    consumer_attached(&conn, &queue).await;
    publish(&channel, &queue, json!({"id": 7})).await;
    let records = amqp_records(&server, 1, 30).await;
    assert_eq!(records[0]["status"], "ok", "{}", records[0]);
    assert_eq!(printed_ids(&records), BTreeSet::from([7]));
    assert!(handshakes.load(Ordering::SeqCst) >= 1, "the consumer came through TLS");
    drop(server);

    // A server that does not trust the certificate (no SSL_CERT_FILE: the
    // machine's own store) connects to nothing and says so.
    let seen = handshakes.load(Ordering::SeqCst);
    let untrusted_queue = format!("sless-test-{}", hex_id());
    let untrusting = setup(&broker, &untrusted_queue, json!({})).await;
    let error = eventually(Duration::from_secs(30), || async {
        let (_, trigger) = untrusting
            .call(Method::GET, "/v1/namespaces/ns/triggers/queue", None)
            .await;
        match trigger["status"]["last_error"].as_str() {
            Some(error) => Ok(error.to_string()),
            None => Err(format!("no error yet: {trigger}")),
        }
    })
    .await;
    assert!(error.contains("certificate"), "{error}");
    assert_eq!(handshakes.load(Ordering::SeqCst), seen, "no handshake completed");
    let dead = format!("{queue}.dead");
    remove_queues(untrusting, &channel, &[&queue, &dead, &untrusted_queue]).await;
}

crate::both_stores!(quick_patches_leave_one_consumer_and_a_delete_none);

/// Each change of a trigger replaces its consumer: quick PATCHes one after
/// another leave exactly one consumer (which handles what comes next) and a
/// DELETE leaves none. A consumer stopped while it connects or subscribes
/// does not live on with its connection, holding messages it never hands
/// to the function. On PostgreSQL the replica also converges on the store
/// four times a second: a pass that read the store before a change does
/// not start the trigger's consumer again after it.
async fn quick_patches_leave_one_consumer_and_a_delete_none(backend: Backend) {
    let queue = format!("sless-test-{}", hex_id());
    let (conn, channel) = channel().await;
    let server = setup_on(backend, BROKER, &queue, json!({"prefetch": 2}), &[]).await;
    // A few times over: a consumer left behind shows in most rounds, not all.
    for cycle in 0..3u64 {
        if cycle > 0 {
            let trigger = json!({"name": "queue", "type": "amqp", "function": "consumer",
                "broker_url": BROKER, "queue": queue, "prefetch": 2});
            let (status, created) = server
                .call(Method::POST, "/v1/namespaces/ns/triggers", Some(trigger))
                .await;
            assert_eq!(status, StatusCode::CREATED, "{created}");
        }
        consumer_attached(&conn, &queue).await;
        for round in 0..40 {
            let patch = json!({"prefetch": round % 5 + 1});
            let (status, patched) = server
                .call(Method::PATCH, "/v1/namespaces/ns/triggers/queue", Some(patch))
                .await;
            assert_eq!(status, StatusCode::OK, "{patched}");
            // Pauses of 0 to 15 ms, shuffled: the next change meets the
            // consumer as it connects, at each step of subscribing, and
            // once it consumes.
            tokio::time::sleep(Duration::from_millis(round * 7 % 16)).await;
        }
        consumers_become(&conn, &queue, 1).await;
        let first = cycle * 10;
        for id in first..first + 5 {
            publish(&channel, &queue, json!({"id": id})).await;
        }
        let handled: BTreeSet<u64> = (0..=cycle).flat_map(|c| c * 10..c * 10 + 5).collect();
        let records = amqp_records(&server, handled.len(), 30).await;
        assert_eq!(printed_ids(&records), handled);
        drained(&channel, &queue).await;

        let (status, deleted) = server
            .call(Method::DELETE, "/v1/namespaces/ns/triggers/queue", None)
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{deleted}");
        consumers_become(&conn, &queue, 0).await;
        for id in first + 5..first + 10 {
            publish(&channel, &queue, json!({"id": id})).await;
        }
        // All five stay ready: no consumer left behind took one to hold unacked.
        eventually(Duration::from_secs(30), || async {
            match queue_counts(&conn, &queue).await? {
                (0, 5) => Ok(()),
                (consumers, ready) => Err(format!("{consumers} consumers, {ready} of 5 messages ready")),
            }
        })
        .await;
        channel
            .queue_purge(queue.as_str().into(), QueuePurgeOptions::default())
            .await
            .unwrap();
    }
    remove_queues(server, &channel, &[&queue, &format!("{queue}.dead")]).await;
}

/// On PostgreSQL the replica converges on the store four times a second
/// and handlers apply their changes at once: a pass that read the store
/// before a DELETE does not start the deleted trigger's consumer again
/// after it. Many functions named by triggers make each pass's gating
/// take a while, so DELETEs sent at spread delays after a PATCH (which
/// starts a pass) land while a pass holds its older snapshot.
#[tokio::test]
async fn a_convergence_pass_does_not_bring_a_deleted_trigger_back() {
    let queue = format!("sless-test-{}", hex_id());
    let (conn, channel) = channel().await;
    let server = setup_on(Backend::Postgres, BROKER, &queue, json!({"prefetch": 2}), &[]).await;
    for n in 0..60 {
        let function = json!({"name": format!("f{n}"), "runtime": "python3.11"});
        let (status, body) = server
            .call(Method::POST, "/v1/namespaces/ns/functions", Some(function))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let trigger = json!({"name": format!("t{n}"), "type": "http", "function": format!("f{n}")});
        let (status, body) = server
            .call(Method::POST, "/v1/namespaces/ns/triggers", Some(trigger))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    for round in 0..10u64 {
        if round > 0 {
            let trigger = json!({"name": "queue", "type": "amqp", "function": "consumer",
                "broker_url": BROKER, "queue": queue, "prefetch": 2});
            let (status, created) = server
                .call(Method::POST, "/v1/namespaces/ns/triggers", Some(trigger))
                .await;
            assert_eq!(status, StatusCode::CREATED, "{created}");
        }
        consumers_become(&conn, &queue, 1).await;
        let (status, patched) = server
            .call(
                Method::PATCH,
                "/v1/namespaces/ns/triggers/queue",
                Some(json!({"prefetch": 3})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{patched}");
        tokio::time::sleep(Duration::from_millis(round * 25)).await;
        let (status, deleted) = server
            .call(Method::DELETE, "/v1/namespaces/ns/triggers/queue", None)
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{deleted}");
        // The stopped consumer's connection closes in the background (a
        // busy broker takes a moment); once it has, past the next two
        // passes (250 ms apart), none attaches again. A consumer a stale
        // pass started would be there to stay, and this wait would end
        // without seeing none.
        consumers_become(&conn, &queue, 0).await;
        for _ in 0..24 {
            let (consumers, _) = queue_counts(&conn, &queue).await.unwrap();
            assert_eq!(consumers, 0, "round {round}: a consumer of the deleted trigger is back");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
    remove_queues(server, &channel, &[&queue, &format!("{queue}.dead")]).await;
}

/// A function with no room for a message (at capacity, its queue of
/// waiting calls full) does not fail it: the message waits, unacked, and
/// is called once there is room. Prefetch here is far above what the
/// function takes at once (one instance, one call, two waiting), and no
/// retry is allowed, so a message counted as failed would be dead-lettered.
#[tokio::test]
async fn a_busy_function_holds_messages_instead_of_dead_lettering_them() {
    let queue = format!("sless-test-{}", hex_id());
    let (conn, channel) = channel().await;
    let function = json!({"runtime": "python3.11", "concurrency": 1, "max_instances": 1});
    let server = setup_function(
        Backend::Sqlite,
        BROKER,
        &queue,
        function,
        json!({"prefetch": 40, "retry_limit": 0}),
        &[("SLESS_MAX_QUEUE", "2")],
    )
    .await;
    consumer_attached(&conn, &queue).await;
    for id in 0..40 {
        publish(&channel, &queue, json!({"id": id, "sleep": 0.05})).await;
    }
    let records = amqp_records(&server, 40, 120).await;
    assert_eq!(printed_ids(&records), (0..40).collect());
    assert!(records.iter().all(|r| r["status"] == "ok"), "{records:?}");
    drained(&channel, &queue).await;
    assert_eq!(
        declare(&channel, &format!("{queue}.dead")).await,
        0,
        "nothing dead-lettered"
    );
    let (_, trigger) = server.call(Method::GET, "/v1/namespaces/ns/triggers/queue", None).await;
    assert_eq!(trigger["status"]["last_error"], Value::Null, "{trigger}");
    remove_queues(server, &channel, &[&queue, &format!("{queue}.dead")]).await;
}

/// Retries are spaced out: the first waits SLESS_ASYNC_RETRY_BASE_MS, each
/// further one twice as long. A retry count the publisher set below zero
/// counts as none (it once wrapped to four billion: no retry at all).
#[tokio::test]
async fn retries_wait_twice_as_long_each_time() {
    let queue = format!("sless-test-{}", hex_id());
    let (conn, channel) = channel().await;
    let server = setup_with(
        BROKER,
        &queue,
        json!({"retry_limit": 2}),
        &[("SLESS_ASYNC_RETRY_BASE_MS", "300")],
    )
    .await;
    consumer_attached(&conn, &queue).await;
    let mut headers = FieldTable::default();
    headers.insert("x-sless-retries".into(), AMQPValue::LongInt(-1));
    let properties = BasicProperties::default().with_headers(headers);
    publish_with(&channel, &queue, json!({"id": 3, "fail": true}), properties).await;
    let message = dead_letter(&conn, &format!("{queue}.dead")).await;
    let headers = message.delivery.properties.headers().clone().unwrap();
    assert!(
        matches!(headers.inner().get("x-sless-retries"), Some(AMQPValue::LongLongInt(2))),
        "{headers:?}"
    );
    let records = amqp_records(&server, 3, 30).await;
    assert_eq!(records.len(), 3, "one try and two retries: {records:?}");
    let mut starts: Vec<_> = records
        .iter()
        .map(|r| chrono::DateTime::parse_from_rfc3339(r["started_at"].as_str().unwrap()).unwrap())
        .collect();
    starts.sort();
    let gaps: Vec<i64> = starts.windows(2).map(|w| (w[1] - w[0]).num_milliseconds()).collect();
    assert!(
        gaps[0] >= 300 && gaps[1] >= 600,
        "retries came too soon: gaps {gaps:?} ms"
    );
    remove_queues(server, &channel, &[&queue, &format!("{queue}.dead")]).await;
}

/// A queue that exists already is consumed as it is: declared by someone
/// else with a message TTL (which a declare without it is refused for), and
/// its dead-letter queue not durable.
#[tokio::test]
async fn queues_declared_with_other_arguments_are_used_as_they_are() {
    let queue = format!("sless-test-{}", hex_id());
    let dead = format!("{queue}.dead");
    let (conn, channel) = channel().await;
    let mut arguments = FieldTable::default();
    arguments.insert("x-message-ttl".into(), AMQPValue::LongInt(600_000));
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(queue.as_str().into(), durable, arguments)
        .await
        .unwrap();
    channel
        .queue_declare(
            dead.as_str().into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let server = setup(BROKER, &queue, json!({"retry_limit": 0})).await;
    consumer_attached(&conn, &queue).await;
    publish(&channel, &queue, json!({"id": 1})).await;
    publish(&channel, &queue, json!({"id": 2, "fail": true})).await;
    let message = dead_letter(&conn, &dead).await;
    assert_eq!(
        serde_json::from_slice::<Value>(&message.delivery.data).unwrap()["id"],
        2
    );
    let records = amqp_records(&server, 2, 30).await;
    assert_eq!(printed_ids(&records), BTreeSet::from([1, 2]));
    remove_queues(server, &channel, &[&queue, &dead]).await;
}

/// A stop (SIGTERM) lets the call of a message under way finish and ack
/// within the grace period, as it does calls over HTTP and cron calls: the
/// message used to go back to the queue, its call cut off unrecorded, and
/// be handled again after the restart.
#[tokio::test]
async fn a_stop_lets_a_message_under_way_finish() {
    let queue = format!("sless-test-{}", hex_id());
    let (conn, channel) = channel().await;
    // The gate is on the machine's loopback, which an isolated instance
    // cannot reach.
    let mut server = setup_with(
        BROKER,
        &queue,
        json!({"prefetch": 1}),
        &[("SLESS_NETWORK_ISOLATION", "false")],
    )
    .await;
    consumer_attached(&conn, &queue).await;
    // A first message: the consumer's loop is then waiting for the next
    // one, and takes it as soon as the broker sends it.
    publish(&channel, &queue, json!({"id": 0})).await;
    amqp_records(&server, 1, 30).await;
    // The stop comes once the slow message's call has started (it connects
    // to the gate first): a message delivered but not called yet goes back
    // to the queue instead.
    let gate = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = gate.local_addr().unwrap().port();
    publish(&channel, &queue, json!({"id": 1, "sleep": 4, "gate": port})).await;
    tokio::time::timeout(Duration::from_secs(30), gate.accept())
        .await
        .expect("the slow message's call starts within 30 s")
        .unwrap();
    assert!(server.terminate_wait().success());

    server.spawn();
    let records = server.records("ns", "consumer").await;
    assert_eq!(printed_ids(&records), BTreeSet::from([0, 1]), "{records:?}");
    assert!(records.iter().all(|r| r["status"] == "ok"), "{records:?}");
    consumer_attached(&conn, &queue).await;
    // Had the slow message gone back to the queue, it would come before
    // this one (one message at a time).
    publish(&channel, &queue, json!({"id": 2})).await;
    let records = eventually(Duration::from_secs(30), || async {
        let records = amqp_records(&server, 1, 30).await;
        match printed_ids(&records).contains(&2) {
            true => Ok(records),
            false => Err("the last message is not handled yet".to_string()),
        }
    })
    .await;
    assert_eq!(records.len(), 3, "each message handled once: {records:?}");
    remove_queues(server, &channel, &[&queue, &format!("{queue}.dead")]).await;
}
