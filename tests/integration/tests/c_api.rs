//! The C API (`bindings/c`) as a C programmer meets it: installed by `scripts/install-c.sh`
//! into a private prefix, the example, the conventions test and the C blocks of
//! `bindings/c/README.md` compiled by gcc against the installed header and library through
//! pkg-config, then run, plainly and under valgrind (no error, no leak).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use crate::fixtures::{PluginDir, cpufast_plugin, target_dir};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn paddleocr() -> PathBuf {
    repo().join("target/models/paddleocr_cls")
}

/// Installs the already built library into a new prefix (`--no-build`: the workspace build
/// made it).
fn install() -> tempfile::TempDir {
    let prefix = tempfile::tempdir().unwrap();
    let profile = target_dir()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("scripts/install-c.sh"))
        .arg(prefix.path())
        .arg("--no-build");
    if profile == "debug" {
        cmd.arg("--debug");
    }
    let out = cmd
        .env("CARGO_TARGET_DIR", target_dir().parent().unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    prefix
}

/// `pkg-config ARGS backplane` against the prefix.
fn pkg_config(prefix: &Path, args: &[&str]) -> String {
    let out = Command::new("pkg-config")
        .args(args)
        .arg("backplane")
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .output()
        .expect("pkg-config runs (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Compiles one C file with warnings as errors and the flags pkg-config gives.
fn compile(prefix: &Path, source: &str, out_dir: &Path) -> PathBuf {
    let exe = out_dir.join(Path::new(source).file_stem().unwrap());
    let flags = pkg_config(prefix, &["--cflags", "--libs"]);
    let out = Command::new("gcc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pthread", "-o"])
        .arg(&exe)
        .arg(repo().join(source))
        .args(flags.split_whitespace())
        .arg("-lm")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gcc {source}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs `exe` with the prefix's library, optionally under valgrind memcheck; returns stdout
/// and whether it (and memcheck) passed.
fn run(
    prefix: &Path,
    exe: &Path,
    args: &[String],
    plugins: &str,
    valgrind: bool,
) -> (bool, String) {
    let mut cmd = if valgrind {
        let mut c = Command::new("valgrind");
        c.args([
            "-q",
            "--error-exitcode=99",
            "--leak-check=full",
            "--show-leak-kinds=definite,indirect,possible",
            "--errors-for-leak-kinds=definite,indirect,possible",
        ])
        .arg(format!(
            "--suppressions={}",
            repo().join("scripts/valgrind.supp").display()
        ))
        .arg(exe);
        c
    } else {
        Command::new(exe)
    };
    let out = cmd
        .args(args)
        .env("LD_LIBRARY_PATH", prefix.join("lib"))
        .env("DYNAMIC_BACKEND_PATHS", plugins)
        .env("BACKPLANE_PROBE", crate::fixtures::backplane_bin())
        .output()
        .expect("the program (and valgrind: scripts/test.sh installs it) runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    (out.status.success(), format!("{stdout}{stderr}"))
}

#[test]
fn installs_a_versioned_library_header_and_pkg_config_file() {
    let prefix = install();
    let lib = prefix.path().join("lib");
    assert!(lib.join("libbackplane.so.0.1.0").is_file());
    assert_eq!(
        std::fs::read_link(lib.join("libbackplane.so.0")).unwrap(),
        Path::new("libbackplane.so.0.1.0")
    );
    assert_eq!(
        std::fs::read_link(lib.join("libbackplane.so")).unwrap(),
        Path::new("libbackplane.so.0")
    );
    let header = std::fs::read_to_string(prefix.path().join("include/backplane.h")).unwrap();
    for name in [
        "bp_runtime_new",
        "bp_runtime_free",
        "bp_runtime_report_json",
        "bp_string_free",
        "bp_network_load",
        "bp_network_input_count",
        "bp_network_input_name",
        "bp_network_input_shape",
        "bp_network_output_count",
        "bp_network_output_name",
        "bp_network_output_shape",
        "bp_network_run",
        "bp_network_explain",
        "bp_network_free",
        "bp_last_error",
        "typedef struct bp_tensor",
    ] {
        assert!(header.contains(name), "backplane.h lacks {name}");
    }
    assert_eq!(pkg_config(prefix.path(), &["--modversion"]), "0.1.0");
    // The SONAME is the name the .so.0 link gives.
    let out = Command::new("objdump")
        .arg("-p")
        .arg(lib.join("libbackplane.so.0.1.0"))
        .output()
        .unwrap();
    let dynamic = String::from_utf8_lossy(&out.stdout);
    assert!(
        dynamic
            .lines()
            .any(|l| l.split_whitespace().eq(["SONAME", "libbackplane.so.0"])),
        "{dynamic}"
    );
}

#[test]
fn the_example_runs_paddleocr_on_cpufast_and_cpuref_like_onnxruntime() {
    let prefix = install();
    let build = tempfile::tempdir().unwrap();
    let exe = compile(
        prefix.path(),
        "bindings/c/examples/run_model.c",
        build.path(),
    );
    let plugins = PluginDir::new();
    plugins.copy(&cpufast_plugin(), "Acme_CpuFast_backend.so");
    let m = paddleocr();
    // The same model compiled (`backplane compile`): bp_network_load reads it as well.
    let bpn = build.path().join("cls.bpn");
    crate::compiled::compile_classifier(&plugins, &bpn);
    for (model, valgrind) in [
        (m.join("model.onnx"), false),
        (m.join("model.onnx"), true),
        (bpn.clone(), false),
        (bpn.clone(), true),
    ] {
        let args = [
            model.display().to_string(),
            format!("x={}", m.join("input.npy").display()),
            // onnxruntime's output (scripts/fetch-paddleocr.sh).
            m.join("save_infer_model_scale_0.tmp_1.npy")
                .display()
                .to_string(),
        ];
        let (ok, out) = run(prefix.path(), &exe, &args, plugins.as_str(), valgrind);
        assert!(ok, "valgrind={valgrind}: {out}");
        assert!(out.contains("Backend API 1.5\n"), "{out}");
        // A change detector, not the oracle: the counts move when fusion changes. The oracle
        // is the example's own check against onnxruntime's output (exit status 1 past 1e-4).
        assert!(
            out.contains("layers per backend: {\"CpuFast\":84,\"CpuRef\":233}\n"),
            "{out}"
        );
        assert!(out.contains("max |diff| vs reference: "), "{out}");
    }
}

#[test]
fn the_conventions_hold_and_nothing_leaks() {
    let prefix = install();
    let build = tempfile::tempdir().unwrap();
    let exe = compile(
        prefix.path(),
        "bindings/c/tests/conventions.c",
        build.path(),
    );
    let m = paddleocr();
    let model = m.join("model.onnx").display().to_string();
    let input = format!("x={}", m.join("input.npy").display());
    for (valgrind, runs) in [(false, "20"), (true, "1")] {
        let args = [model.clone(), input.clone(), runs.to_owned()];
        let (ok, out) = run(prefix.path(), &exe, &args, "", valgrind);
        assert!(ok, "valgrind={valgrind}: {out}");
        assert!(out.contains("\n39 passed, 0 failed\n"), "{out}");
    }
}

/// The ```` ```c ```` blocks of `markdown`: (line of the fence, code).
fn c_blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (i, line) in markdown.lines().enumerate() {
        match &mut open {
            None if line.trim_end() == "```c" => open = Some((i + 1, String::new())),
            None => {}
            Some(_) if line.trim_end() == "```" => blocks.extend(open.take()),
            Some((_, code)) => {
                code.push_str(line);
                code.push('\n');
            }
        }
    }
    assert!(open.is_none(), "an unclosed ```c block");
    blocks
}

/// Every C block of `bindings/c/README.md` is a whole program: with its placeholder
/// `"model.onnx"` replaced by the PaddleOCR classifier, it compiles against the installed
/// library and runs, plainly and under valgrind, with CpuFast in `DYNAMIC_BACKEND_PATHS`.
#[test]
fn the_readme_snippets_compile_and_run() {
    let readme = std::fs::read_to_string(repo().join("bindings/c/README.md")).unwrap();
    let blocks = c_blocks(&readme);
    assert!(!blocks.is_empty(), "bindings/c/README.md has no ```c block");
    let prefix = install();
    let build = tempfile::tempdir().unwrap();
    let plugins = PluginDir::new();
    plugins.copy(&cpufast_plugin(), "Acme_CpuFast_backend.so");
    let model = format!("{:?}", paddleocr().join("model.onnx").display().to_string());
    for (line, code) in blocks {
        let source = build.path().join(format!("readme_line_{line}.c"));
        std::fs::write(&source, code.replace("\"model.onnx\"", &model)).unwrap();
        let exe = compile(prefix.path(), source.to_str().unwrap(), build.path());
        for valgrind in [false, true] {
            let (ok, out) = run(prefix.path(), &exe, &[], plugins.as_str(), valgrind);
            assert!(
                ok,
                "bindings/c/README.md, the block at line {line}, valgrind={valgrind}: {out}"
            );
            assert!(!out.is_empty(), "the block at line {line} printed nothing");
        }
    }
}
