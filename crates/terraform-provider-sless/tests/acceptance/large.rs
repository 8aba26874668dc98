//! A large value through Terraform: a job's event of 1 MB, past what the
//! server takes (256 KiB), is refused by the provider on its attribute as
//! the configuration is validated, before anything is created (it used to
//! be created first, and the job refused by the server). Terraform's
//! plugin protocol carries at most 4 MiB in one message (tonic's default,
//! which tf-provider does not let a provider raise): past that, Terraform
//! says so, naming both sizes.

use serde_json::json;

use crate::harness::{Parts, Rest, Server, Workdir};

const NS: &str = "tf-large";
const PROVIDER: &str = "provider \"sless\" {\n  namespace = \"tf-large\"\n}";

const CONFIG: &str = r#"
resource "sless_function" "size" {
  name      = "size"
  runtime   = "python3.11"
  filename  = "size.zip"
  code_hash = filesha256("size.zip")
}

resource "sless_job" "big" {
  name     = "big"
  function = sless_function.size.name
  event    = file("event.json")
  run_id   = 1
}
"#;

#[test]
fn a_job_event_past_the_servers_bound_is_refused_on_its_attribute() {
    let Some(parts) = Parts::find() else { return };
    let server = Server::start(&parts);
    let rest = Rest::new(&server);
    let work = Workdir::new(&parts, &server);
    work.zip(
        "size.zip",
        &[(
            "handler.py",
            "def handle(event, context):\n    return len(event[\"data\"])\n",
        )],
    );
    let event = json!({"data": "x".repeat(1_000_000)}).to_string();
    std::fs::write(work.path().join("event.json"), event).expect("write event.json");
    work.config(PROVIDER, CONFIG);

    let run = work.apply_fails();
    // Terraform wraps a diagnostic's lines.
    let said = run.stderr.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        said.contains("Error: event is too large with sless_job.big"),
        "{}",
        run.output()
    );
    assert!(
        said.contains("a job's event must be at most 262144 bytes as JSON, got 1000011"),
        "{}",
        run.output()
    );
    // Refused before any call: nothing was created.
    let found = rest.run(rest.client.get_function(NS, "size"));
    assert!(found.is_err(), "{found:?}");
}
