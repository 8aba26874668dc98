//! Python instances forked from the zygote (SLESS_PYTHON_ZYGOTE, on by
//! default) are confined each on its own, as a new sandboxed interpreter
//! is: their own uid, mount view, pid, network and other namespaces, no
//! capabilities, the same rlimits, reseeded random numbers, and no
//! descriptor a new interpreter would not hold; the zygote ends with its
//! server (SIGKILL included), and its forks with it. A Node shim forked
//! from the Node zygote (SLESS_NODE_ZYGOTE), or started from a Python fork
//! without it, holds what one behind bubblewrap holds, and a Node fork is
//! a node of its own (pid, random numbers, modules). The other sandbox
//! tests (sandbox.rs) run on forks too, since the zygotes are the default.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use std::time::Duration;

use super::harness::{eventually, Backend, Server};

/// Reports what an instance is: its ids, namespaces, capabilities, limits,
/// descriptors, view and a random draw.
const SELF_REPORT: &[u8] = br#"
import os, random, resource, sys

def status_field(name):
    for line in open("/proc/self/status"):
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()

def kind(target):
    for prefix in ("pipe:", "socket:", "anon_inode:"):
        if target.startswith(prefix):
            return target.split("[")[0] if prefix != "anon_inode:" else target
    return target

def scratch_writable():
    for path in ("/tmp/probe", "/dev/shm/probe"):
        with open(path, "w") as f:
            f.write("x")
        os.remove(path)
    return True

def mount_table():
    """[mount point, ro or rw, file system type, device] of each mount."""
    table = []
    for line in open("/proc/self/mountinfo"):
        fields = line.split()
        rest = fields[fields.index("-") + 1:]
        table.append([fields[4], fields[5].split(",")[0], rest[0], fields[2]])
    return sorted(table)

def try_write(path):
    """"ok", or the error a write of a new file at path got."""
    try:
        with open(path, "w") as f:
            f.write("x")
        os.remove(path)
        return "ok"
    except OSError as exc:
        return type(exc).__name__

def handle(event, context):
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass  # the directory's own descriptor, closed by now
    return {
        "forked": "sless_zygote" in sys.modules,
        "rehearsal": getattr(sys.modules["__main__"], "rehearsal_file", None),
        "uid": os.getuid(),
        "gid": os.getgid(),
        "groups": os.getgroups(),
        "pid": os.getpid(),
        "pids": sorted(p for p in os.listdir("/proc") if p.isdigit()),
        "ns": {n: os.readlink(f"/proc/self/ns/{n}") for n in ("net", "mnt", "pid", "ipc", "uts", "cgroup")},
        "cap_eff": status_field("CapEff"),
        "cap_prm": status_field("CapPrm"),
        "no_new_privs": status_field("NoNewPrivs"),
        "limits": {n: resource.getrlimit(getattr(resource, n)) for n in
                   ("RLIMIT_DATA", "RLIMIT_NPROC", "RLIMIT_CPU", "RLIMIT_NOFILE")},
        "fd_kinds": sorted(kind(t) for t in fds.values()),
        "root": sorted(os.listdir("/")),
        "code": sorted(os.listdir("/code")),
        "code_links": os.stat("/code/handler.py").st_nlink,
        "random": random.getrandbits(64),
        "sched_batch": os.sched_getscheduler(0) == os.SCHED_BATCH,
        "cmdline": open("/proc/self/cmdline", "rb").read().decode(errors="replace"),
        "scratch_writable": scratch_writable(),
        "mounts": mount_table(),
        "writes": {p: try_write(p) for p in ("/probe", "/dev/probe", "/code/probe", "/code/__pycache__/probe",
                                               "/etc/probe", "/sless/shim/probe", "/sless/shim/__pycache__/probe")},
    }
"#;

async fn report(server: &Server, name: &str) -> Value {
    let (status, _, text) = server.invoke(Method::GET, &format!("/fn/ns/{name}"), "").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    serde_json::from_str(&text).unwrap()
}

async fn deploy_reporters(server: &Server, names: &[&str]) {
    deploy_reporters_of(server, names, "python3.11", ("handler.py", SELF_REPORT)).await;
}

/// Deploys `handler` as each of `names`, with a file of its own name beside it.
async fn deploy_reporters_of(server: &Server, names: &[&str], runtime: &str, handler: (&str, &[u8])) {
    for name in names {
        server
            .deploy(
                "ns",
                name,
                json!({"runtime": runtime}),
                &[handler, (&format!("{name}.txt"), b"mine")],
            )
            .await;
    }
}

#[tokio::test]
async fn forked_instances_are_each_confined_alone() {
    let server = Server::start(Backend::Sqlite).await;
    deploy_reporters(&server, &["one", "two"]).await;
    let one = report(&server, "one").await;
    let two = report(&server, "two").await;
    for out in [&one, &two] {
        assert_eq!(out["forked"], true, "instances are forks of the zygote: {out}");
        assert_ne!(out["uid"], 0, "{out}");
        assert_eq!(out["uid"], out["gid"], "{out}");
        assert_eq!(out["groups"], json!([]), "no supplementary groups: {out}");
        assert_eq!(out["cap_eff"], "0000000000000000", "no capabilities: {out}");
        assert_eq!(out["cap_prm"], "0000000000000000", "no capabilities: {out}");
        assert_eq!(out["no_new_privs"], "1", "no way to gain privileges: {out}");
        // Alone in a pid namespace of its own: no other process is visible.
        assert_eq!((&out["pid"], &out["pids"]), (&json!(1), &json!(["1"])), "{out}");
        assert_eq!(out["sched_batch"], true, "{out}");
        assert!(
            !out["cmdline"].as_str().unwrap().contains("/tmp"),
            "no host path: {out}"
        );
    }
    // Each its own uid, namespaces and code.
    assert_ne!(one["uid"], two["uid"]);
    for ns in ["net", "mnt", "pid", "ipc", "uts", "cgroup"] {
        assert_ne!(one["ns"][ns], two["ns"][ns], "{ns} namespace shared: {one} {two}");
    }
    // Their root and /dev are copies of the zygote's one read-only
    // template; what is on them (/proc, /tmp, /code) is each one's own.
    let device = |out: &Value, point: &str| {
        let row = mount_at(out, point);
        assert_eq!(
            row[1],
            if ["/", "/dev"].contains(&point) { "ro" } else { "rw" },
            "{row}"
        );
        row[3].clone()
    };
    for shared in ["/", "/dev"] {
        assert_eq!(device(&one, shared), device(&two, shared), "{shared}: {one} {two}");
    }
    // What they share, nor their code, takes a write from either.
    for out in [&one, &two] {
        for (path, got) in out["writes"].as_object().unwrap() {
            assert_ne!(got, "ok", "{path} took a write: {out}");
        }
    }
    for own in ["/proc", "/tmp"] {
        assert_ne!(device(&one, own), device(&two, own), "{own}: {one} {two}");
    }
    // Its own code only, with the bytecode its build compiled, mounted
    // read-only from the artifact: not a tree of links, one per file.
    assert_eq!(one["code"], json!(["__pycache__", "handler.py", "one.txt"]), "{one}");
    assert_eq!(two["code"], json!(["__pycache__", "handler.py", "two.txt"]), "{two}");
    for out in [&one, &two] {
        assert_eq!(out["code_links"], 1, "the artifact's file has no other link: {out}");
        assert_eq!(mount_at(out, "/code")[1], "ro", "{out}");
    }
    // Random numbers are drawn anew in each fork (CPython reseeds at fork).
    assert_ne!(one["random"], two["random"]);
    let again = report(&server, "one").await;
    assert_ne!(one["random"], again["random"]);
}

/// Waits until its code's artifact was renamed aside (the mount's root, in
/// /proc/self/mountinfo, follows it), then reads its code.
const READS_CODE_ONCE_RETIRED: &[u8] = br#"
import time

def handle(event, context):
    open("/tmp/keeper-started", "w").close()  # its scratch, which the host sees
    retired = False
    for _ in range(600):
        for line in open("/proc/self/mountinfo"):
            fields = line.split()
            if fields[4] == "/code" and ".retired-" in fields[3]:
                retired = True
        if retired:
            break
        time.sleep(0.1)
    import late
    return {"retired": retired, "data": open("/code/data.txt").read(), "late": late.VALUE}
"#;

#[tokio::test]
async fn an_instance_keeps_its_code_while_its_old_version_is_pruned() {
    let server = Server::start_with(Backend::Sqlite, &[("SLESS_KEEP_VERSIONS", "1")]).await;
    deploy_keeper(&server, "A").await;
    let call = {
        let url = format!("{}/fn/ns/keeper", server.url);
        tokio::spawn(async move { reqwest::get(url).await.unwrap().text().await.unwrap() })
    };
    // The call waits in the instance of the first version, as the second
    // goes live and the first is pruned (one version kept): its artifact
    // is removed while the call still reads from it.
    let slots = server.data_path().join("slots");
    eventually(Duration::from_secs(30), || async {
        found_below(&slots, "keeper-started", 4)
            .then_some(())
            .ok_or("the call has not reached the instance".to_string())
    })
    .await;
    deploy_keeper(&server, "B").await;
    let answer: Value = serde_json::from_str(&call.await.unwrap()).unwrap();
    assert_eq!(answer, json!({"retired": true, "data": "A", "late": "A"}));
    // Once that instance has ended, the artifact it held is gone.
    let artifacts = server.data_path().join("artifacts");
    eventually(Duration::from_secs(30), || async {
        let left: Vec<_> = std::fs::read_dir(&artifacts)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".retired-"))
            .flat_map(|e| std::fs::read_dir(e.path()).unwrap().flatten())
            .map(|e| e.file_name())
            .collect();
        left.is_empty().then_some(()).ok_or(format!("{left:?}"))
    })
    .await;
}

/// Deploys a version of `keeper` whose data file and late module say `letter`.
async fn deploy_keeper(server: &Server, letter: &str) {
    let late = format!("VALUE = '{letter}'\n");
    let files = [
        ("handler.py", READS_CODE_ONCE_RETIRED),
        ("data.txt", letter.as_bytes()),
        ("late.py", late.as_bytes()),
    ];
    server
        .deploy("ns", "keeper", json!({"runtime": "python3.11"}), &files)
        .await;
}

/// Whether a file named `name` is in `dir` or below it, `depth` levels at most.
fn found_below(dir: &std::path::Path, name: &str, depth: usize) -> bool {
    std::fs::read_dir(dir).into_iter().flatten().flatten().any(|entry| {
        entry.file_name() == name || (depth > 0 && entry.path().is_dir() && found_below(&entry.path(), name, depth - 1))
    })
}

/// The row of `report`'s mount table for the mount at `point`.
fn mount_at(report: &Value, point: &str) -> Value {
    let rows = report["mounts"].as_array().unwrap();
    let row = rows.iter().find(|row| row[0] == point);
    row.unwrap_or_else(|| panic!("no mount at {point}: {report}")).clone()
}

/// The zygote builds its template again once it is ten seconds old, so
/// that a host file bound in it (/etc/hosts, say), replaced on the host,
/// reaches the instances forked after.
#[tokio::test]
async fn the_zygote_builds_its_template_again_once_it_is_ten_seconds_old() {
    let server = Server::start(Backend::Sqlite).await;
    let root = |out: &Value| mount_at(out, "/")[3].clone();
    deploy_reporters(&server, &["one", "two"]).await;
    let mut before = Vec::new();
    for name in ["one", "two"] {
        before.push(root(&report(&server, name).await));
    }
    tokio::time::sleep(Duration::from_secs(11)).await;
    // A deploy starts an instance (the warm pool's, forked before), and the
    // pool forks its replacement now.
    let names = ["three", "four", "five", "six"];
    deploy_reporters(&server, &names).await;
    let mut after = Vec::new();
    for name in names {
        after.push(root(&report(&server, name).await));
    }
    assert!(
        after.iter().any(|dev| !before.contains(dev)),
        "no fork after ten seconds has a root of a new template: before {before:?} after {after:?}"
    );
}

/// Reports whether the instance rehearsed, and after how long it would have.
const REHEARSAL_REPORT: &[u8] = br#"
import sys

def handle(event, context):
    shim = sys.modules["__main__"]
    return {"forked": "sless_zygote" in sys.modules, "rehearsed": shim.rehearsed, "delay": shim.REHEARSAL_DELAY}
"#;

/// A fork started while a cold start waited is taken at its HELLO and
/// loaded as soon as the server has linked and fitted it: it does not
/// rehearse 5 ms after HELLO, as one idle in the warm pool does, since in
/// a burst that LOAD often comes later than 5 ms and a rehearsal would only
/// delay it.
#[tokio::test]
async fn a_fork_a_cold_start_waits_for_does_not_rehearse_and_an_idle_one_does() {
    // No warm pool: every start is for a cold start waiting.
    let waited = Server::start_with(Backend::Sqlite, &[("SLESS_WARM_INSTANCES", "0")]).await;
    deploy_reporters_of(&waited, &["one"], "python3.11", ("handler.py", REHEARSAL_REPORT)).await;
    let got = report(&waited, "one").await;
    assert_eq!(got, json!({"forked": true, "rehearsed": false, "delay": 0.25}));
    drop(waited);
    // The default pool forks ahead of demand, at start, with no cold start
    // waiting; once idle, its forks rehearse. The deploy's instance (which
    // answers the call) is one of them, if the pool is ready by then: a
    // cold start that waited for the pool would take an awaited fork.
    let pooled = Server::start(Backend::Sqlite).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    deploy_reporters_of(&pooled, &["one"], "python3.11", ("handler.py", REHEARSAL_REPORT)).await;
    let got = report(&pooled, "one").await;
    assert_eq!(got, json!({"forked": true, "rehearsed": true, "delay": 0.005}));
}

/// A fork holds the same limits, view and kinds of descriptors as a new
/// interpreter in a bubblewrap sandbox: nothing of the zygote's is left
/// open (its socket to the server, the other forks' pipes).
#[tokio::test]
async fn a_fork_holds_what_a_new_interpreter_holds_and_nothing_more() {
    let forking = Server::start(Backend::Sqlite).await;
    let starting = Server::start_with(Backend::Sqlite, &[("SLESS_PYTHON_ZYGOTE", "false")]).await;
    // A shim idle in the pool rehearses (an event loop among what it
    // makes): compare two that both did, not a fork that did (it says
    // HELLO within milliseconds) with a new interpreter not yet there.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    deploy_reporters(&forking, &["one"]).await;
    deploy_reporters(&starting, &["one"]).await;
    let fork = report(&forking, "one").await;
    let new = report(&starting, "one").await;
    assert_eq!(fork["forked"], true, "{fork}");
    assert_eq!(new["forked"], false, "{new}");
    // The fork rehearsed a LOAD as a LOAD runs, importing a module from
    // the bytecode its zygote compiled as a build does (unchecked hash);
    // the new interpreter, without one, compiled its handler.
    assert_eq!(fork["rehearsal"], "/sless/shim/sless_rehearsal.py", "{fork}");
    assert_eq!(new["rehearsal"], "<sless rehearsal>", "{new}");
    let shims = forking.data_path().join("shims");
    let version = std::fs::read_dir(&shims).unwrap().next().unwrap().unwrap().path();
    let pyc = std::fs::read(version.join("__pycache__/sless_rehearsal.cpython-311.pyc")).unwrap();
    assert_eq!(pyc[4..8], [1, 0, 0, 0], "an unchecked hash-based .pyc");
    for key in ["limits", "root", "code", "cap_eff"] {
        assert_eq!(fork[key], new[key], "{key} differs: fork {fork} new interpreter {new}");
    }
    // Bubblewrap leaves the new interpreter a pipe and /dev/null more.
    holds_no_more_descriptors(&fork, &new);
    // The same mounts, each as read-only and of the same kind, though the
    // fork's root and /dev are copies of the zygote's template; bubblewrap's
    // /dev holds a devpts more, and the fork's code is mounted on top of
    // its (empty) slot where bubblewrap's is linked into it. That slot is a
    // directory of the fork's own scratch tmpfs (its /tmp's device), not
    // of the data dir's disk.
    let slot = |out: &Value| json!(["/code", "ro", "tmpfs", mount_at(out, "/tmp")[3]]);
    assert!(
        fork["mounts"].as_array().unwrap().contains(&slot(&fork)),
        "the fork's slot is not on its scratch tmpfs: {fork}"
    );
    let table = |out: &Value, skip: &str| -> Vec<Value> {
        let rows = out["mounts"].as_array().unwrap().iter();
        let mut rows: Vec<Value> = rows
            .filter(|row| row[0] != skip && **row != slot(out))
            .map(|row| json!([row[0], row[1], row[2]]))
            .collect();
        rows.dedup();
        rows
    };
    let code_mounts = |out: &Value| {
        out["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|row| row[0] == "/code")
            .count()
    };
    assert_eq!(
        (code_mounts(&fork), code_mounts(&new)),
        (2, 1),
        "fork {fork} new interpreter {new}"
    );
    assert_eq!(
        table(&fork, ""),
        table(&new, "/dev/pts"),
        "fork {fork} new interpreter {new}"
    );
}

/// Every descriptor of `fork` is of a kind `sandboxed` (started behind
/// bubblewrap) holds as many of.
fn holds_no_more_descriptors(fork: &Value, sandboxed: &Value) {
    let kinds = |out: &Value| {
        let mut count = std::collections::BTreeMap::<String, usize>::new();
        for kind in out["fd_kinds"].as_array().unwrap() {
            *count.entry(kind.as_str().unwrap().to_string()).or_default() += 1;
        }
        count
    };
    let (fork_kinds, sandboxed_kinds) = (kinds(fork), kinds(sandboxed));
    for (kind, n) in &fork_kinds {
        assert!(
            sandboxed_kinds.get(kind).is_some_and(|m| m >= n),
            "the fork holds {n} of {kind}, more than behind bubblewrap: {fork_kinds:?} {sandboxed_kinds:?}"
        );
    }
}

/// A Node zygote none of whose forks can confine itself (here: its native
/// module is not one; in life: a node without what a fork needs) leaves
/// the shims of its heap starting as new nodes, and Node functions working.
#[tokio::test]
async fn node_functions_start_as_new_nodes_when_their_zygote_cannot_fork() {
    let server = Server::start(Backend::Sqlite).await;
    break_shim_library(&server, "sless_fork.node");
    // A heap no zygote was started for yet (the warm pools' is 192 MB).
    let code: &[(&str, &[u8])] = &[("handler.js", b"exports.handle = async () => process.execArgv;\n")];
    server
        .deploy("ns", "large", json!({"runtime": "nodejs20", "memory_mb": 2048}), code)
        .await;
    eventually(Duration::from_secs(20), || async {
        let (status, _, text) = server.invoke(Method::GET, "/fn/ns/large", "").await;
        match (status, serde_json::from_str::<Value>(&text)) {
            (StatusCode::OK, Ok(argv)) if argv == json!(["--max-heap-size=1536"]) => Ok(()),
            other => Err(format!("not yet a new node: {other:?}")),
        }
    })
    .await;
}

/// Replaces the shims' library `name` with bytes no loader takes, as a new
/// file (a running zygote holds the old one mapped).
fn break_shim_library(server: &Server, name: &str) {
    let library = std::fs::read_dir(server.data_path().join("shims"))
        .unwrap()
        .map(|entry| entry.unwrap().path().join(name))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("the shims' {name}"));
    let broken = library.with_extension("broken");
    std::fs::write(&broken, b"not a shared library").unwrap();
    std::fs::rename(&broken, &library).unwrap();
}

/// Live processes that are children of `parent` and run a zygote's `file`.
fn zygotes_of(parent: u32, file: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            // "pid (comm) state ppid ...": a zombie (Z) or dead (X) one is gone.
            let mut rest = stat
                .rsplit_once(')')
                .map(|(_, r)| r.split_whitespace())
                .into_iter()
                .flatten();
            let state = rest.next().unwrap_or("Z");
            let ppid = rest.next().and_then(|p| p.parse::<u32>().ok());
            let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            !state.starts_with(['Z', 'X']) && ppid == Some(parent) && String::from_utf8_lossy(&cmdline).contains(file)
        })
        .collect()
}

#[tokio::test]
async fn the_zygote_ends_with_a_killed_server_and_its_forks_with_it() {
    let mut server = Server::start(Backend::Sqlite).await;
    deploy_reporters(&server, &["one"]).await;
    report(&server, "one").await;
    deploy_reporters_of(&server, &["two"], "nodejs20", ("handler.js", NODE_SELF_REPORT)).await;
    report(&server, "two").await;
    let zygotes = zygotes_of(server.pid(), "sless_zygote.py");
    assert_eq!(zygotes.len(), 1, "one zygote per server: {zygotes:?}");
    let node_zygotes = zygotes_of(server.pid(), "sless_zygote.js");
    assert_eq!(
        node_zygotes.len(),
        1,
        "one Node zygote of the default heap: {node_zygotes:?}"
    );
    // The Node zygote's forks show its command line.
    let node_forks = zygotes_of(node_zygotes[0], "sless_zygote.js");
    assert!(!node_forks.is_empty(), "no Node fork");
    server.kill9();
    for pid in zygotes.into_iter().chain(node_zygotes).chain(node_forks) {
        eventually(Duration::from_secs(5), || async {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rsplit_once(')').map(|(_, r)| r.trim_start()).unwrap_or("X");
            if state.starts_with(['Z', 'X']) {
                Ok(())
            } else {
                Err(format!("{pid} outlived its server ({state:.1})"))
            }
        })
        .await;
    }
}

/// Between forks a zygote runs no Python or JS: its request loop is in C
/// (`runtimes/python/sless_loop.c`, `serveLoop` in
/// `runtimes/node/sless_fork.c`), so it writes a few pages per fork (which
/// its forks share, so each is copied) where the loop in Python wrote
/// some 165 and the one in JS some 59. Its page faults over a run of cold
/// starts say which ran; each fork is still a fork of its own (the other
/// tests of this file run through the same loop).
#[tokio::test]
async fn the_zygotes_run_no_python_or_js_between_forks() {
    let server = Server::start(Backend::Sqlite).await;
    for (runtime, prefix, zygote, handler) in [
        ("python3.11", "py", "sless_zygote.py", ("handler.py", SELF_REPORT)),
        ("nodejs20", "node", "sless_zygote.js", ("handler.js", NODE_SELF_REPORT)),
    ] {
        // A zygote's first request, served by Python or JS, builds its template.
        deploy_reporters_of(&server, &[&format!("{prefix}-first")], runtime, handler).await;
        report(&server, &format!("{prefix}-first")).await;
        let zygotes = zygotes_of(server.pid(), zygote);
        assert_eq!(zygotes.len(), 1, "one {zygote} per server and heap: {zygotes:?}");
        let faults = || {
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", zygotes[0])).unwrap();
            // "pid (comm) state ppid pgrp session tty tpgid flags minflt ...".
            let after_comm = stat.rsplit_once(')').unwrap().1;
            after_comm.split_whitespace().nth(7).unwrap().parse::<u64>().unwrap()
        };
        // Per function: its first call is a cold start, a fork (its own,
        // or the warm pool's taken and forked again); the zygote's faults
        // over it and the pool's refill. The median: a template built
        // again (every ten seconds, by the loop of the zygote's language)
        // is one outlier.
        let mut per_fork = Vec::new();
        for i in 0..16 {
            let name = format!("{prefix}-{i}");
            deploy_reporters_of(&server, &[&name], runtime, handler).await;
            let before = faults();
            let out = report(&server, &name).await;
            // Each is pid 1 of its own pid namespace, as a fork the
            // zygote's own loop made is.
            assert_eq!(out["pid"], 1, "{runtime}: {out}");
            tokio::time::sleep(Duration::from_millis(300)).await;
            per_fork.push(faults() - before);
        }
        per_fork.sort_unstable();
        let median = per_fork[per_fork.len() / 2];
        assert!(
            median < 30,
            "the {runtime} zygote took {median} page faults per fork: {per_fork:?}"
        );
    }
}

/// The zygote's mount table does not grow with the instances: a fork is
/// handed its network namespace and its scratch mounts as descriptors, so
/// none of them (nor any other mount made after the zygote started) reaches
/// the zygote, whose table every fork copies. A fork still enters the very
/// namespace the server made for it, and writes to its own scratch.
#[tokio::test]
async fn forks_get_their_namespace_and_scratch_by_descriptor_and_the_zygote_holds_neither() {
    let server = Server::start(Backend::Sqlite).await;
    let names = ["one", "two", "three"];
    deploy_reporters(&server, &names).await;
    let mut reports = Vec::new();
    for name in names {
        reports.push(report(&server, name).await);
    }
    let zygotes = zygotes_of(server.pid(), "sless_zygote.py");
    assert_eq!(zygotes.len(), 1, "one zygote per server: {zygotes:?}");
    let table = std::fs::read_to_string(format!("/proc/{}/mountinfo", zygotes[0])).unwrap();
    for line in table.lines() {
        // mountinfo: "... mount point ... - fstype source options".
        let source = line.split(" - ").nth(1).and_then(|rest| rest.split(' ').nth(1));
        assert_ne!(source, Some("sless-tmp"), "an instance's scratch in the zygote: {line}");
        assert!(!line.contains(" - nsfs "), "a network namespace in the zygote: {line}");
    }
    // Nor does the tmpfs that holds every sandbox's scratch mount point
    // reach the zygote or a fork (where the others' scratch would show).
    let host = std::fs::read_to_string(format!("/proc/{}/mountinfo", server.pid())).unwrap();
    assert!(host.contains(" sless-scratch "), "the server mounts it: {host}");
    let forks = zygotes_of(zygotes[0], "sless_zygote.py");
    assert!(
        forks.len() >= names.len(),
        "the instances are the zygote's forks: {forks:?}"
    );
    for pid in zygotes.iter().chain(&forks) {
        let table = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap_or_default();
        assert!(
            !table.contains(" sless-scratch "),
            "the server's scratch root is seen by {pid}: {table}"
        );
    }
    // Each fork's network namespace is one this server bound under
    // /run/netns (entered by descriptor), a different one each.
    let tag = format!("sless-{}-", server.pid());
    let made: Vec<String> = std::fs::read_dir("/run/netns")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&tag))
        .filter_map(|e| std::fs::metadata(e.path()).ok())
        .map(|m| format!("net:[{}]", std::os::unix::fs::MetadataExt::ino(&m)))
        .collect();
    for out in &reports {
        let net = out["ns"]["net"].as_str().unwrap();
        assert!(
            made.iter().any(|m| m == net),
            "{net} is not among this server's namespaces {made:?}"
        );
        assert_eq!(out["scratch_writable"], true, "{out}");
    }
}

/// What a Node instance is, as SELF_REPORT says it of a Python one.
const NODE_SELF_REPORT: &[u8] = br#"
const fs = require("fs");
const field = (name) => fs.readFileSync("/proc/self/status", "utf8").split("\n")
  .find((l) => l.startsWith(name + ":")).split(":")[1].trim();
const limits = () => Object.fromEntries(fs.readFileSync("/proc/self/limits", "utf8").split("\n")
  .filter((l) => /^Max (data size|processes|cpu time|open files)/.test(l))
  .map((l) => [l.slice(0, 26).trim(), l.slice(26).trim().split(/\s+/).slice(0, 2)]));
const kind = (t) => t.startsWith("anon_inode:") ? t : t.split("[")[0];
// Whether functions compile on their first call, as in any node (the
// zygote compiles eagerly, its forks must not): told by the bytecode that
// defining 200 functions makes, about 12 KB lazily and 59 KB eagerly.
const compilesLazily = () => {
  const bytecode = () => require("v8").getHeapCodeStatistics().bytecode_and_metadata_size;
  const names = Array.from({ length: 200 }, (_, i) => `f${i}`);
  const body = names.map((f, i) =>
    `function ${f}(a) { let s = 0; for (let j = 0; j < a; j++) { s += j * ${i}; if (s > 1e9) s -= 1e9; } return s + ${i}; }`).join("\n");
  const before = bytecode();
  globalThis.defined = require("vm").runInThisContext(`(() => { ${body}\n return [${names}]; })()`);
  return bytecode() - before < 30000;
};
exports.handle = async () => {
  const fds = {};
  for (const fd of fs.readdirSync("/proc/self/fd")) {
    try { fds[fd] = fs.readlinkSync(`/proc/self/fd/${fd}`); } catch (e) { /* the directory's own */ }
  }
  fs.writeFileSync("/tmp/probe", "x"); fs.rmSync("/tmp/probe");
  return {
    uid: process.getuid(), gid: process.getgid(), groups: field("Groups"),
    pid: process.pid, pids: fs.readdirSync("/proc").filter((p) => /^\d+$/.test(p)).sort(),
    ns: Object.fromEntries(["net", "mnt", "pid", "ipc", "uts", "cgroup"]
      .map((n) => [n, fs.readlinkSync(`/proc/self/ns/${n}`)])),
    cap_eff: field("CapEff"), cap_prm: field("CapPrm"), no_new_privs: field("NoNewPrivs"),
    limits: limits(),
    fd_kinds: Object.values(fds).map(kind).sort(),
    root: fs.readdirSync("/").sort(),
    code: fs.readdirSync("/code").sort(),
    sched_policy: fs.readFileSync("/proc/self/sched", "utf8").split("\n")
      .find((l) => l.startsWith("policy")).split(":")[1].trim(),
    cmdline: fs.readFileSync("/proc/self/cmdline", "utf8"),
    env: Object.keys(process.env).sort(),
    ignored: field("SigIgn"),
    stdio: [process.stdout, process.stderr].map((s) => [s.constructor.name, s._type, s.fd]),
    lazy: compilesLazily(),
    mounts: fs.readFileSync("/proc/self/mountinfo", "utf8").trim().split("\n").map((line) => {
      const fields = line.split(" ");
      const rest = fields.slice(fields.indexOf("-") + 1);
      return [fields[4], fields[5].split(",")[0], rest[0], fields[2]];
    }),
    writes: Object.fromEntries(["/probe", "/dev/probe", "/code/probe", "/etc/probe"].map((p) => {
      try { fs.writeFileSync(p, "x"); fs.rmSync(p); return [p, "ok"]; } catch (e) { return [p, e.code]; }
    })),
  };
};
"#;

/// A Node shim forked from the Node zygote, and one started from a Python
/// fork (which confines itself, then runs node), hold what one started
/// behind bubblewrap holds: the same limits, view, capabilities,
/// environment and kinds of descriptors, their own uid and namespaces,
/// alone in their pid namespace, SCHED_BATCH; and the second is not a
/// Python interpreter any more.
#[tokio::test]
async fn a_node_shim_from_the_zygote_holds_what_one_behind_bubblewrap_holds() {
    let forking = Server::start(Backend::Sqlite).await;
    let executing = Server::start_with(Backend::Sqlite, &[("SLESS_NODE_ZYGOTE", "false")]).await;
    let starting = Server::start_with(Backend::Sqlite, &[("SLESS_PYTHON_ZYGOTE", "false")]).await;
    let mut reports = Vec::new();
    for server in [&starting, &forking, &executing] {
        deploy_reporters_of(server, &["one", "two"], "nodejs20", ("handler.js", NODE_SELF_REPORT)).await;
        for name in ["one", "two"] {
            reports.push(report(server, name).await);
        }
    }
    let new = &reports[0];
    for pair in reports[2..].chunks(2) {
        holds_what_bubblewrap_holds(&pair[0], &pair[1], new);
    }
}

fn holds_what_bubblewrap_holds(fork: &Value, fork_two: &Value, new: &Value) {
    // Their root and /dev are copies of their zygote's one read-only template.
    for shared in ["/", "/dev"] {
        let (one, two) = (mount_at(fork, shared), mount_at(fork_two, shared));
        assert_eq!(
            (&one[1], &two[1]),
            (&json!("ro"), &json!("ro")),
            "{shared}: {one} {two}"
        );
        assert_eq!(one[3], two[3], "{shared}: {fork} {fork_two}");
    }
    for out in [fork, fork_two] {
        for (path, got) in out["writes"].as_object().unwrap() {
            assert_ne!(got, "ok", "{path} took a write: {out}");
        }
        assert_ne!(out["uid"], 0, "{out}");
        assert_eq!(out["uid"], out["gid"], "{out}");
        assert_eq!(out["groups"], "", "no supplementary groups: {out}");
        assert_eq!(out["cap_eff"], "0000000000000000", "no capabilities: {out}");
        assert_eq!(out["no_new_privs"], "1", "{out}");
        assert_eq!((&out["pid"], &out["pids"]), (&json!(1), &json!(["1"])), "alone: {out}");
        assert!(out["cmdline"].as_str().unwrap().starts_with("/usr/bin/node\0"), "{out}");
        assert_eq!(out["lazy"], true, "compiles eagerly: {out}");
    }
    assert_ne!(fork["uid"], fork_two["uid"]);
    for ns in ["net", "mnt", "pid", "ipc", "uts", "cgroup"] {
        assert_ne!(
            fork["ns"][ns], fork_two["ns"][ns],
            "{ns} namespace shared: {fork} {fork_two}"
        );
    }
    assert_eq!(fork_two["code"], json!(["handler.js", "two.txt"]), "{fork_two}");
    for key in [
        "limits",
        "root",
        "code",
        "cap_eff",
        "cap_prm",
        "no_new_privs",
        "groups",
        "env",
        "sched_policy",
        "ignored",
        "stdio",
        "lazy",
        "writes",
    ] {
        assert_eq!(fork[key], new[key], "{key} differs: zygote {fork} bubblewrap {new}");
    }
    holds_no_more_descriptors(fork, new);
}

/// A Node fork shares no pipe or eventfd with the zygote or with another
/// tenant's fork: what the zygote's other libuv loops held when it forked
/// is closed in the fork. Those pipes were the zygote's own, read by it as root, so
/// a handler writing into every descriptor it has (as a hostile one
/// would) stopped the zygote, which every tenant's Node cold start needs;
/// now it stops at most its own instance.
#[tokio::test]
async fn a_node_fork_shares_no_pipe_with_the_zygote_or_another_fork() {
    let server = Server::start_logged(Backend::Sqlite, &[]).await;
    let code = br#"
const fs = require("fs");
exports.handle = (event) => {
  const pipes = [];
  for (const fd of fs.readdirSync("/proc/self/fd")) {
    try {
      const target = fs.readlinkSync(`/proc/self/fd/${fd}`);
      if (target.startsWith("pipe:")) pipes.push(target);
      // An eventfd's id (Linux 6.8 on) tells one from another.
      const id = /eventfd-id:\s*(\d+)/.exec(fs.readFileSync(`/proc/self/fdinfo/${fd}`, "utf8"));
      if (id) pipes.push(`eventfd:${id[1]}`);
    } catch (e) { /* the directory's own */ }
  }
  if (event.scribble) {
    for (let fd = 5; fd < 64; fd++) {
      try { fs.writeSync(fd, Buffer.alloc(64, 255)); } catch (e) { /* not writable */ }
    }
  }
  return pipes;
};
"#;
    let mut pipes = Vec::new();
    for ns in ["a", "b"] {
        server
            .deploy(ns, "pipes", json!({"runtime": "nodejs20"}), &[("handler.js", code)])
            .await;
        let (status, _, text) = server.invoke(Method::POST, &format!("/fn/{ns}/pipes"), "{}").await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let held: Vec<String> = serde_json::from_str(&text).unwrap();
        pipes.push(held);
    }
    let shared: Vec<&String> = pipes[0].iter().filter(|p| pipes[1].contains(p)).collect();
    assert!(shared.is_empty(), "two tenants' forks share {shared:?} of {pipes:?}");

    let _ = server
        .invoke(Method::POST, "/fn/a/pipes", r#"{"scribble": true}"#)
        .await;
    // Node cold starts after it: each a request to the zygote.
    for ns in ["c", "d"] {
        server
            .deploy(ns, "pipes", json!({"runtime": "nodejs20"}), &[("handler.js", code)])
            .await;
        let (status, _, text) = server.invoke(Method::POST, &format!("/fn/{ns}/pipes"), "{}").await;
        assert_eq!(status, StatusCode::OK, "{text}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log = std::fs::read_to_string(server.log_file.as_ref().unwrap()).unwrap();
    let gone: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("zygote") && l.contains("is gone"))
        .collect();
    assert!(gone.is_empty(), "a handler stopped a zygote: {gone:?}");
}

/// A Node fork is a node of its own, not a copy of the zygote's: its pid,
/// random numbers drawn anew (Math.random, a new context's, crypto), no
/// module of the zygote's; and what needs threads V8 may hand work to
/// (WebAssembly's compiler, workers), child processes and the garbage
/// collector work in it. The zygote's native module, which a handler can
/// load from /sless/shim, gives it nothing it could not do itself.
#[tokio::test]
async fn a_node_fork_is_a_node_of_its_own() {
    let server = Server::start(Backend::Sqlite).await;
    let code = br#"
const crypto = require("crypto");
// (module (func (export "add") (param i32 i32) (result i32) local.get 0 local.get 1 i32.add))
const ADD = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 7, 1, 96, 2, 127, 127, 1, 127, 3, 2, 1, 0,
  7, 7, 1, 3, 97, 100, 100, 0, 0, 10, 9, 1, 7, 0, 32, 0, 32, 1, 106, 11]);
exports.handle = async () => {
  const { instance } = await WebAssembly.instantiate(ADD);
  const worker = await new Promise((resolve, reject) => {
    const w = new (require("worker_threads").Worker)(
      'require("worker_threads").parentPort.postMessage(6 * 7)', { eval: true });
    w.once("message", resolve);
    w.once("error", reject);
  });
  let garbage = 0;
  for (let i = 0; i < 300; i++) garbage += new Array(100000).fill(i)[7];
  const native = require("/sless/shim/sless_fork.node");
  const attempt = (call) => { try { call(); return "done"; } catch (err) { return err.message; } };
  const privileged = [
    attempt(() => native.unshare(0x00020000)),
    attempt(() => native.dropTo(0)),
    attempt(() => native.mount(null, "/", null, 4096 | 32, null)),
  ];
  return {
    pid: process.pid, exec_argv: process.execArgv, main: require.main?.filename ?? null,
    random: Math.random(), vm_random: require("vm").runInNewContext("Math.random()"),
    uuid: crypto.randomUUID(), bytes: crypto.randomBytes(16).toString("hex"),
    wasm: instance.exports.add(2, 3), worker, garbage, privileged,
    child: require("child_process").execFileSync("/bin/echo", ["hi"]).toString(),
  };
};
"#;
    deploy_reporters_of(&server, &["one", "two"], "nodejs20", ("handler.js", code)).await;
    let (one, two) = (report(&server, "one").await, report(&server, "two").await);
    for out in [&one, &two] {
        assert_eq!(
            out["exec_argv"],
            json!([
                "--max-heap-size=192",
                "--single-threaded",
                "--no-flush-bytecode",
                "--use-largepages=silent"
            ]),
            "a fork: {out}"
        );
        assert_eq!(out["pid"], 1, "{out}");
        assert_eq!(out["main"], Value::Null, "{out}");
        assert_eq!(out["wasm"], 5, "{out}");
        assert_eq!(out["worker"], 42, "{out}");
        assert_eq!(out["garbage"], 299 * 300 / 2, "{out}");
        assert_eq!(out["child"], "hi\n", "{out}");
        for refused in out["privileged"].as_array().unwrap() {
            assert!(
                refused.as_str().unwrap().contains("Operation not permitted"),
                "the zygote's module did something for a handler: {out}"
            );
        }
    }
    for key in ["random", "vm_random", "uuid", "bytes"] {
        assert_ne!(one[key], two[key], "{key} drawn alike: {one} {two}");
    }
}

/// A Python build compiles its modules in a fork of the zygote (a fork
/// instead of a new interpreter behind bubblewrap), confined as the build:
/// the bytecode is written as the build's own uid, not root's, and the
/// status tells what was compiled, as from a new interpreter.
#[tokio::test]
async fn a_python_build_compiles_its_code_in_a_fork_of_the_zygote() {
    let server = Server::start_logged(Backend::Sqlite, &[("SLESS_LOG", "info,sless_driver_local=debug")]).await;
    let files: &[(&str, &[u8])] = &[
        (
            "handler.py",
            b"import lib\n\ndef handle(event, context):\n    return lib.VALUE\n",
        ),
        ("lib.py", b"VALUE = 'from bytecode'\n"),
    ];
    let function = server
        .deploy("ns", "compiled", json!({"runtime": "python3.11"}), files)
        .await;
    let message = function["status"]["message"].as_str().unwrap();
    assert!(message.ends_with("compiled 2 Python modules to bytecode"), "{message}");
    let (status, _, text) = server.invoke(Method::GET, "/fn/ns/compiled", "").await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, r#""from bytecode""#));

    let artifact = std::fs::read_dir(server.data_path().join("artifacts"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.join("lib.py").is_file())
        .expect("the artifact");
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(&artifact).unwrap().uid();
    let bytecode = std::fs::metadata(artifact.join("__pycache__/lib.cpython-311.pyc")).unwrap();
    assert_ne!(owner, 0, "a build runs as a uid of its own");
    assert_eq!(bytecode.uid(), owner, "the bytecode is written by the build's uid");

    let log = std::fs::read_to_string(server.log_file.as_ref().unwrap()).unwrap();
    assert!(
        log.contains("a build step ran in a fork of the Python zygote") && log.contains("exit=Some(0)"),
        "{log}"
    );
    assert!(!log.contains("compiling with a new interpreter"), "{log}");
}

/// A zygote that cannot load its request loop in C (`sless_loop.so`
/// unreadable as a library: a data dir mounted noexec, say) says so and
/// forks from Python, each fork confined the same.
#[tokio::test]
async fn a_zygote_without_its_loop_in_c_forks_from_python() {
    let server = Server::start_logged(Backend::Sqlite, &[]).await;
    deploy_reporters(&server, &["before"]).await;
    report(&server, "before").await;
    let zygotes = zygotes_of(server.pid(), "sless_zygote.py");
    assert_eq!(zygotes.len(), 1, "{zygotes:?}");
    // The library replaced by what no loader takes, then the zygote killed:
    // the server starts it again at its next fork.
    break_shim_library(&server, "sless_loop.so");
    let killed = std::process::Command::new("kill")
        .args(["-9", &zygotes[0].to_string()])
        .status()
        .unwrap();
    assert!(killed.success());

    deploy_reporters(&server, &["after-one", "after-two"]).await;
    let one = report(&server, "after-one").await;
    let two = report(&server, "after-two").await;
    for out in [&one, &two] {
        assert_eq!(out["forked"], true, "{out}");
        assert_ne!(out["uid"], 0, "{out}");
        assert_eq!(out["cap_eff"], "0000000000000000", "{out}");
        assert_eq!((&out["pid"], &out["pids"]), (&json!(1), &json!(["1"])), "{out}");
    }
    assert_ne!(one["ns"]["mnt"], two["ns"]["mnt"]);
    assert_ne!(one["random"], two["random"], "each fork reseeded");
    let log = std::fs::read_to_string(server.log_file.as_ref().unwrap()).unwrap();
    assert!(log.contains("sless zygote: forking from Python"), "{log}");
}

/// A compile in a fork of the zygote is bounded by the build's timeout:
/// past it the build fails as timed out, and the fork goes with the
/// build's control group.
#[tokio::test]
async fn a_compile_past_the_build_timeout_fails_the_build_and_its_fork_goes() {
    let server = Server::start(Backend::Sqlite).await;
    let (status, _) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "slow-compile", "runtime": "python3.11", "build_timeout_sec": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    // About 3.5 s of compiling (600 000 lines); the handler does not import it.
    let slow: String = (0..600_000).map(|i| format!("x{i} = {i}\n")).collect();
    let started = std::time::Instant::now();
    let (_, uploaded) = server
        .upload(
            "ns",
            "slow-compile",
            super::harness::zip_of(&[
                ("handler.py", b"def handle(event, context):\n    return 1\n"),
                ("slow.py", slow.as_bytes()),
            ]),
        )
        .await;
    let hash = uploaded["status"]["code_hash"].as_str().unwrap();
    let failed = server.wait_build_end("ns", "slow-compile", hash).await;
    assert_eq!(failed["status"]["phase"], "Failed", "{failed}");
    let message = failed["status"]["message"].as_str().unwrap();
    assert!(message.contains("timed out after 1s"), "{failed}");
    assert!(started.elapsed() < Duration::from_secs(15), "stopped at the timeout");
    // No fork of the zygote is left compiling in /build.
    let zygote = zygotes_of(server.pid(), "sless_zygote.py");
    assert_eq!(zygote.len(), 1, "{zygote:?}");
    eventually(Duration::from_secs(10), || async {
        let compiling: Vec<u32> = zygotes_of(zygote[0], "sless_zygote.py")
            .into_iter()
            .filter(|pid| {
                std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == std::path::Path::new("/build"))
            })
            .collect();
        compiling
            .is_empty()
            .then_some(())
            .ok_or(format!("forks still compiling: {compiling:?}"))
    })
    .await;
}
