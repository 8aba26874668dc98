//! RabbitMQ triggers: consume a queue, invoke the function per message, ack
//! after success; on failure republish with a retry count until the limit,
//! then to the dead-letter queue. A message is acked only once its outcome
//! is safely stored (handled, or republished with publisher confirms), so a
//! lost connection never loses one: the broker redelivers what was unacked.
//! Connection loss or a broker restart: reconnect with backoff. A message
//! larger than a call may be (`SLESS_MAX_INVOKE_BYTES`) goes to the
//! dead-letter queue unhandled, with the reason. The event is the body as
//! JSON, else its text, else (not UTF-8) its bytes in base64 (see
//! `message_event`).
//!
//! A message whose function has no room for it (at capacity, at its
//! namespace's quota, not built yet, off) is not tried: it is held unacked
//! and called again after a wait, so `prefetch` bounds what waits and a
//! busy function slows the queue down instead of dead-lettering it. A retry
//! waits too: its copy carries the time before which it is not tried
//! (`x-sless-retry-at`), `SLESS_ASYNC_RETRY_BASE_MS` after the first
//! failure, doubled after each further one. When the consumer stops, calls
//! under way finish and settle (a shutdown waits for them, see
//! `Triggers::drain`); messages only waiting go back to the queue at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::protocol::constants::REPLY_SUCCESS;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection};
use sless_api::TriggerSpec;
use tokio::sync::watch;

use super::TriggerCall;
use crate::invoker::{Invoker, Run};
use crate::store::Store;
use sless_driver::{FunctionKey, InvokeError, TriggerKind};

const RETRIES_HEADER: &str = "x-sless-retries";
const ERROR_HEADER: &str = "x-sless-error";
/// When a retry may be tried, in milliseconds since the Unix epoch.
const RETRY_AT_HEADER: &str = "x-sless-retry-at";
/// The longest wait before a retry: the message is held unacked meanwhile,
/// and RabbitMQ closes a channel that holds one past its `consumer_timeout`.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);
/// The first wait before calling again a function that had no room for a
/// message; doubled while it has none, up to `MAX_BUSY_WAIT`.
const FIRST_BUSY_WAIT: Duration = Duration::from_millis(100);
const MAX_BUSY_WAIT: Duration = Duration::from_secs(5);
/// How long a message waits for room before it goes back to the queue (and
/// comes again, as a new delivery), well within RabbitMQ's `consumer_timeout`
/// (30 min by default).
const MAX_HOLD: Duration = Duration::from_secs(600);

/// How consumers handle their messages, from the server's settings.
#[derive(Clone)]
pub struct Handling {
    /// Larger messages are dead-lettered without a call.
    pub max_message_bytes: usize,
    /// The wait before a message's first retry, doubled for each further one.
    pub retry_base: Duration,
    /// Calls under way, shared with `Triggers::drain`.
    pub calls: Arc<AtomicUsize>,
}

/// How long a stopping consumer waits for the broker to confirm that its
/// connection closed; a broker that does not answer loses the TCP
/// connection anyway when the handles drop.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A running consumer. Its task owns the broker connection and closes it
/// when told to stop, or when this handle is dropped: the broker then
/// cancels the consumer and puts its unacked messages back at once. An
/// aborted task would drop the connection mid-step instead, and lapin can
/// keep a connection whose subscription was under way running on its own,
/// holding messages nobody handles.
pub struct Consumer {
    stop: watch::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Consumer {
    pub fn start(
        namespace: String,
        name: String,
        spec: TriggerSpec,
        invoker: Arc<Invoker>,
        store: Arc<dyn Store>,
        brokers: super::brokers::BrokerAllowList,
        handling: Handling,
    ) -> Consumer {
        let worker = Worker {
            handling,
            namespace,
            name,
            key: FunctionKey::new(String::new(), String::new()),
            queue: spec.queue.clone().unwrap_or_default(),
            dead_letter: spec
                .dead_letter_queue
                .clone()
                .unwrap_or_else(|| format!("{}.dead", spec.queue.clone().unwrap_or_default())),
            url: spec.broker_url.clone().unwrap_or_default(),
            prefetch: spec.prefetch.unwrap_or(1),
            retry_limit: spec.retry_limit.unwrap_or(3),
            invoker,
            store,
            brokers,
            handling_now: Arc::default(),
        };
        let worker = Arc::new(Worker {
            key: FunctionKey::new(&worker.namespace, &spec.function),
            ..worker
        });
        let (stop, stopped) = watch::channel(());
        Consumer {
            stop,
            task: tokio::spawn(worker.run(stopped)),
        }
    }

    /// Returns once the consumer's connection is closed (or the broker had
    /// [`CLOSE_TIMEOUT`] to confirm it).
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

struct Worker {
    namespace: String,
    name: String,
    key: FunctionKey,
    url: String,
    queue: String,
    dead_letter: String,
    prefetch: u16,
    retry_limit: u32,
    invoker: Arc<Invoker>,
    store: Arc<dyn Store>,
    brokers: super::brokers::BrokerAllowList,
    handling: Handling,
    /// Messages of this consumer being handled: its connection closes
    /// after them when it stops.
    handling_now: Arc<AtomicUsize>,
}

/// Open while the consume loop that took a message runs: its sender lives
/// in that loop, so it closes when the loop ends (the consumer stopped, or
/// its connection lost).
type Session = watch::Receiver<()>;

/// Waits `wait`; false when the session closed first.
async fn wait_open(session: &mut Session, wait: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(wait) => true,
        _ = session.changed() => false,
    }
}

fn is_closed(session: &Session) -> bool {
    session.has_changed().is_err()
}

impl Worker {
    /// Consumes until `stop` changes or its sender is dropped, reconnecting
    /// with backoff after the broker ends a connection.
    async fn run(self: Arc<Self>, mut stop: watch::Receiver<()>) {
        // Stored before the operator narrowed the list: never dialled.
        if let Err(refused) = self.brokers.check(&self.url) {
            tracing::warn!(trigger = %self.name, namespace = %self.namespace, %refused, "amqp trigger not started");
            super::record_outcome(&*self.store, &self.namespace, &self.name, Some(refused)).await;
            return;
        }
        let mut backoff = Duration::from_millis(200);
        loop {
            let connected = Instant::now();
            let Some(error) = self.session(&mut stop).await else {
                return;
            };
            tracing::warn!(trigger = %self.name, queue = %self.queue, %error, "amqp consumer stopped; reconnecting");
            super::record_outcome(
                &*self.store,
                &self.namespace,
                &self.name,
                Some(format!("broker: {error}")),
            )
            .await;
            if connected.elapsed() > Duration::from_secs(10) {
                backoff = Duration::from_millis(200);
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.changed() => return,
            }
            backoff = (backoff * 2).min(Duration::from_secs(10));
        }
    }

    /// One connection: consumes until the broker ends it (the reason) or
    /// `stop` changes (None). The connection is closed here either way,
    /// never left to lapin to drop; one still being made when the stop
    /// comes is closed once it is made.
    async fn session(self: &Arc<Self>, stop: &mut watch::Receiver<()>) -> Option<String> {
        let url = self.url.clone();
        let mut connecting = Box::pin(async move { super::brokers::connect(&url).await });
        let connection = tokio::select! {
            connected = &mut connecting => connected,
            _ = stop.changed() => {
                tokio::spawn(async move {
                    if let Ok(connection) = connecting.await {
                        close(&connection).await;
                    }
                });
                return None;
            }
        };
        let connection = match connection {
            Ok(connection) => connection,
            Err(e) => return Some(e.to_string()),
        };
        let ended = tokio::select! {
            consumed = self.clone().consume(&connection) => Some(match consumed {
                Ok(()) => "broker closed the consumer".to_string(),
                Err(e) => e.to_string(),
            }),
            _ = stop.changed() => None,
        };
        if ended.is_some() {
            close(&connection).await;
            return ended;
        }
        // Stopped: the calls under way finish and settle on this connection
        // (a shutdown waits for them, `Triggers::drain`), and it closes
        // after them; messages only waiting went back as their sessions
        // closed. The next consumer of the trigger need not wait for that.
        let handling = self.clone();
        tokio::spawn(async move {
            while handling.handling_now.load(Ordering::SeqCst) > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            close(&connection).await;
        });
        None
    }

    async fn consume(self: Arc<Self>, connection: &Connection) -> lapin::Result<()> {
        for queue in [&self.queue, &self.dead_letter] {
            ensure_queue(connection, queue).await?;
        }
        let channel = connection.create_channel().await?;
        channel.confirm_select(ConfirmSelectOptions::default()).await?;
        channel.basic_qos(self.prefetch, BasicQosOptions::default()).await?;
        // Declared before `deliveries`, so dropped after it: the consumer is
        // cancelled before waiting messages are handed back.
        let (_session, session) = watch::channel(());
        let tag = format!("sless-{}-{}-{:08x}", self.namespace, self.name, rand::random::<u32>());
        let mut deliveries = channel
            .basic_consume(
                self.queue.as_str().into(),
                tag.as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        tracing::info!(trigger = %self.name, queue = %self.queue, "amqp consumer connected");
        super::record_outcome(&*self.store, &self.namespace, &self.name, None).await;
        while let Some(delivery) = deliveries.next().await {
            let delivery = delivery?;
            let worker = self.clone();
            let channel = channel.clone();
            let session = session.clone();
            // The broker sends at most `prefetch` unacked messages: that bounds these tasks.
            tokio::spawn(async move { worker.handle(channel, delivery, session).await });
        }
        Ok(())
    }

    async fn handle(&self, channel: Channel, delivery: lapin::message::Delivery, mut session: Session) {
        let _handling = TriggerCall::start(&self.handling_now);
        if delivery.data.len() > self.handling.max_message_bytes {
            let error = format!(
                "a message of {} bytes is larger than a call may be (the server's SLESS_MAX_INVOKE_BYTES, {} bytes); not handled",
                delivery.data.len(),
                self.handling.max_message_bytes
            );
            return self.refuse(&channel, &delivery, error).await;
        }
        let event = message_event(&delivery.data);
        let due = retry_due_in(&delivery.properties, SystemTime::now());
        if !due.is_zero() && !wait_open(&mut session, due).await {
            return self.release(&delivery).await;
        }
        let retries = retries_of(&delivery.properties);
        let held = Instant::now();
        let mut busy_wait = FIRST_BUSY_WAIT;
        let (result, _call) = loop {
            // Counted before the session is looked at: a shutdown that sees
            // no call under way has closed the session this one then sees.
            let call = TriggerCall::start(&self.handling.calls);
            if is_closed(&session) {
                return self.release(&delivery).await;
            }
            match self
                .invoker
                .invoke(
                    &self.key,
                    crate::invoker::event_call(TriggerKind::Amqp, event.clone()),
                    Run::Serving,
                )
                .await
            {
                // Nothing ran: not a try. Held unacked, so prefetch bounds
                // how many wait.
                Err(
                    e @ (InvokeError::QueueFull(_)
                    | InvokeError::AtQuota { .. }
                    | InvokeError::NotDeployed(_)
                    | InvokeError::Disabled(_)),
                ) => {
                    drop(call);
                    if held.elapsed() > MAX_HOLD {
                        let error = format!("messages wait: {e}");
                        super::record_outcome(&*self.store, &self.namespace, &self.name, Some(error)).await;
                        return self.release(&delivery).await;
                    }
                    // Jittered, so the messages that wait do not all call at once.
                    let wait = busy_wait.mul_f64(0.5 + rand::random::<f64>() / 2.0);
                    if !wait_open(&mut session, wait).await {
                        return self.release(&delivery).await;
                    }
                    busy_wait = (busy_wait * 2).min(MAX_BUSY_WAIT);
                }
                result => break (result, call),
            }
        };
        let error = match result {
            Ok(r) if r.status < 400 => None,
            Ok(r) => Some(crate::invoker::error_text(&r.body)),
            Err(e) => Some(e.to_string()),
        };
        let settled = match &error {
            None => Ok(()),
            Some(error) if retries < self.retry_limit => {
                let at = SystemTime::now() + retry_wait(self.handling.retry_base, retries + 1);
                self.publish(&channel, &self.queue, &delivery, retries + 1, error, Some(at))
                    .await
            }
            Some(error) => {
                let shown = crate::bounds::one_line(error);
                tracing::warn!(trigger = %self.name, error = %shown, retries, "message dead-lettered");
                self.publish(&channel, &self.dead_letter, &delivery, retries, error, None)
                    .await
            }
        };
        self.settle(&delivery, settled).await;
        super::record_outcome(&*self.store, &self.namespace, &self.name, error).await;
    }

    /// Sends a message no call can take to the dead-letter queue, with
    /// `error` saying why, and keeps the error in the trigger's status.
    async fn refuse(&self, channel: &Channel, delivery: &lapin::message::Delivery, error: String) {
        tracing::warn!(trigger = %self.name, namespace = %self.namespace, error = %error, "message not handled: dead-lettered");
        let retries = retries_of(&delivery.properties);
        let sent = self
            .publish(channel, &self.dead_letter, delivery, retries, &error, None)
            .await;
        self.settle(delivery, sent).await;
        super::record_outcome(&*self.store, &self.namespace, &self.name, Some(error)).await;
    }

    /// Hands a message not tried back to the queue, as it came.
    async fn release(&self, delivery: &lapin::message::Delivery) {
        let requeue = BasicNackOptions {
            requeue: true,
            ..BasicNackOptions::default()
        };
        if let Err(e) = delivery.nack(requeue).await {
            tracing::debug!(trigger = %self.name, error = %e, "handing a message back failed; the broker requeues it when the channel closes");
        }
    }

    /// Acks a message whose outcome is stored (`sent`: republished or
    /// dead-lettered, or handled); otherwise the broker redelivers it.
    async fn settle(&self, delivery: &lapin::message::Delivery, sent: lapin::Result<()>) {
        match sent {
            Ok(()) => {
                if let Err(e) = delivery.ack(BasicAckOptions::default()).await {
                    tracing::warn!(trigger = %self.name, error = %e, "ack failed; the broker will redeliver");
                }
            }
            Err(e) => {
                tracing::warn!(trigger = %self.name, error = %e, "republishing failed; the broker will redeliver")
            }
        }
    }

    /// Publishes a copy of the message with the retry count, the error and
    /// when it may be tried again (`retry_at`; none for a dead letter), and
    /// waits for the broker's confirm.
    async fn publish(
        &self,
        channel: &Channel,
        queue: &str,
        delivery: &lapin::message::Delivery,
        retries: u32,
        error: &str,
        retry_at: Option<SystemTime>,
    ) -> lapin::Result<()> {
        let mut headers = delivery.properties.headers().clone().unwrap_or_default();
        headers.insert(
            ShortString::from(RETRIES_HEADER),
            AMQPValue::LongLongInt(i64::from(retries)),
        );
        let error: String = error.chars().take(200).collect();
        headers.insert(ShortString::from(ERROR_HEADER), AMQPValue::LongString(error.into()));
        let mut headers = headers.inner().clone();
        match retry_at {
            Some(at) => {
                let millis = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
                headers.insert(
                    ShortString::from(RETRY_AT_HEADER),
                    AMQPValue::LongLongInt(i64::try_from(millis).unwrap_or(i64::MAX)),
                );
            }
            None => {
                headers.remove(&ShortString::from(RETRY_AT_HEADER));
            }
        }
        let properties = BasicProperties::default()
            .with_headers(FieldTable::from(headers))
            .with_delivery_mode(2);
        channel
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                &delivery.data,
                properties,
            )
            .await?
            .await?;
        Ok(())
    }
}

/// The handler's event for a message body: the body parsed as JSON, else
/// its text; a body that is not UTF-8 (binary) as
/// `{"body": "<base64>", "isBase64Encoded": true}`, as Lambda passes a
/// binary body, so no byte is lost. JSON nested deeper than the parser
/// goes (128 levels) is its text, as an HTTP body that deep is.
fn message_event(body: &[u8]) -> serde_json::Value {
    use base64::Engine as _;
    use serde_json::{json, Value};
    serde_json::from_slice(body).unwrap_or_else(|_| match std::str::from_utf8(body) {
        Ok(text) => Value::String(text.to_string()),
        Err(_) => json!({
            "body": base64::engine::general_purpose::STANDARD.encode(body),
            "isBase64Encoded": true,
        }),
    })
}

/// Closes `connection` (its channels and consumers with it), waiting at
/// most [`CLOSE_TIMEOUT`] for the broker to confirm.
async fn close(connection: &Connection) {
    let closing = connection.close(REPLY_SUCCESS, "trigger stopped".into());
    match tokio::time::timeout(CLOSE_TIMEOUT, closing).await {
        Ok(_) => {} // closed, or already ended by the broker
        Err(_) => tracing::warn!("the broker did not confirm closing an amqp connection in time"),
    }
}

/// Makes sure `queue` exists. One that does is used as it is (a quorum
/// queue, a TTL, not durable: a declare with other arguments than its own
/// would be refused); a missing one is made durable. A passive declare of
/// a missing queue closes its channel, so each declare has a channel of its
/// own (closed when dropped).
async fn ensure_queue(connection: &Connection, queue: &str) -> lapin::Result<()> {
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let looked = connection
        .create_channel()
        .await?
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await;
    if looked.is_ok() {
        return Ok(());
    }
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    connection
        .create_channel()
        .await?
        .queue_declare(queue.into(), durable, FieldTable::default())
        .await?;
    Ok(())
}

/// The wait before retry number `retry` (1 for the first): `base`, doubled
/// for each further one, `MAX_RETRY_WAIT` at most.
fn retry_wait(base: Duration, retry: u32) -> Duration {
    base.saturating_mul(1 << retry.saturating_sub(1).min(20))
        .min(MAX_RETRY_WAIT)
}

/// How long until a message may be tried, from its `x-sless-retry-at`
/// (zero without one); anyone may publish the header, so a wait longer
/// than a retry's longest counts as that.
fn retry_due_in(properties: &BasicProperties, now: SystemTime) -> Duration {
    let at = match properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get(RETRY_AT_HEADER))
    {
        Some(value) => integer(value).unwrap_or(0),
        None => 0,
    };
    let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(at).unwrap_or(0));
    at.duration_since(now).unwrap_or_default().min(MAX_RETRY_WAIT)
}

/// The retries a message has had, from its `x-sless-retries`: anyone may
/// publish the header, so a negative count is none and a larger one than
/// a `u32` holds is the largest.
fn retries_of(properties: &BasicProperties) -> u32 {
    let Some(headers) = properties.headers() else { return 0 };
    let count = headers.inner().get(RETRIES_HEADER).and_then(integer).unwrap_or(0);
    u32::try_from(count.max(0)).unwrap_or(u32::MAX)
}

/// A header's value as an integer, whatever integer type the publisher chose.
fn integer(value: &AMQPValue) -> Option<i64> {
    match *value {
        AMQPValue::ShortShortInt(n) => Some(n.into()),
        AMQPValue::ShortShortUInt(n) => Some(n.into()),
        AMQPValue::ShortInt(n) => Some(n.into()),
        AMQPValue::ShortUInt(n) => Some(n.into()),
        AMQPValue::LongInt(n) => Some(n.into()),
        AMQPValue::LongUInt(n) => Some(n.into()),
        AMQPValue::LongLongInt(n) => Some(n),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_its_json_else_its_text_else_its_bytes_in_base64() {
        use serde_json::json;
        assert_eq!(message_event(br#"{"a": [1]}"#), json!({"a": [1]}));
        assert_eq!(message_event(b"not json"), json!("not json"));
        assert_eq!(message_event(b""), json!(""));
        assert_eq!(
            message_event(&[0xff, 0x00, b'a']),
            json!({"body": "/wBh", "isBase64Encoded": true})
        );
        let nested = |depth: usize| format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        assert!(message_event(nested(127).as_bytes()).is_array());
        assert_eq!(message_event(nested(128).as_bytes()), json!(nested(128)));
    }

    fn with_header(name: &str, value: AMQPValue) -> BasicProperties {
        let mut headers = FieldTable::default();
        headers.insert(ShortString::from(name), value);
        BasicProperties::default().with_headers(headers)
    }

    #[test]
    fn a_published_retry_count_is_read_within_bounds() {
        assert_eq!(retries_of(&BasicProperties::default()), 0);
        assert_eq!(retries_of(&with_header(RETRIES_HEADER, AMQPValue::LongInt(-1))), 0);
        assert_eq!(retries_of(&with_header(RETRIES_HEADER, AMQPValue::ShortInt(-7))), 0);
        assert_eq!(retries_of(&with_header(RETRIES_HEADER, AMQPValue::LongLongInt(2))), 2);
        assert_eq!(retries_of(&with_header(RETRIES_HEADER, AMQPValue::LongUInt(5))), 5);
        assert_eq!(
            retries_of(&with_header(RETRIES_HEADER, AMQPValue::LongLongInt(i64::MAX))),
            u32::MAX
        );
        assert_eq!(retries_of(&with_header(RETRIES_HEADER, AMQPValue::Boolean(true))), 0);
    }

    #[test]
    fn retries_wait_twice_as_long_each_time_up_to_a_minute() {
        let base = Duration::from_millis(200);
        assert_eq!(retry_wait(base, 1), base);
        assert_eq!(retry_wait(base, 3), base * 4);
        assert_eq!(retry_wait(base, 100), MAX_RETRY_WAIT);
    }

    #[test]
    fn a_published_retry_time_is_waited_for_at_most_a_minute() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let at = |ms: i64| with_header(RETRY_AT_HEADER, AMQPValue::LongLongInt(ms));
        assert_eq!(retry_due_in(&BasicProperties::default(), now), Duration::ZERO);
        assert_eq!(retry_due_in(&at(1_000_000_500), now), Duration::from_millis(500));
        assert_eq!(retry_due_in(&at(999_000_000), now), Duration::ZERO);
        assert_eq!(retry_due_in(&at(-1), now), Duration::ZERO);
        assert_eq!(retry_due_in(&at(i64::MAX), now), MAX_RETRY_WAIT);
    }
}
