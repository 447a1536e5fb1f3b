//! Soak driver (run by `scripts/soak.sh`): many cycles of the whole life of a runtime with
//! dynamic backends, watching resident memory and open file descriptors.
//!
//! One cycle: create a runtime whose backends all come from `--plugins` (no built-ins),
//! optimise and load the model, run it `--inferences` times, unload it, drop the runtime.
//! Every output must be bit-identical to the first cycle's. After `--warmup` cycles the
//! resident set size (`VmRSS`) and the number of open descriptors are taken as the baseline;
//! at the end, RSS may have grown by less than `--max-growth-kib` and the descriptors not at
//! all. Prints one line per `--every` cycles and a final verdict; exits 1 on a failed check.
//!
//! Usage: `soak --plugins DIR --model MODEL.onnx [--cycles 1000] [--warmup 100]`.

use std::{path::PathBuf, process::ExitCode};

use backplane::{
    CreationOptions, InputTensor, Network, OptimizerOptions, OutputTensor, Runtime, npy,
    onnx::{self, ImportOptions},
    plugins::paths::PathSource,
};
use clap::Parser;

/// Command-line options.
#[derive(Parser)]
struct Args {
    /// Directory of installed plugins (every backend of the runtime comes from here).
    #[arg(long)]
    plugins: PathBuf,
    /// The ONNX model to load in every cycle.
    #[arg(long)]
    model: PathBuf,
    /// A model input as `NAME=FILE.npy` (repeatable): fixes its shape and gives its values.
    /// Inputs not given get deterministic values in [-1, 1).
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    inputs: Vec<String>,
    /// Backend preferences.
    #[arg(long, value_delimiter = ',', default_value = "CpuFast,CpuRef")]
    backends: Vec<String>,
    /// Cycles in all.
    #[arg(long, default_value_t = 1000)]
    cycles: usize,
    /// Cycles before the baseline is taken.
    #[arg(long, default_value_t = 100)]
    warmup: usize,
    /// Inferences per cycle.
    #[arg(long, default_value_t = 10)]
    inferences: usize,
    /// Allowed RSS growth after warm-up, in KiB.
    #[arg(long, default_value_t = 1024)]
    max_growth_kib: u64,
    /// Print a line every this many cycles.
    #[arg(long, default_value_t = 100)]
    every: usize,
}

/// This process's resident set size in KiB (`VmRSS` of `/proc/self/status`).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}

/// Open file descriptors of this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

/// One cycle; returns every output of every inference, as bytes.
fn cycle(args: &Args, network: &Network, inputs: &[(String, Vec<u8>)]) -> Vec<Vec<u8>> {
    let dir = args.plugins.to_str().expect("a UTF-8 plugin directory");
    let rt = Runtime::with_path_list(
        CreationOptions::default().without_builtins(),
        PathSource::Option,
        dir,
    );
    let prefs: Vec<&str> = args.backends.iter().map(String::as_str).collect();
    for p in &prefs {
        assert!(
            rt.registry().is_registered(p),
            "backend {p} is not registered:\n{}",
            rt.report().to_table()
        );
    }
    let optimized = rt
        .optimize(network, &prefs, &OptimizerOptions::default())
        .expect("optimize");
    let id = rt.load_network(&optimized).expect("load_network");
    let infos: Vec<_> = network.inputs();
    let outs: Vec<_> = network.outputs();
    let mut results = Vec::new();
    for _ in 0..args.inferences {
        let bound: Vec<InputTensor<'_>> = inputs
            .iter()
            .zip(&infos)
            .map(|((name, data), (_, info))| InputTensor { name, info, data })
            .collect();
        let mut buffers: Vec<Vec<u8>> = outs
            .iter()
            .map(|(_, info)| vec![0; info.num_bytes().expect("sized output")])
            .collect();
        let mut targets: Vec<OutputTensor<'_>> = outs
            .iter()
            .zip(buffers.iter_mut())
            .map(|((name, info), data)| OutputTensor { name, info, data })
            .collect();
        rt.enqueue(id, &bound, &mut targets).expect("enqueue");
        drop(targets);
        results.extend(buffers);
    }
    rt.unload_network(id).expect("unload_network");
    results
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    let mut options = ImportOptions::default();
    let mut given = std::collections::HashMap::new();
    for spec in &args.inputs {
        let (name, file) = spec.split_once('=').expect("--input NAME=FILE.npy");
        let (shape, values) = npy::read_f32(std::path::Path::new(file)).expect("input .npy");
        options.input_shapes.insert(name.to_owned(), shape);
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        given.insert(name.to_owned(), data);
    }
    let network = onnx::import_file(&args.model, &options).expect("import");
    let mut seed = 7u32;
    let inputs: Vec<(String, Vec<u8>)> = network
        .inputs()
        .iter()
        .map(|(name, info)| {
            if let Some(data) = given.remove(*name) {
                return (name.to_string(), data);
            }
            let n = info.num_elements().expect("sized input");
            let data = (0..n)
                .flat_map(|_| {
                    seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    ((seed >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0).to_le_bytes()
                })
                .collect();
            (name.to_string(), data)
        })
        .collect();

    let first = cycle(&args, &network, &inputs);
    let mut baseline = (rss_kib(), open_fds());
    println!("cycle 1: rss {} KiB, {} fds", baseline.0, baseline.1);
    let mut failed = false;
    for c in 2..=args.cycles {
        if cycle(&args, &network, &inputs) != first {
            println!("cycle {c}: outputs differ from cycle 1");
            failed = true;
            break;
        }
        if c == args.warmup {
            baseline = (rss_kib(), open_fds());
            println!(
                "cycle {c}: baseline after warm-up: rss {} KiB, {} fds",
                baseline.0, baseline.1
            );
        } else if c % args.every == 0 {
            println!("cycle {c}: rss {} KiB, {} fds", rss_kib(), open_fds());
        }
    }
    let (rss, fds) = (rss_kib(), open_fds());
    let growth = rss.saturating_sub(baseline.0);
    println!(
        "after {} cycles ({} inferences each): rss {rss} KiB, growth since warm-up {growth} KiB \
         (limit {} KiB); fds {fds} (baseline {})",
        args.cycles, args.inferences, args.max_growth_kib, baseline.1
    );
    if growth >= args.max_growth_kib {
        println!("FAIL: resident memory grew by {growth} KiB");
        failed = true;
    }
    if fds > baseline.1 {
        println!(
            "FAIL: open file descriptors grew from {} to {fds}",
            baseline.1
        );
        failed = true;
    }
    if failed {
        ExitCode::FAILURE
    } else {
        println!("PASS");
        ExitCode::SUCCESS
    }
}
