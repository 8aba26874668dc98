//! `terraform-provider-sless`: started by Terraform (go-plugin handshake on
//! stdout), never by a person.

use terraform_provider_sless::{SlessProvider, PROVIDER_NAME};

/// go-plugin's magic cookie for Terraform providers: Terraform sets it when it
/// starts a plugin.
const MAGIC_COOKIE_KEY: &str = "TF_PLUGIN_MAGIC_COOKIE";
const MAGIC_COOKIE_VALUE: &str = "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2";

fn main() {
    if std::env::args().any(|arg| arg == "--version" || arg == "-v") {
        println!("terraform-provider-sless {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    if std::env::var(MAGIC_COOKIE_KEY).as_deref() != Ok(MAGIC_COOKIE_VALUE) {
        eprintln!(
            "This binary is a Terraform plugin: Terraform starts it. Install it with a\n\
             dev_overrides block in ~/.terraformrc (see the README's Terraform section)\n\
             and run terraform plan / apply."
        );
        std::process::exit(1);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("terraform-provider-sless: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(tf_provider::serve(PROVIDER_NAME, SlessProvider::default())) {
        eprintln!("terraform-provider-sless: {e:#}");
        std::process::exit(1);
    }
}
