//! Builds the emulated CANN toolkit: `csrc/*.c` become `libascendcl.so`, `libnnopbase.so` and
//! `libopapi.so` in `$OUT_DIR/sim-toolkit/lib64`, the layout of a real toolkit root, which the
//! crate loads through the same libloading path as real CANN.
use std::path::{Path, PathBuf};
use std::process::Command;

fn link(root: &Path, name: &str, source: &str, deps: &[&str]) {
    let compiler = cc::Build::new().opt_level(2).pic(true).get_compiler();
    let out = root.join(format!("lib{name}.so"));
    let mut cmd: Command = compiler.to_command();
    cmd.args(["-shared", "-fPIC", "-O2", "-std=gnu11", "-fvisibility=hidden", "-Wall", "-Wextra"])
        .arg(format!("csrc/{source}"))
        .arg("-o")
        .arg(&out)
        .arg(format!("-L{}", root.display()))
        .arg("-Wl,-rpath,$ORIGIN");
    for dep in deps {
        cmd.arg(format!("-l{dep}"));
    }
    cmd.args(["-lpthread", "-lm"]);
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot run the C compiler for {source}: {e}"));
    assert!(status.success(), "building the emulated {name} failed");
}

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let root = out.join("sim-toolkit");
    let lib64 = root.join("lib64");
    std::fs::create_dir_all(&lib64).expect("create the emulated toolkit folder");
    link(&lib64, "ascendcl", "ascendcl.c", &[]);
    link(&lib64, "nnopbase", "nnopbase.c", &["ascendcl"]);
    link(&lib64, "opapi", "opapi.c", &["ascendcl", "nnopbase"]);
    std::fs::write(root.join("version.cfg"), "# emulated CANN toolkit (candle-ascend npu-sim)\nversion=8.0.sim\n")
        .expect("write version.cfg");
    println!("cargo:rustc-env=CANDLE_ASCEND_SIM_ROOT={}", root.display());
    for f in ["build.rs", "csrc/sim.h", "csrc/ascendcl.c", "csrc/nnopbase.c", "csrc/opapi.c"] {
        println!("cargo:rerun-if-changed={f}");
    }
}
