//! Builds the Node zygote's native module (`runtimes/node/sless_fork.c`,
//! loaded by node as a Node-API module) with the C compiler that links
//! this crate; launcher.rs embeds it. It declares what it uses of node
//! itself, so no node headers are needed.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = "../../runtimes/node/sless_fork.c";
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-env-changed=CC");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("sless_fork.node");
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let status = Command::new(&compiler)
        .args(["-O2", "-Wall", "-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(source)
        .status()
        .unwrap_or_else(|e| panic!("running the C compiler {compiler:?} for {source}: {e}"));
    assert!(status.success(), "{compiler} could not build {source}: {status}");
}
