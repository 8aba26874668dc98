//! Builds the zygotes' native code with the C compiler that links this
//! crate; launcher.rs embeds both:
//! - the Node zygote's module (`runtimes/node/sless_fork.c`, loaded by
//!   node as a Node-API module), which declares what it uses of node
//!   itself, so no node headers are needed;
//! - the Python zygote's request loop (`runtimes/python/sless_loop.c`,
//!   loaded with ctypes).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=CC");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    compile("../../runtimes/node/sless_fork.c", &out_dir.join("sless_fork.node"));
    compile("../../runtimes/python/sless_loop.c", &out_dir.join("sless_loop.so"));
}

/// A shared library of one C file.
fn compile(source: &str, out: &Path) {
    println!("cargo:rerun-if-changed={source}");
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let status = Command::new(&compiler)
        .args(["-O2", "-Wall", "-shared", "-fPIC", "-o"])
        .arg(out)
        .arg(source)
        .status()
        .unwrap_or_else(|e| panic!("running the C compiler {compiler:?} for {source}: {e}"));
    assert!(status.success(), "{compiler} could not build {source}: {status}");
}
