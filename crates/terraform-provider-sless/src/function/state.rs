//! `sless_function`'s attributes: the state struct Terraform exchanges, its
//! attribute table, and the mapping to and from the API's `Function`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value as Json};
use sless_api::{Function, FunctionSpec, Phase};
use tf_provider::schema::AttributeType;
use tf_provider::value::{self, Value};
use tf_provider::Diagnostics;

use crate::convert::{map_json, resource_id, to_u32};
use crate::number::Number;
use crate::resource::fields::{replaces, reported, updates, updates_block, Field};
use crate::schema::{defaulted, optional, required, string_map};

/// The number attributes that are spec fields of the same name.
pub const NUMBERS: &[&str] = &[
    "memory_mb",
    "timeout_sec",
    "concurrency",
    "min_instances",
    "max_instances",
    "replicas",
    "build_timeout_sec",
    "tmp_mb",
];

/// A `sless_function` as Terraform holds it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FunctionState {
    pub id: Value<String>,
    pub name: Value<String>,
    pub namespace: Value<String>,
    pub runtime: Value<String>,
    pub entrypoint: Value<String>,
    pub env: Value<BTreeMap<String, Value<String>>>,
    pub memory_mb: Value<Number>,
    pub timeout_sec: Value<Number>,
    pub concurrency: Value<Number>,
    pub min_instances: Value<Number>,
    pub max_instances: Value<Number>,
    pub replicas: Value<Number>,
    pub build_timeout_sec: Value<Number>,
    #[serde(rename = "async", with = "value::serde_as_vec")]
    pub async_settings: Value<super::asynchronous::AsyncState>,
    pub network: Value<String>,
    pub tmp_mb: Value<Number>,
    pub expose_errors: Value<bool>,
    pub env_from_secrets: super::secrets::EnvList,
    pub secret_files: super::secrets::FilesList,
    pub filename: Value<String>,
    pub code_hash: Value<String>,
    pub phase: Value<String>,
    pub version: Value<i64>,
    pub url: Value<String>,
}

impl FunctionState {
    /// The number attribute called `field` (one of `NUMBERS`).
    pub fn number(&self, field: &str) -> &Value<Number> {
        match field {
            "memory_mb" => &self.memory_mb,
            "timeout_sec" => &self.timeout_sec,
            "concurrency" => &self.concurrency,
            "min_instances" => &self.min_instances,
            "max_instances" => &self.max_instances,
            "replicas" => &self.replicas,
            "build_timeout_sec" => &self.build_timeout_sec,
            "tmp_mb" => &self.tmp_mb,
            other => unreachable!("{other} is not a number attribute of sless_function"),
        }
    }

    pub fn number_mut(&mut self, field: &str) -> &mut Value<Number> {
        match field {
            "memory_mb" => &mut self.memory_mb,
            "timeout_sec" => &mut self.timeout_sec,
            "concurrency" => &mut self.concurrency,
            "min_instances" => &mut self.min_instances,
            "max_instances" => &mut self.max_instances,
            "replicas" => &mut self.replicas,
            "build_timeout_sec" => &mut self.build_timeout_sec,
            "tmp_mb" => &mut self.tmp_mb,
            other => unreachable!("{other} is not a number attribute of sless_function"),
        }
    }
}

/// The server's defaults for every spec field but `runtime`.
pub fn default_spec() -> FunctionSpec {
    serde_json::from_value(json!({ "runtime": "python3.11" })).expect("a runtime is all a spec needs")
}

/// Every attribute but the identity, and what a change to it does.
pub fn fields() -> Vec<Field> {
    let string = || AttributeType::String;
    let number = || AttributeType::Number;
    let boolean = || AttributeType::Bool;
    vec![
        replaces("runtime", required(string(), "python3.11 or nodejs20. Changing it replaces the function.")),
        updates("entrypoint", defaulted(string(), "module.function (Python) or file.export (Node); default handler.handle.")),
        updates("env", defaulted(string_map(), "Environment variables of the handler.")),
        updates("memory_mb", defaulted(number(), "Memory limit per instance in MiB (default 256).")),
        updates("timeout_sec", defaulted(number(), "Time limit of one invocation in seconds (default 30).")),
        updates("concurrency", defaulted(number(), "Invocations one instance serves at once (default 8).")),
        updates("min_instances", defaulted(number(), "Instances kept running when idle (default 0).")),
        updates("max_instances", defaulted(number(), "Most instances when autoscaling (default 4).")),
        updates("replicas", optional(number(), "Fixed instance count: unset autoscales, 0 turns the function off, N pins N.")),
        updates("build_timeout_sec", defaulted(number(), "Time limit of a build in seconds, and how long apply waits for it (default 300).")),
        updates_block("async", super::asynchronous::block()),
        updates("network", defaulted(string(), "internet (default: outbound internet, no private or host addresses) or none (loopback only).")),
        updates("tmp_mb", defaulted(number(), "Size of an instance's /tmp in MiB (default 64); it counts towards memory_mb.")),
        updates("expose_errors", defaulted(boolean(), "Whether callers see an unhandled exception's message (default false: \"the function failed\")")),
        updates("env_from_secrets", defaulted(super::secrets::env_type(), "Environment variables from secrets of the namespace: [{ secret = \"db\", key = \"password\", env = \"DB_PASSWORD\" }] (default none).")),
        updates("secret_files", defaulted(super::secrets::files_type(), "Secrets of the namespace mounted read-only at /secrets/{secret}/{key}: [{ secret = \"tls\" }] (default none).")),
        updates("filename", required(string(), "Path of the zip of the function's code.")),
        updates("code_hash", defaulted(string(), "sha256 of the zip: set it to filesha256(filename) so a new zip is uploaded and built in place. Default: the file's sha256 when it can be read while planning.")),
        reported("phase", string(), "Pending, Building, Ready or Failed."),
        reported("version", number(), "Increments on every successful build."),
        reported("url", string(), "Public URL of the function."),
    ]
}

/// The spec fields that are known and set, as the API's JSON (the shape of
/// `FunctionSpec`, without defaults filled in).
pub fn spec_json(diags: &mut Diagnostics, state: &FunctionState) -> Json {
    let mut spec = Map::new();
    if let Some(runtime) = state.runtime.as_ref_option() {
        spec.insert("runtime".into(), json!(runtime));
    }
    if let Some(entrypoint) = state.entrypoint.as_ref_option() {
        spec.insert("entrypoint".into(), json!(entrypoint));
    }
    if let Some(env) = map_json(diags, "env", &state.env, |v| json!(v)) {
        spec.insert("env".into(), Json::Object(env));
    }
    for field in NUMBERS {
        if let Some(n) = to_u32(diags, state.number(field), field) {
            spec.insert(field.to_string(), json!(n));
        }
    }
    if let Some(settings) = super::asynchronous::to_json(&state.async_settings) {
        spec.insert("async".into(), settings);
    }
    if let Some(network) = state.network.as_ref_option() {
        spec.insert("network".into(), json!(network));
    }
    if let Some(expose) = state.expose_errors.as_ref_option() {
        spec.insert("expose_errors".into(), json!(expose));
    }
    if let Some(env) = super::secrets::env_json(diags, &state.env_from_secrets) {
        spec.insert("env_from_secrets".into(), env);
    }
    if let Some(files) = super::secrets::files_json(diags, &state.secret_files) {
        spec.insert("secret_files".into(), files);
    }
    Json::Object(spec)
}

/// The phase as the API spells it.
pub fn phase_name(phase: Phase) -> String {
    match phase {
        Phase::Pending => "Pending",
        Phase::Building => "Building",
        Phase::Ready => "Ready",
        Phase::Failed => "Failed",
    }
    .to_string()
}

/// The code that is built and serving, as `code_hash`: a failed upload is
/// not the function's code, so it shows as a change to apply again.
pub fn served_hash(function: &Function) -> Option<String> {
    let status = &function.status;
    match status.phase {
        Phase::Ready => status.built_hash.clone().or_else(|| status.code_hash.clone()),
        Phase::Failed => status.built_hash.clone(),
        Phase::Pending | Phase::Building => status.code_hash.clone(),
    }
}

/// The state of a function as the server reports it; `filename` is
/// `previous`'s (the server does not know it), and so is `code_hash` when
/// it is the served hash in other case (`upper(filesha256(...))`: the
/// same code, so no change to plan).
pub fn from_api(function: &Function, previous: &FunctionState) -> FunctionState {
    let code_hash = match (served_hash(function), previous.code_hash.as_ref_option()) {
        (Some(served), Some(recorded)) if served.eq_ignore_ascii_case(recorded) => Some(recorded.clone()),
        (served, _) => served,
    };
    let spec = &function.spec;
    let number = |n: u32| Value::Value(Number::from(n));
    let namespace = Value::Value(function.namespace.clone());
    let name = Value::Value(function.name.clone());
    FunctionState {
        id: resource_id(&namespace, &name),
        name,
        namespace,
        runtime: Value::Value(spec.runtime.as_str().to_string()),
        entrypoint: Value::Value(spec.entrypoint.clone()),
        env: Value::Value(
            spec.env
                .iter()
                .map(|(k, v)| (k.clone(), Value::Value(v.clone())))
                .collect(),
        ),
        memory_mb: number(spec.memory_mb),
        timeout_sec: number(spec.timeout_sec),
        concurrency: number(spec.concurrency),
        min_instances: number(spec.min_instances),
        max_instances: number(spec.max_instances),
        replicas: spec.replicas.map(Number::from).into(),
        build_timeout_sec: number(spec.build_timeout_sec),
        async_settings: super::asynchronous::from_api(&spec.async_settings),
        network: Value::Value(spec.network.as_str().to_string()),
        tmp_mb: number(spec.tmp_mb),
        expose_errors: Value::Value(spec.expose_errors),
        env_from_secrets: super::secrets::env_from_api(&spec.env_from_secrets),
        secret_files: super::secrets::files_from_api(&spec.secret_files),
        filename: previous.filename.clone(),
        code_hash: code_hash.into(),
        phase: Value::Value(phase_name(function.status.phase)),
        version: Value::Value(i64::try_from(function.status.version).unwrap_or(i64::MAX)),
        url: function.status.url.clone().into(),
    }
}
