//! Where an event's outcome goes: the record sent (its JSON shape is
//! `outcome`), and RabbitMQ queues, published with confirms over one
//! connection per broker, each behind a lock of its own: a broker that
//! hangs holds up only the publishes to it. Function destinations need nothing here: the
//! deliverer stores an event for the function together with the outcome.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection};
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
/// last status and error, and on success the handler's answer. Its JSON
/// takes at most `budget` bytes beyond what the rest of it needs (the
/// request's head, within the event's own bound): the request's body
/// first, since a dead letter is for replaying it, then the answer, each
/// cut to what is left and marked `body_truncated` where it was. Escaped,
/// a body of control characters takes six times its size.
pub fn outcome(
    event: &NewEvent,
    condition: Condition,
    attempts: u32,
    status: Option<u16>,
    error: Option<&str>,
    response: Option<&[u8]>,
    budget: usize,
) -> Value {
    let headers: Vec<(String, String)> = serde_json::from_str(&event.headers).unwrap_or_default();
    let mut request = Map::new();
    request.insert("method".into(), json!(event.method));
    request.insert("path".into(), json!(event.path));
    request.insert("query".into(), json!(event.query));
    request.insert("headers".into(), json!(headers.into_iter().collect::<HashMap<_, _>>()));
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
    let mut left = budget;
    match std::str::from_utf8(&event.body) {
        Ok(text) => {
            let kept = fit_json(text, &mut left);
            record["request"]["body"] = json!(kept);
            if kept.len() < text.len() {
                record["request"]["body_truncated"] = json!(true);
            }
        }
        Err(_) => {
            let kept = event.body.len().min(left / 2);
            left -= kept * 2;
            record["request"]["body_hex"] = json!(hex::encode(&event.body[..kept]));
            if kept < event.body.len() {
                record["request"]["body_truncated"] = json!(true);
            }
        }
    }
    if let Some(body) = response {
        let text = String::from_utf8_lossy(body);
        let kept = fit_json(&text, &mut left);
        record["response"] = json!({ "status": status, "body": kept });
        if kept.len() < text.len() {
            record["response"]["body_truncated"] = json!(true);
        }
    }
    record
}

/// The longest start of `text` whose JSON string (escaped as serde_json
/// escapes) takes at most `left` bytes; `left` is lowered by that.
fn fit_json<'a>(text: &'a str, left: &mut usize) -> &'a str {
    let mut end = 0;
    for (at, c) in text.char_indices() {
        let size = match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if c < ' ' => 6,
            c => c.len_utf8(),
        };
        if size > *left {
            break;
        }
        *left -= size;
        end = at + c.len_utf8();
    }
    &text[..end]
}

/// A broker URL's connection and confirming channel, once made.
type Link = Arc<tokio::sync::Mutex<Option<(Connection, Channel)>>>;

/// RabbitMQ publishing for amqp destinations: a connection and confirming
/// channel per broker URL, made when first needed and again after an error.
pub struct Publisher {
    brokers: BrokerAllowList,
    /// Held only to find a URL's link; connecting holds the link's own lock.
    links: std::sync::Mutex<HashMap<String, Link>>,
}

/// How long one publish (connecting included) may take.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(10);

/// Broker URLs (each a connection) kept at most: past it, the links not in
/// use are closed. Tenants choose the URLs (credentials, vhosts), so the
/// server bounds them.
const MAX_LINKS: usize = 64;

impl Publisher {
    pub fn new(brokers: BrokerAllowList) -> Publisher {
        Publisher {
            brokers,
            links: std::sync::Mutex::new(HashMap::new()),
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
            *self.link(url).lock().await = None;
        }
        Err(format!("publishing to queue {queue:?} failed: {last}"))
    }

    /// `url`'s link, made empty when first needed.
    fn link(&self, url: &str) -> Link {
        let mut links = self.links.lock().unwrap_or_else(PoisonError::into_inner);
        if links.len() >= MAX_LINKS && !links.contains_key(url) {
            links.retain(|_, link| Arc::strong_count(link) > 1);
        }
        links.entry(url.to_string()).or_default().clone()
    }

    async fn try_publish(&self, url: &str, queue: &str, body: &[u8]) -> lapin::Result<()> {
        let link = self.link(url);
        let mut held = link.lock().await;
        let channel = match held.as_ref() {
            Some((connection, channel)) if connection.status().connected() && channel.status().connected() => {
                channel.clone()
            }
            _ => {
                let connection = crate::triggers::brokers::connect(url).await?;
                let channel = connection.create_channel().await?;
                channel.confirm_select(ConfirmSelectOptions::default()).await?;
                *held = Some((connection, channel.clone()));
                channel
            }
        };
        drop(held);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_past_the_most_close_those_not_in_use() {
        let publisher = Publisher::new(BrokerAllowList::parse(&[]).unwrap());
        let url = |n: usize| format!("amqp://user{n}:secret@127.0.0.1:5672/%2f");
        let in_use: Vec<Link> = (0..10).map(|n| publisher.link(&url(n))).collect();
        for n in 10..1000 {
            publisher.link(&url(n));
        }
        let links = publisher.links.lock().unwrap();
        assert!(links.len() <= MAX_LINKS, "{} links kept", links.len());
        for (n, link) in in_use.iter().enumerate() {
            assert!(Arc::ptr_eq(&links[&url(n)], link), "link {n}, in use, was closed");
        }
    }

    fn event(body: &[u8]) -> NewEvent {
        NewEvent {
            id: "e1".into(),
            namespace: "ns".into(),
            function: "f".into(),
            request_id: "r1".into(),
            method: "POST".into(),
            path: "/".into(),
            query: String::new(),
            headers: r#"[["content-type","text/plain"]]"#.into(),
            body: bytes::Bytes::copy_from_slice(body),
            created_at: 0,
            source: None,
            parked_until: None,
        }
    }

    /// A body of control characters takes six times its size as JSON: an
    /// event and an answer at the event's bound made an outcome of 3 MiB.
    #[test]
    fn an_outcome_fits_its_budget_request_first() {
        const BUDGET: usize = 256 * 1024;
        let noise = vec![1u8; BUDGET];
        let record = outcome(
            &event(&noise),
            Condition::Success,
            1,
            Some(200),
            None,
            Some(&noise),
            BUDGET,
        );
        let size = serde_json::to_vec(&record).unwrap().len();
        assert!(size <= BUDGET + 1024, "{size} bytes");
        let kept = record["request"]["body"].as_str().unwrap();
        assert!(
            kept.len() > BUDGET / 7 && kept.bytes().all(|b| b == 1),
            "{}",
            kept.len()
        );
        assert_eq!(record["request"]["body_truncated"], true);
        assert_eq!(record["response"]["body"], "", "the request took the budget");
        assert_eq!(record["response"]["body_truncated"], true);

        // Binary bodies go as hex, two characters a byte.
        let record = outcome(
            &event(&[0xff; 1000]),
            Condition::RetriesExhausted,
            3,
            None,
            None,
            None,
            1000,
        );
        assert_eq!(record["request"]["body_hex"].as_str().unwrap().len(), 1000);
        assert_eq!(record["request"]["body_truncated"], true);

        // What fits is sent whole, with nothing marked.
        let record = outcome(
            &event(br#"{"a": "\u00e9"}"#),
            Condition::Success,
            1,
            Some(200),
            None,
            Some("ok\n".as_bytes()),
            BUDGET,
        );
        assert_eq!(record["request"]["body"], r#"{"a": "\u00e9"}"#);
        assert_eq!(record["response"]["body"], "ok\n");
        assert!(
            record["request"].get("body_truncated").is_none() && record["response"].get("body_truncated").is_none()
        );
    }

    #[test]
    fn fitting_counts_what_escaping_adds() {
        for text in [
            "plain",
            "quote \" and \\ back",
            "tab\tnew\nline",
            "\u{1}\u{1f}ctl",
            "é ü 😀",
            "",
        ] {
            let escaped = serde_json::to_string(text).unwrap().len() - 2;
            let mut left = escaped;
            assert_eq!(fit_json(text, &mut left), text, "{text:?}");
            assert_eq!(left, 0, "{text:?}");
            let mut short = escaped.saturating_sub(1);
            let kept = fit_json(text, &mut short);
            assert!(text.is_empty() || kept.len() < text.len(), "{text:?}");
            assert!(serde_json::to_string(kept).unwrap().len() - 2 <= escaped.saturating_sub(1));
        }
    }
}
