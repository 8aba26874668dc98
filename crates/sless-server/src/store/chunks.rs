//! Invocation records are stored in chunks, as log stores do: one row per
//! function per written batch, holding up to [`CHUNK_RECORDS`] records as a
//! JSON array in id (start time) order. A busy gateway then pays one row
//! insert per chunk instead of one per call, so recording stays cheap next
//! to serving. Both stores share this part; only the SQL differs.
//!
//! Inside a chunk a record is a JSON array of its fields in a fixed order
//! ([`Row`]), without the namespace and function that the row holds: about
//! half the bytes of the API's JSON object, and that much cheaper to write.
//!
//! A record's id starts with its start time, and records are written when
//! they finish, so a long call can land in a chunk beside much newer ones:
//! chunks' id ranges may overlap, and reading merges them.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sless_api::{InvocationRecord, LogLine};

use crate::error::{Error, Result};
use crate::record::{status_label, Queued};

/// A record as a chunk stores it: id, version, trigger, request id, start
/// (microseconds since the epoch), duration in ms, status, error, bytes in,
/// bytes out, cold start, logs as `[stream, text]` pairs, logs truncated,
/// alias (null for calls not addressed to one; absent in older rows).
#[derive(Serialize)]
struct Row<'a>(
    &'a str,
    u64,
    &'a str,
    &'a str,
    i64,
    f64,
    &'a str,
    &'a Option<String>,
    u64,
    u64,
    bool,
    Logs<'a>,
    bool,
    Option<&'a str>,
);

struct Logs<'a>(&'a [LogLine]);

impl Serialize for Logs<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|l| (&l.stream, &l.text)))
    }
}

/// Appends the row of a queued record to `out`, made straight from it:
/// no record of strings in between.
fn write_row(out: &mut Vec<u8>, r: &Queued) {
    let (mut id, mut digits) = ([0; 24], [0; 3]);
    let row = Row(
        r.id_text(&mut id),
        r.version,
        r.kind.as_str(),
        r.request_id.as_str(),
        r.started_at.timestamp_micros(),
        r.duration_ms,
        &status_label(r.kind, r.status, &mut digits),
        &r.error,
        r.bytes_in,
        r.bytes_out,
        r.cold_start,
        Logs(&r.logs),
        r.logs_truncated,
        r.alias.as_deref(),
    );
    serde_json::to_writer(out, &row).expect("records serialize");
}

/// A stored row as read back; trimming a chunk writes the rows it keeps
/// back as they were (moved-over ones keep their older forms).
#[derive(Deserialize, Serialize)]
struct OwnedRow(
    String,
    u64,
    String,
    String,
    Started,
    f64,
    String,
    Option<String>,
    u64,
    u64,
    bool,
    Vec<StoredLog>,
    bool,
    #[serde(default)] Option<String>,
);

/// Chunks written by this code hold microseconds; records moved over from
/// the one-row-per-record schema hold the RFC 3339 text they had.
#[derive(Deserialize, Serialize)]
#[serde(untagged)]
enum Started {
    Micros(i64),
    Text(DateTime<Utc>),
}

/// `[stream, text]`, or the `{stream, text}` object of moved-over records.
#[derive(Deserialize, Serialize)]
#[serde(untagged)]
enum StoredLog {
    Pair(String, String),
    Line(LogLine),
}

impl OwnedRow {
    fn into_record(self, namespace: &str, function: &str) -> Result<InvocationRecord> {
        let started_at = match self.4 {
            Started::Text(t) => t,
            Started::Micros(us) => DateTime::from_timestamp_micros(us)
                .ok_or_else(|| Error::internal(format!("bad start time {us} in an invocation chunk")))?,
        };
        Ok(InvocationRecord {
            id: self.0,
            namespace: namespace.to_string(),
            function: function.to_string(),
            version: self.1,
            alias: self.13,
            trigger: self.2,
            request_id: self.3,
            started_at,
            duration_ms: self.5,
            status: self.6,
            error: self.7,
            bytes_in: self.8,
            bytes_out: self.9,
            cold_start: self.10,
            logs: self
                .11
                .into_iter()
                .map(|l| match l {
                    StoredLog::Pair(stream, text) => LogLine { stream, text },
                    StoredLog::Line(line) => line,
                })
                .collect(),
            logs_truncated: self.12,
        })
    }
}

/// Marks chunk data compressed with LZ4 (size-prefixed block); data that
/// starts with `[` is the plain JSON of chunks moved over from rows.
const LZ4: u8 = 1;

/// Records of one function repeat most of their bytes, so a chunk shrinks
/// several times over: fewer pages for the database to log and write back.
/// `scratch` is the compressor's output buffer, reused from chunk to chunk.
fn compress(json: &[u8], scratch: &mut Vec<u8>) -> Vec<u8> {
    let most = lz4_flex::block::get_maximum_output_size(json.len());
    if scratch.len() < most {
        scratch.resize(most, 0);
    }
    let size = lz4_flex::block::compress_into(json, scratch).expect("the output buffer holds the worst case");
    // The layout of lz4_flex's size-prepended blocks: the input's length, then the block.
    let mut data = Vec::with_capacity(5 + size);
    data.push(LZ4);
    data.extend_from_slice(&(json.len() as u32).to_le_bytes());
    data.extend_from_slice(&scratch[..size]);
    data
}

/// The JSON text of a chunk's data.
fn json_of(data: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>> {
    match data.split_first() {
        Some((&LZ4, packed)) => lz4_flex::decompress_size_prepended(packed)
            .map(std::borrow::Cow::Owned)
            .map_err(|e| Error::internal(format!("bad invocation chunk in store: {e}"))),
        Some((b'[', _)) => Ok(std::borrow::Cow::Borrowed(data)),
        _ => Err(Error::internal("bad invocation chunk in store: unknown format")),
    }
}

/// Records per chunk at most.
pub const CHUNK_RECORDS: usize = 256;
/// Serialized bytes per chunk at most (a single record may exceed it).
pub const CHUNK_BYTES: usize = 1 << 20;

/// One row of `invocation_chunks`.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    pub namespace: String,
    pub function: String,
    pub first_id: String,
    pub last_id: String,
    pub records: i64,
    /// The records' JSON array, compressed (see [`compress`]).
    pub data: Vec<u8>,
}

/// Cuts a batch into chunks: grouped by function, each in id order.
pub fn chunks_of(records: &[Queued]) -> Vec<Chunk> {
    // Sorted by small keys (function's rank, id, position), not by the
    // records themselves: comparing those reads all over thousands of them.
    // A batch mostly holds few functions, met in runs.
    let mut numbers: HashMap<(&[u8], &[u8]), u32> = HashMap::new();
    let mut last = None;
    let mut keys: Vec<(u32, (u64, u32), u32)> = Vec::with_capacity(records.len());
    for (at, r) in records.iter().enumerate() {
        let name = (r.namespace.as_bytes(), r.function.as_bytes());
        let number = match last {
            Some((seen, number)) if seen == name => number,
            _ => {
                let next = numbers.len() as u32;
                *numbers.entry(name).or_insert(next)
            }
        };
        last = Some((name, number));
        keys.push((number, r.id, at as u32));
    }
    // Functions in name order.
    let mut names: Vec<_> = numbers.into_iter().collect();
    names.sort_unstable();
    let mut rank = vec![0; names.len()];
    for (position, (_, number)) in names.iter().enumerate() {
        rank[*number as usize] = position as u32;
    }
    for key in &mut keys {
        key.0 = rank[key.0 as usize];
    }
    keys.sort_unstable();
    let order: Vec<&Queued> = keys.iter().map(|&(_, _, at)| &records[at as usize]).collect();
    let (mut json, mut scratch) = (Vec::new(), Vec::new());
    let mut chunks = Vec::new();
    let mut rest = &order[..];
    while let Some(first) = rest.first() {
        let (namespace, function) = (first.namespace.as_bytes(), first.function.as_bytes());
        let same = rest
            .iter()
            .take_while(|r| r.namespace.as_bytes() == namespace && r.function.as_bytes() == function)
            .count();
        let (group, tail) = rest.split_at(same);
        rest = tail;
        let mut start = 0;
        while start < group.len() {
            json.clear();
            json.push(b'[');
            let mut end = start;
            while end < group.len() && end - start < CHUNK_RECORDS && (end == start || json.len() < CHUNK_BYTES) {
                if end > start {
                    json.push(b',');
                }
                write_row(&mut json, group[end]);
                end += 1;
            }
            json.push(b']');
            chunks.push(Chunk {
                namespace: first.namespace.as_str().to_string(),
                function: first.function.as_str().to_string(),
                first_id: group[start].id(),
                last_id: group[end - 1].id(),
                records: (end - start) as i64,
                data: compress(&json, &mut scratch),
            });
            start = end;
        }
    }
    chunks
}

/// The records of a chunk of `function` in `namespace`, in id order.
pub fn decode(namespace: &str, function: &str, data: &[u8]) -> Result<Vec<InvocationRecord>> {
    rows(data)?
        .into_iter()
        .map(|r| r.into_record(namespace, function))
        .collect()
}

fn rows(data: &[u8]) -> Result<Vec<OwnedRow>> {
    serde_json::from_slice(&json_of(data)?).map_err(|e| Error::internal(format!("bad invocation chunk in store: {e}")))
}

/// A chunk's records without those whose id `drop` selects, as
/// `(first_id, count, data)` to store again; `None` when none are left.
pub fn without(data: &[u8], drop: impl Fn(&str) -> bool) -> Result<Option<(String, i64, Vec<u8>)>> {
    let kept: Vec<OwnedRow> = rows(data)?.into_iter().filter(|r| !drop(&r.0)).collect();
    let Some(first) = kept.first() else {
        return Ok(None);
    };
    let json = serde_json::to_vec(&kept).expect("rows serialize");
    Ok(Some((
        first.0.clone(),
        kept.len() as i64,
        compress(&json, &mut Vec::new()),
    )))
}

/// The newest `limit` records of one function older than `before`,
/// collected from its chunks fed newest `last_id` first.
pub struct Newest<'a> {
    namespace: &'a str,
    function: &'a str,
    limit: usize,
    before: Option<&'a str>,
    items: Vec<InvocationRecord>,
}

impl<'a> Newest<'a> {
    pub fn new(namespace: &'a str, function: &'a str, limit: usize, before: Option<&'a str>) -> Self {
        Newest {
            namespace,
            function,
            limit,
            before,
            items: Vec::new(),
        }
    }

    /// True when a chunk whose newest record is `last_id` (and every chunk
    /// after it) can no longer change the answer.
    pub fn complete(&self, last_id: &str) -> bool {
        self.limit == 0 || (self.items.len() == self.limit && self.items[self.limit - 1].id.as_str() > last_id)
    }

    pub fn add(&mut self, data: &[u8]) -> Result<()> {
        let before = self.before;
        self.items.extend(
            decode(self.namespace, self.function, data)?
                .into_iter()
                .filter(|r| before.is_none_or(|b| r.id.as_str() < b)),
        );
        self.items.sort_unstable_by(|a, b| b.id.cmp(&a.id));
        self.items.truncate(self.limit);
        Ok(())
    }

    pub fn into_items(self) -> Vec<InvocationRecord> {
        self.items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queued record whose id is `format!("{id:024x}")`.
    fn record(function: &str, id: u32) -> Queued {
        use crate::record::Text;
        Queued {
            namespace: Text::new("ns"),
            function: Text::new(function),
            request_id: Text::new("r"),
            id: (0, id),
            started_at: chrono::Utc::now(),
            version: 1,
            alias: None,
            kind: sless_driver::TriggerKind::Http,
            status: 200,
            duration_ms: 1.0,
            error: None,
            bytes_in: 0,
            bytes_out: 0,
            cold_start: false,
            logs: vec![sless_api::LogLine {
                stream: "stdout".into(),
                text: "x".repeat(100),
            }],
            logs_truncated: false,
        }
    }

    #[test]
    fn a_batch_becomes_ordered_chunks_per_function() {
        let batch = vec![record("b", 3), record("a", 2), record("b", 1), record("a", 5)];
        let chunks = chunks_of(&batch);
        assert_eq!(chunks.len(), 2);
        assert_eq!((chunks[0].function.as_str(), chunks[0].records), ("a", 2));
        assert_eq!(chunks[1].first_id, format!("{:024x}", 1));
        assert_eq!(chunks[1].last_id, format!("{:024x}", 3));
        let ids: Vec<_> = decode("ns", "b", &chunks[1].data)
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, [format!("{:024x}", 1), format!("{:024x}", 3)]);
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let mut r = record("a", 7);
        r.started_at = chrono::DateTime::parse_from_rfc3339("2026-12-02T10:11:12.345678Z")
            .unwrap()
            .into();
        r.error = Some("boom \"quoted\"".into());
        r.logs.push(sless_api::LogLine {
            stream: "stderr".into(),
            text: "é\n".into(),
        });
        r.cold_start = true;
        r.status = 502;
        r.request_id = crate::record::Text::new("req \"7\"");
        let chunk = &chunks_of(std::slice::from_ref(&r))[0];
        let json = String::from_utf8(json_of(&chunk.data).unwrap().into_owned()).unwrap();
        assert!(!json.contains("\"namespace\""), "the row holds what the columns do not");
        assert_eq!(decode("ns", "a", &chunk.data).unwrap(), [r.to_record()]);
    }

    #[test]
    fn records_moved_from_rows_read_back() {
        let data = r#"[["0001", 3, "cron", "req", "2026-11-30T10:00:00.123456Z", 12.5, "error", "boom", 1, 2, true,
                       [{"stream": "stdout", "text": "hi\n"}], false]]"#;
        let r = &decode("ns", "f", data.as_bytes()).unwrap()[0];
        assert_eq!(r.started_at.timestamp_micros() % 1_000_000, 123_456);
        assert_eq!((r.logs[0].stream.as_str(), r.logs[0].text.as_str()), ("stdout", "hi\n"));
        assert_eq!((r.namespace.as_str(), r.function.as_str(), r.version), ("ns", "f", 3));
        // Trimming such a chunk writes the rows it keeps back in their forms.
        let (_, count, data) = without(data.as_bytes(), |_| false).unwrap().unwrap();
        assert_eq!(count, 1);
        assert_eq!(&decode("ns", "f", &data).unwrap()[0], r);
    }

    #[test]
    fn chunks_are_compressed() {
        let batch: Vec<_> = (0..100).map(|i| record("a", i)).collect();
        let chunk = &chunks_of(&batch)[0];
        let json = json_of(&chunk.data).unwrap();
        assert!(
            chunk.data.len() * 4 < json.len(),
            "{} of {} bytes",
            chunk.data.len(),
            json.len()
        );
        assert!(decode("ns", "a", b"\x07junk").is_err());
    }

    #[test]
    fn chunks_are_cut_by_count() {
        let batch: Vec<_> = (0..(CHUNK_RECORDS as u32 * 2 + 1)).map(|i| record("a", i)).collect();
        let sizes: Vec<_> = chunks_of(&batch).iter().map(|c| c.records).collect();
        assert_eq!(sizes, [CHUNK_RECORDS as i64, CHUNK_RECORDS as i64, 1]);
    }

    #[test]
    fn chunks_are_cut_by_size() {
        let mut big = record("a", 1);
        big.logs[0].text = "y".repeat(CHUNK_BYTES);
        let chunks = chunks_of(&[big, record("a", 2), record("a", 3)]);
        assert_eq!(chunks.iter().map(|c| c.records).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn overlapping_chunks_merge_newest_first() {
        // A long call (id 2) recorded in a chunk beside newer ones.
        let newer = chunks_of(&[record("a", 2), record("a", 9), record("a", 10)]);
        let older = chunks_of(&[record("a", 5), record("a", 6)]);
        let mut newest = Newest::new("ns", "a", 3, None);
        newest.add(&newer[0].data).unwrap();
        assert!(!newest.complete(&older[0].last_id), "6 beats 2");
        newest.add(&older[0].data).unwrap();
        let ids: Vec<_> = newest.into_items().into_iter().map(|r| r.id).collect();
        assert_eq!(ids, [10, 9, 6].map(|i| format!("{i:024x}")));

        let mut page = Newest::new("ns", "a", 2, Some(&newer[0].last_id));
        page.add(&newer[0].data).unwrap();
        page.add(&older[0].data).unwrap();
        assert!(page.complete(&format!("{:024x}", 4)));
        let ids: Vec<_> = page.into_items().into_iter().map(|r| r.id).collect();
        assert_eq!(ids, [9, 6].map(|i| format!("{i:024x}")));
    }

    #[test]
    fn trimming_keeps_the_rest_or_reports_empty() {
        let chunk = &chunks_of(&[record("a", 1), record("a", 2), record("a", 3)])[0];
        let (first, count, data) = without(&chunk.data, |id| id < format!("{:024x}", 2).as_str())
            .unwrap()
            .unwrap();
        assert_eq!((first, count), (format!("{:024x}", 2), 2));
        assert_eq!(decode("ns", "a", &data).unwrap().len(), 2);
        assert!(without(&chunk.data, |_| true).unwrap().is_none());
    }

    #[tokio::test]
    async fn thousands_of_chunks_are_written_in_one_batch() {
        // 6000 chunks bind 36 000 parameters, more than one SQLite statement takes.
        let dir = std::env::temp_dir().join(format!("sless-chunks-{:016x}", rand::random::<u64>()));
        let store = crate::store::open(&format!("sqlite://{}/t.db", dir.display()))
            .await
            .unwrap();
        let batch: Vec<_> = (0..6000).map(|i| record(&format!("f{i}"), i)).collect();
        let chunks = chunks_of(&batch);
        assert_eq!(chunks.len(), 6000);
        store.insert_chunks(&chunks).await.unwrap();
        for (function, id) in [("f0", 0), ("f4321", 4321), ("f5999", 5999)] {
            let found = store.list_invocations("ns", function, None, 10).await.unwrap();
            assert_eq!(found.len(), 1, "{function}");
            assert_eq!(found[0].id, format!("{id:024x}"));
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
