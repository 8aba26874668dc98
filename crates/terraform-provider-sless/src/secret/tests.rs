use sless_api::Secret;
use tf_provider::value::Value;

use tf_provider::Diagnostics;

use super::state::{from_api, plan, spec_json, SecretState};
use crate::convert::merge_diff;

fn state(pairs: &[(&str, &str)]) -> SecretState {
    SecretState {
        data: Value::Value(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Value::Value(v.to_string())))
                .collect(),
        ),
        ..SecretState::default()
    }
}

#[test]
fn a_read_keeps_the_configured_values_of_the_keys_the_server_has() {
    let previous = state(&[("password", "hunter2"), ("gone", "x")]);
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "name": "db", "namespace": "ns", "keys": ["added", "password"],
        "created_at": "2026-12-04T00:00:00Z", "updated_at": "2026-12-04T00:00:01Z"
    }))
    .unwrap();
    let read = from_api(&secret, &previous);
    let data = read.data.as_ref_option().unwrap();
    assert_eq!(data["password"], Value::Value("hunter2".to_string()));
    assert_eq!(data["added"], Value::Null);
    assert!(!data.contains_key("gone"));
    assert_eq!(read.id, Value::Value("ns/db".to_string()));
}

#[test]
fn the_update_time_is_unknown_only_when_values_change() {
    let mut prior = state(&[("password", "a")]);
    prior.updated_at = Value::Value("then".into());
    let mut same = state(&[("password", "a")]);
    plan(Some(&prior), &mut same);
    assert_eq!(same.updated_at, Value::Value("then".to_string()));
    assert_eq!(same.keys, Value::Value(vec![Value::Value("password".to_string())]));
    let mut changed = state(&[("password", "b")]);
    plan(Some(&prior), &mut changed);
    assert_eq!(changed.updated_at, Value::Unknown);
}

fn server_secret(keys: &[&str], updated_at: &str) -> Secret {
    serde_json::from_value(serde_json::json!({
        "name": "db", "namespace": "ns", "keys": keys,
        "created_at": "2026-12-04T00:00:00Z", "updated_at": updated_at
    }))
    .unwrap()
}

#[test]
fn a_key_added_elsewhere_is_removed_by_the_next_update() {
    let mut previous = state(&[("password", "a")]);
    previous.updated_at = Value::Value("2026-12-04T00:00:01+00:00".into());
    let read = from_api(
        &server_secret(&["extra", "password"], "2026-12-04T00:00:01Z"),
        &previous,
    );
    let patch = merge_diff(
        &spec_json(&mut Diagnostics::default(), &read),
        &spec_json(&mut Diagnostics::default(), &state(&[("password", "a")])),
    );
    assert_eq!(patch, Some(serde_json::json!({"data": {"extra": null}})));
}

#[test]
fn a_newer_update_time_means_the_values_are_written_again() {
    let mut previous = state(&[("password", "a")]);
    previous.updated_at = Value::Value("2026-12-04T00:00:01+00:00".into());
    let unchanged = from_api(&server_secret(&["password"], "2026-12-04T00:00:01Z"), &previous);
    assert_eq!(unchanged.data, previous.data);
    let changed = from_api(&server_secret(&["password"], "2026-12-04T00:05:00Z"), &previous);
    let patch = merge_diff(
        &spec_json(&mut Diagnostics::default(), &changed),
        &spec_json(&mut Diagnostics::default(), &state(&[("password", "a")])),
    );
    assert_eq!(patch, Some(serde_json::json!({"data": {"password": "a"}})));
}
