//! Fuzzing the frame decoder on stable, in the normal test run: the corpus
//! (`fuzz/corpus/frame/` at the repository's root), then random and mutated
//! byte streams for a bounded time (`SLESS_FUZZ_SECONDS`, default 2;
//! `SLESS_FUZZ_SEED` replays a run). No input panics, allocates past the
//! frame limit or reads a frame other than the one it was sent.

use std::time::{Duration, Instant};

use rand::{Rng, RngCore, SeedableRng};

use super::frame::{encode, read_limited, split_head};

const LIMIT: usize = 1 << 20;

/// Reads every frame of `bytes` and checks what each holds.
fn check(bytes: &[u8]) {
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime.block_on(async {
        let mut wire = bytes;
        while let Ok(Some(frame)) = read_limited(&mut wire, LIMIT).await {
            assert!(frame.payload.len() + 5 <= LIMIT);
            let total = frame.payload.len();
            if let Ok((head, body)) = split_head(frame.payload.clone()) {
                assert_eq!(4 + head.len() + body.len(), total);
            }
        }
        // What is written reads back whole.
        let kind = bytes.first().copied().unwrap_or(b'O');
        let id = u32::from_le_bytes([bytes.len() as u8, 1, 2, 3]);
        let frame = encode(kind, id, bytes);
        let read = read_limited(&mut &frame[..], bytes.len() + 5).await.unwrap().unwrap();
        assert_eq!((read.kind, read.id, &read.payload[..]), (kind, id, bytes));
    });
}

#[test]
fn the_frame_decoder_never_panics_and_reads_back_what_was_written() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/frame");
    let corpus: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().filter_map(|e| std::fs::read(e.path()).ok()).collect())
        .unwrap_or_default();
    assert!(!corpus.is_empty(), "no corpus in {}", dir.display());
    corpus.iter().for_each(|input| check(input));
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
        let mut input = corpus[rng.random_range(0..corpus.len())].clone();
        if rng.random_bool(0.3) {
            input = vec![0; rng.random_range(0..2048)];
            rng.fill_bytes(&mut input);
        }
        for _ in 0..rng.random_range(0..6) {
            if input.is_empty() {
                break;
            }
            let at = rng.random_range(0..input.len());
            match rng.random_range(0..3) {
                0 => input[at] = rng.random(),
                1 => input.truncate(at),
                _ => input.insert(at, rng.random()),
            }
        }
        if std::panic::catch_unwind(|| check(&input)).is_err() {
            panic!("frame fuzzing failed (SLESS_FUZZ_SEED={seed}) on {input:?}");
        }
        runs += 1;
    }
    eprintln!("fuzz frame: {runs} inputs in {seconds}s (SLESS_FUZZ_SEED={seed})");
}
