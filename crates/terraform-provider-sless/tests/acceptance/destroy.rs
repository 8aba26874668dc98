//! Deleting functions that triggers and jobs name, which the server refuses
//! to a person (409) unless they cascade: the provider deletes a function
//! leaving what names it to Terraform (`?orphan=true`), so a function
//! replaced for a new runtime keeps its triggers and job, `destroy` removes
//! everything in one run, also a trigger that names its function by a
//! plain string (no reference, so no order between the two).

use sless_client::api::Phase;

use crate::harness::{hello_python, Parts, Rest, Server, Workdir};

const NS: &str = "tf-destroy";
const PROVIDER: &str = "provider \"sless\" {\n  namespace = \"tf-destroy\"\n}";

const HELLO_NODE: &str = "exports.handle = async (event) => ({ message: `Hello from node, ${event.name}!` });\n";

/// A function on `runtime` with an http and a cron trigger and a job, all
/// naming it through a reference; `loose` adds a trigger that names it by
/// a string only.
fn stack(runtime: &str, zip: &str, loose: bool) -> String {
    let loose = if loose {
        r#"
resource "sless_trigger" "loose" {
  name     = "loose"
  function = "hello"
  type     = "cron"
  schedule = "0 4 * * *"
}
"#
    } else {
        ""
    };
    format!(
        r#"
resource "sless_function" "hello" {{
  name      = "hello"
  runtime   = "{runtime}"
  filename  = "{zip}"
  code_hash = filesha256("{zip}")
}}

resource "sless_trigger" "web" {{
  name     = "web"
  function = sless_function.hello.name
  type     = "http"
}}

resource "sless_trigger" "nightly" {{
  name     = "nightly"
  function = sless_function.hello.name
  type     = "cron"
  schedule = "0 3 * * *"
}}

resource "sless_job" "greet" {{
  name     = "greet"
  function = sless_function.hello.name
  event    = jsonencode({{ name = "terraform" }})
  run_id   = 1
}}
{loose}"#
    )
}

fn everything_gone(rest: &Rest) {
    assert!(rest.run(rest.client.list_functions(NS)).unwrap().is_empty());
    assert!(rest.run(rest.client.list_triggers(NS)).unwrap().is_empty());
    assert!(rest.run(rest.client.list_jobs(NS)).unwrap().is_empty());
}

#[test]
fn destroy_and_replace_keep_working_with_what_names_a_function() {
    let Some(parts) = Parts::find() else { return };
    let server = Server::start(&parts);
    let rest = Rest::new(&server);
    let work = Workdir::new(&parts, &server);
    work.zip("hello.zip", &[("handler.py", &hello_python())]);
    work.zip("hello-node.zip", &[("handler.js", HELLO_NODE)]);

    work.config(PROVIDER, &stack("python3.11", "hello.zip", false));
    let run = work.apply();
    assert!(
        run.stdout.contains("Resources: 4 added, 0 changed, 0 destroyed"),
        "{}",
        run.output()
    );
    // The server refuses to delete it behind their back.
    let refused = rest.run(rest.client.delete_function(NS, "hello")).unwrap_err();
    assert!(refused.is_conflict(), "{refused}");

    // A new runtime replaces the function; the triggers and the job name it
    // by its (unchanged) name, so they stay, and it serves again.
    work.config(PROVIDER, &stack("nodejs20", "hello-node.zip", false));
    let plan = work.plan();
    assert!(
        plan.stdout.contains("Plan: 1 to add, 0 to change, 1 to destroy"),
        "{}",
        plan.output()
    );
    let run = work.apply();
    assert!(
        run.stdout.contains("Resources: 1 added, 0 changed, 1 destroyed"),
        "{}",
        run.output()
    );
    let function = rest.function(NS, "hello");
    assert_eq!(function.status.phase, Phase::Ready);
    assert_eq!(function.spec.runtime.as_str(), "nodejs20");
    let (status, body) = rest.invoke(NS, "hello", r#"{"name": "you"}"#);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Hello from node, you!"), "{body}");
    assert_eq!(rest.run(rest.client.list_triggers(NS)).unwrap().len(), 2);
    rest.job(NS, "greet");
    work.assert_no_changes();

    // A trigger naming the function by a string gives Terraform no order
    // between the two (added once the function exists, since creating it
    // needs the function); destroy still finishes in one run, the
    // triggers and the job gone with the function.
    work.config(PROVIDER, &stack("nodejs20", "hello-node.zip", true));
    let run = work.apply();
    assert!(
        run.stdout.contains("Resources: 1 added, 0 changed, 0 destroyed"),
        "{}",
        run.output()
    );
    let run = work.destroy();
    assert!(run.stdout.contains("Resources: 5 destroyed"), "{}", run.output());
    everything_gone(&rest);
}
