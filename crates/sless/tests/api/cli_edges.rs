//! The CLI at its edges: a reader that closes stdout early, connection
//! flags before or after the subcommand, a server that is not there,
//! deleting a function that triggers name, and saying why a function does
//! not serve.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::Stdio;

use serde_json::json;

use super::cli::{deploy_echo, eventually, logged_in, User};
use super::harness::ADMIN;

/// Runs `sless ARGS` with a stdout whose reader is already gone (as after
/// `| head` exits): returns the exit code and stderr.
fn with_closed_stdout(user: &User, args: &[&str]) -> (Option<i32>, String) {
    let (ours, theirs) = UnixStream::pair().expect("socket pair");
    drop(ours);
    let output = user
        .command(args)
        .stdout(Stdio::from(OwnedFd::from(theirs)))
        .stderr(Stdio::piped())
        .output()
        .expect("run sless");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_closed_stdout_ends_any_command_quietly() {
    let user = User::new();
    let (code, stderr) = with_closed_stdout(&user, &["completions", "bash"]);
    assert_eq!((code, stderr.as_str()), (Some(0), ""), "completions");

    let (_server, user) = logged_in().await;
    deploy_echo(&user, "echo");
    for args in [
        &["ls"][..],
        &["get", "echo", "-o", "json"],
        &["invoke", "echo", "--data", "{}"],
        &["trigger", "ls", "-o", "json"],
        &["logs", "echo"],
    ] {
        let (code, stderr) = with_closed_stdout(&user, args);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!((code, stderr.as_str()), (Some(0), ""), "{args:?}");
    }
}

#[tokio::test]
async fn connection_flags_go_before_or_after_the_subcommand() {
    let (server, _) = logged_in().await;
    // A user who never logged in: everything from flags.
    let user = User::new();
    let conn = ["--endpoint", server.url.as_str(), "--token", ADMIN];
    let mut before = conn.to_vec();
    before.extend(["-n", "demo", "-o", "json", "trigger", "ls"]);
    assert_eq!(user.ok(&before).json(), json!([]));
    let mut after = vec!["trigger", "ls", "-n", "demo", "-o", "json"];
    after.extend(conn);
    assert_eq!(user.ok(&after).json(), json!([]));
    let mut split = vec!["-n", "demo", "trigger"];
    split.extend(conn);
    split.extend(["ls", "-o", "json"]);
    assert_eq!(user.ok(&split).json(), json!([]));
    let (_tmp, dir) = super::cli::dir_of("hi", &[("handler.py", "def handle(e, c):\n    return 'hi'\n")]);
    let mut deploy = conn.to_vec();
    deploy.extend([
        "-n",
        "demo",
        "deploy",
        super::cli::path_str(&dir),
        "--runtime",
        "python3.11",
    ]);
    user.ok(&deploy);
    let mut ls = conn.to_vec();
    ls.extend(["--namespace", "demo", "ls", "--output", "json"]);
    assert_eq!(user.ok(&ls).json()[0]["namespace"], "demo");

    // `sless server` and `sless instance` take none of them, and say so
    // instead of ignoring them, under their own usage.
    for args in [
        &["server", "--token", "x"][..],
        &["--token", "x", "server"],
        &["server", "-n", "demo"],
        &["server", "--endpoint", "http://127.0.0.1:1"],
        &["-o", "json", "server"],
        &["instance", "--endpoint", "http://127.0.0.1:1"],
        &["instance", "--token", "x", "serve"],
        &["-n", "demo", "instance"],
    ] {
        let run = user.run(args);
        assert!(!run.ok, "{args:?}: {}", run.stderr);
        let flag = ["--token", "--endpoint", "-n", "-o"]
            .into_iter()
            .find(|flag| args.contains(flag))
            .map(|flag| match flag {
                "-n" => "--namespace",
                "-o" => "--output",
                long => long,
            })
            .unwrap();
        let subcommand = if args.contains(&"server") { "server" } else { "instance" };
        assert!(
            run.stderr.contains(&format!(
                "{flag} is a client flag; `sless {subcommand}` does not take it"
            )),
            "{args:?}: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains(&format!("Usage: sless {subcommand} ")),
            "{args:?}: {}",
            run.stderr
        );
        assert!(!run.stderr.contains("<COMMAND>"), "{args:?}: {}", run.stderr);
    }
}

/// Asserts that `help`, of `sless {command}`, lists none of the client's
/// options: the command does not read them.
fn lists_no_client_option(command: &str, help: &str) {
    assert!(!help.contains("Client options"), "{help}");
    for client in [
        "--endpoint",
        "--token <",
        "--namespace <",
        "--output",
        "SLESS_TOKEN",
        "SLESS_NAMESPACE=",
    ] {
        assert!(!help.contains(client), "{command} help lists {client}:\n{help}");
    }
}

#[tokio::test]
async fn instance_help_shows_only_what_an_instance_reads() {
    let help = User::new().ok(&["instance", "--help"]).stdout;
    assert!(help.contains("--code-dir <CODE_DIR>"), "{help}");
    assert!(help.contains("--instance-namespace <NAMESPACE>"), "{help}");
    lists_no_client_option("instance", &help);
}

#[tokio::test]
async fn server_help_shows_only_what_the_server_reads() {
    let user = User::new();
    let help = user.ok(&["server", "--help"]).stdout;
    assert!(help.contains("--listen <LISTEN>"), "{help}");
    assert!(help.contains("--k8s-namespace <NAMESPACE>"), "{help}");
    lists_no_client_option("server", &help);
    // The server's own `--k8s-namespace` is not the client's `--namespace`.
    let run = user.run(&["server", "--k8s-namespace", "other", "--listen", "not-an-address"]);
    assert!(!run.ok);
    assert!(!run.stderr.contains("client flag"), "{}", run.stderr);
    assert!(run.stderr.contains("--listen"), "{}", run.stderr);
}

/// An endpoint on the loopback that nothing listens on: its port was free
/// a moment ago.
fn endpoint_nothing_listens_on() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}")
}

#[tokio::test]
async fn a_refused_connection_is_one_error_naming_the_endpoint() {
    let endpoint = endpoint_nothing_listens_on();
    let user = User::new();
    for args in [
        vec!["--endpoint", &endpoint, "--token", "t0ken", "ls"],
        vec!["login", &endpoint, "--token", "t0ken"],
        vec!["--endpoint", &endpoint, "--token", "t0ken", "invoke", "f"],
    ] {
        let run = user.fails(&args);
        let errors = run.stderr.lines().filter(|l| l.starts_with("error:")).count();
        assert_eq!(errors, 1, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr
                .contains(&format!("cannot reach {endpoint}: Connection refused")),
            "{args:?}: {}",
            run.stderr
        );
        assert_eq!(run.stderr.matches("Connection refused").count(), 1, "{}", run.stderr);
        let hint = run.stderr.lines().find(|l| l.starts_with("hint:")).expect("a hint");
        assert!(hint.contains(&endpoint) && hint.contains("sless login"), "{hint}");
    }
}

#[tokio::test]
async fn names_that_cannot_be_are_refused_before_any_request() {
    // A request would fail with "cannot reach".
    let endpoint = endpoint_nothing_listens_on();
    let user = User::new();
    let conn = ["--endpoint", endpoint.as_str(), "--token", "t0ken"];
    for (args, argument, refused) in [
        (&["get", ""][..], "'<NAME>'", r#"invalid function name """#),
        (&["rm", "Hello"], "'<NAME>'", r#"invalid function name "Hello""#),
        (&["invoke", ""], "'<NAME>'", r#"invalid function name """#),
        (&["invoke", "hello@"], "'<NAME>'", "nothing after '@'"),
        (&["invoke", "hello@Live"], "'<NAME>'", r#"invalid alias name "Live""#),
        (&["logs", "a_b"], "'<NAME>'", r#"invalid function name "a_b""#),
        (&["async", "a.b"], "'<NAME>'", r#"invalid function name "a.b""#),
        (
            &["async", "f", ""],
            "'[ID]'",
            r#"invalid event id "": it is 24 hex digits"#,
        ),
        (
            &["async", "f", "not-an-id"],
            "'[ID]'",
            r#"invalid event id "not-an-id""#,
        ),
        (&["async", "f", "--before", "x"], "'--before <ID>'", r#"invalid id "x""#),
        (&["async", "f", "--limit", "0"], "'--limit <LIMIT>'", "from 1 to 10000"),
        (
            &["invocations", "f", "--limit", "10001"],
            "'--limit <LIMIT>'",
            "from 1 to 10000",
        ),
        (
            &["invocations", "f", "--before", ""],
            "'--before <ID>'",
            r#"invalid id """#,
        ),
        (&["logs", "f", "--tail", "10001"], "'--tail <N>'", "from 0 to 10000"),
        (&["versions", ""], "'<FUNCTION>'", r#"invalid function name """#),
        (&["alias", "get", "f", ""], "'<ALIAS>'", r#"invalid alias name """#),
        (
            &["alias", "set", "f", "7x", "1"],
            "'<ALIAS>'",
            "must start with a letter",
        ),
        (
            &["alias", "set", "f", "latest", "1"],
            "'<ALIAS>'",
            r#"alias name "latest" is reserved"#,
        ),
        (&["trigger", "get", "A"], "'<NAME>'", r#"invalid trigger name "A""#),
        (
            &["trigger", "create", "t", "--function", "", "--type", "http"],
            "'--function <FUNCTION>'",
            r#"invalid function name """#,
        ),
        (
            &["job", "run", "j", "--function", "F"],
            "'--function <FUNCTION>'",
            r#"invalid function name "F""#,
        ),
        (&["secret", "get", ""], "'<NAME>'", r#"invalid secret name """#),
        (
            &["deploy", ".", "--name", "My_Fn"],
            "'--name <NAME>'",
            r#"invalid function name "My_Fn""#,
        ),
    ] {
        let mut all = args.to_vec();
        all.extend(conn);
        let run = user.fails(&all);
        assert!(
            !run.stderr.contains("cannot reach"),
            "{args:?} made a request: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains(argument),
            "{args:?} does not name {argument}: {}",
            run.stderr
        );
        assert!(run.stderr.contains(refused), "{args:?}: {}", run.stderr);
    }
    // A namespace too, from a flag, the environment or the saved config.
    let mut ls = vec!["-n", "Demo", "ls"];
    ls.extend(conn);
    let run = user.fails(&ls);
    assert!(!run.stderr.contains("cannot reach"), "{}", run.stderr);
    assert!(
        run.stderr.contains(r#"invalid namespace name "Demo""#)
            && run.stderr.contains("(from -n/--namespace or SLESS_NAMESPACE)"),
        "{}",
        run.stderr
    );
    let run = user.fails(&["login", &endpoint, "--token", "t0ken", "-n", ""]);
    assert!(!run.stderr.contains("cannot reach"), "{}", run.stderr);
    assert!(run.stderr.contains(r#"invalid namespace name """#), "{}", run.stderr);
}

#[tokio::test]
async fn rm_refuses_a_function_triggers_name_unless_cascade() {
    let (_server, user) = logged_in().await;
    deploy_echo(&user, "named");
    user.ok(&["trigger", "create", "web", "--function", "named", "--type", "http"]);
    let run = user.fails(&["rm", "named"]);
    assert!(run.stderr.contains("(409 Conflict)"), "{}", run.stderr);
    assert!(run.stderr.contains(r#"trigger "web""#), "{}", run.stderr);
    assert!(run.stderr.contains("sless rm --cascade named"), "{}", run.stderr);
    user.ok(&["get", "named"]);
    let run = user.ok(&["rm", "--cascade", "named"]);
    assert_eq!(run.stdout.trim(), "function named deleted");
    assert_eq!(user.ok(&["trigger", "ls", "-o", "json"]).json(), json!([]));
}

#[tokio::test]
async fn get_says_why_a_function_does_not_serve() {
    let (_server, user) = logged_in().await;
    deploy_echo(&user, "quiet");
    let phase = |user: &User| {
        let run = user.ok(&["get", "quiet"]);
        run.stdout
            .lines()
            .find(|l| l.starts_with("phase:"))
            .expect("a phase line")
            .to_string()
    };
    assert_eq!(phase(&user), "phase:      Ready");
    user.ok(&[
        "trigger",
        "create",
        "web",
        "--function",
        "quiet",
        "--type",
        "http",
        "--disabled",
    ]);
    assert_eq!(
        phase(&user),
        "phase:      Ready (not serving: disabled: its only trigger is disabled)"
    );
    let run = user.ok(&["ls"]);
    assert!(run.stdout.contains("Ready (not serving)"), "{}", run.stdout);
}

#[tokio::test]
async fn schedule_help_names_both_shapes() {
    let run = User::new().ok(&["trigger", "create", "--help"]);
    assert!(
        run.stdout
            .contains("5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first"),
        "{}",
        run.stdout
    );
}

#[tokio::test]
async fn invocations_show_the_alias_that_served_each_call() {
    let (_server, user) = logged_in().await;
    deploy_echo(&user, "aliased");
    user.ok(&["alias", "set", "aliased", "live", "1"]);
    user.ok(&["invoke", "aliased@live"]);
    // Records are written off the request path: one at a time, in order.
    eventually(|| {
        (user.ok(&["invocations", "aliased", "-o", "json"]).json()["items"]
            .as_array()?
            .len()
            == 1)
            .then_some(())
    });
    user.ok(&["invoke", "aliased"]);
    let run = eventually(|| {
        let run = user.ok(&["invocations", "aliased"]);
        (run.stdout.lines().count() == 3).then_some(run)
    });
    let rows: Vec<Vec<&str>> = run.stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    // ID STARTED(date time) TRIGGER STATUS DURATION VERSION ALIAS COLD ...
    assert_eq!(rows[0][5..7], ["VERSION", "ALIAS"], "{}", run.stdout);
    assert_eq!(rows[1][6..8], ["1", "-"], "newest: the plain call\n{}", run.stdout);
    assert_eq!(rows[2][6..8], ["1", "live"], "{}", run.stdout);
}
