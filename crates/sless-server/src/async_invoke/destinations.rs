//! Where an event's outcome goes: the record sent (its JSON shape is
//! `outcome`), and RabbitMQ queues, published with confirms over one
//! connection per broker. Function destinations need nothing here: the
//! deliverer stores an event for the function together with the outcome.

use std::collections::HashMap;
use std::time::Duration;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use serde_json::{json, Map, Value};

use crate::store::events::{time_of, NewEvent};
use crate::triggers::brokers::BrokerAllowList;

/// Why an event ended, as the outcome record says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    Success,
    RetriesExhausted,
    EventAgeExceeded,
}

impl Condition {
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::Success => "success",
            Condition::RetriesExhausted => "retries_exhausted",
            Condition::EventAgeExceeded => "event_age_exceeded",
        }
    }
}

/// What a destination receives: the event (its request, the body as text
/// when it is UTF-8, else as `body_hex`), the condition, the attempts, the
/// last status and error, and on success the handler's answer.
pub fn outcome(
    event: &NewEvent,
    condition: Condition,
    attempts: u32,
    status: Option<u16>,
    error: Option<&str>,
    response: Option<&[u8]>,
) -> Value {
    let headers: Vec<(String, String)> = serde_json::from_str(&event.headers).unwrap_or_default();
    let mut request = Map::new();
    request.insert("method".into(), json!(event.method));
    request.insert("path".into(), json!(event.path));
    request.insert("query".into(), json!(event.query));
    request.insert("headers".into(), json!(headers.into_iter().collect::<HashMap<_, _>>()));
    match std::str::from_utf8(&event.body) {
        Ok(text) => request.insert("body".into(), json!(text)),
        Err(_) => request.insert("body_hex".into(), json!(hex::encode(&event.body))),
    };
    let mut record = json!({
        "id": event.id,
        "namespace": event.namespace,
        "function": event.function,
        "request_id": event.request_id,
        "condition": condition.as_str(),
        "attempts": attempts,
        "status": status,
        "error": error,
        "created_at": time_of(event.created_at),
        "request": request,
    });
    if let Some(body) = response {
        record["response"] = json!({ "status": status, "body": String::from_utf8_lossy(body) });
    }
    record
}

/// RabbitMQ publishing for amqp destinations: a connection and confirming
/// channel per broker URL, made when first needed and again after an error.
pub struct Publisher {
    brokers: BrokerAllowList,
    channels: tokio::sync::Mutex<HashMap<String, (Connection, Channel)>>,
}

/// How long one publish (connecting included) may take.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(10);

impl Publisher {
    pub fn new(brokers: BrokerAllowList) -> Publisher {
        Publisher {
            brokers,
            channels: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Publishes `body` (persistent) to `queue` and waits for the broker's
    /// confirm; one retry on a fresh connection. The error is for the
    /// event's record: it names no more than the broker's answer.
    pub async fn publish(&self, url: &str, queue: &str, body: &[u8]) -> Result<(), String> {
        self.brokers.check(url)?;
        let mut last = String::new();
        for _ in 0..2 {
            match tokio::time::timeout(PUBLISH_TIMEOUT, self.try_publish(url, queue, body)).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = format!("no confirm within {} s", PUBLISH_TIMEOUT.as_secs()),
            }
            self.channels.lock().await.remove(url);
        }
        Err(format!("publishing to queue {queue:?} failed: {last}"))
    }

    async fn try_publish(&self, url: &str, queue: &str, body: &[u8]) -> lapin::Result<()> {
        let mut channels = self.channels.lock().await;
        if !channels
            .get(url)
            .is_some_and(|(c, ch)| c.status().connected() && ch.status().connected())
        {
            let connection = Connection::connect(url, ConnectionProperties::default()).await?;
            let channel = connection.create_channel().await?;
            channel.confirm_select(ConfirmSelectOptions::default()).await?;
            channels.insert(url.to_string(), (connection, channel));
        }
        let channel = channels.get(url).map(|(_, ch)| ch.clone()).expect("inserted above");
        drop(channels);
        let options = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        channel
            .queue_declare(queue.into(), options, FieldTable::default())
            .await?;
        let properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type("application/json".into());
        channel
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                body,
                properties,
            )
            .await?
            .await?;
        Ok(())
    }
}
