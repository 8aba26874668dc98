//! `terraform import` of a function, a trigger and a job made through the
//! REST API: after import the plan only records the zip's filename (the
//! server does not know it), applying that uploads nothing, and then plans
//! are empty.

use std::time::Duration;

use serde_json::json;
use sless_client::api::{FunctionCreate, JobCreate, TriggerCreate};
use sless_client::Wait;

use crate::harness::{hello_python, Parts, Rest, Server, Workdir};

const NS: &str = "tf-imp";

const CONFIG: &str = r#"
resource "sless_function" "hello" {
  name      = "hello"
  runtime   = "python3.11"
  filename  = "hello.zip"
  code_hash = filesha256("hello.zip")
  env       = { GREETING = "hi" }
}

resource "sless_trigger" "web" {
  name     = "web"
  function = sless_function.hello.name
  type     = "http"
}

resource "sless_job" "greet" {
  name     = "greet"
  function = sless_function.hello.name
  event    = jsonencode({ name = "import" })
  run_id   = 1
}
"#;

#[test]
fn import_existing_resources() {
    let Some(parts) = Parts::find() else { return };
    let server = Server::start(&parts);
    let rest = Rest::new(&server);
    let work = Workdir::new(&parts, &server);
    work.zip("hello.zip", &[("handler.py", &hello_python())]);
    work.config("provider \"sless\" {\n  namespace = \"tf-imp\"\n}", CONFIG);

    // Made outside Terraform, through the REST API.
    let zip = std::fs::read(work.path().join("hello.zip")).unwrap();
    let client = &rest.client;
    let function = FunctionCreate {
        name: "hello".into(),
        spec: serde_json::from_value(json!({"runtime": "python3.11", "env": {"GREETING": "hi"}})).unwrap(),
    };
    rest.run(client.create_function(NS, &function)).unwrap();
    let uploaded = rest.run(client.upload_code(NS, "hello", zip)).unwrap();
    let hash = uploaded.status.code_hash.unwrap();
    let wait = Wait::new(Duration::from_secs(120));
    let built = rest
        .run(client.wait_for_build(NS, "hello", &hash, wait, |_| {}))
        .unwrap();
    assert_eq!(built.status.version, 1, "{:?}", built.status);
    let trigger = TriggerCreate {
        name: "web".into(),
        spec: serde_json::from_value(json!({"function": "hello", "type": "http"})).unwrap(),
    };
    rest.run(client.create_trigger(NS, &trigger)).unwrap();
    let job = JobCreate {
        name: "greet".into(),
        spec: serde_json::from_value(json!({"function": "hello", "event": {"name": "import"}, "run_id": 1})).unwrap(),
    };
    rest.run(client.create_job(NS, &job)).unwrap();
    rest.run(client.wait_for_job(NS, "greet", 1, wait, |_| {})).unwrap();

    // A missing one is an error naming it.
    let run = work.tf(&["import", "-no-color", "sless_function.hello", "tf-imp/missing"]);
    assert_eq!(run.code, 1, "{}", run.output());
    assert!(
        run.stderr.contains("Cannot import function tf-imp/missing"),
        "{}",
        run.output()
    );
    assert!(run.stderr.contains("404"), "{}", run.output());

    // namespace/name, or a bare name in the provider's namespace.
    for (address, id) in [
        ("sless_function.hello", "tf-imp/hello"),
        ("sless_trigger.web", "web"),
        ("sless_job.greet", "tf-imp/greet"),
    ] {
        let run = work.tf(&["import", "-no-color", address, id]);
        assert_eq!(run.code, 0, "import {address} {id}:\n{}", run.output());
        assert!(run.stdout.contains("Import successful!"), "{}", run.output());
    }

    let plan = work.plan();
    assert_eq!(plan.code, 2, "{}", plan.output());
    assert!(
        plan.stdout.contains("Plan: 0 to add, 1 to change, 0 to destroy"),
        "{}",
        plan.output()
    );
    assert!(
        plan.stdout.contains("+ filename"),
        "only the filename is new: {}",
        plan.output()
    );
    assert!(
        !plan.stdout.contains("code_hash"),
        "the code is the same: {}",
        plan.output()
    );
    let run = work.apply();
    assert!(
        run.stdout.contains("Resources: 0 added, 1 changed, 0 destroyed"),
        "{}",
        run.output()
    );
    let function = rest.function(NS, "hello");
    assert_eq!(function.status.version, 1, "recording the filename uploads nothing");
    work.assert_no_changes();

    let run = work.destroy();
    assert!(run.stdout.contains("Resources: 3 destroyed"), "{}", run.output());
    assert!(rest.run(client.list_functions(NS)).unwrap().is_empty());
}
