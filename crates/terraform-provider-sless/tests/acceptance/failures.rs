//! Errors a person can act on: the build log of a failed build (and the
//! tainted function replaced once the code is fixed), the server's refusal
//! pointing at the attribute, a failed job's error, validation before any
//! call, and a provider without an endpoint.

use sless_client::api::Phase;

use crate::harness::{hello_python, Parts, Rest, Server, Workdir};

const NS: &str = "tf-fail";
const PROVIDER: &str = "provider \"sless\" {\n  namespace = \"tf-fail\"\n}";

fn function(name: &str, zip: &str) -> String {
    format!(
        r#"
resource "sless_function" "{name}" {{
  name      = "{name}"
  runtime   = "python3.11"
  filename  = "{zip}"
  code_hash = filesha256("{zip}")
}}
"#
    )
}

/// True when Terraform's diagnostic quotes the configuration line that sets
/// `attribute` to `value` (it does when the diagnostic names the attribute).
fn quotes(stderr: &str, attribute: &str, value: &str) -> bool {
    stderr
        .lines()
        .any(|line| line.contains(attribute) && line.contains(&format!("= {value}")))
}

#[test]
fn failures_say_what_went_wrong_and_where() {
    let Some(parts) = Parts::find() else { return };
    let server = Server::start(&parts);
    let rest = Rest::new(&server);
    let mut work = Workdir::new(&parts, &server);
    let handler = hello_python();
    work.zip("good.zip", &[("handler.py", &handler)]);
    work.zip(
        "broken.zip",
        &[
            ("handler.py", &handler),
            ("requirements.txt", "./vendor/does-not-exist.whl\n"),
        ],
    );
    work.zip(
        "boom.zip",
        &[(
            "handler.py",
            "def handle(event, context):\n    raise ValueError('kaboom: ' + str(event.get('why')))\n",
        )],
    );

    // Caught while validating, before any call: the attribute is quoted.
    work.config(
        PROVIDER,
        "resource \"sless_function\" \"bad\" {\n  name     = \"bad\"\n  runtime  = \"python2\"\n  filename = \"good.zip\"\n}\n",
    );
    let run = work.tf(&["plan", "-no-color"]);
    assert_eq!(run.code, 1, "{}", run.output());
    assert!(run.stderr.contains("Unsupported runtime"), "{}", run.output());
    assert!(run.stderr.contains("python3.11, nodejs20"), "{}", run.output());
    assert!(quotes(&run.stderr, "runtime", "\"python2\""), "{}", run.output());

    // A provider with no endpoint says where to set one.
    work.config(PROVIDER, &function("good", "good.zip"));
    work.set_env("SLESS_ENDPOINT", "");
    let run = work.tf(&["plan", "-no-color"]);
    assert_eq!(run.code, 1, "{}", run.output());
    assert!(run.stderr.contains("The sless endpoint is not set"), "{}", run.output());
    assert!(run.stderr.contains("SLESS_ENDPOINT"), "{}", run.output());
    work.set_env("SLESS_ENDPOINT", &server.url);

    // A failed build: the apply error carries the build log's tail and
    // points at filename; the function is tainted.
    work.config(PROVIDER, &function("broken", "broken.zip"));
    let run = work.apply_fails();
    assert!(
        run.stderr.contains("The build of function tf-fail/broken failed"),
        "{}",
        run.output()
    );
    assert!(
        run.stderr.contains("does-not-exist"),
        "pip's complaint: {}",
        run.output()
    );
    assert!(quotes(&run.stderr, "filename", "\"broken.zip\""), "{}", run.output());
    assert_eq!(rest.function(NS, "broken").status.phase, Phase::Failed);
    let plan = work.plan();
    assert!(
        plan.stdout.contains("is tainted, so must be replaced"),
        "{}",
        plan.output()
    );

    // Fixed code: the tainted function is replaced and Ready.
    std::fs::copy(work.path().join("good.zip"), work.path().join("broken.zip")).unwrap();
    let run = work.apply();
    assert!(
        run.stdout.contains("Resources: 1 added, 0 changed, 1 destroyed"),
        "{}",
        run.output()
    );
    assert_eq!(rest.function(NS, "broken").status.phase, Phase::Ready);
    work.assert_no_changes();

    // An update whose handler does not load (a syntax error) is a failed
    // build: the apply error carries the user's traceback on filename, and
    // the version before keeps serving.
    work.zip(
        "broken.zip",
        &[("handler.py", "def handle(event, context)\n    return 1\n")],
    );
    let run = work.apply_fails();
    assert!(run.stderr.contains("SyntaxError"), "{}", run.output());
    assert!(run.stderr.contains("version 1 keeps serving"), "{}", run.output());
    assert!(quotes(&run.stderr, "filename", "\"broken.zip\""), "{}", run.output());
    let answer = rest
        .run(rest.client.invoke(NS, "broken", sless_client::InvokeRequest::default()))
        .unwrap();
    assert_eq!(answer.status.as_u16(), 200, "the working version still answers");
    std::fs::copy(work.path().join("good.zip"), work.path().join("broken.zip")).unwrap();
    work.apply();
    assert_eq!(rest.function(NS, "broken").status.phase, Phase::Ready);

    // The server refuses a trigger of a function that does not exist: its
    // message, pointing at `function`.
    let trigger = "resource \"sless_trigger\" \"orphan\" {\n  name     = \"orphan\"\n  function = \"missing\"\n  type     = \"http\"\n}\n";
    work.config(PROVIDER, &format!("{}{trigger}", function("broken", "broken.zip")));
    let run = work.apply_fails();
    assert!(
        run.stderr.contains("Cannot create trigger tf-fail/orphan"),
        "{}",
        run.output()
    );
    assert!(run.stderr.contains("does not exist"), "{}", run.output());
    assert!(run.stderr.contains("400"), "{}", run.output());
    assert!(quotes(&run.stderr, "function", "\"missing\""), "{}", run.output());

    // A failed job run is an apply error with the handler's error.
    let job = "resource \"sless_job\" \"explode\" {\n  name     = \"explode\"\n  function = sless_function.boom.name\n  event    = jsonencode({ why = \"testing\" })\n  run_id   = 1\n}\n";
    work.config(PROVIDER, &format!("{}{job}", function("boom", "boom.zip")));
    let run = work.apply_fails();
    assert!(
        run.stderr.contains("Run 1 of job tf-fail/explode failed"),
        "{}",
        run.output()
    );
    assert!(run.stderr.contains("kaboom: testing"), "{}", run.output());

    work.config(PROVIDER, "");
    work.destroy();
    assert!(rest.run(rest.client.list_functions(NS)).unwrap().is_empty());
    assert!(rest.run(rest.client.list_jobs(NS)).unwrap().is_empty());
}

/// Runs `terraform plan` on `config`, which must fail before any call with
/// every one of `expected` in its errors; returns its stderr.
fn refused(work: &Workdir, config: &str, expected: &[&str]) -> String {
    work.config(PROVIDER, config);
    let run = work.tf(&["plan", "-no-color"]);
    assert_eq!(run.code, 1, "{}", run.output());
    for text in expected {
        assert!(run.stderr.contains(text), "expected {text:?}:\n{}", run.output());
    }
    assert!(!run.stderr.contains("untagged enum"), "{}", run.output());
    run.stderr
}

fn function_with(settings: &str) -> String {
    format!(
        "resource \"sless_function\" \"x\" {{\n  name     = \"x\"\n  runtime  = \"python3.11\"\n  filename = \"good.zip\"\n  {settings}\n}}\n"
    )
}

/// Numbers Terraform sends as a float or as text (`256.5`, `1e30`, past
/// int64) are refused while validating, on their attribute, rather than as
/// a resource that cannot be decoded.
#[test]
fn numbers_that_are_not_whole_are_refused_on_their_attribute() {
    let Some(parts) = Parts::find() else { return };
    let server = Server::start(&parts);
    let work = Workdir::new(&parts, &server);
    work.zip("good.zip", &[("handler.py", &hello_python())]);
    let cases = [
        ("sless_function", "memory_mb", "256.5"),
        ("sless_function", "memory_mb", "1e30"),
        ("sless_function", "timeout_sec", "9223372036854775808"),
        ("sless_alias", "version", "1.5"),
        ("sless_job", "run_id", "-1"),
    ];
    for (kind, attribute, value) in cases {
        let config = match kind {
            "sless_function" => function_with(&format!("{attribute} = {value}")),
            _ => format!(
                "resource \"{kind}\" \"x\" {{\n  name = \"x\"\n  function = \"f\"\n  {attribute} = {value}\n}}\n"
            ),
        };
        let stderr = refused(
            &work,
            &config,
            &[
                &format!("Invalid {attribute}"),
                &format!("{attribute} must be a whole number between 0 and"),
            ],
        );
        assert!(quotes(&stderr, attribute, value), "{stderr}");
    }
}

/// A null inside a list or map that the API needs whole (which apply used
/// to drop, taking every secret of a function with it) is refused while
/// validating, naming the element.
#[test]
fn nulls_inside_lists_and_maps_are_refused_naming_the_element() {
    let Some(parts) = Parts::find() else { return };
    let server = Server::start(&parts);
    let work = Workdir::new(&parts, &server);
    work.zip("good.zip", &[("handler.py", &hello_python())]);
    let unset = "variable \"unset\" {\n  type    = string\n  default = null\n}\n";
    let cases = [
        (
            "env_from_secrets = [\n    { secret = \"db\", key = \"password\", env = \"A\" },\n    { secret = \"db\", key = var.unset, env = \"B\" },\n  ]",
            "env_from_secrets[1].key is null",
        ),
        (
            "env_from_secrets = [{ secret = var.unset, key = \"k\", env = \"E\" }]",
            "env_from_secrets[0].secret is null",
        ),
        ("secret_files = [null]", "secret_files[0] is null"),
        ("env = { X_A = null, X_B = \"b\" }", "env[\"X_A\"] is null"),
    ];
    for (settings, expected) in cases {
        refused(&work, &format!("{unset}{}", function_with(settings)), &[expected]);
    }
    let secret = "resource \"sless_secret\" \"s\" {\n  name = \"s\"\n  data = { a = \"1\", b = null }\n}\n";
    refused(&work, secret, &["data[\"b\"] is null"]);
    let alias = "resource \"sless_alias\" \"a\" {\n  name     = \"a\"\n  function = \"f\"\n  version  = 1\n  weights  = { \"2\" = null }\n}\n";
    refused(&work, alias, &["weights[\"2\"] is null"]);

    // A value unknown while planning (another resource's output, made in
    // the same apply) that turns out null: Terraform validates the config
    // again once it is known, so the apply fails rather than sending the
    // null as "remove key b".
    let secret_with = |b: &str| {
        format!("resource \"sless_secret\" \"s\" {{\n  name = \"s\"\n  data = {{ a = \"1\", b = {b} }}\n}}\n")
    };
    work.config(PROVIDER, &secret_with("\"y\""));
    work.apply();
    let later = "resource \"terraform_data\" \"later\" {\n  input = \"x\"\n}\n";
    work.config(
        PROVIDER,
        &format!(
            "{later}{}",
            secret_with("terraform_data.later.output == \"x\" ? null : \"y\"")
        ),
    );
    let run = work.apply_fails();
    assert!(run.stderr.contains("data[\"b\"] is null"), "{}", run.output());
    let rest = Rest::new(&server);
    let keys = rest.run(rest.client.get_secret(NS, "s")).expect("the secret").keys;
    assert_eq!(keys, ["a", "b"], "key b is kept");
}

/// Bad `async` settings are refused while validating, on the attribute
/// inside the block, not at apply with a decoding error.
#[test]
fn bad_async_settings_are_refused_inside_the_block() {
    let Some(parts) = Parts::find() else { return };
    let server = Server::start(&parts);
    let work = Workdir::new(&parts, &server);
    work.zip("good.zip", &[("handler.py", &hello_python())]);
    let cases = [
        (
            "retry_limit = -1",
            "retry_limit",
            "-1",
            "async.retry_limit must be a whole number",
        ),
        (
            "max_event_age_sec = 99999999999",
            "max_event_age_sec",
            "99999999999",
            "async.max_event_age_sec must be a whole number",
        ),
        (
            "retry_limit = 11",
            "retry_limit",
            "11",
            "async.retry_limit must be between 0 and 10",
        ),
        (
            "on_success {\n      type = \"none\"\n    }",
            "type",
            "\"none\"",
            "async.on_success.type \"none\" is not one of function, amqp",
        ),
    ];
    for (block, attribute, value, expected) in cases {
        let config = function_with(&format!("async {{\n    {block}\n  }}"));
        let stderr = refused(&work, &config, &[expected]);
        assert!(quotes(&stderr, attribute, value), "{stderr}");
    }
}

/// An endpoint that is not the sless API's root (here `/v1` added, so
/// every call answers the router's 404) fails the refresh, naming the URL
/// and what it answered, rather than taking every object for deleted and
/// emptying the state.
#[test]
fn a_wrong_endpoint_path_fails_the_refresh_and_keeps_the_state() {
    let Some(parts) = Parts::find() else { return };
    let server = Server::start(&parts);
    let mut work = Workdir::new(&parts, &server);
    work.config(
        PROVIDER,
        "resource \"sless_secret\" \"s\" {\n  name = \"s\"\n  data = { a = \"1\" }\n}\n",
    );
    work.apply();

    work.set_env("SLESS_ENDPOINT", &format!("{}/v1", server.url));
    let run = work.tf(&["plan", "-no-color"]);
    assert_eq!(run.code, 1, "{}", run.output());
    // Terraform wraps the detail's lines.
    let stderr = run.stderr.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(stderr.contains("Cannot read secret tf-fail/s"), "{}", run.output());
    assert!(stderr.contains("does not look like a sless API"), "{}", run.output());
    assert!(
        stderr.contains("/v1/v1/namespaces/tf-fail/secrets/s answered 404 Not Found"),
        "{}",
        run.output()
    );
    work.apply_fails();

    work.set_env("SLESS_ENDPOINT", &server.url);
    let run = work.tf(&["state", "list"]);
    assert!(run.stdout.contains("sless_secret.s"), "{}", run.output());
    work.assert_no_changes();
    work.destroy();
}

/// Settings that used to plan a change forever: a `code_hash` in upper
/// case (the same code: no upload after the first), and a cron event of
/// JSON `null` (which the server keeps as no event: refused).
#[test]
fn an_uppercase_code_hash_plans_nothing_and_a_null_event_is_refused() {
    let Some(parts) = Parts::find() else { return };
    let server = Server::start(&parts);
    let work = Workdir::new(&parts, &server);
    work.zip("good.zip", &[("handler.py", &hello_python())]);
    let function = function_with("code_hash = upper(filesha256(\"good.zip\"))");
    work.config(PROVIDER, &function);
    work.apply();
    work.assert_no_changes();

    let trigger = "resource \"sless_trigger\" \"t\" {\n  name     = \"t\"\n  function = sless_function.x.name\n  type     = \"cron\"\n  schedule = \"0 * * * *\"\n  event    = \"null\"\n}\n";
    let stderr = refused(&work, &format!("{function}{trigger}"), &["event is JSON null"]);
    assert!(quotes(&stderr, "event", "\"null\""), "{stderr}");
    work.config(PROVIDER, "");
    work.destroy();
}
