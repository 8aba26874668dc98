//! Why a function does not serve calls, worked out from its status and its
//! triggers each time it is read (`status.not_serving`), so that `sless get`
//! can say it next to the phase.

use sless_api::{Function, Phase, TriggerSpec, TriggerType};

use crate::error::Result;
use crate::state::AppState;
use crate::store::Kind;

/// `functions` with `status.not_serving` filled in; one read of the
/// namespace's triggers for all of them.
pub async fn with_reasons(state: &AppState, ns: &str, mut functions: Vec<Function>) -> Result<Vec<Function>> {
    let triggers: Vec<TriggerSpec> = state
        .store
        .list(Kind::Trigger, ns)
        .await?
        .iter()
        .filter_map(crate::triggers::spec_of)
        .collect();
    for function in &mut functions {
        let own: Vec<&TriggerSpec> = triggers.iter().filter(|t| t.function == function.name).collect();
        function.status.not_serving = reason(function, &own);
    }
    Ok(functions)
}

/// One function with `status.not_serving` filled in.
pub async fn with_reason(state: &AppState, function: Function) -> Result<Function> {
    let ns = function.namespace.clone();
    let mut one = with_reasons(state, &ns, vec![function]).await?;
    Ok(one.pop().expect("one in, one out"))
}

/// Why `function`, whose triggers are `triggers`, gives no answer now; None
/// when it serves (also while a new version builds, or after a failed
/// update: the previous version serves then).
fn reason(function: &Function, triggers: &[&TriggerSpec]) -> Option<String> {
    let status = &function.status;
    if status.version == 0 {
        return Some(match status.phase {
            Phase::Failed => "the last build failed and no version was built before it".to_string(),
            Phase::Pending if status.code_hash.is_none() => "no code uploaded yet".to_string(),
            Phase::Pending | Phase::Building | Phase::Ready => "the first build has not finished yet".to_string(),
        });
    }
    if function.spec.replicas == Some(0) {
        return Some("replicas is 0".to_string());
    }
    if !triggers.is_empty() && triggers.iter().all(|t| !t.enabled) {
        return Some(match triggers.len() {
            1 => "disabled: its only trigger is disabled".to_string(),
            n => format!("disabled: all {n} of its triggers are disabled"),
        });
    }
    let http = || triggers.iter().filter(|t| t.kind == TriggerType::Http);
    if http().next().is_some() && http().all(|t| !t.enabled) {
        return Some("/fn refuses calls: its http triggers are disabled (its other triggers still fire)".to_string());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::reason;
    use serde_json::json;
    use sless_api::{Function, TriggerSpec};

    fn function(status: serde_json::Value, replicas: Option<u32>) -> Function {
        serde_json::from_value(json!({
            "name": "f", "namespace": "ns", "runtime": "python3.11", "replicas": replicas,
            "status": status, "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
        }))
        .unwrap()
    }

    fn trigger(kind: &str, enabled: bool) -> TriggerSpec {
        let mut spec = json!({"function": "f", "type": kind, "enabled": enabled});
        if kind == "cron" {
            spec["schedule"] = json!("* * * * *");
        }
        serde_json::from_value(spec).unwrap()
    }

    #[test]
    fn says_why_a_function_does_not_serve() {
        let ready = function(json!({"phase": "Ready", "version": 2, "code_hash": "h"}), None);
        assert_eq!(reason(&ready, &[]), None);
        let no_code = function(json!({"phase": "Pending", "version": 0}), None);
        assert_eq!(reason(&no_code, &[]).as_deref(), Some("no code uploaded yet"));
        let failed_first = function(json!({"phase": "Failed", "version": 0, "code_hash": "h"}), None);
        assert!(reason(&failed_first, &[]).unwrap().contains("last build failed"));
        // A failed update leaves the previous version serving.
        let failed_update = function(json!({"phase": "Failed", "version": 1, "code_hash": "h"}), None);
        assert_eq!(reason(&failed_update, &[]), None);
        let off = function(json!({"phase": "Ready", "version": 1}), Some(0));
        assert_eq!(reason(&off, &[]).as_deref(), Some("replicas is 0"));

        let (http_off, cron_on, cron_off) = (trigger("http", false), trigger("cron", true), trigger("cron", false));
        assert!(reason(&ready, &[&http_off, &cron_off])
            .unwrap()
            .contains("all 2 of its triggers are disabled"));
        assert!(reason(&ready, &[&http_off, &cron_on])
            .unwrap()
            .contains("http triggers are disabled"));
        assert_eq!(reason(&ready, &[&cron_on]), None);
    }
}
