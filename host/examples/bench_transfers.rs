//! Memory-boundary benchmark driver (run by `scripts/bench-transfers.sh`).
//!
//! For each device-memory plugin given (Backend API 1.3) and each tensor size, the network
//! `x -> ReLU -> y` with the ReLU on the device backend: the host crosses two boundaries per
//! run (the input in, by import or copy, and the output out). Prints the copies and imports
//! counted per run (`Runtime::network_transfers`, which must equal the partition's
//! boundaries), the mean time of each boundary (its MemCopy unit, from the profile, which
//! fences every device workload so that the copies are timed alone), and the whole run against
//! the same network on CpuRef alone.
//!
//! Usage: `bench_transfers --plugin ID=FILE [--plugin ID=FILE ...] [--runs N]`.

use std::{path::PathBuf, time::Instant};

use backplane::{
    CreationOptions, InputTensor, NetworkBuilder, OptimizerOptions, OutputTensor, Runtime,
    plugins::paths::PathSource,
};
use backplane_api::{
    ActivationDescriptor, ActivationFunction, DataType, LayerDescriptor, LayerKind, TensorInfo,
};

fn main() {
    let mut plugins: Vec<(String, PathBuf)> = Vec::new();
    let mut runs = 200usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--plugin" => {
                let spec = args.next().expect("--plugin ID=FILE");
                let (id, file) = spec.split_once('=').expect("--plugin ID=FILE");
                plugins.push((id.to_owned(), PathBuf::from(file)));
            }
            "--runs" => runs = args.next().and_then(|n| n.parse().ok()).expect("--runs N"),
            other => panic!("unknown argument {other}"),
        }
    }
    let dir = tempfile::tempdir().expect("temp dir");
    for (id, file) in &plugins {
        std::fs::copy(file, dir.path().join(format!("Bench_{id}_backend.so"))).expect("copy");
    }
    let rt = Runtime::with_path_list(
        CreationOptions::default(),
        PathSource::Option,
        dir.path().to_str().expect("utf-8 path"),
    );
    println!(
        "{:<10} {:>10} {:>8} {:>8} {:>12} {:>12} {:>12} {:>12}",
        "backend", "bytes", "copies", "imports", "in us", "out us", "run us", "CpuRef us"
    );
    for (id, _) in &plugins {
        if !rt.registry().is_registered(id) {
            println!("{id:<10} not registered: {:?}", rt.report().candidates);
            continue;
        }
        for elements in [16u32, 1024, 65_536, 1 << 20] {
            let info = TensorInfo::new(&[elements], DataType::Float32);
            let mut n = NetworkBuilder::new();
            let x = n.add_input("x", info.clone()).expect("input");
            let relu = LayerDescriptor::Activation(ActivationDescriptor {
                function: ActivationFunction::ReLU,
                a: 0.0,
                b: 0.0,
            });
            let r = n.add_layer("relu", relu, &[x]).expect("relu");
            n.add_output("y", r).expect("output");
            let network = n.build().expect("network");
            let xb: Vec<u8> = (0..elements)
                .flat_map(|i| ((i % 7) as f32 - 3.0).to_le_bytes())
                .collect();
            let mut out = vec![0u8; xb.len()];
            let time = |prefs: &[&str], profile: bool, out: &mut Vec<u8>| {
                let opt = rt
                    .optimize(&network, prefs, &OptimizerOptions::default())
                    .expect("optimize");
                let id = rt.load_network(&opt).expect("load");
                rt.set_profiling(id, profile);
                let mut run = || {
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
                            data: out,
                        }],
                    )
                    .expect("enqueue")
                };
                for _ in 0..10 {
                    run();
                }
                let before = rt.network_transfers(id).expect("loaded");
                rt.set_profiling(id, profile);
                let start = Instant::now();
                for _ in 0..runs {
                    run();
                }
                let us = start.elapsed().as_secs_f64() * 1e6 / runs as f64;
                let after = rt.network_transfers(id).expect("loaded");
                let copies = (after.copies - before.copies) as f64 / runs as f64;
                let imports = (after.imports - before.imports) as f64 / runs as f64;
                let units: Vec<f64> = rt
                    .profile(id)
                    .unwrap_or_default()
                    .iter()
                    .filter(|p| p.kind == LayerKind::MemCopy)
                    .map(|p| p.total.as_secs_f64() * 1e6 / p.runs.max(1) as f64)
                    .collect();
                rt.unload_network(id).expect("unload");
                (us, copies, imports, units)
            };
            let (_, copies, imports, units) = time(&[id.as_str(), "CpuRef"], true, &mut out);
            let (run_us, _, _, _) = time(&[id.as_str(), "CpuRef"], false, &mut out);
            let (host_us, _, _, _) = time(&["CpuRef"], false, &mut out);
            println!(
                "{id:<10} {:>10} {copies:>8.1} {imports:>8.1} {:>12.1} {:>12.1} {run_us:>12.1} {host_us:>12.1}",
                elements * 4,
                units.first().copied().unwrap_or(f64::NAN),
                units.get(1).copied().unwrap_or(f64::NAN),
            );
        }
    }
}
