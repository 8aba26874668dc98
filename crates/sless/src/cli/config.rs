//! The config `sless login` saves: `$XDG_CONFIG_HOME/sless/config.json`
//! (else `~/.config/sless/config.json`), mode 0600 since it holds a token.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;

use anyhow::{anyhow, Context as _};
use serde::{Deserialize, Serialize};

/// What is saved between commands.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SavedConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl SavedConfig {
    /// Where the config lives.
    pub fn path() -> anyhow::Result<PathBuf> {
        let absolute = |var: &str| std::env::var_os(var).map(PathBuf::from).filter(|p| p.is_absolute());
        let base = absolute("XDG_CONFIG_HOME")
            .or_else(|| absolute("HOME").map(|home| home.join(".config")))
            .ok_or_else(|| anyhow!("cannot find a config directory: set HOME or XDG_CONFIG_HOME"))?;
        Ok(base.join("sless").join("config.json"))
    }

    /// The saved config, or an empty one when nothing was saved yet.
    pub fn load() -> anyhow::Result<SavedConfig> {
        let path = SavedConfig::path()?;
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is not a valid sless config", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(SavedConfig::default()),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Writes the config atomically (temp file, then rename), readable by
    /// its owner only; returns where.
    pub fn save(&self) -> anyhow::Result<PathBuf> {
        let path = SavedConfig::path()?;
        let dir = path.parent().expect("the config path has a directory");
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let temp = dir.join(format!(".config.json.{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            // A leftover from a crashed run may have other permissions.
            let _ = fs::remove_file(&temp);
            let mut file = fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&temp)?;
            let mut json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
            json.push(b'\n');
            file.write_all(&json)?;
            file.sync_all()?;
            fs::rename(&temp, &path)
        };
        write().map_err(|e| {
            let _ = fs::remove_file(&temp);
            anyhow!("cannot write {}: {e}", path.display())
        })?;
        Ok(path)
    }

    /// True when the saved token belongs to `endpoint` (same URL, ignoring a
    /// trailing slash).
    pub fn is_for(&self, endpoint: &str) -> bool {
        let norm = |s: &str| s.trim().trim_end_matches('/').to_string();
        self.endpoint.as_deref().map(norm) == Some(norm(endpoint))
    }
}
