//! An instance's code, mounted at `/code` in its own view, in place of a
//! tree of hard links made in its slot file by file.
//!
//! A warm instance is started before its function is known, with its
//! (empty) slot bound read-only at `/code`. Linking an artifact into the
//! slot costs a link per file and a directory per folder, at every cold
//! start and again at the instance's end: about 9 ms per 2 000 files here,
//! which a function with dependencies paid on every first call. Instead,
//! [`CodeMounter`] attaches a read-only copy of the artifact's directory
//! (`open_tree`) on top of `/code` inside the instance's mount namespace,
//! which it enters through the instance's pidfd: the same few system calls
//! whatever the size of the code. The mount lives in that namespace only,
//! and goes with it when the instance ends; the host mounts nothing.
//!
//! Links kept the files of a running instance whose artifact was removed
//! (its function's old version pruned); a mount does not, since it shows the
//! artifact's own directory. So [`ArtifactHolds`] counts the instances
//! using each artifact: removing one that is in use renames it aside, and
//! the last instance using it deletes it when it ends.
//!
//! **Invariant:** a mounted instance sees its artifact, read-only, until it
//! ends, whatever becomes of the artifact meanwhile.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::oneshot;

/// Where an instance sees its code.
const CODE: &str = "/code";

type Job = (PathBuf, OwnedFd, oneshot::Sender<std::io::Result<()>>);

/// Mounts artifacts into instances, one after another, on a thread of its
/// own: entering another mount namespace needs a thread that shares no
/// root or working directory with others (`unshare(CLONE_FS)`), and it
/// returns to its own after each mount.
pub struct CodeMounter {
    jobs: std::sync::mpsc::Sender<Job>,
}

impl CodeMounter {
    pub fn start() -> std::io::Result<CodeMounter> {
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        let (ready, started) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("sless-mounts".into())
            .stack_size(64 << 10)
            .spawn(move || {
                let home = enter_own_fs();
                let failed = home.as_ref().err().map(|e| std::io::Error::new(e.kind(), e.to_string()));
                let _ = ready.send(failed);
                let Ok(home) = home else { return };
                for (artifact, process, done) in queue {
                    let mounted = mount_into(&artifact, process.as_fd());
                    // Home again, whatever happened; if that fails this
                    // thread ends, and instances get links from then on.
                    let back = rustix::thread::move_into_link_name_space(
                        home.as_fd(),
                        Some(rustix::thread::LinkNameSpaceType::Mount),
                    );
                    let _ = done.send(mounted);
                    if let Err(e) = back {
                        tracing::error!(error = %e, "the code mounter cannot return to its mount namespace; instances get their code linked");
                        return;
                    }
                }
            })?;
        match started.recv() {
            Ok(None) => Ok(CodeMounter { jobs }),
            Ok(Some(e)) => Err(e),
            Err(_) => Err(std::io::Error::other("the code mounter's thread ended at once")),
        }
    }

    /// Mounts `artifact` read-only at `/code` in the view of the process
    /// `pidfd` names.
    pub async fn mount(&self, artifact: &Path, pidfd: OwnedFd) -> std::io::Result<()> {
        let (done, result) = oneshot::channel();
        self.jobs
            .send((artifact.to_path_buf(), pidfd, done))
            .map_err(|_| std::io::Error::other("the code mounter has stopped"))?;
        result
            .await
            .map_err(|_| std::io::Error::other("the code mounter has stopped"))?
    }
}

/// Gives this thread a root and working directory of its own, and returns
/// its mount namespace (the server's), to come back to.
fn enter_own_fs() -> std::io::Result<OwnedFd> {
    #[allow(deprecated)] // CLONE_FS: the root and working directory, no file table
    rustix::thread::unshare(rustix::thread::UnshareFlags::FS)?;
    Ok(std::fs::File::open("/proc/thread-self/ns/mnt")?.into())
}

/// On the mounter's thread: a copy of `artifact`'s directory (taken in the
/// server's namespace), attached at `/code` in the namespace of `process`
/// and made read-only there. Leaves the thread in that namespace.
fn mount_into(artifact: &Path, process: BorrowedFd<'_>) -> std::io::Result<()> {
    use rustix::mount::{move_mount, open_tree, MountFlags, MoveMountFlags, OpenTreeFlags};
    let tree = open_tree(
        rustix::fs::CWD,
        artifact,
        OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
    )?;
    // Also makes `/` and the working directory the instance's root.
    rustix::thread::move_into_thread_name_spaces(process, rustix::thread::ThreadNameSpaceType::MOUNT)?;
    move_mount(
        tree.as_fd(),
        "",
        rustix::fs::CWD,
        CODE,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )?;
    // A copy keeps the flags of the mount it was taken from (the data
    // dir's, writable); until this remount the instance runs only its
    // shim, waiting for the LOAD that follows, and owns no file there.
    let flags = MountFlags::BIND | MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV;
    if let Err(e) = rustix::mount::mount_remount(CODE, flags, "") {
        let _ = rustix::mount::unmount(CODE, rustix::mount::UnmountFlags::DETACH);
        return Err(e.into());
    }
    Ok(())
}

/// The artifacts that running instances have mounted (see the module doc).
#[derive(Default)]
pub struct ArtifactHolds {
    held: Mutex<Claims>,
}

/// Each artifact's use, and the count of entries at which those no
/// longer used are swept out (twice what was left at the last sweep).
#[derive(Default)]
struct Claims {
    by_dir: HashMap<PathBuf, Weak<Held>>,
    sweep_at: usize,
}

/// An artifact in use; when the last instance using it ends, removed if
/// it was meanwhile renamed aside.
struct Held {
    retired: Mutex<Option<PathBuf>>,
}

impl Drop for Held {
    /// Removes a retired artifact, off the async runtime when on it: a
    /// tree of thousands of files takes tens of milliseconds.
    fn drop(&mut self) {
        let Some(dir) = self.retired.get_mut().unwrap().take() else {
            return;
        };
        let remove = move || {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "removing an artifact no instance uses any more failed");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(remove)),
            Err(_) => remove(),
        }
    }
}

/// An instance's claim on its artifact: held as long as the instance.
pub struct ArtifactHold {
    _held: Arc<Held>,
}

impl ArtifactHolds {
    /// Claims `artifact` for an instance about to mount it.
    pub fn hold(&self, artifact: &Path) -> ArtifactHold {
        let mut claims = self.held.lock().unwrap();
        if let Some(h) = claims.by_dir.get(artifact).and_then(Weak::upgrade) {
            return ArtifactHold { _held: h };
        }
        if claims.by_dir.len() >= claims.sweep_at {
            claims.by_dir.retain(|_, h| h.strong_count() > 0);
            claims.sweep_at = (claims.by_dir.len() * 2).max(64);
        }
        let h = Arc::new(Held {
            retired: Mutex::new(None),
        });
        claims.by_dir.insert(artifact.to_path_buf(), Arc::downgrade(&h));
        ArtifactHold { _held: h }
    }

    /// Takes the artifact at `dir` out of use: renames it into `aside` (a
    /// directory of the same filesystem), so no instance mounts it from
    /// now on. Returns where it went for the caller to remove, if no
    /// instance holds it; else the last instance holding it removes it.
    pub fn retire(&self, dir: &Path, aside: &Path) -> std::io::Result<Option<PathBuf>> {
        let mut claims = self.held.lock().unwrap();
        std::fs::create_dir_all(aside)?;
        let name = dir.file_name().unwrap_or_default().to_string_lossy();
        let to = aside.join(format!("{name}.{:016x}", rand::random::<u64>()));
        std::fs::rename(dir, &to)?;
        match claims.by_dir.remove(dir).and_then(|h| h.upgrade()) {
            Some(h) => {
                *h.retired.lock().unwrap() = Some(to);
                Ok(None)
            }
            None => Ok(Some(to)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifacts() -> PathBuf {
        let root = std::env::temp_dir().join(format!("sless-holds-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(root.join("abc/pkg")).unwrap();
        std::fs::write(root.join("abc/pkg/mod.py"), "X = 1\n").unwrap();
        root
    }

    #[test]
    fn a_held_artifact_is_removed_by_the_last_instance_holding_it() {
        let root = artifacts();
        let (dir, aside) = (root.join("abc"), root.join(".retired-me"));
        let holds = ArtifactHolds::default();
        let (first, second) = (holds.hold(&dir), holds.hold(&dir));
        assert_eq!(
            holds.retire(&dir, &aside).unwrap(),
            None,
            "held: the instances remove it"
        );
        assert!(!dir.exists(), "out of use at once: a rebuild makes it anew");
        let moved = std::fs::read_dir(&aside).unwrap().next().unwrap().unwrap().path();
        drop(first);
        assert_eq!(std::fs::read_to_string(moved.join("pkg/mod.py")).unwrap(), "X = 1\n");
        drop(second);
        assert!(!moved.exists(), "the last instance holding it removed it");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn an_artifact_no_instance_holds_is_handed_back_to_remove() {
        let root = artifacts();
        let (dir, aside) = (root.join("abc"), root.join(".retired-me"));
        let holds = ArtifactHolds::default();
        drop(holds.hold(&dir));
        let moved = holds.retire(&dir, &aside).unwrap().expect("nobody holds it");
        assert!(moved.join("pkg/mod.py").exists() && !dir.exists());
        let missing = holds.retire(&dir, &aside).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
