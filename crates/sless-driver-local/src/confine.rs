//! What confines one sandbox beyond its mounts: its uid, its control group
//! (memory, processes, CPU), its network namespace and its sized scratch
//! tmpfs (/tmp and /dev/shm). A [`Confiner`] makes them before the sandbox
//! starts; a [`Confinement`] lives as long as the process it confines and
//! undoes itself when dropped. Making and undoing them are system calls
//! that may wait for the kernel's locks (mounts, control groups, network
//! configuration): they run off the server's runtime threads.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sless_api::Network;

use super::cgroup::{Cgroups, Group, GroupLimits};
use super::network::{HubOf, Netns, Networks, PrivateEgress};

/// How this server confines sandboxes (chosen at start from its settings).
#[derive(Debug, Clone, Default)]
pub struct IsolationSettings {
    /// Network namespaces with fenced internet egress (needs root, pasta, nft).
    pub network: bool,
    /// Private destinations opened per namespace.
    pub private_egress: Vec<PrivateEgress>,
}

/// Makes confinements.
pub struct Confiner {
    networks: Option<Networks>,
    cgroups: Option<Arc<Cgroups>>,
    mounts_tmpfs: bool,
}

impl Confiner {
    /// With root: control groups and sized tmpfs always, network namespaces
    /// when `settings.network`. Without root none of them can be made: that
    /// is said once in the log.
    pub fn start(data_dir: &Path, settings: &IsolationSettings) -> anyhow::Result<Confiner> {
        let root = rustix::process::geteuid().is_root();
        if !root {
            tracing::warn!("the server does not run as root: sandboxes get no control groups, sized /tmp or network namespaces (rlimits only)");
            if settings.network {
                anyhow::bail!(
                    "network isolation needs root; run the server as root or set SLESS_NETWORK_ISOLATION=off"
                );
            }
            return Ok(Confiner {
                networks: None,
                cgroups: None,
                mounts_tmpfs: false,
            });
        }
        let networks = if settings.network {
            Some(Networks::start(data_dir, settings.private_egress.clone())?)
        } else {
            None
        };
        Ok(Confiner {
            networks,
            cgroups: Some(Arc::new(Cgroups::start()?)),
            mounts_tmpfs: true,
        })
    }

    /// Undoes what this server made that outlives a dropped handle: its
    /// network namespaces (the scratch mounts are the launcher's to undo).
    pub fn release(&self) {
        if let Some(networks) = &self.networks {
            networks.release();
        }
    }

    /// Whether sandboxes get a sized tmpfs of their own (as root).
    pub fn mounts_tmpfs(&self) -> bool {
        self.mounts_tmpfs
    }

    pub fn resolv_conf(&self) -> Option<&Path> {
        self.networks.as_ref().map(|n| n.resolv_conf.as_path())
    }

    /// Everything a new sandbox runs in. `scratch` is the directory its
    /// tmpfs is mounted on (made here), sized `tmp_bytes`; its network
    /// namespace joins `hub` now if given (else at `fit`, or never).
    pub async fn confine(
        &self,
        uid: Option<u32>,
        limits: GroupLimits,
        scratch: PathBuf,
        tmp_bytes: u64,
        hub: Option<HubOf>,
    ) -> Result<Confinement, String> {
        let cgroups = self.cgroups.clone();
        let mounts_tmpfs = self.mounts_tmpfs;
        let local = tokio::task::spawn_blocking(move || -> Result<_, String> {
            let cgroup = cgroups.map(|c| c.create(limits)).transpose()?;
            let scratch = if mounts_tmpfs {
                Some(Scratch::mount(scratch, uid, tmp_bytes)?)
            } else {
                None
            };
            Ok((cgroup, scratch))
        });
        let network = async {
            match &self.networks {
                Some(networks) => networks.create(hub).await.map(Some),
                None => Ok(None),
            }
        };
        let (local, netns) = tokio::join!(local, network);
        let (cgroup, scratch) = local.map_err(|e| e.to_string())??;
        Ok(Confinement {
            uid,
            cgroup,
            netns: netns?,
            scratch,
        })
    }

    /// Fits a started (generic) sandbox to a function: its memory, its
    /// share of the CPU (its namespace's, `cgroup`), its /tmp size and its network (its namespace joins the tenant's hub, or
    /// stays loopback only with `network: none`). Any failure is the instance's failure to start.
    pub async fn fit(
        &self,
        confinement: &Confinement,
        namespace: &str,
        memory_bytes: u64,
        tmp_bytes: u64,
        network: Network,
    ) -> Result<(), String> {
        if let Some(group) = &confinement.cgroup {
            group.set_memory(memory_bytes)?;
            group.join_namespace(namespace)?;
        }
        if let Some(scratch) = &confinement.scratch {
            scratch.resize(tmp_bytes)?;
        }
        if let (Some(networks), Some(netns)) = (&self.networks, confinement.netns.as_ref()) {
            match network {
                Network::None => {}
                Network::Internet => networks.join(netns, HubOf::Tenant(namespace.to_string())).await?,
            }
        }
        Ok(())
    }
}

/// The confinement of one sandbox (see the module doc).
#[derive(Default)]
pub struct Confinement {
    pub uid: Option<u32>,
    pub cgroup: Option<Group>,
    pub netns: Option<Netns>,
    pub scratch: Option<Scratch>,
}

/// A tmpfs of a fixed size mounted by the server; the sandbox sees its
/// `tmp` directory as /tmp and `shm` as /dev/shm. What is written there is
/// charged to the writer's control group as well.
pub struct Scratch {
    pub path: PathBuf,
}

impl Scratch {
    fn mount(path: PathBuf, uid: Option<u32>, bytes: u64) -> Result<Scratch, String> {
        let scratch = Scratch::mount_sized(path, uid, bytes, 65_536, 0o700)
            .map_err(|e| format!("mounting the instance's /tmp: {e}"))?;
        for dir in ["tmp", "shm"] {
            super::sandbox::make_owned_dir(&scratch.path.join(dir), uid)
                .map_err(|e| format!("preparing the instance's /tmp: {e}"))?;
        }
        Ok(scratch)
    }

    /// A tmpfs of `bytes` and `inodes` at most at `path` (made here), its
    /// root `uid`'s, of `mode`.
    pub(crate) fn mount_sized(
        path: PathBuf,
        uid: Option<u32>,
        bytes: u64,
        inodes: u64,
        mode: u32,
    ) -> Result<Scratch, String> {
        use rustix::mount::{mount, MountFlags};
        std::fs::create_dir_all(&path).map_err(|e| format!("making the mount point: {e}"))?;
        let owner = uid.map(|u| format!(",uid={u},gid={u}")).unwrap_or_default();
        let options = std::ffi::CString::new(format!("size={bytes},mode={mode:o},nr_inodes={inodes}{owner}"))
            .map_err(|e| e.to_string())?;
        mount(
            "sless-tmp",
            &path,
            "tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV,
            Some(options.as_c_str()),
        )
        .map_err(|e| e.to_string())?;
        Ok(Scratch { path })
    }

    /// Whether it has (about) no room left, in bytes or in files.
    pub fn full(&self) -> bool {
        rustix::fs::statvfs(&self.path).is_ok_and(|at| at.f_bavail * at.f_bsize < 1 << 20 || at.f_favail == 0)
    }

    /// A new size (a tmpfs holding more than that refuses the remount).
    fn resize(&self, bytes: u64) -> Result<(), String> {
        use rustix::mount::{mount_remount, MountFlags};
        let options = std::ffi::CString::new(format!("size={bytes}")).map_err(|e| e.to_string())?;
        mount_remount(&self.path, MountFlags::NOSUID | MountFlags::NODEV, options.as_c_str())
            .map_err(|e| format!("sizing the instance's /tmp to {} MiB: {e}", bytes >> 20))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let path = std::mem::take(&mut self.path);
        off_the_runtime(move || {
            let _ = rustix::mount::unmount(&path, rustix::mount::UnmountFlags::DETACH);
            let _ = std::fs::remove_dir(&path);
        });
    }
}

/// Runs `undo` (an unmount, a removal) on a blocking thread when called on
/// the runtime, else at once.
pub(crate) fn off_the_runtime(undo: impl FnOnce() + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn_blocking(undo)),
        Err(_) => undo(),
    }
}

/// Unmounts every mount at or below `dir`, deepest first (read from
/// /proc/self/mountinfo, where `dir` must appear as given: canonical).
pub fn unmount_all_under(dir: &Path) {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<PathBuf> = table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|point| PathBuf::from(unescape_mount_point(point)))
        .filter(|point| point.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    points.dedup();
    for point in points {
        let _ = rustix::mount::unmount(&point, rustix::mount::UnmountFlags::DETACH);
    }
}

/// mountinfo writes space, tab, newline and backslash as `\ooo` (octal).
fn unescape_mount_point(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| (b'0'..=b'3').contains(&d[0]) && d[1..].iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape_mount_point("/tmp/a\\040b/slots"), "/tmp/a b/slots");
        assert_eq!(unescape_mount_point("/plain/path"), "/plain/path");
        assert_eq!(unescape_mount_point("/odd\\x"), "/odd\\x");
    }
}
