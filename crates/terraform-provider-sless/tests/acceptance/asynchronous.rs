//! `sless_function`'s `async` settings on a real Terraform: created with a
//! dead-letter function, no-op plans, changed in place, an event that fails
//! reaching the dead-letter function, and the settings removed again.

use sless_client::api::{AsyncStatus, DestinationType};

use crate::harness::{hello_python, Parts, Rest, Server, Workdir};

const NS: &str = "tf-async";
const PROVIDER: &str = "provider \"sless\" {\n  namespace = \"tf-async\"\n}";

fn stack(settings: &str) -> String {
    format!(
        r#"
resource "sless_function" "dlq" {{
  name      = "dlq"
  runtime   = "python3.11"
  filename  = "hello.zip"
  code_hash = filesha256("hello.zip")
}}

resource "sless_function" "worker" {{
  name      = "worker"
  runtime   = "python3.11"
  filename  = "failing.zip"
  code_hash = filesha256("failing.zip")
  {settings}
}}
"#
    )
}

#[test]
fn async_settings_are_created_changed_in_place_and_removed() {
    let Some(parts) = Parts::find() else { return };
    let server = Server::start(&parts);
    let rest = Rest::new(&server);
    let work = Workdir::new(&parts, &server);
    work.zip("hello.zip", &[("handler.py", &hello_python())]);
    work.zip(
        "failing.zip",
        &[(
            "handler.py",
            "def handle(event, context):\n    raise RuntimeError('no luck')\n",
        )],
    );

    let with_dlq = |retries: u32| {
        format!(
            "async {{\n    retry_limit = {retries}\n    on_failure {{\n      type     = \"function\"\n      function = sless_function.dlq.name\n    }}\n  }}"
        )
    };
    work.config(PROVIDER, &stack(&with_dlq(0)));
    let run = work.apply();
    assert!(
        run.stdout.contains("Resources: 2 added, 0 changed, 0 destroyed"),
        "{}",
        run.output()
    );
    let worker = rest.function(NS, "worker");
    let settings = worker.spec.async_settings.clone().expect("async settings");
    assert_eq!((settings.retry_limit, settings.max_event_age_sec), (0, 21600));
    let on_failure = settings.on_failure.expect("a destination");
    assert_eq!(
        (on_failure.kind, on_failure.function.as_deref()),
        (DestinationType::Function, Some("dlq"))
    );
    work.assert_no_changes();

    // An event that fails goes to the dead-letter function.
    let accepted = rest.run(async {
        rest.client
            .invoke(
                NS,
                "worker",
                sless_client::InvokeRequest {
                    method: sless_client::Method::POST,
                    path: String::new(),
                    headers: vec![("x-sless-invocation-type".into(), "Event".into())],
                    body: b"{}".to_vec(),
                },
            )
            .await
    });
    let accepted = accepted.unwrap();
    assert_eq!(accepted.status.as_u16(), 202);
    let id = serde_json::from_slice::<serde_json::Value>(&accepted.body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let record = rest.run(rest.client.get_async_invocation(NS, "worker", &id)).unwrap();
        let letters = rest
            .run(rest.client.list_async_invocations(NS, "dlq", None, None, None))
            .unwrap();
        if record.status == AsyncStatus::Failed && letters.items.iter().any(|l| l.source.as_deref() == Some(&id)) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no dead letter: {record:?} {letters:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }

    // A new retry_limit: the same function, changed in place.
    work.config(PROVIDER, &stack(&with_dlq(3)));
    let plan = work.plan();
    assert!(
        plan.stdout.contains("sless_function.worker will be updated in-place"),
        "{}",
        plan.output()
    );
    let run = work.apply();
    assert!(
        run.stdout.contains("Resources: 0 added, 1 changed, 0 destroyed"),
        "{}",
        run.output()
    );
    let settings = rest.function(NS, "worker").spec.async_settings.expect("async settings");
    assert_eq!(settings.retry_limit, 3);
    work.assert_no_changes();

    // Removed: the server's defaults again.
    work.config(PROVIDER, &stack(""));
    let run = work.apply();
    assert!(
        run.stdout.contains("Resources: 0 added, 1 changed, 0 destroyed"),
        "{}",
        run.output()
    );
    assert_eq!(rest.function(NS, "worker").spec.async_settings, None);
    work.assert_no_changes();

    let run = work.destroy();
    assert!(run.stdout.contains("Resources: 2 destroyed"), "{}", run.output());
}
