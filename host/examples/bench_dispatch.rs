//! Dispatch benchmark driver (run by `scripts/bench-dispatch.sh`).
//!
//! The same networks through the built-in CpuRef and through CpuRef loaded as a plugin, in
//! one run, alternating: a chain of 1,000 `Add` layers on 16 floats, and a small CNN. Prints
//! the plugin/built-in ratio, the host's overhead per workload against calling CpuRef's
//! workloads directly through the Rust traits (no host, no ABI), and the memory plan's peak
//! against the naive sum.
//!
//! Usage: `bench_dispatch --plugin target/release/libbackplane_ref.so [--rounds N]`.

use std::{path::PathBuf, time::Instant};

use backplane::{
    CreationOptions, InputTensor, Network, NetworkBuilder, OptimizerOptions, OutputTensor, Runtime,
    plugins::paths::PathSource,
};
use backplane_api::{
    ActivationDescriptor, ActivationFunction, Backend, BinaryOperation, ConstTensor,
    Convolution2dDescriptor, DataType, FlattenDescriptor, FullyConnectedDescriptor,
    LayerDescriptor, OutputRounding, Padding2d, Pooling2dDescriptor, PoolingType, RSlice, RStr,
    SoftmaxDescriptor, TensorInfo, TensorView, TensorViewMut, WorkloadDesc,
};

const CHAIN: usize = 1000;

fn f32t(s: &[u32]) -> TensorInfo {
    TensorInfo::new(s, DataType::Float32)
}

fn lcg(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((s >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 0.2
        })
        .collect()
}

fn add_chain() -> Network {
    let mut n = NetworkBuilder::new();
    let mut t = n.add_input("x", f32t(&[16])).expect("input");
    let one = n.add_input("one", f32t(&[16])).expect("input");
    for i in 0..CHAIN {
        t = n
            .add_layer(
                &format!("add{i}"),
                LayerDescriptor::ElementwiseBinary(BinaryOperation::Add),
                &[t, one],
            )
            .expect("add");
    }
    n.add_output("y", t).expect("output");
    n.build().expect("network")
}

fn small_cnn() -> Network {
    let mut n = NetworkBuilder::new();
    let x = n.add_input("x", f32t(&[1, 3, 32, 32])).expect("input");
    let pad1 = Padding2d {
        left: 1,
        right: 1,
        top: 1,
        bottom: 1,
    };
    let conv = |n: &mut NetworkBuilder, name: &str, x, cin: u32, cout: u32, seed| {
        let w = n
            .add_constant(
                &format!("{name}_w"),
                ConstTensor::from_f32(&[cout, cin, 3, 3], &lcg((cout * cin * 9) as usize, seed)),
            )
            .expect("w");
        let b = n
            .add_constant(
                &format!("{name}_b"),
                ConstTensor::from_f32(&[cout], &lcg(cout as usize, seed + 1)),
            )
            .expect("b");
        let d = Convolution2dDescriptor {
            padding: pad1,
            bias_enabled: true,
            ..Default::default()
        };
        n.add_layer(name, LayerDescriptor::Convolution2d(d), &[x, w, b])
            .expect("conv")
    };
    let relu = LayerDescriptor::Activation(ActivationDescriptor {
        function: ActivationFunction::ReLU,
        a: 0.0,
        b: 0.0,
    });
    let pool = LayerDescriptor::Pooling2d(Pooling2dDescriptor {
        pool_type: PoolingType::Max,
        padding: Padding2d::default(),
        pool_width: 2,
        pool_height: 2,
        stride_x: 2,
        stride_y: 2,
        rounding: OutputRounding::Floor,
        count_include_pad: false,
        layout: Default::default(),
    });
    let c1 = conv(&mut n, "conv1", x, 3, 16, 1);
    let r1 = n.add_layer("relu1", relu.clone(), &[c1]).expect("relu");
    let p1 = n.add_layer("pool1", pool.clone(), &[r1]).expect("pool");
    let c2 = conv(&mut n, "conv2", p1, 16, 32, 3);
    let r2 = n.add_layer("relu2", relu, &[c2]).expect("relu");
    let p2 = n.add_layer("pool2", pool, &[r2]).expect("pool");
    let f = n
        .add_layer(
            "flatten",
            LayerDescriptor::Flatten(FlattenDescriptor { axis: 1 }),
            &[p2],
        )
        .expect("flatten");
    let w = n
        .add_constant("fc_w", ConstTensor::from_f32(&[2048, 10], &lcg(20480, 5)))
        .expect("w");
    let b = n
        .add_constant("fc_b", ConstTensor::from_f32(&[10], &lcg(10, 6)))
        .expect("b");
    let fc = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
        bias_enabled: true,
        transpose_weights: false,
    });
    let y = n.add_layer("fc", fc, &[f, w, b]).expect("fc");
    let s = n
        .add_layer(
            "softmax",
            LayerDescriptor::Softmax(SoftmaxDescriptor {
                beta: 1.0,
                axis: -1,
            }),
            &[y],
        )
        .expect("softmax");
    n.add_output("y", s).expect("output");
    n.build().expect("network")
}

/// Times `iters` enqueues of network `net` on `rt`; returns nanoseconds per enqueue.
fn time_network(rt: &Runtime, net: &Network, iters: usize) -> (f64, (usize, usize)) {
    let opt = rt
        .optimize(net, &["CpuRef"], &OptimizerOptions::default())
        .expect("optimize");
    let id = rt.load_network(&opt).expect("load");
    let inputs: Vec<(String, TensorInfo, Vec<u8>)> = net
        .inputs()
        .into_iter()
        .map(|(name, info)| {
            let n = info.num_elements().expect("size");
            (
                name.to_owned(),
                info.clone(),
                lcg(n, 9).iter().flat_map(|v| v.to_le_bytes()).collect(),
            )
        })
        .collect();
    let (out_name, out_info) = net.outputs()[0];
    let out_info = out_info.clone();
    let mut out = vec![0u8; out_info.num_bytes().expect("size")];
    let bound: Vec<InputTensor<'_>> = inputs
        .iter()
        .map(|(name, info, data)| InputTensor { name, info, data })
        .collect();
    let mut run = || {
        rt.enqueue(
            id,
            &bound,
            &mut [OutputTensor {
                name: out_name,
                info: &out_info,
                data: &mut out,
            }],
        )
        .expect("enqueue")
    };
    for _ in 0..iters / 10 + 1 {
        run();
    }
    let start = Instant::now();
    for _ in 0..iters {
        run();
    }
    let ns = start.elapsed().as_nanos() as f64 / iters as f64;
    let memory = rt.network_memory(id).expect("loaded");
    rt.unload_network(id).expect("unload");
    (ns, memory)
}

/// CpuRef's Add workload called directly through the Rust traits, `CHAIN` times: the floor.
fn direct_chain(iters: usize) -> f64 {
    let cpu = backplane_ref::CpuRef::new();
    let factory = cpu.create_workload_factory(None).expect("factory");
    let t = f32t(&[16]);
    let layer = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
    let infos = [t.clone(), t.clone()];
    let consts = [backplane_api::ROption::RNone, backplane_api::ROption::RNone];
    let desc = WorkloadDesc {
        name: RStr::from_str("add"),
        layer: &layer,
        inputs: RSlice::from_slice(&infos),
        outputs: RSlice::from_slice(std::slice::from_ref(&t)),
        constants: RSlice::from_slice(&consts),
    };
    let workloads: Vec<_> = (0..CHAIN)
        .map(|_| factory.create_workload(&desc).expect("workload"))
        .collect();
    let one = vec![1.0f32; 16];
    let (mut a, mut b) = (vec![0f32; 16], vec![0f32; 16]);
    let start = Instant::now();
    for _ in 0..iters {
        for w in &workloads {
            let ins = [
                TensorView::new(&t, backplane_api::bytemuck::cast_slice(&a)),
                TensorView::new(&t, backplane_api::bytemuck::cast_slice(&one)),
            ];
            w.execute(
                &ins,
                &mut [TensorViewMut::new(
                    &t,
                    backplane_api::bytemuck::cast_slice_mut(&mut b),
                )],
            )
            .expect("execute");
            std::mem::swap(&mut a, &mut b);
        }
    }
    start.elapsed().as_nanos() as f64 / iters as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let plugin = PathBuf::from(arg("--plugin").expect("--plugin path/to/libbackplane_ref.so"));
    let rounds: usize = arg("--rounds").map_or(7, |r| r.parse().expect("--rounds N"));
    let dir = std::path::absolute("target/bench-dispatch/plugins").expect("path");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::copy(&plugin, dir.join("Backplane_CpuRef_backend.so")).expect("copy plugin");
    let builtin = Runtime::with_path_list(CreationOptions::default(), PathSource::None, "");
    let dynamic = Runtime::with_path_list(
        CreationOptions::default().without_builtins(),
        PathSource::Option,
        dir.to_str().expect("UTF-8 path"),
    );
    assert!(
        matches!(
            dynamic.registry().source("CpuRef"),
            Some(backplane::BackendSource::Dynamic { .. })
        ),
        "{}",
        dynamic.report().to_table()
    );

    let (chain, cnn) = (add_chain(), small_cnn());
    let (mut chain_b, mut chain_d, mut cnn_b, mut cnn_d, mut direct) =
        (vec![], vec![], vec![], vec![], vec![]);
    let mut memory = (0, 0);
    for _ in 0..rounds {
        chain_b.push(time_network(&builtin, &chain, 200).0);
        chain_d.push(time_network(&dynamic, &chain, 200).0);
        direct.push(direct_chain(200));
        let (b, m) = time_network(&builtin, &cnn, 30);
        cnn_b.push(b);
        memory = m;
        cnn_d.push(time_network(&dynamic, &cnn, 30).0);
    }
    let (cb, cd, dc) = (
        median(&mut chain_b),
        median(&mut chain_d),
        median(&mut direct),
    );
    let (nb, nd) = (median(&mut cnn_b), median(&mut cnn_d));
    println!("rounds: {rounds} (medians; built-in and plugin alternate)");
    println!(
        "chain of {CHAIN} Add[16]:  built-in {:9.1} us  plugin {:9.1} us  ratio plugin/built-in {:.3}x (target <= 1.05x)",
        cb / 1e3,
        cd / 1e3,
        cd / cb
    );
    println!(
        "  direct trait calls of the same workloads: {:9.1} us",
        dc / 1e3
    );
    println!(
        "  host overhead per workload: built-in {:.0} ns, plugin {:.0} ns (target <= 100 ns)",
        (cb - dc) / CHAIN as f64,
        (cd - dc) / CHAIN as f64
    );
    println!(
        "small CNN (1x3x32x32, 2 conv+relu+pool, fc, softmax): built-in {:9.1} us  plugin {:9.1} us  ratio {:.3}x",
        nb / 1e3,
        nd / 1e3,
        nd / nb
    );
    println!(
        "small CNN memory plan: peak {} bytes, naive sum {} bytes ({:.1}%)",
        memory.0,
        memory.1,
        100.0 * memory.0 as f64 / memory.1 as f64
    );
}
