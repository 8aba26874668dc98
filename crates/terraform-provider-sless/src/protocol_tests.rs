//! Protocol-level checks: every schema matches its state struct and every
//! attribute says what a change to it does, states decode from the msgpack
//! Terraform sends (unknown values included), and the `Resource` impls
//! answer plan requests with the right replacements.

use std::collections::BTreeSet;

use sless_client::Client;
use tf_provider::schema::{AttributeConstraint, Schema};
use tf_provider::value::{Value, ValueEmpty};
use tf_provider::{AttributePath, Diagnostics, Provider, Resource};

use crate::connection::{Connection, Shared};
use crate::function::{FunctionResource, FunctionState};
use crate::job::{JobResource, JobState};
use crate::number::Number;
use crate::proposal::propose;
use crate::resource::{all_fields, fields, ApiResource, Managed};
use crate::trigger::{TriggerResource, TriggerState};
use crate::SlessProvider;

fn shared() -> Shared {
    let shared = Shared::default();
    shared.set(Connection {
        client: Client::new("http://127.0.0.1:9", "token").unwrap(),
        namespace: "default".into(),
    });
    shared
}

fn s(text: &str) -> Value<String> {
    Value::Value(text.to_string())
}

/// The top-level attributes and blocks: each is one key of the state.
fn attribute_names(schema: &Schema) -> BTreeSet<String> {
    schema
        .block
        .attributes
        .keys()
        .chain(schema.block.blocks.keys())
        .cloned()
        .collect()
}

fn state_keys<S: serde::Serialize + Default>() -> BTreeSet<String> {
    let json = serde_json::to_value(S::default()).unwrap();
    json.as_object().unwrap().keys().cloned().collect()
}

#[test]
fn every_schema_matches_its_state_struct() {
    let mut diags = Diagnostics::default();
    let function = Managed::new(FunctionResource::default(), shared())
        .schema(&mut diags)
        .unwrap();
    let trigger = Managed::new(TriggerResource, shared()).schema(&mut diags).unwrap();
    let job = Managed::new(JobResource, shared()).schema(&mut diags).unwrap();
    assert_eq!(attribute_names(&function), state_keys::<FunctionState>());
    assert_eq!(attribute_names(&trigger), state_keys::<TriggerState>());
    assert_eq!(attribute_names(&job), state_keys::<JobState>());
    for schema in [&function, &trigger, &job] {
        for name in ["id", "name", "namespace"] {
            assert!(schema.block.attributes.contains_key(name), "{name}");
        }
        assert_eq!(schema.block.attributes["id"].constraint, AttributeConstraint::Computed);
        assert_eq!(
            schema.block.attributes["name"].constraint,
            AttributeConstraint::Required
        );
    }
    assert!(trigger.block.attributes["broker_url"].sensitive);
    assert!(diags.errors.is_empty());
}

/// Every field of the state struct has one row in the attribute table, which
/// says what a change to it does consistently with its schema entry and
/// description.
fn check_table<R: ApiResource>() {
    let fields = all_fields::<R>();
    if let Err(problem) = fields::check(&fields) {
        panic!("sless_{}: {problem}", R::NOUN);
    }
    let names: BTreeSet<String> = fields.iter().map(|field| field.name.to_string()).collect();
    assert_eq!(
        names.len(),
        fields.len(),
        "sless_{}: an attribute is listed twice",
        R::NOUN
    );
    assert_eq!(
        names,
        state_keys::<R::State>(),
        "sless_{}: the attribute table and the state struct differ",
        R::NOUN
    );
}

#[test]
fn every_attribute_says_whether_a_change_replaces_or_updates_in_place() {
    check_table::<FunctionResource>();
    check_table::<TriggerResource>();
    check_table::<JobResource>();
    check_table::<crate::alias::AliasResource>();
    check_table::<crate::secret::SecretResource>();
    let replacing = |fields: Vec<fields::Field>| {
        fields
            .into_iter()
            .filter(|field| field.on_change == fields::OnChange::Replace)
            .map(|field| field.name)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        replacing(all_fields::<FunctionResource>()),
        ["name", "namespace", "runtime"]
    );
    assert_eq!(
        replacing(all_fields::<TriggerResource>()),
        ["name", "namespace", "type"]
    );
    assert_eq!(replacing(all_fields::<JobResource>()), ["name", "namespace", "run_id"]);
}

#[test]
fn the_provider_schema_hides_the_token_and_serves_its_resources() {
    let provider = SlessProvider::default();
    let mut diags = Diagnostics::default();
    let schema = provider.schema(&mut diags).unwrap();
    assert_eq!(
        attribute_names(&schema),
        ["endpoint", "namespace", "token"].map(String::from).into()
    );
    assert!(schema.block.attributes["token"].sensitive);
    let resources = provider.get_resources(&mut diags).unwrap();
    let names: BTreeSet<_> = resources.keys().cloned().collect();
    assert_eq!(
        names,
        ["alias", "function", "job", "secret", "trigger"]
            .map(String::from)
            .into()
    );
}

/// A minimal msgpack writer for the values cty sends.
enum Mp<'a> {
    Str(&'a str),
    Int(u32),
    Bool(bool),
    Nil,
    /// cty's unknown value: fixext1 of extension type 0.
    Unknown,
    Map(Vec<(&'a str, Mp<'a>)>),
    /// An empty list: how Terraform sends an optional block that is absent.
    NoBlock,
}

fn encode(value: &Mp, out: &mut Vec<u8>) {
    match value {
        Mp::Str(text) => {
            assert!(text.len() < 256);
            out.extend([0xd9, text.len() as u8]);
            out.extend(text.as_bytes());
        }
        Mp::Int(n) => {
            out.push(0xce);
            out.extend(n.to_be_bytes());
        }
        Mp::Bool(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Mp::Nil => out.push(0xc0),
        Mp::Unknown => out.extend([0xd4, 0x00, 0x00]),
        Mp::NoBlock => out.push(0x90),
        Mp::Map(entries) => {
            out.push(0xde);
            out.extend((entries.len() as u16).to_be_bytes());
            for (key, value) in entries {
                encode(&Mp::Str(key), out);
                encode(value, out);
            }
        }
    }
}

#[test]
fn states_decode_from_terraforms_msgpack_with_unknowns_and_nulls() {
    let message = Mp::Map(vec![
        ("id", Mp::Unknown),
        ("name", Mp::Str("hello")),
        ("namespace", Mp::Nil),
        ("runtime", Mp::Str("python3.11")),
        ("entrypoint", Mp::Nil),
        ("env", Mp::Map(vec![("GREETING", Mp::Str("hi"))])),
        ("memory_mb", Mp::Int(512)),
        ("timeout_sec", Mp::Nil),
        ("concurrency", Mp::Nil),
        ("min_instances", Mp::Nil),
        ("max_instances", Mp::Nil),
        ("replicas", Mp::Nil),
        ("build_timeout_sec", Mp::Nil),
        ("async", Mp::NoBlock),
        ("network", Mp::Str("none")),
        ("tmp_mb", Mp::Nil),
        ("expose_errors", Mp::Bool(true)),
        ("filename", Mp::Str("hello.zip")),
        ("code_hash", Mp::Unknown),
        ("phase", Mp::Unknown),
        ("version", Mp::Unknown),
        ("url", Mp::Unknown),
    ]);
    let mut bytes = Vec::new();
    encode(&message, &mut bytes);
    let state: FunctionState = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(state.name, s("hello"));
    assert_eq!(state.namespace, Value::Null);
    assert_eq!(state.memory_mb, Value::Value(Number::Whole(512)));
    assert_eq!(state.code_hash, Value::Unknown);
    assert_eq!(state.version, Value::Unknown);
    assert_eq!(state.network, s("none"));
    assert_eq!(state.expose_errors, Value::Value(true));
    let env = state.env.as_ref_option().unwrap();
    assert_eq!(env["GREETING"], s("hi"));

    // What the provider answers decodes to the same state.
    let answer = rmp_serde::to_vec_named(&state).unwrap();
    let back: FunctionState = rmp_serde::from_slice(&answer).unwrap();
    assert_eq!(back, state);
}

fn replaced(paths: &[AttributePath]) -> Vec<String> {
    paths.iter().map(|p| p.to_string()).collect()
}

/// Runs `Resource::plan_update` as the gRPC handler does, with Terraform's
/// proposal.
async fn plan_update<R, S>(resource: &R, schema: &Schema, prior: S, config: S) -> (S, Vec<String>)
where
    R: for<'a> Resource<State<'a> = S, PrivateState<'a> = ValueEmpty, ProviderMetaState<'a> = ValueEmpty>,
    S: serde::Serialize + serde::de::DeserializeOwned + Clone + Send,
{
    let mut diags = Diagnostics::default();
    let proposed = propose(schema, Some(&prior), &config);
    let (planned, _, replace) = resource
        .plan_update(&mut diags, prior, proposed, config, ValueEmpty::Null, ValueEmpty::Null)
        .await
        .expect("a plan");
    assert!(diags.errors.is_empty(), "{:?}", diags.errors);
    (planned, replaced(&replace))
}

fn function_config(code_hash: &str, runtime: &str) -> FunctionState {
    FunctionState {
        name: s("hello"),
        runtime: s(runtime),
        filename: s("/nonexistent/hello.zip"),
        code_hash: s(code_hash),
        ..FunctionState::default()
    }
}

#[tokio::test]
async fn function_plans_update_code_in_place_and_replace_a_new_runtime() {
    let resource = Managed::new(FunctionResource::default(), shared());
    let schema = resource.schema(&mut Diagnostics::default()).unwrap();
    let (a, b) = ("a".repeat(64), "b".repeat(64));
    let mut diags = Diagnostics::default();
    let config = function_config(&a, "python3.11");
    let (mut prior, _) = resource
        .plan_create(&mut diags, propose(&schema, None, &config), config, ValueEmpty::Null)
        .await
        .unwrap();
    prior.version = Value::Value(1);
    prior.url = s("http://127.0.0.1:8080/fn/default/hello");

    let (planned, replace) = plan_update(&resource, &schema, prior.clone(), function_config(&a, "python3.11")).await;
    assert_eq!(planned, prior, "no change plans the prior state");
    assert!(replace.is_empty());

    let (planned, replace) = plan_update(&resource, &schema, prior.clone(), function_config(&b, "python3.11")).await;
    assert!(replace.is_empty(), "code_hash changes update in place: {replace:?}");
    assert_eq!(planned.version, Value::Unknown);

    let (_, replace) = plan_update(&resource, &schema, prior, function_config(&a, "nodejs20")).await;
    assert_eq!(replace, ["runtime"]);
}

#[tokio::test]
async fn trigger_plans_toggle_enabled_in_place() {
    let resource = Managed::new(TriggerResource, shared());
    let schema = resource.schema(&mut Diagnostics::default()).unwrap();
    let config = |enabled: bool| TriggerState {
        name: s("web"),
        function: s("hello"),
        kind: s("http"),
        enabled: Value::Value(enabled),
        ..TriggerState::default()
    };
    let (mut prior, _) = resource
        .plan_create(
            &mut Diagnostics::default(),
            propose(&schema, None, &config(true)),
            config(true),
            ValueEmpty::Null,
        )
        .await
        .unwrap();
    prior.url = s("http://127.0.0.1:8080/fn/default/hello");
    let (planned, replace) = plan_update(&resource, &schema, prior, config(false)).await;
    assert!(replace.is_empty(), "{replace:?}");
    assert_eq!(planned.enabled, Value::Value(false));
}

#[tokio::test]
async fn job_plans_replace_on_a_new_run_id() {
    let resource = Managed::new(JobResource, shared());
    let schema = resource.schema(&mut Diagnostics::default()).unwrap();
    let config = |run_id: i64| JobState {
        name: s("greet"),
        function: s("hello"),
        run_id: Value::Value(Number::Whole(run_id)),
        ..JobState::default()
    };
    let (mut prior, _) = resource
        .plan_create(
            &mut Diagnostics::default(),
            propose(&schema, None, &config(1)),
            config(1),
            ValueEmpty::Null,
        )
        .await
        .unwrap();
    prior.phase = s("Succeeded");
    prior.result = s("{}");
    prior.error = Value::Null;
    let (planned, replace) = plan_update(&resource, &schema, prior.clone(), config(1)).await;
    assert_eq!(planned, prior);
    assert!(replace.is_empty());
    let (_, replace) = plan_update(&resource, &schema, prior, config(2)).await;
    assert_eq!(replace, ["run_id"]);
}
