//! Builds `libbp_absent_dep.so` into `$OUT_DIR/absent/` with `gcc` and links the cdylib
//! against it, without telling cargo where it is: no `rustc-link-search` (cargo would put that
//! directory on `LD_LIBRARY_PATH` for `cargo test`/`cargo run`) and no rpath. At run time the
//! dynamic loader therefore cannot find the library, which is the point of this plugin.
//! Cross-compiled (scripts/build-aarch64.sh), the library is built by the target's gcc.

use std::{env, path::PathBuf, process::Command};

fn main() {
    let src = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"))
        .join("c/bp_absent_dep.c");
    let dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("absent");
    std::fs::create_dir_all(&dir).expect("create $OUT_DIR/absent");
    let lib = dir.join("libbp_absent_dep.so");
    let status = Command::new(c_compiler())
        .args(["-shared", "-fPIC", "-Wl,-soname,libbp_absent_dep.so", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("run gcc (needed to build the test dependency libbp_absent_dep.so)");
    assert!(status.success(), "gcc failed to build {}", lib.display());

    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={}", src.display());
    // Keep the NEEDED entry even though rustc passes `--as-needed` before.
    println!("cargo:rustc-link-arg-cdylib=-Wl,--no-as-needed");
    println!("cargo:rustc-link-arg-cdylib=-L{}", dir.display());
    println!("cargo:rustc-link-arg-cdylib=-lbp_absent_dep");
}

/// The C compiler for the target: `CC_<target>` when set, else `gcc` for the machine that
/// builds, else the GNU cross compiler named after the target (`aarch64-linux-gnu-gcc`).
fn c_compiler() -> String {
    let target = env::var("TARGET").unwrap_or_default();
    if let Ok(cc) = env::var(format!("CC_{}", target.replace('-', "_"))) {
        return cc;
    }
    if target == env::var("HOST").unwrap_or_default() {
        return "gcc".to_owned();
    }
    // `aarch64-unknown-linux-gnu` → `aarch64-linux-gnu-gcc`.
    let arch = target.split('-').next().unwrap_or_default();
    format!("{arch}-linux-gnu-gcc")
}
