//! One invocation record as it waits to be written: the queued form the
//! serving threads push (text inline, id and status as numbers), and the
//! labels and ids made from it. A leaf: the log (`invocations`), the store's
//! chunk codec (`store/chunks`) and the invoker all read it; it reads none
//! of them.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use sless_api::{InvocationRecord, LogLine};
use sless_driver::TriggerKind;

/// A record as it waits to be written. Thousands wait between two writes;
/// were their names and ids strings, each would hold heap blocks of the
/// serving thread that all come free at once after the write, and that
/// thread's next allocations would find them cold in cache (perf: 3x the
/// allocator's time per request with records on). So the text is kept
/// inline, and the record is made on the encoding thread.
pub struct Queued {
    pub namespace: Text,
    pub function: Text,
    pub request_id: Text,
    /// The id's parts: start time in microseconds and a random number.
    pub id: (u64, u32),
    pub started_at: DateTime<Utc>,
    pub version: u64,
    /// The alias the call was addressed to; rare, so on the heap.
    pub alias: Option<Box<str>>,
    pub kind: TriggerKind,
    /// The HTTP status the call answered with.
    pub status: u16,
    pub duration_ms: f64,
    pub error: Option<String>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub cold_start: bool,
    pub logs: Vec<LogLine>,
    pub logs_truncated: bool,
}

impl Queued {
    /// The record's id: start time and random part in hex, so ids sort by start.
    pub fn id(&self) -> String {
        record_id(self.id)
    }

    /// The id written into `buf`, without an allocation.
    pub fn id_text<'b>(&self, buf: &'b mut [u8; 24]) -> &'b str {
        let (micros, random) = self.id;
        let (time, rest) = buf.split_at_mut(16);
        write_hex(micros, time);
        write_hex(u64::from(random), rest);
        std::str::from_utf8(buf).expect("hex digits")
    }

    /// The record, for followers and tests (the stored form is written
    /// straight from the queued one: [`crate::store::chunks::chunks_of`]).
    pub fn to_record(&self) -> InvocationRecord {
        InvocationRecord {
            id: self.id(),
            namespace: self.namespace.as_str().to_string(),
            function: self.function.as_str().to_string(),
            version: self.version,
            alias: self.alias.as_deref().map(str::to_string),
            trigger: self.kind.as_str().to_string(),
            request_id: self.request_id.as_str().to_string(),
            started_at: self.started_at,
            duration_ms: self.duration_ms,
            status: status_label(self.kind, self.status, &mut [0; 3]).into_owned(),
            error: self.error.clone(),
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
            cold_start: self.cold_start,
            logs: self.logs.clone(),
            logs_truncated: self.logs_truncated,
        }
    }
}

/// The id of the record with `(start microseconds, random part)`.
pub fn record_id((micros, random): (u64, u32)) -> String {
    hex_id(&[(micros, 16), (u64::from(random), 8)])
}

/// A page's `before` cursor: None when absent or empty, else it must be an
/// id as [`record_id`] makes them (the `next_before` of the page before,
/// [`sless_api::is_record_id`]); anything else would be compared as text
/// and answer a page it does not mean.
pub fn page_cursor(before: Option<String>) -> crate::error::Result<Option<String>> {
    match before {
        None => Ok(None),
        Some(before) if before.is_empty() => Ok(None),
        Some(before) if sless_api::is_record_id(&before) => Ok(Some(before)),
        Some(before) => Err(crate::error::Error::invalid(
            "before",
            format!(
                "before must be an id of 24 hex digits, as next_before gives, got {:?}",
                sless_api::text::clip(before, 64)
            ),
        )),
    }
}

/// The status of a call as records and metrics show it: the HTTP status
/// for gateway calls and asynchronous attempts, ok/error for the others; written into `digits` when
/// it is three of them (no allocation on the request path).
pub fn status_label(kind: TriggerKind, status: u16, digits: &mut [u8; 3]) -> Cow<'_, str> {
    match kind {
        TriggerKind::Http | TriggerKind::Async if (100..1000).contains(&status) => {
            *digits = [0, 1, 2].map(|i| b'0' + (status / 10u16.pow(2 - i) % 10) as u8);
            Cow::Borrowed(std::str::from_utf8(digits).expect("ASCII digits"))
        }
        TriggerKind::Http | TriggerKind::Async => Cow::Owned(status.to_string()),
        _ if status < 400 => Cow::Borrowed("ok"),
        _ => Cow::Borrowed("error"),
    }
}

/// Text kept inside its owner up to [`Text::INLINE`] bytes, which names
/// (63 at most) and request ids (64) always fit; longer text on the heap.
pub enum Text {
    Inline(u8, [u8; Text::INLINE]),
    Heap(String),
}

impl Text {
    pub const INLINE: usize = 64;

    pub fn new(text: &str) -> Text {
        if text.len() <= Self::INLINE {
            let mut bytes = [0; Self::INLINE];
            bytes[..text.len()].copy_from_slice(text.as_bytes());
            Text::Inline(text.len() as u8, bytes)
        } else {
            Text::Heap(text.to_string())
        }
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).expect("copied from a str")
    }

    /// The text's bytes, for comparing without checking them again.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Text::Inline(len, bytes) => &bytes[..usize::from(*len)],
            Text::Heap(text) => text.as_bytes(),
        }
    }
}

/// Values as fixed-width lowercase hex, `(value, digits)` each, in one
/// allocation of the final size (`format!` would grow the string as it goes).
pub fn hex_id(parts: &[(u64, usize)]) -> String {
    let mut id = vec![0; parts.iter().map(|(_, digits)| digits).sum()];
    let mut rest = &mut id[..];
    for &(value, digits) in parts {
        let (head, tail) = rest.split_at_mut(digits);
        write_hex(value, head);
        rest = tail;
    }
    String::from_utf8(id).expect("hex digits")
}

/// `value` as `out.len()` lowercase hex digits (its low bits, zero-padded).
pub fn write_hex(value: u64, out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let len = out.len();
    for (i, digit) in out.iter_mut().enumerate() {
        let shift = 4 * (len - 1 - i);
        *digit = DIGITS[(value.checked_shr(shift as u32).unwrap_or(0) & 0xf) as usize];
    }
}

/// A queued record for tests.
#[cfg(test)]
pub fn sample(random: u32, status: u16) -> Queued {
    tests::queued(random, status)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn queued(random: u32, status: u16) -> Queued {
        Queued {
            namespace: Text::new("demo"),
            function: Text::new("hello"),
            request_id: Text::new("req-1"),
            id: (0x0123_4567_89ab_cdef, random),
            started_at: crate::store::now(),
            version: 3,
            alias: None,
            kind: TriggerKind::Amqp,
            status,
            duration_ms: 1.5,
            error: Some("crashed".into()),
            bytes_in: 1,
            bytes_out: 2,
            cold_start: true,
            logs: vec![LogLine {
                stream: "stderr".into(),
                text: "boom\n".into(),
            }],
            logs_truncated: true,
        }
    }

    #[test]
    fn text_keeps_short_text_inline_and_long_text_whole() {
        for text in ["", "a", "demo-namespace", &"r".repeat(Text::INLINE)] {
            let kept = Text::new(text);
            assert!(matches!(kept, Text::Inline(..)), "{text:?} fits inline");
            assert_eq!(kept.as_str(), text);
        }
        let long = "é".repeat(Text::INLINE);
        let kept = Text::new(&long);
        assert!(matches!(kept, Text::Heap(_)));
        assert_eq!(kept.as_str(), long);
    }

    #[test]
    fn status_labels_are_the_http_status_or_ok_and_error() {
        let label = |kind, status| status_label(kind, status, &mut [0; 3]).into_owned();
        assert_eq!(label(TriggerKind::Http, 200), "200");
        assert_eq!(label(TriggerKind::Http, 504), "504");
        assert_eq!(label(TriggerKind::Http, 42), "42");
        assert_eq!(label(TriggerKind::Http, 1000), "1000");
        assert_eq!(label(TriggerKind::Async, 500), "500");
        assert_eq!(label(TriggerKind::Cron, 200), "ok");
        assert_eq!(label(TriggerKind::Job, 500), "error");
    }

    #[test]
    fn a_queued_record_becomes_the_record_with_its_id() {
        let queued = queued(0xfe, 502);
        let id = queued.id();
        assert_eq!(id, "0123456789abcdef000000fe");
        assert_eq!(queued.id_text(&mut [0; 24]), id);
        let record = queued.to_record();
        assert_eq!(
            (record.id.as_str(), record.namespace.as_str(), record.function.as_str()),
            (id.as_str(), "demo", "hello")
        );
        assert_eq!((record.trigger.as_str(), record.status.as_str()), ("amqp", "error"));
        assert_eq!(
            (record.request_id.as_str(), record.error.as_deref()),
            ("req-1", Some("crashed"))
        );
        assert_eq!(
            (record.logs.len(), record.logs_truncated, record.cold_start),
            (1, true, true)
        );
    }

    #[test]
    fn hex_id_is_fixed_width_lowercase_hex() {
        let (a, b) = (0x0123_4567_89ab_cdefu64, 0xfeu64);
        assert_eq!(hex_id(&[(a, 16), (b, 8)]), format!("{a:016x}{b:08x}"));
        assert_eq!(hex_id(&[(u64::MAX, 16)]), "ffffffffffffffff");
        assert_eq!(hex_id(&[(0, 4)]), "0000");
    }

    #[test]
    fn the_ids_records_get_are_what_a_cursor_takes() {
        for id in [(0, 0), (u64::MAX, u32::MAX), (1_765_000_000_000_000, 0xdead_beef)] {
            let id = record_id(id);
            assert!(sless_api::is_record_id(&id), "{id}");
            assert_eq!(page_cursor(Some(id.clone())).unwrap(), Some(id));
        }
    }
}
