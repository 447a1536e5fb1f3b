//! Out-of-process backends (`--out-of-process`, `CreationOptions::out_of_process`): plugins
//! that segfault, abort, exit, hang or corrupt their heap in `execute` fail that enqueue with a
//! clean error; the application goes on, on the remaining backends; results are bit-identical
//! to in-process ones; the server holds nothing of its parent's and dies with it.

use std::{path::Path, process::Command, time::Duration};

use backplane::{
    CreationOptions, ExecuteError, OptimizerOptions, OutOfProcess, Runtime, Session,
    SessionOptions, plugins::paths::PathSource,
};
use backplane_api::ActivationFunction;

use crate::fixtures::{
    PluginDir, backplane_bin, bytes, chain, cli, cpufast_plugin, enqueue_single, f32t,
    out_of_process, run_single,
};

/// `true` while process `pid` exists (a zombie counts: it is not reaped).
fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Each fatal fault in `execute` (third call) fails exactly that enqueue, with the backend,
/// the call and the signal, status or deadline named and the plugin's last stderr line quoted.
/// The backend is faulted and its server reaped; a CpuRef network beside it keeps running;
/// the faulted network can still be unloaded; `reoptimize` moves its layer to CpuRef.
#[test]
fn every_fatal_fault_in_execute_is_a_clean_error() {
    let cases = [
        (
            "exec-segfaults",
            "ExecSegv",
            "was killed by signal 11 (SIGSEGV) during execute",
        ),
        (
            "exec-aborts",
            "ExecAbort",
            "was killed by signal 6 (SIGABRT) during execute",
        ),
        (
            "exec-exits",
            "ExecExit",
            "exited with status 0 during execute",
        ),
        (
            "exec-hangs",
            "ExecHang",
            "did not answer within 1.0 s and was killed during execute",
        ),
        (
            "heap-corrupts",
            "HeapCorrupt",
            "was killed by signal 6 (SIGABRT) during execute",
        ),
    ];
    std::thread::scope(|s| {
        for (crate_name, id, what) in cases {
            s.spawn(move || one_fatal_fault(crate_name, id, what));
        }
    });
}

fn one_fatal_fault(crate_name: &str, id: &str, what: &str) {
    let dir = PluginDir::new();
    dir.add(crate_name, &format!("Test_{id}_backend.so"));
    let rt = Runtime::with_path_list(
        out_of_process(&[id], Duration::from_secs(1)),
        PathSource::Option,
        dir.as_str(),
    );
    let report = rt.report();
    let row = report.backends.iter().find(|b| b.id == id).unwrap();
    let pid = row.out_of_process_pid.expect("runs out of process");
    assert_ne!(pid, std::process::id());
    assert!(process_exists(pid));

    let info = f32t(&[2, 3]);
    let x = [-1.5, 2.0, -0.0, 3.25, -7.0, 0.5];
    let relu = [0.0, 2.0, 0.0, 3.25, 0.0, 0.5];
    let net = chain(&[2, 3], &[("relu", ActivationFunction::ReLU)]);
    // A bystander on CpuRef, in this process.
    let bystander = rt
        .optimize(&net, &["CpuRef"], &OptimizerOptions::default())
        .unwrap();
    let bystander = rt.load_network(&bystander).unwrap();

    let optimized = rt
        .optimize(&net, &[id, "CpuRef"], &OptimizerOptions::default())
        .unwrap();
    assert_eq!(optimized.backend_of("relu"), Some(id));
    let net_id = rt.load_network(&optimized).unwrap();
    for _ in 0..2 {
        assert_eq!(run_single(&rt, net_id, &info, &x, &info), relu);
    }
    let err = enqueue_single(&rt, net_id, &info, &x, &info).unwrap_err();
    let ExecuteError::Backend { layer, error } = &err else {
        panic!("{id}: expected a backend error, got {err}");
    };
    assert_eq!(layer, "relu");
    assert_eq!((error.backend.as_str(), error.method), (id, "execute"));
    assert!(
        error
            .message
            .starts_with(&format!("the out-of-process server (pid {pid}) {what}")),
        "{id}: {err}"
    );
    assert!(
        error
            .message
            .contains(&format!("its stderr ended with: {id}: execute call 3")),
        "{id}: {err}"
    );
    if id == "HeapCorrupt" {
        assert!(error.message.contains("free(): invalid pointer"), "{err}");
    }
    assert!(rt.registry().get(id).unwrap().is_faulted());
    assert!(!process_exists(pid), "{id}: server {pid} was not reaped");

    // Later calls fail at once, naming the fault.
    let again = enqueue_single(&rt, net_id, &info, &x, &info).unwrap_err();
    assert!(again.to_string().contains("backend is faulted"), "{again}");
    // The application goes on.
    assert_eq!(run_single(&rt, bystander, &info, &x, &info), relu);
    let moved = rt.reoptimize(&optimized).unwrap();
    assert_eq!(moved.backend_of("relu"), Some("CpuRef"));
    let moved = rt.load_network(&moved).unwrap();
    assert_eq!(run_single(&rt, moved, &info, &x, &info), relu);
    rt.unload_network(net_id).unwrap();
    rt.unload_network(moved).unwrap();
    rt.unload_network(bystander).unwrap();
    assert_eq!(rt.report().backends.iter().filter(|b| b.faulted).count(), 1);
}

/// The PaddleOCR classifier, its input's shape and bytes.
fn paddleocr() -> (std::path::PathBuf, Vec<u32>, Vec<u8>) {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/models/paddleocr_cls");
    let (shape, x) = backplane::npy::read_f32(&models.join("input.npy")).unwrap();
    (models.join("model.onnx"), shape, bytes(&x))
}

/// The optimizer options of the PaddleOCR runs: its ten global average pools and its Softmax
/// pinned to CpuRef. CpuFast runs every compute layer of the model; the pins split it into
/// segments that alternate between the two backends, as a partly supported model would.
fn paddleocr_optimizer_options() -> OptimizerOptions {
    let mut pins: Vec<(String, String)> = (0..10)
        .map(|i| (format!("GlobalAveragePool@{i}"), "CpuRef".to_owned()))
        .collect();
    pins.push(("Softmax@0".to_owned(), "CpuRef".to_owned()));
    OptimizerOptions {
        pins,
        ..OptimizerOptions::default()
    }
}

/// Loads PaddleOCR cls with CpuFast (a plugin) and CpuRef in `rt` and runs it twice: the
/// output bytes, and the round trips of each out-of-process backend per inference.
fn run_paddleocr(rt: Runtime) -> (Vec<u8>, Vec<(String, u64)>) {
    let (model, shape, x) = paddleocr();
    let rt = std::sync::Arc::new(rt);
    let mut options = SessionOptions {
        backends: vec!["CpuFast".into(), "CpuRef".into()],
        optimizer: paddleocr_optimizer_options(),
        ..SessionOptions::default()
    };
    options.input_shapes.insert("x".into(), shape.clone());
    let session = Session::load(rt.clone(), &model, &options).unwrap();
    let input_info = session.current().unwrap().inputs()[0].1.clone();
    let input = [backplane::InputTensor {
        name: "x",
        info: &input_info,
        data: &x,
    }];
    let bytes = |out: Vec<backplane::OwnedTensor>| -> Vec<Vec<u8>> {
        out.into_iter().map(|t| t.data).collect()
    };
    let first = bytes(session.run_alloc(&input).unwrap());
    let trips = |rt: &Runtime| -> Vec<(String, u64)> {
        rt.registry()
            .backends()
            .iter()
            .filter_map(|b| b.remote().map(|r| (b.id().to_owned(), r.round_trips())))
            .collect()
    };
    let before = trips(&rt);
    let second = bytes(session.run_alloc(&input).unwrap());
    let per_run = trips(&rt)
        .into_iter()
        .zip(before)
        .map(|((id, after), (_, before))| (id, after - before))
        .collect();
    assert_eq!(first, second);
    (first.concat(), per_run)
}

/// Contiguous runs of layers on `backend` in the optimised network, other than Input,
/// Output and Constant layers: the segments one inference sends it.
fn segments_of(rt: &Runtime, backend: &str) -> u64 {
    let (model, shape, _) = paddleocr();
    let import = backplane::onnx::ImportOptions {
        input_shapes: [("x".to_owned(), shape)].into(),
        ..Default::default()
    };
    let net = backplane::onnx::import_file(&model, &import).unwrap();
    let optimized = rt
        .optimize(&net, &["CpuFast", "CpuRef"], &paddleocr_optimizer_options())
        .unwrap();
    let mut runs = 0;
    let mut inside = false;
    for (l, a) in optimized
        .network()
        .layers()
        .iter()
        .zip(optimized.assignments())
    {
        use backplane_api::LayerKind::{Constant, Input, Output};
        if matches!(l.kind(), Input | Output | Constant) {
            continue;
        }
        let here = a.backend == backend;
        runs += u64::from(here && !inside);
        inside = here;
    }
    runs
}

/// CpuFast and CpuRef out of process give PaddleOCR's output bit for bit as in process, and
/// one inference costs one round trip per segment a backend runs (several each: see
/// [`paddleocr_optimizer_options`]).
#[test]
fn paddleocr_out_of_process_is_bit_identical() {
    let dir = PluginDir::new();
    dir.copy(&cpufast_plugin(), "Acme_CpuFast_backend.so");
    let in_process =
        Runtime::with_path_list(CreationOptions::default(), PathSource::Option, dir.as_str());
    let (expected, none) = run_paddleocr(in_process);
    assert!(none.is_empty());
    for ids in [&["CpuFast"][..], &["CpuRef"], &["CpuFast", "CpuRef"]] {
        let rt = Runtime::with_path_list(
            out_of_process(ids, Duration::from_secs(60)),
            PathSource::Option,
            dir.as_str(),
        );
        let segments: Vec<(String, u64)> = ids
            .iter()
            .map(|id| ((*id).to_owned(), segments_of(&rt, id)))
            .collect();
        let (got, trips) = run_paddleocr(rt);
        assert!(got == expected, "{ids:?}: outputs differ from in-process");
        let mut trips = trips;
        trips.sort();
        let mut segments = segments;
        segments.sort();
        assert_eq!(trips, segments, "{ids:?}: round trips per inference");
        assert!(
            segments.iter().all(|(_, n)| *n > 1),
            "{ids:?}: {segments:?}"
        );
    }
}

/// The server keeps no descriptor of its parent's and no environment but logging, the library
/// path and what a device driver needs (`PATH`, `HOME`, `TMPDIR`, the OpenCL loader's and
/// `POCL_*`/`BACKPLANE_*` variables): its descriptors are its socket, its output pipe and the
/// network's tensor memory.
#[test]
fn the_server_inherits_nothing() {
    let rt = Runtime::with_path_list(
        out_of_process(&["CpuRef"], Duration::from_secs(60)),
        PathSource::Option,
        "",
    );
    let pid = rt.report().backends[0].out_of_process_pid.unwrap();
    let net = chain(&[2, 3], &[("relu", ActivationFunction::ReLU)]);
    let optimized = rt
        .optimize(&net, &["CpuRef"], &OptimizerOptions::default())
        .unwrap();
    let id = rt.load_network(&optimized).unwrap();
    let info = f32t(&[2, 3]);
    assert_eq!(
        run_single(&rt, id, &info, &[1.0, -1.0, 2.0, -2.0, 0.5, 3.0], &info),
        [1.0, 0.0, 2.0, 0.0, 0.5, 3.0]
    );
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    for var in environ.split(|&b| b == 0).filter(|v| !v.is_empty()) {
        let name = String::from_utf8_lossy(var.split(|&b| b == b'=').next().unwrap());
        // Logging, the library path, and what a device driver needs (issue 29); never
        // DYNAMIC_BACKEND_PATHS or anything else of the host's.
        let kept = [
            "RUST_LOG",
            "LD_LIBRARY_PATH",
            "PATH",
            "HOME",
            "TMPDIR",
            "OCL_ICD_VENDORS",
            "OCL_ICD_FILENAMES",
        ];
        assert!(
            kept.contains(&name.as_ref())
                || name.starts_with("POCL_")
                || name.starts_with("BACKPLANE_"),
            "the server's environment has {name}"
        );
    }
    let mut kinds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .map(|e| {
            let target = std::fs::read_link(e.unwrap().path()).unwrap();
            let t = target.to_string_lossy();
            t.split(':').next().unwrap().to_owned()
        })
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        ["/memfd", "pipe", "pipe", "socket", "socket"],
        "the server's descriptors"
    );
    rt.unload_network(id).unwrap();
    drop(rt);
    assert!(!process_exists(pid), "server {pid} outlived its runtime");
}

/// A server dies with its parent: a `backplane bench` waiting on a server stuck in `execute`
/// (not reading its socket, so only the death signal can end it) is killed, and the server
/// goes too.
#[test]
fn the_server_dies_with_its_parent() {
    let (model, _, _) = paddleocr();
    let input =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/models/paddleocr_cls/input.npy");
    let dir = PluginDir::new();
    dir.add("exec-hangs", "Test_ExecHang_backend.so");
    let mut cli = Command::new(backplane_bin())
        .args(["bench", model.to_str().unwrap(), "--input"])
        .arg(format!("x={}", input.display()))
        .args(["--path", dir.as_str(), "--backends", "ExecHang,CpuRef"])
        .args(["--out-of-process", "ExecHang", "--call-timeout", "600"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let parent = cli.id();
    // The server's stderr reaches the CLI's: wait for the plugin to say it hangs.
    let (hung, hanging) = std::sync::mpsc::channel();
    let stderr = cli.stderr.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines() {
            if line.is_ok_and(|l| l.contains("ExecHang: execute call 3: sleeping forever")) {
                let _ = hung.send(());
            }
        }
    });
    hanging
        .recv_timeout(Duration::from_secs(60))
        .expect("the plugin reached its hang");
    let children_of = |parent: u32| -> Vec<u32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|s| {
                        let after = s.rsplit_once(')')?.1;
                        after.split_whitespace().nth(1)?.parse::<u32>().ok()
                    })
                    == Some(parent)
            })
            .collect()
    };
    let mut server = None;
    for _ in 0..600 {
        std::thread::sleep(Duration::from_millis(50));
        server = children_of(parent).into_iter().find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).any(|arg| arg == b"serve"))
        });
        if server.is_some() {
            break;
        }
    }
    let server = server.expect("the bench started its server");
    cli.kill().unwrap();
    cli.wait().unwrap();
    let mut gone = false;
    for _ in 0..100 {
        // Reaped by init once it died: gone from /proc, or a zombie no more ours.
        if !process_exists(server)
            || std::fs::read_to_string(format!("/proc/{server}/stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, a)| a.trim_start().starts_with('Z'))
            })
        {
            gone = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(gone, "server {server} outlived its parent {parent}");
}

/// `backplane run MODEL --out-of-process CpuFast` writes the same output file, byte for
/// byte, as the run in process; `backends --json` gives the server's pid.
#[test]
fn cli_run_out_of_process_writes_the_same_output() {
    let (model, _, _) = paddleocr();
    let input = format!("x={}", model.with_file_name("input.npy").to_str().unwrap());
    let dir = PluginDir::new();
    dir.copy(&cpufast_plugin(), "Acme_CpuFast_backend.so");
    let outputs: Vec<Vec<u8>> = [&[][..], &["--out-of-process", "CpuFast"]]
        .iter()
        .map(|extra| {
            let out = tempfile::tempdir().unwrap();
            let mut args = vec!["run", model.to_str().unwrap(), "--input", &input];
            args.extend(["--path", dir.as_str(), "--output-dir"]);
            args.push(out.path().to_str().unwrap());
            args.extend_from_slice(extra);
            let (ok, stdout, stderr) = cli(&args);
            assert!(ok, "{args:?}: {stderr}");
            assert!(stdout.contains("[\"CpuRef\", \"CpuFast\"]"), "{stdout}");
            let file = std::fs::read_dir(out.path())
                .unwrap()
                .next()
                .unwrap()
                .unwrap();
            std::fs::read(file.path()).unwrap()
        })
        .collect();
    assert!(outputs[0] == outputs[1], "the output files differ");
    let (ok, json, _) = cli(&[
        "backends",
        "--json",
        "--path",
        dir.as_str(),
        "--out-of-process",
        "CpuFast",
    ]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let backends = v["backends"].as_array().unwrap();
    assert_eq!(backends[0]["id"], "CpuRef");
    assert_eq!(backends[0]["out_of_process_pid"], serde_json::Value::Null);
    assert_eq!(backends[1]["id"], "CpuFast");
    assert!(backends[1]["out_of_process_pid"].as_u64().is_some());
}

/// `backplane bench` with a plugin that segfaults on its third `execute`: the fault is
/// reported, the network is optimised again without the plugin, the bench finishes on CpuRef
/// and the command exits with status 0.
#[test]
fn cli_bench_survives_a_segfaulting_backend() {
    let (model, _, _) = paddleocr();
    let input = format!("x={}", model.with_file_name("input.npy").to_str().unwrap());
    let dir = PluginDir::new();
    dir.add("exec-segfaults", "Test_ExecSegv_backend.so");
    let (ok, stdout, stderr) = cli(&[
        "bench",
        model.to_str().unwrap(),
        "--input",
        &input,
        "--path",
        dir.as_str(),
        "--backends",
        "ExecSegv,CpuRef",
        "--out-of-process",
        "ExecSegv",
        "--iterations",
        "3",
        "--warmup",
        "1",
    ]);
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("backend ExecSegv: execute failed: the out-of-process server (pid ")
            && stderr.contains(") was killed by signal 11 (SIGSEGV) during execute"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "warning: backend ExecSegv faulted; optimising the network again without it and running once more"
        ),
        "{stderr}"
    );
    assert!(
        stdout.contains("3 iterations after 1 warm-up: median"),
        "{stdout}"
    );
}

/// A plugin that kills or hangs its server while it loads is rejected as `crashed`, with the
/// signal, status or deadline and the end of its stderr; the valid plugin beside them
/// registers out of process too. (The hanging one gets a runtime of its own with a 1 s start
/// deadline; the others keep the default, so that a slow machine cannot fail a valid start.)
#[test]
fn a_server_that_dies_while_loading_is_crashed() {
    let dies = [
        (
            "crash-segfaults",
            "SegfaultId",
            "was killed by signal 11 (SIGSEGV) during load",
        ),
        (
            "factory-aborts",
            "AbortFactory",
            "was killed by signal 6 (SIGABRT) during load",
        ),
        ("ctor-exits", "CtorExit", "exited with status 0 during load"),
    ];
    let hangs = [(
        "factory-hangs",
        "HangFactory",
        "did not answer within 1.0 s and was killed during load",
    )];
    for (cases, start_timeout, valid) in [
        (&dies[..], OutOfProcess::DEFAULT_START_TIMEOUT, true),
        (&hangs[..], Duration::from_secs(1), false),
    ] {
        let dir = PluginDir::new();
        let mut ids: Vec<&str> = Vec::new();
        for (crate_name, id, _) in cases {
            dir.add(crate_name, &format!("Test_{id}_backend.so"));
            ids.push(id);
        }
        if valid {
            dir.add("valid-alpha", "Test_TestAlpha_backend.so");
            ids.push("TestAlpha");
        }
        let mut options = out_of_process(&ids, Duration::from_secs(60));
        if let Some(oop) = options.out_of_process.as_mut() {
            oop.start_timeout = start_timeout;
        }
        let rt = Runtime::with_path_list(options, PathSource::Option, dir.as_str());
        for (_, id, what) in cases {
            let row = crate::fixtures::candidate(&rt, &format!("Test_{id}_backend.so"));
            assert_eq!(
                row.reason,
                Some(backplane::ReasonCode::Crashed),
                "{id}: {row:?}"
            );
            assert!(
                row.message.starts_with("the out-of-process server (pid ")
                    && row.message.contains(what),
                "{id}: {}",
                row.message
            );
        }
        if valid {
            crate::fixtures::assert_registered(&rt, "Test_TestAlpha_backend.so", "TestAlpha");
            assert!(rt.report().backends[1].out_of_process_pid.is_some());
        }
    }
}
