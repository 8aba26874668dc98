use sless_api::Secret;
use tf_provider::value::Value;

use super::state::{from_api, plan, SecretState};

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
