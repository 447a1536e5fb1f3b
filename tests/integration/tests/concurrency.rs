//! Many threads on one runtime: 8 threads each run 1,000 enqueues over two networks on a mix
//! of built-in and dynamic backends, while two more threads query the registry and the
//! report and load, run and unload a third network. Every output must be bit-identical to a
//! single-threaded run, and the whole run is bounded in time so that a deadlock fails the test
//! instead of stalling CI.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        mpsc,
    },
    time::Duration,
};

use backplane::{
    CreationOptions, Network, NetworkId, OptimizerOptions, Runtime, plugins::paths::PathSource,
};
use backplane_api::{ActivationFunction::*, TensorInfo};

use crate::fixtures::{
    PluginDir, bytes, chain, cpufast_plugin, enqueue_single, f32t, lcg, small_cnn,
};

const THREADS: usize = 8;
/// Threads that load, run and unload the third network meanwhile.
const LOADERS: usize = 2;
const ENQUEUES: usize = 1_000;
const INPUTS: usize = 8;
/// Generous: the run takes under a second in a debug build on 2 cores.
const LIMIT: Duration = Duration::from_secs(300);

/// A network with its bindings, its inputs, and their single-threaded outputs (as bytes).
struct Case {
    input: TensorInfo,
    output: TensorInfo,
    xs: Vec<Vec<f32>>,
    expected: Vec<Vec<u8>>,
}

impl Case {
    fn new(rt: &Runtime, id: NetworkId, input: TensorInfo, output: TensorInfo, seed: u32) -> Self {
        let n = input.num_elements().unwrap();
        let xs: Vec<Vec<f32>> = (0..INPUTS).map(|k| lcg(n, seed + k as u32)).collect();
        let expected = xs
            .iter()
            .map(|x| bytes(&enqueue_single(rt, id, &input, x, &output).unwrap()))
            .collect();
        Self {
            input,
            output,
            xs,
            expected,
        }
    }

    /// Runs input `k` on network `id` and compares bit for bit.
    fn check(&self, rt: &Runtime, id: NetworkId, k: usize) {
        let got = enqueue_single(rt, id, &self.input, &self.xs[k], &self.output).unwrap();
        assert!(
            bytes(&got) == self.expected[k],
            "network {id}, input {k}: outputs differ"
        );
    }
}

fn load(rt: &Runtime, net: &Network, prefs: &[&str]) -> (NetworkId, Vec<String>) {
    let opt = rt
        .optimize(net, prefs, &OptimizerOptions::default())
        .unwrap();
    let mut used: Vec<String> = opt
        .assignments()
        .iter()
        .map(|a| a.backend.clone())
        .collect();
    used.sort();
    used.dedup();
    (rt.load_network(&opt).unwrap(), used)
}

/// Everything, on its own thread; returns how many load/run/unload cycles the third thread did.
fn run_all() -> usize {
    let dir = PluginDir::new();
    dir.copy(&cpufast_plugin(), "Acme_CpuFast_backend.so");
    dir.add("valid-gamma", "Test_TestGamma_backend.so");
    let rt = Runtime::with_path_list(CreationOptions::default(), PathSource::Option, dir.as_str());
    assert_eq!(rt.registry().ids(), ["CpuRef", "CpuFast", "TestGamma"]);

    // A: Conv2d + bias + ReLU, fused on CpuFast (dynamic); its Input and Output on CpuRef.
    let (cnn, cnn_in, cnn_out, _, _) = small_cnn();
    let (a, a_on) = load(&rt, &cnn, &["CpuFast", "CpuRef"]);
    assert_eq!(a_on, ["CpuFast", "CpuRef"]);
    // B: ReLU -> ReLU fused by TestGamma (dynamic), Sigmoid handed back to CpuRef (built in).
    let b_net = chain(&[64], &[("r1", ReLU), ("r2", ReLU), ("s", Sigmoid)]);
    let (b, b_on) = load(&rt, &b_net, &["TestGamma", "CpuRef"]);
    assert_eq!(b_on, ["CpuRef", "TestGamma"]);
    // C: loaded and unloaded over and over by the third thread.
    let c_net = chain(&[32], &[("t", TanH), ("r", ReLU)]);
    let (c, _) = load(&rt, &c_net, &["CpuFast", "CpuRef"]);

    let cases = [
        Case::new(&rt, a, cnn_in, cnn_out, 100),
        Case::new(&rt, b, f32t(&[64]), f32t(&[64]), 200),
    ];
    let c_case = Case::new(&rt, c, f32t(&[32]), f32t(&[32]), 300);
    rt.unload_network(c).unwrap();

    let done = AtomicBool::new(false);
    let finished = AtomicUsize::new(0);
    let cycles = std::thread::scope(|s| {
        // Loader threads, each loading, running and unloading its own copy of C.
        let churners: Vec<_> = (0..LOADERS)
            .map(|l| {
                let (rt, done, c_net, c_case) = (&rt, &done, &c_net, &c_case);
                s.spawn(move || {
                    let mut cycles = 0;
                    while !done.load(Ordering::Acquire) {
                        assert_eq!(rt.registry().ids(), ["CpuRef", "CpuFast", "TestGamma"]);
                        let report = rt.report();
                        assert_eq!(report.backends.len(), 3);
                        assert!(report.backends.iter().all(|b| !b.faulted));
                        let (c, _) = load(rt, c_net, &["CpuFast", "CpuRef"]);
                        c_case.check(rt, c, (cycles + l) % INPUTS);
                        rt.unload_network(c).unwrap();
                        cycles += 1;
                    }
                    cycles
                })
            })
            .collect();
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (rt, cases, finished) = (&rt, &cases, &finished);
                s.spawn(move || {
                    for i in 0..ENQUEUES {
                        let which = (t + i) % 2;
                        cases[which].check(rt, [a, b][which], (t * 3 + i) % INPUTS);
                    }
                    finished.fetch_add(1, Ordering::AcqRel);
                })
            })
            .collect();
        for w in workers {
            if let Err(p) = w.join() {
                done.store(true, Ordering::Release);
                std::panic::resume_unwind(p);
            }
        }
        done.store(true, Ordering::Release);
        churners
            .into_iter()
            .map(|c| c.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .sum::<usize>()
    });
    assert_eq!(finished.load(Ordering::Acquire), THREADS);
    rt.unload_network(a).unwrap();
    rt.unload_network(b).unwrap();
    cycles
}

#[test]
fn eight_threads_and_two_loaders_agree_with_one_thread() {
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let cycles = run_all();
        let _ = tx.send(cycles);
    });
    match rx.recv_timeout(LIMIT) {
        Ok(cycles) => {
            worker.join().unwrap();
            assert!(
                cycles >= LOADERS,
                "the loader threads did not complete a cycle each"
            );
            eprintln!(
                "{} enqueues on {THREADS} threads; {LOADERS} threads loaded and unloaded the \
                 third network {cycles} times",
                THREADS * ENQUEUES
            );
        }
        // The sender is gone without a result: the run panicked; show why.
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(worker.join().expect_err("no result, so it panicked"))
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("not finished after {LIMIT:?}: a deadlock or a hang")
        }
    }
}
