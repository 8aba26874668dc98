//! What a `sless_function` change plans: the server's defaults for unset
//! attributes, `code_hash` (and so whether code is uploaded) and the
//! computed attributes. The only I/O is the `file_hash` passed in. (Which
//! changes replace the function is in the attribute table, `state::fields`.)

use sless_api::FunctionSpec;
use tf_provider::value::Value;
use tf_provider::{AttributePath, Diagnostics};

use super::state::{default_spec, spec_json, FunctionState, NUMBERS};
use crate::code::is_sha256_hex;
use crate::convert::{check_map_nulls, to_u32};
use crate::diagnostics::{error, error_at};

/// The networks a function may have.
pub const NETWORKS: &[&str] = &["internet", "none"];

/// The runtimes sless builds.
pub const RUNTIMES: &[&str] = &["python3.11", "nodejs20"];

/// Checks what can be checked of a configuration without the server (its
/// name and namespace are checked already).
pub fn validate(diags: &mut Diagnostics, config: &FunctionState) {
    let errors = diags.errors.len();
    if let Some(runtime) = config.runtime.as_ref_option() {
        if !RUNTIMES.contains(&runtime.as_str()) {
            error(
                diags,
                "Unsupported runtime",
                format!(
                    "runtime {runtime:?} is not one sless builds: use one of {}.",
                    RUNTIMES.join(", ")
                ),
                Some("runtime"),
            );
        }
    }
    if let Some(network) = config.network.as_ref_option() {
        if !NETWORKS.contains(&network.as_str()) {
            error(
                diags,
                "Unsupported network",
                format!(
                    "network {network:?} is not one sless knows: use one of {}.",
                    NETWORKS.join(", ")
                ),
                Some("network"),
            );
        }
    }
    if let Some(hash) = config.code_hash.as_ref_option() {
        if !is_sha256_hex(hash) {
            error(
                diags,
                "Invalid code_hash",
                format!(
                    "code_hash must be the zip's sha256 in hex, as filesha256(\"code.zip\") gives (64 hex digits), got {hash:?}."
                ),
                Some("code_hash"),
            );
        }
    }
    for field in NUMBERS {
        to_u32(diags, config.number(field), field);
    }
    check_map_nulls(diags, "env", &config.env);
    super::secrets::env_json(diags, &config.env_from_secrets);
    super::secrets::files_json(diags, &config.secret_files);
    super::asynchronous::validate(diags, &config.async_settings);
    // The server's own limits (ranges, min <= max, entrypoint shape, env
    // keys), once every value they involve is known and nothing above is
    // wrong (the spec would not decode).
    let all_known = !config.entrypoint.is_unknown()
        && !config.network.is_unknown()
        && !config.expose_errors.is_unknown()
        && !config.env.is_unknown()
        && config
            .env
            .as_ref_option()
            .is_none_or(|env| env.values().all(|v| !v.is_unknown()))
        && NUMBERS.iter().all(|field| !config.number(field).is_unknown())
        && super::asynchronous::is_known(&config.async_settings);
    if diags.errors.len() == errors && all_known {
        let mut merged = serde_json::to_value(default_spec()).expect("a spec serializes");
        if let (Some(merged), serde_json::Value::Object(given)) = (merged.as_object_mut(), spec_json(diags, config)) {
            merged.extend(given);
        }
        match serde_json::from_value::<FunctionSpec>(merged) {
            Ok(spec) => {
                if let Err((field, message)) = spec.check_field() {
                    error_at(
                        diags,
                        "Invalid function settings",
                        format!("{message}."),
                        field_path(field),
                    );
                }
            }
            Err(e) => error(diags, "Invalid function settings", e.to_string(), None),
        }
    }
}

/// The attribute path of a spec field the server names: `async.retry_limit`
/// is an attribute of the `async` block, `async[0].retry_limit`.
fn field_path(field: &'static str) -> AttributePath {
    let mut parts = field.split('.');
    let mut path = AttributePath::new(parts.next().unwrap_or(field));
    for part in parts {
        path = path.index(0).attribute(part);
    }
    path
}

/// A `code_hash` that is not the sha256 of `filename` as it is now cannot
/// converge: say so while planning rather than after creating things.
pub fn check_planned_hash(diags: &mut Diagnostics, config: &FunctionState, file_hash: fn(&str) -> Option<String>) {
    let (Some(filename), Some(hash)) = (config.filename.as_ref_option(), config.code_hash.as_ref_option()) else {
        return;
    };
    if !is_sha256_hex(hash) {
        return; // `validate` has said what is wrong with it
    }
    if let Some(actual) = file_hash(filename) {
        if !actual.eq_ignore_ascii_case(hash) {
            error(
                diags,
                "code_hash does not match filename",
                format!(
                    "{filename:?} has sha256 {actual} but code_hash is {hash}: set code_hash = filesha256({filename:?})."
                ),
                Some("code_hash"),
            );
        }
    }
}

/// Plans the defaults, the code and the computed attributes of a create
/// (`prior` is `None`) or an update. `file_hash` reads a file's sha256 when
/// it can (for a `code_hash` left unset).
pub fn plan(
    prior: Option<&FunctionState>,
    config: &FunctionState,
    planned: &mut FunctionState,
    file_hash: fn(&str) -> Option<String>,
) {
    let defaults = default_spec();
    if config.entrypoint.is_null() {
        planned.entrypoint = Value::Value(defaults.entrypoint.clone());
    }
    if config.env.is_null() {
        planned.env = Value::Value(Default::default());
    }
    if config.env_from_secrets.is_null() {
        planned.env_from_secrets = Value::Value(Default::default());
    }
    if config.secret_files.is_null() {
        planned.secret_files = Value::Value(Default::default());
    }
    if config.network.is_null() {
        planned.network = Value::Value(defaults.network.as_str().to_string());
    }
    if config.expose_errors.is_null() {
        planned.expose_errors = Value::Value(defaults.expose_errors);
    }
    let default_numbers = [
        ("memory_mb", defaults.memory_mb),
        ("timeout_sec", defaults.timeout_sec),
        ("concurrency", defaults.concurrency),
        ("min_instances", defaults.min_instances),
        ("max_instances", defaults.max_instances),
        ("build_timeout_sec", defaults.build_timeout_sec),
        ("tmp_mb", defaults.tmp_mb),
    ];
    for (field, default) in default_numbers {
        if config.number(field).is_null() {
            *planned.number_mut(field) = Value::Value(default.into());
        }
    }

    super::asynchronous::plan_defaults(&mut planned.async_settings);

    if config.code_hash.is_null() {
        planned.code_hash = match planned.filename.as_ref_option().and_then(|f| file_hash(f)) {
            Some(hash) => Value::Value(hash),
            None => match prior {
                Some(prior) if prior.filename == planned.filename => prior.code_hash.clone(),
                _ => Value::Unknown,
            },
        };
    }
    let upload = match prior {
        None => true,
        Some(prior) => {
            planned.code_hash.is_unknown()
                || !(planned.code_hash.as_ref_option())
                    .zip(prior.code_hash.as_ref_option())
                    .is_some_and(|(planned, prior)| planned.eq_ignore_ascii_case(prior))
                || prior.phase.as_deref_option() == Some("Failed")
        }
    };
    if upload {
        planned.phase = Value::Value("Ready".into());
        planned.version = Value::Unknown;
    }
    if prior.is_none() {
        planned.url = Value::Unknown;
    }
}
