//! The `sless` command-line client, run as a subprocess against a real
//! server, with its config under a private HOME: what a person types and
//! what a script reads back.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::harness::{Backend, Server, ADMIN};

/// A user of the CLI: a HOME of their own (config included).
pub(super) struct User {
    home: tempfile::TempDir,
    /// `XDG_CONFIG_HOME`; `None` leaves it unset (config under `~/.config`).
    xdg: Option<PathBuf>,
    env: Vec<(String, String)>,
}

/// What a run printed and how it ended.
pub(super) struct Run {
    pub(super) ok: bool,
    pub(super) stdout: String,
    pub(super) stderr: String,
}

impl Run {
    pub(super) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout))
    }
}

impl User {
    pub(super) fn new() -> User {
        let home = tempfile::tempdir().expect("temp dir");
        let xdg = Some(home.path().join("xdg"));
        User {
            home,
            xdg,
            env: Vec::new(),
        }
    }

    fn config_path(&self) -> PathBuf {
        match &self.xdg {
            Some(xdg) => xdg.join("sless/config.json"),
            None => self.home.path().join(".config/sless/config.json"),
        }
    }

    pub(super) fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sless"));
        cmd.args(args)
            .env("HOME", self.home.path())
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("SLESS_ENDPOINT")
            .env_remove("SLESS_TOKEN")
            .env_remove("SLESS_NAMESPACE")
            .stdin(Stdio::null());
        if let Some(xdg) = &self.xdg {
            cmd.env("XDG_CONFIG_HOME", xdg);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    pub(super) fn run(&self, args: &[&str]) -> Run {
        let Output { status, stdout, stderr } = self.command(args).output().expect("run sless");
        Run {
            ok: status.success(),
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        }
    }

    /// Runs and expects exit code 0.
    pub(super) fn ok(&self, args: &[&str]) -> Run {
        let run = self.run(args);
        assert!(
            run.ok,
            "sless {args:?} failed\nstdout: {}\nstderr: {}",
            run.stdout, run.stderr
        );
        run
    }

    /// Runs and expects a non-zero exit with an `error: ...` line.
    pub(super) fn fails(&self, args: &[&str]) -> Run {
        let run = self.run(args);
        assert!(!run.ok, "sless {args:?} succeeded\nstdout: {}", run.stdout);
        assert!(run.stderr.contains("error: "), "{}", run.stderr);
        run
    }

    /// `sless login URL --token ADMIN`.
    pub(super) fn login(&self, server: &Server) {
        self.ok(&["login", &server.url, "--token", ADMIN]);
    }
}

/// A user logged in as admin to a fresh SQLite server.
pub(super) async fn logged_in() -> (Server, User) {
    let server = Server::start(Backend::Sqlite).await;
    let user = User::new();
    user.login(&server);
    (server, user)
}

/// Writes `files` under a new temp dir named `name`.
pub(super) fn dir_of(name: &str, files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let parent = tempfile::tempdir().expect("temp dir");
    let dir = parent.path().join(name);
    for (path, contents) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }
    (parent, dir)
}

/// Polls `check` until it returns something (30 s at most).
pub(super) fn eventually<T>(mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "not within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

pub(super) fn path_str(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

const ECHO_PY: &str = r#"
import os, sys

HERE = os.path.dirname(os.path.abspath(__file__))

def handle(event, context):
    if isinstance(event, dict) and "status" in event:
        return {"statusCode": event["status"], "body": {"teapot": True}}
    if isinstance(event, dict) and "mark" in event:
        print("mark " + event["mark"])
        print("to stderr", file=sys.stderr)
    name = event.get("name", "nobody") if isinstance(event, dict) else event
    return {
        "greeting": os.environ.get("GREETING", "hello") + " " + str(name),
        "method": context.method,
        "path": context.path,
        "query": context.query,
        "shipped_git": os.path.exists(os.path.join(HERE, ".git")),
        "shipped_node_modules": os.path.exists(os.path.join(HERE, "node_modules")),
        "shipped_pycache": os.path.exists(os.path.join(HERE, "__pycache__", "stale.txt")),
    }
"#;

/// Deploys ECHO_PY as `name` and returns the deploy run.
pub(super) fn deploy_echo(user: &User, name: &str) -> Run {
    let (_tmp, dir) = dir_of(name, &[("handler.py", ECHO_PY)]);
    user.ok(&["deploy", path_str(&dir), "--runtime", "python3.11"])
}

#[tokio::test]
async fn login_saves_config_and_flags_and_env_override_it() {
    let server = Server::start(Backend::Sqlite).await;
    let user = User::new();
    let run = user.fails(&["ls"]);
    assert!(run.stderr.contains("sless login"), "{}", run.stderr);

    // A bad token is refused by the server and nothing is saved.
    let run = user.fails(&["login", &server.url, "--token", "wrong-token-0123456789"]);
    assert!(run.stderr.contains("missing or invalid bearer token"), "{}", run.stderr);
    assert!(!user.config_path().exists());

    let run = user.ok(&["login", &server.url, "--token", ADMIN]);
    assert!(run.stdout.contains("Logged in"), "{}", run.stdout);
    let path = user.config_path();
    let mode = std::fs::metadata(&path).expect("config saved").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the config holds a token");
    let saved: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(
        saved,
        json!({"endpoint": server.url, "token": ADMIN, "namespace": "default"})
    );
    let run = user.ok(&["ls"]);
    assert!(
        run.stderr.contains("no functions in namespace default"),
        "{}",
        run.stderr
    );
    assert_eq!(user.ok(&["ls", "-o", "json"]).json(), json!([]));

    // SLESS_TOKEN overrides the saved token; --token overrides SLESS_TOKEN.
    let mut with_env = User::new();
    with_env.home = tempfile::tempdir().unwrap();
    with_env.xdg = user.xdg.clone();
    with_env.env = vec![("SLESS_TOKEN".into(), "wrong-token-0123456789".into())];
    let run = with_env.fails(&["ls"]);
    assert!(run.stderr.contains("(401 Unauthorized)"), "{}", run.stderr);
    with_env.ok(&["ls", "--token", ADMIN]);

    // Another endpoint never gets the saved token.
    let run = user.fails(&["ls", "--endpoint", "http://127.0.0.1:9"]);
    assert!(run.stderr.contains("no token for http://127.0.0.1:9"), "{}", run.stderr);
    // SLESS_ENDPOINT with a token of its own is used as is.
    let mut elsewhere = User::new();
    elsewhere.env = vec![
        ("SLESS_ENDPOINT".into(), server.url.clone()),
        ("SLESS_TOKEN".into(), ADMIN.into()),
        ("SLESS_NAMESPACE".into(), "from-env".into()),
    ];
    elsewhere.ok(&[
        "deploy",
        path_str(&examples().join("hello-python")),
        "--runtime",
        "python3.11",
        "--no-wait",
    ]);
    assert_eq!(
        user.ok(&["ls", "-n", "from-env", "-o", "json"]).json()[0]["name"],
        "hello-python"
    );
}

#[tokio::test]
async fn login_checks_the_namespace_and_saves_it() {
    let server = Server::start(Backend::Sqlite).await;
    let team_token = server.token_for(&["team-a"]).await;
    // No XDG_CONFIG_HOME: the config goes to ~/.config/sless.
    let mut user = User::new();
    user.xdg = None;
    // A token of one namespace logs in to it, named or not.
    user.ok(&["login", &server.url, "--token", &team_token]);
    let saved: Value = serde_json::from_slice(&std::fs::read(user.config_path()).unwrap()).unwrap();
    assert_eq!(saved["namespace"], "team-a");
    let run = user.fails(&["login", &server.url, "--token", &team_token, "-n", "team-b"]);
    assert!(
        run.stderr.contains("403"),
        "the token does not cover team-b: {}",
        run.stderr
    );
    // One of several that do not hold the saved one has to be named.
    let both = server.token_for(&["team-b", "team-c"]).await;
    let run = user.fails(&["login", &server.url, "--token", &both]);
    assert!(
        run.stderr
            .contains("covers the namespaces team-b, team-c, not \"team-a\": pick one with `-n NAMESPACE`"),
        "{}",
        run.stderr
    );
    user.ok(&["login", &server.url, "--token", &team_token, "-n", "team-a"]);
    let saved: Value = serde_json::from_slice(&std::fs::read(user.config_path()).unwrap()).unwrap();
    assert_eq!(saved["namespace"], "team-a");
    user.ok(&["ls"]);
    let run = user.fails(&["ls", "-n", "team-b"]);
    assert!(run.stderr.contains("403"), "{}", run.stderr);
}

#[tokio::test]
async fn deploy_python_dir_then_invoke_and_redeploy() {
    let (server, user) = logged_in().await;
    let (_tmp, dir) = dir_of(
        "echo",
        &[
            ("handler.py", ECHO_PY),
            (".git/config", "[core]\n"),
            ("node_modules/junk/index.js", "syntax error("),
            ("__pycache__/stale.txt", "stale"),
        ],
    );
    let run = user.ok(&[
        "deploy",
        path_str(&dir),
        "--runtime",
        "python3.11",
        "--env",
        "GREETING=hi",
        "--memory",
        "128",
    ]);
    assert_eq!(
        run.stdout.trim(),
        format!("{}/fn/default/echo", server.url),
        "the URL, alone"
    );
    assert!(
        run.stderr.contains("function echo is ready (version 1)"),
        "{}",
        run.stderr
    );

    let run = user.ok(&["invoke", "echo", "--data", r#"{"name": "you"}"#]);
    let answer: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(answer["greeting"], "hi you");
    assert_eq!(answer["method"], "POST");
    assert_eq!(answer["shipped_git"], false, "{answer}");
    assert_eq!(answer["shipped_node_modules"], false, "{answer}");
    assert_eq!(answer["shipped_pycache"], false, "{answer}");

    let run = user.ok(&["invoke", "echo", "-X", "put", "--path", "/a/b?x=1", "-o", "json"]);
    let answer = run.json();
    assert_eq!(answer["status"], 200);
    assert_eq!(answer["headers"]["content-type"], "application/json");
    assert_eq!(answer["body"]["method"], "PUT");
    assert_eq!(answer["body"]["path"], "/a/b");
    assert_eq!(answer["body"]["query"], json!({"x": "1"}));

    // Again with new code and env: the spec is patched, version 2 serves.
    std::fs::write(
        dir.join("handler.py"),
        ECHO_PY.replace("\"hello\")", "\"hello\").upper()"),
    )
    .unwrap();
    let run = user.ok(&["deploy", path_str(&dir), "--env", "GREETING=hey"]);
    assert!(run.stderr.contains("updated function echo"), "{}", run.stderr);
    assert!(run.stderr.contains("(version 2)"), "{}", run.stderr);
    let run = user.ok(&["invoke", "echo", "--data", r#"{"name": "you"}"#]);
    assert_eq!(
        serde_json::from_str::<Value>(&run.stdout).unwrap()["greeting"],
        "HEY you"
    );
    // `sless versions` lists both, with what each keeps.
    let listed = user.ok(&["versions", "echo"]).stdout;
    assert!(listed.contains("SIZE"), "{listed}");
    assert_eq!(listed.matches(" KiB ").count(), 2, "{listed}");
    let run = user.fails(&["versions", "echo", "--rm", "2"]);
    assert!(run.stderr.contains("serves ($latest)"), "{}", run.stderr);
    let run = user.ok(&["versions", "echo", "--rm", "1"]);
    assert_eq!(run.stdout.trim(), "version 1 of echo deleted");
    let listed = user.ok(&["versions", "echo"]).stdout;
    assert_eq!(listed.matches(" KiB ").count(), 1, "{listed}");
    let function = user.ok(&["get", "echo", "-o", "json"]).json();
    assert_eq!(function["env"], json!({"GREETING": "hey"}));
    assert_eq!(function["memory_mb"], 128, "flags left out leave the spec alone");
    // --clear empties a list no value of its flag can.
    user.ok(&["deploy", path_str(&dir), "--clear", "env"]);
    let function = user.ok(&["get", "echo", "-o", "json"]).json();
    assert_eq!(function["env"], json!({}), "{function}");
    user.ok(&["deploy", path_str(&dir), "--env", "GREETING=hey"]);

    // Asynchronous delivery is set by flags too; "none" removes a destination.
    #[rustfmt::skip]
    user.ok(&[
        "deploy", path_str(&dir), "--async-retries", "0", "--async-max-age", "600",
        "--on-failure", "function:echo",
    ]);
    let function = user.ok(&["get", "echo", "-o", "json"]).json();
    assert_eq!(
        function["async"],
        json!({"retry_limit": 0, "max_event_age_sec": 600, "on_failure": {"type": "function", "function": "echo"}})
    );
    let shown = user.ok(&["get", "echo"]).stdout;
    assert!(
        shown.contains("0 retries, events expire after 600 s, on failure function:echo"),
        "{shown}"
    );
    user.ok(&["deploy", path_str(&dir), "--on-failure", "none"]);
    let function = user.ok(&["get", "echo", "-o", "json"]).json();
    assert_eq!(function["async"], json!({"retry_limit": 0, "max_event_age_sec": 600}));
    let run = user.fails(&["deploy", path_str(&dir), "--async-retries", "99"]);
    assert!(run.stderr.contains("retry_limit"), "{}", run.stderr);

    // The runtime cannot change in place.
    let run = user.fails(&["deploy", path_str(&dir), "--runtime", "nodejs20"]);
    assert!(run.stderr.contains("runs python3.11, not nodejs20"), "{}", run.stderr);
    // A new function needs a runtime.
    let run = user.fails(&["deploy", path_str(&dir), "--name", "fresh"]);
    assert!(run.stderr.contains("--runtime"), "{}", run.stderr);
}

#[tokio::test]
async fn deploy_examples_python_and_node_with_a_vendored_dependency() {
    let (_server, user) = logged_in().await;
    // The README's quick start.
    let hello = examples().join("hello-python");
    let run = user.ok(&["deploy", path_str(&hello), "--name", "hello", "--runtime", "python3.11"]);
    assert!(run.stdout.trim().ends_with("/fn/default/hello"), "{}", run.stdout);
    let run = user.ok(&["invoke", "hello", "--data", r#"{"name": "you"}"#]);
    assert_eq!(
        serde_json::from_str::<Value>(&run.stdout).unwrap(),
        json!({"message": "Hello, you!"})
    );

    // The name defaults to the directory's.
    let node = examples().join("hello-node");
    let run = user.ok(&["deploy", path_str(&node), "--runtime", "nodejs20"]);
    assert!(run.stdout.trim().ends_with("/fn/default/hello-node"), "{}", run.stdout);
    let run = user.ok(&["invoke", "hello-node", "--data", r#"{"name": "you"}"#]);
    let answer: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(answer["message"], "Hello, you!");
    assert!(answer["uptime"].is_string(), "ms() from the vendored package: {answer}");
    assert!(answer["time_left"].as_str().unwrap().ends_with("seconds"), "{answer}");
}

#[tokio::test]
async fn ls_and_get_print_tables_and_json() {
    let (server, user) = logged_in().await;
    deploy_echo(&user, "alpha");
    let run = user.ok(&["ls"]);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["NAME", "RUNTIME", "PHASE", "VERSION", "AGE", "URL"]);
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(row[..4], ["alpha", "python3.11", "Ready", "1"]);
    assert_eq!(row[5], format!("{}/fn/default/alpha", server.url));

    let listed = user.ok(&["ls", "-o", "json"]).json();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["name"], "alpha");
    assert_eq!(listed[0]["status"]["phase"], "Ready");

    let run = user.ok(&["get", "alpha"]);
    for expected in [
        "name:",
        "alpha",
        "runtime:",
        "python3.11",
        "entrypoint:",
        "handler.handle",
        "phase:",
        "Ready",
    ] {
        assert!(run.stdout.contains(expected), "{expected} in\n{}", run.stdout);
    }
    let url_line = run.stdout.lines().find(|l| l.starts_with("url:")).unwrap();
    assert!(url_line.ends_with("/fn/default/alpha"), "{url_line}");
    let function = user.ok(&["get", "alpha", "-o", "json"]).json();
    assert_eq!(function["status"]["version"], 1);
    assert_eq!(function["runtime"], "python3.11");

    // Another namespace is empty; a missing function is the server's 404.
    assert_eq!(user.ok(&["ls", "-n", "other", "-o", "json"]).json(), json!([]));
    let run = user.fails(&["get", "nope"]);
    assert!(
        run.stderr
            .contains(r#"function "nope" not found in namespace "default""#),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn failed_build_exits_non_zero_and_prints_the_build_log() {
    let (_server, user) = logged_in().await;
    let (_tmp, dir) = dir_of(
        "broken",
        &[
            ("handler.py", "def handle(event, context):\n    return 1\n"),
            ("requirements.txt", "./vendor/does-not-exist.whl\n"),
        ],
    );
    let run = user.fails(&["deploy", path_str(&dir), "--runtime", "python3.11"]);
    assert!(run.stderr.contains("build log:"), "{}", run.stderr);
    assert!(run.stderr.contains("does-not-exist"), "pip's complaint: {}", run.stderr);
    assert!(
        run.stderr.contains(r#"error: the build of function "broken" failed"#),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty(), "no URL for a failed build: {}", run.stdout);
    let function = user.ok(&["get", "broken", "-o", "json"]).json();
    assert_eq!(function["status"]["phase"], "Failed");

    // A refused upload: the server's message, nothing built.
    let (_tmp, empty) = dir_of("empty", &[]);
    std::fs::create_dir_all(&empty).unwrap();
    let run = user.fails(&["deploy", path_str(&empty), "--runtime", "python3.11"]);
    assert!(run.stderr.contains("nothing to deploy"), "{}", run.stderr);
}

#[tokio::test]
async fn invoke_fails_on_error_statuses_with_the_servers_message() {
    let (_server, user) = logged_in().await;
    // The server's own error reads as every command's: `error: <message>
    // (<status>)`, here with the call's request id, said once on stderr.
    let run = user.fails(&["invoke", "nope", "--data", "{}"]);
    assert!(
        run.stderr
            .starts_with(r#"error: function "nope" not found in namespace "default" (404 Not Found, request "#),
        "{}",
        run.stderr
    );
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert_eq!(run.stdout, "", "the error is not also printed as a body");
    let get = user.fails(&["get", "nope"]);
    assert_eq!(
        get.stderr.trim(),
        r#"error: function "nope" not found in namespace "default" (404 Not Found)"#
    );
    // -o json still prints the whole answer for scripts.
    let run = user.fails(&["invoke", "nope", "-o", "json"]);
    assert_eq!(run.json()["status"], 404);

    // A handler's own 4xx is a failure too, with its body on stdout.
    deploy_echo(&user, "teapot");
    let run = user.fails(&["invoke", "teapot", "--data", r#"{"status": 418}"#]);
    assert_eq!(
        serde_json::from_str::<Value>(&run.stdout).unwrap(),
        json!({"teapot": true})
    );
    assert!(
        run.stderr
            .starts_with("error: teapot answered with an error status (418 I'm a teapot, request "),
        "{}",
        run.stderr
    );
    // --data @file and plain text bodies.
    let (_tmp, dir) = dir_of("data", &[("event.json", r#"{"name": "from a file"}"#)]);
    let file = format!("@{}", path_str(&dir.join("event.json")));
    let run = user.ok(&["invoke", "teapot", "-d", &file]);
    assert!(run.stdout.contains("hello from a file"), "{}", run.stdout);
    let run = user.ok(&["invoke", "teapot", "-d", "plain words"]);
    assert!(run.stdout.contains("hello plain words"), "{}", run.stdout);
}

#[tokio::test]
async fn rm_deletes_the_function() {
    let (_server, user) = logged_in().await;
    deploy_echo(&user, "gone");
    let run = user.ok(&["rm", "gone"]);
    assert_eq!(run.stdout.trim(), "function gone deleted");
    let run = user.fails(&["get", "gone"]);
    assert!(run.stderr.contains("not found"), "{}", run.stderr);
    let run = user.fails(&["rm", "gone"]);
    assert!(run.stderr.contains("(404 Not Found)"), "{}", run.stderr);
    let run = user.fails(&["invoke", "gone"]);
    assert!(run.stderr.contains("404"), "{}", run.stderr);
}

#[tokio::test]
async fn completions_for_bash_zsh_and_fish() {
    let user = User::new();
    for shell in ["bash", "zsh", "fish"] {
        let run = user.ok(&["completions", shell]);
        assert!(run.stdout.contains("deploy"), "{shell}: {}", run.stdout);
        assert!(run.stdout.contains("invocations"), "{shell}");
        // `instance` (what a pod of the Kubernetes driver runs) is nobody's to type.
        for internal in ["subcmd__instance", "'instance:", "-a \"instance\"", "SLESS_INSTANCE"] {
            assert!(!run.stdout.contains(internal), "{shell} offers {internal}");
        }
    }
    // The client flags are offered to client commands, never to `server`.
    let bash = user.ok(&["completions", "bash"]).stdout;
    let options = |case: &str| {
        let at = bash.find(case).unwrap_or_else(|| panic!("no {case}"));
        let line = bash[at..]
            .lines()
            .find(|l| l.trim_start().starts_with("opts="))
            .unwrap();
        line.to_string()
    };
    assert!(options("sless__subcmd__ls)").contains("--namespace"));
    let server = options("sless__subcmd__server)");
    assert!(server.contains("--listen"), "{server}");
    for client in ["--endpoint", "--token", "--namespace", "--output"] {
        assert!(!server.contains(&format!("{client} ")), "{server}");
    }
    user.fails(&["completions", "tcsh"]);
}

#[tokio::test]
async fn logs_print_and_follow_handler_output() {
    let (_server, user) = logged_in().await;
    deploy_echo(&user, "chatty");

    // Follow from now on (--tail 0: no history), then invoke until a line arrives.
    let mut follower = user
        .command(&["logs", "chatty", "-f", "--tail", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sless logs -f");
    let stdout = follower.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut followed = None;
    let mut sent = Vec::new();
    while followed.is_none() {
        assert!(Instant::now() < deadline, "no line followed; invoked {sent:?}");
        let mark = format!("m{}", sent.len());
        user.ok(&["invoke", "chatty", "--data", &json!({"mark": mark}).to_string()]);
        sent.push(mark);
        while let Ok(line) = rx.recv_timeout(Duration::from_secs(2)) {
            if line.contains(" stdout mark ") {
                followed = Some(line);
                break;
            }
        }
    }
    let _ = follower.kill();
    let _ = follower.wait();
    let line = followed.unwrap();
    // `{RFC3339 time} {request_id} {stream} {text}`
    let fields: Vec<&str> = line.splitn(4, ' ').collect();
    assert_eq!(fields.len(), 4, "{line}");
    assert!(fields[0].contains('T') && fields[0].ends_with('Z'), "{line}");
    assert_eq!(fields[2], "stdout");
    assert!(sent.iter().any(|m| fields[3] == format!("mark {m}")), "{line}");

    // Without -f: the history (written off the request path), both streams.
    let run = eventually(|| {
        let run = user.ok(&["logs", "chatty"]);
        run.stdout.contains(&format!("stdout {}", fields[3])).then_some(run)
    });
    assert!(run.stdout.contains(" stderr to stderr"), "{}", run.stdout);
    let run = user.ok(&["logs", "chatty", "--tail", "1"]);
    assert_eq!(run.stdout.lines().count(), 1, "{}", run.stdout);
    // The one line asked for is not all there is: said on stderr, not silently.
    assert!(
        run.stderr
            .contains("more: older lines may be left: sless logs chatty --tail 10"),
        "{}",
        run.stderr
    );
    let run = user.ok(&["logs", "chatty", "--tail", "10000"]);
    assert!(!run.stderr.contains("more:"), "{}", run.stderr);
    let run = user.fails(&["logs", "nope"]);
    assert!(run.stderr.contains("not found"), "{}", run.stderr);
}

/// The `mark` lines a `sless logs` run printed, in order.
fn marks(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|line| line.split_once(" stdout mark ").map(|(_, mark)| mark.to_string()))
        .collect()
}

#[tokio::test]
async fn logs_follow_the_servers_answers_and_say_where_older_lines_begin() {
    let (server, user) = logged_in().await;
    deploy_echo(&user, "busy");
    // More calls than one answer of the server's logs looks through (200),
    // each printing two lines.
    let calls = 201;
    let all: Vec<String> = (0..calls).map(|i| format!("c{i:03}")).collect();
    for mark in &all {
        let (status, _, body) = server
            .invoke(
                reqwest::Method::POST,
                "/fn/default/busy",
                &json!({"mark": mark}).to_string(),
            )
            .await;
        assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    }
    server.records_until("default", "busy", |r| r.len() == calls).await;

    // All of them, oldest first, whatever one answer holds.
    let run = user.ok(&["logs", "busy", "--tail", "10000"]);
    assert_eq!(marks(&run.stdout), all, "{}", run.stderr);
    assert_eq!(run.stdout.lines().count(), 2 * calls);
    assert!(!run.stderr.contains("more:"), "{}", run.stderr);

    // Fewer than there are: the newest, and the command that prints the rest.
    let run = user.ok(&["logs", "busy", "--tail", "300"]);
    assert_eq!(marks(&run.stdout), all[51..], "{}", run.stderr);
    let prefix = "more: older lines are left: sless logs busy --tail 300 --before ";
    let before = run
        .stderr
        .lines()
        .find_map(|line| line.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line: {}", run.stderr));
    let run = user.ok(&["logs", "busy", "--tail", "300", "--before", before]);
    assert_eq!(marks(&run.stdout), all[..51], "{}", run.stderr);
    assert!(!run.stderr.contains("more:"), "{}", run.stderr);
    let run = user.ok(&["logs", "busy", "--tail", "300", "--before", before, "-o", "json"]);
    assert_eq!(run.stdout.lines().count(), 2 * 51);

    // Following new lines starts from the newest history, and says so.
    let run = user.fails(&["logs", "busy", "-f", "--before", before]);
    assert!(run.stderr.contains("cannot be used with"), "{}", run.stderr);
}

#[tokio::test]
async fn invocations_list_newest_first() {
    let (_server, user) = logged_in().await;
    deploy_echo(&user, "counted");
    for i in 0..3 {
        user.ok(&["invoke", "counted", "--data", &json!({"name": i}).to_string()]);
    }
    user.fails(&["invoke", "counted", "--data", r#"{"status": 418}"#]);
    // Records are written off the request path: wait for all four.
    let page = eventually(|| {
        let page = user.ok(&["invocations", "counted", "-o", "json"]).json();
        (page["items"].as_array().unwrap().len() == 4).then_some(page)
    });
    let items = page["items"].as_array().unwrap();
    assert_eq!(items[0]["status"], "418", "newest first: {page}");
    assert!(items
        .iter()
        .all(|i| i["trigger"] == "http" && i["function"] == "counted"));

    let run = user.ok(&["invocations", "counted", "--limit", "2"]);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", run.stdout);
    assert!(lines[0].starts_with("ID "), "{}", run.stdout);
    assert!(lines[1].contains(" 418 "), "{}", run.stdout);
    assert!(lines[2].contains(" 200 "), "{}", run.stdout);
    let next = run.stderr.trim().rsplit(' ').next().unwrap();
    assert!(
        run.stderr
            .contains("more: sless invocations counted --limit 2 --before "),
        "{}",
        run.stderr
    );
    let older = user
        .ok(&["invocations", "counted", "--limit", "2", "--before", next, "-o", "json"])
        .json();
    assert_eq!(older["items"].as_array().unwrap().len(), 2);
    assert_eq!(older["items"][1]["id"], items[3]["id"]);

    // More than the server answers at once (1000): asked for page by page.
    let all = user
        .ok(&["invocations", "counted", "--limit", "1001", "-o", "json"])
        .json();
    assert_eq!(all["items"], page["items"], "{all}");
    assert_eq!(all["next_before"], Value::Null, "{all}");
}

#[tokio::test]
async fn async_lists_page_by_page_and_say_when_more_are_left() {
    let (_server, user) = logged_in().await;
    deploy_echo(&user, "later");
    // Each event is stored before the 202 that prints its id.
    let ids: Vec<String> = (0..3)
        .map(|i| {
            let run = user.ok(&["invoke", "later", "--async", "--data", &json!({"name": i}).to_string()]);
            run.stdout.trim().to_string()
        })
        .collect();
    let newest_first: Vec<&str> = ids.iter().rev().map(String::as_str).collect();

    let run = user.ok(&["async", "later", "--limit", "2"]);
    let rows: Vec<&str> = run
        .stdout
        .lines()
        .skip(1)
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(rows, newest_first[..2], "{}", run.stdout);
    assert!(
        run.stderr.contains(&format!(
            "more: sless async later --limit 2 --before {}",
            newest_first[1]
        )),
        "{}",
        run.stderr
    );
    let older = user
        .ok(&[
            "async",
            "later",
            "--limit",
            "2",
            "--before",
            newest_first[1],
            "-o",
            "json",
        ])
        .json();
    assert_eq!(older["items"].as_array().unwrap().len(), 1, "{older}");
    assert_eq!(older["items"][0]["id"], newest_first[2]);
    assert_eq!(older["next_before"], Value::Null, "{older}");
    let run = user.ok(&["async", "later", "--limit", "3"]);
    assert!(!run.stderr.contains("more:"), "{}", run.stderr);

    // More than the server answers at once (1000): asked for page by page.
    let all = user.ok(&["async", "later", "--limit", "1001", "-o", "json"]).json();
    let listed: Vec<&str> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, newest_first, "{all}");

    let one = user.ok(&["async", "later", &ids[0], "-o", "json"]).json();
    assert_eq!(one["id"], ids[0].as_str());
}

#[tokio::test]
async fn triggers_are_created_listed_toggled_and_removed() {
    let (server, user) = logged_in().await;
    deploy_echo(&user, "target");

    let run = user.ok(&["trigger", "create", "web", "--function", "target", "--type", "http"]);
    let url_line = run.stdout.lines().find(|l| l.starts_with("url:")).expect("url shown");
    assert!(
        url_line.ends_with(&format!("{}/fn/default/target", server.url)),
        "{}",
        run.stdout
    );
    let nightly = user
        .ok(&[
            "trigger",
            "create",
            "nightly",
            "--function",
            "target",
            "--type",
            "cron",
            "--schedule",
            "0 3 * * *",
            "--timezone",
            "Europe/Berlin",
            "--event",
            r#"{"name": "cron"}"#,
            "-o",
            "json",
        ])
        .json();
    assert_eq!(nightly["type"], "cron");
    assert_eq!(nightly["event"], json!({"name": "cron"}));
    assert_eq!(nightly["enabled"], true);
    // The server's refusal, as is.
    let run = user.fails(&["trigger", "create", "bad", "--function", "target", "--type", "cron"]);
    assert!(run.stderr.contains("(400 Bad Request)"), "{}", run.stderr);
    let run = user.fails(&[
        "trigger",
        "create",
        "bad",
        "--function",
        "target",
        "--type",
        "cron",
        "--event",
        "{",
    ]);
    assert!(run.stderr.contains("--event must be JSON"), "{}", run.stderr);

    let run = user.ok(&["trigger", "ls"]);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", run.stdout);
    assert!(lines[0].starts_with("NAME "), "{}", run.stdout);
    assert!(
        lines[1].starts_with("nightly ") && lines[1].contains("0 3 * * * Europe/Berlin"),
        "{}",
        run.stdout
    );
    assert!(
        lines[2].starts_with("web ") && lines[2].contains(" http "),
        "{}",
        run.stdout
    );
    assert_eq!(
        user.ok(&["trigger", "ls", "-o", "json"])
            .json()
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // Disabled in place: the function takes no work; enabled again, it does.
    let run = user.ok(&["trigger", "disable", "web"]);
    assert_eq!(run.stdout.trim(), "trigger web disabled");
    let web = user.ok(&["trigger", "get", "web", "-o", "json"]).json();
    assert_eq!(web["enabled"], false);
    let run = user.fails(&["invoke", "target"]);
    assert!(run.stderr.contains("503"), "{}", run.stderr);
    let run = user.ok(&["trigger", "enable", "web"]);
    assert_eq!(run.stdout.trim(), "trigger web enabled");
    user.ok(&["invoke", "target"]);

    // A disabled schedule shows no next fire.
    let shown = user.ok(&["trigger", "get", "nightly"]).stdout;
    assert!(!shown.contains("- (disabled)"), "{shown}");
    user.ok(&["trigger", "disable", "nightly"]);
    let shown = user.ok(&["trigger", "get", "nightly"]).stdout;
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("next fire") && l.ends_with("- (disabled)")),
        "{shown}"
    );

    let run = user.ok(&["trigger", "rm", "nightly"]);
    assert_eq!(run.stdout.trim(), "trigger nightly deleted");
    let run = user.fails(&["trigger", "get", "nightly"]);
    assert!(run.stderr.contains("not found"), "{}", run.stderr);
    let run = user.fails(&["trigger", "enable", "nightly"]);
    assert!(run.stderr.contains("(404 Not Found)"), "{}", run.stderr);
}

const WORKER_PY: &str = r#"
def handle(event, context):
    if event.get("fail"):
        raise ValueError("asked to fail")
    return {"sum": event["a"] + event["b"], "trigger": context.trigger}
"#;

#[tokio::test]
async fn job_run_waits_prints_the_result_and_reruns() {
    let (_server, user) = logged_in().await;
    let (_tmp, dir) = dir_of("worker", &[("handler.py", WORKER_PY)]);
    user.ok(&["deploy", path_str(&dir), "--runtime", "python3.11"]);

    let run = user.ok(&[
        "job",
        "run",
        "add",
        "--function",
        "worker",
        "--event",
        r#"{"a": 1, "b": 2}"#,
    ]);
    assert_eq!(run.json(), json!({"sum": 3, "trigger": "job"}));
    // Again with a new event: the next run_id.
    let run = user.ok(&["job", "run", "add", "--event", r#"{"a": 5, "b": 5}"#]);
    assert_eq!(run.json(), json!({"sum": 10, "trigger": "job"}));
    let job = user.ok(&["job", "get", "add", "-o", "json"]).json();
    assert_eq!(job["status"]["run_id"], 2);
    assert_eq!(job["status"]["phase"], "Succeeded");
    assert_eq!(job["event"], json!({"a": 5, "b": 5}));
    // Same event again: just a new run.
    let job = user.ok(&["job", "run", "add", "-o", "json"]).json();
    assert_eq!(job["status"]["run_id"], 3);
    assert_eq!(job["status"]["result"], json!({"sum": 10, "trigger": "job"}));

    // A failing run: non-zero exit with the handler's error.
    let run = user.fails(&[
        "job",
        "run",
        "boom",
        "--function",
        "worker",
        "--event",
        r#"{"fail": true}"#,
    ]);
    assert!(run.stderr.contains("job boom run 1 failed"), "{}", run.stderr);
    assert!(run.stderr.contains("asked to fail"), "{}", run.stderr);
    let run = user.fails(&["job", "run", "missing"]);
    assert!(run.stderr.contains("pass --function"), "{}", run.stderr);
    let run = user.fails(&["job", "run", "orphan", "--function", "nope"]);
    assert!(run.stderr.contains("nope"), "{}", run.stderr);

    let run = user.ok(&["job", "ls"]);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(lines[0].starts_with("NAME "), "{}", run.stdout);
    assert!(
        lines.iter().any(|l| l.starts_with("add ") && l.contains(" Succeeded ")),
        "{}",
        run.stdout
    );
    assert!(
        lines.iter().any(|l| l.starts_with("boom ") && l.contains(" Failed ")),
        "{}",
        run.stdout
    );
    let run = user.ok(&["job", "get", "boom"]);
    assert!(run.stdout.contains("asked to fail"), "{}", run.stdout);

    let run = user.ok(&["job", "rm", "add"]);
    assert_eq!(run.stdout.trim(), "job add deleted");
    let run = user.fails(&["job", "get", "add"]);
    assert!(run.stderr.contains("not found"), "{}", run.stderr);
}
