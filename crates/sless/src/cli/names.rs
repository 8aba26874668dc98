//! The names commands take, checked as clap parses them: a name the server
//! can only refuse (`sless get ''`, `sless logs Hello`) is refused here,
//! naming the argument, before any request is made. An empty name would
//! not even reach the object's route (`.../functions/` is another path).

use sless_api::{validate_alias_name, validate_name};

fn checked(what: &'static str, text: &str) -> Result<String, String> {
    validate_name(what, text).map_err(|e| e.to_string())?;
    Ok(text.to_string())
}

pub fn function(text: &str) -> Result<String, String> {
    checked("function", text)
}

pub fn trigger(text: &str) -> Result<String, String> {
    checked("trigger", text)
}

pub fn job(text: &str) -> Result<String, String> {
    checked("job", text)
}

pub fn secret(text: &str) -> Result<String, String> {
    checked("secret", text)
}

pub fn alias(text: &str) -> Result<String, String> {
    validate_alias_name(text)?;
    Ok(text.to_string())
}

/// The alias `sless alias set` points: not a reserved name either.
pub fn new_alias(text: &str) -> Result<String, String> {
    sless_api::validate_new_alias_name(text)?;
    Ok(text.to_string())
}

/// What `sless invoke` calls: a function, optionally with `@VERSION` or
/// `@ALIAS` (`hello@7`, `hello@live`), as in `/fn/{ns}/{name}@...`.
pub fn invoked(text: &str) -> Result<String, String> {
    let (name, selector) = match text.split_once('@') {
        Some((name, selector)) => (name, Some(selector)),
        None => (text, None),
    };
    function(name)?;
    match selector {
        None => Ok(text.to_string()),
        Some("") => Err(format!(
            "nothing after '@': name a version ({name}@7) or an alias ({name}@live), or leave the '@' out"
        )),
        Some(version) if version.bytes().all(|b| b.is_ascii_digit()) => match version.parse::<u64>() {
            Ok(v) if v > 0 => Ok(text.to_string()),
            _ => Err(format!("invalid version {version:?}: versions are numbered from 1")),
        },
        Some(alias) => {
            validate_alias_name(alias)?;
            Ok(text.to_string())
        }
    }
}

/// The id of an asynchronous event (`sless async NAME ID`), as `sless
/// invoke --async` printed it.
pub fn event_id(text: &str) -> Result<String, String> {
    record_id("event id", text, "as `sless invoke --async` printed it")
}

/// Where an older page begins (`--before ID`): a record's id, as the ID
/// column or a `more:` line shows it.
pub fn before(text: &str) -> Result<String, String> {
    record_id("id", text, "as the ID column or a `more:` line shows it")
}

/// The id of an invocation record or an asynchronous event
/// ([`sless_api::is_record_id`]). Anything else names no record; an empty
/// one would not even reach the record's route.
fn record_id(what: &str, text: &str, shown: &str) -> Result<String, String> {
    if sless_api::is_record_id(text) {
        return Ok(text.to_string());
    }
    Err(format!(
        "invalid {what} {:?}: it is 24 hex digits, {shown}",
        sless_api::text::echoed(text)
    ))
}

#[cfg(test)]
mod tests {
    use super::{event_id, invoked};

    #[test]
    fn invoked_names_may_pick_a_version_or_an_alias() {
        for good in ["hello", "hello@7", "hello@live", "h-1@blue-green"] {
            assert_eq!(invoked(good).as_deref(), Ok(good));
        }
        for bad in [
            "",
            "@live",
            "Hello",
            "hello@",
            "hello@0",
            "hello@Live",
            "hello@7x",
            "a@b@c",
            "hello/x",
        ] {
            assert!(invoked(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn event_ids_are_24_hex_digits() {
        assert!(event_id("0006282c5e1f4a3b9c0d1e2f").is_ok());
        for bad in [
            "",
            "0006282C5E1F4A3B9C0D1E2F",
            "0006282c5e1f4a3b9c0d1e2",
            "../x",
            "0006282c5e1f4a3b9c0d1e2fa",
        ] {
            let message = event_id(bad).unwrap_err();
            assert!(message.contains("24 hex digits"), "{bad}: {message}");
        }
    }
}
