//! The life of a small stack: a function with an http, a cron and an amqp
//! trigger and a job; no-op plans after every apply, new code rebuilt in
//! place, a trigger toggled in place, a job rerun by a new run_id, a setting
//! changed and a function deleted behind Terraform's back put back, and
//! destroy.

use sless_client::api::{JobPhase, Phase};

use crate::harness::{hello_python, Parts, Rest, Server, Workdir};

const NS: &str = "tf-acc";

fn stack(enabled: bool, run_id: u32) -> String {
    let queue = format!("tf-acc-{}", std::process::id());
    format!(
        r#"
resource "sless_function" "hello" {{
  name      = "hello"
  runtime   = "python3.11"
  filename  = "hello.zip"
  code_hash = filesha256("hello.zip")
  env       = {{ GREETING = "hi" }}
  memory_mb = 128
}}

resource "sless_trigger" "web" {{
  name     = "hello-web"
  function = sless_function.hello.name
  type     = "http"
  enabled  = {enabled}
}}

resource "sless_trigger" "nightly" {{
  name     = "nightly"
  function = sless_function.hello.name
  type     = "cron"
  schedule = "0 3 * * *"
  timezone = "Europe/Paris"
  event    = jsonencode({{ name = "cron" }})
}}

resource "sless_trigger" "orders" {{
  name              = "orders"
  function          = sless_function.hello.name
  type              = "amqp"
  broker_url        = "amqp://guest:guest@127.0.0.1:5672/%2f"
  queue             = "{queue}"
  prefetch          = 2
  retry_limit       = 1
  dead_letter_queue = "{queue}.failed"
}}

resource "sless_job" "greet" {{
  name     = "greet"
  function = sless_function.hello.name
  event    = jsonencode({{ name = "terraform" }})
  run_id   = {run_id}
}}

output "url" {{
  value = sless_trigger.web.url
}}

output "result" {{
  value = sless_job.greet.result
}}
"#
    )
}

const PROVIDER: &str = "provider \"sless\" {\n  namespace = \"tf-acc\"\n}";

#[test]
fn create_update_rerun_drift_and_destroy() {
    let Some(parts) = Parts::find() else { return };
    let server = Server::start(&parts);
    let rest = Rest::new(&server);
    let work = Workdir::new(&parts, &server);
    let v1 = hello_python();
    work.zip("hello.zip", &[("handler.py", &v1)]);

    // Create all four.
    work.config(PROVIDER, &stack(true, 1));
    let run = work.apply();
    assert!(
        run.stdout.contains("Resources: 5 added, 0 changed, 0 destroyed"),
        "{}",
        run.output()
    );
    assert!(
        run.stdout.contains(&format!("url = \"{}/fn/{NS}/hello\"", server.url)),
        "{}",
        run.output()
    );
    let function = rest.function(NS, "hello");
    assert_eq!(function.status.phase, Phase::Ready);
    assert_eq!(function.status.version, 1);
    assert_eq!(function.spec.memory_mb, 128);
    assert_eq!(function.spec.env["GREETING"], "hi");
    let (status, body) = rest.invoke(NS, "hello", r#"{"name": "you"}"#);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Hello, you!"), "{body}");
    let job = rest.job(NS, "greet");
    assert_eq!(job.status.phase, JobPhase::Succeeded);
    assert!(
        run.stdout.contains("Hello, terraform!"),
        "the job's result is an output: {}",
        run.output()
    );
    let nightly = rest.trigger(NS, "nightly");
    assert_eq!(nightly.spec.timezone.as_deref(), Some("Europe/Paris"));
    let orders = rest.trigger(NS, "orders");
    assert_eq!((orders.spec.prefetch, orders.spec.retry_limit), (Some(2), Some(1)));
    work.assert_no_changes();

    // New code: updated in place, rebuilt, a new version serving.
    work.zip("hello.zip", &[("handler.py", &v1.replace("Hello, ", "Howdy, "))]);
    let plan = work.plan();
    assert_eq!(plan.code, 2, "{}", plan.output());
    assert!(
        plan.stdout.contains("sless_function.hello will be updated in-place"),
        "{}",
        plan.output()
    );
    assert!(
        plan.stdout.contains("Plan: 0 to add, 1 to change, 0 to destroy"),
        "{}",
        plan.output()
    );
    let run = work.apply();
    assert!(
        run.stdout.contains("Resources: 0 added, 1 changed, 0 destroyed"),
        "{}",
        run.output()
    );
    let function = rest.function(NS, "hello");
    assert_eq!((function.status.phase, function.status.version), (Phase::Ready, 2));
    let (status, body) = rest.invoke(NS, "hello", r#"{"name": "you"}"#);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Howdy, you!"), "{body}");
    work.assert_no_changes();

    // enabled = false: the same trigger, changed in place.
    work.config(PROVIDER, &stack(false, 1));
    let run = work.apply();
    assert!(
        run.stdout.contains("Resources: 0 added, 1 changed, 0 destroyed"),
        "{}",
        run.output()
    );
    let web = rest.trigger(NS, "hello-web");
    assert!(!web.spec.enabled);
    assert_eq!(
        rest.invoke(NS, "hello", "{}").0,
        503,
        "a disabled http trigger turns calls away"
    );
    work.assert_no_changes();

    // A new run_id replaces the job, which runs again (on the new code).
    let before = rest.job(NS, "greet");
    work.config(PROVIDER, &stack(false, 2));
    let run = work.apply();
    assert!(
        run.stdout.contains("Resources: 1 added, 0 changed, 1 destroyed"),
        "{}",
        run.output()
    );
    let job = rest.job(NS, "greet");
    assert_eq!((job.status.phase, job.status.run_id), (JobPhase::Succeeded, 2));
    assert_ne!(job.status.invocation_id, before.status.invocation_id, "a new run");
    assert!(run.stdout.contains("Howdy, terraform!"), "{}", run.output());
    work.assert_no_changes();

    // A setting changed outside Terraform is set back in place.
    rest.run(
        rest.client
            .patch_function(NS, "hello", &serde_json::json!({"memory_mb": 512})),
    )
    .unwrap();
    let plan = work.plan();
    assert_eq!(plan.code, 2, "{}", plan.output());
    assert!(plan.stdout.contains("~ memory_mb"), "{}", plan.output());
    assert!(plan.stdout.contains("512 -> 128"), "{}", plan.output());
    let run = work.apply();
    assert!(
        run.stdout.contains("Resources: 0 added, 1 changed, 0 destroyed"),
        "{}",
        run.output()
    );
    assert_eq!(rest.function(NS, "hello").spec.memory_mb, 128);

    // Deleted outside Terraform (with what names it, as the server asks):
    // the next plan sees them gone, apply re-creates them.
    rest.run(rest.client.delete_function_cascade(NS, "hello")).unwrap();
    let plan = work.plan();
    assert_eq!(plan.code, 2, "{}", plan.output());
    assert!(
        plan.stdout.contains("sless_function.hello will be created"),
        "{}",
        plan.output()
    );
    let run = work.apply();
    assert!(
        run.stdout.contains("Resources: 5 added, 0 changed, 0 destroyed"),
        "{}",
        run.output()
    );
    let function = rest.function(NS, "hello");
    assert_eq!((function.status.phase, function.status.version), (Phase::Ready, 1));
    work.assert_no_changes();

    // Destroy removes everything.
    let run = work.destroy();
    assert!(run.stdout.contains("Resources: 5 destroyed"), "{}", run.output());
    assert!(rest.run(rest.client.list_functions(NS)).unwrap().is_empty());
    assert!(rest.run(rest.client.list_triggers(NS)).unwrap().is_empty());
    assert!(rest.run(rest.client.list_jobs(NS)).unwrap().is_empty());
}
