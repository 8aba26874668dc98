//! Conversions between Terraform values (`Value<T>`: known, null or unknown)
//! and API values: numbers, JSON-string attributes, merge patches, IDs.

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json};
use tf_provider::value::Value;
use tf_provider::{AttributePath, Diagnostics};

use crate::diagnostics::{error, error_at};
use crate::number::Number;

/// A number attribute as a `u32`, with an error on the attribute when it is
/// fractional, negative or too large. Null and unknown give `None` without
/// an error.
pub fn to_u32(diags: &mut Diagnostics, value: &Value<Number>, attribute: &'static str) -> Option<u32> {
    whole_at(diags, value, attribute, AttributePath::new(attribute), u32::MAX)
}

/// A number attribute as a `u64` (up to `i64::MAX`, as Terraform's state
/// holds it), like [`to_u32`].
pub fn to_u64(diags: &mut Diagnostics, value: &Value<Number>, attribute: &'static str) -> Option<u64> {
    whole_at(
        diags,
        value,
        attribute,
        AttributePath::new(attribute),
        i64::MAX.unsigned_abs(),
    )
}

/// A number at `path` (called `name` in messages: `async.retry_limit`) as
/// a whole number between 0 and `max`, like [`to_u32`].
pub fn whole_at<T: TryFrom<i64> + std::fmt::Display>(
    diags: &mut Diagnostics,
    value: &Value<Number>,
    name: &str,
    path: AttributePath,
    max: T,
) -> Option<T> {
    let n = value.as_ref_option()?;
    let whole = n.whole().and_then(|n| T::try_from(n).ok());
    if whole.is_none() {
        error_at(
            diags,
            format!("Invalid {name}"),
            format!("{name} must be a whole number between 0 and {max}, got {n}."),
            path,
        );
    }
    whole
}

/// The known entries of a map attribute as the API's JSON, with an error
/// on each entry that is null (`env = { A = null }`): the API has no null
/// value, so such an entry would be dropped on every apply and show as a
/// change forever. `None` while the map is null or unknown; unknown
/// entries are left out.
pub fn map_json<T>(
    diags: &mut Diagnostics,
    attribute: &'static str,
    map: &Value<BTreeMap<String, Value<T>>>,
    to_json: impl Fn(&T) -> Json,
) -> Option<Map<String, Json>> {
    let map = map.as_ref_option()?;
    let mut out = Map::new();
    for (key, value) in map {
        match value {
            Value::Value(value) => {
                out.insert(key.clone(), to_json(value));
            }
            Value::Null => null_error(diags, AttributePath::new(attribute).key(key.clone())),
            Value::Unknown => {}
        }
    }
    Some(out)
}

/// Errors on the null entries of a map attribute, as [`map_json`] gives them.
pub fn check_map_nulls<T>(diags: &mut Diagnostics, attribute: &'static str, map: &Value<BTreeMap<String, Value<T>>>) {
    map_json(diags, attribute, map, |_| Json::Null);
}

/// The error on a null at `path`, where the API needs a value.
pub fn null_error(diags: &mut Diagnostics, path: AttributePath) {
    error_at(
        diags,
        format!("Null value in {path}"),
        format!("{path} is null, and sless takes no null here: set a value, or remove the element."),
        path,
    );
}

/// Parses a JSON-string attribute (`event = jsonencode({...})`), with an
/// error on the attribute when it is not JSON.
pub fn parse_json(diags: &mut Diagnostics, text: &str, attribute: &'static str) -> Option<Json> {
    match serde_json::from_str(text) {
        Ok(json) => Some(json),
        Err(e) => {
            error(
                diags,
                format!("Invalid JSON in {attribute}"),
                format!("{attribute} must be a JSON document, e.g. jsonencode({{ key = \"value\" }}): {e}"),
                Some(attribute),
            );
            None
        }
    }
}

/// An error on `attribute` when `json`, written compact as the server
/// measures it, is longer than the server takes (`most` bytes): said
/// before any call, and before Terraform carries a value of many MiB
/// through every step of a plan.
pub fn check_json_bytes(diags: &mut Diagnostics, json: &Json, attribute: &'static str, what: &str, most: usize) {
    let bytes = json.to_string().len();
    if bytes > most {
        error(
            diags,
            format!("{attribute} is too large"),
            format!(
                "{what} must be at most {most} bytes as JSON, got {bytes}; pass a reference (a key, a URL) to larger data."
            ),
            Some(attribute),
        );
    }
}

/// The state value of a JSON-string attribute the server holds as `server`:
/// `previous` (the planned or prior string) when it means the same JSON, so
/// formatting and key order never show as a change; else the server's
/// compact JSON.
pub fn json_attribute(previous: &Value<String>, server: Option<&Json>) -> Value<String> {
    let Some(server) = server else {
        return Value::Null;
    };
    if let Some(text) = previous.as_ref_option() {
        if serde_json::from_str::<Json>(text).ok().as_ref() == Some(server) {
            return previous.clone();
        }
    }
    Value::Value(server.to_string())
}

/// The JSON merge patch (RFC 7396) that turns `old` into `new`, or `None`
/// when they are equal. Keys missing from `new` become `null` (removed, or
/// reset to the server's default).
pub fn merge_diff(old: &Json, new: &Json) -> Option<Json> {
    match (old, new) {
        (Json::Object(old), Json::Object(new)) => {
            let mut patch = Map::new();
            for (key, new_value) in new {
                match old.get(key) {
                    Some(old_value) => {
                        if let Some(diff) = merge_diff(old_value, new_value) {
                            patch.insert(key.clone(), diff);
                        }
                    }
                    None if new_value.is_null() => {}
                    None => {
                        patch.insert(key.clone(), new_value.clone());
                    }
                }
            }
            for key in old.keys() {
                if !new.contains_key(key) {
                    patch.insert(key.clone(), Json::Null);
                }
            }
            (!patch.is_empty()).then_some(Json::Object(patch))
        }
        _ if old == new => None,
        _ => Some(new.clone()),
    }
}

/// `namespace/name`, the ID of every resource and what `terraform import`
/// takes (unknown while either part is).
pub fn resource_id(namespace: &Value<String>, name: &Value<String>) -> Value<String> {
    match (namespace, name) {
        (Value::Value(namespace), Value::Value(name)) => Value::Value(format!("{namespace}/{name}")),
        (Value::Null, _) | (_, Value::Null) => Value::Null,
        _ => Value::Unknown,
    }
}

/// Splits an import ID: `namespace/name`, or a bare `name` in
/// `default_namespace`.
pub fn parse_import_id(
    what: &'static str,
    id: &str,
    default_namespace: &Value<String>,
) -> Result<(String, String), String> {
    let usage = "expected namespace/name (or just name, in the provider's namespace)";
    let (namespace, name) = match id.split_once('/') {
        Some((namespace, name)) => (namespace.to_string(), name.to_string()),
        None => match default_namespace.as_ref_option() {
            Some(namespace) => (namespace.clone(), id.to_string()),
            None => return Err(format!("the provider's namespace is not known; {usage}")),
        },
    };
    sless_api::validate_name("namespace", &namespace).map_err(|e| format!("{e}; {usage}"))?;
    sless_api::validate_name(what, &name).map_err(|e| format!("{e}; {usage}"))?;
    Ok((namespace, name))
}

/// Splits the import ID of an object that lives under a parent:
/// `namespace/parent/name`, or `parent/name` in `default_namespace`.
pub fn parse_child_import_id(
    parent: &'static str,
    what: &'static str,
    id: &str,
    default_namespace: &Value<String>,
) -> Result<(String, Option<String>, String), String> {
    let usage = format!("expected namespace/{parent}/{what} (or {parent}/{what}, in the provider's namespace)");
    let (rest, name) = id.rsplit_once('/').ok_or_else(|| usage.clone())?;
    let (namespace, parent_name) = parse_import_id(parent, rest, default_namespace).map_err(|_| usage.clone())?;
    sless_api::validate_name(what, name).map_err(|e| format!("{e}; {usage}"))?;
    Ok((namespace, Some(parent_name), name.to_string()))
}

/// Checks a name attribute is a DNS label, with the error on the attribute.
pub fn check_name(diags: &mut Diagnostics, what: &'static str, value: &Value<String>, attribute: &'static str) {
    if let Some(name) = value.as_ref_option() {
        if let Err(e) = sless_api::validate_name(what, name) {
            error(diags, format!("Invalid {attribute}"), e.to_string(), Some(attribute));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn merge_diffs_send_only_changes_and_null_out_removed_keys() {
        let old = json!({"memory_mb": 256, "env": {"A": "1", "B": "2"}, "replicas": 2, "entrypoint": "h.handle"});
        let new = json!({"memory_mb": 512, "env": {"A": "1", "C": "3"}, "replicas": null, "entrypoint": "h.handle"});
        assert_eq!(
            merge_diff(&old, &new),
            Some(json!({"memory_mb": 512, "env": {"B": null, "C": "3"}, "replicas": null}))
        );
        assert_eq!(merge_diff(&old, &old), None);
        assert_eq!(merge_diff(&json!({"a": null}), &json!({})), Some(json!({"a": null})));
        assert_eq!(merge_diff(&json!({}), &json!({"a": null})), None);
        assert_eq!(
            merge_diff(&json!({"e": [1, 2]}), &json!({"e": [1]})),
            Some(json!({"e": [1]}))
        );
    }

    #[test]
    fn json_attributes_keep_the_practitioners_formatting_when_equal() {
        let previous = Value::Value("{ \"b\": 1,\n \"a\": [true] }".to_string());
        assert_eq!(json_attribute(&previous, Some(&json!({"a": [true], "b": 1}))), previous);
        assert_eq!(
            json_attribute(&previous, Some(&json!({"a": [false]}))),
            Value::Value("{\"a\":[false]}".to_string())
        );
        assert_eq!(json_attribute(&previous, None), Value::Null);
        assert_eq!(
            json_attribute(&Value::Unknown, Some(&json!({}))),
            Value::Value("{}".to_string())
        );
    }

    #[test]
    fn import_ids_are_namespace_slash_name_or_a_bare_name() {
        let default = Value::Value("default".to_string());
        assert_eq!(
            parse_import_id("function", "team-a/hello", &default),
            Ok(("team-a".into(), "hello".into()))
        );
        assert_eq!(
            parse_import_id("function", "hello", &default),
            Ok(("default".into(), "hello".into()))
        );
        assert!(parse_import_id("function", "a/b/c", &default)
            .unwrap_err()
            .contains("namespace/name"));
        assert!(parse_import_id("function", "Hello", &default).is_err());
        assert!(parse_import_id("function", "hello", &Value::Unknown).is_err());
        assert_eq!(
            parse_child_import_id("function", "alias", "team-a/hello/live", &default),
            Ok(("team-a".into(), Some("hello".into()), "live".into()))
        );
        assert_eq!(
            parse_child_import_id("function", "alias", "hello/live", &default),
            Ok(("default".into(), Some("hello".into()), "live".into()))
        );
        for bad in ["live", "a/b/c/d", "hello/Live", "/live"] {
            assert!(
                parse_child_import_id("function", "alias", bad, &default).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn numbers_out_of_range_are_errors_on_their_attribute() {
        let mut diags = Diagnostics::default();
        assert_eq!(
            to_u32(&mut diags, &Value::Value(Number::Whole(512)), "memory_mb"),
            Some(512)
        );
        assert_eq!(to_u32(&mut diags, &Value::Null, "memory_mb"), None);
        assert!(diags.errors.is_empty());
        assert_eq!(to_u32(&mut diags, &Value::Value(Number::Whole(-1)), "memory_mb"), None);
        assert_eq!(diags.errors[0].attribute, tf_provider::AttributePath::new("memory_mb"));
        let half = Value::Value(Number::Decimal("256.5".into()));
        assert_eq!(to_u32(&mut diags, &half, "memory_mb"), None);
        assert_eq!(
            diags.errors[1].detail,
            "memory_mb must be a whole number between 0 and 4294967295, got 256.5."
        );
        let huge = Value::Value(Number::Decimal("9223372036854775808".into()));
        assert_eq!(to_u64(&mut diags, &huge, "run_id"), None);
        assert_eq!(diags.errors.len(), 3);
    }

    #[test]
    fn ids_join_namespace_and_name() {
        let v = |s: &str| Value::Value(s.to_string());
        assert_eq!(resource_id(&v("ns"), &v("f")), v("ns/f"));
        assert_eq!(resource_id(&Value::Unknown, &v("f")), Value::Unknown);
    }
}
