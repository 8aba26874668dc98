//! `/v1/namespaces/{ns}/functions/{name}/invocations` and `/logs`: what a
//! function did, paged or followed as it happens. What handlers printed is
//! the tenant's: an answer holds at most [`MAX_ANSWER_BYTES`] of it, and a
//! namespace reads at most [`MAX_RECORD_READS`] answers' worth at once.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap};
use axum::response::Response;
use serde::Deserialize;
use sless_api::{validate_name, InvocationPage, InvocationRecord};
use tokio::sync::broadcast::error::RecvError;

use crate::bounds::MAX_ANSWER_BYTES;
use crate::error::{Error, Result};
use crate::state::{AppState, Slot};
use crate::store::Kind;

/// How often a followed log stream looks whether its token and its
/// function still exist.
const TOKEN_RECHECK: std::time::Duration = std::time::Duration::from_secs(2);

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// Records per page (1-1000, default 50).
    limit: Option<i64>,
    /// An invocation id (a page's `next_before`): return older ones.
    before: Option<String>,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// Keep the response open and stream new lines until the client leaves.
    #[serde(default)]
    follow: bool,
    /// Lines of history first (default 100, at most 10 000).
    tail: Option<usize>,
    /// An invocation id (the `sless-next-before` header of an answer):
    /// history from calls older than it. Not with `follow`.
    before: Option<String>,
}

async fn check_function(state: &AppState, ns: &str, name: &str) -> Result<()> {
    validate_name("namespace", ns)?;
    validate_name("function", name)?;
    match state.store.get(Kind::Function, ns, name).await? {
        Some(_) => Ok(()),
        None => Err(Error::NotFound(format!(
            "function {name:?} not found in namespace {ns:?}"
        ))),
    }
}

/// A function's invocations, newest first.
#[utoipa::path(get, path = "/v1/namespaces/{ns}/functions/{name}/invocations", operation_id = "list_invocations", tag = "functions",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name"), PageQuery),
    responses((status = 200, body = InvocationPage), (status = 404, body = sless_api::ErrorBody),
        (status = 429, body = sless_api::ErrorBody, description = READS_REFUSED)),
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<Arc<AppState>>,
    Path((ns, name)): Path<(String, String)>,
    query: std::result::Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response> {
    let Query(query) = query.map_err(|e| Error::BadRequest(format!("invalid query: {}", e.body_text())))?;
    check_function(&state, &ns, &name).await?;
    let limit = query.limit.unwrap_or(50);
    if !(1..=1000).contains(&limit) {
        return Err(Error::BadRequest(format!(
            "limit must be between 1 and 1000, got {limit}"
        )));
    }
    let before = crate::record::page_cursor(query.before)?;
    let read = read_slot(&state, &ns)?;
    let page = state
        .store
        .list_invocations(&ns, &name, before.as_deref(), limit, MAX_ANSWER_BYTES)
        .await?;
    // Past `limit` or the bytes, the page ends where the next one starts.
    let next_before = page.next_before();
    held_json(
        read,
        &InvocationPage {
            items: page.items,
            next_before,
        },
    )
}

/// `answer` as a JSON response that keeps `read` until it is sent.
pub(crate) fn held_json(read: Slot, answer: &impl serde::Serialize) -> Result<Response> {
    let json = serde_json::to_vec(answer).map_err(Error::internal)?;
    let body = futures::stream::iter([Ok::<_, Infallible>(Bytes::from(json))]);
    Ok(Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(holding(read, body)))
        .expect("static headers"))
}

/// Why a read of records gets a 429.
pub(crate) const READS_REFUSED: &str =
    "The namespace has as many reads of invocation records under way as it may (2); Retry-After says when to try again";

/// One of `namespace`'s reads of stored records, or a 429 when as many as
/// it may are under way.
pub(crate) fn read_slot(state: &AppState, namespace: &str) -> Result<Slot> {
    let most = state.record_reads.most();
    state
        .record_reads
        .take(namespace)
        .ok_or_else(|| Error::TooManyRequests {
            message: format!("namespace {namespace} has {most} reads of invocation records under way, the most it may"),
            retry_after: 1,
        })
}

/// `stream`, keeping `slot` until it is sent or dropped: what an answer
/// holds in memory counts as long as it is held.
fn holding<S: futures::Stream>(slot: Slot, stream: S) -> impl futures::Stream<Item = S::Item> {
    use futures::StreamExt;
    stream.map(move |item| {
        let _held = &slot;
        item
    })
}

/// The lines a function's handler printed: `{time} {request_id} {stream} {text}`
/// as text, or Server-Sent Events (one JSON object per line) when the client
/// accepts `text/event-stream`. `follow=true` streams new lines as they happen.
#[utoipa::path(get, path = "/v1/namespaces/{ns}/functions/{name}/logs", operation_id = "get_logs", tag = "functions",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name"), LogsQuery),
    responses((status = 200, description = "Log lines", content_type = "text/plain",
            headers(("sless-next-before" = String, description = "When older lines are left: the id of the oldest call all of whose lines were sent; `before` it continues"))), (status = 404, body = sless_api::ErrorBody),
        (status = 429, body = sless_api::ErrorBody, description = "As many log streams (follow=true) or reads of records as the namespace may have are open")),
    security(("bearer" = [])))]
pub async fn logs(
    State(state): State<Arc<AppState>>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    axum::Extension(principal): axum::Extension<crate::auth::Principal>,
    query: std::result::Result<Query<LogsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response> {
    let Query(query) = query.map_err(|e| Error::BadRequest(format!("invalid query: {}", e.body_text())))?;
    let tail = query.tail.unwrap_or(100);
    if tail > MAX_TAIL {
        return Err(Error::BadRequest(format!(
            "tail must be at most {MAX_TAIL}, got {tail}"
        )));
    }
    let before = crate::record::page_cursor(query.before)?;
    if query.follow && before.is_some() {
        return Err(Error::invalid(
            "before",
            "before reads older history and cannot be used with follow=true".to_string(),
        ));
    }
    check_function(&state, &ns, &name).await?;
    let sse = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    let slot = match query.follow {
        false => None,
        true => Some(state.follows.take(&ns).ok_or_else(|| Error::TooManyRequests {
            message: format!(
                "namespace {ns} has {} log streams open, the most it may; close one first",
                state.follows.most()
            ),
            retry_after: 5,
        })?),
    };
    // Subscribe before reading history so nothing falls in between.
    let live = query.follow.then(|| state.invoker.log.subscribe(&ns, &name));
    let read = read_slot(&state, &ns)?;
    let History {
        lines,
        seen,
        next_before,
    } = history(&state, &ns, &name, before, tail, sse).await?;
    let head = holding(
        read,
        futures::stream::iter(lines.into_iter().map(|l| Ok::<_, Infallible>(Bytes::from(l)))),
    );
    let content_type = if sse {
        "text/event-stream"
    } else {
        "text/plain; charset=utf-8"
    };
    let body = match live {
        None => Body::from_stream(head),
        Some(rx) => {
            // The token and the function are looked up again every few
            // seconds: a revoked token ends the streams it opened, a
            // deleted function the streams of its lines.
            let store = state.store.clone();
            let function = Arc::new((ns.clone(), name.clone()));
            let principal = Arc::new(principal);
            let recheck = tokio::time::interval_at(tokio::time::Instant::now() + TOKEN_RECHECK, TOKEN_RECHECK);
            // The namespace's slot goes with the stream.
            let follow = futures::stream::unfold(
                (rx, seen, recheck, slot),
                move |(mut rx, seen, mut recheck, slot)| {
                    let (store, principal, function) = (store.clone(), principal.clone(), function.clone());
                    async move {
                        loop {
                            let received = tokio::select! {
                                received = rx.recv() => received,
                                _ = recheck.tick() => {
                                    if !principal.still_valid(&*store).await {
                                        tracing::info!(token = %principal.name, "token revoked: closing its log stream");
                                        return None;
                                    }
                                    let (ns, name) = &*function;
                                    if let Ok(None) = store.get(Kind::Function, ns, name).await {
                                        return None;
                                    }
                                    continue;
                                }
                            };
                            match received {
                                Ok(r) if !seen.contains(&r.id) => {
                                    let chunk = Bytes::from(render(&r, sse).concat());
                                    return Some((Ok::<_, Infallible>(chunk), (rx, seen, recheck, slot)));
                                }
                                Ok(_) | Err(RecvError::Lagged(_)) => continue,
                                Err(RecvError::Closed) => return None,
                            }
                        }
                    }
                },
            );
            use futures::StreamExt;
            Body::from_stream(head.chain(follow))
        }
    };
    let mut response = Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-cache");
    if let Some(next_before) = next_before {
        // A record id: 24 hex digits, a valid header value.
        response = response.header(sless_api::LOGS_NEXT_BEFORE, next_before);
    }
    Ok(response.body(body).expect("static headers and a record id"))
}

/// A function's log history as `logs` sends it.
struct History {
    /// Rendered lines, oldest first.
    lines: Vec<String>,
    /// The ids of the records read.
    seen: HashSet<String>,
    /// Where older lines begin ([`sless_api::LOGS_NEXT_BEFORE`]), when some are left.
    next_before: Option<String>,
}

/// The last `tail` lines of a function's newest [`HISTORY_RECORDS`]
/// records older than `before`, in order, as many as fit in
/// [`MAX_ANSWER_BYTES`]; the ids of the records read; and where older
/// lines begin when some are left. Read a page of records at a time, each
/// page bounded in bytes too.
async fn history(
    state: &AppState,
    ns: &str,
    name: &str,
    mut before: Option<String>,
    tail: usize,
    sse: bool,
) -> Result<History> {
    let mut lines = Tail::new(tail);
    let mut seen = HashSet::new();
    // Whether records older than the last one read are left.
    let mut older_left = false;
    while seen.len() < HISTORY_RECORDS && !lines.full() {
        let left = (HISTORY_RECORDS - seen.len()) as i64;
        let page = state
            .store
            .list_invocations(ns, name, before.as_deref(), left, MAX_ANSWER_BYTES)
            .await?;
        let mut added = 0;
        for record in &page.items {
            if lines.full() {
                break;
            }
            lines.add(record, sse);
            added += 1;
        }
        seen.extend(page.items[..added].iter().map(|r| r.id.clone()));
        before = page.items[..added].last().map(|r| r.id.clone());
        older_left = page.more || added < page.items.len();
        if !page.more {
            break;
        }
    }
    let next_before = if lines.cut || lines.partly_sent.is_some() {
        // Stopped inside the records read: older lines begin after the
        // oldest record whose lines were all sent. When none was, the
        // number of lines asked for ended inside the newest (a larger
        // `tail` shows more of it), or the bytes did, which only a record
        // of many thousand short lines fills: the rest of its lines are
        // past what `logs` sends (its record holds them all).
        let cut_first = lines.partly_sent.clone().filter(|_| lines.cut);
        lines.oldest_whole.clone().or(cut_first)
    } else if older_left {
        // The lines of every record read were all sent.
        before
    } else {
        None
    };
    Ok(History {
        lines: lines.into_lines(),
        seen,
        next_before,
    })
}

/// Rendered lines, gathered newest first, up to a number of them and
/// [`MAX_ANSWER_BYTES`]. Past the bytes, a record's lines are all left for
/// the next answer, unless it is the first (so that an answer moves on);
/// the number of lines asked for may end inside a record.
struct Tail {
    newest_first: Vec<String>,
    bytes: usize,
    most: usize,
    /// A line did not fit: the ones before it are all that do.
    cut: bool,
    /// The id of the oldest record whose lines were all added.
    oldest_whole: Option<String>,
    /// The id of the record added last when it lost some of its lines.
    partly_sent: Option<String>,
}

impl Tail {
    fn new(most: usize) -> Tail {
        Tail {
            newest_first: Vec::new(),
            bytes: 0,
            most,
            cut: false,
            oldest_whole: None,
            partly_sent: None,
        }
    }

    fn full(&self) -> bool {
        self.cut || self.newest_first.len() >= self.most
    }

    /// Adds `record`'s lines, from its last, while they fit.
    fn add(&mut self, record: &InvocationRecord, sse: bool) {
        let time = started(record);
        let (lines_before, bytes_before) = (self.newest_first.len(), self.bytes);
        for (stream, line) in lines_newest_first(record) {
            if self.full() {
                self.partly_sent = Some(record.id.clone());
                return;
            }
            let line = render_line(record, &time, stream, line, sse);
            if self.bytes + line.len() > MAX_ANSWER_BYTES {
                self.cut = true;
                if self.oldest_whole.is_some() {
                    // Left whole for the answer that continues from the
                    // oldest whole record.
                    self.newest_first.truncate(lines_before);
                    self.bytes = bytes_before;
                    return;
                }
                self.partly_sent = Some(record.id.clone());
                return;
            }
            self.bytes += line.len();
            self.newest_first.push(line);
        }
        self.oldest_whole = Some(record.id.clone());
    }

    /// The lines, oldest first.
    fn into_lines(mut self) -> Vec<String> {
        self.newest_first.reverse();
        self.newest_first
    }
}

/// One record's output as text lines or SSE events.
fn render(record: &InvocationRecord, sse: bool) -> Vec<String> {
    let time = started(record);
    let mut out: Vec<String> = lines_newest_first(record)
        .map(|(stream, line)| render_line(record, &time, stream, line, sse))
        .collect();
    out.reverse();
    out
}

fn started(record: &InvocationRecord) -> String {
    record.started_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// `record`'s printed lines with their streams, from the last.
fn lines_newest_first(record: &InvocationRecord) -> impl Iterator<Item = (&str, &str)> {
    record
        .logs
        .iter()
        .rev()
        .flat_map(|chunk| chunk.text.lines().rev().map(move |line| (chunk.stream.as_str(), line)))
}

fn render_line(record: &InvocationRecord, time: &str, stream: &str, line: &str, sse: bool) -> String {
    if sse {
        let event = serde_json::json!({
            "time": time, "request_id": record.request_id, "invocation": record.id,
            "stream": stream, "text": line,
        });
        format!("data: {event}\n\n")
    } else {
        format!("{time} {} {stream} {line}\n", record.request_id)
    }
}

/// The most records whose lines `logs` looks through for its history.
const HISTORY_RECORDS: usize = 200;

/// The most lines of history `logs` sends (`tail`).
const MAX_TAIL: usize = 10_000;

/// The most log streams (`follow=true`) one namespace holds open at once:
/// each holds a connection, and the server takes a few thousand.
pub const MAX_FOLLOWS: usize = 32;

/// The most reads of stored records (a page of invocations, a log's
/// history, stats) one namespace has under way at once, each counted until
/// its answer is sent: each holds up to twice [`MAX_ANSWER_BYTES`] and, while
/// it reads, one of the store's few connections.
pub const MAX_RECORD_READS: usize = 2;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Slots;
    use futures::StreamExt;

    /// A read's place is the namespace's until its answer is sent or
    /// dropped, not only while it reads the store.
    #[tokio::test]
    async fn an_answer_keeps_its_read_until_it_is_gone() {
        let reads = Arc::new(Slots::new(MAX_RECORD_READS));
        let held: Vec<Slot> = (1..MAX_RECORD_READS).map(|_| reads.take("ns").unwrap()).collect();
        let mut answer = Box::pin(holding(reads.take("ns").unwrap(), futures::stream::iter([1, 2])));
        assert!(reads.take("ns").is_none(), "all of the namespace's reads are under way");
        assert!(reads.take("other").is_some(), "another namespace's are its own");
        assert_eq!(answer.next().await, Some(1));
        assert!(reads.take("ns").is_none(), "half sent");
        drop(answer);
        assert!(reads.take("ns").is_some());
        drop(held);
    }

    fn record(id: &str, lines: &[&str]) -> InvocationRecord {
        InvocationRecord {
            id: id.to_string(),
            namespace: "ns".into(),
            function: "f".into(),
            version: 1,
            alias: None,
            trigger: "http".into(),
            request_id: format!("req-{id}"),
            started_at: chrono::Utc::now(),
            duration_ms: 1.0,
            status: "200".into(),
            error: None,
            bytes_in: 0,
            bytes_out: 0,
            cold_start: false,
            logs: lines
                .iter()
                .map(|text| sless_api::LogLine {
                    stream: "stdout".into(),
                    text: format!("{text}\n"),
                })
                .collect(),
            logs_truncated: false,
        }
    }

    /// Where the lines stop tells where the next answer begins: after the
    /// oldest record whose lines were all sent.
    #[test]
    fn a_tail_knows_the_oldest_record_it_holds_whole() {
        // Newest first, as records are read.
        let records = [
            record("c", &["c1", "c2"]),
            record("b", &["b1", "b2"]),
            record("a", &["a1"]),
        ];
        let mut tail = Tail::new(3);
        for r in &records {
            if !tail.full() {
                tail.add(r, false);
            }
        }
        assert_eq!(
            (tail.oldest_whole.as_deref(), tail.partly_sent.as_deref()),
            (Some("c"), Some("b"))
        );
        let lines = tail.into_lines();
        assert!(
            lines[0].ends_with(" stdout b2\n") && lines[2].ends_with(" stdout c2\n"),
            "{lines:?}"
        );

        // Past the bytes, a record's lines are left whole for the next answer.
        let big = "x".repeat(MAX_ANSWER_BYTES / 2);
        let mut tail = Tail::new(MAX_TAIL);
        tail.add(&record("c", &[&big]), false);
        tail.add(&record("b", &["b1", &big]), false);
        assert!(tail.full());
        assert_eq!(
            (tail.oldest_whole.as_deref(), tail.partly_sent.as_deref()),
            (Some("c"), None)
        );
        assert_eq!(tail.into_lines().len(), 1);

        // Unless it is the first: what fits of it is sent.
        let mut tail = Tail::new(MAX_TAIL);
        tail.add(&record("b", &["b1", &big, &big]), false);
        assert_eq!(
            (tail.oldest_whole.as_deref(), tail.partly_sent.as_deref()),
            (None, Some("b"))
        );
        assert_eq!(tail.into_lines().len(), 1);
    }
}
