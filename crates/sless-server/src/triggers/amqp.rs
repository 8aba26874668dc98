//! RabbitMQ triggers: consume a queue, invoke the function per message, ack
//! after success; on failure republish with a retry count until the limit,
//! then to the dead-letter queue. A message is acked only once its outcome
//! is safely stored (handled, or republished with publisher confirms), so a
//! lost connection never loses one: the broker redelivers what was unacked.
//! Connection loss or a broker restart: reconnect with backoff. A message
//! larger than a call may be (`SLESS_MAX_INVOKE_BYTES`) goes to the
//! dead-letter queue unhandled, with the reason.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::protocol::constants::REPLY_SUCCESS;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection};
use sless_api::TriggerSpec;
use tokio::sync::watch;

use crate::invoker::{Invoker, Run};
use crate::store::Store;
use sless_driver::{FunctionKey, Invocation, TriggerKind};

const RETRIES_HEADER: &str = "x-sless-retries";
const ERROR_HEADER: &str = "x-sless-error";

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
        max_message_bytes: usize,
    ) -> Consumer {
        let worker = Worker {
            max_message_bytes,
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
    /// Larger messages are dead-lettered without a call.
    max_message_bytes: usize,
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
        close(&connection).await;
        ended
    }

    async fn consume(self: Arc<Self>, connection: &Connection) -> lapin::Result<()> {
        let channel = connection.create_channel().await?;
        channel.confirm_select(ConfirmSelectOptions::default()).await?;
        channel.basic_qos(self.prefetch, BasicQosOptions::default()).await?;
        for queue in [&self.queue, &self.dead_letter] {
            channel
                .queue_declare(
                    queue.as_str().into(),
                    QueueDeclareOptions {
                        durable: true,
                        ..QueueDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await?;
        }
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
            // The broker sends at most `prefetch` unacked messages: that bounds these tasks.
            tokio::spawn(async move { worker.handle(channel, delivery).await });
        }
        Ok(())
    }

    async fn handle(&self, channel: Channel, delivery: lapin::message::Delivery) {
        if delivery.data.len() > self.max_message_bytes {
            let error = format!(
                "a message of {} bytes is larger than a call may be (the server's SLESS_MAX_INVOKE_BYTES, {} bytes); not handled",
                delivery.data.len(),
                self.max_message_bytes
            );
            tracing::warn!(trigger = %self.name, namespace = %self.namespace, bytes = delivery.data.len(), "message too large: dead-lettered");
            let retries = retries_of(&delivery.properties);
            let sent = self
                .publish(&channel, &self.dead_letter, &delivery, retries, &error)
                .await;
            self.settle(&delivery, sent).await;
            super::record_outcome(&*self.store, &self.namespace, &self.name, Some(error)).await;
            return;
        }
        let event = serde_json::from_slice(&delivery.data)
            .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&delivery.data).into_owned()));
        let retries = retries_of(&delivery.properties);
        let invocation = Invocation {
            kind: TriggerKind::Amqp,
            request_id: format!("{:016x}", rand::random::<u64>()),
            method: String::new(),
            path: String::new(),
            query: String::new(),
            headers: Default::default(),
            body: Default::default(),
            event: Some(event),
        };
        let error = match self.invoker.invoke(&self.key, invocation, Run::Serving).await {
            Ok(r) if r.status < 400 => None,
            Ok(r) => Some(crate::invoker::error_text(&r.body)),
            Err(e) => Some(e.to_string()),
        };
        let settled = match &error {
            None => Ok(()),
            Some(error) if retries < self.retry_limit => {
                self.publish(&channel, &self.queue, &delivery, retries + 1, error).await
            }
            Some(error) => {
                let shown = crate::bounds::one_line(error);
                tracing::warn!(trigger = %self.name, error = %shown, retries, "message dead-lettered");
                self.publish(&channel, &self.dead_letter, &delivery, retries, error)
                    .await
            }
        };
        self.settle(&delivery, settled).await;
        super::record_outcome(&*self.store, &self.namespace, &self.name, error).await;
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

    /// Publishes a copy of the message with the retry count and error, and
    /// waits for the broker's confirm.
    async fn publish(
        &self,
        channel: &Channel,
        queue: &str,
        delivery: &lapin::message::Delivery,
        retries: u32,
        error: &str,
    ) -> lapin::Result<()> {
        let mut headers = delivery.properties.headers().clone().unwrap_or_default();
        headers.insert(
            ShortString::from(RETRIES_HEADER),
            AMQPValue::LongLongInt(i64::from(retries)),
        );
        let error: String = error.chars().take(200).collect();
        headers.insert(ShortString::from(ERROR_HEADER), AMQPValue::LongString(error.into()));
        let properties = BasicProperties::default().with_headers(headers).with_delivery_mode(2);
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

/// Closes `connection` (its channels and consumers with it), waiting at
/// most [`CLOSE_TIMEOUT`] for the broker to confirm.
async fn close(connection: &Connection) {
    let closing = connection.close(REPLY_SUCCESS, "trigger stopped".into());
    match tokio::time::timeout(CLOSE_TIMEOUT, closing).await {
        Ok(_) => {} // closed, or already ended by the broker
        Err(_) => tracing::warn!("the broker did not confirm closing an amqp connection in time"),
    }
}

fn retries_of(properties: &BasicProperties) -> u32 {
    let Some(headers) = properties.headers() else { return 0 };
    match headers.inner().get(RETRIES_HEADER) {
        Some(AMQPValue::LongLongInt(n)) => *n as u32,
        Some(AMQPValue::LongInt(n)) => *n as u32,
        Some(AMQPValue::ShortInt(n)) => *n as u32,
        _ => 0,
    }
}
