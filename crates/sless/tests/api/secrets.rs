//! Secrets over real HTTP: a value reaches the handler as an environment
//! variable and as a read-only file under /secrets, and appears nowhere
//! else (API answers, the server's log, invocation records, the SQLite
//! file or a dump of the PostgreSQL database); a changed value rolls the
//! functions that use it; a secret in use cannot be deleted; bodies are
//! bounded with 400s naming the field; and a key rotation keeps every
//! value readable, then the old key is no longer needed.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::harness::{Backend, Server};

/// The handler answers digests of what it was given, never the values.
const HANDLER: &[u8] = br#"import hashlib, os

def digest(data):
    return hashlib.sha256(data).hexdigest()

def handle(event, context):
    out = {"env": digest(os.environ.get("DB_PASSWORD", "").encode())}
    path = "/secrets/db/password"
    try:
        with open(path, "rb") as f:
            out["file"] = digest(f.read())
        st = os.stat(path)
        out["mode"] = oct(st.st_mode & 0o777)
        out["own"] = st.st_uid == os.getuid()
        out["keys"] = sorted(os.listdir("/secrets/db"))
        try:
            open(path, "ab").close()
            out["writable"] = True
        except OSError:
            out["writable"] = False
    except OSError as e:
        out["file_error"] = str(e)
    return out
"#;

fn digest(value: &str) -> String {
    hex::encode(Sha256::digest(value.as_bytes()))
}

/// A value no test or server would produce by chance.
fn fresh_value() -> String {
    format!("s3cr3t-{}-value", super::harness::hex_id())
}

fn uses_db() -> Value {
    json!({
        "runtime": "python3.11",
        "env_from_secrets": [{"secret": "db", "key": "password", "env": "DB_PASSWORD"}],
        "secret_files": [{"secret": "db"}],
    })
}

async fn create_db_secret(server: &Server, value: &str) -> Value {
    let (status, secret) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/secrets",
            Some(json!({"name": "db", "data": {"password": value, "user": "app"}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{secret}");
    secret
}

async fn answer(server: &Server) -> Value {
    let (status, _, body) = server.invoke(Method::POST, "/fn/ns/reader", "{}").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Panics if `value` is in `bytes`, naming `place`.
fn absent(place: &str, bytes: &[u8], value: &str) {
    let found = bytes.windows(value.len()).any(|w| w == value.as_bytes());
    assert!(!found, "the secret's value is in {place}");
}

crate::both_stores!(
    a_value_reaches_the_handler_and_nowhere_else,
    a_changed_secret_rolls_the_functions_that_use_it,
    a_secret_in_use_cannot_go_and_references_must_exist,
    bodies_are_bounded_and_errors_never_quote_values,
    a_rotated_key_keeps_every_value_then_goes,
);

async fn a_value_reaches_the_handler_and_nowhere_else(backend: Backend) {
    let server = Server::start_logged(backend, &[("SLESS_LOG", "debug")]).await;
    let value = fresh_value();
    let created = create_db_secret(&server, &value).await;
    assert_eq!(created["keys"], json!(["password", "user"]), "{created}");
    assert!(created.get("data").is_none(), "{created}");

    let function = server
        .deploy("ns", "reader", uses_db(), &[("handler.py", HANDLER)])
        .await;
    assert_eq!(function["env_from_secrets"][0]["env"], "DB_PASSWORD", "{function}");
    let got = answer(&server).await;
    assert_eq!(got["env"], digest(&value), "{got}");
    assert_eq!(got["file"], digest(&value), "{got}");
    assert_eq!(got["mode"], "0o400", "{got}");
    assert_eq!(got["own"], true, "{got}");
    assert_eq!(got["writable"], false, "{got}");
    assert_eq!(got["keys"], json!(["password", "user"]), "{got}");

    // Nowhere in what the API answers.
    let mut answers = Vec::new();
    for path in [
        "/v1/namespaces/ns/secrets",
        "/v1/namespaces/ns/secrets/db",
        "/v1/namespaces/ns/functions/reader",
        "/v1/namespaces/ns/functions/reader/versions",
        "/v1/namespaces/ns/functions/reader/invocations?limit=1000",
    ] {
        let (status, body) = server.call(Method::GET, path, None).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        answers.push(body.to_string());
    }
    let (_, one) = server.call(Method::GET, "/v1/namespaces/ns/secrets/db", None).await;
    assert_eq!(one["keys"], json!(["password", "user"]), "{one}");
    assert!(one["updated_at"].is_string(), "{one}");
    absent("the API's answers", answers.concat().as_bytes(), &value);
    absent(
        "the invocation records",
        format!("{:?}", server.records("ns", "reader").await).as_bytes(),
        &value,
    );

    // Nowhere in the log or the database.
    let log = std::fs::read(server.log_file.as_ref().unwrap()).unwrap();
    assert!(!log.is_empty(), "the server logged nothing");
    absent("the server's log", &log, &value);
    match &server.db {
        None => {
            for entry in std::fs::read_dir(server.data_dir.path()).unwrap().flatten() {
                let name = entry.file_name().to_string_lossy().to_string();
                if name.starts_with("sless.db") {
                    absent(&name, &std::fs::read(entry.path()).unwrap(), &value);
                }
            }
        }
        Some(db) => {
            let dump = std::process::Command::new("pg_dump")
                .arg(db.url())
                .output()
                .expect("pg_dump runs");
            assert!(dump.status.success(), "{}", String::from_utf8_lossy(&dump.stderr));
            let text = String::from_utf8_lossy(&dump.stdout);
            assert!(text.contains("secrets"), "the dump holds the secrets table");
            absent("the database's dump", &dump.stdout, &value);
        }
    }
    // The key that sealed it was generated into the data dir, private.
    use std::os::unix::fs::PermissionsExt;
    let key = std::fs::metadata(server.data_dir.path().join("secret-key")).unwrap();
    assert_eq!(key.permissions().mode() & 0o777, 0o600);
}

async fn a_changed_secret_rolls_the_functions_that_use_it(backend: Backend) {
    let server = Server::start(backend).await;
    let first = fresh_value();
    let created = create_db_secret(&server, &first).await;
    server
        .deploy("ns", "reader", uses_db(), &[("handler.py", HANDLER)])
        .await;
    assert_eq!(answer(&server).await["env"], digest(&first));

    let second = fresh_value();
    let (status, changed) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/secrets/db",
            Some(json!({"data": {"password": second}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["keys"], json!(["password", "user"]), "{changed}");
    assert!(
        changed["updated_at"].as_str() > created["updated_at"].as_str(),
        "{changed}"
    );
    assert!(!changed.to_string().contains(&second));
    // The function rolled before the answer: the next call has the new value.
    let got = answer(&server).await;
    assert_eq!(got["env"], digest(&second), "{got}");
    assert_eq!(got["file"], digest(&second), "{got}");

    // The same values again change nothing.
    let (status, same) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/secrets/db",
            Some(json!({"data": {"password": second}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{same}");
    assert_eq!(same["updated_at"], changed["updated_at"]);
    // A key no function takes can go; the files follow.
    let (status, fewer) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/secrets/db",
            Some(json!({"data": {"user": null}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{fewer}");
    assert_eq!(fewer["keys"], json!(["password"]), "{fewer}");
    assert_eq!(answer(&server).await["keys"], json!(["password"]));

    // A value no environment can carry: the function says why and keeps
    // serving with the values before.
    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/secrets/db",
            Some(json!({"data": {"password": "nul\u{0}inside"}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, function) = server
        .call(Method::GET, "/v1/namespaces/ns/functions/reader", None)
        .await;
    let message = function["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("the value of secret \"db\" key \"password\" holds a NUL character"),
        "{message}"
    );
    assert!(!message.contains("inside"), "{message}");
    assert_eq!(answer(&server).await["env"], digest(&second));
}

async fn a_secret_in_use_cannot_go_and_references_must_exist(backend: Backend) {
    let server = Server::start(backend).await;
    // A function cannot name a secret or key that is not there (400).
    for (spec, field) in [
        (uses_db(), "env_from_secrets"),
        (
            json!({"runtime": "python3.11", "secret_files": [{"secret": "db"}]}),
            "secret_files",
        ),
    ] {
        let mut body = spec;
        body["name"] = json!("reader");
        let (status, error) = server
            .call(Method::POST, "/v1/namespaces/ns/functions", Some(body))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
        assert_eq!(error["field"], field, "{error}");
        assert!(error["error"].as_str().unwrap().contains("\"db\""), "{error}");
    }
    let value = fresh_value();
    create_db_secret(&server, &value).await;
    let mut body = uses_db();
    body["name"] = json!("reader");
    body["env_from_secrets"][0]["key"] = json!("nope");
    let (status, error) = server
        .call(Method::POST, "/v1/namespaces/ns/functions", Some(body))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert!(error["error"].as_str().unwrap().contains("no key \"nope\""), "{error}");

    server
        .deploy("ns", "reader", uses_db(), &[("handler.py", HANDLER)])
        .await;
    // In use: neither the secret nor the key the function takes can go.
    let (status, error) = server.call(Method::DELETE, "/v1/namespaces/ns/secrets/db", None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert!(error["error"].as_str().unwrap().contains("\"reader\""), "{error}");
    let (status, error) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/secrets/db",
            Some(json!({"data": {"password": null}})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert!(error["error"].as_str().unwrap().contains("\"reader\""), "{error}");
    assert_eq!(answer(&server).await["env"], digest(&value));

    // Once no function uses it, it goes.
    let (status, _) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/functions/reader",
            Some(json!({"env_from_secrets": null, "secret_files": null})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = server.call(Method::DELETE, "/v1/namespaces/ns/secrets/db", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = server.call(Method::GET, "/v1/namespaces/ns/secrets/db", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = server.call(Method::DELETE, "/v1/namespaces/ns/secrets/db", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Another namespace's token sees none of it.
    let other = server.token_for(&["other"]).await;
    let (status, _) = server
        .call_as(Some(&other), Method::GET, "/v1/namespaces/ns/secrets", None)
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

async fn bodies_are_bounded_and_errors_never_quote_values(backend: Backend) {
    let server = Server::start(backend).await;
    let value = fresh_value();
    let many: serde_json::Map<String, Value> = (0..65).map(|i| (format!("k{i}"), json!("v"))).collect();
    for (body, field) in [
        (json!({"name": "a", "data": many}), "data"),
        (json!({"name": "a", "data": {"big": "x".repeat(65_537)}}), "data"),
        (json!({"name": "a", "data": {"../escape": value}}), "data"),
        (json!({"name": "a", "data": {".": value}}), "data"),
        (json!({"name": "a", "data": value}), "data"),
        (json!({"name": "a", "data": {"k": [value]}}), "data"),
        (json!({"name": "a", "data": {"k": null}}), "data"),
        (json!({"name": "A_b", "data": {"k": value}}), "name"),
        (json!({"data": {"k": value}}), "name"),
        (json!({"name": "a"}), "data"),
        (json!({"name": "a", "data": {"k": value}, "values": value}), "values"),
    ] {
        let (status, error) = server.call(Method::POST, "/v1/namespaces/ns/secrets", Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
        assert_eq!(error["field"], field, "{error}");
        assert!(
            !error.to_string().contains(&value),
            "an error quotes the value: {error}"
        );
    }
    // The limits themselves are allowed.
    let most: serde_json::Map<String, Value> = (0..64).map(|i| (format!("k{i}"), json!("v"))).collect();
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/secrets",
            Some(json!({"name": "most", "data": most})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/secrets/most",
            Some(json!({"data": {"one-more": "v"}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["field"], "data", "{body}");
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/secrets",
            Some(json!({"name": "most", "data": {}})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    // At most 100 secrets in a namespace.
    for i in 1..100 {
        let (status, body) = server
            .call(
                Method::POST,
                "/v1/namespaces/many/secrets",
                Some(json!({"name": format!("s{i}"), "data": {"k": "v"}})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/many/secrets",
            Some(json!({"name": "s100", "data": {"k": "v"}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/many/secrets",
            Some(json!({"name": "s101", "data": {"k": "v"}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["field"], "name", "{body}");
}

fn key_text(byte: u8) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode([byte; 32])
}

async fn a_rotated_key_keeps_every_value_then_goes(backend: Backend) {
    let (old, new) = (key_text(1), key_text(2));
    let mut server = Server::start_with(backend, &[("SLESS_SECRET_KEY", &old)]).await;
    let value = fresh_value();
    create_db_secret(&server, &value).await;
    server
        .deploy("ns", "reader", uses_db(), &[("handler.py", HANDLER)])
        .await;

    // The new key with the old one as the previous: everything is sealed
    // again at start, and the function serves the value as before.
    server.kill9();
    server.extra_env.retain(|(k, _)| k != "SLESS_SECRET_KEY");
    server.extra_env.push(("SLESS_SECRET_KEY".into(), new.clone()));
    server.extra_env.push(("SLESS_SECRET_KEY_PREVIOUS".into(), old.clone()));
    server.spawn();
    assert_eq!(answer(&server).await["env"], digest(&value));

    // Then the new key alone.
    server.kill9();
    server.extra_env.retain(|(k, _)| k != "SLESS_SECRET_KEY_PREVIOUS");
    server.spawn();
    let got = answer(&server).await;
    assert_eq!(got["env"], digest(&value), "{got}");
    assert_eq!(got["file"], digest(&value), "{got}");
    let (status, changed) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/secrets/db",
            Some(json!({"data": {"user": "other"}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");

    // The old key alone opens nothing: the server refuses to start and says why.
    server.kill9();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sless"));
    cmd.arg("server")
        .env("SLESS_LISTEN", "127.0.0.1:0")
        .env("SLESS_DATA_DIR", server.data_dir.path())
        .env("SLESS_SECRET_KEY", &old)
        .env("SLESS_ADMIN_TOKEN", &server.admin)
        .env_remove("SLESS_SECRET_KEY_PREVIOUS")
        .env_remove("SLESS_DATABASE_URL");
    if let Some(db) = &server.db {
        cmd.env("SLESS_DATABASE_URL", db.url());
    }
    let refused = cmd.output().expect("sless runs");
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("secret \"db\"") && said.contains("SLESS_SECRET_KEY_PREVIOUS"),
        "{said}"
    );
    assert!(!said.contains(&old), "the key is in the message: {said}");
}

/// `sless secret`: values from a flag, a file and stdin go in; what the
/// CLI prints back is names and keys only.
#[tokio::test]
async fn the_cli_creates_changes_lists_and_deletes_secrets() {
    use std::io::Write;
    let (server, user) = super::cli::logged_in().await;
    let value = fresh_value();
    let mut child = user
        .command(&[
            "secret",
            "create",
            "db",
            "--literal",
            "user=app",
            "--from-stdin",
            "password",
            "-o",
            "json",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{value}").unwrap();
    let created = child.wait_with_output().unwrap();
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let created: Value = serde_json::from_slice(&created.stdout).unwrap();
    assert_eq!(created["keys"], json!(["password", "user"]), "{created}");

    // The value reaches a function deployed by the CLI with references to
    // it, as given (the final newline dropped).
    let code = tempfile::tempdir().unwrap();
    std::fs::write(code.path().join("handler.py"), HANDLER).unwrap();
    let code_dir = code.path().display().to_string();
    #[rustfmt::skip]
    let deployed = user.ok(&[
        "deploy", &code_dir, "--name", "reader", "--runtime", "python3.11",
        "--secret-env", "DB_PASSWORD=db/password", "--secret-files", "db",
    ]);
    assert!(!deployed.stdout.contains(&value) && !deployed.stderr.contains(&value));
    let (_, _, body) = server.invoke(Method::POST, "/fn/default/reader", "{}").await;
    let got = serde_json::from_str::<Value>(&body).unwrap();
    assert_eq!(got["env"], digest(&value), "{body}");
    assert_eq!(got["file"], digest(&value), "{body}");
    let shown = user.ok(&["get", "reader"]);
    assert!(
        shown.stdout.contains("DB_PASSWORD=db/password") && shown.stdout.contains("/secrets/db"),
        "{}",
        shown.stdout
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cert.pem");
    std::fs::write(&file, "-----BEGIN-----\n").unwrap();
    let set = user.ok(&[
        "secret",
        "set",
        "db",
        "--from-file",
        &format!("cert={}", file.display()),
        "--remove",
        "user",
    ]);
    assert!(set.stdout.contains("cert,password"), "{}", set.stdout);
    let listed = user.ok(&["secret", "ls"]);
    assert!(
        listed.stdout.contains("db") && listed.stdout.contains("cert,password"),
        "{}",
        listed.stdout
    );
    let shown = user.ok(&["secret", "get", "db", "-o", "json"]);
    assert_eq!(shown.json()["keys"], json!(["cert", "password"]));
    for run in [&set, &listed, &shown] {
        assert!(!run.stdout.contains(&value) && !run.stderr.contains(&value));
    }
    // In use: the server's 409 names the function.
    let refused = user.fails(&["secret", "rm", "db"]);
    assert!(refused.stderr.contains("reader"), "{}", refused.stderr);
    user.ok(&["rm", "reader"]);
    user.ok(&["secret", "rm", "db"]);
    assert!(user.ok(&["secret", "ls"]).stderr.contains("no secrets"));
}

/// Replicas on one PostgreSQL (same SLESS_SECRET_KEY): a secret changed
/// through one rolls the functions on the other within a reconcile period.
#[tokio::test]
async fn a_secret_changed_through_one_replica_rolls_on_the_other() {
    use super::harness::{eventually, PgDb, S3Server};
    let db = PgDb::create().await;
    let s3 = S3Server::start().await;
    let mut env = s3.env();
    env.push(("SLESS_SECRET_KEY".into(), key_text(7)));
    let leader = Server::replica(&db.url(), &env);
    let follower = Server::replica(&db.url(), &env);
    let first = fresh_value();
    create_db_secret(&leader, &first).await;
    leader
        .deploy("ns", "reader", uses_db(), &[("handler.py", HANDLER)])
        .await;
    for server in [&leader, &follower] {
        eventually(std::time::Duration::from_secs(20), || async {
            let (status, _, body) = server.invoke(Method::POST, "/fn/ns/reader", "{}").await;
            let got: Value = serde_json::from_str(&body).unwrap_or_default();
            if status == StatusCode::OK && got["env"] == digest(&first) {
                Ok(())
            } else {
                Err(format!("{status}: {body}"))
            }
        })
        .await;
    }

    let second = fresh_value();
    let (status, changed) = follower
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/secrets/db",
            Some(json!({"data": {"password": second}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(answer(&follower).await["env"], digest(&second));
    let got = eventually(std::time::Duration::from_secs(20), || async {
        let got = answer(&leader).await;
        if got["file"] == digest(&second) {
            Ok(got)
        } else {
            Err(format!("the leader still serves the old value: {got}"))
        }
    })
    .await;
    assert_eq!(got["env"], digest(&second), "{got}");
}
