//! Bounds on what tenants and handlers hand the server to keep. JSON values
//! are checked for depth and size where they enter (request bodies, a job's
//! result), and free text (errors) is clipped, so that every stored record
//! reads back: the JSON parser refuses documents nested deeper than 127
//! levels, and a record stores a value one or two levels below its top.

use serde_json::Value;

/// Deepest nesting of arrays and objects accepted in a value that is kept
/// (a request body, a job's result): far below the parser's limit, so the
/// record around it still parses.
pub const MAX_JSON_DEPTH: usize = 64;

/// Largest job result kept, as compact JSON (the Terraform provider's
/// messages carry it too).
pub use sless_api::MAX_JOB_RESULT_BYTES;

/// Longest error text kept in a status or an invocation record.
pub const MAX_ERROR_BYTES: usize = 4096;

/// Most bytes of stored handler output one answer holds and sends: a page
/// of invocation records as JSON, or the history of `logs`. Whatever the
/// `limit` or `tail`, records (or lines) stop where the next would pass it,
/// and the page's cursor continues after the last one sent. The worst
/// record is a call's 64 KiB of output and 4 KiB of error, all control
/// characters, which JSON writes as `\u0001`: some 410 KiB, so a page
/// holds at least nine of those and a thousand ordinary records (a few
/// hundred bytes each). Reading one holds this much of records and this
/// much of their JSON, plus a chunk being decoded (1 MiB).
pub const MAX_ANSWER_BYTES: usize = 4 << 20;

/// How deeply arrays and objects nest in `value` (a scalar is 0, `[]` is 1).
/// Iterative: a deep value cannot exhaust the stack.
pub fn json_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 1usize)];
    while let Some((value, depth)) = stack.pop() {
        match value {
            Value::Array(items) => {
                deepest = deepest.max(depth);
                stack.extend(items.iter().map(|v| (v, depth + 1)));
            }
            Value::Object(map) => {
                deepest = deepest.max(depth);
                stack.extend(map.values().map(|v| (v, depth + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// Why `value` may not be kept as `what`, if it may not.
pub fn check_depth(what: &str, value: &Value) -> Result<(), String> {
    let depth = json_depth(value);
    if depth > MAX_JSON_DEPTH {
        return Err(format!(
            "{what} is nested {depth} levels deep; at most {MAX_JSON_DEPTH} are kept"
        ));
    }
    Ok(())
}

/// The length of `value` written as compact JSON, without writing it.
pub fn json_len(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Counting cannot fail, and the values measured here serialize.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

pub use sless_api::text::{clip, one_line};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(depth: usize) -> Value {
        let mut value = json!(1);
        for _ in 0..depth {
            value = Value::Array(vec![value]);
        }
        value
    }

    #[test]
    fn depth_counts_arrays_and_objects() {
        assert_eq!(json_depth(&json!(1)), 0);
        assert_eq!(json_depth(&json!([])), 1);
        assert_eq!(json_depth(&json!({"a": [1, {"b": []}]})), 4);
        assert_eq!(json_depth(&nested(127)), 127);
        assert!(check_depth("x", &nested(MAX_JSON_DEPTH)).is_ok());
        let refused = check_depth("the result", &nested(MAX_JSON_DEPTH + 1)).unwrap_err();
        assert!(refused.contains("the result is nested 65 levels deep"), "{refused}");
    }

    #[test]
    fn a_value_within_the_depth_still_parses_inside_a_record() {
        let record = json!({"status": {"result": nested(MAX_JSON_DEPTH)}});
        assert!(serde_json::from_str::<Value>(&record.to_string()).is_ok());
    }

    #[test]
    fn json_len_is_the_length_written() {
        let value = json!({"text": "\u{1}é\n", "n": [1, 2.5, null]});
        assert_eq!(json_len(&value), serde_json::to_vec(&value).unwrap().len());
    }

    #[test]
    fn clip_cuts_at_a_character_boundary() {
        assert_eq!(clip("short".into(), 10), "short");
        let clipped = clip("é".repeat(100), 50);
        assert!(clipped.len() <= 50 && clipped.ends_with("[... cut]"), "{clipped}");
    }
}
