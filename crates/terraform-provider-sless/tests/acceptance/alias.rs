//! `sless_alias` on a real Terraform: created pointing at a version with a
//! canary share, no-op plans after each apply, moved in place (and the
//! canary ended), rolled back, imported by `namespace/function/name`, and
//! destroyed with its function.

use crate::harness::{Rest, Server, Workdir};

const PROVIDER: &str = "provider \"sless\" {\n  namespace = \"tf-acc\"\n}";
const NS: &str = "tf-acc";

fn handler(v: u32) -> String {
    format!("def handle(event, context):\n    return {{'v': {v}}}\n")
}

fn stack(alias: &str) -> String {
    format!(
        r#"
resource "sless_function" "app" {{
  name      = "app"
  runtime   = "python3.11"
  filename  = "app.zip"
  code_hash = filesha256("app.zip")
}}

resource "sless_alias" "live" {{
  name     = "live"
  function = sless_function.app.name
  {alias}
}}

output "url" {{
  value = sless_alias.live.url
}}
"#
    )
}

/// The `v` that `/fn/tf-acc/app@live` answers with.
fn live(rest: &Rest) -> u64 {
    let (status, body) = rest.invoke(NS, "app@live", "{}");
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).expect("JSON answer");
    answer["v"].as_u64().expect("a v")
}

#[test]
fn an_alias_is_created_moved_rolled_back_imported_and_destroyed() {
    let Some(parts) = crate::harness::Parts::find() else {
        return;
    };
    let server = Server::start(&parts);
    let rest = Rest::new(&server);
    let work = Workdir::new(&parts, &server);

    // Two versions: the function applied with two codes in turn.
    work.zip("app.zip", &[("handler.py", &handler(1))]);
    work.config(PROVIDER, &stack("version = 1"));
    let run = work.apply();
    assert!(
        run.stdout
            .contains(&format!("url = \"{}/fn/{NS}/app@live\"", server.url)),
        "{}",
        run.output()
    );
    assert_eq!(live(&rest), 1);
    work.zip("app.zip", &[("handler.py", &handler(2))]);
    work.apply();
    assert_eq!(rest.function(NS, "app").status.version, 2);
    assert_eq!(live(&rest), 1, "a new build does not move the alias");

    // A canary share to version 2, then moved to 2 outright, in place.
    work.config(PROVIDER, &stack("version = 1\n  weights = { \"2\" = 0.25 }"));
    let run = work.apply();
    assert!(
        run.stdout.contains("0 added, 1 changed, 0 destroyed"),
        "{}",
        run.output()
    );
    work.assert_no_changes();

    // Shares that are no exact float64 (Terraform sends them as decimal
    // text) apply and then plan nothing.
    for share in ["0.1", "0.05"] {
        work.config(
            PROVIDER,
            &stack(&format!("version = 1\n  weights = {{ \"2\" = {share} }}")),
        );
        work.apply();
        work.assert_no_changes();
        let alias = rest.run(rest.client.get_alias(NS, "app", "live")).expect("the alias");
        assert_eq!(alias.spec.weights["2"].to_string(), share);
    }
    work.config(PROVIDER, &stack("version = 2"));
    let plan = work.plan();
    assert!(
        plan.stdout.contains("sless_alias.live will be updated in-place"),
        "{}",
        plan.output()
    );
    work.apply();
    work.assert_no_changes();
    for _ in 0..10 {
        assert_eq!(live(&rest), 2);
    }

    // Rollback is moving it back.
    work.config(PROVIDER, &stack("version = 1"));
    work.apply();
    assert_eq!(live(&rest), 1);

    // Imported by namespace/function/name after leaving the state.
    let run = work.tf(&["state", "rm", "sless_alias.live"]);
    assert_eq!(run.code, 0, "{}", run.output());
    let run = work.tf(&["import", "-no-color", "sless_alias.live", "tf-acc/app/live"]);
    assert_eq!(run.code, 0, "{}", run.output());
    work.assert_no_changes();

    // A bad split is refused before any call, naming the attribute.
    work.config(PROVIDER, &stack("version = 1\n  weights = { \"2\" = 1.5 }"));
    let run = work.tf(&["plan", "-no-color"]);
    assert_ne!(run.code, 0, "{}", run.output());
    assert!(run.output().contains("weights"), "{}", run.output());

    work.config(PROVIDER, &stack("version = 1"));
    work.destroy();
    let (status, body) = rest.invoke(NS, "app@live", "{}");
    assert_eq!(status, 404, "{body}");
}
