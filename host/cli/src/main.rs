//! `backplane`: the command-line front end of the backplane host.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use backplane::{
    CreationOptions, Runtime, TrustPolicy, plugins::inspect, plugins::install,
    plugins::paths::PathSource, plugins::trust,
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
    /// Run an ONNX model or a compiled network (.bpn) across the registered backends.
    Run(ModelArgs),
    /// Compile an ONNX model once (import, partition, fuse, and each backend's prepared
    /// workloads) into one .bpn file that `run`, `bench` and the bindings load without the
    /// importer or the optimizer.
    Compile(CompileArgs),
    /// Time an ONNX model: median, p10 and p90 latency, and peak memory.
    ///
    /// Every run writes into output buffers made once, before the warm-up runs.
    Bench(BenchArgs),
    /// Check a backend: its loader contract, and a case for every layer kind against the kit's own
    /// f64 definitions (an oracle that is no backend, CpuRef included).
    Conformance(ConformanceArgs),
    /// Inspect one plugin file: symbols, id, version, compatibility, capabilities, layer support.
    ///
    /// The file is loaded in a child process: a file that crashes, hangs or ends the process
    /// while it loads is an error, and this command survives it.
    Inspect {
        /// The shared object to inspect (any file name).
        file: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Seconds the child that loads the file may take before it is killed (at most a week).
        #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = seconds)]
        timeout: Duration,
        /// Load the file in this process (the child side of inspect).
        #[arg(long, hide = true)]
        in_process: bool,
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
        /// Seconds the child that loads the file (to read its id and metadata) may take before
        /// it is killed (at most a week).
        #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = seconds)]
        timeout: Duration,
    },
    /// The child side of --isolate: load one plugin file in this process and exit 0 (loaded)
    /// or 3 (rejected).
    #[command(hide = true)]
    Probe {
        /// The plugin file.
        file: PathBuf,
    },
    /// The child side of --out-of-process: serve one backend on the socket given as stdin.
    #[command(hide = true)]
    Serve {
        /// The plugin file to serve.
        #[arg(long, conflicts_with = "builtin", required_unless_present = "builtin")]
        file: Option<PathBuf>,
        /// The built-in backend to serve.
        #[arg(long)]
        builtin: Option<String>,
        /// The host's process id: the server dies with it.
        #[arg(long)]
        parent: u32,
    },
}

/// The longest time limit a flag accepts: a week.
const MAX_SECONDS: f64 = 7.0 * 24.0 * 3600.0;

/// A time limit flag's value: a number of seconds, more than 0 and at most a week. Refused
/// values are usage errors (exit status 2), reported by clap with the flag's name.
fn seconds(text: &str) -> Result<Duration, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(value > 0.0 && value <= MAX_SECONDS) {
        return Err(format!(
            "{text} is not a number of seconds greater than 0 and at most {MAX_SECONDS} (a week)"
        ));
    }
    Ok(Duration::from_secs_f64(value))
}

/// A `--shape` value, checked as the session will take it (`NAME=D1,D2,...`, a bounded
/// element count); a refused one is a usage error.
fn shape_spec(text: &str) -> Result<String, String> {
    backplane::SessionOptions::default().add_input_shape_text(text)?;
    Ok(text.to_owned())
}

/// A `--backend-option` value, checked as the session will take it (`ID:KEY=VALUE`); a
/// refused one is a usage error.
fn backend_option_spec(text: &str) -> Result<String, String> {
    backplane::SessionOptions::default().add_backend_option_text(text)?;
    Ok(text.to_owned())
}

/// Child processes of this executable with a time limit of `timeout`.
fn isolation(timeout: Duration) -> Result<backplane::plugins::isolation::Isolation> {
    let mut isolation = backplane::plugins::isolation::Isolation::current_exe()
        .context("locating this executable to run it as a child")?;
    isolation.timeout = timeout;
    Ok(isolation)
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
    /// Load each plugin in a child process first; one that crashes there, or takes longer than
    /// --isolate-timeout, is rejected as `crashed` and never loaded here.
    #[arg(long)]
    isolate: bool,
    /// Seconds a plugin may take to load under --isolate (at most a week).
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = seconds)]
    isolate_timeout: Duration,
    /// Run this backend in a child process of its own (repeatable): a crash, exit or hang in
    /// it fails the inference and faults the backend, and the command goes on without it. A
    /// plugin is chosen by its file name's <Name> part; CpuRef by its id.
    #[arg(long = "out-of-process", value_name = "ID")]
    out_of_process: Vec<String>,
    /// Seconds one call into an out-of-process backend may take before its process is killed
    /// (at most a week).
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = seconds)]
    call_timeout: Duration,
}

#[derive(Args, Debug)]
struct ConformanceArgs {
    /// The backend id to check.
    #[arg(long)]
    backend: String,
    /// A plugin file to check (any name; it is linked under the conventional name into a
    /// private directory). Without it the backend comes from the discovery options.
    #[arg(long, value_name = "FILE")]
    plugin: Option<PathBuf>,
    #[command(flatten)]
    discovery: DiscoveryArgs,
    /// Also run ONNX's node tests from this directory (made by scripts/fetch-onnx-tests.sh,
    /// with node/ and pytorch-converted/).
    #[arg(long, value_name = "DIR")]
    onnx_tests: Option<PathBuf>,
    /// The backend's declared expected failures: one `<case>: <reason>` per line. Declared
    /// failures still count as failed but do not make the exit status non-zero.
    #[arg(long, value_name = "FILE")]
    expected_failures: Option<PathBuf>,
    /// Run only the cases whose name contains this text.
    #[arg(long, value_name = "TEXT")]
    filter: Option<String>,
    /// A backend option for the backend under test, as ID:KEY=VALUE (repeatable; ID must be
    /// --backend). Values are typed: true/false, whole numbers, real numbers, else text.
    #[arg(long = "backend-option", value_name = "ID:KEY=VALUE", value_parser = backend_option_spec)]
    backend_options: Vec<String>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct BenchArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Timed runs (1 to 1,000,000).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    iterations: u32,
    /// Untimed runs first (0 to 1,000,000).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    warmup: u32,
    /// Also time every layer over the timed runs (two clock reads per layer): the time per
    /// backend and layer kind, and the slowest layers (with --json: every layer).
    #[arg(long)]
    profile: bool,
}

#[derive(Args, Debug)]
struct CompileArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The compiled network file to write.
    #[arg(short = 'o', long = "output", value_name = "FILE.bpn")]
    output: PathBuf,
}

#[derive(Args, Debug)]
struct ModelArgs {
    /// The model: an ONNX file, or a compiled network (.bpn, made by `backplane compile`).
    model: PathBuf,
    /// For a compiled network made for backends that differ from those registered here (one
    /// absent, another release, Backend API or prepared-workload format): optimise its stored
    /// layers again for the backends present instead of failing.
    #[arg(long)]
    reoptimize: bool,
    #[command(flatten)]
    discovery: DiscoveryArgs,
    /// Backend preferences, first preferred first (default: every registered plugin, then CpuRef).
    #[arg(long, value_delimiter = ',')]
    backends: Vec<String>,
    /// An input as NAME=FILE.npy (repeatable): any shape that fits the model. Inputs not
    /// given get seeded random data of the model's shape.
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    inputs: Vec<String>,
    /// The shape of an input whose dimensions the model leaves symbolic, as NAME=D1,D2,...
    /// (for inputs given as seeded random data). Given once per input, it fixes the shape at
    /// load; `bench` takes several for one input and cycles through them, one per
    /// iteration (each set of shapes has its plan, cached by the session).
    #[arg(long = "shape", value_name = "NAME=D1,D2,...", value_parser = shape_spec)]
    shapes: Vec<String>,
    /// Write one <output>.npy per model output into this directory.
    #[arg(long)]
    output_dir: Option<PathBuf>,
    /// Print which backend runs each layer and why: `summary` (the default: per backend its
    /// compute layers, fused chains and memory copies, then the compute layers grouped by
    /// backend, what and why), `layers` (then one row per compute layer with every refusal)
    /// or `all` (every layer, constants, inputs and outputs included).
    #[arg(
        long,
        value_name = "DETAIL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "summary",
        value_parser = clap::builder::TypedValueParser::map(
            clap::builder::PossibleValuesParser::new(["summary", "layers", "all"]),
            |s| s.parse::<backplane::graph::optimizer::ExplainDetail>().expect("a listed value")
        )
    )]
    explain: Option<backplane::graph::optimizer::ExplainDetail>,
    /// No fusion: skip the graph rewrites and the backends' subgraph optimisation.
    #[arg(long)]
    no_fusion: bool,
    /// A backend option as ID:KEY=VALUE, e.g. CpuFast:Threads=2 (repeatable). Values are
    /// typed: true/false, whole numbers, real numbers, else text. A Backend API 1.0 plugin
    /// receives them only in its backend context (a warning says so).
    #[arg(long = "backend-option", value_name = "ID:KEY=VALUE", value_parser = backend_option_spec)]
    backend_options: Vec<String>,
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
        let options = self.creation_options()?;
        if self.paths.is_empty() {
            return Ok(Runtime::new(options));
        }
        let list = backplane::plugins::paths::join_dirs(&self.paths)
            .map_err(|e| anyhow::anyhow!("--path {e}"))?;
        Ok(Runtime::with_path_list(options, PathSource::Option, &list))
    }

    /// The options these flags give (the search paths aside).
    fn creation_options(&self) -> Result<CreationOptions> {
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
        if self.isolate {
            options.isolation = Some(isolation(self.isolate_timeout)?);
        }
        if !self.out_of_process.is_empty() {
            let mut oop = backplane::OutOfProcess::current_exe(self.out_of_process.clone())
                .context("--out-of-process: locating this executable")?;
            oop.call_timeout = self.call_timeout;
            options.out_of_process = Some(oop);
        }
        Ok(options)
    }
}

/// Writes to stdout. A reader that went away (`backplane backends --json | head`) ends the
/// program quietly with status 0 instead of a panic.
fn emit(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("backplane: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// Writes pretty JSON (made by `write`, which streams it in large blocks of its own, as
/// `Runtime::write_report_json` does) and a newline to stdout: the report of a crowded
/// directory is megabytes, and building it as one string, then copying it through
/// `format!`, cost more than discovering it (docs/PERFORMANCE.md). A reader that went away
/// ends the program as in [`emit`].
fn emit_json(write: impl FnOnce(&mut dyn std::io::Write) -> serde_json::Result<()>) {
    use std::{io::Write, os::fd::AsFd};
    enlarge_stdout_pipe();
    let stdout = std::io::stdout().lock();
    // Straight to the descriptor (held under the lock): stdout's line buffering would cut
    // each block at its last line break, two `write`s a block.
    let mut out: Box<dyn Write> = match stdout.as_fd().try_clone_to_owned() {
        Ok(fd) => Box::new(std::fs::File::from(fd)),
        Err(_) => Box::new(stdout),
    };
    let written = match write(&mut out) {
        Err(e) if !e.is_io() => {
            eprintln!("backplane: cannot write the report as JSON: {e}");
            std::process::exit(1);
        }
        r => r.map_err(std::io::Error::from),
    };
    if let Err(e) = written
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
    {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("backplane: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// Size [`enlarge_stdout_pipe`] asks for: Linux's limit for an unprivileged process.
const STDOUT_PIPE_SIZE: usize = 1 << 20;

/// When stdout is a pipe smaller than 1 MiB, makes it 1 MiB (`F_SETPIPE_SZ`). The report of a
/// crowded directory is megabytes: through the default 64 KiB pipe the writer stops and the
/// reader is woken about 45 times for 3 MB, and those switches cost a millisecond on 2
/// cores (docs/PERFORMANCE.md); with 1 MiB a reader that reads large blocks is woken a few
/// times. Nothing else changes for the reader. Not a pipe, or refused (the user's pipe
/// memory is over its limit): nothing happens.
fn enlarge_stdout_pipe() {
    let stdout = std::io::stdout();
    if let Ok(size) = rustix::pipe::fcntl_getpipe_size(&stdout)
        && size < STDOUT_PIPE_SIZE
    {
        let _ = rustix::pipe::fcntl_setpipe_size(&stdout, STDOUT_PIPE_SIZE);
    }
}

/// `print!` through [`emit`].
macro_rules! out {
    ($($arg:tt)*) => { emit(&format!($($arg)*)) };
}

/// `println!` through [`emit`].
macro_rules! outln {
    ($($arg:tt)*) => { emit(&format!("{}\n", format!($($arg)*))) };
}

/// A model read and loaded, with its input bytes ready: one set of inputs per shape to run
/// (`bench` cycles through several).
struct LoadedModel {
    session: backplane::Session,
    sets: Vec<Vec<(String, backplane_api::TensorInfo, Vec<u8>)>>,
}

impl LoadedModel {
    /// Reads `args.model`, makes its session and the inputs of each set of shapes.
    fn load(args: &ModelArgs) -> Result<Self> {
        use backplane::{Session, SessionOptions, npy};
        // Malformed arguments are reported before anything is discovered or imported.
        let mut options = SessionOptions::default();
        options
            .set_backends(&args.backends)
            .set_fusion(!args.no_fusion)
            .set_reoptimize(args.reoptimize);
        for spec in &args.backend_options {
            options
                .add_backend_option_text(spec)
                .map_err(anyhow::Error::msg)?;
        }
        let mut given = Vec::new();
        for spec in &args.inputs {
            let (name, file) = spec
                .split_once('=')
                .with_context(|| format!("--input {spec:?} is not NAME=FILE.npy"))?;
            let (shape, data) = npy::read(Path::new(file))?;
            given.push((name.to_owned(), shape, data));
        }
        // --shape: one per input fixes it at load; several for one input are cycled.
        let mut shapes: Vec<(String, Vec<Vec<u32>>)> = Vec::new();
        for spec in &args.shapes {
            let mut one = SessionOptions::default();
            one.add_input_shape_text(spec)
                .map_err(|e| anyhow::anyhow!("--shape: {e}"))?;
            for (name, dims) in one.input_shapes {
                match shapes.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, list)) => list.push(dims),
                    None => shapes.push((name, vec![dims])),
                }
            }
        }
        for (name, list) in &shapes {
            if let [dims] = list.as_slice() {
                options
                    .set_input_shape(name, dims)
                    .map_err(|e| anyhow::anyhow!("--shape: {e}"))?;
            }
        }
        let runtime = std::sync::Arc::new(args.discovery.runtime()?);
        let session = Session::load(runtime, &args.model, &options)?;
        for (name, _, _) in &given {
            anyhow::ensure!(
                session.inputs().iter().any(|i| &i.name == name),
                "--input {name}: the model has no such input"
            );
        }
        let count = shapes.iter().map(|(_, l)| l.len()).max().unwrap_or(1);
        let current = session.current();
        let mut sets = Vec::with_capacity(count);
        for set in 0..count {
            let mut inputs = Vec::new();
            for (k, input) in session.inputs().iter().enumerate() {
                let name = &input.name;
                let data_type = input.data_type.with_context(|| {
                    format!(
                        "input {name}: its element type {:?} is not supported",
                        input.element
                    )
                })?;
                let bytes_of = |info: &backplane_api::TensorInfo| match given
                    .iter()
                    .find(|(n, _, _)| n == name)
                {
                    Some((_, _, data)) => {
                        backplane::input_bytes(name, info, data).map_err(anyhow::Error::msg)
                    }
                    None => backplane::seeded::input_bytes(info, 20_261_121 + k as u64)
                        .with_context(|| format!("input {name}: its size overflows")),
                };
                let shape: Vec<u32> =
                    if let Some((_, shape, _)) = given.iter().find(|(n, _, _)| n == name) {
                        shape.clone()
                    } else if let Some((_, list)) = shapes.iter().find(|(n, _)| n == name) {
                        list[set % list.len()].clone()
                    } else if let Some((_, info)) = current
                        .as_ref()
                        .and_then(|p| p.inputs().iter().find(|(n, _)| n == name))
                    {
                        info.shape.to_vec()
                    } else {
                        return Err(session.current_or_shapes_needed().unwrap_err().into());
                    };
                let info = backplane_api::TensorInfo::new(&shape, data_type);
                let bytes = bytes_of(&info)?;
                inputs.push((name.clone(), info, bytes));
            }
            sets.push(inputs);
        }
        let model = Self { session, sets };
        let plan = model.plan(0)?;
        if let Some(detail) = args.explain {
            out!("{}", plan.optimized().explain_at(detail));
        }
        if let Some(dot) = &args.dot {
            std::fs::write(dot, plan.optimized().to_dot())
                .with_context(|| format!("writing {}", dot.display()))?;
        }
        Ok(model)
    }

    fn runtime(&self) -> &Runtime {
        self.session.runtime()
    }

    /// The inputs of set `set`, bound for a run.
    fn bound(&self, set: usize) -> Vec<backplane::InputTensor<'_>> {
        self.sets[set]
            .iter()
            .map(|(name, info, data)| backplane::InputTensor { name, info, data })
            .collect()
    }

    /// The plan for set `set`'s shapes (made now when the session has not cached it).
    fn plan(&self, set: usize) -> Result<std::sync::Arc<backplane::Plan>> {
        Ok(self.session.plan_for(&self.bound(set))?)
    }

    /// Round trips so far to each backend that runs out of process.
    fn round_trips(&self) -> BTreeMap<String, u64> {
        self.runtime()
            .registry()
            .backends()
            .iter()
            .filter_map(|b| b.remote().map(|r| (b.id().to_owned(), r.round_trips())))
            .collect()
    }

    /// Runs once; when the run fails because a backend faulted (an out-of-process backend that
    /// crashed, one that panicked), and no retry was made yet (`retried`), says so, optimises
    /// the network again without that backend, and runs once more.
    fn run_or_retry<T>(
        &mut self,
        retried: &mut bool,
        mut run: impl FnMut(&Self) -> Result<T>,
    ) -> Result<T> {
        let error = match run(self) {
            Ok(r) => return Ok(r),
            Err(e) => e,
        };
        let registry = self.runtime().registry();
        let used = self
            .session
            .current()
            .map(|p| {
                p.optimized()
                    .backends_used()
                    .into_iter()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let faulted: Vec<&str> = used
            .iter()
            .map(String::as_str)
            .filter(|id| registry.get(id).is_some_and(|b| b.is_faulted()))
            .collect();
        if *retried || faulted.is_empty() {
            return Err(error);
        }
        *retried = true;
        eprintln!(
            "warning: {error:#}\nwarning: backend {} faulted; optimising the network again without it and running once more",
            faulted.join(", ")
        );
        self.session
            .reoptimize()
            .context("optimising again without the faulted backend")?;
        run(self)
    }

    /// Runs set `set` once into `buffers` (one per output of its plan, as
    /// [`backplane::Plan::output_buffers`] makes them, reused from run to run); returns the
    /// time the run took, the session's look-up of the plan included.
    fn run_into(&self, set: usize, buffers: &mut [Vec<u8>]) -> Result<std::time::Duration> {
        let inputs = self.bound(set);
        let start = std::time::Instant::now();
        let plan = self.session.plan_for(&inputs)?;
        let mut outputs: Vec<backplane::OutputTensor<'_>> = plan
            .outputs()
            .iter()
            .zip(buffers.iter_mut())
            .map(|((name, info), data)| backplane::OutputTensor { name, info, data })
            .collect();
        plan.run(&inputs, &mut outputs)?;
        Ok(start.elapsed())
    }

    /// Runs the first set once; returns each output's name, shape and values, and the time
    /// the run took.
    #[allow(clippy::type_complexity)] // reason: one private result read by one caller
    fn run(
        &self,
    ) -> Result<(
        Vec<(String, backplane_api::TensorInfo, backplane::npy::NpyData)>,
        std::time::Duration,
    )> {
        let plan = self.plan(0)?;
        let mut buffers = plan.output_buffers()?;
        let took = self.run_into(0, &mut buffers)?;
        let values = plan
            .outputs()
            .iter()
            .zip(&buffers)
            .map(|((name, info), b)| {
                backplane::output_values(name, info, b).map(|v| (name.clone(), info.clone(), v))
            })
            .collect::<Result<Vec<_>, String>>()
            .map_err(anyhow::Error::msg)?;
        Ok((values, took))
    }
}

/// Says on stderr which backends faulted (panicked) during this command: the run went on
/// without them, so the output alone would not tell.
fn warn_faulted(runtime: &backplane::Runtime) {
    for b in runtime.report().backends.iter().filter(|b| b.faulted) {
        eprintln!(
            "warning: backend {} faulted ({}); this runtime did not use it again",
            b.id,
            b.fault.as_deref().unwrap_or("no reason given")
        );
    }
}

/// The process's peak resident memory in bytes (`VmHWM`), where the kernel reports it.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn run_model(args: &ModelArgs) -> Result<()> {
    use backplane::npy;
    let mut model = LoadedModel::load(args)?;
    anyhow::ensure!(
        model.sets.len() == 1,
        "run takes one --shape per input (bench cycles through several)"
    );
    let mut retried = false;
    let (values, latency) = model.run_or_retry(&mut retried, LoadedModel::run)?;
    warn_faulted(model.runtime());
    let plan = model.plan(0)?;
    let mut summary = Vec::new();
    for (name, info, values) in &values {
        if let Some(dir) = &args.output_dir {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            npy::write(
                &dir.join(npy::file_name_for_output(name)),
                &info.shape,
                values,
            )?;
        }
        if !args.json {
            let head: Vec<String> = match values {
                npy::NpyData::F32(v) => v.iter().take(8).map(|x| format!("{x:.6}")).collect(),
                npy::NpyData::I32(v) => v.iter().take(8).map(i32::to_string).collect(),
                npy::NpyData::I64(v) => v.iter().take(8).map(i64::to_string).collect(),
                npy::NpyData::Bool(v) => v.iter().take(8).map(|&b| (b != 0).to_string()).collect(),
                npy::NpyData::U8(v) => v.iter().take(8).map(u8::to_string).collect(),
                npy::NpyData::I8(v) => v.iter().take(8).map(i8::to_string).collect(),
            };
            let more = if values.len() > 8 { ", ..." } else { "" };
            outln!(
                "{name} {:?}: [{}{more}]",
                info.shape.as_slice(),
                head.join(", ")
            );
        }
        summary.push(serde_json::json!({ "name": name, "shape": info.shape.as_slice() }));
    }
    let (peak, naive) = model
        .runtime()
        .network_memory(plan.id())
        .unwrap_or_default();
    let layers = plan.optimized().network().layers().len();
    if args.json {
        let report = serde_json::json!({
            "model": args.model,
            "outputs": summary,
            "layers": layers,
            "layers_per_backend": plan.layers_per_backend(),
            "latency_ms": latency.as_secs_f64() * 1e3,
            // Constants copied into the network's own memory at load (0 when every one is
            // read in place: from its descriptor, or mapped from a compiled network).
            "constant_bytes_copied": model.runtime().network_own_bytes(plan.id()),
            "peak_rss_bytes": peak_rss_bytes(),
            "memory_plan_bytes": peak,
            "memory_naive_bytes": naive,
        });
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        outln!(
            "{layers} layers on {:?}; one run took {:.3} ms; intermediate memory {peak} bytes planned ({naive} naive)",
            plan.optimized().backends_used(),
            latency.as_secs_f64() * 1e3
        );
    }
    drop(plan);
    model.session.unload()?;
    Ok(())
}

fn bench_model(args: &BenchArgs) -> Result<()> {
    let mut model = LoadedModel::load(&args.model)?;
    let mut retried = false;
    // Every run writes into the same output buffers (one set per shape), as an application
    // that reuses them would: the timing is the inference, not fresh pages for its outputs.
    let sets = model.sets.len();
    let mut buffers = (0..sets)
        .map(|set| Ok(model.plan(set)?.output_buffers()?))
        .collect::<Result<Vec<_>>>()?;
    for i in 0..args.warmup as usize {
        let set = i % sets;
        model.run_or_retry(&mut retried, |m| m.run_into(set, &mut buffers[set]))?;
    }
    let trips_before = model.round_trips();
    if let Some(plan) = model.session.current() {
        plan.set_profiling(args.profile);
    }
    let mut ms: Vec<f64> = Vec::with_capacity(args.iterations as usize);
    for i in 0..args.iterations as usize {
        let set = i % sets;
        ms.push(
            model
                .run_or_retry(&mut retried, |m| m.run_into(set, &mut buffers[set]))?
                .as_secs_f64()
                * 1e3,
        );
    }
    // Round trips per inference to each out-of-process backend.
    let trips: BTreeMap<String, f64> = model
        .round_trips()
        .into_iter()
        .map(|(id, after)| {
            let before = trips_before.get(&id).copied().unwrap_or(0);
            (id, (after - before) as f64 / args.iterations as f64)
        })
        .collect();
    warn_faulted(model.runtime());
    let plan = model.session.current_or_shapes_needed()?;
    let profile = plan.profile();
    if args.profile && profile.is_none() {
        eprintln!("warning: no layer profile: the network was optimised again during the runs");
    }
    ms.sort_by(f64::total_cmp);
    let pick = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    let (median, p10, p90) = (pick(0.5), pick(0.1), pick(0.9));
    let (plan_bytes, naive) = model
        .runtime()
        .network_memory(plan.id())
        .unwrap_or_default();
    let rss = peak_rss_bytes();
    let cache = model.session.cache_stats();
    if args.model.json {
        let report = serde_json::json!({
            "model": args.model.model,
            "iterations": args.iterations,
            "warmup": args.warmup,
            "median_ms": median,
            "p10_ms": p10,
            "p90_ms": p90,
            "layers_per_backend": plan.layers_per_backend(),
            "memory_plan_bytes": plan_bytes,
            "memory_naive_bytes": naive,
            "peak_rss_bytes": rss,
            "shapes_cycled": sets,
            "plans_cached": cache.entries,
            "plans_cached_bytes": cache.bytes,
            "out_of_process_round_trips_per_run": trips,
        });
        let mut report = report;
        if let Some(layers) = &profile {
            report["profile"] = layers
                .iter()
                .map(|l| {
                    serde_json::json!({
                        "layer": l.layer,
                        "origins": l.origins,
                        "kind": l.kind.to_string(),
                        "backend": l.backend,
                        "runs": l.runs,
                        "mean_us": mean_us(l),
                    })
                })
                .collect();
        }
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        outln!(
            "{} iterations after {} warm-up: median {median:.3} ms, p10 {p10:.3} ms, p90 {p90:.3} ms",
            args.iterations,
            args.warmup
        );
        if sets > 1 {
            outln!(
                "{sets} sets of shapes cycled; {} plans cached ({} bytes)",
                cache.entries,
                cache.bytes
            );
        }
        outln!(
            "memory: intermediate plan {plan_bytes} bytes ({naive} naive); process peak RSS {}",
            rss.map_or("unknown".to_owned(), |b| format!("{b} bytes"))
        );
        for (id, n) in &trips {
            outln!("out of process: {id}: {n:.1} round trips per inference");
        }
        if let Some(layers) = &profile {
            print_profile(layers, ms.iter().sum::<f64>() / ms.len() as f64);
        }
    }
    model.session.unload()?;
    Ok(())
}

/// `compile`: the model's session (its plan made at load, as `run` makes it), written as a
/// compiled network.
fn compile_model(args: &CompileArgs) -> Result<()> {
    anyhow::ensure!(
        !backplane::compiled::is_compiled_file(&args.model.model),
        "{} is already a compiled network",
        args.model.model.display()
    );
    let model = LoadedModel::load(&args.model)?;
    let plan = model.session.current_or_shapes_needed()?;
    let bytes = model
        .session
        .compile_to(&args.output)
        .with_context(|| format!("compiling {}", args.model.model.display()))?;
    let onnx = std::fs::metadata(&args.model.model).map_or(0, |m| m.len());
    // Read back: the file checks, and says what it holds.
    let written = backplane::compiled::CompiledNetwork::open(&args.output)?;
    outln!(
        "wrote {} ({bytes} bytes; the ONNX file has {onnx}): {} layers on {}, {} workloads \
         prepared ahead of time",
        args.output.display(),
        plan.optimized().network().layers().len(),
        plan.optimized().backends_used().join(", "),
        written.prepared_workloads()
    );
    model.session.unload()?;
    Ok(())
}

/// A profiled layer's mean time per run, in microseconds.
fn mean_us(l: &backplane::LayerProfile) -> f64 {
    l.total.as_secs_f64() * 1e6 / l.runs.max(1) as f64
}

/// `bench --profile`'s tables: time per backend and layer kind, then the slowest layers,
/// each with its share of the mean inference (the layers' times are means too).
fn print_profile(layers: &[backplane::LayerProfile], mean_ms: f64) {
    let share = |us: f64| 100.0 * us / (mean_ms * 1e3);
    let mut by_kind: BTreeMap<(String, String), (usize, f64)> = BTreeMap::new();
    for l in layers {
        let e = by_kind
            .entry((l.backend.clone(), l.kind.to_string()))
            .or_default();
        e.0 += 1;
        e.1 += mean_us(l);
    }
    let mut by_kind: Vec<_> = by_kind.into_iter().collect();
    by_kind.sort_by(|a, b| b.1.1.total_cmp(&a.1.1));
    let total: f64 = layers.iter().map(mean_us).sum();
    outln!(
        "layers: {total:.1} us per run in {} layers ({:.1}% of the mean inference; the rest is the host's binding and copies)",
        layers.len(),
        share(total)
    );
    outln!(
        "{:>10} {:>6} {:>6}  {:<16} kind",
        "us/run",
        "share",
        "layers",
        "backend"
    );
    let copies: Vec<&backplane::LayerProfile> = layers
        .iter()
        .filter(|l| l.kind == backplane::api::LayerKind::MemCopy)
        .collect();
    if !copies.is_empty() {
        let us: f64 = copies.iter().map(|l| mean_us(l)).sum();
        outln!(
            "memory copies: {us:.1} us per run in {} copies ({:.1}%)",
            copies.len(),
            share(us)
        );
    }
    for ((backend, kind), (count, us)) in &by_kind {
        outln!(
            "{us:>10.1} {:>5.1}% {count:>6}  {backend:<16} {kind}",
            share(*us)
        );
    }
    let mut slowest: Vec<&backplane::LayerProfile> = layers.iter().collect();
    slowest.sort_by(|a, b| mean_us(b).total_cmp(&mean_us(a)));
    outln!("slowest layers:");
    outln!(
        "{:>10} {:>6}  {:<16} {:<24} layer",
        "us/run",
        "share",
        "backend",
        "kind"
    );
    for l in slowest.iter().take(PROFILE_SLOWEST) {
        let us = mean_us(l);
        let origins = match l.origins.as_slice() {
            [] => String::new(),
            names => format!(" {}", backplane::graph::optimizer::fused_from(names)),
        };
        outln!(
            "{us:>10.1} {:>5.1}%  {:<16} {:<24} {}{origins}",
            share(us),
            l.backend,
            l.kind.to_string(),
            l.layer
        );
    }
}

/// How many of the slowest layers `bench --profile` lists (`--json` lists all).
const PROFILE_SLOWEST: usize = 20;

fn conformance(args: &ConformanceArgs) -> Result<()> {
    let mut given = backplane::OptimizerOptions::default();
    for spec in &args.backend_options {
        given.add_backend_option(spec).map_err(anyhow::Error::msg)?;
    }
    if let Some(other) = given.backend_options.keys().find(|id| **id != args.backend) {
        bail!(
            "--backend-option for {other}: the kit passes options only to the backend under test ({})",
            args.backend
        );
    }
    let options = backplane_conformance::KitOptions {
        backend_options: given.options_for(&args.backend).clone(),
        onnx_tests: args.onnx_tests.clone(),
        filter: args.filter.clone(),
        expectations: match &args.expected_failures {
            Some(file) => {
                backplane_conformance::Expectations::read(file).map_err(anyhow::Error::msg)?
            }
            None => Default::default(),
        },
    };
    let staging = match &args.plugin {
        None => None,
        Some(file) => {
            let file = std::path::absolute(file)?;
            anyhow::ensure!(file.is_file(), "--plugin {}: no such file", file.display());
            let dir =
                std::env::temp_dir().join(format!("backplane-conformance-{}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
            let link = dir.join(format!("Conformance_{}_backend.so", args.backend));
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&file, &link)?;
            Some((dir, file))
        }
    };
    let runtime = match &staging {
        None => args.discovery.runtime()?,
        Some((dir, _)) => {
            // The flags' trust, isolation and out-of-process choices; the plugin's private
            // directory as the only path.
            let options = CreationOptions {
                register_builtins: args.backend != "CpuRef",
                ..args.discovery.creation_options()?
            };
            Runtime::with_path_list(
                options,
                PathSource::Option,
                dir.to_str().context("temporary path is not UTF-8")?,
            )
        }
    };
    let result = backplane_conformance::run(
        &runtime,
        &args.backend,
        staging.as_ref().map(|(_, f)| f.as_path()),
        &options,
    );
    if let Some((dir, _)) = &staging {
        let _ = std::fs::remove_dir_all(dir);
    }
    let report = result.map_err(anyhow::Error::msg)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        out!("{}", report.to_text());
    }
    if report.undeclared > 0 {
        std::process::exit(1);
    }
    Ok(())
}

fn main() -> Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    match cli.command {
        Command::Backends(args) => {
            let runtime = args.discovery.runtime()?;
            if args.json {
                emit_json(|out| runtime.write_report_json(out));
            } else {
                out!("{}", runtime.report().to_table());
            }
        }
        Command::Inspect {
            file,
            json,
            timeout,
            in_process,
        } => {
            let report = if in_process {
                inspect::inspect(&file)
            } else {
                inspect::inspect_isolated(&file, &isolation(timeout)?)
                    .map_err(anyhow::Error::msg)?
            };
            if json {
                outln!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                out!("{}", report.to_table());
            }
            if let Some((code, message)) = &report.error {
                bail!("{}: [{code}] {message}", file.display());
            }
        }
        Command::Run(args) => run_model(&args)?,
        Command::Compile(args) => compile_model(&args)?,
        Command::Bench(args) => bench_model(&args)?,
        Command::Conformance(args) => conformance(&args)?,
        Command::Probe { file } => std::process::exit(backplane::plugins::probe::probe_here(&file)),
        Command::Serve {
            file,
            builtin,
            parent,
        } => {
            let target = match (file, builtin) {
                (Some(f), _) => backplane::serve::Target::File(f),
                (None, Some(id)) => backplane::serve::Target::Builtin(id),
                (None, None) => bail!("serve needs --file or --builtin"),
            };
            std::process::exit(backplane::serve::serve(&target, parent))
        }
        Command::Install {
            file,
            dir,
            vendor,
            release,
            timeout,
        } => {
            let done = install::install_isolated(
                &file,
                &dir,
                vendor.as_deref(),
                release.as_deref(),
                &isolation(timeout)?,
            )?;
            outln!(
                "installed backend {} as {}",
                done.backend_id,
                done.file.display()
            );
            for l in &done.links {
                outln!(
                    "  link {} -> {}",
                    l.display(),
                    done.file.file_name().unwrap_or_default().to_string_lossy()
                );
            }
        }
    }
    Ok(())
}
