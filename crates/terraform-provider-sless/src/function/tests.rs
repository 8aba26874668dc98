//! Plan logic of `sless_function`: defaults, code changes in place, replacing
//! changes, and validation errors on the right attribute.

use std::collections::BTreeMap;

use tf_provider::value::Value;
use tf_provider::Diagnostics;

use super::secrets::SecretEnvState;
use super::state::spec_json;
use super::{FunctionResource, FunctionState};
use crate::number::Number;
use crate::proposal::propose;
use crate::resource::{plan, schema, validate};

const HASH_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const HASH_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

fn s(text: &str) -> Value<String> {
    Value::Value(text.to_string())
}

fn config() -> FunctionState {
    FunctionState {
        name: s("hello"),
        runtime: s("python3.11"),
        filename: s("hello.zip"),
        code_hash: s(HASH_A),
        ..FunctionState::default()
    }
}

/// What the server holds after `config()` was applied.
fn applied() -> FunctionState {
    FunctionState {
        id: s("default/hello"),
        namespace: s("default"),
        entrypoint: s("handler.handle"),
        env: Value::Value(BTreeMap::new()),
        memory_mb: Value::Value(Number::Whole(256)),
        timeout_sec: Value::Value(Number::Whole(30)),
        concurrency: Value::Value(Number::Whole(8)),
        min_instances: Value::Value(Number::Whole(0)),
        max_instances: Value::Value(Number::Whole(4)),
        build_timeout_sec: Value::Value(Number::Whole(300)),
        network: s("internet"),
        tmp_mb: Value::Value(Number::Whole(64)),
        expose_errors: Value::Value(false),
        env_from_secrets: Value::Value(Vec::new()),
        secret_files: Value::Value(Vec::new()),
        phase: s("Ready"),
        version: Value::Value(1),
        url: s("http://127.0.0.1:8080/fn/default/hello"),
        ..config()
    }
}

fn no_file(_: &str) -> Option<String> {
    None
}

/// Plans `config` over `prior` as Terraform would ask, in `namespace`,
/// with files hashed by `file_hash`.
fn plan_with(
    file_hash: fn(&str) -> Option<String>,
    namespace: &str,
    prior: Option<&FunctionState>,
    config: &FunctionState,
) -> (FunctionState, Vec<&'static str>) {
    let proposed = propose(&schema::<FunctionResource>(), prior, config);
    let mut diags = Diagnostics::default();
    let resource = FunctionResource { file_hash };
    let planned = plan(&resource, &mut diags, prior, config.clone(), proposed, &s(namespace));
    assert!(diags.errors.is_empty(), "{:?}", diags.errors);
    planned
}

/// Plans `config` over `prior` as Terraform would ask.
fn plan_of(prior: Option<&FunctionState>, config: &FunctionState) -> (FunctionState, Vec<&'static str>) {
    plan_with(no_file, "default", prior, config)
}

#[test]
fn a_create_plans_the_servers_defaults_and_leaves_version_and_url_unknown() {
    let (planned, replace) = plan_of(None, &config());
    assert!(replace.is_empty());
    assert_eq!(planned.namespace, s("default"));
    assert_eq!(planned.id, s("default/hello"));
    assert_eq!(planned.entrypoint, s("handler.handle"));
    assert_eq!(planned.env, Value::Value(BTreeMap::new()));
    assert_eq!(planned.memory_mb, Value::Value(Number::Whole(256)));
    assert_eq!(planned.max_instances, Value::Value(Number::Whole(4)));
    assert_eq!(planned.build_timeout_sec, Value::Value(Number::Whole(300)));
    assert_eq!(planned.network, s("internet"));
    assert_eq!(planned.tmp_mb, Value::Value(Number::Whole(64)));
    assert_eq!(planned.expose_errors, Value::Value(false));
    assert_eq!(planned.replicas, Value::Null);
    assert_eq!(planned.phase, s("Ready"));
    assert_eq!(planned.version, Value::Unknown);
    assert_eq!(planned.url, Value::Unknown);
}

#[test]
fn an_unchanged_configuration_plans_exactly_the_prior_state() {
    let prior = applied();
    let (planned, replace) = plan_of(Some(&prior), &config());
    assert_eq!(planned, prior);
    assert!(replace.is_empty());
}

#[test]
fn a_new_code_hash_updates_in_place_and_rebuilds() {
    let prior = applied();
    let config = FunctionState {
        code_hash: s(HASH_B),
        ..config()
    };
    let (planned, replace) = plan_of(Some(&prior), &config);
    assert!(replace.is_empty(), "a code change must not replace: {replace:?}");
    assert_eq!(planned.code_hash, s(HASH_B));
    assert_eq!(planned.version, Value::Unknown, "a rebuild makes a new version");
    assert_eq!(planned.phase, s("Ready"));
    assert_eq!(planned.url, prior.url);
}

#[test]
fn name_namespace_and_runtime_changes_replace() {
    let prior = applied();
    let runtime = FunctionState {
        runtime: s("nodejs20"),
        ..config()
    };
    assert_eq!(plan_of(Some(&prior), &runtime).1, ["runtime"]);
    let renamed = FunctionState {
        name: s("hello2"),
        namespace: s("team-a"),
        ..config()
    };
    assert_eq!(plan_of(Some(&prior), &renamed).1, ["name", "namespace"]);
}

#[test]
fn spec_changes_update_in_place_without_a_rebuild() {
    let prior = applied();
    let mut env = BTreeMap::new();
    env.insert("GREETING".to_string(), s("hi"));
    let config = FunctionState {
        memory_mb: Value::Value(Number::Whole(512)),
        env: Value::Value(env.clone()),
        replicas: Value::Value(Number::Whole(1)),
        ..config()
    };
    let (planned, replace) = plan_of(Some(&prior), &config);
    assert!(replace.is_empty());
    assert_eq!(planned.memory_mb, Value::Value(Number::Whole(512)));
    assert_eq!(planned.env, Value::Value(env));
    assert_eq!(planned.replicas, Value::Value(Number::Whole(1)));
    assert_eq!(planned.version, Value::Value(1), "no new code, no new version");
}

#[test]
fn removing_a_setting_from_the_configuration_plans_the_default_again() {
    let prior = FunctionState {
        memory_mb: Value::Value(Number::Whole(512)),
        replicas: Value::Value(Number::Whole(2)),
        ..applied()
    };
    let (planned, _) = plan_of(Some(&prior), &config());
    assert_eq!(planned.memory_mb, Value::Value(Number::Whole(256)));
    assert_eq!(planned.replicas, Value::Null);
}

#[test]
fn an_unset_code_hash_follows_the_file() {
    let config = FunctionState {
        code_hash: Value::Null,
        ..config()
    };
    let prior = applied();
    let file_b = |_: &str| Some(HASH_B.to_string());
    let (planned, _) = plan_with(file_b, "default", Some(&prior), &config);
    assert_eq!(planned.code_hash, s(HASH_B));
    assert_eq!(planned.version, Value::Unknown);

    // Unreadable while planning: the prior hash stands if the path did not change.
    let (planned, _) = plan_of(Some(&prior), &config);
    assert_eq!(planned, prior);
    let (planned, _) = plan_of(None, &config);
    assert_eq!(planned.code_hash, Value::Unknown);
}

#[test]
fn a_failed_build_is_applied_again() {
    let prior = FunctionState {
        phase: s("Failed"),
        ..applied()
    };
    let (planned, _) = plan_of(Some(&prior), &config());
    assert_eq!(planned.phase, s("Ready"));
    assert_eq!(planned.version, Value::Unknown);
}

#[test]
fn the_provider_namespace_is_planned_when_none_is_set() {
    let (planned, _) = plan_with(no_file, "team-a", None, &config());
    assert_eq!(planned.namespace, s("team-a"));
    assert_eq!(planned.id, s("team-a/hello"));
}

fn errors_of(config: &FunctionState) -> Vec<(String, String)> {
    let mut diags = Diagnostics::default();
    validate::<FunctionResource>(&mut diags, config.clone());
    diags
        .errors
        .iter()
        .map(|d| (d.attribute.to_string(), d.detail.to_string()))
        .collect()
}

#[test]
fn validation_names_the_attribute() {
    assert!(errors_of(&config()).is_empty());
    let bad = |state: FunctionState| errors_of(&state).into_iter().map(|(a, _)| a).collect::<Vec<_>>();
    assert_eq!(
        bad(FunctionState {
            runtime: s("python2"),
            ..config()
        }),
        ["runtime"]
    );
    assert_eq!(
        bad(FunctionState {
            code_hash: s("not-a-hash"),
            ..config()
        }),
        ["code_hash"]
    );
    assert_eq!(
        bad(FunctionState {
            name: s("Hello_World"),
            ..config()
        }),
        ["name"]
    );
    assert_eq!(
        bad(FunctionState {
            memory_mb: Value::Value(Number::Whole(-5)),
            ..config()
        }),
        ["memory_mb"]
    );
    let range = errors_of(&FunctionState {
        min_instances: Value::Value(Number::Whole(5)),
        ..config()
    });
    assert_eq!(range[0].0, "min_instances");
    assert!(range[0].1.contains("must not exceed max_instances"), "{}", range[0].1);
    assert_eq!(
        bad(FunctionState {
            memory_mb: Value::Value(Number::Whole(1)),
            ..config()
        }),
        ["memory_mb"]
    );
    assert_eq!(
        bad(FunctionState {
            network: s("wifi"),
            ..config()
        }),
        ["network"]
    );
    assert_eq!(
        bad(FunctionState {
            replicas: Value::Value(Number::Whole(9)),
            ..config()
        }),
        ["replicas"]
    );
    assert_eq!(
        bad(FunctionState {
            tmp_mb: Value::Value(Number::Whole(0)),
            ..config()
        }),
        ["tmp_mb"]
    );
}

#[test]
fn validation_waits_for_unknown_values() {
    let config = FunctionState {
        min_instances: Value::Value(Number::Whole(5)),
        max_instances: Value::Unknown,
        runtime: Value::Unknown,
        ..config()
    };
    assert!(errors_of(&config).is_empty());
}

#[test]
fn a_null_secret_reference_that_shows_only_at_apply_fails_it_rather_than_dropping_the_list() {
    // Unknown while validating (so allowed then), null once applied.
    let entry = |key: Value<String>| {
        Value::Value(SecretEnvState {
            secret: s("db"),
            key,
            env: s("DB_PASSWORD"),
        })
    };
    let planned = FunctionState {
        env_from_secrets: Value::Value(vec![entry(s("password")), entry(Value::Null)]),
        ..applied()
    };
    let mut diags = Diagnostics::default();
    spec_json(&mut diags, &planned);
    let paths: Vec<String> = diags.errors.iter().map(|d| d.attribute.to_string()).collect();
    assert_eq!(paths, ["env_from_secrets[1].key"]);

    let validating = FunctionState {
        env_from_secrets: Value::Value(vec![entry(s("password")), entry(Value::Unknown)]),
        ..config()
    };
    assert!(errors_of(&validating).is_empty());
}
