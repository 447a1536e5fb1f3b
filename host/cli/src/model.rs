//! A model on the command line (`run`, `bench`, `compile`): its flags ([`ModelArgs`]), and
//! the model read, loaded and given its inputs ([`LoadedModel`]).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use backplane::Runtime;
use clap::Args;

use crate::{
    options::{DiscoveryArgs, backend_option_spec, shape_spec},
    output::out,
};

#[derive(Args, Debug)]
pub(crate) struct ModelArgs {
    /// The model: an ONNX file, or a compiled network (.bpn, made by `backplane compile`).
    pub(crate) model: PathBuf,
    /// For a compiled network made for backends that differ from those registered here (one
    /// absent, another release, Backend API or prepared-workload format): optimise its stored
    /// layers again for the backends present instead of failing.
    #[arg(long)]
    pub(crate) reoptimize: bool,
    /// The memory budget of each load (e.g. 4G, 512M, 1048576): the constants the importer
    /// folds and copies, then the network's constants, planned tensors and outputs, charged
    /// before they are allocated; a model over it fails to load naming the largest tensor.
    /// Default: this machine's physical memory.
    #[arg(long, value_name = "BYTES")]
    pub(crate) max_memory: Option<String>,
    #[command(flatten)]
    pub(crate) discovery: DiscoveryArgs,
    /// Backend preferences, first preferred first (default: every registered plugin, then CpuRef).
    #[arg(long, value_delimiter = ',')]
    pub(crate) backends: Vec<String>,
    /// An input as NAME=FILE.npy (repeatable): any shape that fits the model. Inputs not
    /// given get seeded random data of the model's shape.
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    pub(crate) inputs: Vec<String>,
    /// The shape of an input whose dimensions the model leaves symbolic, as NAME=D1,D2,...
    /// (for inputs given as seeded random data). Given once per input, it fixes the shape at
    /// load; `bench` takes several for one input and cycles through them, one per
    /// iteration (each set of shapes has its plan, cached by the session).
    #[arg(long = "shape", value_name = "NAME=D1,D2,...", value_parser = shape_spec)]
    pub(crate) shapes: Vec<String>,
    /// Write one <output>.npy per model output into this directory.
    #[arg(long)]
    pub(crate) output_dir: Option<PathBuf>,
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
    pub(crate) explain: Option<backplane::graph::optimizer::ExplainDetail>,
    /// No fusion: skip the graph rewrites and the backends' subgraph optimisation.
    #[arg(long)]
    pub(crate) no_fusion: bool,
    /// A backend option as ID:KEY=VALUE, e.g. CpuFast:Threads=2 (repeatable). Values are
    /// typed: true/false, whole numbers, real numbers, else text. A Backend API 1.0 plugin
    /// receives them only in its backend context (a warning says so).
    #[arg(long = "backend-option", value_name = "ID:KEY=VALUE", value_parser = backend_option_spec)]
    pub(crate) backend_options: Vec<String>,
    /// Write the optimized network as a Graphviz graph.
    #[arg(long, value_name = "FILE")]
    pub(crate) dot: Option<PathBuf>,
    /// Print output shapes and a short summary as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// A model read and loaded, with its input bytes ready: one set of inputs per shape to run
/// (`bench` cycles through several).
pub(crate) struct LoadedModel {
    pub(crate) session: backplane::Session,
    pub(crate) sets: Vec<Vec<(String, backplane_api::TensorInfo, Vec<u8>)>>,
}

impl LoadedModel {
    /// Reads `args.model`, makes its session and the inputs of each set of shapes.
    pub(crate) fn load(args: &ModelArgs) -> Result<Self> {
        use backplane::{Session, SessionOptions, npy};
        // Malformed arguments are reported before anything is discovered or imported.
        let mut options = SessionOptions::default();
        options
            .set_backends(&args.backends)
            .set_fusion(!args.no_fusion)
            .set_reoptimize(args.reoptimize);
        if let Some(m) = &args.max_memory {
            options
                .set_max_memory(m)
                .map_err(|e| anyhow::anyhow!("--max-memory: {e}"))?;
        }
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
            out!("{}", plan.explain_at(detail));
        }
        if let Some(dot) = &args.dot {
            std::fs::write(dot, plan.optimized().to_dot())
                .with_context(|| format!("writing {}", dot.display()))?;
        }
        Ok(model)
    }

    pub(crate) fn runtime(&self) -> &Runtime {
        self.session.runtime()
    }

    /// The inputs of set `set`, bound for a run.
    pub(crate) fn bound(&self, set: usize) -> Vec<backplane::InputTensor<'_>> {
        self.sets[set]
            .iter()
            .map(|(name, info, data)| backplane::InputTensor { name, info, data })
            .collect()
    }

    /// The plan for set `set`'s shapes (made now when the session has not cached it).
    pub(crate) fn plan(&self, set: usize) -> Result<std::sync::Arc<backplane::Plan>> {
        Ok(self.session.plan_for(&self.bound(set))?)
    }

    /// Round trips so far to each backend that runs out of process.
    pub(crate) fn round_trips(&self) -> BTreeMap<String, u64> {
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
    pub(crate) fn run_or_retry<T>(
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
    pub(crate) fn run_into(
        &self,
        set: usize,
        buffers: &mut [Vec<u8>],
    ) -> Result<std::time::Duration> {
        let inputs = self.bound(set);
        let start = std::time::Instant::now();
        let plan = self.session.plan_for(&inputs)?;
        if plan.is_dynamic() {
            // Shapes decided by values: the host allocates the outputs at each run.
            plan.run_alloc(&inputs)?;
            return Ok(start.elapsed());
        }
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
    pub(crate) fn run(
        &self,
    ) -> Result<(
        Vec<(String, backplane_api::TensorInfo, backplane::npy::NpyData)>,
        std::time::Duration,
    )> {
        let plan = self.plan(0)?;
        // Each output's name, shape and bytes, and the time the run took.
        let (outputs, took): (Vec<(String, backplane_api::TensorInfo, Vec<u8>)>, _) =
            if plan.is_dynamic() {
                // Shapes decided by values: the run allocates the outputs.
                let inputs = self.bound(0);
                let start = std::time::Instant::now();
                let got = plan.run_alloc(&inputs)?;
                let took = start.elapsed();
                (
                    got.into_iter().map(|t| (t.name, t.info, t.data)).collect(),
                    took,
                )
            } else {
                let mut buffers = plan.output_buffers()?;
                let took = self.run_into(0, &mut buffers)?;
                let named = plan.outputs().iter().cloned().zip(buffers);
                (
                    named.map(|((name, info), b)| (name, info, b)).collect(),
                    took,
                )
            };
        let values = outputs
            .into_iter()
            .map(|(name, info, b)| {
                backplane::output_values(&name, &info, &b).map(|v| (name, info, v))
            })
            .collect::<Result<Vec<_>, String>>()
            .map_err(anyhow::Error::msg)?;
        Ok((values, took))
    }
}

/// Says on stderr which backends faulted (panicked) during this command: the run went on
/// without them, so the output alone would not tell.
pub(crate) fn warn_faulted(runtime: &backplane::Runtime) {
    for b in runtime.report().backends.iter().filter(|b| b.faulted) {
        eprintln!(
            "warning: backend {} faulted ({}); this runtime did not use it again",
            b.id,
            b.fault.as_deref().unwrap_or("no reason given")
        );
    }
}

/// The process's peak resident memory in bytes (`VmHWM`), where the kernel reports it.
pub(crate) fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
