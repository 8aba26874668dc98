//! The web console in headless Chromium against a real server: sign in,
//! deploy from the editor, invoke, the invocation list and live log,
//! metrics, triggers and jobs, hostile values shown as text, a token for
//! another namespace, sign out. Screenshots of the main pages land in
//! `{target dir}/console-screenshots/`.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::browser::Browser;
use super::harness::{zip_of, Backend, Server};

const HOSTILE: &str = "<img src=x onerror=alert(1)>";

/// What the editor deploys: prints a line per call, sleeps on request.
const HANDLER: &str = r#"import time

def handle(event, context):
    name = event.get("name", "world") if isinstance(event, dict) else "world"
    print("hello", name)
    if isinstance(event, dict) and event.get("sleep"):
        time.sleep(event["sleep"])
    return {"hello": name}
"#;

/// Echoes hostile text everywhere a handler can put it; prints a line of
/// control characters per size in `flood`.
const HOSTILE_HANDLER: &[u8] = br#"
import os

def handle(event, context):
    print("env says", os.environ.get("HOSTILE"))
    for size in event.get("flood", []) if isinstance(event, dict) else []:
        print("\x01" * size)
    if isinstance(event, dict) and event.get("fail"):
        return {"statusCode": 500, "body": {"error": os.environ.get("HOSTILE")}}
    return {"echo": event, "html": os.environ.get("HOSTILE")}
"#;

/// Opens the console, records CSP violations and alerts from then on, and
/// signs in with `token` (and a namespace, when given).
async fn sign_in(browser: &Browser, server: &Server, token: &str, namespace: Option<&str>) {
    browser.goto(&format!("{}/ui", server.url)).await;
    browser.wait("#signin-form", 20).await;
    watch_page(browser).await;
    browser.fill("#token", token).await;
    if let Some(ns) = namespace {
        browser.fill("#namespace", ns).await;
    }
    browser.click("#sign-in").await;
    browser.wait("#sign-out", 20).await;
}

/// Records CSP violations and alert() calls in the page (kept across hash
/// navigation, which is all the console does).
async fn watch_page(browser: &Browser) {
    browser
        .js(
            "window.__csp = []; window.__alerts = [];
             document.addEventListener('securitypolicyviolation', e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
             window.alert = m => window.__alerts.push(String(m));",
            json!([]),
        )
        .await;
}

/// No CSP violation and no alert so far.
async fn assert_page_clean(browser: &Browser) {
    let csp = browser.js("return window.__csp", json!([])).await;
    assert_eq!(csp, json!([]), "CSP violations");
    let alerts = browser.js("return window.__alerts", json!([])).await;
    assert_eq!(alerts, json!([]), "alert() was called");
    assert_eq!(browser.alert_text().await, None, "a dialog is open");
}

/// Navigates within the console; the old page is cleared first, so what
/// the test waits for next comes from the new one.
async fn go(browser: &Browser, hash: &str) {
    browser
        .js(
            "document.getElementById('main').replaceChildren(); location.hash = arguments[0];",
            json!([hash]),
        )
        .await;
}

async fn wait_records(server: &Server, ns: &str, name: &str, n: usize) {
    for _ in 0..400 {
        if server.records(ns, name).await.len() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("fewer than {n} records for {ns}/{name}");
}

#[tokio::test]
async fn console_end_to_end() {
    let Some(browser) = Browser::start().await else { return };
    let server = Server::start(Backend::Sqlite).await;

    // Sign-in: a wrong token is refused next to the token field.
    browser.goto(&format!("{}/ui", server.url)).await;
    browser.wait("#signin-form", 20).await;
    watch_page(&browser).await;
    browser.screenshot("01-sign-in").await;
    browser.fill("#token", "not-a-real-token").await;
    browser.click("#sign-in").await;
    browser
        .wait_text("[data-field=token] .field-error", "missing or invalid bearer token", 20)
        .await;
    browser.fill("#token", &server.admin).await;
    browser.fill("#namespace", "demo").await;
    browser.click("#sign-in").await;
    browser.wait("#new-function", 20).await;
    let stored = browser
        .js("return sessionStorage.getItem('sless.token')", json!([]))
        .await;
    assert_eq!(stored, json!(server.admin), "the token is kept in session storage");
    let exposed = browser
        .js(
            "return location.href.includes(arguments[0]) || document.cookie.includes(arguments[0]) || localStorage.length > 0",
            json!([server.admin]),
        )
        .await;
    assert_eq!(exposed, json!(false), "never in a URL, a cookie or local storage");
    assert_eq!(browser.text("#token-name").await, "admin");

    // Deploy a handler written in the editor.
    browser.click("#new-function").await;
    browser.wait("#new-function-form", 20).await;
    browser.fill("#fn-name", "hello").await;
    browser.fill("#fn-env", "GREETING=hi\n__proto__=kept").await;
    browser.set_value("#code-editor", HANDLER).await;
    browser.screenshot("02-new-function").await;
    browser.click("#create-function").await;
    browser.wait_text("#function-name", "Ready", 180).await;
    browser.screenshot("03-function-overview").await;
    let (_, function) = server
        .call(Method::GET, "/v1/namespaces/demo/functions/hello", None)
        .await;
    assert_eq!(function["status"]["phase"], "Ready", "{function}");
    assert_eq!(function["env"]["GREETING"], "hi");
    assert_eq!(function["env"]["__proto__"], "kept", "a name like any other");

    // Invoke it from the panel and see its answer.
    browser.click("[data-tab=invoke]").await;
    browser.set_value("#invoke-body", r#"{"name": "browser"}"#).await;
    browser.click("#invoke-send").await;
    browser.wait_text("#invoke-status", "200", 60).await;
    let body = browser.text("#invoke-response-body").await;
    assert!(body.contains(r#""hello": "browser""#), "{body}");
    assert!(browser.text("#invoke-duration").await.contains('s'));
    browser.screenshot("04-invoke").await;

    // The live log: history first, then a call made while it is open.
    wait_records(&server, "demo", "hello", 1).await;
    browser.click("[data-tab=logs]").await;
    browser.wait_text("#live-log", "hello browser", 30).await;
    browser.wait_text("#log-state", "live", 20).await;
    let (status, _, _) = server
        .invoke(Method::POST, "/fn/demo/hello", r#"{"name": "live-call"}"#)
        .await;
    assert_eq!(status, StatusCode::OK);
    browser.wait_text("#live-log", "hello live-call", 30).await;
    browser.screenshot("05-live-log").await;

    // The invocation list, paged, and one record's detail.
    for i in 0..30 {
        server
            .invoke(Method::POST, "/fn/demo/hello", &format!(r#"{{"name": "page-{i}"}}"#))
            .await;
    }
    wait_records(&server, "demo", "hello", 32).await;
    browser.click("[data-tab=invocations]").await;
    browser.wait("#page-older:not([disabled])", 30).await;
    let rows = browser.find_all("#panel-invocations tbody tr").await;
    assert_eq!(rows.len(), 25, "a page holds 25");
    // A page that fails to load leaves the one shown as it was, with the error.
    browser
        .js(
            "window.__fetch = window.fetch; window.fetch = () => Promise.reject(new TypeError('network down'));",
            json!([]),
        )
        .await;
    browser.click("#page-older").await;
    browser.wait_text("#invocations-error", "network down", 20).await;
    browser.js("window.fetch = window.__fetch;", json!([])).await;
    assert!(browser.text("#panel-invocations .card-head").await.contains("page 1"));
    assert_eq!(browser.find_all("#panel-invocations tbody tr").await.len(), 25);
    browser.click("#panel-invocations tbody tr").await;
    browser.wait_text("#invocation-logs", "hello page-29", 20).await;
    browser.screenshot("06-invocations").await;
    browser.click("#page-older").await;
    browser.wait_text("#panel-invocations .card-head", "page 2", 20).await;
    browser
        .wait_until(
            "the second page holds the rest",
            "return document.querySelectorAll('#panel-invocations tbody tr').length === 7",
            json!([]),
            20,
        )
        .await;
    browser.click("#panel-invocations tbody tr:last-child").await;
    browser.wait_text("#invocation-logs", "hello browser", 20).await;
    browser.click("#page-newer").await;
    browser.wait_text("#panel-invocations .card-head", "page 1", 20).await;

    // Metrics: totals and two charts.
    browser.click("[data-tab=metrics]").await;
    browser.wait_text("#stats-calls", "32", 30).await;
    browser
        .wait_until(
            "two charts drawn",
            "return document.querySelectorAll('#charts .uplot canvas').length === 2",
            json!([]),
            20,
        )
        .await;
    browser.screenshot("07-metrics").await;

    // A zip upload whose build fails: npm's output is readable on the page.
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/demo/functions",
            Some(json!({"name": "broken", "runtime": "nodejs20"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let zip_dir = tempfile::tempdir().unwrap();
    let zip_path = zip_dir.path().join("broken.zip");
    std::fs::write(
        &zip_path,
        zip_of(&[
            ("handler.js", b"exports.handle = async () => 1;\n"),
            (
                "package.json",
                br#"{"name": "broken", "version": "1.0.0", "dependencies": {"left-pad": "file:./vendor/left-pad.tgz"}}"#,
            ),
            ("vendor/left-pad.tgz", b"not a tarball"),
        ]),
    )
    .unwrap();
    // A file that is not a zip is refused next to the file input: on the
    // new-function form (which then leaves no function behind, so sending
    // it again works) and on the Code tab.
    let not_zip = zip_dir.path().join("notes.zip");
    std::fs::write(&not_zip, "plain text, not a zip").unwrap();
    go(&browser, "#/ns/demo/functions/new").await;
    browser.fill("#fn-name", "notzip").await;
    browser.set_value("#code-mode", "zip").await;
    browser.choose_file("#code-zip", &not_zip).await;
    browser.click("#create-function").await;
    browser
        .wait_text("[data-field=zip] .field-error", "not a valid zip", 20)
        .await;
    let (status, _) = server
        .call(Method::GET, "/v1/namespaces/demo/functions/notzip", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the refused function is gone");
    go(&browser, "#/ns/demo/functions/broken/code").await;
    browser.wait("#deploy-form", 20).await;
    browser.set_value("#code-mode", "zip").await;
    browser.choose_file("#code-zip", &not_zip).await;
    browser.click("#deploy").await;
    browser
        .wait_text("[data-field=zip] .field-error", "not a valid zip", 20)
        .await;
    browser.choose_file("#code-zip", &zip_path).await;
    browser.click("#deploy").await;
    browser.wait_text("#build-state", "Failed", 120).await;
    browser.wait_text("#build-output", "TAR_BAD_ARCHIVE", 20).await;
    browser.wait_text("#function-name", "Failed", 20).await;
    browser.screenshot("08-failed-build").await;

    // The list: phase, version and calls in the last hour.
    browser.click("[data-nav=functions]").await;
    browser.wait_text("[data-row=hello] [data-stat=calls]", "32", 30).await;
    let row = browser.text("[data-row=hello]").await;
    assert!(
        row.contains("Ready") && row.contains("v1") && row.contains("python3.11"),
        "{row}"
    );
    browser.screenshot("09-functions").await;

    // Triggers: an API error lands next to its field; create; disable in place.
    browser.click("[data-nav=triggers]").await;
    browser.wait("#trigger-form", 20).await;
    browser.fill("#trigger-name", "nightly").await;
    browser.set_value("#trigger-function", "hello").await;
    browser.fill("#trigger-schedule", "61 * * * *").await;
    browser.click("#create-trigger").await;
    browser
        .wait_text("[data-field=schedule] .field-error", "invalid schedule", 20)
        .await;
    browser.fill("#trigger-schedule", "0 0 1 1 *").await;
    browser.set_value("#trigger-event", r#"{"name": "cron"}"#).await;
    browser.click("#create-trigger").await;
    browser.wait("[data-row=nightly]", 20).await;
    browser.click("input[data-trigger=nightly]").await;
    browser
        .wait_text("[data-row=nightly] .switch-label", "disabled", 20)
        .await;
    let (_, trigger) = server
        .call(Method::GET, "/v1/namespaces/demo/triggers/nightly", None)
        .await;
    assert_eq!(trigger["enabled"], false, "{trigger}");
    assert_eq!(trigger["event"], json!({"name": "cron"}));
    // A name in use is refused next to the name field.
    browser.fill("#trigger-name", "nightly").await;
    browser.set_value("#trigger-function", "hello").await;
    browser.fill("#trigger-schedule", "0 0 1 1 *").await;
    browser.click("#create-trigger").await;
    browser
        .wait_text("[data-field=name] .field-error", "already exists", 20)
        .await;
    browser.screenshot("10-triggers").await;

    // Jobs: create one that runs at once, then run it again and watch.
    browser.click("[data-nav=jobs]").await;
    browser.wait("#job-form", 20).await;
    browser.fill("#job-name", "backfill").await;
    browser.set_value("#job-function", "hello").await;
    browser
        .set_value("#job-event-input", r#"{"name": "job", "sleep": 3}"#)
        .await;
    browser.click("#create-job").await;
    browser.wait_text("[data-row=backfill]", "Succeeded", 120).await;
    browser.click("[data-row=backfill] td").await;
    browser.wait_text("#job-result", "\"hello\": \"job\"", 20).await;
    browser.click("[data-rerun=backfill]").await;
    browser.wait_text("[data-run=backfill]", "2", 20).await;
    let mut phases = Vec::new();
    for _ in 0..1200 {
        let phase = browser
            .js(
                "const b = document.querySelector('[data-row=backfill] [data-testid=badge]'); return b && b.textContent;",
                json!([]),
            )
            .await;
        let phase = phase.as_str().unwrap_or("").to_string();
        if phases.last() != Some(&phase) {
            phases.push(phase.clone());
        }
        if phase == "Succeeded" && phases.len() > 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        phases.iter().any(|p| p == "Pending" || p == "Running"),
        "the second run was seen under way: {phases:?}"
    );
    assert_eq!(phases.last().map(String::as_str), Some("Succeeded"), "{phases:?}");
    let (_, job) = server
        .call(Method::GET, "/v1/namespaces/demo/jobs/backfill", None)
        .await;
    assert_eq!(
        (job["status"]["run_id"].clone(), job["status"]["phase"].clone()),
        (json!(2), json!("Succeeded"))
    );
    browser.screenshot("11-jobs").await;

    // Versions: what each keeps, an alias set (a bad name refused next to
    // its field), and a version deleted once no alias holds it.
    let again = format!("{HANDLER}# version 2\n");
    server
        .deploy(
            "demo",
            "hello",
            json!({"runtime": "python3.11"}),
            &[("handler.py", again.as_bytes())],
        )
        .await;
    go(&browser, "#/ns/demo/functions/hello/versions").await;
    browser.wait_text("[data-row=v2]", "latest", 20).await;
    assert!(browser.text("[data-row=v1]").await.contains("KiB"));
    browser.set_value("#alias-name", "").await;
    browser.fill("#alias-version", "1").await;
    browser.click("#set-alias").await;
    browser
        .wait_text("[data-field=name] .field-error", "give the alias a name", 20)
        .await;
    browser.fill("#alias-name", "9live").await;
    browser.fill("#alias-version", "1").await;
    browser.click("#set-alias").await;
    browser
        .wait_text("[data-field=name] .field-error", "must start with a letter", 20)
        .await;
    browser.fill("#alias-name", "live").await;
    browser.fill("#alias-version", "1").await;
    browser.click("#set-alias").await;
    browser.wait_text("#aliases-card [data-row=live]", "v1", 20).await;
    browser.wait_text("[data-row=v1]", "live", 20).await;
    let disabled = browser
        .js(
            "return ['v1', 'v2'].map((v) => document.querySelector(`[data-delete=${v}]`).disabled)",
            json!([]),
        )
        .await;
    assert_eq!(disabled, json!([true, true]), "held by an alias; serving");
    browser.screenshot("12-versions").await;
    browser.js("window.confirm = () => true;", json!([])).await;
    browser.click("[data-delete=live]").await;
    browser.wait("[data-delete=v1]:not([disabled])", 20).await;
    browser.click("[data-delete=v1]").await;
    browser
        .wait_until(
            "version 1 gone",
            "return !document.querySelector('[data-row=v1]') && !!document.querySelector('[data-row=v2]')",
            json!([]),
            20,
        )
        .await;
    let (_, listed) = server
        .call(Method::GET, "/v1/namespaces/demo/functions/hello/versions", None)
        .await;
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(1), "{listed}");

    // Deleting a function a trigger and a job name: the API's refusal is
    // shown, and deleting them too is a second, confirmed, click.
    go(&browser, "#/ns/demo/functions/hello/overview").await;
    browser
        .js(
            "window.__confirms = []; window.confirm = (m) => (window.__confirms.push(m), true);",
            json!([]),
        )
        .await;
    browser.click("#delete-function").await;
    let refused = browser.wait_text("#delete-error", "still named by", 20).await;
    assert!(refused.contains("nightly") && refused.contains("backfill"), "{refused}");
    browser.click("#delete-cascade").await;
    browser.wait("#new-function", 20).await;
    let confirms = browser.js("return window.__confirms", json!([])).await;
    assert_eq!(confirms.as_array().map(Vec::len), Some(2), "{confirms}");
    assert!(
        confirms[1].as_str().unwrap().contains("triggers and jobs"),
        "{confirms}"
    );
    for path in ["functions/hello", "triggers/nightly", "jobs/backfill"] {
        let (status, _) = server
            .call(Method::GET, &format!("/v1/namespaces/demo/{path}"), None)
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }

    // A function deleted elsewhere while its page watches its build: the
    // badge stops saying Building and the 404 is shown.
    let (status, created) = server
        .call(
            Method::POST,
            "/v1/namespaces/demo/functions",
            Some(json!({"name": "doomed", "runtime": "nodejs20"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let package = br#"{"name": "doomed", "version": "1.0.0", "private": true, "scripts": {"preinstall": "sleep 60"}}"#;
    let zip = zip_of(&[
        ("package.json", package),
        ("handler.js", b"exports.handle = () => 1;\n"),
    ]);
    let (status, uploaded) = server.upload("demo", "doomed", zip).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{uploaded}");
    go(&browser, "#/ns/demo/functions/doomed/overview").await;
    browser
        .wait_text("#function-name [data-testid=badge]", "Building", 20)
        .await;
    let (status, body) = server
        .call(Method::DELETE, "/v1/namespaces/demo/functions/doomed", None)
        .await;
    assert!(status.is_success(), "{status} {body}");
    browser
        .wait_text("#function-name [data-testid=badge]", "Deleted", 20)
        .await;
    browser.wait("#page-error", 20).await;
    assert!(
        browser.text("#page-error").await.contains("doomed"),
        "the 404 names the function"
    );
    assert!(
        browser.find_all("#panel-overview #status-card").await.is_empty(),
        "the stale status is gone"
    );

    assert_page_clean(&browser).await;

    // Sign out: the token is gone and the pages need signing in again.
    browser.click("#sign-out").await;
    browser.wait("#signin-form", 20).await;
    let stored = browser
        .js("return sessionStorage.getItem('sless.token')", json!([]))
        .await;
    assert_eq!(stored, Value::Null);
    go(&browser, "#/ns/demo/functions").await;
    browser.wait("#signin-form", 20).await;
    assert!(browser.find_all("[data-row=hello]").await.is_empty());
}

#[tokio::test]
async fn console_shows_hostile_values_as_text() {
    let Some(browser) = Browser::start().await else { return };
    let server = Server::start(Backend::Sqlite).await;
    server
        .deploy(
            "demo",
            "xss",
            json!({"runtime": "python3.11", "env": {"HOSTILE": HOSTILE}}),
            &[("handler.py", HOSTILE_HANDLER)],
        )
        .await;
    server.invoke(Method::POST, "/fn/demo/xss", r#"{"fail": true}"#).await;
    server
        .invoke(Method::POST, "/fn/demo/xss", &json!({"x": HOSTILE}).to_string())
        .await;
    wait_records(&server, "demo", "xss", 2).await;
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/demo/triggers",
            Some(json!({"name": "yearly", "type": "cron", "function": "xss", "schedule": "0 0 1 1 *", "event": {"x": HOSTILE}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // Two jobs: one whose result the list leaves out (over 8 KiB).
    for (name, x) in [("echo", HOSTILE.to_string()), ("big", "a".repeat(9000))] {
        let (status, body) = server
            .call(
                Method::POST,
                "/v1/namespaces/demo/jobs",
                Some(json!({"name": name, "function": "xss", "event": {"x": x}, "run_id": 1})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        server
            .wait_for(&format!("/v1/namespaces/demo/jobs/{name}"), 120, |j| {
                j["status"]["phase"] == "Succeeded"
            })
            .await;
    }

    // More functions than the API lets a namespace read the stats of at once.
    for i in 0..12 {
        let (status, body) = server
            .call(
                Method::POST,
                "/v1/namespaces/demo/functions",
                Some(json!({"name": format!("f{i}"), "runtime": "python3.11"})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }

    sign_in(&browser, &server, &server.admin.clone(), Some("demo")).await;
    // The list reads them within that limit, and waits out a 429: every
    // cell a number, none "?".
    browser
        .wait_until(
            "calls and errors of all 13 functions",
            "const cells = [...document.querySelectorAll('[data-stat]')]; \
             return cells.length === 26 && cells.every(c => /^[0-9]+$/.test(c.textContent))",
            json!([]),
            30,
        )
        .await;
    let no_injection = "return document.querySelectorAll('img').length === 0 \
                        && document.body.textContent.includes(arguments[0])";
    let check = |what: &'static str| {
        let browser = &browser;
        async move {
            browser.wait_until(what, no_injection, json!([HOSTILE]), 30).await;
            assert_page_clean(browser).await;
        }
    };

    // Env values on the overview.
    go(&browser, "#/ns/demo/functions/xss/overview").await;
    browser.wait_text("#env-card", HOSTILE, 30).await;
    check("env value as text").await;
    browser.screenshot("12-hostile-overview").await;

    // A response body in the invoke panel.
    go(&browser, "#/ns/demo/functions/xss/invoke").await;
    browser.click("#invoke-send").await;
    browser.wait_text("#invoke-response-body", HOSTILE, 30).await;
    check("response body as text").await;

    // A record's error and output.
    go(&browser, "#/ns/demo/functions/xss/invocations").await;
    browser.click("#panel-invocations tbody tr:last-child").await;
    browser.wait_text("#invocation-error", HOSTILE, 30).await;
    check("invocation error as text").await;

    // Printed lines in the live log.
    go(&browser, "#/ns/demo/functions/xss/logs").await;
    browser.wait_text("#live-log", &format!("env says {HOSTILE}"), 30).await;
    check("log line as text").await;

    // A flood of long lines: each is cut with a marker, and what the page
    // keeps stays bounded (it used to hold every character and lock up).
    server
        .invoke(Method::POST, "/fn/demo/xss", r#"{"flood": [60000]}"#)
        .await;
    browser.wait_text("#live-log", "more characters)", 30).await;
    let cut = browser
        .js(
            "const more = document.querySelector('#live-log .more'); \
             return [more.previousSibling.textContent.length, more.textContent];",
            json!([]),
        )
        .await;
    assert_eq!(cut[0], 2000, "{cut}");
    assert!(cut[1].as_str().unwrap().contains("58000 more characters"), "{cut}");
    // As in a background tab, no animation frame comes while the lines
    // arrive: what waits to be drawn is bounded in characters too, so the
    // one frame that finally comes draws at most what is kept (about 250
    // lines of 2,000 characters), not every line that came.
    browser
        .js(
            "window.__frames = []; window.requestAnimationFrame = (cb) => (window.__frames.push(cb), 1); \
             window.__added = []; new MutationObserver((records) => window.__added.push(records.reduce((n, r) => n + r.addedNodes.length, 0))) \
               .observe(document.getElementById('live-log'), { childList: true });",
            json!([]),
        )
        .await;
    for _ in 0..12 {
        server
            .invoke(
                Method::POST,
                "/fn/demo/xss",
                &json!({"flood": vec![2100; 30]}).to_string(),
            )
            .await;
    }
    server.invoke(Method::POST, "/fn/demo/xss", r#"{"flood": [3]}"#).await;
    browser
        .wait_until(
            "a line waits for a frame",
            "return window.__frames.length > 0",
            json!([]),
            30,
        )
        .await;
    // The stream's lines come on loopback within milliseconds of the calls;
    // a line still on its way only makes the held batch smaller.
    tokio::time::sleep(Duration::from_secs(1)).await;
    browser
        .js(
            "const held = window.__frames.splice(0); held.forEach((cb) => cb(performance.now())); \
             window.requestAnimationFrame = (cb) => setTimeout(() => cb(performance.now()), 16);",
            json!([]),
        )
        .await;
    let added = browser.js("return window.__added[0]", json!([])).await;
    assert!(added.as_u64().is_some_and(|n| n <= 260), "one frame drew {added} lines");
    browser
        .wait_until(
            "the last call's line shown last",
            "return document.querySelector('#live-log .line:last-child .text')?.textContent === '\\x01'.repeat(3)",
            json!([]),
            30,
        )
        .await;
    let kept = browser
        .js(
            "const log = document.getElementById('live-log'); return [log.childElementCount, log.textContent.length];",
            json!([]),
        )
        .await;
    let (lines, chars) = (kept[0].as_u64().unwrap(), kept[1].as_u64().unwrap());
    assert!(chars <= 500_000, "{chars} characters kept");
    assert!(lines > 200 && lines < 12 * 30, "{lines} lines kept");

    // A trigger's event, a job's event and result.
    go(&browser, "#/ns/demo/triggers").await;
    browser.wait_text("[data-row=yearly]", HOSTILE, 30).await;
    check("trigger event as text").await;
    go(&browser, "#/ns/demo/jobs").await;
    browser.click("[data-row=echo] td").await;
    browser.wait_text("#job-result", HOSTILE, 30).await;
    check("job result as text").await;
    // The job picked last is the one shown, even when the answer for the one
    // picked before it (big: its result is fetched) comes later.
    browser
        .js(
            "const real = window.fetch; window.__bigDone = false;
             window.fetch = async (url, init) => {
               const answer = await real(url, init);
               if (!String(url).endsWith('/jobs/big')) return answer;
               await new Promise((ok) => setTimeout(ok, 1500));
               const text = answer.text.bind(answer);
               answer.text = () => text().then((t) => (setTimeout(() => (window.__bigDone = true)), t));
               return answer;
             };",
            json!([]),
        )
        .await;
    browser.click("[data-row=big] td").await;
    browser.click("[data-row=echo] td").await;
    browser
        .wait_until("the big job's answer arrived", "return window.__bigDone", json!([]), 20)
        .await;
    assert_eq!(browser.text("#job-detail h3").await, "Job echo");
    browser.screenshot("13-hostile-jobs").await;

    // API error messages that quote what was sent.
    go(&browser, "#/ns/demo/triggers").await;
    browser.fill("#trigger-name", HOSTILE).await;
    browser.click("#create-trigger").await;
    browser.wait_text("[data-field=name] .field-error", HOSTILE, 30).await;
    check("error message as text").await;
    go(&browser, &format!("#/ns/demo/functions/{}", urlencode(HOSTILE))).await;
    browser.wait_text("#page-error", "invalid function name", 30).await;
    check("a name from the URL as text").await;
    go(&browser, &format!("#/ns/{}/functions", urlencode(HOSTILE))).await;
    browser.wait_text("#page-error", "invalid namespace name", 30).await;
    let value = browser
        .js("return document.querySelector('#ns-input').value", json!([]))
        .await;
    assert_eq!(value, json!(HOSTILE), "the namespace box holds the text");
    check("a namespace from the URL as text").await;
    // A link whose escapes do not decode is no page, not a page that never loads.
    go(&browser, "#/ns/%E0%A4%A/functions").await;
    browser.wait_text("#no-such-page", "No such page", 20).await;
}

#[tokio::test]
async fn console_token_for_another_namespace_sees_nothing_of_this_one() {
    let Some(browser) = Browser::start().await else { return };
    let server = Server::start(Backend::Sqlite).await;
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/team-a/functions",
            Some(json!({"name": "secret-fn", "runtime": "python3.11", "env": {"KEY": "team-a-secret"}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, created) = server
        .call(
            Method::POST,
            "/v1/tokens",
            Some(json!({"name": "team-b", "namespaces": ["team-b"]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let token_b = created["token"].as_str().unwrap().to_string();

    // Asking for team-a at sign-in is refused next to the namespace field.
    browser.goto(&format!("{}/ui/", server.url)).await;
    browser.wait("#signin-form", 20).await;
    browser.fill("#token", &token_b).await;
    browser.fill("#namespace", "team-a").await;
    browser.click("#sign-in").await;
    browser
        .wait_text("[data-field=namespace] .field-error", "does not cover namespace", 20)
        .await;

    // A deep link opened signed out leads there once signed in.
    go(&browser, "#/ns/team-b/jobs").await;
    browser.wait("#signin-form", 20).await;
    watch_page(&browser).await;
    browser.fill("#token", &token_b).await;
    browser.click("#sign-in").await;
    browser.wait("#job-form", 20).await;
    let hash = browser.js("return location.hash", json!([])).await;
    assert_eq!(hash, json!("#/ns/team-b/jobs"));
    go(&browser, "#/ns/team-b/functions").await;
    browser.wait_text(".main .empty", "No functions", 20).await;
    let options = browser
        .js(
            "return [...document.querySelectorAll('#ns-select option')].map(o => o.value)",
            json!([]),
        )
        .await;
    assert_eq!(options, json!(["team-b"]), "only the token's namespaces are offered");
    browser.screenshot("14-other-namespace").await;

    for hash in [
        "#/ns/team-a/functions",
        "#/ns/team-a/functions/secret-fn",
        "#/ns/team-a/functions/secret-fn/logs",
        "#/ns/team-a/triggers",
        "#/ns/team-a/jobs",
    ] {
        go(&browser, hash).await;
        browser.wait_text("#page-error", "does not cover namespace", 20).await;
        let leaked = browser
            .js(
                "return document.body.textContent.includes('secret-fn') || document.body.textContent.includes('team-a-secret')",
                json!([]),
            )
            .await;
        assert_eq!(leaked, json!(false), "{hash} showed team-a's data");
    }
    assert_page_clean(&browser).await;

    // A token revoked while signed in: the next call signs out and says why.
    let (status, _) = server
        .call(
            Method::DELETE,
            &format!("/v1/tokens/{}", created["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    go(&browser, "#/ns/team-b/jobs").await;
    browser.wait_text(".signin .notice", "refused the token", 20).await;
    let stored = browser
        .js("return sessionStorage.getItem('sless.token')", json!([]))
        .await;
    assert_eq!(stored, Value::Null);
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
