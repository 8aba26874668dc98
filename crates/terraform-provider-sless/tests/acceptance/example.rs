//! `examples/terraform/main.tf` as a person would use it: the two example
//! functions zipped, applied, the job's result and the URL in the outputs,
//! then an empty plan and destroy.

use sless_client::api::Phase;

use crate::harness::{Parts, Rest, Server, Workdir, EXAMPLES};

#[test]
fn the_terraform_example_applies() {
    let Some(parts) = Parts::find() else { return };
    let server = Server::start(&parts);
    let rest = Rest::new(&server);
    let work = Workdir::new(&parts, &server);
    let main_tf = std::fs::read_to_string(format!("{EXAMPLES}/terraform/main.tf")).expect("examples/terraform/main.tf");
    std::fs::write(work.path().join("main.tf"), main_tf).unwrap();
    work.zip_dir("hello-python.zip", &format!("{EXAMPLES}/hello-python"));
    work.zip_dir("hello-node.zip", &format!("{EXAMPLES}/hello-node"));
    std::fs::write(
        work.path().join("terraform.tfvars"),
        "python_zip = \"hello-python.zip\"\nnode_zip = \"hello-node.zip\"\nnamespace = \"examples\"\n",
    )
    .unwrap();

    let run = work.apply();
    assert!(
        run.stdout.contains("Resources: 5 added, 0 changed, 0 destroyed"),
        "{}",
        run.output()
    );
    assert!(
        run.stdout.contains("Hello, Terraform!"),
        "the job's result: {}",
        run.output()
    );
    assert!(
        run.stdout
            .contains(&format!("hello_url = \"{}/fn/examples/hello\"", server.url)),
        "{}",
        run.output()
    );
    for name in ["hello", "hello-node"] {
        let function = rest.function("examples", name);
        assert_eq!(function.status.phase, Phase::Ready, "{name}");
    }
    let (status, body) = rest.invoke("examples", "hello-node", r#"{"name": "node"}"#);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Hello, node!"), "{body}");
    work.assert_no_changes();
    work.destroy();
    assert!(rest.run(rest.client.list_functions("examples")).unwrap().is_empty());
}
