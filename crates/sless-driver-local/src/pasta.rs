//! The pasta processes that join network namespaces to the internet. Each
//! runs in the foreground as a child of one keeper thread that lives as long
//! as the server process, with a parent-death signal set by util-linux
//! `setpriv --pdeathsig KILL`: however the server ends, SIGKILL included,
//! the kernel ends its pasta processes with it. (The signal follows the
//! thread that forked, not the process: hence one thread that never exits
//! rather than whichever runtime thread asked.) The keeper also reaps them.
//!
//! **Invariant:** no pasta outlives the server that started it; pasta
//! processes of servers that are gone (an older sless ran them as daemons)
//! are stopped when a server starts.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long pasta may take to configure the namespace's tap.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

pub const SETPRIV: &str = "/usr/bin/setpriv";
pub const PASTA: &str = "/usr/bin/pasta";

/// One pasta process serving one namespace; killed when dropped.
pub struct Pasta {
    child: Option<Child>,
}

impl Pasta {
    /// Starts pasta on the namespace at `netns` and returns once its tap is
    /// configured: pasta writes its pid file only then.
    pub async fn connect(netns: &Path, dns: Ipv4Addr) -> Result<Pasta, String> {
        let name = netns.file_name().unwrap_or_default().to_string_lossy();
        let pid_file = std::env::temp_dir().join(format!("{name}.pasta.pid"));
        let _ = std::fs::remove_file(&pid_file);
        let mut cmd = Command::new(SETPRIV);
        cmd.args(["--pdeathsig", "KILL", PASTA])
            .args([
                "--foreground",
                "--quiet",
                "--runas",
                "0:0",
                "--config-net",
                "--no-map-gw",
                "--ipv4-only",
            ])
            .args(["-t", "none", "-u", "none", "-T", "none", "-U", "none"])
            .arg("--dns-forward")
            .arg(dns.to_string())
            .arg("--pid")
            .arg(&pid_file)
            .arg("--netns")
            .arg(netns)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut pasta = Pasta {
            child: Some(spawn(cmd).await?),
        };
        let ready = pasta.wait_ready(&pid_file).await;
        let _ = std::fs::remove_file(&pid_file);
        ready.map(|()| pasta)
    }

    async fn wait_ready(&mut self, pid_file: &Path) -> Result<(), String> {
        let child = self.child.as_mut().expect("running");
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        loop {
            if std::fs::metadata(pid_file).is_ok_and(|m| m.len() > 0) {
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("connecting the network namespace (pasta) failed ({status})"));
            }
            if Instant::now() >= deadline {
                return Err("connecting the network namespace (pasta): timed out".into());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

impl Drop for Pasta {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Still our unreaped child: its pid cannot have been reused.
            let _ = child.kill();
            let _ = keeper().send(Job::Reap(child));
        }
    }
}

/// Work for the keeper thread.
enum Job {
    Spawn(Command, tokio::sync::oneshot::Sender<std::io::Result<Child>>),
    Reap(Child),
}

/// The keeper thread's queue; the thread is started on first use and,
/// since the sender is never dropped, never exits.
fn keeper() -> &'static mpsc::Sender<Job> {
    static KEEPER: OnceLock<mpsc::Sender<Job>> = OnceLock::new();
    KEEPER.get_or_init(|| {
        let (jobs, queue) = mpsc::channel();
        std::thread::Builder::new()
            .name("sless-pasta".into())
            .stack_size(256 << 10)
            .spawn(move || keep(queue))
            .expect("starting the pasta keeper thread");
        jobs
    })
}

/// Spawns what it is asked to and reaps what was killed.
fn keep(queue: mpsc::Receiver<Job>) {
    let mut dying: Vec<Child> = Vec::new();
    loop {
        let job = if dying.is_empty() {
            match queue.recv() {
                Ok(job) => Some(job),
                Err(_) => return,
            }
        } else {
            match queue.recv_timeout(Duration::from_millis(20)) {
                Ok(job) => Some(job),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        };
        match job {
            Some(Job::Spawn(mut cmd, reply)) => {
                let _ = reply.send(cmd.spawn());
            }
            Some(Job::Reap(child)) => dying.push(child),
            None => {}
        }
        dying.retain_mut(|child| !matches!(child.try_wait(), Ok(Some(_)) | Err(_)));
    }
}

async fn spawn(cmd: Command) -> Result<Child, String> {
    let (reply, spawned) = tokio::sync::oneshot::channel();
    keeper()
        .send(Job::Spawn(cmd, reply))
        .map_err(|_| "the pasta keeper thread is gone".to_string())?;
    spawned
        .await
        .map_err(|_| "the pasta keeper thread is gone".to_string())?
        .map_err(|e| format!("connecting the network namespace (pasta): {e}"))
}

/// Kills pasta processes serving a namespace in `/run/netns` whose name
/// `is_stale` says belongs to a server that is gone.
pub fn stop_stale(is_stale: impl Fn(&str) -> bool) {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in procs.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !is_pasta(pid) {
            continue;
        }
        let stale = netns_of(pid)
            .and_then(|path| path.file_name().map(|n| n.to_string_lossy().into_owned()))
            .is_some_and(|name| is_stale(&name));
        if stale {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

/// The `--netns` argument of a pasta process.
fn netns_of(pid: u32) -> Option<PathBuf> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let mut args = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned());
    while let Some(arg) = args.next() {
        if arg == "--netns" {
            return args.next().map(PathBuf::from);
        }
        if let Some(path) = arg.strip_prefix("--netns=") {
            return Some(PathBuf::from(path));
        }
    }
    None
}

/// Whether `pid` is a live pasta (a zombie is gone: its tap went with it).
fn is_pasta(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) state ...": comm may hold spaces, the state follows the last ')'.
    let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
        return false;
    };
    let comm = &stat[open + 1..close];
    let state = stat[close + 1..].trim_start().chars().next();
    (comm.starts_with("pasta") || comm.starts_with("passt")) && !matches!(state, Some('Z' | 'X'))
}
