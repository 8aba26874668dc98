//! Plan logic of `sless_job`: a new run_id replaces (and so reruns), run_id
//! 0 plans `Skipped`, event and function change in place.

use tf_provider::value::Value;
use tf_provider::Diagnostics;

use super::{JobResource, JobState};
use crate::number::Number;
use crate::proposal::propose;
use crate::resource::{plan, schema, validate};

fn s(text: &str) -> Value<String> {
    Value::Value(text.to_string())
}

fn config() -> JobState {
    JobState {
        name: s("greet"),
        function: s("hello"),
        event: s("{\"name\": \"terraform\"}"),
        run_id: Value::Value(Number::Whole(1)),
        ..JobState::default()
    }
}

fn plan_of(prior: Option<&JobState>, config: &JobState) -> (JobState, Vec<&'static str>) {
    let proposed = propose(&schema::<JobResource>(), prior, config);
    let mut diags = Diagnostics::default();
    let planned = plan(&JobResource, &mut diags, prior, config.clone(), proposed, &s("default"));
    assert!(diags.errors.is_empty(), "{:?}", diags.errors);
    planned
}

fn applied(config: &JobState) -> JobState {
    let (mut planned, _) = plan_of(None, config);
    if planned.phase.is_unknown() {
        planned.phase = s("Succeeded");
        planned.result = s("{\"message\":\"Hello, terraform!\"}");
        planned.error = Value::Null;
    }
    planned
}

#[test]
fn a_create_leaves_the_outcome_unknown_until_the_run() {
    let (planned, _) = plan_of(None, &config());
    assert_eq!(planned.id, s("default/greet"));
    assert_eq!(planned.wait_timeout_sec, Value::Value(Number::Whole(300)));
    assert_eq!(planned.phase, Value::Unknown);
    assert_eq!(planned.result, Value::Unknown);
}

#[test]
fn run_id_zero_plans_skipped() {
    let config = JobState {
        run_id: Value::Null,
        event: Value::Null,
        ..config()
    };
    let (planned, _) = plan_of(None, &config);
    assert_eq!(planned.run_id, Value::Value(Number::Whole(0)));
    assert_eq!(planned.event, s("{}"));
    assert_eq!(planned.phase, s("Skipped"));
    assert_eq!(planned.result, Value::Null);
}

#[test]
fn an_unchanged_configuration_plans_exactly_the_prior_state() {
    let prior = applied(&config());
    let (planned, replace) = plan_of(Some(&prior), &config());
    assert_eq!(planned, prior);
    assert!(replace.is_empty());
}

#[test]
fn a_new_run_id_replaces_the_job() {
    let prior = applied(&config());
    let config = JobState {
        run_id: Value::Value(Number::Whole(2)),
        ..config()
    };
    assert_eq!(plan_of(Some(&prior), &config).1, ["run_id"]);
}

#[test]
fn event_changes_update_in_place() {
    let prior = applied(&config());
    let config = JobState {
        event: s("{\"name\": \"other\"}"),
        ..config()
    };
    let (planned, replace) = plan_of(Some(&prior), &config);
    assert!(replace.is_empty());
    assert_eq!(planned.phase, prior.phase);
}

#[test]
fn validation_names_the_attribute() {
    let attributes = |config: &JobState| {
        let mut diags = Diagnostics::default();
        validate::<JobResource>(&mut diags, config.clone());
        diags.errors.iter().map(|d| d.attribute.to_string()).collect::<Vec<_>>()
    };
    assert!(attributes(&config()).is_empty());
    let bad = JobState {
        event: s("{"),
        run_id: Value::Value(Number::Whole(-1)),
        wait_timeout_sec: Value::Value(Number::Whole(100_000)),
        ..config()
    };
    assert_eq!(attributes(&bad), ["event", "run_id", "wait_timeout_sec"]);
}

#[test]
fn an_event_past_what_the_server_takes_is_refused_by_size() {
    let event_of = |bytes: usize| {
        // Spaces are not counted: the server measures compact JSON.
        let text = format!("  \"{}\"  ", "x".repeat(bytes - 2));
        let mut diags = Diagnostics::default();
        validate::<JobResource>(
            &mut diags,
            JobState {
                event: s(&text),
                ..config()
            },
        );
        diags.errors
    };
    assert!(event_of(sless_api::MAX_JOB_EVENT_BYTES).is_empty());
    let errors = event_of(sless_api::MAX_JOB_EVENT_BYTES + 1);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].attribute.to_string(), "event");
    assert_eq!(errors[0].summary, "event is too large");
    assert!(
        errors[0]
            .detail
            .starts_with("a job's event must be at most 262144 bytes as JSON, got 262145"),
        "{}",
        errors[0].detail
    );
}
