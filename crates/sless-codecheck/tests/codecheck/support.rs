//! Helpers shared by the tests: corpus files and validators.

use std::path::PathBuf;
use std::sync::Arc;

use sless_codecheck::{build, CheckConfig, CheckMetrics, CodeValidator, Mode, SourceFile};

/// A corpus file as an upload entry, its path relative to `tests/corpus/`.
pub fn corpus(relative: &str) -> SourceFile {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(relative);
    let contents = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    SourceFile::new(relative, contents)
}

pub fn validator(config: &CheckConfig) -> (Arc<dyn CodeValidator>, Arc<CheckMetrics>) {
    let metrics = Arc::new(CheckMetrics::new());
    let validator = build(config, metrics.clone()).expect("valid config");
    (validator, metrics)
}

pub fn static_validator() -> (Arc<dyn CodeValidator>, Arc<CheckMetrics>) {
    validator(&CheckConfig {
        mode: Mode::Static,
        ..CheckConfig::default()
    })
}

/// A unique path under the system temp dir, removed on drop.
pub struct TempFile(pub PathBuf);

impl TempFile {
    pub fn with_contents(name: &str, contents: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "sless-codecheck-{}-{}-{name}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::write(&path, contents).expect("write temp file");
        Self(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
