//! Names of namespaces, functions, triggers and jobs are DNS labels.

use std::fmt;

/// Why a name is not a DNS label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameError {
    pub what: &'static str,
    pub name: String,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid {} name {:?}: must be a DNS label (1-63 characters, lowercase letters, digits and '-', starting and ending with a letter or digit)",
            self.what, self.name
        )
    }
}

impl std::error::Error for NameError {}

/// Checks `name` against `^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`.
pub fn validate_name(what: &'static str, name: &str) -> Result<(), NameError> {
    let bytes = name.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let ok = !bytes.is_empty()
        && bytes.len() <= 63
        && alnum(&bytes[0])
        && alnum(&bytes[bytes.len() - 1])
        && bytes.iter().all(|b| alnum(b) || *b == b'-');
    if ok {
        Ok(())
    } else {
        Err(NameError {
            what,
            name: crate::text::echoed(name),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::validate_name;

    #[test]
    fn dns_labels() {
        for good in ["a", "a1", "hello-world", "0", &"a".repeat(63)] {
            assert!(validate_name("function", good).is_ok(), "{good}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", &"a".repeat(64), "é"] {
            assert!(validate_name("function", bad).is_err(), "{bad}");
        }
        // A name of any length is echoed cut.
        let long = validate_name("function", &"é".repeat(30_000)).unwrap_err().to_string();
        assert!(long.len() < 400, "{} bytes", long.len());
        assert!(long.contains("... (60000 bytes)"), "{long}");
    }
}
