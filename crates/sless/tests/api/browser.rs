//! Headless Chromium driven over W3C WebDriver: starts `chromedriver` on a
//! free loopback port and a browser with a fresh profile, and speaks the
//! handful of WebDriver commands the console tests use (JSON over HTTP, so
//! reqwest suffices). Without Chromium the tests are skipped, except with
//! `CI=true`, where that is a failure.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

/// The W3C key of an element reference in WebDriver answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// `/usr/lib/chromium/chromium` (Debian's binary behind its launcher script).
fn chromium_binary() -> Option<PathBuf> {
    [
        "/usr/lib/chromium/chromium",
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

fn chromedriver_binary() -> Option<PathBuf> {
    ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Where the console tests write their screenshots: `console-screenshots/`
/// in the cargo target directory.
pub fn screenshot_dir() -> PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_sless"));
    let target = exe
        .parent()
        .and_then(Path::parent)
        .expect("binary under target/<profile>/");
    target.join("console-screenshots")
}

/// One element, by its WebDriver reference.
#[derive(Debug, Clone)]
pub struct Element(String);

pub struct Browser {
    driver: Child,
    base: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// A headless browser, or None when Chromium is not installed (a panic
    /// with `CI=true`).
    pub async fn start() -> Option<Browser> {
        let (Some(chromium), Some(chromedriver)) = (chromium_binary(), chromedriver_binary()) else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "Chromium and chromedriver are required (scripts/setup.sh --services installs Debian's chromium and chromium-driver)"
            );
            eprintln!("skipping: chromium or chromedriver is not installed (run scripts/setup.sh --services)");
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let profile = tempfile::tempdir().expect("profile dir");
        let mut browser = Browser {
            driver,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(90))
                .build()
                .expect("client"),
            _profile: profile,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = browser
                .http
                .get(format!("{}/status", browser.base))
                .send()
                .await
                .ok()
                .map(|r| r.status().is_success())
                .unwrap_or(false);
            if ready {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver did not start within 30 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1400,900",
            &format!("--user-data-dir={}", browser._profile.path().display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
            "unhandledPromptBehavior": "ignore",
        }}});
        let created = browser.raw("POST", "/session", Some(caps)).await.expect("new session");
        let id = created["sessionId"].as_str().expect("session id").to_string();
        browser.base = format!("{}/session/{id}", browser.base);
        Some(browser)
    }

    /// One WebDriver command; Err carries WebDriver's error code and message.
    async fn raw(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let url = format!("{}{path}", self.base);
        let request = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self.http.post(url).json(&body.unwrap_or_else(|| json!({}))),
        };
        let response = request.send().await.map_err(|e| format!("webdriver: {e}"))?;
        let value: Value = response.json().await.map_err(|e| format!("webdriver answer: {e}"))?;
        let value = value.get("value").cloned().unwrap_or(Value::Null);
        match value.get("error").and_then(Value::as_str) {
            Some(code) => Err(format!("{code}: {}", value["message"].as_str().unwrap_or(""))),
            None => Ok(value),
        }
    }

    async fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.raw(method, path, body)
            .await
            .unwrap_or_else(|e| panic!("webdriver {method} {path}: {e}"))
    }

    pub async fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({"url": url}))).await;
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns its value.
    pub async fn js(&self, script: &str, args: Value) -> Value {
        self.cmd("POST", "/execute/sync", Some(json!({"script": script, "args": args})))
            .await
    }

    pub async fn find_all(&self, css: &str) -> Vec<Element> {
        let found = self
            .cmd(
                "POST",
                "/elements",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        found
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|e| e[ELEMENT].as_str().map(|id| Element(id.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Waits (up to `secs`) for an element matching `css`.
    pub async fn wait(&self, css: &str, secs: u64) -> Element {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(found) = self.find_all(css).await.into_iter().next() {
                return found;
            }
            if Instant::now() >= deadline {
                let url = self.js("return location.href", json!([])).await;
                let text = self.js("return document.body.innerText", json!([])).await;
                panic!(
                    "no element {css:?} within {secs} s on {url}; page text:\n{}",
                    text.as_str().unwrap_or("")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits (up to `secs`) until the text of the first `css` element contains `needle`.
    pub async fn wait_text(&self, css: &str, needle: &str, secs: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let text = self
                .js(
                    "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
                    json!([css]),
                )
                .await;
            if let Some(text) = text.as_str() {
                if text.contains(needle) {
                    return text.to_string();
                }
            }
            if Instant::now() >= deadline {
                panic!("{css:?} never contained {needle:?} within {secs} s; it holds {text}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until `script` (returning a boolean) is true.
    pub async fn wait_until(&self, what: &str, script: &str, args: Value, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if self.js(script, args.clone()).await == Value::Bool(true) {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: not within {secs} s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn click(&self, css: &str) {
        let element = self.wait(css, 20).await;
        self.cmd("POST", &format!("/element/{}/click", element.0), None).await;
    }

    /// Clears an input or text area and types `text` into it.
    pub async fn fill(&self, css: &str, text: &str) {
        let element = self.wait(css, 20).await;
        self.cmd("POST", &format!("/element/{}/clear", element.0), None).await;
        self.cmd(
            "POST",
            &format!("/element/{}/value", element.0),
            Some(json!({"text": text})),
        )
        .await;
    }

    /// Chooses a local file in an `<input type=file>`.
    pub async fn choose_file(&self, css: &str, path: &Path) {
        let element = self.wait(css, 20).await;
        self.cmd(
            "POST",
            &format!("/element/{}/value", element.0),
            Some(json!({"text": path.display().to_string()})),
        )
        .await;
    }

    /// Sets a field's value at once (long texts, where typing is slow) and
    /// tells the page it changed.
    pub async fn set_value(&self, css: &str, value: &str) {
        self.wait(css, 20).await;
        self.js(
            "const e = document.querySelector(arguments[0]); e.value = arguments[1]; \
             e.dispatchEvent(new Event('input', {bubbles: true})); e.dispatchEvent(new Event('change', {bubbles: true}));",
            json!([css, value]),
        )
        .await;
    }

    pub async fn text(&self, css: &str) -> String {
        let element = self.wait(css, 20).await;
        self.cmd("GET", &format!("/element/{}/text", element.0), None)
            .await
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// The text of an open alert, confirm or prompt, if one is open.
    pub async fn alert_text(&self) -> Option<String> {
        self.raw("GET", "/alert/text", None)
            .await
            .ok()
            .and_then(|v| v.as_str().map(String::from))
    }

    /// Writes a PNG of the whole page (Chromium's DevTools capture beyond
    /// the viewport) to the screenshot directory; returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let shot = self
            .cmd(
                "POST",
                "/goog/cdp/execute",
                Some(json!({"cmd": "Page.captureScreenshot", "params": {"format": "png", "captureBeyondViewport": true}})),
            )
            .await;
        let encoded = &shot["data"];
        let png = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().expect("base64 screenshot"))
            .expect("valid base64");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // End the session (chromedriver closes Chromium) before chromedriver
        // goes; a plain blocking request, since this runs outside async code.
        if let Some((host, path)) = self.base.strip_prefix("http://").and_then(|rest| rest.split_once('/')) {
            use std::io::{Read, Write};
            if let Ok(mut stream) = std::net::TcpStream::connect(host) {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(15)));
                let _ = write!(
                    stream,
                    "DELETE /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let _ = stream.read_to_end(&mut Vec::new());
            }
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
