//! `sless_secret` on a real Terraform, with a `sless_function` that takes it
//! by `env_from_secrets` and `secret_files`: the values reach the handler,
//! never show in plan output (sensitive) or the server's answers, change in
//! place (the function rolls), no-op plans after each apply, import by
//! `namespace/name` keeps the configured values, and destroy removes the
//! function before the secret it uses.

use std::collections::BTreeMap;

use sless_client::api::SecretPatch;

use crate::harness::{Rest, Server, Workdir};

const PROVIDER: &str = "provider \"sless\" {\n  namespace = \"tf-acc\"\n}";
const NS: &str = "tf-acc";

const HANDLER: &str = r#"import os

def handle(event, context):
    with open("/secrets/db/password") as f:
        return {"env": os.environ["DB_PASSWORD"], "file": f.read()}
"#;

fn stack(password: &str) -> String {
    format!(
        r#"
resource "sless_secret" "db" {{
  name = "db"
  data = {{
    password = "{password}"
    user     = "app"
  }}
}}

resource "sless_function" "app" {{
  name      = "app"
  runtime   = "python3.11"
  filename  = "app.zip"
  code_hash = filesha256("app.zip")
  env_from_secrets = [
    {{ secret = sless_secret.db.name, key = "password", env = "DB_PASSWORD" }},
  ]
  secret_files = [{{ secret = sless_secret.db.name }}]
}}
"#
    )
}

fn answer(rest: &Rest) -> serde_json::Value {
    let (status, body) = rest.invoke(NS, "app", "{}");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("JSON answer")
}

/// Sets a value of the secret `db` behind Terraform's back.
fn set_outside(rest: &Rest, key: &str, value: &str) {
    let patch = SecretPatch {
        data: BTreeMap::from([(key.to_string(), Some(value.to_string()))]),
    };
    rest.run(rest.client.patch_secret(NS, "db", &patch))
        .expect("patch the secret");
}

/// The keys the server has for the secret `db`.
fn keys(rest: &Rest) -> Vec<String> {
    rest.run(rest.client.get_secret(NS, "db")).expect("the secret").keys
}

#[test]
fn a_secret_reaches_its_function_changes_in_place_imports_and_goes_after_it() {
    let Some(parts) = crate::harness::Parts::find() else {
        return;
    };
    let server = Server::start(&parts);
    let rest = Rest::new(&server);
    let work = Workdir::new(&parts, &server);
    work.zip("app.zip", &[("handler.py", HANDLER)]);

    work.config(PROVIDER, &stack("first-value-1f3a"));
    let run = work.apply();
    assert!(!run.output().contains("first-value-1f3a"), "{}", run.output());
    let got = answer(&rest);
    assert_eq!(got["env"], "first-value-1f3a", "{got}");
    assert_eq!(got["file"], "first-value-1f3a", "{got}");
    work.assert_no_changes();
    let secret = rest.run(rest.client.get_secret(NS, "db")).expect("the secret");
    assert_eq!(secret.keys, ["password", "user"]);

    // A new value is an in-place update of the secret only; the function rolls.
    work.config(PROVIDER, &stack("second-value-9c2e"));
    let plan = work.plan();
    assert!(
        plan.stdout.contains("sless_secret.db will be updated in-place"),
        "{}",
        plan.output()
    );
    assert!(!plan.output().contains("second-value-9c2e"), "{}", plan.output());
    let run = work.apply();
    assert!(
        run.stdout.contains("0 added, 1 changed, 0 destroyed"),
        "{}",
        run.output()
    );
    let got = answer(&rest);
    assert_eq!(got["env"], "second-value-9c2e", "{got}");
    assert_eq!(got["file"], "second-value-9c2e", "{got}");
    work.assert_no_changes();

    // A value changed outside Terraform (the server says only that
    // updated_at moved) is written back by the next apply.
    set_outside(&rest, "password", "changed-outside");
    let plan = work.plan();
    assert!(
        plan.stdout.contains("sless_secret.db will be updated in-place"),
        "{}",
        plan.output()
    );
    work.apply();
    assert_eq!(answer(&rest)["env"], "second-value-9c2e");
    work.assert_no_changes();

    // A key added outside Terraform is removed by the next apply.
    set_outside(&rest, "extra", "1");
    work.apply();
    assert_eq!(keys(&rest), ["password", "user"]);
    work.assert_no_changes();

    // Imported after leaving the state: the server has the keys, not the
    // values, so the configured ones are written again (in place), and a
    // key the configuration lacks is removed.
    set_outside(&rest, "extra", "1");
    let run = work.tf(&["state", "rm", "sless_secret.db"]);
    assert_eq!(run.code, 0, "{}", run.output());
    let run = work.tf(&["import", "-no-color", "sless_secret.db", "tf-acc/db"]);
    assert_eq!(run.code, 0, "{}", run.output());
    work.apply();
    work.assert_no_changes();
    assert_eq!(answer(&rest)["env"], "second-value-9c2e");
    assert_eq!(keys(&rest), ["password", "user"]);

    // A key that is not a file name is refused before any call.
    // (`password = "x"`, then a line `"../up" = "y"`.)
    work.config(PROVIDER, &stack("x\"\n    \"../up\" = \"y"));
    let run = work.tf(&["plan", "-no-color"]);
    assert_ne!(run.code, 0, "{}", run.output());
    assert!(run.output().contains("data"), "{}", run.output());

    work.config(PROVIDER, &stack("second-value-9c2e"));
    work.destroy();
    let (status, body) = rest.invoke(NS, "app", "{}");
    assert_eq!(status, 404, "{body}");
    assert!(rest.run(rest.client.get_secret(NS, "db")).is_err());
}
