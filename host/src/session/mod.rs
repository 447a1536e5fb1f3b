//! A session: one ONNX model read once, run at any input shapes that fit it, each set of
//! shapes through a plan optimised and loaded for it (onnxruntime's `InferenceSession`).
//!
//! This is the one path from a model to results that the CLI's `run`/`bench` and the Python
//! and C bindings share:
//! 1. [`Session::load`] reads and checks the model once ([`onnx::Model`]): its declared
//!    inputs (with their symbolic dimensions), its initializers decoded once. When every input
//!    shape is known (fixed in the model, given in [`SessionOptions::input_shapes`], or a
//!    leading batch dimension taken as 1), the plan for those shapes is made now, so that a
//!    model that cannot run fails here.
//! 2. A [`Plan`] is the model imported for one set of input shapes, optimised for the
//!    preferences (none given: [`Runtime::default_preferences`]) and the per-backend options,
//!    and loaded ([`Runtime::load_network`]). Its constants are the session's (shared by
//!    every plan, not copied per shape).
//! 3. [`Session::run`] checks the inputs' shapes against the declared ones (rank, fixed
//!    dimensions, one size per symbolic name: an error names the input and the dimension,
//!    and nothing is loaded), takes the plan of those shapes from the cache or makes it, and
//!    runs it. The cache keeps the most recently used plans within [`CacheLimits`]; a plan
//!    dropped from it is unloaded once no run holds it.
//! 4. Dropping the session unloads every plan. The session holds its runtime (`Arc`), so the
//!    runtime lives as long as any of its sessions.
//!
//! A compiled network (`.bpn`, [`crate::compiled`]) is a session of one plan, loaded from the
//! file as it was optimised ([`Session::from_compiled`]); [`Session::compile_to`] writes one.
//!
//! Its files: [`options`] (what a session is made with), `cache` (input shapes fitted to
//! the declared ones, and the plans kept per set of shapes) and [`plan`] (one loaded
//! network, its runs, and the conversions of `.npy` values).
//!
//! Imports: `runtime`, `compiled`, `onnx`, `exec`, `graph`, `plugins`, `memory`, `npy`.

mod cache;
pub mod options;
pub mod plan;
mod segments;
#[cfg(test)]
mod tests;

use std::{
    collections::HashMap,
    path::Path,
    sync::{Arc, Mutex},
};

use backplane_api::TensorInfo;

use crate::memory::budget::MemoryBudget;
use crate::{
    compiled::{self, CompileError, CompiledError, CompiledNetwork, ModelFacts},
    exec::{ExecuteError, InputTensor, OutputTensor},
    graph::network::Network,
    graph::optimizer::{OptimizeError, OptimizedNetwork},
    onnx::{self, DeclaredTensor, Dim, ImportError, ModelMetadata},
    runtime::{Runtime, ScratchMemory},
};

use self::cache::Cache;
pub use self::{
    cache::CacheStats,
    options::{CacheLimits, MAX_INPUT_ELEMENTS, SessionOptions},
    plan::{OwnedTensor, Plan, input_bytes, output_values},
};

/// Why a session could not be made, or could not run.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The model could not be read or imported.
    #[error(transparent)]
    Import(#[from] ImportError),
    /// A compiled network could not be read, or does not fit this runtime's backends.
    #[error(transparent)]
    Compiled(#[from] CompiledError),
    /// A compiled network could not be written.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// No assignment of the layers to the preferred backends exists.
    #[error(transparent)]
    Optimize(#[from] OptimizeError),
    /// The optimised network could not be loaded.
    #[error(transparent)]
    Load(#[from] ExecuteError),
    /// The inputs given do not fit the model: an unknown or missing name, a rank, a fixed
    /// dimension, or two sizes for one symbolic dimension. Nothing was loaded or run.
    #[error("{0}")]
    Input(String),
    /// The model could not be imported at these input shapes (a size that makes a layer
    /// invalid). Nothing was kept; the session stays usable.
    #[error("at input shapes {shapes}: {error}")]
    Shape {
        /// The shapes, `name=[d, ...]` for each input.
        shapes: String,
        /// What failed.
        #[source]
        error: Box<SessionError>,
    },
    /// A plan ran and failed (the backend's error, or a binding the plan refused).
    #[error(transparent)]
    Run(ExecuteError),
}

/// Where a session's plans come from.
#[derive(Debug)]
enum Source {
    /// An ONNX model, imported at each new set of shapes.
    Model(Box<onnx::Model>),
    /// A network of fixed shapes, built or imported by the caller.
    Network(Network),
    /// A compiled network, bound to the session's runtime: its one plan.
    Compiled(Box<OptimizedNetwork>),
}

/// A model that can run at any input shapes that fit it, with its plans for recent shapes.
#[derive(Debug)]
pub struct Session {
    runtime: Arc<Runtime>,
    source: Source,
    options: SessionOptions,
    /// The graph inputs as declared, with the shapes given in the options applied.
    inputs: Vec<DeclaredTensor>,
    outputs: Vec<DeclaredTensor>,
    /// The model's metadata (empty for a network not read from a file).
    metadata: ModelMetadata,
    cache: Mutex<Cache>,
    /// The intermediate memory every plan's runs share.
    scratch: ScratchMemory,
}

impl Session {
    /// Reads the ONNX file `model` and makes a session of it in `runtime` (see the module
    /// doc).
    ///
    /// # Errors
    /// [`SessionError`] for the stage that failed.
    pub fn load(
        runtime: Arc<Runtime>,
        model: &Path,
        options: &SessionOptions,
    ) -> Result<Self, SessionError> {
        if compiled::is_compiled_file(model) {
            let compiled = CompiledNetwork::open(model)?;
            return Self::from_compiled(runtime, &compiled, options);
        }
        let model = onnx::Model::new(onnx::read_model(model)?)?;
        Self::from_model(runtime, model, options)
    }

    /// A session of a compiled network ([`crate::compiled`]): bound to `runtime` (optimised
    /// again only when its backends differ and `options.reoptimize` is set) and loaded now.
    /// Its inputs have the shapes it was compiled for; `options.backends`,
    /// `options.optimizer` and `options.input_shapes` are not used.
    ///
    /// # Errors
    /// [`SessionError::Compiled`] for a backend that differs; [`SessionError::Load`].
    pub fn from_compiled(
        runtime: Arc<Runtime>,
        compiled: &CompiledNetwork,
        options: &SessionOptions,
    ) -> Result<Self, SessionError> {
        // What a compiled network fixed at compile time cannot be chosen again here.
        for (given, what) in [
            (!options.backends.is_empty(), "backend preferences"),
            (
                options
                    .optimizer
                    .backend_options
                    .values()
                    .any(|o| !o.entries.is_empty()),
                "backend options",
            ),
            (!options.input_shapes.is_empty(), "input shapes"),
            (options.optimizer.no_subgraph_optimization, "fusion off"),
        ] {
            if given {
                log::warn!(
                    "a compiled network keeps the {what} it was compiled with: the {what} \
                     given are not used"
                );
            }
        }
        let optimized = compiled.bind(&runtime, options.reoptimize)?;
        let facts = compiled.facts();
        let shapes: Vec<Vec<u32>> = optimized
            .network()
            .inputs()
            .iter()
            .map(|(_, i)| i.shape.to_vec())
            .collect();
        let session = Self {
            inputs: facts.inputs.clone(),
            outputs: facts.outputs.clone(),
            metadata: facts.metadata.clone(),
            source: Source::Compiled(Box::new(optimized)),
            runtime,
            options: options.clone(),
            cache: Mutex::default(),
            scratch: ScratchMemory::default(),
        };
        let plan = session.build(&shapes)?;
        session.lock().plans.push_front((shapes, plan));
        Ok(session)
    }

    /// Writes the plan of the latest run (the one made at load) as a compiled network file
    /// ([`crate::compiled::compile`]), with the model's metadata; its inputs and outputs are
    /// the plan's, at the plan's shapes. Returns the file's size.
    ///
    /// # Errors
    /// No plan yet ([`Session::current_or_shapes_needed`]); [`SessionError::Compile`].
    pub fn compile_to(&self, path: &Path) -> Result<u64, SessionError> {
        let plan = self.current_or_shapes_needed()?;
        if let Some(tail) = plan.segment.as_ref().and_then(|s| s.tail.as_ref()) {
            let (node, op) = tail.at();
            return Err(CompileError::Dynamic {
                node: format!("{node} ({op})"),
            }
            .into());
        }
        let facts = ModelFacts {
            metadata: self.metadata.clone(),
            inputs: self.inputs.clone(),
            outputs: self.outputs.clone(),
        };
        Ok(compiled::compile_to(
            &self.runtime,
            plan.optimized(),
            &facts,
            path,
        )?)
    }

    /// [`Session::load`] from the bytes of an ONNX model.
    ///
    /// # Errors
    /// As [`Session::load`].
    pub fn load_bytes(
        runtime: Arc<Runtime>,
        bytes: &[u8],
        options: &SessionOptions,
    ) -> Result<Self, SessionError> {
        if compiled::looks_compiled(bytes) {
            let compiled = CompiledNetwork::from_bytes(bytes)?;
            return Self::from_compiled(runtime, &compiled, options);
        }
        Self::from_model(runtime, onnx::Model::decode(bytes)?, options)
    }

    /// A session of a decoded model: its plan is made now when every input shape is known.
    ///
    /// # Errors
    /// A given shape that does not fit the model, a shape for an input it does not have;
    /// nodes no converter exists for; what making the first plan fails with.
    pub fn from_model(
        runtime: Arc<Runtime>,
        model: onnx::Model,
        options: &SessionOptions,
    ) -> Result<Self, SessionError> {
        let mut inputs = model.inputs().to_vec();
        for name in options.input_shapes.keys() {
            if !inputs.iter().any(|i| &i.name == name) {
                return Err(ImportError::InvalidNode {
                    node: name.clone(),
                    op: "ImportOptions".to_owned(),
                    reason: "the graph has no input of this name".to_owned(),
                }
                .into());
            }
        }
        for input in &mut inputs {
            let Some(given) = options.input_shapes.get(&input.name) else {
                continue;
            };
            if !input.admits(given) {
                return Err(ImportError::InvalidNode {
                    node: input.name.clone(),
                    op: "Input".to_owned(),
                    reason: format!(
                        "the given shape {given:?} does not match the declared one {}",
                        input.dims_text()
                    ),
                }
                .into());
            }
            input.dims = Some(given.iter().map(|&d| Dim::Fixed(d)).collect());
        }
        // A symbolic name a given shape sizes has that size in every input.
        let mut sized: HashMap<String, u32> = HashMap::new();
        for t in model.inputs() {
            if let (Some(given), Some(dims)) = (options.input_shapes.get(&t.name), &t.dims) {
                for (d, &v) in dims.iter().zip(given) {
                    if let Dim::Named(n) = d {
                        sized.entry(n.clone()).or_insert(v);
                    }
                }
            }
        }
        for d in inputs.iter_mut().filter_map(|i| i.dims.as_mut()).flatten() {
            if let Dim::Named(n) = d
                && let Some(&v) = sized.get(n.as_str())
            {
                *d = Dim::Fixed(v);
            }
        }
        let session = Self {
            runtime,
            outputs: model.outputs().to_vec(),
            metadata: model.metadata(),
            source: Source::Model(Box::new(model)),
            inputs,
            options: options.clone(),
            cache: Mutex::default(),
            scratch: ScratchMemory::default(),
        };
        match session.first_shapes() {
            Some(shapes) => {
                let named: Vec<(&str, &[u32])> = session
                    .inputs
                    .iter()
                    .zip(&shapes)
                    .map(|(i, s)| (i.name.as_str(), s.as_slice()))
                    .collect();
                // At load, the model's own errors are not the shapes' fault: unwrapped.
                let shapes = session.fit(&named)?;
                session.make_plan(shapes, &named, false)?;
            }
            None => {
                if let Source::Model(m) = &session.source {
                    let nodes = m.unsupported_nodes();
                    if !nodes.is_empty() {
                        return Err(ImportError::Unsupported { nodes }.into());
                    }
                }
            }
        }
        Ok(session)
    }

    /// Optimises and loads a network already built or imported: a session of that one set of
    /// shapes; `options.input_shapes` is not used.
    ///
    /// # Errors
    /// [`SessionError::Optimize`] or [`SessionError::Load`].
    pub fn from_network(
        runtime: Arc<Runtime>,
        network: &Network,
        options: &SessionOptions,
    ) -> Result<Self, SessionError> {
        let declared = |list: Vec<(&str, &TensorInfo)>| {
            list.into_iter()
                .map(|(n, i)| DeclaredTensor {
                    name: n.to_owned(),
                    element: String::new(),
                    data_type: Some(i.data_type),
                    dims: Some(i.shape.iter().map(|&d| Dim::Fixed(d)).collect()),
                })
                .collect::<Vec<_>>()
        };
        let session = Self {
            inputs: declared(network.inputs()),
            outputs: declared(network.outputs()),
            source: Source::Network(network.clone()),
            runtime,
            options: options.clone(),
            metadata: ModelMetadata::default(),
            cache: Mutex::default(),
            scratch: ScratchMemory::default(),
        };
        let shapes: Vec<Vec<u32>> = network
            .inputs()
            .iter()
            .map(|(_, i)| i.shape.to_vec())
            .collect();
        let plan = session.build(&shapes)?;
        session.lock().plans.push_front((shapes, plan));
        Ok(session)
    }

    /// The runtime the session's plans are loaded in.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The model's metadata: producer, versions, descriptions and named strings
    /// (onnxruntime's `get_modelmeta()`).
    pub fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    /// The graph inputs, in the model's order, as declared (symbolic dimensions by name),
    /// with the shapes given in the options fixed.
    pub fn inputs(&self) -> &[DeclaredTensor] {
        &self.inputs
    }

    /// The graph outputs, in the model's order, as declared.
    pub fn outputs(&self) -> &[DeclaredTensor] {
        &self.outputs
    }

    /// Runs once with caller-provided output buffers, of the shapes the plan for these
    /// inputs has ([`Session::plan`] then [`Plan::outputs`]).
    ///
    /// # Errors
    /// As [`Session::plan`]; [`SessionError::Run`] for a binding the plan refuses (a data
    /// type, a size) or the backend's error.
    pub fn run(
        &self,
        inputs: &[InputTensor<'_>],
        outputs: &mut [OutputTensor<'_>],
    ) -> Result<(), SessionError> {
        self.plan_for(inputs)?
            .run(inputs, outputs)
            .map_err(SessionError::Run)
    }

    /// The plan for the shapes of `inputs`.
    ///
    /// # Errors
    /// As [`Session::plan`].
    pub fn plan_for(&self, inputs: &[InputTensor<'_>]) -> Result<Arc<Plan>, SessionError> {
        let given: Vec<(&str, &[u32])> = inputs
            .iter()
            .map(|t| (t.name, t.info.shape.as_slice()))
            .collect();
        self.plan(&given)
    }

    /// Runs once and returns every output, allocated here, in the order of the model's
    /// outputs (their shapes are those of the plan for these inputs).
    ///
    /// # Errors
    /// As [`Session::run`].
    pub fn run_alloc(&self, inputs: &[InputTensor<'_>]) -> Result<Vec<OwnedTensor>, SessionError> {
        self.plan_for(inputs)?
            .run_alloc(inputs)
            .map_err(SessionError::Run)
    }

    /// Optimises the latest plan's network again without the backends that faulted since
    /// ([`Runtime::reoptimize`]), loads it, and drops every other plan (those made later
    /// skip the faulted backends too): how to go on after an out-of-process backend crashed.
    ///
    /// # Errors
    /// [`SessionError::Optimize`] or [`SessionError::Load`]; the session then keeps its
    /// plans. No plan yet: as [`Session::current_or_shapes_needed`].
    pub fn reoptimize(&mut self) -> Result<(), SessionError> {
        let old = self.current_or_shapes_needed()?;
        let optimized = self.runtime.reoptimize(old.optimized())?;
        let budget = MemoryBudget::new(self.options.max_memory());
        let plan = Arc::new(Plan::load(
            self.runtime.clone(),
            optimized,
            &self.scratch,
            &budget,
        )?);
        let mut cache = self.lock();
        let shapes = cache
            .plans
            .front()
            .map(|(s, _)| s.clone())
            .unwrap_or_default();
        cache.plans.clear();
        cache.plans.push_front((shapes, plan));
        Ok(())
    }

    /// Unloads every plan now and returns the first error (dropping the session unloads
    /// too, and logs errors instead).
    ///
    /// # Errors
    /// As [`Runtime::unload_network`]; after [`ExecuteError::UnloadRefused`] the network
    /// stays loaded until the runtime is dropped.
    pub fn unload(self) -> Result<(), ExecuteError> {
        let plans: Vec<_> = self.lock().plans.drain(..).collect();
        let mut first = Ok(());
        for (_, plan) in plans {
            if let Err(e) = plan.unload_now()
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }
}
