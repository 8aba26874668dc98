//! Plan logic of `sless_trigger`: `enabled` in place, type changes replace,
//! per-type defaults and validation.

use tf_provider::value::Value;
use tf_provider::Diagnostics;

use super::{TriggerResource, TriggerState};
use crate::number::Number;
use crate::proposal::propose;
use crate::resource::{plan, schema, validate};

fn s(text: &str) -> Value<String> {
    Value::Value(text.to_string())
}

fn http() -> TriggerState {
    TriggerState {
        name: s("hello-http"),
        function: s("hello"),
        kind: s("http"),
        ..TriggerState::default()
    }
}

fn cron() -> TriggerState {
    TriggerState {
        name: s("nightly"),
        function: s("hello"),
        kind: s("cron"),
        schedule: s("0 3 * * *"),
        event: s("{\"task\": \"report\"}"),
        ..TriggerState::default()
    }
}

fn plan_of(prior: Option<&TriggerState>, config: &TriggerState) -> (TriggerState, Vec<&'static str>) {
    let proposed = propose(&schema::<TriggerResource>(), prior, config);
    let mut diags = Diagnostics::default();
    let planned = plan(
        &TriggerResource,
        &mut diags,
        prior,
        config.clone(),
        proposed,
        &s("default"),
    );
    assert!(diags.errors.is_empty(), "{:?}", diags.errors);
    planned
}

/// The state after applying `config`, as the server reports it.
fn applied(config: &TriggerState) -> TriggerState {
    let (mut planned, _) = plan_of(None, config);
    if planned.url.is_unknown() {
        planned.url = s("http://127.0.0.1:8080/fn/default/hello");
    }
    planned
}

#[test]
fn creates_plan_defaults_per_type() {
    let (planned, replace) = plan_of(None, &http());
    assert!(replace.is_empty());
    assert_eq!(planned.id, s("default/hello-http"));
    assert_eq!(planned.enabled, Value::Value(true));
    assert_eq!(planned.timezone, Value::Null);
    assert_eq!(planned.url, Value::Unknown);

    let (planned, _) = plan_of(None, &cron());
    assert_eq!(planned.timezone, s("UTC"));
    assert_eq!(planned.url, Value::Null, "only http triggers have a URL");
}

#[test]
fn an_unchanged_configuration_plans_exactly_the_prior_state() {
    for config in [http(), cron()] {
        let prior = applied(&config);
        let (planned, replace) = plan_of(Some(&prior), &config);
        assert_eq!(planned, prior);
        assert!(replace.is_empty());
    }
}

#[test]
fn enabled_changes_in_place() {
    let prior = applied(&http());
    let config = TriggerState {
        enabled: Value::Value(false),
        ..http()
    };
    let (planned, replace) = plan_of(Some(&prior), &config);
    assert!(replace.is_empty(), "enabled must never replace: {replace:?}");
    assert_eq!(planned.enabled, Value::Value(false));
    assert_eq!(planned.url, prior.url);
}

#[test]
fn a_type_change_replaces_and_a_function_change_does_not() {
    let prior = applied(&http());
    let (_, replace) = plan_of(Some(&prior), &cron());
    assert!(replace.contains(&"type"), "{replace:?}");

    let config = TriggerState {
        function: s("other"),
        ..http()
    };
    let (planned, replace) = plan_of(Some(&prior), &config);
    assert!(replace.is_empty());
    assert_eq!(planned.url, Value::Unknown, "the URL names the function");
}

fn attributes_of(config: &TriggerState) -> Vec<String> {
    let mut diags = Diagnostics::default();
    validate::<TriggerResource>(&mut diags, config.clone());
    diags.errors.iter().map(|d| d.attribute.to_string()).collect()
}

#[test]
fn validation_names_the_attribute() {
    assert!(attributes_of(&http()).is_empty());
    assert!(attributes_of(&cron()).is_empty());
    let no_schedule = TriggerState {
        schedule: Value::Null,
        ..cron()
    };
    assert_eq!(attributes_of(&no_schedule), ["schedule"]);
    let http_with_schedule = TriggerState {
        schedule: s("* * * * *"),
        ..http()
    };
    assert_eq!(attributes_of(&http_with_schedule), ["schedule"]);
    let bad_event = TriggerState {
        event: s("{not json"),
        ..cron()
    };
    assert_eq!(attributes_of(&bad_event), ["event"]);
    let event_of = |chars: usize| TriggerState {
        event: s(&format!("\"{}\"", "x".repeat(chars))),
        ..cron()
    };
    assert!(attributes_of(&event_of(sless_api::MAX_CRON_EVENT_BYTES - 2)).is_empty());
    assert_eq!(attributes_of(&event_of(sless_api::MAX_CRON_EVENT_BYTES - 1)), ["event"]);
    let bad_type = TriggerState {
        kind: s("webhook"),
        ..http()
    };
    assert_eq!(attributes_of(&bad_type), ["type"]);
    let amqp = TriggerState {
        kind: s("amqp"),
        broker_url: s("amqp://guest:guest@127.0.0.1:5672/%2f"),
        prefetch: Value::Value(Number::Whole(0)),
        ..http()
    };
    assert_eq!(attributes_of(&amqp), ["prefetch", "queue"]);
}

#[test]
fn validation_waits_for_unknown_values() {
    let config = TriggerState {
        schedule: Value::Unknown,
        kind: s("cron"),
        ..http()
    };
    assert!(attributes_of(&config).is_empty());
}
