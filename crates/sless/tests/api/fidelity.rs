//! Handlers run exactly as under plain `python3` / `node`: a corpus of
//! handlers using popular packages from PyPI and npm (installed by sless's
//! own build from requirements.txt / package.json, from a copy of those
//! packages that scripts/test-packages.sh fetched and the test serves on
//! loopback as the server's `SLESS_PIP_INDEX_URL` and `SLESS_NPM_REGISTRY`,
//! so no build reaches the internet), C extensions with
//! module-level and thread-local state, and HTTP to a server the test starts
//! on 127.0.0.1 (with the host's network shared, as an isolated instance
//! cannot reach the machine's loopback). Each handler answers the same events, in the same order,
//! under sless and under the plain interpreter (run on the very artifact
//! sless built, so the packages are the same); the answers are identical.

use std::path::{Path, PathBuf};
use std::process::Command;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{Backend, Server};

/// Keep in step with scripts/test-packages.sh.
const REQUIREMENTS: &[u8] = b"numpy==2.2.6\nJinja2==3.1.6\nrequests==2.32.3\n";

/// The package index and registry of this test's builds, on 127.0.0.1
/// (package_registry.py over scripts/test-packages.sh's directory).
struct Registry {
    child: std::process::Child,
    url: String,
}

impl Registry {
    fn start() -> Registry {
        use std::io::BufRead;
        let dir = std::env::var_os("SLESS_TEST_PACKAGES")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/sless-test-packages"));
        assert!(
            dir.join("pypi").is_dir() && dir.join("npm").is_dir(),
            "{} has not the fidelity tests' packages: run ./scripts/setup.sh (or scripts/test-packages.sh)",
            dir.display()
        );
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/api/package_registry.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(&dir)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs the package registry");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("registry port: {line:?}"));
        Registry {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    /// A server whose builds install from this registry; it shares the
    /// host's network (the registry, like the test's HTTP server, is on
    /// the machine's loopback, which an isolated sandbox cannot reach).
    async fn server(&self) -> Server {
        let pip = format!("{}/simple/", self.url);
        let npm = format!("{}/npm/", self.url);
        let env = [
            ("SLESS_NETWORK_ISOLATION", "false"),
            ("SLESS_PIP_INDEX_URL", pip.as_str()),
            ("SLESS_NPM_REGISTRY", npm.as_str()),
        ];
        Server::start_with(Backend::Sqlite, &env).await
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A C extension with module-level state: the global RNG seeded at import,
/// an error mode set at import (a context variable in numpy 2).
const NUMPY_CASE: &[u8] = br#"
import numpy as np

np.random.seed(1234)
np.seterr(all="raise")
DRAWN_AT_IMPORT = np.random.random(3).tolist()


def handle(event, context):
    a = np.arange(event["n"], dtype=np.float64).reshape(-1, 2)
    try:
        np.float64(1.0) / np.float64(0.0)
        division = "inf"
    except FloatingPointError as exc:
        division = f"raised: {exc}"
    return {
        "drawn_at_import": DRAWN_AT_IMPORT,
        "drawn_now": np.random.random(2).tolist(),
        "sum": float(a.sum()),
        "gram": (a.T @ a).tolist(),
        "division": division,
        "version": np.__version__,
    }
"#;

const JINJA_CASE: &[u8] = br#"
import jinja2

ENV = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
PAGE = ENV.from_string(
    "<h1>{{ title }}</h1>{% for item in items %}<li>{{ loop.index }}: {{ item | upper }}</li>{% endfor %}"
    "{{ raw | safe }}"
)


def handle(event, context):
    try:
        missing = ENV.from_string("{{ nope }}").render()
    except jinja2.UndefinedError as exc:
        missing = f"{type(exc).__name__}: {exc}"
    return {"page": PAGE.render(**event), "missing": missing}
"#;

const REQUESTS_CASE: &[u8] = br#"
import requests

SESSION = requests.Session()
SESSION.headers["x-corpus"] = "requests"


def handle(event, context):
    answer = SESSION.get(event["url"], params={"q": event["q"]}, timeout=10)
    return {
        "status": answer.status_code,
        "json": answer.json(),
        "header": answer.headers["x-served-by"],
        "ok": answer.ok,
        "version": requests.__version__,
    }
"#;

/// Standard-library C extensions whose state set at import is per thread
/// (sqlite3 refuses a connection used from another thread; threading.local)
/// or per context (decimal), and state that grows from call to call.
const NATIVE_STATE_CASE: &[u8] = br#"
import decimal
import sqlite3
import threading

decimal.getcontext().prec = 50
DB = sqlite3.connect(":memory:")
DB.execute("create table calls (n integer)")
LOCAL = threading.local()
LOCAL.greeting = "set at import"


def handle(event, context):
    DB.execute("insert into calls values (?)", (event["n"],))
    count, total = DB.execute("select count(*), sum(n) from calls").fetchone()
    return {
        "fraction": str(decimal.Decimal(1) / decimal.Decimal(event["n"])),
        "count": count,
        "total": total,
        "local": getattr(LOCAL, "greeting", None),
    }
"#;

const PACKAGE_JSON: &[u8] =
    br#"{"name": "corpus", "version": "1.0.0", "dependencies": {"lodash": "4.17.21", "handlebars": "4.7.8", "semver": "7.6.3"}}"#;

/// Module-level state: lodash's id counter.
const LODASH_CASE: &[u8] = br#"
const _ = require('lodash');
const greet = _.template('hello <%- name %>!');
exports.handle = (event) => ({
  id: _.uniqueId('call-'),
  chunks: _.chunk(event.items, 2),
  sorted: _.sortBy(event.people, ['age', 'name']),
  greeting: greet(event),
  merged: _.merge({ a: { b: 1 } }, { a: { c: event.items.length } }),
});
"#;

const HANDLEBARS_CASE: &[u8] = br#"
const Handlebars = require('handlebars');
Handlebars.registerHelper('shout', (text) => String(text).toUpperCase());
const page = Handlebars.compile('<h1>{{shout title}}</h1>{{#each items}}<li>{{@index}} {{this}}</li>{{/each}}');
let renders = 0;
exports.handle = async (event) => {
  renders += 1;
  return { page: page(event), renders };
};
"#;

const SEMVER_CASE: &[u8] = br#"
const semver = require('semver');
exports.handle = (event) => ({
  max: semver.maxSatisfying(event.versions, event.range),
  sorted: semver.sort([...event.versions]),
  next: semver.inc(event.versions[0], 'minor'),
  valid: event.versions.map((v) => semver.valid(semver.coerce(v))),
});
"#;

/// Node's own native parts: crypto, zlib, ICU.
const BUILTINS_CASE: &[u8] = br#"
const crypto = require('crypto');
const zlib = require('zlib');
exports.handle = (event) => ({
  sha256: crypto.createHash('sha256').update(event.text).digest('hex'),
  deflated: zlib.deflateSync(Buffer.from(event.text.repeat(5))).toString('base64'),
  number: new Intl.NumberFormat('de-DE').format(event.amount),
  date: new Date(Date.UTC(2024, 1, 29)).toLocaleDateString('en-GB', { timeZone: 'UTC' }),
});
"#;

/// Runs a handler module under plain python3: imports it once, then calls
/// it with each event in turn; prints one JSON answer a line.
const PLAIN_PYTHON: &str = r#"
import importlib, json, os, sys
code, module, events = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
sys.path[:0] = [os.path.join(code, ".deps"), code]
os.chdir(code)
handler = importlib.import_module(module).handle
for event in events:
    print(json.dumps(handler(event, {})))
"#;

/// The same under plain node.
const PLAIN_NODE: &str = r#"
const path = require('path');
const [code, file, events] = process.argv.slice(1);
process.chdir(code);
const mod = require(path.join(code, file));
(async () => {
  for (const event of JSON.parse(events)) console.log(JSON.stringify(await mod.handle(event, {})));
})();
"#;

/// A tiny HTTP server on 127.0.0.1 that answers every GET with its path
/// and query and the x-corpus header it got, as JSON. On a thread of its
/// own: the plain interpreter runs while the test's runtime waits for it.
fn start_http_server() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let text = String::from_utf8_lossy(&request).to_string();
            let target = text.split_whitespace().nth(1).unwrap_or("").to_string();
            let header = text
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("x-corpus: ").map(str::to_string))
                .unwrap_or_default();
            let body = json!({"target": target, "x-corpus": header}).to_string();
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-served-by: corpus\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    format!("http://{addr}")
}

/// The artifact sless built that holds `file`.
fn artifact_with(server: &Server, file: &str) -> PathBuf {
    let dir = server.data_dir.path().join("artifacts");
    std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.') && p.join(file).is_file())
        .unwrap_or_else(|| panic!("no artifact in {} holds {file}", dir.display()))
}

/// The answers of the plain interpreter, one per event.
fn plain_answers(program: &str, script: &str, code: &Path, module: &str, events: &[Value]) -> Vec<Value> {
    let mut command = Command::new(program);
    if program.contains("python") {
        command.arg("-B"); // writes no bytecode into the artifact
    }
    let output = command
        .arg(if program.contains("python") { "-c" } else { "-e" })
        .arg(script)
        .arg(code)
        .arg(module)
        .arg(Value::from(events.to_vec()).to_string())
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert!(
        output.status.success(),
        "plain {program} {module}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect()
}

/// The answers of sless, one call per event, in order, on one instance.
async fn sless_answers(server: &Server, name: &str, events: &[Value]) -> Vec<Value> {
    let mut answers = Vec::new();
    for event in events {
        let (status, _, body) = server
            .invoke(Method::POST, &format!("/fn/corpus/{name}"), &event.to_string())
            .await;
        assert_eq!(status, StatusCode::OK, "{name} {event}: {body}");
        answers.push(serde_json::from_str(&body).unwrap_or_else(|e| panic!("{body}: {e}")));
    }
    answers
}

struct Case {
    name: &'static str,
    module: &'static str,
    events: Vec<Value>,
}

async fn compare(server: &Server, runtime: &str, files: &[(&str, &[u8])], cases: Vec<Case>, marker: &str) {
    let (interpreter, script) = match runtime {
        "python3.11" => ("/usr/bin/python3.11", PLAIN_PYTHON),
        _ => ("/usr/bin/node", PLAIN_NODE),
    };
    for case in &cases {
        // One code for all: built once, each function another entrypoint.
        let spec = json!({"runtime": runtime, "entrypoint": format!("{}.handle", case.module), "max_instances": 1});
        server.deploy("corpus", case.name, spec, files).await;
    }
    let code = artifact_with(server, marker);
    for case in &cases {
        let plain = plain_answers(interpreter, script, &code, case.module, &case.events);
        let sless = sless_answers(server, case.name, &case.events).await;
        assert_eq!(plain.len(), case.events.len(), "{}: {plain:?}", case.name);
        assert_eq!(
            sless, plain,
            "{} ({runtime}): sless answered differently from plain {interpreter}",
            case.name
        );
    }
}

#[tokio::test]
async fn python_handlers_answer_as_under_plain_python() {
    // The handlers reach the test's server on the machine's loopback, which
    // an isolated instance cannot (by design): this server shares the
    // host's network.
    let registry = Registry::start();
    let server = registry.server().await;
    let url = start_http_server();
    let files: &[(&str, &[u8])] = &[
        ("requirements.txt", REQUIREMENTS),
        ("numpy_case.py", NUMPY_CASE),
        ("jinja_case.py", JINJA_CASE),
        ("requests_case.py", REQUESTS_CASE),
        ("native_state.py", NATIVE_STATE_CASE),
    ];
    let cases = vec![
        Case {
            name: "numpy",
            module: "numpy_case",
            events: vec![json!({"n": 4}), json!({"n": 10}), json!({"n": 2})],
        },
        Case {
            name: "jinja",
            module: "jinja_case",
            events: vec![
                json!({"title": "a <b>", "items": ["x", "y&z"], "raw": "<br>"}),
                json!({"title": "", "items": [], "raw": ""}),
            ],
        },
        Case {
            name: "requests",
            module: "requests_case",
            events: vec![
                json!({"url": format!("{url}/first"), "q": "a b"}),
                json!({"url": format!("{url}/second/path"), "q": "ü"}),
            ],
        },
        Case {
            name: "native-state",
            module: "native_state",
            events: vec![json!({"n": 3}), json!({"n": 7}), json!({"n": 11})],
        },
    ];
    compare(&server, "python3.11", files, cases, "numpy_case.py").await;
}

#[tokio::test]
async fn node_handlers_answer_as_under_plain_node() {
    let registry = Registry::start();
    let server = registry.server().await;
    let files: &[(&str, &[u8])] = &[
        ("package.json", PACKAGE_JSON),
        ("lodash_case.js", LODASH_CASE),
        ("handlebars_case.js", HANDLEBARS_CASE),
        ("semver_case.js", SEMVER_CASE),
        ("builtins_case.js", BUILTINS_CASE),
    ];
    let people = json!([{"name": "b", "age": 30}, {"name": "a", "age": 30}, {"name": "c", "age": 5}]);
    let cases = vec![
        Case {
            name: "lodash",
            module: "lodash_case",
            events: vec![
                json!({"items": [1, 2, 3], "people": people, "name": "<you>"}),
                json!({"items": [], "people": [], "name": "again"}),
            ],
        },
        Case {
            name: "handlebars",
            module: "handlebars_case",
            events: vec![
                json!({"title": "hi <there>", "items": ["a", "<b>"]}),
                json!({"title": "", "items": []}),
            ],
        },
        Case {
            name: "semver",
            module: "semver_case",
            events: vec![json!({"versions": ["1.2.3", "1.10.0", "1.9.9", "2.0.0-rc.1"], "range": "^1.2"})],
        },
        Case {
            name: "builtins",
            module: "builtins_case",
            events: vec![json!({"text": "corpus ü", "amount": 1234567.891})],
        },
    ];
    compare(&server, "nodejs20", files, cases, "lodash_case.js").await;
}
