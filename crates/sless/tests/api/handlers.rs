//! The handler contract over real HTTP, with real python3 and node
//! processes: every row of it, for both runtimes.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{eventually, Backend, Server};

const PY_CONTRACT: &str = r#"
import asyncio, base64, os, sys

def handle(event, context):
    if context.path == "/echo-bytes":
        return {"statusCode": 200, "body": context.raw_body}
    if context.path == "/as-base64":
        return {"statusCode": 200, "headers": {"Content-Type": "image/png"}, "isBase64Encoded": True,
                "body": base64.b64encode(context.raw_body).decode()}
    what = event.get("what") if isinstance(event, dict) else None
    if what == "raise":
        raise ValueError("boom")
    if what == "full":
        return {"statusCode": 201, "headers": {"X-Custom": "yes", "Content-Type": "text/plain",
                "Connection": "close", "Content-Length": "999"}, "body": "created"}
    if what == "full-json":
        return {"statusCode": 202, "body": {"nested": [1, 2]}}
    if what == "none":
        return None
    if what == "env":
        return os.environ.get("GREETING")
    print("printed to stdout")
    print("printed to stderr", file=sys.stderr)
    return {
        "event": event,
        "method": context.method,
        "path": context.path,
        "query": context.query,
        "raw_query": context.raw_query,
        "header": context.headers.get("x-test"),
        "body": context.body,
        "function": context.function,
        "namespace": context.namespace,
        "version": context.version,
        "request_id": context.request_id,
        "trigger": context.trigger,
        "remaining_positive": context.remaining_time_ms() > 0,
        "lambda": [context.aws_request_id, context.function_name, context.function_version,
                   context.memory_limit_in_mb],
    }
"#;

const PY_ASYNC_ONE_ARG: &str = "import asyncio\n\nasync def handle(event):\n    await asyncio.sleep(0.01)\n    return {'async': True, 'event': event}\n";

const JS_CONTRACT: &str = r#"
exports.handle = async (event, context) => {
  if (context.path === "/echo-bytes") return { statusCode: 200, body: context.raw_body };
  if (context.path === "/as-base64") return {
    statusCode: 200, headers: { "Content-Type": "image/png" }, isBase64Encoded: true,
    body: context.raw_body.toString("base64"),
  };
  const what = event && event.what;
  if (what === "raise") throw new Error("boom");
  if (what === "full") return {
    statusCode: 201, body: "created",
    headers: { "X-Custom": "yes", "Content-Type": "text/plain", "Connection": "close", "Content-Length": "999" },
  };
  if (what === "full-json") return { statusCode: 202, body: { nested: [1, 2] } };
  if (what === "none") return undefined;
  if (what === "env") return process.env.GREETING;
  console.log("printed to stdout");
  console.error("printed to stderr");
  return {
    event, method: context.method, path: context.path, query: context.query, raw_query: context.raw_query,
    header: context.headers["x-test"], body: context.body, function: context.function, namespace: context.namespace,
    version: context.version, request_id: context.request_id, trigger: context.trigger,
    remaining_positive: context.getRemainingTimeInMillis() > 0,
    lambda: [context.awsRequestId, context.functionName, context.functionVersion, context.memoryLimitInMB],
  };
};
"#;

const JS_SYNC_ONE_ARG: &str = "exports.handle = (event) => ({ sync: true, event });\n";

async fn check_contract(server: &Server, name: &str) {
    let path = format!("/fn/ns/{name}/some/path?a=1&b=two");
    let response = server
        .request(Method::POST, &path, None)
        .header("x-test", "header-value")
        .header("x-test", "second")
        .header("x-request-id", "my-request-1")
        .body(r#"{"hello": "world"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert_eq!(response.headers()["x-request-id"], "my-request-1");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["event"], json!({"hello": "world"}), "{body}");
    assert_eq!(body["method"], "POST");
    assert_eq!(body["path"], "/some/path");
    assert_eq!(body["query"], json!({"a": "1", "b": "two"}));
    assert_eq!(body["raw_query"], "a=1&b=two");
    assert_eq!(
        body["header"], "header-value, second",
        "a repeated header arrives joined"
    );
    assert_eq!(body["body"], r#"{"hello": "world"}"#);
    assert_eq!(body["function"], name);
    assert_eq!(body["namespace"], "ns");
    assert_eq!(body["version"], 1);
    assert_eq!(body["request_id"], "my-request-1");
    assert_eq!(body["trigger"], "http");
    assert_eq!(body["remaining_positive"], true);
    assert_eq!(
        body["lambda"],
        json!(["my-request-1", name, "1", "192"]),
        "Lambda's names"
    );

    // Empty body -> {}; non-JSON body -> text.
    let (_, _, text) = server.invoke(Method::GET, &format!("/fn/ns/{name}"), "").await;
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["event"], json!({}));
    assert_eq!(body["path"], "");
    let (_, _, text) = server
        .invoke(Method::PUT, &format!("/fn/ns/{name}/"), "plain words")
        .await;
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["event"], "plain words");
    assert_eq!(body["method"], "PUT");
    assert_eq!(body["path"], "/");
    // The rest of the path arrives percent-decoded.
    let (_, _, text) = server
        .invoke(Method::GET, &format!("/fn/ns/{name}/a%20b/%C3%A9"), "")
        .await;
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["path"], "/a b/\u{e9}");

    // Bytes that are not UTF-8 reach the handler and come back whole: as
    // a body of bytes, and as base64 marked isBase64Encoded.
    let sent: Vec<u8> = (0..=255u8).rev().collect();
    for (path, content_type) in [("echo-bytes", "application/octet-stream"), ("as-base64", "image/png")] {
        let response = server
            .request(Method::POST, &format!("/fn/ns/{name}/{path}"), None)
            .body(sent.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert_eq!(response.headers()["content-type"], content_type, "{path}");
        assert_eq!(response.bytes().await.unwrap(), sent, "{path}");
    }

    // A statusCode object is a full response.
    let (status, headers, text) = server
        .invoke(Method::POST, &format!("/fn/ns/{name}"), r#"{"what": "full"}"#)
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(headers["x-custom"], "yes");
    assert_eq!(headers["content-type"], "text/plain");
    assert_eq!(text, "created");
    // Hop-by-hop headers are the gateway's, not the handler's.
    assert_eq!(headers["content-length"], "7");
    assert!(headers.get("connection").is_none(), "{headers:?}");
    let (status, _, text) = server
        .invoke(Method::POST, &format!("/fn/ns/{name}"), r#"{"what": "full-json"}"#)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), json!({"nested": [1, 2]}));
    let (status, _, text) = server
        .invoke(Method::POST, &format!("/fn/ns/{name}"), r#"{"what": "none"}"#)
        .await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, "null"));
    let (_, _, text) = server
        .invoke(Method::POST, &format!("/fn/ns/{name}"), r#"{"what": "env"}"#)
        .await;
    assert_eq!(text, r#""hi there""#, "env from the spec reaches the handler");

    // An exception: 500 with the request id and nothing of the exception
    // (its type and message are in the invocation record).
    let (status, headers, text) = server
        .invoke(Method::POST, &format!("/fn/ns/{name}"), r#"{"what": "raise"}"#)
        .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    let body: Value = serde_json::from_str(&text).unwrap();
    let request_id = headers["x-request-id"].to_str().unwrap();
    assert_eq!(body, json!({"error": "the function failed", "request_id": request_id}));
    assert!(headers.get("x-sless-error").is_none(), "{headers:?}");
    let record = eventually(Duration::from_secs(10), || async {
        let records = server.records("ns", name).await;
        let record = records.iter().find(|r| r["request_id"] == request_id).cloned();
        record.ok_or_else(|| "no record yet".to_string())
    })
    .await;
    assert!(record["error"].as_str().unwrap().contains("boom"), "{record}");

    // Opted in (for development): the message, still no traceback.
    let (status, _) = server
        .call(
            Method::PATCH,
            &format!("/v1/namespaces/ns/functions/{name}"),
            Some(json!({"expose_errors": true})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, headers, text) = server
        .invoke(Method::POST, &format!("/fn/ns/{name}"), r#"{"what": "raise"}"#)
        .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    let body: Value = serde_json::from_str(&text).unwrap();
    assert!(body["error"].as_str().unwrap().contains("boom"), "{body}");
    assert_eq!(body["request_id"], headers["x-request-id"].to_str().unwrap());
    assert!(headers.get("x-sless-error").is_none(), "{headers:?}");
    assert!(
        !text.contains("Traceback") && !text.contains("    at "),
        "no stack to the caller: {text}"
    );
}

#[tokio::test]
async fn python_handler_contract() {
    let server = Server::start(Backend::Sqlite).await;
    let spec = json!({"runtime": "python3.11", "memory_mb": 192, "env": {"GREETING": "hi there"}});
    server
        .deploy("ns", "py", spec, &[("handler.py", PY_CONTRACT.as_bytes())])
        .await;
    check_contract(&server, "py").await;

    let spec = json!({"runtime": "python3.11", "entrypoint": "app.main.handle"});
    server
        .deploy(
            "ns",
            "py-async",
            spec,
            &[("app/__init__.py", b""), ("app/main.py", PY_ASYNC_ONE_ARG.as_bytes())],
        )
        .await;
    let (status, _, text) = server.invoke(Method::POST, "/fn/ns/py-async", "[1, 2]").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"async": true, "event": [1, 2]})
    );
}

#[tokio::test]
async fn node_handler_contract() {
    let server = Server::start(Backend::Sqlite).await;
    let spec = json!({"runtime": "nodejs20", "memory_mb": 192, "env": {"GREETING": "hi there"}});
    server
        .deploy("ns", "js", spec, &[("handler.js", JS_CONTRACT.as_bytes())])
        .await;
    check_contract(&server, "js").await;

    let spec = json!({"runtime": "nodejs20", "entrypoint": "lib/sync.handle"});
    server
        .deploy("ns", "js-sync", spec, &[("lib/sync.js", JS_SYNC_ONE_ARG.as_bytes())])
        .await;
    let (status, _, text) = server.invoke(Method::POST, "/fn/ns/js-sync", r#""x""#).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"sync": true, "event": "x"})
    );
}

#[tokio::test]
async fn gateway_errors() {
    let server = Server::start_with(Backend::Sqlite, &[("SLESS_MAX_INVOKE_BYTES", "1024")]).await;
    let (status, headers, text) = server.invoke(Method::GET, "/fn/ns/missing", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{text}");
    assert!(text.contains("missing") && text.contains("not found"), "{text}");
    assert!(headers.contains_key("x-request-id"));
    // Paths under /fn that name no function are plain 404s.
    for path in ["/fn/ns", "/fn/ns/", "/fn//small", "/fn/ns/NOT%20A%20NAME", "/fn/ns/%FF"] {
        let (status, _, text) = server.invoke(Method::GET, path, "").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {text}");
        assert!(text.contains("\"error\""), "{path}: {text}");
    }
    server
        .deploy(
            "ns",
            "small",
            json!({"runtime": "python3.11"}),
            &[("handler.py", b"def handle(e, c):\n    return 'ok'\n")],
        )
        .await;
    let (status, _, text) = server.invoke(Method::POST, "/fn/ns/small", &"x".repeat(2048)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{text}");
    let (status, _, _) = server.invoke(Method::POST, "/fn/ns/small", "fits").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn dependencies_are_installed_at_build_time() {
    let server = Server::start(Backend::Sqlite).await;
    // Python: a local wheel named in requirements.txt (no network needed).
    let wheel = super::harness::zip_of(&[
        ("greetlib/__init__.py", b"def greet(name):\n    return 'hello ' + name\n"),
        ("greetlib-1.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: greetlib\nVersion: 1.0\n"),
        ("greetlib-1.0.dist-info/WHEEL", b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
        ("greetlib-1.0.dist-info/RECORD", b"greetlib/__init__.py,,\ngreetlib-1.0.dist-info/METADATA,,\ngreetlib-1.0.dist-info/WHEEL,,\ngreetlib-1.0.dist-info/RECORD,,\n"),
    ]);
    let handler = b"import greetlib\n\ndef handle(event, context):\n    return greetlib.greet('py')\n";
    let function = server
        .deploy(
            "ns",
            "py-deps",
            json!({"runtime": "python3.11"}),
            &[
                ("handler.py", handler),
                ("requirements.txt", b"./vendor/greetlib-1.0-py3-none-any.whl\n"),
                ("vendor/greetlib-1.0-py3-none-any.whl", &wheel),
            ],
        )
        .await;
    assert_eq!(function["status"]["version"], 1);
    let (status, _, text) = server.invoke(Method::GET, "/fn/ns/py-deps", "").await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, r#""hello py""#));

    // Node: a file: dependency in package.json.
    server
        .deploy(
            "ns",
            "js-deps",
            json!({"runtime": "nodejs20"}),
            &[
                (
                    "handler.js",
                    b"const greet = require('greetlib');\nexports.handle = () => greet('js');\n",
                ),
                (
                    "package.json",
                    br#"{"name": "fn", "version": "1.0.0", "dependencies": {"greetlib": "file:./vendor/greetlib"}}"#,
                ),
                (
                    "vendor/greetlib/package.json",
                    br#"{"name": "greetlib", "version": "1.0.0", "main": "index.js"}"#,
                ),
                (
                    "vendor/greetlib/index.js",
                    b"module.exports = (name) => 'hello ' + name;\n",
                ),
            ],
        )
        .await;
    let (status, _, text) = server.invoke(Method::GET, "/fn/ns/js-deps", "").await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, r#""hello js""#));

    // A failing install: Failed with pip's message in status.message.
    let (_, uploaded) = server
        .upload(
            "ns",
            "py-deps",
            super::harness::zip_of(&[
                ("handler.py", handler),
                ("requirements.txt", b"./vendor/does-not-exist.whl\n"),
            ]),
        )
        .await;
    let hash = uploaded["status"]["code_hash"].as_str().unwrap();
    let failed = server.wait_build_end("ns", "py-deps", hash).await;
    assert_eq!(failed["status"]["phase"], "Failed");
    let message = failed["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("does-not-exist"),
        "build log tail in the message: {message}"
    );
    assert!(message.contains("version 1 keeps serving"), "{message}");
    // The previous version keeps serving.
    let (status, _, text) = server.invoke(Method::GET, "/fn/ns/py-deps", "").await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, r#""hello py""#));
}

/// A Python build compiles the code's own modules: an instance runs the
/// bytecode the build made (the artifact's source changed afterwards does
/// not change what a new instance runs), and a module that does not compile
/// is named, without failing the build.
#[tokio::test]
async fn python_code_runs_as_the_bytecode_its_build_compiled() {
    let server = Server::start(Backend::Sqlite).await;
    let handler = br#"
from pkg import helper

def handle(event, context):
    with open(helper.__cached__, "rb") as f:
        flags = int.from_bytes(f.read(8)[4:8], "little")
    return {"answer": helper.answer(), "pyc_flags": flags}
"#;
    let files: &[(&str, &[u8])] = &[
        ("handler.py", handler),
        ("pkg/__init__.py", b""),
        ("pkg/helper.py", b"def answer():\n    return 'compiled'\n"),
        ("tools/py2.py", b"print 'a script no handler imports'\n"),
    ];
    let function = server
        .deploy("ns", "compiled", json!({"runtime": "python3.11"}), files)
        .await;
    let message = function["status"]["message"].as_str().unwrap();
    assert!(
        message.ends_with("compiled 3 Python modules to bytecode; not compiled (importing fails): tools/py2.py"),
        "{message}"
    );
    let answer = |text: String| serde_json::from_str::<Value>(&text).unwrap_or_else(|_| panic!("{text}"));
    let (status, _, text) = server.invoke(Method::GET, "/fn/ns/compiled", "").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    // Flags 1: hash-based, and not checked against the source.
    assert_eq!(answer(text), json!({"answer": "compiled", "pyc_flags": 1}));

    let artifacts = server.data_path().join("artifacts");
    let helper = std::fs::read_dir(&artifacts)
        .unwrap()
        .map(|entry| entry.unwrap().path().join("pkg/helper.py"))
        .find(|path| path.is_file())
        .expect("the artifact's pkg/helper.py");
    std::fs::write(&helper, "def answer():\n    return 'source'\n").unwrap();
    // The same code for a second function: the same artifact, a new instance.
    server
        .deploy("ns", "same-code", json!({"runtime": "python3.11"}), files)
        .await;
    let (status, _, text) = server.invoke(Method::GET, "/fn/ns/same-code", "").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(answer(text), json!({"answer": "compiled", "pyc_flags": 1}));

    // Many modules that do not compile, with long lines: the status names
    // the first three, within its bound, and the build still goes live.
    let broken: Vec<(String, Vec<u8>)> = (0..12)
        .map(|i| {
            (
                format!("bad{i}.py"),
                format!("x = 'never closed {}\n", "y".repeat(5000)).into_bytes(),
            )
        })
        .collect();
    let mut files: Vec<(&str, &[u8])> = vec![("handler.py", b"def handle(event, context):\n    return 'ok'\n")];
    files.extend(broken.iter().map(|(name, text)| (name.as_str(), text.as_slice())));
    let function = server
        .deploy("ns", "many-broken", json!({"runtime": "python3.11"}), &files)
        .await;
    let message = function["status"]["message"].as_str().unwrap();
    assert!(
        message.ends_with(
            "compiled 1 Python module to bytecode; not compiled (importing fails): bad0.py, bad1.py, bad10.py, ..."
        ),
        "{message}"
    );
    let (status, _, text) = server.invoke(Method::GET, "/fn/ns/many-broken", "").await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, r#""ok""#));
}

#[tokio::test]
async fn build_timeout_is_enforced() {
    let server = Server::start(Backend::Sqlite).await;
    server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "slow-build", "runtime": "nodejs20", "build_timeout_sec": 2})),
        )
        .await;
    let started = std::time::Instant::now();
    let (_, uploaded) = server
        .upload(
            "ns",
            "slow-build",
            super::harness::zip_of(&[
                ("handler.js", b"exports.handle = () => 1;\n"),
                (
                    "package.json",
                    br#"{"name": "fn", "version": "1.0.0", "scripts": {"install": "sleep 30"}}"#,
                ),
            ]),
        )
        .await;
    let hash = uploaded["status"]["code_hash"].as_str().unwrap();
    let failed = server.wait_build_end("ns", "slow-build", hash).await;
    assert_eq!(failed["status"]["phase"], "Failed", "{failed}");
    assert!(
        failed["status"]["message"]
            .as_str()
            .unwrap()
            .contains("timed out after 2s"),
        "{failed}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "stopped at the timeout"
    );
}

/// Lambda's `index.mjs` often awaits its configuration at its top level.
/// Such a module loads in a fork of the Node zygote and in shims started
/// from the snapshot (pooled, or started for the call that waits), which
/// have no `import()` of their own; its first call sees what it awaited.
/// A module whose top level fails is a failed deploy naming the error.
#[tokio::test]
async fn a_node_es_module_awaiting_at_its_top_level_loads_however_its_shim_starts() {
    let servers = Server::node_shim_starts().await;
    let index = r#"import { greet } from 'greeter';
const config = await new Promise((resolve) => setTimeout(() => resolve({ greeting: process.env.GREETING }), 20));
export const handler = async (event) => ({ said: greet(config.greeting, event.name) });
"#;
    let files: &[(&str, &[u8])] = &[
        ("index.mjs", index.as_bytes()),
        (
            "node_modules/greeter/package.json",
            br#"{"name": "greeter", "main": "greet.js"}"#,
        ),
        (
            "node_modules/greeter/greet.js",
            b"exports.greet = (greeting, name) => `${greeting}, ${name}`;\n",
        ),
    ];
    let failing =
        "await null;\nthrow new Error('no configuration for ' + 'this stage');\nexport const handler = () => 1;\n";
    for server in &servers {
        let spec = json!({"runtime": "nodejs20", "entrypoint": "index.handler", "env": {"GREETING": "hello"}});
        server.deploy("ns", "tla", spec, files).await;
        let (status, _, text) = server.invoke(Method::POST, "/fn/ns/tla", r#"{"name": "you"}"#).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap(),
            json!({"said": "hello, you"})
        );

        let spec = json!({"runtime": "nodejs20", "entrypoint": "index.handler"});
        let function = server
            .deploy_fails("ns", "tla-fails", spec, &[("index.mjs", failing.as_bytes())])
            .await;
        let message = function["status"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("no configuration for this stage"), "{message}");
        assert!(message.contains("index.mjs:2"), "{message}");
    }
}

/// Lambda's `cookies` (function URLs) and `multiValueHeaders` (REST APIs)
/// reach the caller as a header per value, in both runtimes; cookies are
/// scoped to the function like any Set-Cookie a handler sends.
#[tokio::test]
async fn lambda_s_cookies_and_multi_value_headers_reach_the_caller() {
    let server = Server::start(Backend::Sqlite).await;
    let py = b"def handle(event, context):\n    return {'statusCode': 200, 'body': 'ok', 'cookies': ['a=1; Path=/', 'b=2; Domain=example.com'],\n            'multiValueHeaders': {'X-Multi': ['m1', 'm2']}}\n";
    let js = b"exports.handle = () => ({ statusCode: 200, body: 'ok', cookies: ['a=1; Path=/', 'b=2; Domain=example.com'],\n  multiValueHeaders: { 'X-Multi': ['m1', 'm2'] } });\n";
    for (name, runtime, file, code) in [
        ("py", "python3.11", "handler.py", &py[..]),
        ("js", "nodejs20", "handler.js", &js[..]),
    ] {
        server
            .deploy("ns", name, json!({"runtime": runtime}), &[(file, code)])
            .await;
        let (status, headers, text) = server.invoke(Method::GET, &format!("/fn/ns/{name}"), "").await;
        assert_eq!((status, text.as_str()), (StatusCode::OK, "ok"));
        let all = |header: &str| -> Vec<String> {
            (headers.get_all(header).iter())
                .map(|v| v.to_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            all("set-cookie"),
            [format!("a=1; Path=/fn/ns/{name}"), format!("b=2; Path=/fn/ns/{name}")],
            "{name}"
        );
        assert_eq!(all("x-multi"), ["m1", "m2"], "{name}");
    }
}
