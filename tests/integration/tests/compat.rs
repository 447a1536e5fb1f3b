//! The Backend API's version rule across versions and compilers (DESIGN §3.5): plugins built
//! against the frozen Backend API 1.0 (`tests/compat/`: `OldAlpha`, `OldFull`), the frozen 1.1
//! (`tests/compat-1.1/`: `NewOptions`), the frozen 1.2 (`tests/compat-1.2/`: `OldNpu`) and the
//! frozen 1.3 (`tests/compat-1.3/`: `OldDevice`) and the frozen 1.4 with its kit
//! (`tests/compat-1.4/`: `OldPrepared`), all built by Debian's rustc
//! (`scripts/compat.sh`, which `scripts/test.sh` runs first), load in this host, run real
//! networks beside CpuRef, and are never handed anything a minor after their own added (1.1's
//! layers, 1.2's quantized tensors, 1.3's device memory, 1.4's prepared workloads, 1.5's data
//! types); the 1.4 plugin restores its prepared workload from a compiled network; the 1.2 plugin is handed quantized
//! tensors with their parameters and computes onnxruntime's bytes, and the 1.3 plugin computes
//! in memory of its own, the host copying across each of its boundaries.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use backplane::{
    CreationOptions, ExecuteError, InputTensor, Network, NetworkBuilder, OptimizeError,
    OptimizerOptions, OutputTensor, Runtime, graph::optimizer::Refusal, plugins::paths::PathSource,
};
use backplane_api::{
    BinaryOperation, ConstTensor, DataType, LayerDescriptor, Quantization, TensorInfo,
    UnaryOperation, ffi::HostAllocator,
};

use crate::fixtures::{
    PluginDir, activation, backplane_bin, bytes, capture_logs, f32t, floats, lcg, run_single,
    target_dir,
};

/// A plugin built by `scripts/compat.sh`: `target/<workspace>/debug/lib<crate>.so`.
fn debian_built(workspace: &str, krate: &str) -> PathBuf {
    let p = target_dir()
        .parent()
        .expect("target/")
        .join(workspace)
        .join("debug")
        .join(format!("lib{krate}.so"));
    assert!(
        p.is_file(),
        "{} is missing: run scripts/compat.sh (scripts/test.sh does)",
        p.display()
    );
    p
}

fn old_alpha() -> PathBuf {
    debian_built("compat", "bp_compat_old_alpha")
}

fn old_full() -> PathBuf {
    debian_built("compat", "bp_compat_old_full")
}

fn new_options() -> PathBuf {
    debian_built("compat-1.1", "bp_compat_new_options")
}

fn old_npu() -> PathBuf {
    debian_built("compat-1.2", "bp_compat_int8_npu")
}

fn old_device() -> PathBuf {
    debian_built("compat-1.3", "bp_compat_old_device")
}

fn old_prepared() -> PathBuf {
    debian_built("compat-1.4", "bp_compat_old_prepared")
}

/// The `rustc version …` strings of a file's `.comment` section (each compiler that built a
/// part of it leaves one).
fn rustc_versions(file: &Path) -> BTreeSet<String> {
    let data = std::fs::read(file).unwrap();
    let needle = b"rustc version ";
    let mut found = BTreeSet::new();
    let mut i = 0;
    while let Some(at) = data[i..].windows(needle.len()).position(|w| w == needle) {
        let start = i + at;
        let end = data[start..]
            .iter()
            .position(|&b| b == 0)
            .map_or(data.len(), |n| start + n);
        found.insert(String::from_utf8_lossy(&data[start..end]).into_owned());
        i = end;
    }
    found
}

/// The six plugins under their conventional names, with CpuRef built in.
fn runtime() -> (PluginDir, Runtime) {
    let dir = PluginDir::new();
    dir.copy(&old_alpha(), "Old_OldAlpha_backend.so");
    dir.copy(&old_full(), "Old_OldFull_backend.so");
    dir.copy(&new_options(), "New_NewOptions_backend.so");
    dir.copy(&old_npu(), "Compat_OldNpu_backend.so");
    dir.copy(&old_device(), "Compat_OldDevice_backend.so");
    dir.copy(&old_prepared(), "Compat_OldPrepared_backend.so");
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::Option, dir.as_str());
    (dir, rt)
}

/// Runs `optimized`'s network once: inputs `(name, shape, values)`, one output `y` of
/// `out_shape`.
fn run_once(
    rt: &Runtime,
    optimized: &backplane::OptimizedNetwork,
    inputs: &[(&str, &[u32], &[f32])],
    out_shape: &[u32],
) -> Vec<f32> {
    let id = rt.load_network(optimized).unwrap();
    let infos: Vec<_> = inputs.iter().map(|(_, s, _)| f32t(s)).collect();
    let data: Vec<Vec<u8>> = inputs.iter().map(|(_, _, v)| bytes(v)).collect();
    let feeds: Vec<InputTensor<'_>> = inputs
        .iter()
        .zip(&infos)
        .zip(&data)
        .map(|(((name, _, _), info), data)| InputTensor { name, info, data })
        .collect();
    let out_info = f32t(out_shape);
    let mut out = vec![0u8; out_info.num_bytes().unwrap()];
    rt.enqueue(
        id,
        &feeds,
        &mut [OutputTensor {
            name: "y",
            info: &out_info,
            data: &mut out,
        }],
    )
    .unwrap();
    // OldFull refuses the first unload of each network; the second goes through.
    if rt.unload_network(id).is_err() {
        rt.unload_network(id).unwrap();
    }
    floats(&out)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn the_plugins_were_built_by_another_compiler() {
    let host = rustc_versions(&std::env::current_exe().unwrap());
    assert!(!host.is_empty(), "no rustc version in the test binary");
    for plugin in [
        old_alpha(),
        old_full(),
        new_options(),
        old_npu(),
        old_device(),
        old_prepared(),
    ] {
        let built_by = rustc_versions(&plugin);
        assert!(!built_by.is_empty(), "{}", plugin.display());
        assert!(
            built_by.is_disjoint(&host),
            "{} was built by {built_by:?}, the host by {host:?}",
            plugin.display()
        );
    }
}

#[test]
fn frozen_plugins_register_as_1_0_beside_1_1_to_1_4() {
    let (_dir, rt) = runtime();
    let versions: Vec<(String, String)> = rt
        .report()
        .backends
        .iter()
        .map(|b| (b.id.clone(), b.version.clone()))
        .collect();
    let expect = |id: &str, v: &str| (id.to_owned(), v.to_owned());
    // CpuRef built in, then the plugins in file-name order (Compat_, New_, Old_).
    assert_eq!(
        versions,
        vec![
            expect("CpuRef", "1.5"),
            expect("OldDevice", "1.3"),
            expect("OldNpu", "1.2"),
            expect("OldPrepared", "1.4"),
            expect("NewOptions", "1.1"),
            expect("OldAlpha", "1.0"),
            expect("OldFull", "1.0"),
        ]
    );
    let caps = rt.registry().capabilities("OldFull").unwrap();
    assert!(caps.is_enabled("OldFullCapability") && caps.is_enabled("HostMemory"));
    assert!(
        rt.registry()
            .capabilities("OldNpu")
            .unwrap()
            .is_enabled("HostMemory")
    );
    // A 1.3 plugin that declares DeviceMemory (and not HostMemory) computes in its own memory.
    let caps = rt.registry().capabilities("OldDevice").unwrap();
    assert!(caps.is_enabled("DeviceMemory") && !caps.is_enabled("HostMemory"));
    assert!(rt.registry().get("OldDevice").unwrap().is_device());
    let takes = |id: &str| rt.registry().get(id).unwrap().instance().takes_options();
    assert_eq!(
        (
            takes("OldAlpha"),
            takes("OldFull"),
            takes("NewOptions"),
            takes("OldNpu"),
            takes("OldDevice"),
            takes("CpuRef")
        ),
        (false, false, true, true, true, true)
    );
    // The table shows each backend's API version.
    let table = rt.report().to_table();
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("  OldAlpha") && l.contains(" 1.0 ")),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("  OldNpu") && l.contains(" 1.2 ")),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("  OldDevice") && l.contains(" 1.3 ")),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("  OldPrepared") && l.contains(" 1.4 ")),
        "{table}"
    );
}

/// `x + c → ReLU → Erf → Power(·, c) → SquaredDifference(·, x) → · × c → y`: three 1.0 layers
/// around three that Backend API 1.1 added.
fn mixed_network() -> (Network, Vec<f32>, Vec<f32>) {
    let (x, c) = (
        lcg(12, 3),
        lcg(12, 4).iter().map(|v| v + 1.5).collect::<Vec<_>>(),
    );
    let mut n = NetworkBuilder::new();
    let xi = n.add_input("x", f32t(&[3, 4])).unwrap();
    let ci = n
        .add_constant("c", ConstTensor::from_f32(&[3, 4], &c))
        .unwrap();
    let add = n
        .add_layer(
            "add",
            LayerDescriptor::ElementwiseBinary(BinaryOperation::Add),
            &[xi, ci],
        )
        .unwrap();
    let relu = n
        .add_layer(
            "relu",
            activation(backplane_api::ActivationFunction::ReLU),
            &[add],
        )
        .unwrap();
    let erf = n
        .add_layer(
            "erf",
            LayerDescriptor::ElementwiseUnary(UnaryOperation::Erf),
            &[relu],
        )
        .unwrap();
    let pow = n
        .add_layer(
            "pow",
            LayerDescriptor::ElementwiseBinary(BinaryOperation::Power),
            &[erf, ci],
        )
        .unwrap();
    let sq = n
        .add_layer(
            "sqdiff",
            LayerDescriptor::ElementwiseBinary(BinaryOperation::SquaredDifference),
            &[pow, xi],
        )
        .unwrap();
    let mul = n
        .add_layer(
            "mul",
            LayerDescriptor::ElementwiseBinary(BinaryOperation::Mul),
            &[sq, ci],
        )
        .unwrap();
    n.add_output("y", mul).unwrap();
    (n.build().unwrap(), x, c)
}

#[test]
fn a_1_0_plugin_runs_its_layers_and_is_never_handed_1_1_ones() {
    let (_dir, rt) = runtime();
    let (network, x, c) = mixed_network();
    let optimized = rt
        .optimize(
            &network,
            &["OldAlpha", "CpuRef"],
            &OptimizerOptions::default(),
        )
        .unwrap();
    for (layer, backend) in [
        ("add", "OldAlpha"),
        ("relu", "OldAlpha"),
        ("erf", "CpuRef"),
        ("pow", "CpuRef"),
        ("sqdiff", "CpuRef"),
        ("mul", "OldAlpha"),
    ] {
        assert_eq!(optimized.backend_of(layer), Some(backend), "{layer}");
    }
    // The host's own refusal, recorded for each 1.1 layer.
    let layers = optimized.network().layers();
    for (layer, what) in [
        ("erf", "Erf"),
        ("pow", "Power"),
        ("sqdiff", "SquaredDifference"),
    ] {
        let i = layers.iter().position(|l| l.name == layer).unwrap();
        assert_eq!(
            optimized.assignments()[i].refusals,
            vec![Refusal {
                backend: "OldAlpha".into(),
                reason: format!("OldAlpha implements Backend API 1.0; {what} needs 1.1"),
            }],
            "{layer}"
        );
    }
    assert!(
        optimized
            .explain()
            .contains("refused by OldAlpha: OldAlpha implements Backend API 1.0; Erf needs 1.1")
    );

    let inputs: [(&str, &[u32], &[f32]); 1] = [("x", &[3, 4], &x)];
    let mixed = run_once(&rt, &optimized, &inputs, &[3, 4]);
    let alone = rt
        .optimize(&network, &["CpuRef"], &OptimizerOptions::default())
        .unwrap();
    assert_eq!(alone.backends_used(), vec!["CpuRef"]);
    let reference = run_once(&rt, &alone, &inputs, &[3, 4]);
    assert_eq!(bits(&mixed), bits(&reference));
    // And the numbers are right: an f64 evaluation (erf from libm's f64).
    for i in 0..12 {
        let (xv, cv) = (f64::from(x[i]), f64::from(c[i]));
        let e = libm::erf((xv + cv).max(0.0));
        let want = (e.powf(cv) - xv).powi(2) * cv;
        assert!(
            (f64::from(mixed[i]) - want).abs() <= 1e-5 * (1.0 + want.abs()),
            "{i}: {} vs {want}",
            mixed[i]
        );
    }

    // Pinning a 1.1 layer to the 1.0 plugin fails with the same reason.
    let pinned = OptimizerOptions {
        pins: vec![("erf".into(), "OldAlpha".into())],
        ..OptimizerOptions::default()
    };
    match rt.optimize(&network, &["OldAlpha", "CpuRef"], &pinned) {
        Err(OptimizeError::PinFailed { reason, .. }) => {
            assert_eq!(reason, "OldAlpha implements Backend API 1.0; Erf needs 1.1")
        }
        other => panic!("{other:?}"),
    }
}

#[derive(Default)]
struct CountingAllocator(AtomicUsize);

impl HostAllocator for CountingAllocator {
    fn allocate(&self, size: usize, align: usize) -> *mut u8 {
        self.0.fetch_add(1, Ordering::SeqCst);
        let layout = std::alloc::Layout::from_size_align(size, align).unwrap();
        // SAFETY: `CustomAllocator::allocate` never asks for zero bytes.
        unsafe { std::alloc::alloc(layout) }
    }
    fn free(&self, ptr: *mut u8, size: usize, align: usize) {
        let layout = std::alloc::Layout::from_size_align(size, align).unwrap();
        // SAFETY: `ptr` came from `allocate` with this layout.
        unsafe { std::alloc::dealloc(ptr, layout) }
    }
}

#[test]
fn every_optional_part_of_a_1_0_plugin_works_through_its_1_0_entries() {
    let logs = capture_logs();
    let (_dir, rt) = runtime();
    let entry = rt.registry().get("OldFull").unwrap();
    assert!(
        entry
            .use_custom_allocator(Arc::new(CountingAllocator::default()))
            .unwrap()
    );

    let (x, k) = (lcg(8, 5), lcg(8, 6));
    let mut n = NetworkBuilder::new();
    let xi = n.add_input("x", f32t(&[2, 4])).unwrap();
    let ki = n
        .add_constant("k", ConstTensor::from_f32(&[2, 4], &k))
        .unwrap();
    let add = n
        .add_layer(
            "add",
            LayerDescriptor::ElementwiseBinary(BinaryOperation::Add),
            &[xi, ki],
        )
        .unwrap();
    let relu = n
        .add_layer(
            "relu",
            activation(backplane_api::ActivationFunction::ReLU),
            &[add],
        )
        .unwrap();
    n.add_output("y", relu).unwrap();
    let network = n.build().unwrap();

    let mut options = OptimizerOptions::default();
    options.add_backend_option("OldFull:Mode=fast").unwrap();
    let optimized = rt
        .optimize(&network, &["OldFull", "CpuRef"], &options)
        .unwrap();
    // optimize_subgraph (1.0 entry) substituted its fused layer.
    assert_eq!(optimized.backend_of("add+relu"), Some("OldFull"));
    assert_eq!(optimized.backend_of("add"), None);
    // Options reach a 1.0 plugin's context only; the runtime says so once.
    rt.optimize(&network, &["OldFull", "CpuRef"], &options)
        .unwrap();
    let warned = logs
        .lines()
        .iter()
        .filter(|l| {
            l.as_str()
                == "WARN backend OldFull implements Backend API 1.0: its options (Mode=\"fast\") \
                    were ignored by optimize_subgraph and workload-factory creation (they need \
                    1.1) and reach only its backend context"
        })
        .count();
    assert_eq!(warned, 1, "{:#?}", logs.lines());

    let id = rt.load_network(&optimized).unwrap();
    // The memory manager holds its arena while the network is loaded.
    let memory = rt.backend_memory(id).unwrap();
    let old_full = memory.iter().find(|(b, _)| b == "OldFull").unwrap();
    assert_eq!(old_full.1.as_ref().unwrap(), &Some(1024));
    let xb = bytes(&x);
    let info = f32t(&[2, 4]);
    let mut out = vec![0u8; 32];
    rt.enqueue(
        id,
        &[InputTensor {
            name: "x",
            info: &info,
            data: &xb,
        }],
        &mut [OutputTensor {
            name: "y",
            info: &info,
            data: &mut out,
        }],
    )
    .unwrap();
    let want: Vec<f32> = x.iter().zip(&k).map(|(a, b)| (a + b).max(0.0)).collect();
    assert_eq!(bits(&floats(&out)), bits(&want));
    // The context (1.0 entry, created with the options) refuses the first unload.
    match rt.unload_network(id) {
        Err(ExecuteError::UnloadRefused {
            backend, reason, ..
        }) => {
            assert_eq!(backend, "OldFull");
            assert_eq!(
                reason.as_str(),
                format!("OldFull keeps network {id} loaded once (options: [Mode=\"fast\"])")
            );
        }
        other => panic!("{other:?}"),
    }
    rt.unload_network(id).unwrap();
}

#[test]
fn a_1_1_plugin_built_by_another_compiler_receives_its_options() {
    let (_dir, rt) = runtime();
    let (x, z) = (lcg(6, 7), lcg(6, 8));
    let mut n = NetworkBuilder::new();
    let xi = n.add_input("x", f32t(&[2, 3])).unwrap();
    let zi = n.add_input("z", f32t(&[2, 3])).unwrap();
    let add = n
        .add_layer(
            "add",
            LayerDescriptor::ElementwiseBinary(BinaryOperation::Add),
            &[xi, zi],
        )
        .unwrap();
    let neg = n
        .add_layer(
            "neg",
            LayerDescriptor::ElementwiseUnary(UnaryOperation::Neg),
            &[add],
        )
        .unwrap();
    n.add_output("y", neg).unwrap();
    let network = n.build().unwrap();
    let inputs: [(&str, &[u32], &[f32]); 2] = [("x", &[2, 3], &x), ("z", &[2, 3], &z)];
    let prefs = ["NewOptions", "CpuRef"];

    // No options: NewOptions runs both layers (Neg is a 1.1 layer), as CpuRef would.
    let plain = rt
        .optimize(&network, &prefs, &OptimizerOptions::default())
        .unwrap();
    assert_eq!(
        (plain.backend_of("add"), plain.backend_of("neg")),
        (Some("NewOptions"), Some("NewOptions"))
    );
    let want: Vec<f32> = x.iter().zip(&z).map(|(a, b)| -(a + b)).collect();
    assert_eq!(bits(&run_once(&rt, &plain, &inputs, &[2, 3])), bits(&want));

    // Offset reaches create_workload_factory_with_options: every Add adds it.
    let mut offset = OptimizerOptions::default();
    offset.add_backend_option("NewOptions:Offset=0.5").unwrap();
    let shifted = rt.optimize(&network, &prefs, &offset).unwrap();
    assert_eq!(
        shifted.backend_options("NewOptions").get("Offset"),
        Some(&backplane_api::Value::Float(0.5))
    );
    let want: Vec<f32> = x.iter().zip(&z).map(|(a, b)| -(a + b + 0.5)).collect();
    assert_eq!(
        bits(&run_once(&rt, &shifted, &inputs, &[2, 3])),
        bits(&want)
    );

    // Decline reaches optimize_subgraph_with_options: its layers go to CpuRef.
    let mut decline = OptimizerOptions::default();
    decline
        .add_backend_option("NewOptions:Decline=true")
        .unwrap();
    let declined = rt.optimize(&network, &prefs, &decline).unwrap();
    assert_eq!(
        (declined.backend_of("add"), declined.backend_of("neg")),
        (Some("CpuRef"), Some("CpuRef"))
    );

    // An option for a backend that is not preferred is noted, not silently dropped.
    let mut stray = OptimizerOptions::default();
    stray.add_backend_option("CpuFsat:Threads=2").unwrap();
    let noted = rt.optimize(&network, &prefs, &stray).unwrap();
    assert_eq!(
        noted.notes(),
        ["options for CpuFsat (Threads=2) ignored: CpuFsat is not a usable preferred backend"]
    );
    assert_eq!(
        OptimizerOptions::default().add_backend_option("CpuFast-Threads=2"),
        Err("backend option \"CpuFast-Threads=2\" is not ID:KEY=VALUE".to_owned())
    );
}

#[test]
fn inspect_shows_a_1_0_plugin_and_its_gated_cells() {
    let report = backplane::plugins::inspect::inspect(&old_alpha());
    assert_eq!(report.version.as_deref(), Some("1.0"));
    assert_eq!(report.host_version, "1.5");
    assert!(report.compatible);
    let cell = |layer: &str| {
        report
            .layer_support
            .iter()
            .find(|c| c.layer == layer && c.data_type == "Float32")
            .unwrap()
    };
    let unary = cell("ElementwiseUnary");
    assert!(unary.gated && !unary.supported);
    assert_eq!(
        unary.reason.as_deref(),
        Some("OldAlpha implements Backend API 1.0; Abs needs 1.1")
    );
    let binary = cell("ElementwiseBinary");
    assert!(!binary.gated && binary.supported);
    // A type Backend API 1.5 appended is never put to a 1.0 plugin: the host answers.
    let int64 = report
        .layer_support
        .iter()
        .find(|c| c.layer == "ElementwiseBinary" && c.data_type == "Signed64")
        .unwrap();
    assert!(int64.gated && !int64.supported);
    assert_eq!(
        int64.reason.as_deref(),
        Some("OldAlpha implements Backend API 1.0; Signed64 tensors need 1.5")
    );
    let gated: Vec<&str> = report
        .layer_support
        .iter()
        .filter(|c| c.gated && c.data_type == "Float32")
        .map(|c| c.layer.as_str())
        .collect();
    assert_eq!(
        gated,
        [
            "ElementwiseUnary",
            "Normalization",
            "BatchMatMul",
            "Slice",
            "Resize",
            "TransposeConvolution2d",
            "Gather",
            "Reduce",
            "ArgMinMax",
            "LayerNormalization",
            "InstanceNormalization",
            "Cast",
            "Comparison",
            "Where",
            "BroadcastTo",
            "DilatedPooling2d",
            // Backend API 1.2: every cell of these kinds reads or writes a quantized tensor.
            "Quantize",
            "Dequantize",
            "Requantize",
            // Backend API 1.5.
            "NonZero",
            "ScatterElements",
            "ScatterNd",
            "NonMaxSuppression",
            "RoiAlign",
            "BitCast",
            "Determinant",
            "Unique",
            "DeformableConvolution2d",
            "Lstm",
        ]
    );

    let out = std::process::Command::new(backplane_bin())
        .args(["inspect", old_alpha().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(&format!(
            "built for:   Backend API 1.0 (host {}): compatible",
            backplane_api::ApiVersion::CURRENT
        )),
        "{text}"
    );
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("ElementwiseUnary "))
        .unwrap();
    assert!(
        row.split_whitespace().skip(1).all(|c| c == "gated"),
        "{row}"
    );
}

/// 1.2's quantized tensors never reach a 1.0 or 1.1 plugin: the host refuses for each of them,
/// naming both versions, and CpuRef runs the quantized layers; a float layer of the same
/// network still runs on the 1.1 plugin.
#[test]
fn quantized_tensors_never_reach_a_1_0_or_1_1_plugin() {
    let (_dir, rt) = runtime();
    let (x, z) = (lcg(6, 11), lcg(6, 12));
    let q = |scale| Quantization::per_tensor(scale, 128);
    let mut n = NetworkBuilder::new();
    let xi = n.add_input("x", f32t(&[2, 3])).unwrap();
    let zi = n.add_input("z", f32t(&[2, 3])).unwrap();
    let quantize = LayerDescriptor::Quantize(DataType::QAsymmU8);
    let qx = n
        .add_quantized_layer("qx", quantize.clone(), &[xi], q(0.05))
        .unwrap();
    let qz = n
        .add_quantized_layer("qz", quantize, &[zi], q(0.05))
        .unwrap();
    let add = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
    let qadd = n
        .add_quantized_layer("qadd", add.clone(), &[qx, qz], q(0.1))
        .unwrap();
    let y = n
        .add_layer("dequantize", LayerDescriptor::Dequantize, &[qadd])
        .unwrap();
    let out = n.add_layer("add", add, &[y, xi]).unwrap();
    n.add_output("y", out).unwrap();
    let network = n.build().unwrap();
    let optimized = rt
        .optimize(
            &network,
            &["NewOptions", "OldAlpha", "CpuRef"],
            &OptimizerOptions::default(),
        )
        .unwrap();
    assert_eq!(optimized.backend_of("add"), Some("NewOptions"));
    let layers = optimized.network().layers();
    let refusals = |layer: &str| {
        let i = layers.iter().position(|l| l.name == layer).unwrap();
        assert_eq!(optimized.backend_of(layer), Some("CpuRef"), "{layer}");
        optimized.assignments()[i].refusals.clone()
    };
    let both = |what: &str| {
        vec![
            Refusal {
                backend: "NewOptions".into(),
                reason: format!("NewOptions implements Backend API 1.1; {what} 1.2"),
            },
            Refusal {
                backend: "OldAlpha".into(),
                reason: format!("OldAlpha implements Backend API 1.0; {what} 1.2"),
            },
        ]
    };
    assert_eq!(refusals("qx"), both("Quantize needs"));
    assert_eq!(refusals("qadd"), both("quantized tensors (QAsymmU8) need"));
    assert_eq!(refusals("dequantize"), both("Dequantize needs"));

    let inputs: [(&str, &[u32], &[f32]); 2] = [("x", &[2, 3], &x), ("z", &[2, 3], &z)];
    let got = run_once(&rt, &optimized, &inputs, &[2, 3]);
    // Each input is within half a step (0.025) of its quantized value and the sum within half
    // of its own (0.05): the dequantized sum is within 0.1 of x + z.
    for i in 0..6 {
        let want = f64::from(x[i]) + f64::from(z[i]) + f64::from(x[i]);
        assert!(
            (f64::from(got[i]) - want).abs() <= 0.1 + 1e-6,
            "{i}: {} vs {want}",
            got[i]
        );
    }
}

/// A 1.2 plugin built by another compiler is handed quantized tensors with their parameters:
/// `OldNpu` runs a `QAsymmU8` `Add` (onnxruntime's `QLinearAdd` arithmetic) and a Float32
/// ReLU, CpuRef the `Dequantize` between them, and both outputs are CpuRef's own bytes.
#[test]
fn a_1_2_plugin_built_by_another_compiler_runs_a_quantized_add() {
    let (_dir, rt) = runtime();
    let (qa, qb, qc) = (
        Quantization::per_tensor(0.05, 128),
        Quantization::per_tensor(0.03, 120),
        Quantization::per_tensor(0.06, 100),
    );
    let info = |q: &Quantization| {
        TensorInfo::new(&[4, 64], DataType::QAsymmU8).with_quantization(q.clone())
    };
    let (a_info, b_info, q_info) = (info(&qa), info(&qb), info(&qc));
    // Every byte for `a`, a permutation of them for `b`.
    let a: Vec<u8> = (0..=255).collect();
    let b: Vec<u8> = (0..256u32).map(|i| ((i * 97 + 13) % 256) as u8).collect();
    let mut n = NetworkBuilder::new();
    let ai = n.add_input("a", a_info.clone()).unwrap();
    let bi = n.add_input("b", b_info.clone()).unwrap();
    let qadd = n
        .add_quantized_layer(
            "qadd",
            LayerDescriptor::ElementwiseBinary(BinaryOperation::Add),
            &[ai, bi],
            qc.clone(),
        )
        .unwrap();
    let dequantize = n
        .add_layer("dequantize", LayerDescriptor::Dequantize, &[qadd])
        .unwrap();
    let relu = n
        .add_layer(
            "relu",
            activation(backplane_api::ActivationFunction::ReLU),
            &[dequantize],
        )
        .unwrap();
    n.add_output("q", qadd).unwrap();
    n.add_output("y", relu).unwrap();
    let network = n.build().unwrap();

    let optimized = rt
        .optimize(
            &network,
            &["OldNpu", "CpuRef"],
            &OptimizerOptions::default(),
        )
        .unwrap();
    for (layer, backend) in [
        ("qadd", "OldNpu"),
        ("dequantize", "CpuRef"),
        ("relu", "OldNpu"),
    ] {
        assert_eq!(optimized.backend_of(layer), Some(backend), "{layer}");
    }
    // The plugin's own refusal, not the host's: the host hands a 1.2 plugin 1.2 layers.
    let layers = optimized.network().layers();
    let i = layers.iter().position(|l| l.name == "dequantize").unwrap();
    assert_eq!(
        optimized.assignments()[i].refusals,
        vec![Refusal {
            backend: "OldNpu".into(),
            reason: "OldNpu: runs only a QAsymmU8 Add and a Float32 ReLU, not this Dequantize"
                .into(),
        }]
    );

    let y_info = f32t(&[4, 64]);
    let run = |optimized: &backplane::OptimizedNetwork| {
        let id = rt.load_network(optimized).unwrap();
        let (mut q, mut y) = (vec![0u8; 256], vec![0u8; 256 * 4]);
        rt.enqueue(
            id,
            &[
                InputTensor {
                    name: "a",
                    info: &a_info,
                    data: &a,
                },
                InputTensor {
                    name: "b",
                    info: &b_info,
                    data: &b,
                },
            ],
            &mut [
                OutputTensor {
                    name: "q",
                    info: &q_info,
                    data: &mut q,
                },
                OutputTensor {
                    name: "y",
                    info: &y_info,
                    data: &mut y,
                },
            ],
        )
        .unwrap();
        rt.unload_network(id).unwrap();
        (q, y)
    };
    let (q, y) = run(&optimized);
    // The oracle: CpuRef alone, whose quantized Add is onnxruntime's arithmetic.
    let alone = rt
        .optimize(&network, &["CpuRef"], &OptimizerOptions::default())
        .unwrap();
    assert_eq!(alone.backends_used(), vec!["CpuRef"]);
    let (q_ref, y_ref) = run(&alone);
    assert_eq!(q, q_ref);
    assert_eq!(y, y_ref);

    // The data reach both ends of the output's range, and sums where dequantizing and adding
    // literally in f32 rounds otherwise than onnxruntime's kernel: equal bytes mean the
    // kernel's arithmetic, not merely the same real sum.
    assert!(q.contains(&0) && q.contains(&255));
    let literal = |i: usize| {
        let real = (i32::from(a[i]) - qa.offset) as f32 * qa.scale
            + (i32::from(b[i]) - qb.offset) as f32 * qb.scale;
        ((real / qc.scale).round_ties_even() + qc.offset as f32).clamp(0.0, 255.0) as u8
    };
    assert!((0..256).any(|i| literal(i) != q[i]));
}

/// A 1.3 plugin built by another compiler computes in memory of its own: `OldDevice` runs
/// `x + c → ReLU` through `execute_device` on its own buffers, the optimizer puts a MemCopy at
/// each edge of its memory (the network input in, the output out; the constant reaches the
/// plugin with the workload's description and stays in host memory), the host copies across
/// each boundary once per run, and the output is CpuRef's own bits and the definition's.
#[test]
fn a_1_3_plugin_built_by_another_compiler_runs_in_its_own_memory() {
    let (_dir, rt) = runtime();
    let info = f32t(&[3, 5]);
    let c = lcg(15, 21);
    let mut n = NetworkBuilder::new();
    let xi = n.add_input("x", info.clone()).unwrap();
    let ci = n
        .add_constant("c", ConstTensor::from_f32(&[3, 5], &c))
        .unwrap();
    let add = n
        .add_layer(
            "add",
            LayerDescriptor::ElementwiseBinary(BinaryOperation::Add),
            &[xi, ci],
        )
        .unwrap();
    let relu = n
        .add_layer(
            "relu",
            activation(backplane_api::ActivationFunction::ReLU),
            &[add],
        )
        .unwrap();
    n.add_output("y", relu).unwrap();
    let network = n.build().unwrap();

    let optimized = rt
        .optimize(
            &network,
            &["OldDevice", "CpuRef"],
            &OptimizerOptions::default(),
        )
        .unwrap();
    for (layer, backend) in [
        ("x", "CpuRef"),
        ("c", "CpuRef"),
        ("add_memcopy_0", "OldDevice"),
        ("add", "OldDevice"),
        ("relu", "OldDevice"),
        ("y_memcopy_0", "OldDevice"),
        ("y", "CpuRef"),
    ] {
        assert_eq!(optimized.backend_of(layer), Some(backend), "{layer}");
    }
    // The host's refusal: a device backend holds no constant.
    let layers = optimized.network().layers();
    let i = layers.iter().position(|l| l.name == "c").unwrap();
    assert_eq!(
        optimized.assignments()[i].refusals,
        vec![Refusal {
            backend: "OldDevice".into(),
            reason: "OldDevice computes in its own memory; network inputs, outputs and \
                     constants stay in host memory"
                .into(),
        }]
    );
    // The MemCopy layers the optimizer inserted, with their boundaries: none for the constant.
    let inserted: Vec<String> = layers
        .iter()
        .zip(optimized.assignments())
        .filter_map(|(l, a)| a.boundary.as_ref().map(|b| format!("{}: {b}", l.name)))
        .collect();
    assert_eq!(
        inserted,
        [
            "add_memcopy_0: host -> OldDevice, copy",
            "y_memcopy_0: OldDevice -> host, copy",
        ]
    );

    let id = rt.load_network(&optimized).unwrap();
    let loaded = rt.network_transfers(id).unwrap();
    let boundaries: Vec<String> = loaded
        .boundaries
        .iter()
        .map(|(l, b)| format!("{l}: {b}"))
        .collect();
    assert_eq!(boundaries, inserted);
    assert_eq!((loaded.copies, loaded.imports), (0, 0));
    // Three 60-byte tensors live in the device's memory (x's copy, the sum, the ReLU), the Add
    // reading one while it writes another; the plugin's memory manager holds those buffers.
    assert!(
        (2 * 60..=3 * 60).contains(&loaded.device_bytes),
        "{}",
        loaded.device_bytes
    );
    let memory = rt.backend_memory(id).unwrap();
    let old_device = memory.iter().find(|(b, _)| b == "OldDevice").unwrap();
    assert_eq!(old_device.1.as_ref().unwrap(), &Some(loaded.device_bytes));

    let alone = rt
        .optimize(&network, &["CpuRef"], &OptimizerOptions::default())
        .unwrap();
    assert_eq!(alone.backends_used(), vec!["CpuRef"]);
    let host_id = rt.load_network(&alone).unwrap();
    assert!(rt.network_transfers(host_id).unwrap().boundaries.is_empty());
    let runs = 3;
    for seed in 1..=runs {
        let x = lcg(15, seed);
        let got = run_single(&rt, id, &info, &x, &info);
        // The oracle: the definition, computed here in f32.
        let want: Vec<f32> = x.iter().zip(&c).map(|(a, b)| (a + b).max(0.0)).collect();
        assert!(want.contains(&0.0) && want.iter().any(|&v| v > 0.0));
        assert_eq!(bits(&got), bits(&want), "seed {seed}");
        let reference = run_single(&rt, host_id, &info, &x, &info);
        assert_eq!(bits(&got), bits(&reference), "seed {seed}");
    }
    // One copy per boundary per run, and no import (OldDevice declares no HostMemoryImport).
    let after = rt.network_transfers(id).unwrap();
    assert_eq!(
        (after.copies, after.imports),
        (runs as u64 * inserted.len() as u64, 0)
    );
    // Compiled ahead of time (Backend API 1.4), a 1.3 plugin is never asked to prepare: its
    // workloads are created at load, from the constants mapped from the file.
    let bytes =
        backplane::compiled::compile(&rt, &optimized, &backplane::compiled::ModelFacts::default())
            .unwrap();
    let compiled = backplane::compiled::CompiledNetwork::from_bytes(&bytes).unwrap();
    assert_eq!(compiled.prepared_workloads(), 0);
    let bound = compiled.bind(&rt, false).unwrap();
    assert_eq!(bound.explain(), optimized.explain());
    let from_file = rt.load_network(&bound).unwrap();
    let x = lcg(15, 9);
    assert_eq!(
        bits(&run_single(&rt, from_file, &info, &x, &info)),
        bits(&run_single(&rt, host_id, &info, &x, &info))
    );
    rt.unload_network(from_file).unwrap();
    rt.unload_network(id).unwrap();
    rt.unload_network(host_id).unwrap();
}

/// A 1.4 plugin built by another compiler, with the 1.4 kit, prepares its workload ahead of
/// time and restores it from a compiled network; and a 1.5 host never hands it a type 1.5
/// appended: its Signed64 layer is refused by the host, naming both versions, and runs on
/// CpuRef.
#[test]
fn a_1_4_plugin_built_by_another_compiler_restores_its_blob_and_never_sees_1_5_types() {
    let (_dir, rt) = runtime();
    let info = f32t(&[2, 6]);
    let c = lcg(12, 41);
    let mut n = NetworkBuilder::new();
    let xi = n.add_input("x", info.clone()).unwrap();
    let ci = n
        .add_constant("c", ConstTensor::from_f32(&[2, 6], &c))
        .unwrap();
    let mul = n
        .add_layer(
            "mul",
            LayerDescriptor::ElementwiseBinary(BinaryOperation::Mul),
            &[xi, ci],
        )
        .unwrap();
    n.add_output("y", mul).unwrap();
    let network = n.build().unwrap();
    let optimized = rt
        .optimize(
            &network,
            &["OldPrepared", "CpuRef"],
            &OptimizerOptions::default(),
        )
        .unwrap();
    assert_eq!(optimized.backend_of("mul"), Some("OldPrepared"));
    let x = lcg(12, 42);
    // The definition, computed here: one f32 product per element.
    let want: Vec<f32> = x.iter().zip(&c).map(|(a, b)| a * b).collect();
    let id = rt.load_network(&optimized).unwrap();
    assert_eq!(bits(&run_single(&rt, id, &info, &x, &info)), bits(&want));
    rt.unload_network(id).unwrap();

    // Compiled: the one workload is prepared (the constant in the kit's payload format) and
    // restored from the file, with the same bits.
    let bytes =
        backplane::compiled::compile(&rt, &optimized, &backplane::compiled::ModelFacts::default())
            .unwrap();
    let compiled = backplane::compiled::CompiledNetwork::from_bytes(&bytes).unwrap();
    assert_eq!(compiled.prepared_workloads(), 1);
    let bound = compiled.bind(&rt, false).unwrap();
    let at = bound
        .network()
        .layers()
        .iter()
        .position(|l| l.name == "mul")
        .unwrap();
    assert_eq!(bound.prepared(at).map(|b| b.version), Some(1));
    let from_file = rt.load_network(&bound).unwrap();
    assert_eq!(
        bits(&run_single(&rt, from_file, &info, &x, &info)),
        bits(&want)
    );
    rt.unload_network(from_file).unwrap();

    // The same product on Signed64 (Backend API 1.5): refused for OldPrepared by the host
    // itself, before the plugin is asked, and run by CpuRef with wrap-around arithmetic.
    let i64t = TensorInfo::new(&[3], DataType::Signed64);
    let mut n = NetworkBuilder::new();
    let a = n.add_input("a", i64t.clone()).unwrap();
    let b = n.add_input("b", i64t.clone()).unwrap();
    let mul = n
        .add_layer(
            "mul",
            LayerDescriptor::ElementwiseBinary(BinaryOperation::Mul),
            &[a, b],
        )
        .unwrap();
    n.add_output("y", mul).unwrap();
    let network = n.build().unwrap();
    let optimized = rt
        .optimize(
            &network,
            &["OldPrepared", "CpuRef"],
            &OptimizerOptions::default(),
        )
        .unwrap();
    assert_eq!(optimized.backend_of("mul"), Some("CpuRef"));
    let at = optimized
        .network()
        .layers()
        .iter()
        .position(|l| l.name == "mul")
        .unwrap();
    assert_eq!(
        optimized.assignments()[at].refusals,
        vec![Refusal {
            backend: "OldPrepared".into(),
            reason: "OldPrepared implements Backend API 1.4; Signed64 tensors need 1.5".into(),
        }]
    );
    let (av, bv) = ([3i64, -4, i64::MAX], [5i64, 6, 2]);
    let id = rt.load_network(&optimized).unwrap();
    let (ab, bb): (Vec<u8>, Vec<u8>) = (
        av.iter().flat_map(|v| v.to_le_bytes()).collect(),
        bv.iter().flat_map(|v| v.to_le_bytes()).collect(),
    );
    let mut out = vec![0u8; 24];
    rt.enqueue(
        id,
        &[
            InputTensor {
                name: "a",
                info: &i64t,
                data: &ab,
            },
            InputTensor {
                name: "b",
                info: &i64t,
                data: &bb,
            },
        ],
        &mut [OutputTensor {
            name: "y",
            info: &i64t,
            data: &mut out,
        }],
    )
    .unwrap();
    let got: Vec<i64> = out
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    // i64::MAX * 2 wraps to -2 (two's complement, as ONNX's Mul).
    assert_eq!(got, [15, -24, -2]);
    rt.unload_network(id).unwrap();
}
