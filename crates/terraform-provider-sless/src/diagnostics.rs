//! Diagnostics a person can act on: what failed, the server's own message,
//! and the attribute it concerns when the message names one.

use std::borrow::Cow;

use sless_client::{Error, StatusCode};
use tf_provider::{AttributePath, Diagnostic, Diagnostics};

/// Adds an error, pointing at `attribute` when given. (Built by hand rather
/// than with `Diagnostic::new`, which appends a backtrace when
/// `RUST_BACKTRACE` is set.)
pub fn error(
    diags: &mut Diagnostics,
    summary: impl Into<Cow<'static, str>>,
    detail: impl Into<Cow<'static, str>>,
    attribute: Option<&'static str>,
) {
    error_at(
        diags,
        summary,
        detail,
        attribute.map(AttributePath::new).unwrap_or_default(),
    );
}

/// Adds an error pointing at `path`: an element or a nested attribute
/// (`env_from_secrets[1].key`, `async[0].retry_limit`).
pub fn error_at(
    diags: &mut Diagnostics,
    summary: impl Into<Cow<'static, str>>,
    detail: impl Into<Cow<'static, str>>,
    path: AttributePath,
) {
    diags.add_error(Diagnostic {
        summary: summary.into(),
        detail: detail.into(),
        attribute: path,
    });
}

/// Adds the error of a failed API call. `summary` says what was being done
/// (`Cannot create function "default/hello"`); the detail carries the server's
/// message and status and a hint for the usual causes; the attribute is the
/// first of `fields` the message names, for a refused request.
pub fn api_error(diags: &mut Diagnostics, summary: String, err: &Error, fields: &[&'static str]) {
    let (detail, attribute) = match err {
        Error::Api { status, message, .. } => {
            let hint = match *status {
                StatusCode::UNAUTHORIZED => {
                    "\n\nThe server refused the token: check the provider's token (or SLESS_TOKEN)."
                }
                StatusCode::FORBIDDEN => {
                    "\n\nThe token does not cover this namespace: use a token scoped to it, or an admin token."
                }
                StatusCode::CONFLICT => {
                    "\n\nIt already exists on the server: bring it under Terraform with `terraform import` \
                     (the ID is namespace/name), or choose another name."
                }
                _ => "",
            };
            let attribute = if status.is_client_error() {
                guess_attribute(message, fields)
            } else {
                None
            };
            (format!("{message} ({status}){hint}"), attribute)
        }
        Error::Transport { .. } => (
            format!(
                "{}\n\nCheck the provider's endpoint (or SLESS_ENDPOINT) and that the sless server is running.",
                with_causes(err)
            ),
            None,
        ),
        other => (with_causes(other), None),
    };
    error(diags, summary, detail, attribute);
}

/// The error's message followed by its sources (`connection refused` is
/// usually two levels down in a transport error).
fn with_causes(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The attribute a server message is about: the earliest of `fields` that
/// appears in it as a whole word (`"schedule is required for a cron trigger"`
/// -> `schedule`, `"invalid function: memory_mb: ..."` -> `memory_mb`).
pub fn guess_attribute(message: &str, fields: &[&'static str]) -> Option<&'static str> {
    let is_word_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    fields
        .iter()
        .filter_map(|field| {
            message
                .match_indices(field)
                .find(|(at, _)| {
                    let before = message[..*at].chars().next_back();
                    let after = message[at + field.len()..].chars().next();
                    !before.is_some_and(is_word_char) && !after.is_some_and(is_word_char)
                })
                .map(|(at, _)| (at, *field))
        })
        .min_by_key(|(at, _)| *at)
        .map(|(_, field)| field)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIELDS: &[&str] = &[
        "function",
        "type",
        "schedule",
        "timezone",
        "event",
        "queue",
        "dead_letter_queue",
    ];

    #[test]
    fn the_attribute_is_the_first_whole_word_field_in_the_message() {
        let guess = |m: &str| guess_attribute(m, FIELDS);
        assert_eq!(guess("schedule is required for a cron trigger"), Some("schedule"));
        assert_eq!(guess("invalid trigger: timezone: unknown zone"), Some("timezone"));
        assert_eq!(
            guess("function \"x\" does not exist in namespace \"default\""),
            Some("function")
        );
        assert_eq!(guess("type cannot be changed in place (it is http)"), Some("type"));
        // `dead_letter_queue` contains `queue`, but not as a whole word.
        assert_eq!(guess("dead_letter_queue is too long"), Some("dead_letter_queue"));
        assert_eq!(guess("something else entirely"), None);
        assert_eq!(guess("types are fine"), None);
    }

    #[test]
    fn refused_requests_name_the_attribute_and_keep_the_server_message() {
        let err = Error::Api {
            status: StatusCode::BAD_REQUEST,
            message: "schedule is required for a cron trigger".into(),
            body: None,
        };
        let mut diags = Diagnostics::default();
        api_error(&mut diags, "Cannot create trigger \"default/t\"".into(), &err, FIELDS);
        let diag = &diags.errors[0];
        assert_eq!(diag.summary, "Cannot create trigger \"default/t\"");
        assert!(diag
            .detail
            .contains("schedule is required for a cron trigger (400 Bad Request)"));
        assert_eq!(diag.attribute, AttributePath::new("schedule"));
    }

    #[test]
    fn conflicts_suggest_import_and_server_errors_name_no_attribute() {
        let conflict = Error::Api {
            status: StatusCode::CONFLICT,
            message: "function \"hello\" already exists".into(),
            body: None,
        };
        let mut diags = Diagnostics::default();
        api_error(&mut diags, "Cannot create".into(), &conflict, &["name"]);
        assert!(diags.errors[0].detail.contains("terraform import"));

        let internal = Error::Api {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: "function store failed".into(),
            body: None,
        };
        let mut diags = Diagnostics::default();
        api_error(&mut diags, "Cannot read".into(), &internal, &["function"]);
        assert_eq!(diags.errors[0].attribute, AttributePath::default());
    }
}
