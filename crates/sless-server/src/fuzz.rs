//! Fuzzing on stable, in the normal test run: each target replays its
//! corpus (`fuzz/corpus/{target}/` at the repository's root, kept in the
//! repo), then feeds `arbitrary`-driven inputs for a bounded time
//! (`SLESS_FUZZ_SECONDS`, default 2 per target; `SLESS_FUZZ_SEED` replays
//! a run). A property that fails panics with the seed and the input.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use arbitrary::Unstructured;
use rand::{Rng, RngCore, SeedableRng};
use serde_json::{Map, Value};

/// The corpus directory of `target`.
fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

/// Runs `check` on the corpus of `target`, then on random and mutated
/// inputs until the time budget is spent.
pub fn run(target: &str, check: impl Fn(&[u8])) {
    let mut corpus: Vec<Vec<u8>> = std::fs::read_dir(corpus_dir(target))
        .map(|dir| dir.flatten().filter_map(|e| std::fs::read(e.path()).ok()).collect())
        .unwrap_or_default();
    assert!(
        !corpus.is_empty(),
        "no corpus for {target} in {}",
        corpus_dir(target).display()
    );
    for input in &corpus {
        check(input);
    }
    let seconds = std::env::var("SLESS_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let seed = std::env::var("SLESS_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut runs = 0u64;
    while Instant::now() < deadline {
        let input = if rng.random_bool(0.5) {
            let mut bytes = vec![0; rng.random_range(0..4096)];
            rng.fill_bytes(&mut bytes);
            bytes
        } else {
            mutate(&corpus[rng.random_range(0..corpus.len())], &mut rng)
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&input)));
        if outcome.is_err() {
            panic!(
                "fuzz target {target} failed (SLESS_FUZZ_SEED={seed}) on input {:?}",
                String::from_utf8_lossy(&input)
            );
        }
        if runs.is_multiple_of(64) && corpus.len() < 256 {
            corpus.push(input);
        }
        runs += 1;
    }
    eprintln!("fuzz {target}: {runs} inputs in {seconds}s (SLESS_FUZZ_SEED={seed})");
}

/// `input` with a few bytes flipped, cut, repeated or inserted.
fn mutate(input: &[u8], rng: &mut impl Rng) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..rng.random_range(1..8) {
        if out.is_empty() {
            out.push(rng.random());
            continue;
        }
        let at = rng.random_range(0..out.len());
        match rng.random_range(0..4) {
            0 => out[at] = rng.random(),
            1 => out.truncate(at),
            2 => {
                let end = (at + rng.random_range(1..64)).min(out.len());
                let piece = out[at..end].to_vec();
                out.splice(at..at, piece);
            }
            _ => out.insert(at, rng.random()),
        }
    }
    out
}

/// An arbitrary JSON value at most `depth` levels deep.
pub fn json(u: &mut Unstructured<'_>, depth: usize) -> arbitrary::Result<Value> {
    let choice = if depth == 0 {
        u.int_in_range(0..=3)?
    } else {
        u.int_in_range(0..=5)?
    };
    Ok(match choice {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => serde_json::Number::from_f64(u.arbitrary()?).map_or(Value::Null, Value::Number),
        3 => Value::String(u.arbitrary()?),
        4 => {
            let n = u.int_in_range(0..=4)?;
            Value::Array((0..n).map(|_| json(u, depth - 1)).collect::<arbitrary::Result<_>>()?)
        }
        _ => {
            let mut map = Map::new();
            for _ in 0..u.int_in_range(0..=4)? {
                // Few distinct keys, so patches and targets meet.
                let key = ["a", "b", "env", "event", "name", "x"][u.int_in_range(0..=5)?].to_string();
                map.insert(key, json(u, depth - 1)?);
            }
            Value::Object(map)
        }
    })
}

#[cfg(test)]
mod targets {
    use super::*;
    use crate::archive::ArchiveRules;
    use crate::http::body::merge_patch;

    #[test]
    fn archive_rules_never_panic_and_never_pass_a_bad_path() {
        let rules = ArchiveRules {
            max_unpacked_bytes: 1 << 20,
            max_entries: 64,
            ..ArchiveRules::default()
        };
        run("archive", |bytes| {
            if let Ok(unpacked) = rules.check(bytes) {
                assert!(unpacked.total_bytes <= rules.max_unpacked_bytes);
                for file in &unpacked.files {
                    assert!(
                        !file.path.starts_with('/') && !file.path.split('/').any(|c| c == ".."),
                        "{}",
                        file.path
                    );
                }
            }
        });
    }

    #[test]
    fn merge_patch_never_panics_and_is_idempotent() {
        run("merge_patch", |bytes| {
            let mut u = Unstructured::new(bytes);
            let (Ok(target), Ok(patch)) = (json(&mut u, 4), json(&mut u, 4)) else {
                return;
            };
            let mut once = target.clone();
            merge_patch(&mut once, patch.clone());
            let mut twice = once.clone();
            merge_patch(&mut twice, patch.clone());
            assert_eq!(once, twice, "patching twice changed more: {target} + {patch}");
            if let Value::Object(patch) = &patch {
                for (key, value) in patch {
                    if value.is_null() {
                        assert!(once.get(key).is_none(), "null did not remove {key}");
                    }
                }
            }
            // Patches straight from bytes, as a client sends them.
            if let Ok(patch) = serde_json::from_slice::<Value>(bytes) {
                let mut target = target;
                merge_patch(&mut target, patch);
            }
        });
    }

    #[test]
    fn cron_schedules_parse_or_say_why_and_tick_forward() {
        const TOKENS: &[&str] = &[
            "*", "*/", "/", ",", "-", " ", "0", "1", "5", "7", "12", "15", "29", "30", "31", "59", "60", "99", "L",
            "W", "#", "?", "MON", "jan", "SUN-SAT", "@yearly",
        ];
        const ZONES: &[&str] = &[
            "UTC",
            "Europe/Berlin",
            "America/St_Johns",
            "Asia/Kathmandu",
            "Nowhere/Else",
            "",
        ];
        run("cron", |bytes| {
            let mut u = Unstructured::new(bytes);
            let schedule: String = match u.arbitrary_len::<u8>() {
                Ok(n) => (0..n.min(24)).filter_map(|_| u.choose(TOKENS).ok().copied()).collect(),
                Err(_) => return,
            };
            let zone = u.choose(ZONES).copied().unwrap_or("UTC");
            for text in [schedule.as_str(), &String::from_utf8_lossy(bytes)] {
                match crate::triggers::schedule::Schedule::parse(text, zone) {
                    Ok(parsed) => {
                        let after = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
                        if let Some(next) = parsed.next_after(after) {
                            assert!(next > after, "{text:?} ticked back to {next}");
                        }
                    }
                    Err(why) => assert!(!why.message.is_empty()),
                }
            }
        });
    }

    /// The frame decoder of local instances: no input panics, allocates
    /// past the frame limit or reads a frame other than the one it was
    /// sent, and what is written reads back whole.
    #[test]
    fn the_frame_decoder_never_panics_and_reads_back_what_was_written() {
        use sless_driver_local::frame::{encode, read_limited, split_head};
        const LIMIT: usize = 1 << 20;
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        run("frame", |bytes| {
            runtime.block_on(async {
                let mut wire = bytes;
                while let Ok(Some(frame)) = read_limited(&mut wire, LIMIT).await {
                    assert!(frame.payload.len() + 5 <= LIMIT);
                    let total = frame.payload.len();
                    if let Ok((head, body)) = split_head(frame.payload.clone()) {
                        assert_eq!(4 + head.len() + body.len(), total);
                    }
                }
                let kind = bytes.first().copied().unwrap_or(b'O');
                let id = u32::from_le_bytes([bytes.len() as u8, 1, 2, 3]);
                let frame = encode(kind, id, bytes);
                let read = read_limited(&mut &frame[..], bytes.len() + 5).await.unwrap().unwrap();
                assert_eq!((read.kind, read.id, &read.payload[..]), (kind, id, bytes));
            });
        });
    }

    #[test]
    fn stored_record_decoders_never_panic() {
        use crate::store::{chunks, Record};
        run("records", |bytes| {
            // Invocation chunks: any bytes decode or are an error.
            let _ = chunks::decode("ns", "f", bytes);
            let _ = chunks::without(bytes, |id| id < "8");
            // Resources: any stored JSON becomes the API type or an error.
            let mut u = Unstructured::new(bytes);
            let (Ok(spec), Ok(status)) = (json(&mut u, 5), json(&mut u, 5)) else {
                return;
            };
            let record = Record {
                namespace: "ns".into(),
                name: "n".into(),
                spec,
                status,
                created_at: chrono::Utc::now(),
                updated_at: chrono::Utc::now(),
            };
            let _ = crate::http::resource::to_api::<sless_api::Job>(record.clone());
            let _ = crate::http::resource::to_api::<sless_api::Trigger>(record.clone());
            let _ = crate::http::resource::to_api::<sless_api::Function>(record);
            // A job's result: kept only within the bounds.
            if let Ok(value) = crate::jobs::kept_result(bytes) {
                assert!(crate::bounds::json_depth(&value) <= crate::bounds::MAX_JSON_DEPTH);
            }
        });
    }

    #[test]
    fn invocation_records_read_back_as_written() {
        use crate::record::{Queued, Text};
        run("records", |bytes| {
            let mut u = Unstructured::new(bytes);
            let mut records = Vec::new();
            for i in 0..u.int_in_range(1..=4u32).unwrap_or(1) {
                let text = |u: &mut Unstructured<'_>| u.arbitrary::<String>().unwrap_or_default();
                records.push(Queued {
                    namespace: Text::new("ns"),
                    function: Text::new("f"),
                    request_id: Text::new(&text(&mut u)),
                    id: (u.arbitrary::<u32>().unwrap_or(0) as u64, i),
                    started_at: chrono::DateTime::from_timestamp_micros(1_800_000_000_000_000).unwrap(),
                    version: u.arbitrary().unwrap_or(0),
                    alias: None,
                    kind: sless_driver::TriggerKind::Http,
                    status: u.int_in_range(200..=599).unwrap_or(200),
                    duration_ms: 1.5,
                    error: Some(text(&mut u)),
                    bytes_in: 0,
                    bytes_out: 0,
                    cold_start: u.arbitrary().unwrap_or(false),
                    logs: vec![sless_api::LogLine {
                        stream: "stdout".into(),
                        text: text(&mut u),
                    }],
                    logs_truncated: false,
                });
            }
            let chunks = chunks::chunks_of(&records);
            let mut read: Vec<_> = chunks
                .iter()
                .flat_map(|c| chunks::decode("ns", "f", &c.data).unwrap())
                .collect();
            let mut written: Vec<_> = records.iter().map(Queued::to_record).collect();
            read.sort_by(|a, b| a.id.cmp(&b.id));
            written.sort_by(|a, b| a.id.cmp(&b.id));
            assert_eq!(read, written);
        });
    }

    use crate::store::chunks;
}
