//! Invocation records are stored in chunks, as log stores do: one row per
//! function per written batch, holding up to [`CHUNK_RECORDS`] records in
//! id (start time) order. A busy gateway then pays one row insert per chunk
//! instead of one per call, so recording stays cheap next to serving. Both
//! stores share this part; only the SQL differs.
//!
//! Inside a chunk a record is a row of its fields in a fixed order, without
//! the namespace and function that the row holds. Chunks are written with
//! binary rows ([`write_row`]); chunks written before hold a JSON array of
//! them ([`OwnedRow`]). Both read back alike.
//!
//! A record's id starts with its start time, and records are written when
//! they finish, so a long call can land in a chunk beside much newer ones:
//! chunks' id ranges may overlap, and reading merges them.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sless_api::{InvocationRecord, LogLine};

use super::page::{Fitting, Page};
use crate::error::{Error, Result};
use crate::record::{record_id, status_label, Queued};

/// Flags of a binary row.
const COLD_START: u8 = 1;
const LOGS_TRUNCATED: u8 = 2;
const HAS_ERROR: u8 = 4;
const HAS_ALIAS: u8 = 8;

/// Appends the binary row of a queued record to `out`, made straight from
/// it. Integers are LEB128 varints, signed ones zigzag-coded; a text is its
/// length, then its UTF-8 bytes. In order:
/// - the id's start time, as its difference from `time` (the row before's,
///   0 for a chunk's first: rows are in id order, so it is small);
/// - the id's random part, 4 bytes little-endian;
/// - version; trigger (text); request id (text);
/// - the start time, as its difference from the id's (0: ids start with it);
/// - duration in ms, the f64's 8 bytes little-endian;
/// - status (text); flags ([`COLD_START`], [`LOGS_TRUNCATED`],
///   [`HAS_ERROR`], [`HAS_ALIAS`]), one byte;
/// - the error (text) when flagged; bytes in; bytes out;
/// - the number of log lines, then each line's stream and text;
/// - the alias (text) when flagged.
///
/// About a tenth of the CPU of the JSON rows chunks held before, and half
/// their bytes to compress (measured on hello records).
fn write_row(out: &mut Vec<u8>, r: &Queued, time: &mut u64) {
    let (micros, random) = r.id;
    write_signed(out, micros.wrapping_sub(*time) as i64);
    *time = micros;
    out.extend_from_slice(&random.to_le_bytes());
    write_varint(out, r.version);
    write_text(out, r.kind.as_str().as_bytes());
    write_text(out, r.request_id.as_bytes());
    write_signed(out, r.started_at.timestamp_micros().wrapping_sub(micros as i64));
    out.extend_from_slice(&r.duration_ms.to_le_bytes());
    write_text(out, status_label(r.kind, r.status, &mut [0; 3]).as_bytes());
    let flags = [
        (r.cold_start, COLD_START),
        (r.logs_truncated, LOGS_TRUNCATED),
        (r.error.is_some(), HAS_ERROR),
        (r.alias.is_some(), HAS_ALIAS),
    ]
    .into_iter()
    .filter(|(set, _)| *set)
    .fold(0, |flags, (_, flag)| flags | flag);
    out.push(flags);
    if let Some(error) = &r.error {
        write_text(out, error.as_bytes());
    }
    write_varint(out, r.bytes_in);
    write_varint(out, r.bytes_out);
    write_varint(out, r.logs.len() as u64);
    for line in &r.logs {
        write_text(out, line.stream.as_bytes());
        write_text(out, line.text.as_bytes());
    }
    if let Some(alias) = &r.alias {
        write_text(out, alias.as_bytes());
    }
}

fn write_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn write_signed(out: &mut Vec<u8>, value: i64) {
    write_varint(out, ((value << 1) ^ (value >> 63)) as u64);
}

fn write_text(out: &mut Vec<u8>, text: &[u8]) {
    write_varint(out, text.len() as u64);
    out.extend_from_slice(text);
}

/// Reads binary rows ([`write_row`]): any bytes are rows or an error.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, len: usize) -> Result<&'a [u8]> {
        if self.rest.len() < len {
            return Err(bad("a row ends early"));
        }
        let (head, tail) = self.rest.split_at(len);
        self.rest = tail;
        Ok(head)
    }

    fn varint(&mut self) -> Result<u64> {
        let mut value = 0;
        for shift in (0..64).step_by(7) {
            let byte = self.bytes(1)?[0];
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(bad("a number runs past 64 bits"))
    }

    fn signed(&mut self) -> Result<i64> {
        let zigzag = self.varint()?;
        Ok((zigzag >> 1) as i64 ^ -((zigzag & 1) as i64))
    }

    fn text(&mut self) -> Result<String> {
        // Checked against what is left before anything is allocated.
        let len = usize::try_from(self.varint()?).map_err(|_| bad("a text longer than memory"))?;
        String::from_utf8(self.bytes(len)?.to_vec()).map_err(|_| bad("a text is not UTF-8"))
    }

    fn row(&mut self, time: &mut u64) -> Result<OwnedRow> {
        let micros = time.wrapping_add(self.signed()? as u64);
        *time = micros;
        let random = u32::from_le_bytes(self.bytes(4)?.try_into().expect("4 bytes"));
        let version = self.varint()?;
        let trigger = self.text()?;
        let request_id = self.text()?;
        let started = (micros as i64).wrapping_add(self.signed()?);
        let duration_ms = f64::from_le_bytes(self.bytes(8)?.try_into().expect("8 bytes"));
        let status = self.text()?;
        let flags = self.bytes(1)?[0];
        let error = if flags & HAS_ERROR != 0 {
            Some(self.text()?)
        } else {
            None
        };
        let (bytes_in, bytes_out) = (self.varint()?, self.varint()?);
        // Each line takes at least two bytes, so a bad count ends early.
        let lines = self.varint()?;
        let mut logs = Vec::new();
        for _ in 0..lines {
            logs.push(StoredLog::Pair(self.text()?, self.text()?));
        }
        let alias = if flags & HAS_ALIAS != 0 {
            Some(self.text()?)
        } else {
            None
        };
        Ok(OwnedRow(
            record_id((micros, random)),
            version,
            trigger,
            request_id,
            Started::Micros(started),
            duration_ms,
            status,
            error,
            bytes_in,
            bytes_out,
            flags & COLD_START != 0,
            logs,
            flags & LOGS_TRUNCATED != 0,
            alias,
        ))
    }
}

fn bad(what: impl std::fmt::Display) -> Error {
    Error::internal(format!("bad invocation chunk in store: {what}"))
}

/// A stored row as read back, and a row of the JSON chunks written before
/// binary rows: id, version, trigger, request id, start (microseconds since
/// the epoch), duration in ms, status, error, bytes in, bytes out, cold
/// start, logs as `[stream, text]` pairs, logs truncated, alias (null for
/// calls not addressed to one; absent in older rows). Trimming a chunk
/// writes the rows it keeps back as JSON, as they were (moved-over ones
/// keep their older forms).
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

/// Marks chunk data whose rows are binary ([`write_row`]), compressed with
/// LZ4 (a size-prefixed block).
const BINARY: u8 = 2;
/// Marks chunk data whose rows are a JSON array compressed with LZ4 (chunks
/// written before binary rows, and trimmed ones); data that starts with `[`
/// is the plain JSON of chunks moved over from the one-row-per-record schema.
const LZ4: u8 = 1;

/// Records of one function repeat most of their bytes, so a chunk shrinks
/// several times over: fewer pages for the database to log and write back.
/// `scratch` is the compressor's output buffer, reused from chunk to chunk.
fn compress(format: u8, rows: &[u8], scratch: &mut Vec<u8>) -> Vec<u8> {
    let most = lz4_flex::block::get_maximum_output_size(rows.len());
    if scratch.len() < most {
        scratch.resize(most, 0);
    }
    let size = lz4_flex::block::compress_into(rows, scratch).expect("the output buffer holds the worst case");
    // The layout of lz4_flex's size-prepended blocks: the input's length, then the block.
    let mut data = Vec::with_capacity(5 + size);
    data.push(format);
    data.extend_from_slice(&(rows.len() as u32).to_le_bytes());
    data.extend_from_slice(&scratch[..size]);
    data
}

fn unpack(packed: &[u8]) -> Result<Vec<u8>> {
    lz4_flex::decompress_size_prepended(packed).map_err(bad)
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
    /// The records' rows, compressed (see [`compress`]).
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
    let (mut rows, mut scratch) = (Vec::new(), Vec::new());
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
            rows.clear();
            let (mut end, mut time) = (start, 0);
            while end < group.len() && end - start < CHUNK_RECORDS && (end == start || rows.len() < CHUNK_BYTES) {
                write_row(&mut rows, group[end], &mut time);
                end += 1;
            }
            chunks.push(Chunk {
                namespace: first.namespace.as_str().to_string(),
                function: first.function.as_str().to_string(),
                first_id: group[start].id(),
                last_id: group[end - 1].id(),
                records: (end - start) as i64,
                data: compress(BINARY, &rows, &mut scratch),
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
    let json = |text: &[u8]| serde_json::from_slice(text).map_err(bad);
    match data.split_first() {
        Some((&BINARY, packed)) => {
            let rows = unpack(packed)?;
            let (mut reader, mut time, mut read) = (Reader { rest: &rows }, 0, Vec::new());
            while !reader.rest.is_empty() {
                read.push(reader.row(&mut time)?);
            }
            Ok(read)
        }
        Some((&LZ4, packed)) => json(&unpack(packed)?),
        Some((b'[', _)) => json(data),
        _ => Err(bad("unknown format")),
    }
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
        compress(LZ4, &json, &mut Vec::new()),
    )))
}

/// A page of one function's records, newest first.
pub type RecordPage = Page<InvocationRecord>;

/// The newest records of one function older than `before`, as many as fit
/// in `limit` records and `max_bytes` of their JSON ([`Fitting`]),
/// collected from its chunks fed newest `last_id` first. What it holds
/// stays within the bounds too: the records that fit, the first one that
/// did not (which says there are more, and when the chunks left can no
/// longer change the page), and the chunk being added.
pub struct Newest<'a> {
    namespace: &'a str,
    function: &'a str,
    before: Option<&'a str>,
    page: Fitting<InvocationRecord>,
}

impl<'a> Newest<'a> {
    pub fn new(namespace: &'a str, function: &'a str, limit: usize, max_bytes: usize, before: Option<&'a str>) -> Self {
        Newest {
            namespace,
            function,
            before,
            page: Fitting::new(limit, max_bytes),
        }
    }

    /// True when a chunk whose newest record is `last_id` (and every chunk
    /// after it) can no longer change the answer: its records are all
    /// older than one that already falls past the page (chunks overlap:
    /// a newer chunk may still hold a record that joins the page).
    pub fn complete(&self, last_id: &str) -> bool {
        match self.page.past() {
            Some(past) => past.id.as_str() > last_id,
            // Full with nothing past it: a page of no records.
            None => self.page.full(),
        }
    }

    pub fn add(&mut self, data: &[u8]) -> Result<()> {
        let before = self.before;
        self.page.add(
            decode(self.namespace, self.function, data)?
                .into_iter()
                .filter(|r| before.is_none_or(|b| r.id.as_str() < b)),
        );
        Ok(())
    }

    pub fn into_page(self) -> RecordPage {
        self.page.into_page()
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
        let mut r = record("a-function", 7);
        r.namespace = crate::record::Text::new("a-namespace");
        r.id.0 = 0x0006_2a1b_2c3d_4e5f;
        r.started_at = chrono::DateTime::parse_from_rfc3339("2026-12-02T10:11:12.345678Z")
            .unwrap()
            .into();
        r.version = u64::MAX;
        r.alias = Some("live".into());
        r.duration_ms = 0.1 + 0.2;
        r.error = Some("boom \"quoted\"".into());
        r.logs.push(sless_api::LogLine {
            stream: "stderr".into(),
            text: "é\n".into(),
        });
        r.cold_start = true;
        r.logs_truncated = true;
        r.status = 502;
        r.bytes_in = 1 << 40;
        r.request_id = crate::record::Text::new("req \"7\"");
        let mut plain = record("a-function", 8);
        plain.namespace = crate::record::Text::new("a-namespace");
        plain.logs.clear();
        plain.kind = sless_driver::TriggerKind::Cron;
        // Stored to the microsecond, as ids are.
        plain.started_at = DateTime::from_timestamp_micros(1_764_000_000_123_456).unwrap();
        let (expected, expected_plain) = (r.to_record(), plain.to_record());
        let chunk = &chunks_of(&[plain, r])[0];
        assert_eq!(chunk.data[0], BINARY);
        let rows = unpack(&chunk.data[1..]).unwrap();
        for column in [&b"a-namespace"[..], b"a-function"] {
            assert!(
                !rows.windows(column.len()).any(|w| w == column),
                "the row holds what the columns do not"
            );
        }
        let read = decode("a-namespace", "a-function", &chunk.data).unwrap();
        assert_eq!(read, [expected_plain, expected]);
        assert_eq!((read[0].trigger.as_str(), read[0].status.as_str()), ("cron", "ok"));
    }

    #[test]
    fn a_cut_or_bad_row_is_an_error() {
        let mut r = record("a", 1);
        r.error = Some("boom".into());
        r.alias = Some("live".into());
        let chunk = &chunks_of(&[r])[0];
        let rows = unpack(&chunk.data[1..]).unwrap();
        assert!(decode("ns", "a", &compress(BINARY, &[], &mut Vec::new()))
            .unwrap()
            .is_empty());
        for len in 1..rows.len() {
            let cut = compress(BINARY, &rows[..len], &mut Vec::new());
            assert!(decode("ns", "a", &cut).is_err(), "{len} of {} bytes", rows.len());
        }
        // A number of eleven bytes, a text longer than the rest, a text that is not UTF-8.
        for bad in [
            &[0xffu8; 11][..],
            &[0, 0, 0, 0, 0, 1, 0x7f, b'x'],
            &[0, 0, 0, 0, 0, 1, 2, 0xc3, 0x28],
        ] {
            assert!(
                decode("ns", "a", &compress(BINARY, bad, &mut Vec::new())).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_fuzz_corpus_holds_a_binary_chunk() {
        let corpus = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/corpus/records/6.bin");
        let read = decode("ns", "f", &std::fs::read(corpus).unwrap()).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(
            (read[1].error.as_deref(), read[1].cold_start, read[1].bytes_out),
            (Some("boom"), true, 4)
        );
    }

    #[test]
    fn chunks_written_as_json_read_back() {
        let rows = br#"[["00062a1b2c3d4e5f00000007", 3, "http", "req", 1733134272345678, 12.5, "200", null, 1, 2, true,
                       [["stdout", "hi\n"]], false, "live"]]"#;
        let data = compress(LZ4, rows, &mut Vec::new());
        let r = &decode("ns", "f", &data).unwrap()[0];
        assert_eq!(r.started_at.timestamp_micros(), 1_733_134_272_345_678);
        assert_eq!(
            (r.status.as_str(), r.alias.as_deref(), r.cold_start),
            ("200", Some("live"), true)
        );
        assert_eq!((r.logs[0].stream.as_str(), r.logs[0].text.as_str()), ("stdout", "hi\n"));
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
        let rows = unpack(&chunk.data[1..]).unwrap();
        assert!(
            chunk.data.len() * 4 < rows.len(),
            "{} of {} bytes",
            chunk.data.len(),
            rows.len()
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

    fn ids(page: RecordPage) -> (Vec<String>, bool) {
        (page.items.into_iter().map(|r| r.id).collect(), page.more)
    }

    #[test]
    fn overlapping_chunks_merge_newest_first() {
        // A long call (id 2) recorded in a chunk beside newer ones.
        let newer = chunks_of(&[record("a", 2), record("a", 9), record("a", 10)]);
        let older = chunks_of(&[record("a", 5), record("a", 6)]);
        let mut newest = Newest::new("ns", "a", 3, usize::MAX, None);
        newest.add(&newer[0].data).unwrap();
        assert!(!newest.complete(&older[0].last_id), "6 beats 2");
        newest.add(&older[0].data).unwrap();
        assert_eq!(
            ids(newest.into_page()),
            (vec![10, 9, 6].into_iter().map(|i| format!("{i:024x}")).collect(), true)
        );

        let mut page = Newest::new("ns", "a", 2, usize::MAX, Some(&newer[0].last_id));
        page.add(&newer[0].data).unwrap();
        page.add(&older[0].data).unwrap();
        assert!(page.complete(&format!("{:024x}", 4)));
        assert_eq!(
            ids(page.into_page()),
            (vec![9, 6].into_iter().map(|i| format!("{i:024x}")).collect(), true)
        );

        let mut last = Newest::new("ns", "a", 2, usize::MAX, Some(&older[0].first_id));
        last.add(&newer[0].data).unwrap();
        last.add(&older[0].data).unwrap();
        assert_eq!(ids(last.into_page()), (vec![format!("{:024x}", 2)], false));
    }

    /// A page stops before the record that would take it past its bytes,
    /// whatever the limit; a record found later that sorts in before that
    /// one still gets in if it fits.
    #[test]
    fn a_page_holds_what_fits_in_its_bytes() {
        let sized = |id, len| {
            let mut r = record("a", id);
            r.logs[0].text = "\u{1}".repeat(len);
            r
        };
        let one = crate::bounds::json_len(&sized(1, 1000).to_record());
        let budget = 2 * one + one / 2;
        let newer = chunks_of(&[sized(10, 1000), sized(9, 1000), sized(7, 1000)]);
        let mut page = Newest::new("ns", "a", 1000, budget, None);
        page.add(&newer[0].data).unwrap();
        assert!(page.complete(&format!("{:024x}", 6)), "7 is past the page");
        assert!(!page.complete(&format!("{:024x}", 8)), "8 could be");
        // A small record between 9 and 7 fits beside 10 and 9.
        page.add(&chunks_of(&[sized(8, 10)])[0].data).unwrap();
        let page = page.into_page();
        assert!(page.items.iter().map(crate::bounds::json_len).sum::<usize>() <= budget);
        assert_eq!(
            ids(page),
            (vec![10, 9, 8].into_iter().map(|i| format!("{i:024x}")).collect(), true)
        );
        // One record larger than the budget is still a page of one.
        let mut alone = Newest::new("ns", "a", 1000, 10, None);
        alone.add(&newer[0].data).unwrap();
        assert_eq!(ids(alone.into_page()), (vec![format!("{:024x}", 10)], true));
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
        let (store, dir) = crate::store::open_in_temp("chunks").await;
        let batch: Vec<_> = (0..6000).map(|i| record(&format!("f{i}"), i)).collect();
        let chunks = chunks_of(&batch);
        assert_eq!(chunks.len(), 6000);
        store.insert_chunks(&chunks).await.unwrap();
        for (function, id) in [("f0", 0), ("f4321", 4321), ("f5999", 5999)] {
            let found = store
                .list_invocations("ns", function, None, 10, usize::MAX)
                .await
                .unwrap()
                .items;
            assert_eq!(found.len(), 1, "{function}");
            assert_eq!(found[0].id, format!("{id:024x}"));
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
