//! The web console's files (HTML, CSS, JavaScript modules and the vendored
//! chart library), embedded in the binary and looked up by path.
//!
//! **Invariant:** this crate does no I/O and knows nothing of HTTP servers;
//! the server mounts [`asset`] at `/ui/` and adds the security headers. The
//! console itself talks only to the public REST API.

use std::sync::OnceLock;

use sha2::{Digest, Sha256};

/// One embedded file.
#[derive(Debug)]
pub struct Asset {
    /// Its path under the console's root, e.g. `js/api.js`.
    pub path: &'static str,
    pub content_type: &'static str,
    pub bytes: &'static [u8],
    /// A strong ETag (quoted) derived from the bytes' sha256.
    pub etag: String,
}

macro_rules! assets {
    ($($path:literal),* $(,)?) => {
        &[$(($path, include_bytes!(concat!("../assets/", $path)) as &[u8])),*]
    };
}

/// Every file the console serves. A new file is added here and nowhere else.
const FILES: &[(&str, &[u8])] = assets![
    "index.html",
    "app.css",
    "favicon.svg",
    "js/main.js",
    "js/api.js",
    "js/async.js",
    "js/dom.js",
    "js/session.js",
    "js/router.js",
    "js/zip.js",
    "js/sse.js",
    "js/format.js",
    "js/forms.js",
    "js/charts.js",
    "js/views/signin.js",
    "js/views/functions.js",
    "js/views/function.js",
    "js/views/deploy.js",
    "js/views/invoke.js",
    "js/views/logs.js",
    "js/views/invocations.js",
    "js/views/metrics.js",
    "js/views/versions.js",
    "js/views/triggers.js",
    "js/views/jobs.js",
    "vendor/uPlot.esm.js",
    "vendor/uPlot.min.css",
    "vendor/uPlot.LICENSE",
];

fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map_or("", |(_, ext)| ext) {
        "html" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" => "text/javascript; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "json" => "application/json",
        _ => "text/plain; charset=utf-8",
    }
}

fn table() -> &'static [Asset] {
    static TABLE: OnceLock<Vec<Asset>> = OnceLock::new();
    TABLE.get_or_init(|| {
        FILES
            .iter()
            .map(|(path, bytes)| Asset {
                path,
                content_type: content_type(path),
                bytes,
                etag: format!("\"{}\"", &hex::encode(Sha256::digest(bytes))[..32]),
            })
            .collect()
    })
}

/// The file at `path` (relative to the console's root; empty means
/// `index.html`), or None.
pub fn asset(path: &str) -> Option<&'static Asset> {
    let path = if path.is_empty() { "index.html" } else { path };
    table().iter().find(|a| a.path == path)
}

/// Every embedded file.
pub fn assets() -> &'static [Asset] {
    table()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_is_the_root() {
        let index = asset("").expect("index");
        assert_eq!(index.path, "index.html");
        assert_eq!(index.content_type, "text/html; charset=utf-8");
        assert!(std::str::from_utf8(index.bytes).unwrap().contains("js/main.js"));
    }

    #[test]
    fn lookups_are_exact() {
        assert!(asset("js/api.js").is_some());
        assert!(asset("/js/api.js").is_none());
        assert!(asset("../Cargo.toml").is_none());
        assert!(asset("js").is_none());
        assert_eq!(
            asset("vendor/uPlot.esm.js").unwrap().content_type,
            "text/javascript; charset=utf-8"
        );
    }

    #[test]
    fn etags_follow_the_bytes() {
        let a = asset("js/api.js").unwrap();
        let b = asset("js/dom.js").unwrap();
        assert_ne!(a.etag, b.etag);
        assert_eq!(a.etag.len(), 34);
        assert!(a.etag.starts_with('"') && a.etag.ends_with('"'));
    }

    /// The CSP forbids inline code: no file may carry an inline script or
    /// style, an inline event handler, or write markup from strings.
    #[test]
    fn no_inline_code_and_no_markup_from_strings() {
        for a in assets() {
            if a.path.starts_with("vendor/") {
                continue;
            }
            let text = std::str::from_utf8(a.bytes).unwrap();
            for banned in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
                "new Function",
            ] {
                assert!(!text.contains(banned), "{} uses {banned}", a.path);
            }
            if a.path.ends_with(".html") {
                assert!(!text.contains("style="), "{} has an inline style", a.path);
                let handler = text.split(" on").skip(1).find(|rest| {
                    let name: String = rest.chars().take_while(|c| c.is_ascii_alphabetic()).collect();
                    !name.is_empty() && rest[name.len()..].starts_with('=')
                });
                assert!(handler.is_none(), "{} has an inline event handler", a.path);
                for script in text.split("<script").skip(1) {
                    assert!(script.contains("src="), "{} has an inline script", a.path);
                }
            }
        }
    }

    /// Every module the console imports is embedded.
    #[test]
    fn every_import_resolves() {
        for a in assets()
            .iter()
            .filter(|a| a.path.ends_with(".js") && !a.path.starts_with("vendor/"))
        {
            let text = std::str::from_utf8(a.bytes).unwrap();
            let dir = a.path.rsplit_once('/').map_or("", |(d, _)| d);
            for line in text.lines().filter(|l| l.starts_with("import ")) {
                let spec = line.rsplit(['"', '\'']).nth(1).expect("import has a quoted path");
                let mut parts: Vec<&str> = if dir.is_empty() {
                    vec![]
                } else {
                    dir.split('/').collect()
                };
                for seg in spec.split('/') {
                    match seg {
                        "." => {}
                        ".." => {
                            parts.pop();
                        }
                        s => parts.push(s),
                    }
                }
                let resolved = parts.join("/");
                assert!(
                    asset(&resolved).is_some(),
                    "{} imports {spec} ({resolved}), not embedded",
                    a.path
                );
            }
        }
    }
}
