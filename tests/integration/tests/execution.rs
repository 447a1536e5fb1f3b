//! Networks end to end through real plugins: build, optimise (assignment, fallback, reasons,
//! MemCopy), load, enqueue, unload; bindings checked; several threads.

use backplane::{
    CreationOptions, ExecuteError, InputTensor, NetworkBuilder, OptimizeError, OptimizerOptions,
    OutputTensor, Runtime, plugins::paths::PathSource,
};
use backplane_api::{BinaryOperation, LayerDescriptor};

use crate::fixtures::{
    PluginDir, activation, bytes, chain, f32t, floats, lcg, run_single, runtime_for, small_cnn,
};

/// Adds `name = a + b`.
fn add(
    n: &mut NetworkBuilder,
    name: &str,
    a: backplane::TensorRef,
    b: backplane::TensorRef,
) -> backplane::TensorRef {
    n.add_layer(
        name,
        LayerDescriptor::ElementwiseBinary(BinaryOperation::Add),
        &[a, b],
    )
    .unwrap()
}

/// a + b, then (a + b) - b, as two layers; outputs `sum` and `diff`.
fn add_then_sub() -> backplane::Network {
    let mut n = NetworkBuilder::new();
    let a = n.add_input("a", f32t(&[2])).unwrap();
    let b = n.add_input("b", f32t(&[2])).unwrap();
    let sum = add(&mut n, "add", a, b);
    let diff = n
        .add_layer(
            "sub",
            LayerDescriptor::ElementwiseBinary(BinaryOperation::Sub),
            &[sum, b],
        )
        .unwrap();
    n.add_output("sum", sum).unwrap();
    n.add_output("diff", diff).unwrap();
    n.build().unwrap()
}

fn run(
    rt: &Runtime,
    id: backplane::NetworkId,
    a: &[f32],
    b: &[f32],
) -> Result<(Vec<f32>, Vec<f32>), ExecuteError> {
    let t = f32t(&[2]);
    let (ab, bb) = (bytes(a), bytes(b));
    let (mut sum, mut diff) = (vec![0u8; 8], vec![0u8; 8]);
    rt.enqueue(
        id,
        &[
            InputTensor {
                name: "a",
                info: &t,
                data: &ab,
            },
            InputTensor {
                name: "b",
                info: &t,
                data: &bb,
            },
        ],
        &mut [
            OutputTensor {
                name: "sum",
                info: &t,
                data: &mut sum,
            },
            OutputTensor {
                name: "diff",
                info: &t,
                data: &mut diff,
            },
        ],
    )?;
    Ok((floats(&sum), floats(&diff)))
}

/// Arm NN's sample dynamic backend test: `[5, 3] + [10, 8] = [15, 11]` on TestAlpha, loaded
/// dynamically, with no built-in backend.
#[test]
fn sample_backend_adds_dynamically() {
    let dir = PluginDir::new();
    dir.add("valid-alpha", "Test_TestAlpha_backend.so");
    let rt = runtime_for(dir.as_str());
    let mut n = NetworkBuilder::new();
    let a = n.add_input("a", f32t(&[2])).unwrap();
    let b = n.add_input("b", f32t(&[2])).unwrap();
    let sum = add(&mut n, "add", a, b);
    n.add_output("out", sum).unwrap();
    let net = n.build().unwrap();
    let opt = rt
        .optimize(&net, &["TestAlpha"], &OptimizerOptions::default())
        .unwrap();
    assert!(
        opt.assignments().iter().all(|a| a.backend == "TestAlpha"),
        "{}",
        opt.explain()
    );
    let id = rt.load_network(&opt).unwrap();
    let t = f32t(&[2]);
    let (ab, bb, mut out) = (bytes(&[5.0, 3.0]), bytes(&[10.0, 8.0]), vec![0u8; 8]);
    rt.enqueue(
        id,
        &[
            InputTensor {
                name: "a",
                info: &t,
                data: &ab,
            },
            InputTensor {
                name: "b",
                info: &t,
                data: &bb,
            },
        ],
        &mut [OutputTensor {
            name: "out",
            info: &t,
            data: &mut out,
        }],
    )
    .unwrap();
    assert_eq!(floats(&out), vec![15.0, 11.0]);
    rt.unload_network(id).unwrap();
    assert!(matches!(
        rt.enqueue(id, &[], &mut []),
        Err(ExecuteError::UnknownNetwork(_))
    ));
}

/// TestAlpha supports Add but not Sub: Sub falls back to CpuRef with TestAlpha's reason
/// recorded, MemCopy layers join the two (TestAlpha does not declare host memory), and the
/// result equals CpuRef alone.
#[test]
fn partial_plugin_falls_back_to_cpu_ref() {
    let dir = PluginDir::new();
    dir.add("valid-alpha", "Test_TestAlpha_backend.so");
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::Option, dir.as_str());
    let net = add_then_sub();
    let mixed = rt
        .optimize(&net, &["TestAlpha", "CpuRef"], &OptimizerOptions::default())
        .unwrap();
    assert_eq!(mixed.backend_of("add"), Some("TestAlpha"));
    assert_eq!(mixed.backend_of("sub"), Some("CpuRef"));
    let sub = &mixed.assignments()[mixed
        .network()
        .layers()
        .iter()
        .position(|l| l.name == "sub")
        .unwrap()];
    assert_eq!(sub.refusals.len(), 1);
    assert_eq!(sub.refusals[0].backend, "TestAlpha");
    assert!(
        sub.refusals[0].reason.contains("Sub"),
        "{}",
        sub.refusals[0].reason
    );
    let copies: Vec<&str> = mixed
        .network()
        .layers()
        .iter()
        .filter(|l| *l.descriptor == LayerDescriptor::MemCopy)
        .map(|l| l.name.as_str())
        .collect();
    assert!(!copies.is_empty(), "{}", mixed.explain());
    assert!(
        mixed.explain().contains("refused by TestAlpha"),
        "{}",
        mixed.explain()
    );
    assert!(mixed.to_dot().starts_with("digraph network {"));

    let reference = rt
        .optimize(&net, &["CpuRef"], &OptimizerOptions::default())
        .unwrap();
    let (m, r) = (
        rt.load_network(&mixed).unwrap(),
        rt.load_network(&reference).unwrap(),
    );
    let (a, b) = ([1.5, -2.0], [0.25, 4.0]);
    let mixed_out = run(&rt, m, &a, &b).unwrap();
    assert_eq!(mixed_out, run(&rt, r, &a, &b).unwrap());
    assert_eq!(mixed_out, (vec![1.75, 2.0], vec![1.5, -2.0]));
}

#[test]
fn optimizer_errors_name_layers_and_reasons() {
    let dir = PluginDir::new();
    dir.add("valid-alpha", "Test_TestAlpha_backend.so");
    dir.add("valid-beta", "Test_TestBeta_backend.so");
    let rt = runtime_for(dir.as_str());
    let net = add_then_sub();
    match rt.optimize(&net, &["TestBeta"], &OptimizerOptions::default()) {
        Err(OptimizeError::Unsupported(layers)) => {
            assert_eq!(layers.len(), net.layers().len());
            assert!(
                layers
                    .iter()
                    .all(|l| l.refusals[0].reason == "TestBeta supports no layers")
            );
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    let e = rt
        .optimize(
            &net,
            &["TestAlpha", "TestBeta"],
            &OptimizerOptions::default(),
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("sub (ElementwiseBinary): TestAlpha:"),
        "{e}"
    );
    let no_fallback = OptimizerOptions {
        no_fallback: true,
        ..Default::default()
    };
    match rt.optimize(&net, &["TestAlpha", "TestBeta"], &no_fallback) {
        Err(OptimizeError::FallbackDisabled { layer, backend, .. }) => {
            assert_eq!((layer.as_str(), backend.as_str()), ("sub", "TestAlpha"))
        }
        other => panic!("expected FallbackDisabled, got {other:?}"),
    }
    assert!(matches!(
        rt.optimize(&net, &["Nope"], &OptimizerOptions::default()),
        Err(OptimizeError::NoBackends { .. })
    ));
}

#[test]
fn pins_override_preferences() {
    let dir = PluginDir::new();
    dir.add("valid-alpha", "Test_TestAlpha_backend.so");
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::Option, dir.as_str());
    let net = add_then_sub();
    let pinned = OptimizerOptions {
        pins: vec![("add".into(), "CpuRef".into())],
        ..Default::default()
    };
    let opt = rt
        .optimize(&net, &["TestAlpha", "CpuRef"], &pinned)
        .unwrap();
    assert_eq!(opt.backend_of("add"), Some("CpuRef"));
    assert_eq!(opt.backend_of("a"), Some("TestAlpha"));
    let bad = OptimizerOptions {
        pins: vec![("sub".into(), "TestAlpha".into())],
        ..Default::default()
    };
    assert!(matches!(
        rt.optimize(&net, &["CpuRef"], &bad),
        Err(OptimizeError::PinFailed { .. })
    ));
}

#[test]
fn bindings_are_checked_before_anything_runs() {
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::None, "");
    let opt = rt
        .optimize(&add_then_sub(), &["CpuRef"], &OptimizerOptions::default())
        .unwrap();
    let id = rt.load_network(&opt).unwrap();
    let (t2, t3) = (f32t(&[2]), f32t(&[3]));
    let (x, y) = (bytes(&[1.0, 2.0]), bytes(&[1.0, 2.0, 3.0]));
    let mut out = vec![0u8; 8];
    let err = |inputs: &[InputTensor<'_>], out: &mut Vec<u8>| {
        let mut outs = [OutputTensor {
            name: "sum",
            info: &t2,
            data: out,
        }];
        rt.enqueue(id, inputs, &mut outs).unwrap_err().to_string()
    };
    assert_eq!(
        err(
            &[InputTensor {
                name: "c",
                info: &t2,
                data: &x
            }],
            &mut out
        ),
        "no network input named \"c\" (the network has [\"a\", \"b\"])"
    );
    assert_eq!(
        err(
            &[InputTensor {
                name: "a",
                info: &t3,
                data: &y
            }],
            &mut out
        ),
        "input a: expected [2] Float32, got [3] Float32"
    );
    assert_eq!(
        err(
            &[InputTensor {
                name: "a",
                info: &t2,
                data: &x
            }],
            &mut out
        ),
        "network input b is not bound"
    );
    assert_eq!(out, vec![0u8; 8], "nothing ran");
}

#[test]
fn eight_threads_share_a_network() {
    let dir = PluginDir::new();
    dir.add("valid-alpha", "Test_TestAlpha_backend.so");
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::Option, dir.as_str());
    let opt = rt
        .optimize(
            &add_then_sub(),
            &["TestAlpha", "CpuRef"],
            &OptimizerOptions::default(),
        )
        .unwrap();
    let id = rt.load_network(&opt).unwrap();
    std::thread::scope(|s| {
        for t in 0..8 {
            let rt = &rt;
            s.spawn(move || {
                for i in 0..100 {
                    let a = [t as f32, i as f32];
                    let b = [0.5, -1.0];
                    let (sum, diff) = run(rt, id, &a, &b).unwrap();
                    assert_eq!(sum, vec![a[0] + 0.5, a[1] - 1.0]);
                    assert_eq!(diff, a.to_vec());
                }
            });
        }
    });
    rt.unload_network(id).unwrap();
}

#[test]
fn memory_plan_reuses_buffers() {
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::None, "");
    let mut n = NetworkBuilder::new();
    let mut t = n.add_input("x", f32t(&[1024])).unwrap();
    let one = n.add_input("one", f32t(&[1024])).unwrap();
    for i in 0..10 {
        t = add(&mut n, &format!("add{i}"), t, one);
    }
    n.add_output("y", t).unwrap();
    let opt = rt
        .optimize(
            &n.build().unwrap(),
            &["CpuRef"],
            &OptimizerOptions::default(),
        )
        .unwrap();
    let id = rt.load_network(&opt).unwrap();
    let (peak, naive) = rt.network_memory(id).unwrap();
    assert_eq!(naive, 13 * 4096);
    assert!(peak <= 5 * 4096, "peak {peak} of naive {naive}");
    let info = f32t(&[1024]);
    let (x, ones) = (bytes(&[2.0; 1024]), bytes(&[1.0; 1024]));
    let mut y = vec![0u8; 4096];
    rt.enqueue(
        id,
        &[
            InputTensor {
                name: "x",
                info: &info,
                data: &x,
            },
            InputTensor {
                name: "one",
                info: &info,
                data: &ones,
            },
        ],
        &mut [OutputTensor {
            name: "y",
            info: &info,
            data: &mut y,
        }],
    )
    .unwrap();
    assert!(floats(&y).iter().all(|&v| v == 12.0));
}

/// TestGamma fuses ReLU -> ReLU into one PreCompiled layer and returns Sigmoid as failed: the
/// host applies the substitution, re-assigns Sigmoid to CpuRef with the reason, and the result
/// is bit-identical to CpuRef alone.
#[test]
fn substitution_and_failed_layers() {
    use backplane_api::ActivationFunction::{ReLU, Sigmoid};
    let dir = PluginDir::new();
    dir.add("valid-gamma", "Test_TestGamma_backend.so");
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::Option, dir.as_str());
    let t = f32t(&[16]);
    let net = chain(
        &[16],
        &[("relu_a", ReLU), ("relu_b", ReLU), ("sigmoid", Sigmoid)],
    );
    let opt = rt
        .optimize(&net, &["TestGamma", "CpuRef"], &OptimizerOptions::default())
        .unwrap();
    let explain = opt.explain();
    assert_eq!(
        opt.backend_of("relu_a+relu_b"),
        Some("TestGamma"),
        "{explain}"
    );
    assert_eq!(
        opt.backend_of("relu_a"),
        None,
        "replaced layers are gone: {explain}"
    );
    assert_eq!(opt.backend_of("sigmoid"), Some("CpuRef"), "{explain}");
    assert!(
        explain.contains("substitution by TestGamma: replaces relu_a + relu_b"),
        "{explain}"
    );
    assert!(
        explain
            .contains("refused by TestGamma: its optimize_subgraph returned the layer as failed"),
        "{explain}"
    );

    let reference = rt
        .optimize(&net, &["CpuRef"], &OptimizerOptions::default())
        .unwrap();
    let (g, r) = (
        rt.load_network(&opt).unwrap(),
        rt.load_network(&reference).unwrap(),
    );
    let input = lcg(16, 7);
    let got = run_single(&rt, g, &t, &input, &t);
    assert_eq!(got, run_single(&rt, r, &t, &input, &t));
    let expected: Vec<f32> = input
        .iter()
        .map(|v| 1.0 / (1.0 + (-v.max(0.0)).exp()))
        .collect();
    for (a, b) in got.iter().zip(&expected) {
        assert!((a - b).abs() <= 1e-6, "{a} vs {b}");
    }
}

/// A plugin whose substitutions are malformed: each is refused with a note, the subgraph stays
/// untouched on that plugin, and the network runs.
#[test]
fn malformed_substitutions_are_refused() {
    use backplane_api::ActivationFunction::ReLU;
    let dir = PluginDir::new();
    dir.add("bad-substitution", "Test_BadSubst_backend.so");
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::Option, dir.as_str());
    let t = f32t(&[8]);
    let opt = rt
        .optimize(
            &chain(&[8], &[("relu1", ReLU), ("relu2", ReLU)]),
            &["BadSubst", "CpuRef"],
            &OptimizerOptions::default(),
        )
        .unwrap();
    let notes = opt.notes();
    assert_eq!(notes.len(), 3, "{notes:#?}");
    assert!(
        notes[0].contains("are not the tensors the replaced layers read from outside"),
        "{}",
        notes[0]
    );
    assert!(
        notes[1].contains("layer id 9999 is not in the subgraph"),
        "{}",
        notes[1]
    );
    assert!(
        notes[2].contains("is a MemCopy, not a PreCompiled layer"),
        "{}",
        notes[2]
    );
    assert_eq!(
        (opt.backend_of("relu1"), opt.backend_of("relu2")),
        (Some("BadSubst"), Some("BadSubst"))
    );
    let id = rt.load_network(&opt).unwrap();
    let input = lcg(8, 3);
    let got = run_single(&rt, id, &t, &input, &t);
    assert_eq!(got, input.iter().map(|v| v.max(0.0)).collect::<Vec<_>>());
}

/// Naive NCHW convolution, straight from the definition (the oracle).
#[allow(
    clippy::too_many_arguments,
    reason = "a direct transcription of the definition"
)]
fn conv_oracle(
    x: &[f32],
    (c, h, w): (usize, usize, usize),
    wt: &[f32],
    m: usize,
    k: usize,
    bias: &[f32],
    pad: usize,
    stride: usize,
) -> Vec<f32> {
    let oh = (h + 2 * pad - k) / stride + 1;
    let ow = (w + 2 * pad - k) / stride + 1;
    let mut out = vec![0f32; m * oh * ow];
    for o in 0..m {
        for y in 0..oh {
            for xo in 0..ow {
                let mut acc = bias[o] as f64;
                for ci in 0..c {
                    for ky in 0..k {
                        for kx in 0..k {
                            let iy = (y * stride + ky) as isize - pad as isize;
                            let ix = (xo * stride + kx) as isize - pad as isize;
                            if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < w {
                                acc += x[ci * h * w + iy as usize * w + ix as usize] as f64
                                    * wt[((o * c + ci) * k + ky) * k + kx] as f64;
                            }
                        }
                    }
                }
                out[(o * oh + y) * ow + xo] = acc as f32;
            }
        }
    }
    out
}

/// Arm NN's CreateReferenceDynamicBackend: CpuRef loaded as a plugin (no built-ins) runs a
/// Convolution2d; checked against the naive oracle. A partial plugin (TestGamma: ReLU only)
/// with CpuRef behind it gives the same result as CpuRef alone.
#[test]
fn cpu_ref_plugin_runs_a_convolution_and_partial_plugins_agree() {
    let dir = PluginDir::new();
    dir.copy(
        &crate::fixtures::cpu_ref_plugin(),
        "Backplane_CpuRef_backend.so",
    );
    dir.add("valid-gamma", "Test_TestGamma_backend.so");
    let dynamic = runtime_for(dir.as_str());
    assert_eq!(dynamic.registry().ids(), vec!["CpuRef", "TestGamma"]);
    assert_eq!(
        dynamic
            .registry()
            .source("CpuRef")
            .map(|s| matches!(s, backplane::BackendSource::Dynamic { .. })),
        Some(true)
    );
    let (net, input, output, wt, bias) = small_cnn();
    assert_eq!(output.shape.as_slice(), [1, 4, 3, 3]);
    let x = lcg(72, 5);
    let oracle: Vec<f32> = conv_oracle(&x, (2, 6, 6), &wt, 4, 3, &bias, 1, 2)
        .iter()
        .map(|v| v.max(0.0))
        .collect();

    let only_ref = dynamic
        .optimize(&net, &["CpuRef"], &OptimizerOptions::default())
        .unwrap();
    let id = dynamic.load_network(&only_ref).unwrap();
    let got = run_single(&dynamic, id, &input, &x, &output);
    for (a, b) in got.iter().zip(&oracle) {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
    }

    let mixed = dynamic
        .optimize(&net, &["TestGamma", "CpuRef"], &OptimizerOptions::default())
        .unwrap();
    assert_eq!(
        mixed.backend_of("relu"),
        Some("TestGamma"),
        "{}",
        mixed.explain()
    );
    assert_eq!(mixed.backend_of("conv"), Some("CpuRef"));
    let m = dynamic.load_network(&mixed).unwrap();
    assert_eq!(run_single(&dynamic, m, &input, &x, &output), got);

    // The built-in CpuRef gives bit-identical results to the plugin build.
    let builtin = Runtime::with_path_list(CreationOptions::default(), PathSource::None, "");
    let b = builtin
        .load_network(
            &builtin
                .optimize(&net, &["CpuRef"], &OptimizerOptions::default())
                .unwrap(),
        )
        .unwrap();
    assert_eq!(run_single(&builtin, b, &input, &x, &output), got);
}

/// Context hooks in Arm NN's order through a real plugin, and a refused unload: TestGamma's
/// context refuses to unload network 13, which stays loaded and keeps running.
#[test]
fn context_hooks_and_a_refused_unload() {
    use backplane_api::ActivationFunction::ReLU;
    let logs = crate::fixtures::capture_logs();
    let dir = PluginDir::new();
    dir.add("valid-gamma", "Test_TestGamma_backend.so");
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::Option, dir.as_str());
    let t = f32t(&[4]);
    let opt = rt
        .optimize(
            &chain(&[4], &[("relu", ReLU)]),
            &["TestGamma", "CpuRef"],
            &OptimizerOptions::default(),
        )
        .unwrap();
    assert_eq!(opt.backend_of("relu"), Some("TestGamma"));
    let ids: Vec<_> = (0..13).map(|_| rt.load_network(&opt).unwrap()).collect();
    assert_eq!(ids[12], 13, "this runtime numbers networks from 1");
    let input = [-1.0, 2.0, -3.0, 4.0];
    assert_eq!(
        run_single(&rt, 13, &t, &input, &t),
        vec![0.0, 2.0, 0.0, 4.0]
    );
    match rt.unload_network(13) {
        Err(ExecuteError::UnloadRefused {
            network,
            backend,
            reason,
        }) => {
            assert_eq!(
                (network, backend.as_str(), reason.as_str()),
                (13, "TestGamma", "network 13 is busy")
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(
        run_single(&rt, 13, &t, &input, &t),
        vec![0.0, 2.0, 0.0, 4.0],
        "still loaded"
    );
    rt.unload_network(12).unwrap();
    let hooks: Vec<String> = logs
        .lines()
        .into_iter()
        .filter(|l| {
            l.starts_with("INFO TestGamma[untagged]") && (l.ends_with(" 12") || l.ends_with(" 13"))
        })
        .collect();
    let of = |id: &str| -> Vec<String> {
        hooks
            .iter()
            .filter(|l| l.ends_with(&format!(" {id}")))
            .map(|l| l.split(' ').nth(2).unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        of("12"),
        [
            "before_load_network",
            "after_load_network",
            "before_unload_network",
            "after_unload_network"
        ]
    );
    assert_eq!(
        of("13"),
        [
            "before_load_network",
            "after_load_network",
            "after_enqueue",
            "before_unload_network",
            "after_enqueue"
        ]
    );
}

/// A backend that panics while the optimizer queries it is recorded as refusing, marked faulted
/// and skipped afterwards; loaded networks on other backends keep working.
#[test]
fn a_panicking_backend_does_not_affect_other_networks() {
    let dir = PluginDir::new();
    dir.add("methods-panic", "Test_PanicMethods_backend.so");
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::Option, dir.as_str());
    let good = rt
        .load_network(
            &rt.optimize(&add_then_sub(), &["CpuRef"], &OptimizerOptions::default())
                .unwrap(),
        )
        .unwrap();
    // PanicMethods panics in is_layer_supported: the optimizer records it as a refusal, marks
    // the backend faulted, and falls back.
    let opt = rt
        .optimize(
            &add_then_sub(),
            &["PanicMethods", "CpuRef"],
            &OptimizerOptions::default(),
        )
        .unwrap();
    assert!(
        opt.assignments().iter().all(|a| a.backend == "CpuRef"),
        "{}",
        opt.explain()
    );
    assert!(
        opt.explain().contains("is_layer_supported panicked"),
        "{}",
        opt.explain()
    );
    assert!(rt.registry().get("PanicMethods").unwrap().is_faulted());
    // Later optimisations skip the faulted backend without calling it.
    let again = rt
        .optimize(
            &add_then_sub(),
            &["PanicMethods", "CpuRef"],
            &OptimizerOptions::default(),
        )
        .unwrap();
    assert!(
        again.assignments().iter().all(|a| a.refusals.is_empty()),
        "{}",
        again.explain()
    );
    assert_eq!(
        run(&rt, good, &[1.0, 2.0], &[3.0, 4.0]).unwrap(),
        (vec![4.0, 6.0], vec![1.0, 2.0])
    );
}

/// A workload that panics fails that enqueue with the backend's message (method, backend,
/// panic text); the backend is faulted and not called again, the network on it can still be
/// unloaded, and another network of the same runtime keeps running. The memory manager holds
/// memory from load on (acquired before the first execution, which for Constants is at load).
#[test]
fn a_panicking_workload_fails_only_its_enqueue() {
    use backplane_api::ActivationFunction::{Elu, ReLU};
    let dir = PluginDir::new();
    dir.add("valid-gamma", "Test_TestGamma_backend.so");
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::Option, dir.as_str());
    let t = f32t(&[4]);
    let single = |f| chain(&[4], &[("act", f)]);
    let prefs = ["TestGamma", "CpuRef"];
    let relu = rt
        .load_network(
            &rt.optimize(&single(ReLU), &prefs, &OptimizerOptions::default())
                .unwrap(),
        )
        .unwrap();
    let elu = rt
        .load_network(
            &rt.optimize(&single(Elu), &prefs, &OptimizerOptions::default())
                .unwrap(),
        )
        .unwrap();
    let reference = rt
        .load_network(
            &rt.optimize(&single(ReLU), &["CpuRef"], &OptimizerOptions::default())
                .unwrap(),
        )
        .unwrap();
    let gamma_bytes = |id| {
        rt.backend_memory(id)
            .unwrap()
            .into_iter()
            .find(|(b, _)| b == "TestGamma")
            .unwrap()
            .1
            .unwrap()
    };
    assert_eq!(
        gamma_bytes(relu),
        Some(4096),
        "acquired at load, before the first execution"
    );
    let input = [-1.0, 2.0, -3.0, 4.0];
    assert_eq!(
        run_single(&rt, relu, &t, &input, &t),
        vec![0.0, 2.0, 0.0, 4.0]
    );
    assert_eq!(
        gamma_bytes(relu),
        Some(4096),
        "acquired before the first run"
    );

    let xb = bytes(&input);
    let mut out = vec![0u8; 16];
    let err = rt
        .enqueue(
            elu,
            &[InputTensor {
                name: "x",
                info: &t,
                data: &xb,
            }],
            &mut [OutputTensor {
                name: "y",
                info: &t,
                data: &mut out,
            }],
        )
        .unwrap_err();
    match &err {
        ExecuteError::Backend { layer, error } => {
            assert_eq!(
                (layer.as_str(), error.backend.as_str(), error.method),
                ("act", "TestGamma", "execute")
            );
            assert_eq!(error.code, backplane_api::ErrorCode::Panicked);
            assert!(error.message.contains("elu exploded"), "{}", error.message);
        }
        other => panic!("expected a backend error, got {other:?}"),
    }
    assert!(rt.registry().get("TestGamma").unwrap().is_faulted());
    // The CpuRef network is unaffected; the faulted backend is not called again.
    assert_eq!(
        run_single(&rt, reference, &t, &input, &t),
        vec![0.0, 2.0, 0.0, 4.0]
    );
    let again = rt
        .enqueue(
            relu,
            &[InputTensor {
                name: "x",
                info: &t,
                data: &xb,
            }],
            &mut [OutputTensor {
                name: "y",
                info: &t,
                data: &mut out,
            }],
        )
        .unwrap_err();
    assert!(again.to_string().contains("backend is faulted"), "{again}");
    // Networks on the faulted backend still unload (its hooks are skipped).
    rt.unload_network(relu).unwrap();
    rt.unload_network(elu).unwrap();
    rt.unload_network(reference).unwrap();
}

/// Between two plugins that can neither share memory nor copy (TestGamma -> TestAlpha), the
/// MemCopy goes to the first preferred backend that copies (CpuRef), and the network runs.
#[test]
fn mem_copy_between_two_plugins_runs_on_a_third() {
    let dir = PluginDir::new();
    dir.add("valid-alpha", "Test_TestAlpha_backend.so");
    dir.add("valid-gamma", "Test_TestGamma_backend.so");
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::Option, dir.as_str());
    let t = f32t(&[4]);
    let opt = rt
        .optimize(
            &n_relu_add(),
            &["TestAlpha", "TestGamma", "CpuRef"],
            &OptimizerOptions::default(),
        )
        .unwrap();
    assert_eq!(
        (opt.backend_of("relu"), opt.backend_of("add")),
        (Some("TestGamma"), Some("TestAlpha"))
    );
    assert_eq!(
        opt.backend_of("add_memcopy_0"),
        Some("CpuRef"),
        "{}",
        opt.explain()
    );
    let id = rt.load_network(&opt).unwrap();
    assert_eq!(
        run_single(&rt, id, &t, &[-1.0, 2.0, -3.0, 4.0], &t),
        vec![0.0, 4.0, 0.0, 8.0]
    );
    // With only the two plugins nobody can copy: an error naming the MemCopy and the refusals.
    let e = rt
        .optimize(
            &n_relu_add(),
            &["TestAlpha", "TestGamma"],
            &OptimizerOptions::default(),
        )
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("_memcopy_0 (MemCopy): TestGamma:")
            && text.contains("TestAlpha: does not support MemCopy"),
        "{text}"
    );
}

fn n_relu_add() -> backplane::Network {
    let t = f32t(&[4]);
    let mut n = NetworkBuilder::new();
    let x = n.add_input("x", t).unwrap();
    let r = n
        .add_layer(
            "relu",
            activation(backplane_api::ActivationFunction::ReLU),
            &[x],
        )
        .unwrap();
    let s = add(&mut n, "add", r, r);
    n.add_output("y", s).unwrap();
    n.build().unwrap()
}

/// The caller's buffers are read and written in place when aligned for their elements and
/// copied through the network's memory when not: the same results either way, run after run
/// (nothing stale left in either), for an output also read by a layer (`sum`, copied) and
/// one only the last layer writes (`diff`, in place when aligned).
#[test]
#[allow(
    clippy::useless_vec,
    reason = "heap buffers: the allocator aligns them, so offset 0 is aligned for f32 and offset 1 is not"
)]
fn caller_buffers_in_place_or_copied() {
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::None, "");
    let opt = rt
        .optimize(&add_then_sub(), &["CpuRef"], &OptimizerOptions::default())
        .unwrap();
    let id = rt.load_network(&opt).unwrap();
    let t = f32t(&[2]);
    // Each buffer inside a larger one, at byte offset 0 (aligned) or 1 (not).
    for (round, (a, b)) in [([1.0, 2.0], [10.0, 20.0]), ([-3.0, 0.5], [4.0, -8.0])]
        .into_iter()
        .enumerate()
    {
        for shift in [0usize, 1] {
            let mut ab = vec![0u8; 9];
            let mut bb = vec![0u8; 9];
            ab[shift..shift + 8].copy_from_slice(&bytes(&a));
            bb[shift..shift + 8].copy_from_slice(&bytes(&b));
            let (mut sum, mut diff) = (vec![0xffu8; 9], vec![0xffu8; 9]);
            rt.enqueue(
                id,
                &[
                    InputTensor {
                        name: "a",
                        info: &t,
                        data: &ab[shift..shift + 8],
                    },
                    InputTensor {
                        name: "b",
                        info: &t,
                        data: &bb[shift..shift + 8],
                    },
                ],
                &mut [
                    OutputTensor {
                        name: "sum",
                        info: &t,
                        data: &mut sum[shift..shift + 8],
                    },
                    OutputTensor {
                        name: "diff",
                        info: &t,
                        data: &mut diff[shift..shift + 8],
                    },
                ],
            )
            .unwrap();
            let what = format!("round {round}, offset {shift}");
            assert_eq!(
                floats(&sum[shift..shift + 8]),
                [a[0] + b[0], a[1] + b[1]],
                "{what}"
            );
            assert_eq!(floats(&diff[shift..shift + 8]), a.to_vec(), "{what}");
            // Bytes around the output were not touched.
            let outside = if shift == 0 { 8 } else { 0 };
            assert_eq!((sum[outside], diff[outside]), (0xff, 0xff), "{what}");
        }
    }
}

/// Binding edge cases: an output fed directly by an input, and two outputs (plus a layer)
/// reading the same tensor.
#[test]
fn identity_and_shared_output_tensors() {
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::None, "");
    let t = f32t(&[3]);
    let mut n = NetworkBuilder::new();
    let x = n.add_input("x", t.clone()).unwrap();
    n.add_output("y", x).unwrap();
    let s = add(&mut n, "double", x, x);
    n.add_output("s1", s).unwrap();
    n.add_output("s2", s).unwrap();
    let opt = rt
        .optimize(
            &n.build().unwrap(),
            &["CpuRef"],
            &OptimizerOptions::default(),
        )
        .unwrap();
    let id = rt.load_network(&opt).unwrap();
    let xb = bytes(&[1.0, -2.0, 3.5]);
    let (mut y, mut s1, mut s2) = (vec![0u8; 12], vec![0u8; 12], vec![0u8; 12]);
    rt.enqueue(
        id,
        &[InputTensor {
            name: "x",
            info: &t,
            data: &xb,
        }],
        &mut [
            OutputTensor {
                name: "y",
                info: &t,
                data: &mut y,
            },
            OutputTensor {
                name: "s1",
                info: &t,
                data: &mut s1,
            },
            OutputTensor {
                name: "s2",
                info: &t,
                data: &mut s2,
            },
        ],
    )
    .unwrap();
    assert_eq!(floats(&y), vec![1.0, -2.0, 3.5]);
    assert_eq!(floats(&s1), vec![2.0, -4.0, 7.0]);
    assert_eq!(floats(&s2), floats(&s1));
}

/// Inputs and outputs whose layers are not at the ends of the layer order keep their values:
/// a later input, and an output whose tensor's last reader comes early.
#[test]
fn inputs_and_outputs_in_the_middle_of_the_order() {
    use backplane_api::ActivationFunction::{ReLU, Sigmoid};
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::None, "");
    let t = f32t(&[4]);
    let mut n = NetworkBuilder::new();
    let x = n.add_input("x", t.clone()).unwrap();
    let a = n.add_layer("relu_a", activation(ReLU), &[x]).unwrap();
    n.add_output("a", a).unwrap();
    let b = n.add_layer("sigmoid_b", activation(Sigmoid), &[x]).unwrap();
    let c = n.add_layer("relu_c", activation(ReLU), &[b]).unwrap();
    let y = n.add_input("y", t.clone()).unwrap();
    let d = add(&mut n, "add_d", c, y);
    n.add_output("d", d).unwrap();
    let opt = rt
        .optimize(
            &n.build().unwrap(),
            &["CpuRef"],
            &OptimizerOptions::default(),
        )
        .unwrap();
    let id = rt.load_network(&opt).unwrap();
    let (xv, yv) = ([-1.0f32, 2.0, -3.0, 4.0], [10.0f32, 20.0, 30.0, 40.0]);
    let (xb, yb) = (bytes(&xv), bytes(&yv));
    let (mut ab, mut db) = (vec![0u8; 16], vec![0u8; 16]);
    rt.enqueue(
        id,
        &[
            InputTensor {
                name: "x",
                info: &t,
                data: &xb,
            },
            InputTensor {
                name: "y",
                info: &t,
                data: &yb,
            },
        ],
        &mut [
            OutputTensor {
                name: "a",
                info: &t,
                data: &mut ab,
            },
            OutputTensor {
                name: "d",
                info: &t,
                data: &mut db,
            },
        ],
    )
    .unwrap();
    assert_eq!(
        floats(&ab),
        xv.iter().map(|v| v.max(0.0)).collect::<Vec<_>>()
    );
    let want: Vec<f32> = xv
        .iter()
        .zip(&yv)
        .map(|(x, y)| 1.0 / (1.0 + (-x).exp()) + y)
        .collect();
    for (g, w) in floats(&db).iter().zip(&want) {
        assert!((g - w).abs() <= 1e-6, "{g} vs {w}");
    }
}

/// Names a plugin or the optimizer would generate may already be taken by the user: a
/// substitution with a taken name is refused with a note (not a panic), and MemCopy layers get
/// a free name.
#[test]
fn generated_names_never_clash() {
    use backplane_api::ActivationFunction::{ReLU, Sigmoid};
    let dir = PluginDir::new();
    dir.add("valid-alpha", "Test_TestAlpha_backend.so");
    dir.add("valid-gamma", "Test_TestGamma_backend.so");
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::Option, dir.as_str());
    let t = f32t(&[4]);
    // TestGamma would name its fusion "relu_a+relu_b": the user already did.
    let net = chain(
        &[4],
        &[
            ("relu_a", ReLU),
            ("relu_b", ReLU),
            ("relu_a+relu_b", Sigmoid),
        ],
    );
    let opt = rt
        .optimize(&net, &["TestGamma", "CpuRef"], &OptimizerOptions::default())
        .unwrap();
    assert!(
        opt.notes().iter().any(|n| n.contains("already used")),
        "{:#?}",
        opt.notes()
    );
    assert_eq!(opt.backend_of("relu_a"), Some("TestGamma"), "left unfused");
    let id = rt.load_network(&opt).unwrap();
    let got = run_single(&rt, id, &t, &[-1.0, 2.0, -3.0, 4.0], &t);
    let want: Vec<f32> = [0.0f32, 2.0, 0.0, 4.0]
        .iter()
        .map(|v| 1.0 / (1.0 + (-v).exp()))
        .collect();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-6, "{g} vs {w}");
    }

    // The optimizer would call the copy before "add" "add_memcopy_0": the user did.
    let mut n = NetworkBuilder::new();
    let x = n.add_input("x", t.clone()).unwrap();
    let r = n
        .add_layer("add_memcopy_0", activation(ReLU), &[x])
        .unwrap();
    let s = add(&mut n, "add", r, r);
    n.add_output("y", s).unwrap();
    let opt = rt
        .optimize(
            &n.build().unwrap(),
            &["TestAlpha", "TestGamma", "CpuRef"],
            &OptimizerOptions::default(),
        )
        .unwrap();
    assert_eq!(
        opt.backend_of("add_memcopy_0"),
        Some("TestGamma"),
        "{}",
        opt.explain()
    );
    assert_eq!(
        opt.backend_of("add_memcopy_0_1"),
        Some("CpuRef"),
        "{}",
        opt.explain()
    );
    let id = rt.load_network(&opt).unwrap();
    assert_eq!(
        run_single(&rt, id, &t, &[-1.0, 2.0, -3.0, 4.0], &t),
        vec![0.0, 4.0, 0.0, 8.0]
    );
}

/// Per-layer profiling: off by default (`None`); once on, one entry per layer that runs, in
/// the order they run, with its backend, kind and the number of successful runs; a failed
/// run adds nothing; turning it on again starts from zero; off again is `None`.
#[test]
fn per_layer_profile() {
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::None, "");
    let opt = rt
        .optimize(&add_then_sub(), &["CpuRef"], &OptimizerOptions::default())
        .unwrap();
    let id = rt.load_network(&opt).unwrap();
    assert_eq!(rt.profile(id), None);
    assert!(rt.set_profiling(id, true));
    for _ in 0..3 {
        run(&rt, id, &[1.0, 2.0], &[3.0, 4.0]).unwrap();
    }
    // A wrong input size fails before anything runs: not counted.
    let t = f32t(&[2]);
    let short = [0u8; 4];
    assert!(
        rt.enqueue(
            id,
            &[InputTensor {
                name: "a",
                info: &t,
                data: &short,
            }],
            &mut [],
        )
        .is_err()
    );
    let profile = rt.profile(id).expect("profiling is on");
    let rows: Vec<(&str, String, &str, u64)> = profile
        .iter()
        .map(|l| {
            (
                l.layer.as_str(),
                l.kind.to_string(),
                l.backend.as_str(),
                l.runs,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("add", "ElementwiseBinary".to_owned(), "CpuRef", 3),
            ("sub", "ElementwiseBinary".to_owned(), "CpuRef", 3),
        ]
    );
    assert!(profile.iter().all(|l| l.total > std::time::Duration::ZERO));
    assert!(rt.set_profiling(id, true));
    assert!(rt.profile(id).unwrap().iter().all(|l| l.runs == 0));
    assert!(rt.set_profiling(id, false));
    assert_eq!(rt.profile(id), None);
    rt.unload_network(id).unwrap();
    assert!(!rt.set_profiling(id, true));
}
