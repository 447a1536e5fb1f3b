//! The peer benchmark: backplane against onnxruntime (and tract-onnx, behind the `tract`
//! feature) on the models of `scripts/bench_models.py`, in one process, at one thread or at
//! `--threads N`.
//!
//! Run it through `scripts/bench-peers.sh`, which builds everything, makes the models and finds
//! onnxruntime's shared library. The method:
//!
//! 1. Every runtime runs every model once and its output is checked against the model's
//!    `output.npy` (onnxruntime through Python, made when the model was made). A runtime that
//!    fails or disagrees is reported and left out of the timing; nothing is timed unchecked.
//! 2. Rounds (`--rounds`, at least 5): in each round every runtime runs the model repeatedly for
//!    at least `--slice` seconds (at least 3 runs), in an order that rotates from round to round.
//!    A 512³ sgemm on the same threads, every round, gives the machine's practical peak.
//!    Each slice starts with the upper vector state cleared ([`clean_vector_state`]), so that
//!    one runtime's AVX-512 code does not slow the next one's SSE code on the same thread.
//! 3. Per runtime: the median of its round medians. Ratios (to onnxruntime, and unfused to
//!    fused CpuFast) are taken within each round and their median is reported, so that a slow
//!    round on a shared machine moves both sides of a ratio together.
//!
//! Threads (`--threads N`, default 1): onnxruntime gets N intra-op threads (one inter-op
//! thread, sequential execution); CpuFast gets the per-network backend option `Threads=N`
//! (Backend API 1.1), which wins over `ACME_CPUFAST_THREADS`; the sgemm peak splits its rows
//! between N threads as CpuFast's GEMM does. CpuRef and tract-onnx have no thread setting
//! and run on one thread whatever N is; the report says so.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    rc::Rc,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};
use backplane::{
    CreationOptions, InputTensor, NetworkId, OptimizerOptions, OutputTensor, Runtime,
    network::Network, npy, onnx, paths::PathSource,
};
use backplane_api::TensorInfo;
use clap::Parser;

/// Command-line options.
#[derive(Parser, Debug)]
#[command(about = "backplane against onnxruntime and tract-onnx, at 1 or N threads, in one run")]
struct Args {
    /// Models from scripts/bench_models.py: one folder per model holding model.onnx, input.npy,
    /// output.npy and meta.json.
    #[arg(long, default_value = "target/bench-models")]
    models: PathBuf,
    /// The CpuFast plugin as cargo built it (libacme_cpufast.so); it is staged under its
    /// installed name in a private directory.
    #[arg(long)]
    cpufast: PathBuf,
    /// onnxruntime's shared library (libonnxruntime.so.*), loaded at run time.
    #[arg(long)]
    onnxruntime: PathBuf,
    /// Timing rounds.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Seconds each runtime runs a model in each round.
    #[arg(long, default_value_t = 1.0)]
    slice: f64,
    /// Only these models (comma-separated folder names).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Also write every measurement as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Threads for the runtimes that have a setting: onnxruntime's intra-op threads, CpuFast's
    /// backend option `Threads`, and the sgemm peak. CpuRef and tract-onnx stay on one thread.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    threads: u16,
}

impl Args {
    /// [`Args::threads`] as a count.
    fn threads(&self) -> usize {
        usize::from(self.threads)
    }
}

/// What `scripts/bench_models.py` records of a model.
struct Model {
    name: String,
    dir: PathBuf,
    macs: f64,
    input_name: String,
    input_shape: Vec<u32>,
    input: Vec<f32>,
    reference: Vec<f32>,
}

impl Model {
    fn load(dir: &Path) -> Result<Self> {
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .context("model folder name is not UTF-8")?
            .to_owned();
        let meta: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("meta.json"))
                .with_context(|| format!("{}: no meta.json", dir.display()))?,
        )?;
        let (input_shape, input) = npy::read_f32(&dir.join("input.npy"))?;
        let (_, reference) = npy::read_f32(&dir.join("output.npy"))?;
        Ok(Self {
            macs: meta["macs"].as_f64().context("meta.json: no macs")?,
            input_name: meta["input"]
                .as_str()
                .context("meta.json: no input")?
                .to_owned(),
            name,
            dir: dir.to_owned(),
            input_shape,
            input,
            reference,
        })
    }

    fn onnx_path(&self) -> PathBuf {
        self.dir.join("model.onnx")
    }
}

/// One way of running one model.
trait Runner {
    /// Runs once (what is timed).
    fn run(&mut self) -> Result<()>;
    /// Runs once and returns the output (what is checked).
    fn run_and_read(&mut self) -> Result<Vec<f32>>;
}

/// A network loaded in a backplane runtime.
struct Backplane {
    runtime: Rc<Runtime>,
    id: NetworkId,
    input_name: String,
    input_info: TensorInfo,
    input: Vec<u8>,
    output_name: String,
    output_info: TensorInfo,
    output: Vec<u8>,
    layers: BTreeMap<String, usize>,
}

impl Backplane {
    /// Optimises `network` for `preferences` and loads it, passing `backend_options` (each
    /// `ID:KEY=VALUE`, as `--backend-option` takes them) to the backends.
    fn load(
        runtime: &Rc<Runtime>,
        network: &Network,
        model: &Model,
        preferences: &[&str],
        fuse: bool,
        backend_options: &[String],
    ) -> Result<Self> {
        let mut optimizer = OptimizerOptions {
            no_subgraph_optimization: !fuse,
            ..OptimizerOptions::default()
        };
        for spec in backend_options {
            optimizer
                .add_backend_option(spec)
                .map_err(anyhow::Error::msg)?;
        }
        let optimized = runtime.optimize(network, preferences, &optimizer)?;
        let mut layers = BTreeMap::new();
        for a in optimized.assignments() {
            *layers.entry(a.backend.clone()).or_default() += 1;
        }
        let id = runtime.load_network(&optimized)?;
        let inputs = network.inputs();
        let outputs = network.outputs();
        ensure!(
            inputs.len() == 1 && outputs.len() == 1,
            "{}: one input and one output expected",
            model.name
        );
        let (input_name, input_info) = inputs[0];
        let (output_name, output_info) = outputs[0];
        Ok(Self {
            runtime: Rc::clone(runtime),
            id,
            input_name: input_name.to_owned(),
            input_info: input_info.clone(),
            input: model.input.iter().flat_map(|v| v.to_le_bytes()).collect(),
            output_name: output_name.to_owned(),
            output: vec![0; output_info.num_bytes().context("output too large")?],
            output_info: output_info.clone(),
            layers,
        })
    }
}

impl Runner for Backplane {
    fn run(&mut self) -> Result<()> {
        let inputs = [InputTensor {
            name: &self.input_name,
            info: &self.input_info,
            data: &self.input,
        }];
        let mut outputs = [OutputTensor {
            name: &self.output_name,
            info: &self.output_info,
            data: &mut self.output,
        }];
        self.runtime.enqueue(self.id, &inputs, &mut outputs)?;
        Ok(())
    }

    fn run_and_read(&mut self) -> Result<Vec<f32>> {
        self.run()?;
        Ok(self
            .output
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

impl Drop for Backplane {
    fn drop(&mut self) {
        if let Err(e) = self.runtime.unload_network(self.id) {
            eprintln!("unloading a network: {e}");
        }
    }
}

/// An onnxruntime session: CPU provider, `threads` intra-op threads and one inter-op thread,
/// sequential execution, every graph optimisation.
struct OnnxRuntime {
    session: ort::session::Session,
    shape: Vec<i64>,
    input: Vec<f32>,
}

impl OnnxRuntime {
    fn load(env: &ort::environment::Environment, model: &Model, threads: usize) -> Result<Self> {
        // The builder's errors carry the builder, which is not `Send`: keep only the text.
        let text = |e: ort::Error<ort::session::builder::SessionBuilder>| {
            anyhow::anyhow!("{}: {e}", model.name)
        };
        let session = ort::session::Session::builder(env)?
            .with_optimization_level(ort::session::builder::GraphOptimizationLevel::Level3)
            .map_err(text)?
            .with_intra_threads(threads)
            .map_err(text)?
            .with_inter_threads(1)
            .map_err(text)?
            .with_parallel_execution(false)
            .map_err(text)?
            .commit_from_file(model.onnx_path())?;
        Ok(Self {
            session,
            shape: model.input_shape.iter().map(|&d| i64::from(d)).collect(),
            input: model.input.clone(),
        })
    }

    /// Runs once; returns the output if `read`.
    fn infer(&mut self, read: bool) -> Result<Option<Vec<f32>>> {
        let input = ort::value::TensorRef::from_array_view((self.shape.clone(), &self.input[..]))?;
        let outputs = self.session.run(ort::inputs![input])?;
        Ok(match read {
            true => Some(outputs[0].try_extract_tensor::<f32>()?.1.to_vec()),
            false => None,
        })
    }
}

impl Runner for OnnxRuntime {
    fn run(&mut self) -> Result<()> {
        self.infer(false).map(drop)
    }

    fn run_and_read(&mut self) -> Result<Vec<f32>> {
        Ok(self.infer(true)?.unwrap_or_default())
    }
}

/// tract-onnx: the model with its input shape fixed, decluttered and optimised.
#[cfg(feature = "tract")]
struct Tract {
    plan: std::sync::Arc<tract_onnx::prelude::TypedRunnableModel>,
    input: tract_onnx::prelude::Tensor,
}

#[cfg(feature = "tract")]
impl Tract {
    fn load(model: &Model) -> Result<Self> {
        use tract_onnx::prelude::*;
        let shape: Vec<usize> = model.input_shape.iter().map(|&d| d as usize).collect();
        let plan = tract_onnx::onnx()
            .model_for_path(model.onnx_path())?
            .with_input_fact(0, f32::fact(&shape).into())?
            .into_optimized()?
            .into_runnable()?;
        Ok(Self {
            plan,
            input: Tensor::from_shape(&shape, &model.input)?,
        })
    }
}

#[cfg(feature = "tract")]
impl Runner for Tract {
    fn run(&mut self) -> Result<()> {
        use tract_onnx::prelude::*;
        self.plan.run(tvec!(self.input.clone().into_tvalue()))?;
        Ok(())
    }

    fn run_and_read(&mut self) -> Result<Vec<f32>> {
        use tract_onnx::prelude::*;
        let out = self.plan.run(tvec!(self.input.clone().into_tvalue()))?;
        Ok(out[0]
            .to_plain_array_view::<f32>()?
            .iter()
            .copied()
            .collect())
    }
}

/// An sgemm of `n`×`n`×`n` through faer (the kernel under CpuFast's convolutions) on
/// `threads` threads: the practical peak of this machine for this code. With more than one
/// thread the rows of `C` are split between scoped threads, each running faer sequentially,
/// as CpuFast's GEMM does (`plugins-example/acme-cpufast/src/gemm.rs`).
struct Sgemm {
    a: faer::Mat<f32>,
    b: faer::Mat<f32>,
    c: faer::Mat<f32>,
    threads: usize,
}

impl Sgemm {
    const N: usize = 512;

    fn new(threads: usize) -> Self {
        let n = Self::N;
        let fill = |seed: usize| {
            faer::Mat::from_fn(n, n, |i, j| {
                ((i * 31 + j * 17 + seed) % 97) as f32 / 97.0 - 0.5
            })
        };
        Self {
            a: fill(1),
            b: fill(2),
            c: faer::Mat::zeros(n, n),
            threads: threads.max(1),
        }
    }

    fn flops() -> f64 {
        2.0 * (Self::N as f64).powi(3)
    }
}

impl Runner for Sgemm {
    fn run(&mut self) -> Result<()> {
        let multiply = |c: faer::MatMut<'_, f32>, a: faer::MatRef<'_, f32>| {
            faer::linalg::matmul::matmul(
                c,
                faer::Accum::Replace,
                a,
                self.b.as_ref(),
                1.0,
                faer::Par::Seq,
            );
        };
        if self.threads == 1 {
            multiply(self.c.as_mut(), self.a.as_ref());
            return Ok(());
        }
        let rows = Self::N.div_ceil(self.threads);
        let a = self.a.as_ref();
        let mut rest = self.c.as_mut();
        std::thread::scope(|s| {
            let mut start = 0;
            while start < Self::N {
                let take = rows.min(Self::N - start);
                let (mine, others) = rest.split_at_row_mut(take);
                rest = others;
                let a_rows = a.subrows(start, take);
                s.spawn(move || multiply(mine, a_rows));
                start += take;
            }
        });
        Ok(())
    }

    fn run_and_read(&mut self) -> Result<Vec<f32>> {
        self.run()?;
        Ok(self
            .c
            .col_iter()
            .flat_map(|c| c.iter().copied().collect::<Vec<_>>())
            .collect())
    }
}

/// The largest `|got - want|` and whether every element is within `atol + rtol·|want|`.
fn compare(got: &[f32], want: &[f32]) -> Result<f32> {
    const RTOL: f32 = 1e-4;
    const ATOL: f32 = 1e-5;
    ensure!(
        got.len() == want.len(),
        "{} output values, the reference has {}",
        got.len(),
        want.len()
    );
    let mut worst = 0f32;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let d = (g - w).abs();
        if d.is_nan() || d > ATOL + RTOL * w.abs() {
            bail!("output[{i}] is {g}, the reference {w} (rtol {RTOL}, atol {ATOL})");
        }
        worst = worst.max(d);
    }
    Ok(worst)
}

/// Clears the calling thread's AVX upper state (`vzeroupper`), so that each runtime starts its
/// slice as it would in a process of its own: faer's AVX-512 kernels (the sgemm peak here)
/// return with it dirty, and SSE code compiled for the default x86-64 target (CpuRef) then runs
/// up to 2.4× slower on the same thread ([`backplane_api::clean_vector_state`]).
fn clean_vector_state() {
    backplane_api::clean_vector_state();
}

/// Runs `runner` for at least `slice` and 3 runs; returns each run's time.
fn time_slice(runner: &mut dyn Runner, slice: Duration) -> Result<Vec<f64>> {
    clean_vector_state();
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 3 || start.elapsed() < slice {
        let t = Instant::now();
        runner.run()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(times)
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn geomean(values: &[f64]) -> f64 {
    (values.iter().map(|v| v.ln()).sum::<f64>() / values.len() as f64).exp()
}

/// The runtimes compared, in table order.
const CPUFAST: &str = "CpuFast+CpuRef";
const UNFUSED: &str = "CpuFast+CpuRef unfused";
const CPUREF: &str = "CpuRef";
const ORT: &str = "onnxruntime";
const TRACT: &str = "tract-onnx";
const SGEMM: &str = "sgemm";

/// The threads `runtime` runs on when the benchmark is given `threads`: CpuRef and tract-onnx
/// have no thread setting here and stay on one.
fn runtime_threads(runtime: &str, threads: usize) -> usize {
    match runtime {
        CPUREF | TRACT => 1,
        _ => threads,
    }
}

/// How each runtime gets its threads, for the report.
fn thread_settings(threads: usize) -> Vec<(&'static str, String)> {
    let mut settings = vec![
        (
            CPUFAST,
            format!(
                "{threads} (backend option CpuFast:Threads={threads}, over ACME_CPUFAST_THREADS)"
            ),
        ),
        (
            ORT,
            format!("{threads} (intra-op {threads}, inter-op 1, sequential execution)"),
        ),
        (CPUREF, "1 (single-threaded: no thread setting)".to_owned()),
    ];
    if cfg!(feature = "tract") {
        settings.push((
            TRACT,
            "1 (single-threaded: tract's default, no executor set)".to_owned(),
        ));
    }
    settings
}

/// One model's results: per runtime, the round medians in ms.
struct Measured {
    model: String,
    macs: f64,
    rounds: BTreeMap<&'static str, Vec<f64>>,
    max_diff: BTreeMap<&'static str, f32>,
    failures: BTreeMap<&'static str, String>,
    layers: BTreeMap<&'static str, BTreeMap<String, usize>>,
}

impl Measured {
    fn round_ratios(&self, num: &str, den: &str) -> Option<Vec<f64>> {
        let (a, b) = (self.rounds.get(num)?, self.rounds.get(den)?);
        Some(a.iter().zip(b).map(|(x, y)| x / y).collect())
    }
}

fn bench_model(
    model: &Model,
    env: &ort::environment::Environment,
    fast: &Rc<Runtime>,
    reference: &Rc<Runtime>,
    args: &Args,
) -> Result<Measured> {
    let mut m = Measured {
        model: model.name.clone(),
        macs: model.macs,
        rounds: BTreeMap::new(),
        max_diff: BTreeMap::new(),
        failures: BTreeMap::new(),
        layers: BTreeMap::new(),
    };
    let mut runners: Vec<(&'static str, Box<dyn Runner>)> = Vec::new();
    let mut add = |name: &'static str, made: Result<Box<dyn Runner>>| match made {
        Ok(r) => runners.push((name, r)),
        Err(e) => {
            m.failures.insert(name, format!("{e:#}"));
        }
    };
    // One import serves the three backplane configurations.
    let mut options = onnx::ImportOptions::default();
    options
        .input_shapes
        .insert(model.input_name.clone(), model.input_shape.clone());
    let network = onnx::import_file(&model.onnx_path(), &options);
    // CpuFast's threads for this network: the option wins over ACME_CPUFAST_THREADS.
    let cpufast_threads = [format!("CpuFast:Threads={}", args.threads)];
    for (name, rt, prefs, fuse, backend_options) in [
        (
            CPUFAST,
            fast,
            &["CpuFast", "CpuRef"][..],
            true,
            &cpufast_threads[..],
        ),
        (
            UNFUSED,
            fast,
            &["CpuFast", "CpuRef"][..],
            false,
            &cpufast_threads[..],
        ),
        (CPUREF, reference, &["CpuRef"][..], true, &[][..]),
    ] {
        let loaded = match &network {
            Ok(network) => Backplane::load(rt, network, model, prefs, fuse, backend_options),
            Err(e) => Err(anyhow::anyhow!("importing {}: {e}", model.name)),
        };
        let loaded = loaded.map(|b| {
            m.layers.insert(name, b.layers.clone());
            Box::new(b) as Box<dyn Runner>
        });
        add(name, loaded);
    }
    add(
        ORT,
        OnnxRuntime::load(env, model, args.threads()).map(|r| Box::new(r) as Box<dyn Runner>),
    );
    #[cfg(feature = "tract")]
    add(
        TRACT,
        Tract::load(model).map(|r| Box::new(r) as Box<dyn Runner>),
    );
    // Check every output before any timing.
    let mut checked: Vec<(&'static str, Box<dyn Runner>)> = Vec::new();
    for (name, mut runner) in runners {
        clean_vector_state();
        let verdict = runner
            .run_and_read()
            .and_then(|out| compare(&out, &model.reference));
        match verdict {
            Ok(diff) => {
                m.max_diff.insert(name, diff);
                checked.push((name, runner));
            }
            Err(e) => {
                m.failures.insert(name, format!("{e:#}"));
            }
        }
    }
    checked.push((SGEMM, Box::new(Sgemm::new(args.threads()))));
    let slice = Duration::from_secs_f64(args.slice);
    for round in 0..args.rounds {
        let n = checked.len();
        for k in 0..n {
            let (name, runner) = &mut checked[(round + k) % n];
            let times = time_slice(runner.as_mut(), slice)?;
            m.rounds.entry(name).or_default().push(median(&times));
        }
    }
    Ok(m)
}

fn stage_cpufast(file: &Path) -> Result<PathBuf> {
    let file = std::path::absolute(file)?;
    ensure!(file.is_file(), "--cpufast {}: no such file", file.display());
    let dir = std::env::temp_dir().join(format!("backplane-bench-peers-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let link = dir.join("Acme_CpuFast_backend.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&file, &link)?;
    Ok(dir)
}

fn main() -> Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    ensure!(args.rounds >= 1, "--rounds must be at least 1");
    let env = ort::init_from(&args.onnxruntime)
        .map_err(|e| anyhow::anyhow!("loading {}: {e}", args.onnxruntime.display()))?
        .build()
        .map_err(|e| anyhow::anyhow!("onnxruntime environment: {e}"))?;
    let staged = stage_cpufast(&args.cpufast)?;
    let fast = Rc::new(Runtime::with_path_list(
        CreationOptions::default(),
        PathSource::Option,
        staged.to_str().context("temporary path is not UTF-8")?,
    ));
    ensure!(
        fast.registry().get("CpuFast").is_some(),
        "CpuFast did not register from {}:\n{}",
        args.cpufast.display(),
        fast.report().to_table()
    );
    // CpuRef alone: the built-in backends and no plugin directory.
    let reference = Rc::new(Runtime::with_path_list(
        CreationOptions::default(),
        PathSource::Option,
        "",
    ));
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&args.models)
        .with_context(|| format!("reading {}", args.models.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.onnx").is_file())
        .filter(|p| {
            args.only.is_empty()
                || p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| args.only.iter().any(|o| o == n))
        })
        .collect();
    dirs.sort();
    ensure!(!dirs.is_empty(), "no models in {}", args.models.display());
    let mut all = Vec::new();
    for dir in &dirs {
        let model = Model::load(dir)?;
        eprintln!("{}: checking, then {} rounds", model.name, args.rounds);
        all.push(bench_model(&model, &env, &fast, &reference, &args)?);
    }
    let _ = std::fs::remove_dir_all(&staged);
    print_report(&all, &args)?;
    Ok(())
}

/// The CPU's model name, as the kernel reports it.
fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned())
}

fn print_report(all: &[Measured], args: &Args) -> Result<()> {
    let peak: Vec<f64> = all
        .iter()
        .flat_map(|m| m.rounds.get(SGEMM).into_iter().flatten())
        .map(|ms| Sgemm::flops() / (ms * 1e-3) / 1e9)
        .collect();
    let peak = median(&peak);
    let threads = args.threads();
    let plural = |n: usize| if n == 1 { "thread" } else { "threads" };
    println!(
        "backplane peer benchmark: {} rounds, each runtime >= {:.1} s per round, --threads {threads}; {}",
        args.rounds,
        args.slice,
        cpu_name()
    );
    println!("threads per runtime:");
    for (name, how) in thread_settings(threads) {
        println!("  {name:<24} {how}");
    }
    println!(
        "practical peak: sgemm {n}x{n}x{n} through faer, {threads} {}, median {peak:.1} GFLOP/s",
        plural(threads),
        n = Sgemm::N
    );
    println!();
    println!(
        "{:<20} {:>7}  {:<24} {:>3} {:>9} {:>7} {:>8} {:>6} {:>9}  layers",
        "model", "MMAC", "runtime", "thr", "ms", "x ORT", "GFLOP/s", "%peak", "max|diff|"
    );
    let mut json_models = Vec::new();
    let mut to_ort: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut fusion = Vec::new();
    for m in all {
        let mut rows = Vec::new();
        for name in [CPUFAST, UNFUSED, CPUREF, ORT, TRACT] {
            if let Some(why) = m.failures.get(name) {
                println!(
                    "{:<20} {:>7.1}  {:<24} {:>3} not timed: {why}",
                    m.model,
                    m.macs / 1e6,
                    name,
                    runtime_threads(name, threads)
                );
                rows.push(serde_json::json!({ "runtime": name, "error": why }));
                continue;
            }
            let Some(rounds) = m.rounds.get(name) else {
                continue;
            };
            let ms = median(rounds);
            let ratio = m.round_ratios(name, ORT).map(|r| median(&r));
            if let Some(r) = ratio
                && name != ORT
            {
                to_ort.entry(name).or_default().push(r);
            }
            let gflops = 2.0 * m.macs / (ms * 1e-3) / 1e9;
            let layers = m.layers.get(name).map(|l| {
                l.iter()
                    .map(|(b, n)| format!("{b}:{n}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            });
            println!(
                "{:<20} {:>7.1}  {:<24} {:>3} {:>9.3} {:>7} {:>8.2} {:>5.1}% {:>9.1e}  {}",
                m.model,
                m.macs / 1e6,
                name,
                runtime_threads(name, threads),
                ms,
                ratio.map_or("-".to_owned(), |r| format!("{r:.2}")),
                gflops,
                100.0 * gflops / peak,
                m.max_diff.get(name).copied().unwrap_or(f32::NAN),
                layers.unwrap_or_default()
            );
            rows.push(serde_json::json!({
                "runtime": name,
                "threads": runtime_threads(name, threads),
                "median_ms": ms,
                "round_medians_ms": rounds,
                "ratio_to_onnxruntime": ratio,
                "gflops": gflops,
                "max_abs_diff": m.max_diff.get(name),
                "layers_per_backend": m.layers.get(name),
            }));
        }
        let gain = m.round_ratios(UNFUSED, CPUFAST).map(|r| median(&r));
        if let Some(g) = gain {
            fusion.push((m.model.clone(), g));
        }
        json_models.push(serde_json::json!({
            "model": m.model,
            "macs": m.macs,
            "runtimes": rows,
            "fusion_gain": gain,
        }));
    }
    println!();
    println!(
        "geometric mean over the models of the per-model ratio to onnxruntime on {threads} {} \
         (lower is faster):",
        plural(threads)
    );
    let mut json_geo = serde_json::Map::new();
    for (name, target) in [
        (CPUFAST, Some(1.0)),
        (UNFUSED, None),
        (CPUREF, Some(10.0)),
        (TRACT, None),
    ] {
        let Some(r) = to_ort.get(name) else { continue };
        let g = geomean(r);
        let own = runtime_threads(name, threads);
        // The targets compare like with like: a one-thread runtime against a multi-threaded
        // onnxruntime is reported, not judged.
        let verdict = match target {
            Some(_) if own != threads => format!("  (on {own} {}: no target)", plural(own)),
            Some(t) if g <= t => format!("  (target <= {t:.1}x: met)"),
            Some(t) => format!("  (target <= {t:.1}x: NOT met)"),
            None if own != threads => format!("  (on {own} {})", plural(own)),
            None => String::new(),
        };
        println!("  {name:<24} {g:.2}x over {} models{verdict}", r.len());
        json_geo.insert(name.to_owned(), serde_json::json!(g));
    }
    println!(
        "fusion: unfused / fused CpuFast+CpuRef time, same model, same round (target >= 1.3x):"
    );
    for (model, g) in &fusion {
        println!(
            "  {model:<20} {g:.2}x{}",
            if *g >= 1.3 { "" } else { "  (below 1.3x)" }
        );
    }
    if let Some(file) = &args.json {
        let settings: serde_json::Map<String, serde_json::Value> = thread_settings(threads)
            .into_iter()
            .map(|(name, how)| {
                let n = runtime_threads(name, threads);
                (
                    name.to_owned(),
                    serde_json::json!({ "threads": n, "setting": how }),
                )
            })
            .collect();
        let report = serde_json::json!({
            "cpu": cpu_name(),
            "threads": threads,
            "threads_per_runtime": settings,
            "rounds": args.rounds,
            "slice_s": args.slice,
            "sgemm_n": Sgemm::N,
            "sgemm_threads": threads,
            "sgemm_gflops": peak,
            "models": json_models,
            "geomean_ratio_to_onnxruntime": json_geo,
        });
        std::fs::write(file, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("writing {}", file.display()))?;
    }
    Ok(())
}
