//! `backplane`: the command-line front end of the backplane host.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use backplane::{
    CreationOptions, Runtime, TrustPolicy, inspect, install, paths::PathSource, trust,
};
use clap::{Args, Parser, Subcommand};

/// backplane: a Rust inference host with pluggable backends.
///
/// Logs go to stderr; set RUST_LOG (for example RUST_LOG=info) to see them.
#[derive(Parser, Debug)]
#[command(name = "backplane", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Discover backends and print the discovery report (paths, every candidate, backends).
    Backends(BackendsArgs),
    /// Run an ONNX model across the registered backends.
    Run(RunArgs),
    /// Inspect one plugin file: symbols, id, version, compatibility, capabilities, layer support.
    Inspect {
        /// The shared object to inspect (any file name).
        file: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Install a built cdylib as <Vendor>_<Name>_backend.so.<M.m.p> with .so, .so.M, .so.M.m links.
    Install {
        /// The built library (for example target/release/libmy_backend.so).
        file: PathBuf,
        /// The directory to install into (created if missing).
        #[arg(long)]
        dir: PathBuf,
        /// Vendor name (default: the metadata embedded by export_backend!).
        #[arg(long)]
        vendor: Option<String>,
        /// Release version M.m.p (default: the plugin crate's version embedded by export_backend!).
        #[arg(long)]
        release: Option<String>,
    },
}

/// Options shared by commands that discover backends.
#[derive(Args, Debug)]
struct DiscoveryArgs {
    /// Search this directory for plugins (repeatable; replaces DYNAMIC_BACKEND_PATHS and the
    /// build-time default). Relative paths are taken from the current directory.
    #[arg(long = "path", value_name = "DIR")]
    paths: Vec<PathBuf>,
    /// Register no built-in backend.
    #[arg(long)]
    no_builtin: bool,
    /// Load only files with this SHA-256 digest (hex; repeatable).
    #[arg(long = "pin-sha256", value_name = "HEX")]
    pins: Vec<String>,
    /// Do not refuse group- or world-writable plugin files and directories.
    #[arg(long)]
    allow_insecure_permissions: bool,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// The ONNX model.
    model: PathBuf,
    #[command(flatten)]
    discovery: DiscoveryArgs,
    /// Backend preferences, first preferred first (default: every registered plugin, then CpuRef).
    #[arg(long, value_delimiter = ',')]
    backends: Vec<String>,
    /// An input as NAME=FILE.npy (repeatable). Its shape also fixes the model's symbolic
    /// dimensions. Inputs not given get seeded random data of the model's shape.
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    inputs: Vec<String>,
    /// Write one <output>.npy per model output into this directory.
    #[arg(long)]
    output_dir: Option<PathBuf>,
    /// Print which backend runs each layer and why.
    #[arg(long)]
    explain: bool,
    /// Write the optimized network as a Graphviz graph.
    #[arg(long, value_name = "FILE")]
    dot: Option<PathBuf>,
    /// Print output shapes and a short summary as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct BackendsArgs {
    #[command(flatten)]
    discovery: DiscoveryArgs,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

impl DiscoveryArgs {
    fn runtime(&self) -> Result<Runtime> {
        let mut options = CreationOptions {
            register_builtins: !self.no_builtin,
            ..CreationOptions::default()
        };
        let mut trust = TrustPolicy {
            check_permissions: !self.allow_insecure_permissions,
            pinned_sha256: None,
        };
        if !self.pins.is_empty() {
            let pins = self
                .pins
                .iter()
                .map(|h| {
                    trust::parse_sha256(h)
                        .with_context(|| format!("--pin-sha256 {h:?} is not 64 hex digits"))
                })
                .collect::<Result<Vec<_>>>()?;
            trust.pinned_sha256 = Some(pins);
        }
        options.trust = trust;
        if self.paths.is_empty() {
            return Ok(Runtime::new(options));
        }
        let mut list = Vec::new();
        for p in &self.paths {
            let abs = std::path::absolute(p).with_context(|| format!("--path {}", p.display()))?;
            let s = abs
                .to_str()
                .with_context(|| format!("--path {} is not UTF-8", p.display()))?;
            if s.contains(':') {
                bail!("--path {s:?} contains ':', which separates search paths");
            }
            list.push(s.to_owned());
        }
        Ok(Runtime::with_path_list(
            options,
            PathSource::Option,
            &list.join(":"),
        ))
    }
}

/// Seeded uniform data in [-1, 1) (a fixed LCG, so runs are repeatable).
fn seeded(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn run_model(args: &RunArgs) -> Result<()> {
    use backplane::{InputTensor, OptimizerOptions, OutputTensor, npy, onnx};
    let runtime = args.discovery.runtime()?;
    let mut given = Vec::new();
    let mut options = onnx::ImportOptions::default();
    for spec in &args.inputs {
        let (name, file) = spec
            .split_once('=')
            .with_context(|| format!("--input {spec:?} is not NAME=FILE.npy"))?;
        let (shape, data) = npy::read_f32(Path::new(file))?;
        options.input_shapes.insert(name.to_owned(), shape.clone());
        given.push((name.to_owned(), shape, data));
    }
    let network = onnx::import_file(&args.model, &options)?;
    let preferences: Vec<String> = if args.backends.is_empty() {
        let ids = runtime.registry().ids();
        let mut p: Vec<String> = ids
            .iter()
            .filter(|id| **id != "CpuRef")
            .map(|s| s.to_string())
            .collect();
        if ids.contains(&"CpuRef") {
            p.push("CpuRef".into());
        }
        p
    } else {
        args.backends.clone()
    };
    let prefs: Vec<&str> = preferences.iter().map(String::as_str).collect();
    let optimized = runtime.optimize(&network, &prefs, &OptimizerOptions::default())?;
    if args.explain {
        print!("{}", optimized.explain());
    }
    if let Some(dot) = &args.dot {
        std::fs::write(dot, optimized.to_dot())
            .with_context(|| format!("writing {}", dot.display()))?;
    }
    let id = runtime.load_network(&optimized)?;
    let mut inputs_data: Vec<(String, backplane_api::TensorInfo, Vec<u8>)> = Vec::new();
    for (k, (name, info)) in network.inputs().into_iter().enumerate() {
        let values = match given.iter().find(|(n, _, _)| n == name) {
            Some((_, shape, data)) => {
                anyhow::ensure!(
                    shape.as_slice() == info.shape.as_slice(),
                    "--input {name}: shape {shape:?}, the model needs {:?}",
                    info.shape.as_slice()
                );
                data.clone()
            }
            None => seeded(
                info.num_elements().context("input size overflows")?,
                20_261_121 + k as u64,
            ),
        };
        inputs_data.push((
            name.to_owned(),
            info.clone(),
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ));
    }
    for (name, _, _) in &given {
        anyhow::ensure!(
            inputs_data.iter().any(|(n, _, _)| n == name),
            "--input {name}: the model has no such input"
        );
    }
    let outputs_info: Vec<(String, backplane_api::TensorInfo)> = network
        .outputs()
        .into_iter()
        .map(|(n, i)| (n.to_owned(), i.clone()))
        .collect();
    let mut buffers: Vec<Vec<u8>> = outputs_info
        .iter()
        .map(|(_, i)| vec![0u8; i.num_bytes().unwrap_or(0)])
        .collect();
    let bound: Vec<InputTensor<'_>> = inputs_data
        .iter()
        .map(|(name, info, data)| InputTensor { name, info, data })
        .collect();
    let mut outs: Vec<OutputTensor<'_>> = outputs_info
        .iter()
        .zip(buffers.iter_mut())
        .map(|((name, info), data)| OutputTensor { name, info, data })
        .collect();
    let start = std::time::Instant::now();
    runtime.enqueue(id, &bound, &mut outs)?;
    let latency = start.elapsed();
    drop(outs);
    let mut summary = Vec::new();
    for ((name, info), bytes) in outputs_info.iter().zip(&buffers) {
        let values: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if let Some(dir) = &args.output_dir {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            npy::write_f32(
                &dir.join(npy::file_name_for_output(name)),
                &info.shape,
                &values,
            )?;
        }
        if !args.json {
            let head: Vec<String> = values.iter().take(8).map(|v| format!("{v:.6}")).collect();
            println!(
                "{name} {:?}: [{}{}]",
                info.shape.as_slice(),
                head.join(", "),
                if values.len() > 8 { ", ..." } else { "" }
            );
        }
        summary.push(serde_json::json!({ "name": name, "shape": info.shape.as_slice() }));
    }
    let (peak, naive) = runtime.network_memory(id).unwrap_or_default();
    let layers = optimized.network().layers().len();
    if args.json {
        let per_backend: std::collections::BTreeMap<&str, usize> = optimized
            .assignments()
            .iter()
            .fold(Default::default(), |mut m, a| {
                *m.entry(a.backend.as_str()).or_default() += 1;
                m
            });
        let report = serde_json::json!({
            "model": args.model,
            "outputs": summary,
            "layers": layers,
            "layers_per_backend": per_backend,
            "latency_ms": latency.as_secs_f64() * 1e3,
            "memory_plan_bytes": peak,
            "memory_naive_bytes": naive,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{layers} layers on {:?}; one run took {:.3} ms; intermediate memory {peak} bytes planned ({naive} naive)",
            optimized.backends_used(),
            latency.as_secs_f64() * 1e3
        );
    }
    runtime.unload_network(id)?;
    Ok(())
}

fn main() -> Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    match cli.command {
        Command::Backends(args) => {
            let runtime = args.discovery.runtime()?;
            if args.json {
                println!("{}", runtime.report().to_json());
            } else {
                print!("{}", runtime.report().to_table());
            }
        }
        Command::Inspect { file, json } => {
            let report = inspect::inspect(&file);
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.to_table());
            }
            if let Some((code, message)) = &report.error {
                bail!("{}: [{code}] {message}", file.display());
            }
        }
        Command::Run(args) => run_model(&args)?,
        Command::Install {
            file,
            dir,
            vendor,
            release,
        } => {
            let done = install::install(&file, &dir, vendor.as_deref(), release.as_deref())?;
            println!(
                "installed backend {} as {}",
                done.backend_id,
                done.file.display()
            );
            for l in &done.links {
                println!(
                    "  link {} -> {}",
                    l.display(),
                    done.file.file_name().unwrap_or_default().to_string_lossy()
                );
            }
        }
    }
    Ok(())
}
