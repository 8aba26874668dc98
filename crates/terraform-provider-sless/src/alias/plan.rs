//! What a `sless_alias` change plans, without I/O: the names and the split
//! are checked as the server checks them, and the URL is known from the
//! names. (Which changes replace it is in the attribute table.)

use tf_provider::value::Value;
use tf_provider::Diagnostics;

use super::state::AliasState;
use crate::convert::{check_map_nulls, check_name, to_u64};
use crate::diagnostics::error;
use crate::number::Number;

/// Checks what can be checked of a configuration without the server.
pub fn validate(diags: &mut Diagnostics, config: &AliasState) {
    check_name(diags, "function", &config.function, "function");
    if let Some(name) = config.name.as_ref_option() {
        if let Err(message) = sless_api::validate_new_alias_name(name) {
            error(diags, "Invalid name", message, Some("name"));
        }
    }
    let errors = diags.errors.len();
    let version = to_u64(diags, &config.version, "version");
    check_map_nulls(diags, "weights", &config.weights);
    let (Some(version), Some(weights)) = (version, config.weights.as_ref_option()) else {
        return;
    };
    if diags.errors.len() > errors || weights.values().any(|w| !w.is_value()) {
        return;
    }
    let spec = sless_api::AliasSpec {
        version,
        weights: weights
            .iter()
            .filter_map(|(k, w)| w.as_ref_option().and_then(Number::to_f64).map(|w| (k.clone(), w)))
            .collect(),
    };
    if let Err((field, message)) = spec.split() {
        error(diags, format!("Invalid {field}"), message, Some(field));
    }
}

/// The URL follows from the names; it is unknown only while they are.
pub fn plan(planned: &mut AliasState) {
    if planned.url.is_value() {
        return;
    }
    planned.url = Value::Unknown;
}

#[cfg(test)]
mod tests {
    use tf_provider::value::Value;
    use tf_provider::Diagnostics;

    use super::validate;
    use crate::alias::state::AliasState;

    /// The errors `validate` finds in an alias named `name`.
    fn errors(name: &str) -> Vec<String> {
        let config = AliasState {
            name: Value::Value(name.to_string()),
            function: Value::Value("app".to_string()),
            ..AliasState::default()
        };
        let mut diags = Diagnostics::default();
        validate(&mut diags, &config);
        diags
            .errors
            .iter()
            .map(|e| format!("{}: {}", e.summary, e.detail))
            .collect()
    }

    #[test]
    fn names_are_checked_as_the_server_checks_them() {
        assert_eq!(errors("live"), Vec::<String>::new());
        let refused = errors("latest");
        assert!(
            refused.len() == 1 && refused[0].contains(r#"alias name "latest" is reserved"#),
            "{refused:?}"
        );
        assert_eq!(errors("Live").len(), 1);
    }
}
