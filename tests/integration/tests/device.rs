//! Backend API 1.3's device tensors through a real plugin, `TestDevice`
//! (`tests/plugins/device-memory`): a backend whose tensors live in memory of its own. The
//! optimizer puts a MemCopy at every edge into or out of its memory, with the boundary and
//! how it is crossed; the host plans its buffers, copies across each boundary (constants
//! reach it with the workload's description, never its memory), fences at the end of a run,
//! and turns every failure of the device's
//! entries into an error that names the backend and the layer or size.

use backplane::{
    CreationOptions, ExecuteError, InputTensor, Network, NetworkBuilder, OptimizeError,
    OptimizerOptions, OutputTensor, Runtime, Strategy, plugins::paths::PathSource,
};
use backplane_api::{ActivationFunction, BinaryOperation, ConstTensor, LayerDescriptor};

use crate::fixtures::{PluginDir, activation, bytes, f32t, floats, lcg};

const SHAPE: [u32; 3] = [2, 3, 5];

/// `TestDevice` (as a plugin) beside the built-in CpuRef.
fn runtime() -> (PluginDir, Runtime) {
    let dir = PluginDir::new();
    dir.add("device-memory", "Test_TestDevice_backend.so");
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::Option, dir.as_str());
    assert!(
        rt.registry().is_registered("TestDevice"),
        "{:?}",
        rt.report()
    );
    (dir, rt)
}

fn the_constant() -> Vec<f32> {
    (0..30).map(|i| i as f32 * 0.25 - 3.0).collect()
}

/// `y = (relu(x) + sigmoid(relu(x) + x)) + c`: ReLU and the Adds run on TestDevice, the
/// Sigmoid on CpuRef (TestDevice refuses it), `c` is a constant.
fn network() -> Network {
    let mut n = NetworkBuilder::new();
    let x = n.add_input("x", f32t(&SHAPE)).unwrap();
    let add = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
    let relu = n
        .add_layer("relu", activation(ActivationFunction::ReLU), &[x])
        .unwrap();
    let sum = n.add_layer("sum", add.clone(), &[relu, x]).unwrap();
    let sig = n
        .add_layer("sigmoid", activation(ActivationFunction::Sigmoid), &[sum])
        .unwrap();
    let both = n.add_layer("both", add.clone(), &[relu, sig]).unwrap();
    let c = n
        .add_constant("c", ConstTensor::from_f32(&SHAPE, &the_constant()))
        .unwrap();
    let y = n.add_layer("shifted", add, &[both, c]).unwrap();
    n.add_output("y", y).unwrap();
    n.build().unwrap()
}

/// The network's definition, computed here.
fn oracle(x: &[f32]) -> Vec<f32> {
    x.iter()
        .zip(the_constant())
        .map(|(&v, c)| {
            let r = v.max(0.0);
            let s = 1.0 / (1.0 + (-(r + v)).exp());
            (r + s) + c
        })
        .collect()
}

fn run(rt: &Runtime, id: u64, x: &[f32]) -> Result<Vec<f32>, ExecuteError> {
    let info = f32t(&SHAPE);
    let xb = bytes(x);
    let mut out = vec![0u8; info.num_bytes().unwrap()];
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
    )?;
    Ok(floats(&out))
}

fn optimized(rt: &Runtime, options: &[&str]) -> backplane::OptimizedNetwork {
    let mut o = OptimizerOptions::default();
    for spec in options {
        o.add_backend_option(spec).unwrap();
    }
    rt.optimize(&network(), &["TestDevice", "CpuRef"], &o)
        .unwrap()
}

#[test]
fn each_boundary_is_one_copy_per_run_and_results_match() {
    let (_dir, rt) = runtime();
    let opt = optimized(&rt, &[]);
    for (layer, backend) in [
        ("relu", "TestDevice"),
        ("sum", "TestDevice"),
        ("sigmoid", "CpuRef"),
        ("both", "TestDevice"),
        ("shifted", "TestDevice"),
    ] {
        assert_eq!(opt.backend_of(layer), Some(backend), "{layer}");
    }
    // Inputs, outputs and constants stay in host memory, with the reason.
    assert_eq!(opt.backend_of("x"), Some("CpuRef"));
    let explain = opt.explain();
    assert!(
        explain.contains(
            "refused by TestDevice: TestDevice computes in its own memory; network inputs, \
             outputs and constants stay in host memory"
        ),
        "{explain}"
    );
    // The boundaries, in the order the network runs them.
    let summary = opt.explain_at(backplane::graph::optimizer::ExplainDetail::Summary);
    let copies: Vec<&str> = summary
        .lines()
        .filter_map(|l| l.strip_prefix("memory copy: "))
        .collect();
    assert_eq!(
        copies,
        [
            "relu_memcopy_0 (of x: host -> TestDevice, copy)",
            "sum_memcopy_1 (of x: host -> TestDevice, copy)",
            "sigmoid_memcopy_0 (of sum: TestDevice -> host, copy)",
            "both_memcopy_1 (of sigmoid: host -> TestDevice, copy)",
            "y_memcopy_0 (of shifted: TestDevice -> host, copy)",
        ],
        "{summary}"
    );
    // The constant is not copied: TestDevice has its value from the workload's description.
    assert!(!explain.contains("of c:"), "{explain}");
    let id = rt.load_network(&opt).unwrap();
    let before = rt.network_transfers(id).unwrap();
    assert_eq!(before.boundaries.len(), 5);
    assert!(
        before
            .boundaries
            .iter()
            .all(|(_, b)| b.strategy == Strategy::Copy)
    );
    assert_eq!((before.copies, before.imports), (0, 0));
    // Five tensors on the device at most at once, each 120 bytes, buffers reused by lifetime.
    assert!(
        before.device_bytes >= 2 * 120 && before.device_bytes <= 6 * 120,
        "{}",
        before.device_bytes
    );
    rt.set_profiling(id, true);
    for seed in 1..=3 {
        let x = lcg(30, seed);
        let got = run(&rt, id, &x).unwrap();
        for (g, w) in got.iter().zip(oracle(&x)) {
            assert!((g - w).abs() <= 1e-6 + 1e-6 * w.abs(), "{g} vs {w}");
        }
    }
    let after = rt.network_transfers(id).unwrap();
    assert_eq!((after.copies, after.imports), (15, 0), "5 per run");
    let profile = rt.profile(id).unwrap();
    let timed: Vec<(&str, &str)> = profile
        .iter()
        .filter(|p| p.kind == backplane_api::LayerKind::MemCopy)
        .map(|p| (p.layer.as_str(), p.backend.as_str()))
        .collect();
    assert_eq!(
        timed,
        [
            ("relu_memcopy_0", "TestDevice"),
            ("sum_memcopy_1", "TestDevice"),
            ("sigmoid_memcopy_0", "TestDevice"),
            ("both_memcopy_1", "TestDevice"),
            ("y_memcopy_0", "TestDevice"),
        ]
    );
    assert!(profile.iter().all(|p| p.runs == 3));
    rt.unload_network(id).unwrap();

    // The same network on CpuRef alone gives the same bits.
    let host = rt
        .optimize(&network(), &["CpuRef"], &OptimizerOptions::default())
        .unwrap();
    let hid = rt.load_network(&host).unwrap();
    let did = rt.load_network(&opt).unwrap();
    let x = lcg(30, 9);
    let want: Vec<u32> = run(&rt, hid, &x)
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect();
    let got: Vec<u32> = run(&rt, did, &x)
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect();
    assert_eq!(got, want);
    assert!(rt.network_transfers(hid).unwrap().boundaries.is_empty());
}

#[test]
fn a_device_backend_alone_cannot_hold_the_network_inputs() {
    let (_dir, rt) = runtime();
    let err = rt
        .optimize(&network(), &["TestDevice"], &OptimizerOptions::default())
        .unwrap_err();
    let OptimizeError::Unsupported(layers) = &err else {
        panic!("{err}")
    };
    let x = layers.iter().find(|l| l.layer == "x").expect("x refused");
    assert_eq!(
        x.refusals[0].reason,
        "TestDevice computes in its own memory; network inputs, outputs and constants stay in \
         host memory"
    );
}

#[test]
fn a_refused_device_allocation_fails_the_load_naming_backend_and_size() {
    let (_dir, rt) = runtime();
    let err = rt
        .load_network(&optimized(&rt, &["TestDevice:Fail=allocate_buffer"]))
        .unwrap_err();
    match &err {
        ExecuteError::DeviceMemory {
            backend,
            bytes,
            message,
            ..
        } => {
            assert_eq!(backend, "TestDevice");
            assert_eq!(*bytes, 120);
            assert!(
                message.contains("allocate_buffer refused by TestDevice"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string()
            .contains("backend TestDevice could not allocate 120 bytes of device memory"),
        "{err}"
    );
    // The runtime goes on: the same network loads and runs without the fault.
    let id = rt.load_network(&optimized(&rt, &[])).unwrap();
    let x = lcg(30, 4);
    assert_eq!(run(&rt, id, &x).unwrap().len(), 30);
    rt.unload_network(id).unwrap();
}

#[test]
fn a_failed_copy_names_the_boundary_layer_and_the_network_stays_usable_elsewhere() {
    let (_dir, rt) = runtime();
    // A copy in fails the run at the first boundary.
    let id = rt
        .load_network(&optimized(&rt, &["TestDevice:Fail=copy_to_device"]))
        .unwrap();
    let err = run(&rt, id, &lcg(30, 1)).unwrap_err();
    let ExecuteError::Backend { layer, error } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(layer, "relu_memcopy_0");
    assert_eq!(error.method, "copy_to_device");
    assert_eq!(error.message, "copy_to_device refused by TestDevice");
    rt.unload_network(id).unwrap();

    // A copy out fails the run: the first one is sum's, read by the Sigmoid on CpuRef.
    let id = rt
        .load_network(&optimized(&rt, &["TestDevice:Fail=copy_to_host"]))
        .unwrap();
    let err = run(&rt, id, &lcg(30, 2)).unwrap_err();
    let ExecuteError::Backend { layer, error } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(layer, "sigmoid_memcopy_0");
    assert_eq!(error.method, "copy_to_host");
    rt.unload_network(id).unwrap();

    for (fault, layer, method) in [
        ("execute_device", "relu", "execute_device"),
        ("finish", "<network>", "finish"),
    ] {
        let id = rt
            .load_network(&optimized(&rt, &[&format!("TestDevice:Fail={fault}")]))
            .unwrap();
        let err = run(&rt, id, &lcg(30, 3)).unwrap_err();
        let ExecuteError::Backend { layer: l, error } = &err else {
            panic!("{err:?}")
        };
        assert_eq!((l.as_str(), error.method), (layer, method), "{err}");
        assert_eq!(error.message, format!("{fault} refused by TestDevice"));
        rt.unload_network(id).unwrap();
    }
    // Another network of the same runtime is not affected.
    let id = rt.load_network(&optimized(&rt, &[])).unwrap();
    let x = lcg(30, 5);
    let got = run(&rt, id, &x).unwrap();
    for (g, w) in got.iter().zip(oracle(&x)) {
        assert!((g - w).abs() <= 1e-6 + 1e-6 * w.abs());
    }
}

/// GpuCl (the OpenCL example plugin, on pocl here) declares `HostMemoryImport`: the network
/// input it reads is used in the caller's buffer (an import), the output is copied out, and
/// nothing else crosses.
#[test]
fn gpucl_imports_the_input_and_copies_the_output() {
    let dir = PluginDir::new();
    dir.copy(&crate::fixtures::gpucl_plugin(), "Acme_GpuCl_backend.so");
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::Option, dir.as_str());
    assert!(rt.registry().is_registered("GpuCl"), "{:?}", rt.report());
    let mut n = NetworkBuilder::new();
    let x = n.add_input("x", f32t(&SHAPE)).unwrap();
    let r = n
        .add_layer("relu", activation(ActivationFunction::ReLU), &[x])
        .unwrap();
    let s = n
        .add_layer("sig", activation(ActivationFunction::Sigmoid), &[r])
        .unwrap();
    n.add_output("y", s).unwrap();
    let opt = rt
        .optimize(
            &n.build().unwrap(),
            &["GpuCl", "CpuRef"],
            &OptimizerOptions::default(),
        )
        .unwrap();
    assert_eq!(opt.backend_of("relu"), Some("GpuCl"));
    assert_eq!(opt.backend_of("sig"), Some("GpuCl"));
    let id = rt.load_network(&opt).unwrap();
    let strategies: Vec<(String, Strategy)> = rt
        .network_transfers(id)
        .unwrap()
        .boundaries
        .into_iter()
        .map(|(l, b)| (l, b.strategy))
        .collect();
    assert_eq!(
        strategies,
        [
            ("relu_memcopy_0".to_owned(), Strategy::Import),
            ("y_memcopy_0".to_owned(), Strategy::Copy)
        ]
    );
    for seed in 1..=4 {
        let x = lcg(30, seed);
        let got = run(&rt, id, &x).unwrap();
        for (g, v) in got.iter().zip(&x) {
            let w = 1.0 / (1.0 + (-v.max(0.0)).exp());
            assert!((g - w).abs() <= 1e-6, "{g} vs {w}");
        }
    }
    let t = rt.network_transfers(id).unwrap();
    assert_eq!((t.copies, t.imports), (4, 4));
    rt.unload_network(id).unwrap();
}

/// Out of process, the server owns the device: it copies each workload's inputs from the
/// shared tensor memory into the backend's buffers (unless the same segment wrote them there)
/// and the output back, so the host sees host memory and no boundary; the results are the
/// same, and a device fault in the child fails the run with the layer's name.
#[test]
fn out_of_process_the_server_moves_the_tensors() {
    let dir = PluginDir::new();
    dir.add("device-memory", "Test_TestDevice_backend.so");
    let options =
        crate::fixtures::out_of_process(&["TestDevice"], std::time::Duration::from_secs(60));
    let rt = Runtime::with_path_list(options, PathSource::Option, dir.as_str());
    let opt = optimized(&rt, &[]);
    assert_eq!(opt.backend_of("relu"), Some("TestDevice"));
    let id = rt.load_network(&opt).unwrap();
    assert!(rt.network_transfers(id).unwrap().boundaries.is_empty());
    for seed in 1..=2 {
        let x = lcg(30, seed);
        let got = run(&rt, id, &x).unwrap();
        for (g, w) in got.iter().zip(oracle(&x)) {
            assert!((g - w).abs() <= 1e-6 + 1e-6 * w.abs(), "{g} vs {w}");
        }
    }
    rt.unload_network(id).unwrap();
    let id = rt
        .load_network(&optimized(&rt, &["TestDevice:Fail=execute_device"]))
        .unwrap();
    let err = run(&rt, id, &lcg(30, 3)).unwrap_err();
    let ExecuteError::Backend { layer, error } = &err else {
        panic!("{err:?}")
    };
    // Its first workload there is the MemCopy in front of the ReLU.
    assert_eq!(layer, "relu_memcopy_0");
    assert_eq!(error.message, "execute_device refused by TestDevice");
}

/// A panic in a device entry is caught inside the plugin: the call fails as `panicked`, the
/// backend is faulted and not called again by this runtime (nor while the network unloads),
/// and the network can be optimised again without it.
#[test]
fn a_panicking_device_entry_faults_the_backend_not_the_host() {
    for (entry, at_load, layer) in [
        ("allocate_buffer", true, "<network>"),
        ("copy_to_device", false, "relu_memcopy_0"),
        ("copy_to_host", false, "sigmoid_memcopy_0"),
        ("execute_device", false, "relu"),
        ("finish", false, "<network>"),
    ] {
        let (_dir, rt) = runtime();
        let opt = optimized(&rt, &[&format!("TestDevice:Fail=panic:{entry}")]);
        let err = match rt.load_network(&opt) {
            Err(e) => {
                assert!(at_load, "{entry}: {e}");
                e
            }
            Ok(id) => {
                assert!(!at_load, "{entry} loaded");
                let e = run(&rt, id, &lcg(30, 1)).unwrap_err();
                rt.unload_network(id).unwrap();
                e
            }
        };
        let text = err.to_string();
        assert!(
            text.contains(&format!("{entry} exploded in TestDevice")),
            "{entry}: {text}"
        );
        match &err {
            ExecuteError::Backend { layer: l, error } => {
                assert_eq!(
                    (l.as_str(), error.code),
                    (layer, backplane_api::ErrorCode::Panicked)
                );
            }
            ExecuteError::DeviceMemory { backend, .. } => {
                assert_eq!((entry, backend.as_str()), ("allocate_buffer", "TestDevice"));
            }
            other => panic!("{entry}: {other:?}"),
        }
        assert!(
            rt.registry().get("TestDevice").unwrap().is_faulted(),
            "{entry}"
        );
        // Optimised again, the network runs on CpuRef alone.
        let again = rt.reoptimize(&opt).unwrap();
        assert_eq!(again.backend_of("relu"), Some("CpuRef"));
        let id = rt.load_network(&again).unwrap();
        let x = lcg(30, 2);
        let got = run(&rt, id, &x).unwrap();
        for (g, w) in got.iter().zip(oracle(&x)) {
            assert!((g - w).abs() <= 1e-6 + 1e-6 * w.abs());
        }
    }
}

/// Two device backends: the tensor that crosses from TestDevice's memory into GpuCl's goes
/// through host memory (a copy out of one, a copy into the other), counted as one boundary.
#[test]
fn a_boundary_between_two_devices_goes_through_the_host() {
    let dir = PluginDir::new();
    dir.add("device-memory", "Test_TestDevice_backend.so");
    dir.copy(&crate::fixtures::gpucl_plugin(), "Acme_GpuCl_backend.so");
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::Option, dir.as_str());
    let mut n = NetworkBuilder::new();
    let x = n.add_input("x", f32t(&SHAPE)).unwrap();
    let r = n
        .add_layer("relu", activation(ActivationFunction::ReLU), &[x])
        .unwrap();
    let s = n
        .add_layer("sig", activation(ActivationFunction::Sigmoid), &[r])
        .unwrap();
    n.add_output("y", s).unwrap();
    let opt = rt
        .optimize(
            &n.build().unwrap(),
            &["TestDevice", "GpuCl", "CpuRef"],
            &OptimizerOptions::default(),
        )
        .unwrap();
    assert_eq!(opt.backend_of("relu"), Some("TestDevice"));
    assert_eq!(opt.backend_of("sig"), Some("GpuCl"));
    let id = rt.load_network(&opt).unwrap();
    let boundaries: Vec<String> = rt
        .network_transfers(id)
        .unwrap()
        .boundaries
        .iter()
        .map(|(l, b)| format!("{l}: {b}"))
        .collect();
    assert_eq!(
        boundaries,
        [
            "relu_memcopy_0: host -> TestDevice, copy",
            "sig_memcopy_0: TestDevice -> GpuCl, copy",
            "y_memcopy_0: GpuCl -> host, copy",
        ]
    );
    for seed in 1..=3 {
        let x = lcg(30, seed);
        let got = run(&rt, id, &x).unwrap();
        for (g, v) in got.iter().zip(&x) {
            let w = 1.0 / (1.0 + (-v.max(0.0)).exp());
            assert!((g - w).abs() <= 1e-6, "{g} vs {w}");
        }
    }
    let t = rt.network_transfers(id).unwrap();
    assert_eq!((t.copies, t.imports), (9, 0));
    rt.unload_network(id).unwrap();
}

/// A network compiled with TestDevice in process (its memory copies planned for its own
/// memory) loads from the file there, device copies and all; where TestDevice runs out of
/// process its tensors are in host memory, so the file's copies do not fit: an error naming
/// the backend, or with reoptimize the stored layers optimised again, and the same results.
#[test]
fn a_compiled_network_knows_where_its_device_computed() {
    use backplane::compiled::{CompiledNetwork, ModelFacts, compile};
    let (dir, rt) = runtime();
    let bytes = compile(&rt, &optimized(&rt, &[]), &ModelFacts::default()).unwrap();
    let file = CompiledNetwork::from_bytes(&bytes).unwrap();
    let here = rt.load_network(&file.bind(&rt, false).unwrap()).unwrap();
    // The five boundaries of `each_boundary_is_one_copy_per_run_and_results_match`.
    assert_eq!(rt.network_transfers(here).unwrap().boundaries.len(), 5);
    let x = lcg(30, 7);
    let want = run(&rt, here, &x).unwrap();
    for (g, w) in want.iter().zip(oracle(&x)) {
        assert!((g - w).abs() <= 1e-6 + 1e-6 * w.abs(), "{g} vs {w}");
    }
    let options =
        crate::fixtures::out_of_process(&["TestDevice"], std::time::Duration::from_secs(60));
    let oop = Runtime::with_path_list(options, PathSource::Option, dir.as_str());
    let e = file.bind(&oop, false).unwrap_err().to_string();
    assert!(
        e.starts_with(
            "compiled network: compiled for backend TestDevice computing in its own memory; \
             here it computes in host memory"
        ),
        "{e}"
    );
    let again = file.bind(&oop, true).unwrap();
    assert!(
        again
            .notes()
            .iter()
            .any(|n| n.contains("TestDevice computing in its own memory")),
        "{:?}",
        again.notes()
    );
    let there = oop.load_network(&again).unwrap();
    assert_eq!(run(&oop, there, &x).unwrap(), want);
    oop.unload_network(there).unwrap();
    rt.unload_network(here).unwrap();
}
