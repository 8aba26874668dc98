//! What the served OpenAPI document says beyond the handlers' annotations,
//! applied to the generated document once, in one place, so that a client
//! generator or a validator (schemathesis runs in CI) can rely on it:
//! - path parameters `ns` and `name` are DNS labels (pattern and length),
//!   `alias` one that starts with a letter, `version` a number from 1;
//! - every `/v1` operation documents 400, 401, 403 (namespaced) and 404, and
//!   those with a body 413, all as `ErrorBody`;
//! - the create bodies are one object (the spec's properties and `name`)
//!   instead of an `allOf` of two closed objects no value can satisfy;
//! - patch bodies are the spec's properties, each optional and nullable
//!   (JSON merge patch: null resets a field);
//! - the limits `FunctionSpec::check` and the handlers enforce that a
//!   schema can say (ranges, the entrypoint's shape, env names).

use serde_json::{json, Map, Value};

/// The DNS label rule of `sless_api::validate_name`.
pub const DNS_LABEL: &str = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$";

/// The alias name rule of `sless_api::validate_alias_name`: a DNS label
/// that starts with a letter.
pub const ALIAS_LABEL: &str = "^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$";

/// A page's `before` cursor (`record::page_cursor`): an id as records and
/// events get them (`sless_api::is_record_id`), or empty for none.
const PAGE_CURSOR: &str = "^([0-9a-f]{24})?$";

/// The OpenAPI document as served.
pub fn document() -> Value {
    use utoipa::OpenApi;
    let mut doc = serde_json::to_value(super::openapi::ApiDoc::openapi()).expect("the document serializes");
    apply(&mut doc);
    doc
}

fn apply(doc: &mut Value) {
    tighten_schemas(doc);
    let error = json!({"description": "", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}});
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else { continue };
        for (method, operation) in item.iter_mut() {
            let Some(operation) = operation.as_object_mut() else {
                continue;
            };
            for parameter in operation
                .get_mut("parameters")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                let name = parameter["name"].as_str().map(str::to_string);
                match name.as_deref() {
                    Some("ns" | "name") if parameter["in"] == "path" => {
                        parameter["schema"] =
                            json!({"type": "string", "pattern": DNS_LABEL, "minLength": 1, "maxLength": 63});
                    }
                    // Alias names start with a letter (`sless_api::validate_alias_name`).
                    Some("alias") if parameter["in"] == "path" => {
                        parameter["schema"] =
                            json!({"type": "string", "pattern": ALIAS_LABEL, "minLength": 1, "maxLength": 63});
                    }
                    Some("version") if parameter["in"] == "path" => {
                        parameter["schema"] = json!({"type": "integer", "minimum": 1, "maximum": u64::MAX});
                    }
                    // The paging and log options are query parameters, all optional.
                    Some(query @ ("limit" | "before" | "follow" | "tail")) => {
                        parameter["in"] = json!("query");
                        parameter["required"] = json!(false);
                        parameter["schema"] = match query {
                            "limit" => json!({"type": "integer", "minimum": 1, "maximum": 1000}),
                            "before" => json!({"type": "string", "pattern": PAGE_CURSOR}),
                            "follow" => json!({"type": "boolean"}),
                            _ => json!({"type": "integer", "minimum": 0}),
                        };
                    }
                    // An asynchronous record's state, one of four words.
                    Some("status") if path.ends_with("/async-invocations") => {
                        parameter["in"] = json!("query");
                        parameter["required"] = json!(false);
                        parameter["schema"] =
                            json!({"type": "string", "enum": ["queued", "running", "succeeded", "failed"]});
                    }
                    // Other query structs derive their parameters as `path`:
                    // a parameter not in the path is a query parameter.
                    Some(other) if parameter["in"] == "path" && !path.contains(&format!("{{{other}}}")) => {
                        parameter["in"] = json!("query");
                        parameter["required"] = json!(false);
                        let schema = &mut parameter["schema"];
                        // An unsigned 64-bit number: up to u64::MAX, not int64's maximum.
                        if schema["format"] == "int64" && schema["minimum"] == 0 {
                            schema.as_object_mut().expect("a schema").remove("format");
                            schema["maximum"] = json!(u64::MAX);
                        }
                    }
                    _ => {}
                }
            }
            if !path.starts_with("/v1/") {
                continue;
            }
            let has_body = operation.contains_key("requestBody");
            let mut statuses = vec!["400", "401", "404"];
            if path.starts_with("/v1/namespaces/") || path.starts_with("/v1/tokens") {
                statuses.push("403");
            }
            if has_body {
                statuses.push("413");
            }
            let responses = operation.entry("responses").or_insert_with(|| json!({}));
            for status in statuses {
                if responses.get(status).is_none() {
                    responses[status] = error.clone();
                }
            }
            if method == "patch" && path.starts_with("/v1/namespaces/") {
                let kind = ["functions", "triggers", "jobs"]
                    .into_iter()
                    .find(|k| path.contains(&format!("/{k}/")));
                if let Some(kind) = kind {
                    let schema = format!("#/components/schemas/{}Patch", patch_name(kind));
                    operation["requestBody"] = json!({
                        "description": "JSON merge patch of the spec: the fields to change; null resets a field to its default",
                        "required": true,
                        "content": {"application/json": {"schema": {"$ref": schema}}}
                    });
                }
            }
        }
    }
    if let Some(upload) =
        doc.pointer_mut("/paths/~1v1~1namespaces~1{ns}~1functions~1{name}~1code/put/requestBody/content")
    {
        *upload = json!({"application/zip": {"schema": {"type": "string", "format": "binary"}}});
    }
}

/// Replaces each `allOf` of objects (a `#[serde(flatten)]`) by one object
/// with all their properties: `allOf` of closed objects admits no value.
fn flatten_all_ofs(schemas: &mut Map<String, Value>) {
    let snapshot = schemas.clone();
    let resolve = |part: &Value| -> Value {
        match part.get("$ref").and_then(Value::as_str) {
            Some(reference) => snapshot
                .get(reference.trim_start_matches("#/components/schemas/"))
                .cloned()
                .unwrap_or(Value::Null),
            None => part.clone(),
        }
    };
    for schema in schemas.values_mut() {
        let Some(parts) = schema.get("allOf").and_then(Value::as_array).cloned() else {
            continue;
        };
        let mut properties = Map::new();
        let mut required = Vec::new();
        for part in parts.iter().map(resolve) {
            if let Some(p) = part.get("properties").and_then(Value::as_object) {
                properties.extend(p.clone());
            }
            if let Some(r) = part.get("required").and_then(Value::as_array) {
                required.extend(r.iter().cloned());
            }
        }
        let description = schema.get("description").cloned();
        *schema =
            json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false});
        if let Some(description) = description {
            schema["description"] = description;
        }
    }
}

/// A secret's key (`sless_api::validate_secret_key`).
fn secret_key() -> Value {
    json!({"type": "string", "pattern": sless_api::SECRET_KEY_PATTERN, "minLength": 1, "maxLength": sless_api::MAX_SECRET_KEY_CHARS})
}

fn patch_name(kind: &str) -> &'static str {
    match kind {
        "functions" => "Function",
        "triggers" => "Trigger",
        _ => "Job",
    }
}

fn tighten_schemas(doc: &mut Value) {
    let Some(schemas) = doc.pointer_mut("/components/schemas").and_then(Value::as_object_mut) else {
        return;
    };
    let name = json!({"type": "string", "pattern": DNS_LABEL, "minLength": 1, "maxLength": 63});
    if let Some(spec) = schemas.get_mut("FunctionSpec").and_then(|s| s.get_mut("properties")) {
        // The maxima of a server with the default SLESS_MAX_* settings.
        for (field, lo, hi) in [
            ("memory_mb", 16, 4096),
            ("timeout_sec", 1, 900),
            ("concurrency", 1, 1000),
            ("max_instances", 1, 100),
            ("build_timeout_sec", 1, 3600),
            ("tmp_mb", 1, 1024),
        ] {
            spec[field]["minimum"] = json!(lo);
            spec[field]["maximum"] = json!(hi);
        }
        // min_instances may not exceed max_instances, which a schema cannot
        // say: it says at most 1 (every max_instances is at least 1).
        spec["min_instances"]["maximum"] = json!(1);
        spec["min_instances"]["description"] =
            json!("Instances kept running. The server takes up to max_instances; this schema says 1, which any max_instances allows.");
        spec["replicas"] = json!({"type": ["integer", "null"], "minimum": 0, "maximum": 1,
            "description": "Fixed instance count: absent/null = autoscale between min and max, 0 = off, N = pinned. The server takes up to max_instances; this schema says 1, which any max_instances allows."});
        spec["entrypoint"]["pattern"] = json!("^[^.]+(\\.[^.]+)*\\.[^.]+$");
        spec["env"]["propertyNames"] = json!({"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"});
        let refs = sless_api::MAX_SECRET_REFS;
        spec["env_from_secrets"]["maxItems"] = json!(refs);
        spec["secret_files"]["maxItems"] = json!(refs);
    }
    // References to secrets: names, keys and variables as the server checks them.
    if let Some(entry) = schemas.get_mut("SecretEnv").and_then(|s| s.get_mut("properties")) {
        entry["secret"] = name.clone();
        entry["key"] = secret_key();
        entry["env"] = json!({"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"});
    }
    if let Some(entry) = schemas.get_mut("SecretFiles").and_then(|s| s.get_mut("properties")) {
        entry["secret"] = name.clone();
    }
    // Secret bodies: keys and value sizes bounded (a patch removes a key with null).
    let value = json!({"type": "string", "maxLength": sless_api::MAX_SECRET_VALUE_CHARS});
    for (schema, values) in [
        ("SecretCreate", value.clone()),
        ("SecretPatch", json!({"anyOf": [value, {"type": "null"}]})),
    ] {
        if let Some(data) = schemas.get_mut(schema).and_then(|s| s.pointer_mut("/properties/data")) {
            *data = json!({
                "type": "object",
                "description": data.get("description").cloned().unwrap_or(Value::Null),
                "propertyNames": secret_key(),
                "additionalProperties": values,
                "maxProperties": sless_api::MAX_SECRET_KEYS,
            });
            if data["description"].is_null() {
                data.as_object_mut().expect("an object").remove("description");
            }
        }
        if let Some(body) = schemas.get_mut(schema) {
            body["additionalProperties"] = json!(false);
        }
    }
    if let Some(create) = schemas.get_mut("SecretCreate") {
        create["properties"]["name"] = name.clone();
    }
    if let Some(spec) = schemas.get_mut("JobSpec").and_then(|s| s.get_mut("properties")) {
        spec["function"] = name.clone();
        spec["wait_timeout_sec"]["maximum"] = json!(86_400);
        spec["run_id"] = json!({"type": "integer", "minimum": 0, "description": "0 creates the job without running it; above the last run, runs it"});
    }
    if let Some(spec) = schemas.get_mut("TriggerSpec").and_then(|s| s.get_mut("properties")) {
        spec["function"] = name.clone();
    }
    if let Some(spec) = schemas.get_mut("TriggerSpec") {
        spec["properties"]["prefetch"]["minimum"] = json!(1);
        spec["properties"]["prefetch"]["maximum"] = json!(1000);
        spec["properties"]["retry_limit"]["maximum"] = json!(100);
        spec["properties"]["queue"]["minLength"] = json!(1);
        spec["properties"]["queue"]["maxLength"] = json!(255);
        // What each type needs; a field of another type is refused.
        let all = spec["properties"].clone();
        let variant = |kind: &str, required: &[&str], fields: &[&str]| {
            let mut properties: Map<String, Value> = ["function", "enabled"]
                .iter()
                .chain(fields)
                .map(|f| (f.to_string(), all[*f].clone()))
                .collect();
            properties.insert("type".into(), json!({"type": "string", "enum": [kind]}));
            let required: Vec<&str> = ["function", "type"].iter().chain(required).copied().collect();
            json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
        };
        let variants = vec![
            variant("http", &[], &[]),
            variant("cron", &["schedule"], &["schedule", "timezone", "event"]),
            variant(
                "amqp",
                &["broker_url", "queue"],
                &["broker_url", "queue", "prefetch", "retry_limit", "dead_letter_queue"],
            ),
        ];
        schemas.insert("TriggerVariants".into(), json!({"oneOf": variants}));
    }
    if let Some(create) = schemas.get_mut("TokenCreate") {
        create["properties"]["name"]["minLength"] = json!(1);
        create["properties"]["namespaces"]["items"] = name.clone();
        // A scoped token names its namespaces; an admin token need not.
        create["anyOf"] = json!([
            {"required": ["admin"], "properties": {"admin": {"const": true}}},
            {"required": ["namespaces"], "properties": {"namespaces": {"minItems": 1}}}
        ]);
    }
    if let Some(spec) = schemas.get_mut("AsyncSettings").and_then(|s| s.get_mut("properties")) {
        spec["retry_limit"]["minimum"] = json!(0);
        spec["retry_limit"]["maximum"] = json!(10);
        spec["max_event_age_sec"]["minimum"] = json!(60);
        spec["max_event_age_sec"]["maximum"] = json!(sless_api::DEFAULT_MAX_EVENT_AGE_SEC);
    }
    if let Some(spec) = schemas.get_mut("AliasSpec").and_then(|s| s.get_mut("properties")) {
        spec["version"] = json!({"type": "integer", "minimum": 1, "maximum": u64::MAX,
            "description": "The version the alias sends calls to (1 or more)."});
        spec["weights"]["maxProperties"] = json!(1);
        spec["weights"]["propertyNames"] = json!({"type": "string", "pattern": "^[1-9][0-9]{0,18}$"});
        spec["weights"]["additionalProperties"] = json!({"type": "number", "minimum": 0, "maximum": 1});
    }
    if let Some(settings) = schemas.get("AsyncSettings").cloned() {
        let properties: Map<String, Value> = settings["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|(field, schema)| (field, json!({"anyOf": [schema, {"type": "null"}]})))
            .collect();
        schemas.insert(
            "AsyncSettingsPatch".into(),
            json!({"type": "object", "properties": properties, "additionalProperties": false,
                "description": "The `async` settings in a merge patch: null resets a setting to its default"}),
        );
    }
    flatten_all_ofs(schemas);
    // Lists name their item type instead of inlining it.
    for list in ["Function", "Job", "Trigger", "Token", "Secret"] {
        if let Some(items) = schemas
            .get_mut(&format!("List_{list}"))
            .and_then(|l| l.pointer_mut("/properties/items/items"))
        {
            *items = json!({"$ref": format!("#/components/schemas/{list}")});
        }
    }
    for (create, spec) in [
        ("FunctionCreate", "FunctionSpec"),
        ("JobCreate", "JobSpec"),
        ("TriggerCreate", "TriggerSpec"),
    ] {
        let Some(spec_schema) = schemas.get(spec).cloned() else {
            continue;
        };
        let mut merged = spec_schema.clone();
        merged["properties"]["name"] = name.clone();
        let mut required: Vec<Value> = spec_schema["required"].as_array().cloned().unwrap_or_default();
        required.insert(0, json!("name"));
        merged["required"] = Value::Array(required);
        merged["additionalProperties"] = json!(false);
        if let Some(description) = schemas.get(create).and_then(|s| s.get("description")).cloned() {
            merged["description"] = description;
        }
        if create == "TriggerCreate" {
            // One object per type, each with the name.
            let variants = schemas["TriggerVariants"]["oneOf"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let named: Vec<Value> = variants
                .into_iter()
                .map(|mut v| {
                    v["properties"]["name"] = name.clone();
                    v["required"].as_array_mut().expect("required").insert(0, json!("name"));
                    v
                })
                .collect();
            merged = json!({"oneOf": named, "description": merged["description"].clone()});
        }
        schemas.insert(create.to_string(), merged);
        // The patch: every field optional and nullable.
        // Required fields cannot be reset (null) and the runtime and type
        // cannot change: they are not in the patch.
        let mut patch = Map::new();
        let properties = spec_schema["properties"].as_object().cloned().unwrap_or_default();
        let required = spec_schema["required"].as_array().cloned().unwrap_or_default();
        let nullable: Map<String, Value> = properties
            .into_iter()
            .filter(|(field, _)| field != "runtime" && field != "type")
            .map(|(field, mut schema)| {
                // A merge patch removes a map's key with null.
                if let Some(values) = schema.get_mut("additionalProperties").filter(|v| v.is_object()) {
                    *values = json!({"anyOf": [values.clone(), {"type": "null"}]});
                }
                // A merge patch recurses into an object: null inside `async`
                // resets that setting.
                if field == "async" {
                    schema = json!({"$ref": "#/components/schemas/AsyncSettingsPatch"});
                }
                if required.contains(&json!(field)) {
                    (field, schema)
                } else {
                    (field, json!({"anyOf": [schema, {"type": "null"}]}))
                }
            })
            .collect();
        patch.insert("type".into(), json!("object"));
        patch.insert("properties".into(), Value::Object(nullable));
        patch.insert("additionalProperties".into(), json!(false));
        let kind = create.trim_end_matches("Create");
        schemas.insert(format!("{kind}Patch"), Value::Object(patch));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_served_document_says_what_the_server_enforces() {
        let doc = document();
        let get = &doc["paths"]["/v1/namespaces/{ns}/functions/{name}"]["get"];
        let params = get["parameters"].as_array().unwrap();
        assert!(params.iter().all(|p| p["schema"]["pattern"] == DNS_LABEL), "{params:?}");
        for status in ["400", "401", "403", "404"] {
            assert!(get["responses"][status].is_object(), "GET function lacks {status}");
        }
        let create = &doc["components"]["schemas"]["FunctionCreate"];
        assert!(create.get("allOf").is_none(), "{create}");
        assert_eq!(create["additionalProperties"], false);
        assert!(create["properties"]["name"].is_object() && create["properties"]["runtime"].is_object());
        assert!(doc["paths"]["/v1/namespaces/{ns}/jobs"]["post"]["responses"]["413"].is_object());
        let patch = &doc["paths"]["/v1/namespaces/{ns}/triggers/{name}"]["patch"]["requestBody"];
        assert_eq!(
            patch["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/TriggerPatch"
        );
        assert!(doc["components"]["schemas"]["TriggerPatch"]["properties"]["enabled"].is_object());
        let schemas = &doc["components"]["schemas"];
        let data = &schemas["SecretCreate"]["properties"]["data"];
        assert_eq!(data["maxProperties"], sless_api::MAX_SECRET_KEYS, "{data}");
        assert_eq!(data["propertyNames"]["pattern"], sless_api::SECRET_KEY_PATTERN);
        assert_eq!(
            data["additionalProperties"]["maxLength"],
            sless_api::MAX_SECRET_VALUE_CHARS
        );
        assert_eq!(schemas["SecretCreate"]["additionalProperties"], false);
        let patch = &schemas["SecretPatch"]["properties"]["data"]["additionalProperties"]["anyOf"];
        assert_eq!(patch[1]["type"], "null", "{patch}");
        assert_eq!(
            schemas["FunctionSpec"]["properties"]["env_from_secrets"]["maxItems"],
            sless_api::MAX_SECRET_REFS
        );
        assert_eq!(schemas["SecretEnv"]["properties"]["secret"]["pattern"], DNS_LABEL);
        assert!(doc["paths"]["/v1/namespaces/{ns}/secrets/{name}"]["delete"]["responses"]["409"].is_object());
    }

    /// The operations that take their namespace's quota turn document the
    /// 503 of a turn not had in time, and no other `/v1` operation does; the
    /// gateway's 503 covers a version that cannot be started in time.
    #[test]
    fn the_503s_are_documented_where_they_can_happen() {
        let doc = document();
        let turns = [
            ("/v1/namespaces/{ns}/functions", "post"),
            ("/v1/namespaces/{ns}/functions/{name}", "patch"),
            ("/v1/namespaces/{ns}/jobs", "post"),
            ("/v1/namespaces/{ns}/jobs/{name}", "patch"),
            ("/v1/namespaces/{ns}/triggers", "post"),
            ("/v1/namespaces/{ns}/triggers/{name}", "patch"),
            ("/v1/namespaces/{ns}/secrets", "post"),
            ("/v1/namespaces/{ns}/functions/{name}/versions/{version}", "delete"),
            ("/v1/namespaces/{ns}/functions/{name}/aliases/{alias}", "put"),
            ("/v1/namespaces/{ns}/functions/{name}/aliases/{alias}", "patch"),
        ];
        let paths = doc["paths"].as_object().unwrap();
        for (path, item) in paths.iter().filter(|(path, _)| path.starts_with("/v1/")) {
            for (method, operation) in item.as_object().unwrap() {
                let refused = &operation["responses"]["503"];
                let takes_turn = turns.contains(&(path.as_str(), method.as_str()));
                assert_eq!(refused.is_object(), takes_turn, "{method} {path}: {refused}");
                if takes_turn {
                    let description = refused["description"].as_str().unwrap();
                    assert!(
                        description.contains("quota turn") && description.contains("Retry-After"),
                        "{description}"
                    );
                }
            }
        }
        let invoke = paths["/fn/{ns}/{name}"]["get"]["responses"]["503"]["description"]
            .as_str()
            .unwrap();
        assert!(
            invoke.contains("called by number or alias") && invoke.contains("Retry-After"),
            "{invoke}"
        );
    }
}
