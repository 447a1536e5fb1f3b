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
//! Imports: `runtime`, `compiled`, `onnx`, `exec`, `graph`, `plugins`, `npy`.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    path::Path,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use backplane_api::TensorInfo;

use crate::{
    compiled::{self, CompileError, CompiledError, CompiledNetwork, ModelFacts},
    exec::{ExecuteError, InputTensor, LayerProfile, NetworkId, OutputTensor},
    graph::network::Network,
    graph::optimizer::{OptimizeError, OptimizedNetwork, OptimizerOptions},
    npy::NpyData,
    onnx::{self, DeclaredTensor, Dim, ImportError, ModelMetadata},
    runtime::{Runtime, ScratchMemory},
};

/// How a [`Session`] is made.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// Backend ids in order of preference; empty: [`Runtime::default_preferences`].
    pub backends: Vec<String>,
    /// Fusion switch and per-backend options (Backend API 1.1).
    pub optimizer: OptimizerOptions,
    /// Shapes of graph inputs by name, replacing the model's declared (or symbolic) ones.
    pub input_shapes: HashMap<String, Vec<u32>>,
    /// How many loaded plans (one per set of input shapes) the session keeps.
    pub cache: CacheLimits,
    /// For a compiled network (`.bpn`) whose backends differ from those here: optimise its
    /// stored layers again for the backends present (and say so in the plan's notes) instead
    /// of failing ([`crate::compiled::CompiledNetwork::bind`]).
    pub reoptimize: bool,
}

/// How many plans a [`Session`] keeps loaded: at most `entries` of them and at most `bytes`
/// of memory between them (each plan's planned intermediate memory and its backends'
/// memory managers); the least recently used plan goes first. The plan of the latest run is
/// always kept, even when it alone is over `bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    /// Plans kept (0 is taken as 1). Default 8.
    pub entries: usize,
    /// Bytes kept. Default 512 MiB (two or three plans of PP-OCRv4's detector on pages of
    /// 736 × 1500 or so, eight of its recogniser).
    pub bytes: u64,
}

impl Default for CacheLimits {
    fn default() -> Self {
        Self {
            entries: 8,
            bytes: 512 << 20,
        }
    }
}

/// The most elements an input shape given in [`SessionOptions`] may have (2³¹ − 1, as many as
/// an `int32` index reaches): a larger shape is refused when it is given, with its name,
/// before anything is imported or allocated.
pub const MAX_INPUT_ELEMENTS: u64 = i32::MAX as u64;

/// Building a [`SessionOptions`]: the one place where the CLI's flags, the C API's arguments
/// and the Python package's keywords become options, each checked as it is given.
impl SessionOptions {
    /// The backend preferences, first preferred first: each id trimmed, empty ones dropped
    /// (so `"CpuFast, CpuRef"` split at commas and `["CpuFast", "CpuRef"]` give the same).
    pub fn set_backends<S: AsRef<str>>(&mut self, ids: impl IntoIterator<Item = S>) -> &mut Self {
        self.backends = ids
            .into_iter()
            .map(|s| s.as_ref().trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        self
    }

    /// Turns fusion (the graph rewrites and every backend's `optimize_subgraph`) on or off.
    pub fn set_fusion(&mut self, on: bool) -> &mut Self {
        self.optimizer.no_subgraph_optimization = !on;
        self
    }

    /// Sets option `key` of `backend` to a typed value (the Python package's keywords).
    ///
    /// # Errors
    /// An empty backend id or key.
    pub fn set_backend_option(
        &mut self,
        backend: &str,
        key: &str,
        value: backplane_api::Value,
    ) -> Result<&mut Self, String> {
        self.optimizer.set_backend_option(backend, key, value)?;
        Ok(self)
    }

    /// Adds an option written `ID:KEY=VALUE` (the CLI's `--backend-option`, the C API's
    /// strings); the value is typed by [`backplane_api::Value::parse`].
    ///
    /// # Errors
    /// Text that is not `ID:KEY=VALUE` with a non-empty id and key.
    pub fn add_backend_option_text(&mut self, spec: &str) -> Result<&mut Self, String> {
        self.optimizer.add_backend_option(spec)?;
        Ok(self)
    }

    /// Lets a compiled network whose backends differ from those here be optimised again
    /// (see [`SessionOptions::reoptimize`]).
    pub fn set_reoptimize(&mut self, on: bool) -> &mut Self {
        self.reoptimize = on;
        self
    }

    /// Sets how many plans, and how many bytes of them, the session keeps.
    pub fn set_cache_limits(&mut self, entries: usize, bytes: u64) -> &mut Self {
        self.cache = CacheLimits { entries, bytes };
        self
    }

    /// Fixes the shape of input `name`.
    ///
    /// # Errors
    /// An empty name, or a shape of more than [`MAX_INPUT_ELEMENTS`] elements.
    pub fn set_input_shape(&mut self, name: &str, dims: &[u32]) -> Result<&mut Self, String> {
        if name.is_empty() {
            return Err(format!("input shape {dims:?}: the input name is empty"));
        }
        let elements = dims
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(u64::from(d)))
            .filter(|&n| n <= MAX_INPUT_ELEMENTS);
        if elements.is_none() {
            return Err(format!(
                "input {name}: shape {dims:?} has more than {MAX_INPUT_ELEMENTS} elements"
            ));
        }
        self.input_shapes.insert(name.to_owned(), dims.to_vec());
        Ok(self)
    }

    /// Fixes a shape written `NAME=D1,D2,...` (the CLI's `--shape`).
    ///
    /// # Errors
    /// Text of another form, a dimension that is not a whole number in `0..=4294967295`, or
    /// what [`SessionOptions::set_input_shape`] refuses.
    pub fn add_input_shape_text(&mut self, spec: &str) -> Result<&mut Self, String> {
        let (name, dims) = spec
            .split_once('=')
            .ok_or_else(|| format!("shape {spec:?} is not NAME=D1,D2,..."))?;
        let dims = dims
            .split(',')
            .map(|d| d.trim().parse::<u32>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| {
                format!("shape {spec:?}: each dimension must be a whole number in 0..=4294967295")
            })?;
        self.set_input_shape(name, &dims)
    }
}

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

/// The plans a session keeps, most recently used first, with the shapes (in the order of
/// [`Session::inputs`]) each was made for.
#[derive(Debug, Default)]
struct Cache {
    plans: VecDeque<(Vec<Vec<u32>>, Arc<Plan>)>,
}

impl Cache {
    /// The plan of `shapes`, moved to the front (most recently used), if cached.
    fn touch(&mut self, shapes: &[Vec<u32>]) -> Option<Arc<Plan>> {
        let k = self.plans.iter().position(|(s, _)| *s == shapes)?;
        let entry = self.plans.remove(k)?;
        let plan = entry.1.clone();
        self.plans.push_front(entry);
        Some(plan)
    }
}

/// What a session's plan cache holds now ([`Session::cache_stats`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheStats {
    /// Plans kept.
    pub entries: usize,
    /// Their bytes (see [`CacheLimits`]).
    pub bytes: u64,
    /// The limits.
    pub limits: CacheLimits,
    /// Each plan's input shapes, by input name, most recently used first.
    pub shapes: Vec<Vec<(String, Vec<u32>)>>,
}

/// An output a run allocated ([`Session::run_alloc`]): its name, shape and type, and bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedTensor {
    /// The output's name.
    pub name: String,
    /// Its shape and type at this run.
    pub info: TensorInfo,
    /// Its bytes, densely packed, row-major, little-endian.
    pub data: Vec<u8>,
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

    /// The shapes of the plan made at load: every input's declared dimensions when they are
    /// fixed, a leading symbolic (batch) dimension taken as 1; `None` when another dimension
    /// is symbolic or an input has no declared shape.
    fn first_shapes(&self) -> Option<Vec<Vec<u32>>> {
        self.inputs
            .iter()
            .map(|i| {
                let dims = i.dims.as_ref()?;
                dims.iter()
                    .enumerate()
                    .map(|(k, d)| match d {
                        Dim::Fixed(v) => Some(*v),
                        _ if k == 0 => {
                            log::info!(
                                "input {} is declared {}: its batch dimension is taken as 1 \
                                 for the plan made at load",
                                i.name,
                                i.dims_text()
                            );
                            Some(1)
                        }
                        _ => None,
                    })
                    .collect()
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
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

    /// The plan of the latest run (or the one made at load), if any.
    pub fn current(&self) -> Option<Arc<Plan>> {
        self.lock().plans.front().map(|(_, p)| p.clone())
    }

    /// The plan of the latest run, or an error saying which input's shape must be given
    /// first ([`ImportError::SymbolicInput`]).
    ///
    /// # Errors
    /// No plan yet: the first input whose shape is not known.
    pub fn current_or_shapes_needed(&self) -> Result<Arc<Plan>, SessionError> {
        if let Some(plan) = self.current() {
            return Ok(plan);
        }
        let input = self
            .inputs
            .iter()
            .find(|i| !i.is_fixed())
            .or(self.inputs.first());
        Err(ImportError::SymbolicInput {
            input: input.map(|i| i.name.clone()).unwrap_or_default(),
            declared: input.map(DeclaredTensor::dims_text).unwrap_or_default(),
        }
        .into())
    }

    /// What the plan cache holds now.
    pub fn cache_stats(&self) -> CacheStats {
        let cache = self.lock();
        CacheStats {
            entries: cache.plans.len(),
            bytes: cache.plans.iter().map(|(_, p)| p.bytes).sum::<u64>()
                + self.scratch.bytes() as u64,
            limits: self.options.cache,
            shapes: cache
                .plans
                .iter()
                .map(|(shapes, _)| {
                    self.inputs
                        .iter()
                        .zip(shapes)
                        .map(|(i, s)| (i.name.clone(), s.clone()))
                        .collect()
                })
                .collect(),
        }
    }

    /// The input shapes in the order of [`Session::inputs`], checked against the declared
    /// ones.
    fn fit(&self, given: &[(&str, &[u32])]) -> Result<Vec<Vec<u32>>, SessionError> {
        let names = || {
            self.inputs
                .iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>()
        };
        for (name, _) in given {
            if !self.inputs.iter().any(|i| i.name == *name) {
                return Err(SessionError::Input(format!(
                    "no network input named {name:?} (the network has {:?})",
                    names()
                )));
            }
        }
        let mut symbols: HashMap<&str, (u32, &str)> = HashMap::new();
        let mut shapes = Vec::with_capacity(self.inputs.len());
        for input in &self.inputs {
            let Some((_, shape)) = given.iter().find(|(n, _)| *n == input.name) else {
                return Err(SessionError::Input(format!(
                    "network input {} is not bound",
                    input.name
                )));
            };
            if let Some(dims) = &input.dims {
                if dims.len() != shape.len() {
                    return Err(SessionError::Input(format!(
                        "input {}: got rank {} ({shape:?}), the model requires rank {}: {}",
                        input.name,
                        shape.len(),
                        dims.len(),
                        input.dims_text()
                    )));
                }
                for (k, (d, &v)) in dims.iter().zip(shape.iter()).enumerate() {
                    match d {
                        Dim::Fixed(want) if *want != v => {
                            return Err(SessionError::Input(format!(
                                "input {}: dimension {k} is {v}, the model requires {want} \
                                 (declared {})",
                                input.name,
                                input.dims_text()
                            )));
                        }
                        // "?" is PaddlePaddle's name for any unknown dimension.
                        Dim::Named(sym) if sym == "?" => {}
                        Dim::Named(sym) => match symbols.get(sym.as_str()) {
                            Some(&(size, other)) if size != v => {
                                return Err(SessionError::Input(format!(
                                    "input {}: dimension {k} ({sym}) is {v}, but input {other} \
                                     has {sym} = {size}",
                                    input.name
                                )));
                            }
                            Some(_) => {}
                            None => {
                                symbols.insert(sym, (v, &input.name));
                            }
                        },
                        _ => {}
                    }
                }
            }
            shapes.push(shape.to_vec());
        }
        Ok(shapes)
    }

    /// The plan for these input shapes (every input by name): the cached one, or one made,
    /// loaded and cached now.
    ///
    /// # Errors
    /// [`SessionError::Input`] for shapes that do not fit the declared ones,
    /// [`SessionError::Shape`] when the model cannot run at them.
    pub fn plan(&self, given: &[(&str, &[u32])]) -> Result<Arc<Plan>, SessionError> {
        let shapes = self.fit(given)?;
        if let Some(plan) = self.lock().touch(&shapes) {
            return Ok(plan);
        }
        self.make_plan(shapes, given, true)
    }

    /// Makes, caches and returns the plan for `shapes` (the order of [`Session::inputs`]);
    /// with `at_shape`, an import that fails is a [`SessionError::Shape`] naming them.
    fn make_plan(
        &self,
        shapes: Vec<Vec<u32>>,
        given: &[(&str, &[u32])],
        at_shape: bool,
    ) -> Result<Arc<Plan>, SessionError> {
        let plan = self.build(&shapes).map_err(|error| {
            // An import that fails at these shapes is theirs (a size that makes a layer
            // invalid); an optimiser's or a backend's refusal is not.
            if !at_shape || !matches!(error, SessionError::Import(_)) {
                return error;
            }
            SessionError::Shape {
                shapes: given
                    .iter()
                    .map(|(n, s)| format!("{n}={s:?}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                error: Box::new(error),
            }
        })?;
        let mut cache = self.lock();
        // Another thread may have made the same plan meanwhile: keep one.
        if let Some(kept) = cache.touch(&shapes) {
            return Ok(kept);
        }
        cache.plans.push_front((shapes, plan.clone()));
        let limits = self.options.cache;
        let mut bytes: u64 =
            cache.plans.iter().map(|(_, p)| p.bytes).sum::<u64>() + self.scratch.bytes() as u64;
        while cache.plans.len() > limits.entries.max(1)
            || (bytes > limits.bytes && cache.plans.len() > 1)
        {
            if let Some((old, dropped)) = cache.plans.pop_back() {
                log::debug!(
                    "plan cache: dropping the plan of shapes {old:?} ({} bytes)",
                    dropped.bytes
                );
                bytes -= dropped.bytes;
            }
        }
        Ok(plan)
    }

    /// Imports (for a model), optimises and loads a plan for `shapes`.
    fn build(&self, shapes: &[Vec<u32>]) -> Result<Arc<Plan>, SessionError> {
        let start = std::time::Instant::now();
        let imported;
        let network = match &self.source {
            Source::Compiled(optimized) => {
                let plan = Plan::load(self.runtime.clone(), (**optimized).clone(), &self.scratch)?;
                log::debug!(
                    "plan of a compiled network loaded in {:.1} ms ({} bytes)",
                    start.elapsed().as_secs_f64() * 1e3,
                    plan.bytes
                );
                return Ok(Arc::new(plan));
            }
            Source::Network(n) => n,
            Source::Model(m) => {
                let import = onnx::ImportOptions {
                    input_shapes: self
                        .inputs
                        .iter()
                        .zip(shapes)
                        .map(|(i, s)| (i.name.clone(), s.clone()))
                        .collect(),
                    ..onnx::ImportOptions::default()
                };
                imported = m.instantiate(&import)?;
                &imported
            }
        };
        let preferences = if self.options.backends.is_empty() {
            self.runtime.default_preferences()
        } else {
            self.options.backends.clone()
        };
        let prefs: Vec<&str> = preferences.iter().map(String::as_str).collect();
        let imported_at = start.elapsed();
        let optimized = self
            .runtime
            .optimize(network, &prefs, &self.options.optimizer)?;
        let optimized_at = start.elapsed();
        let plan = Plan::load(self.runtime.clone(), optimized, &self.scratch)?;
        log::debug!(
            "plan for shapes {shapes:?}: imported in {:.1} ms, optimised in {:.1} ms, loaded in \
             {:.1} ms ({} bytes)",
            imported_at.as_secs_f64() * 1e3,
            (optimized_at - imported_at).as_secs_f64() * 1e3,
            (start.elapsed() - optimized_at).as_secs_f64() * 1e3,
            plan.bytes
        );
        Ok(Arc::new(plan))
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
        let plan = self.plan_for(inputs)?;
        let buffers = plan.run_to_vec(inputs).map_err(SessionError::Run)?;
        Ok(plan
            .outputs()
            .iter()
            .zip(buffers)
            .map(|((name, info), data)| OwnedTensor {
                name: name.clone(),
                info: info.clone(),
                data,
            })
            .collect())
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
        let optimized = self.runtime.reoptimize(&old.optimized)?;
        let plan = Arc::new(Plan::load(self.runtime.clone(), optimized, &self.scratch)?);
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

/// A network loaded for one set of input shapes: what a [`Session`] runs. Unloaded when the
/// last holder drops it.
#[derive(Debug)]
pub struct Plan {
    runtime: Arc<Runtime>,
    optimized: OptimizedNetwork,
    id: NetworkId,
    inputs: Vec<(String, TensorInfo)>,
    outputs: Vec<(String, TensorInfo)>,
    /// Its own memory (constants, or its arena when an out-of-process backend maps it) and
    /// the backends' memory managers' bytes at load.
    bytes: u64,
    /// Set by [`Plan::unload_now`], so that `drop` does not unload again.
    unloaded: AtomicBool,
}

impl Plan {
    fn load(
        runtime: Arc<Runtime>,
        optimized: OptimizedNetwork,
        scratch: &ScratchMemory,
    ) -> Result<Self, ExecuteError> {
        let id = runtime.load_network_in(&optimized, scratch)?;
        let named = |list: Vec<(&str, &TensorInfo)>| {
            list.into_iter()
                .map(|(n, i)| (n.to_owned(), i.clone()))
                .collect()
        };
        let own = runtime.network_own_bytes(id).unwrap_or(0) as u64;
        let managers: u64 = runtime
            .backend_memory(id)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(_, m)| m.ok().flatten())
            .sum();
        Ok(Self {
            inputs: named(optimized.network().inputs()),
            outputs: named(optimized.network().outputs()),
            bytes: own + managers,
            runtime,
            optimized,
            id,
            unloaded: AtomicBool::new(false),
        })
    }

    /// The network's id in its runtime.
    pub fn id(&self) -> NetworkId {
        self.id
    }

    /// The memory this plan holds (see [`CacheLimits`]).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The inputs with the shapes and types this plan runs.
    pub fn inputs(&self) -> &[(String, TensorInfo)] {
        &self.inputs
    }

    /// The outputs with their shapes and types at this plan's input shapes.
    pub fn outputs(&self) -> &[(String, TensorInfo)] {
        &self.outputs
    }

    /// The optimised network: per layer, the backend and why.
    pub fn optimized(&self) -> &OptimizedNetwork {
        &self.optimized
    }

    /// The per-layer assignment as text ([`OptimizedNetwork::explain`]).
    pub fn explain(&self) -> String {
        self.optimized.explain()
    }

    /// How many layers each backend runs.
    pub fn layers_per_backend(&self) -> BTreeMap<String, usize> {
        self.optimized
            .assignments()
            .iter()
            .fold(BTreeMap::new(), |mut m, a| {
                *m.entry(a.backend.clone()).or_default() += 1;
                m
            })
    }

    /// Runs once with caller-provided buffers ([`Runtime::enqueue`]: every binding is checked
    /// first and nothing runs on a mismatch; runs of one plan are serialised).
    ///
    /// # Errors
    /// [`ExecuteError::Binding`] for a wrong name, shape, type or size; the backend's error.
    pub fn run(
        &self,
        inputs: &[InputTensor<'_>],
        outputs: &mut [OutputTensor<'_>],
    ) -> Result<(), ExecuteError> {
        self.runtime.enqueue(self.id, inputs, outputs)
    }

    /// Turns per-layer timing on (from zero) or off ([`Runtime::set_profiling`]).
    pub fn set_profiling(&self, on: bool) {
        self.runtime.set_profiling(self.id, on);
    }

    /// Per-layer times since profiling was turned on, in the order the layers run; `None`
    /// while it is off ([`Runtime::profile`]).
    pub fn profile(&self) -> Option<Vec<LayerProfile>> {
        self.runtime.profile(self.id)
    }

    /// One zeroed buffer per output, of its size, in the order of [`Plan::outputs`]: what
    /// [`Plan::run`] writes into, and can write into again run after run.
    ///
    /// # Errors
    /// [`ExecuteError::Binding`] for an output whose size cannot be addressed.
    pub fn output_buffers(&self) -> Result<Vec<Vec<u8>>, ExecuteError> {
        self.outputs
            .iter()
            .map(|(name, info)| {
                info.num_bytes().map(|n| vec![0u8; n]).ok_or_else(|| {
                    ExecuteError::Binding(format!("output {name}: {info} has no byte size"))
                })
            })
            .collect()
    }

    /// Runs once and returns every output's bytes, in the order of [`Plan::outputs`].
    ///
    /// # Errors
    /// As [`Plan::run`].
    pub fn run_to_vec(&self, inputs: &[InputTensor<'_>]) -> Result<Vec<Vec<u8>>, ExecuteError> {
        let mut buffers = self.output_buffers()?;
        let mut bound: Vec<OutputTensor<'_>> = self
            .outputs
            .iter()
            .zip(buffers.iter_mut())
            .map(|((name, info), data)| OutputTensor { name, info, data })
            .collect();
        self.run(inputs, &mut bound)?;
        drop(bound);
        Ok(buffers)
    }

    /// Unloads the network now, returning what went wrong.
    fn unload_now(&self) -> Result<(), ExecuteError> {
        if self.unloaded.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.runtime.unload_network(self.id)
    }
}

impl Drop for Plan {
    fn drop(&mut self) {
        if let Err(e) = self.unload_now() {
            log::error!("network {}: unload failed: {e}", self.id);
        }
    }
}

/// The bytes an input of `info` takes from `.npy` values of the input called `name`: float32
/// for a Float32 input; int32, or int64 narrowed with a range check, for a Signed32 input
/// (ONNX int64 inputs are Signed32 in the network); bool for a Boolean input; uint8 for a
/// QAsymmU8 input, int8 for a QAsymmS8 or QSymmS8 one (their quantized values).
///
/// # Errors
/// A message naming the input when the file's type does not fit the input's or an int64
/// value lies outside Signed32's range.
pub fn input_bytes(name: &str, info: &TensorInfo, data: &NpyData) -> Result<Vec<u8>, String> {
    use backplane_api::DataType;
    Ok(match (info.data_type, data) {
        (DataType::Float32, NpyData::F32(v)) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        (DataType::Signed32, NpyData::I32(v)) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        (DataType::Signed32, NpyData::I64(v)) => onnx::narrow_to_i32(v)
            .map_err(|bad| {
                format!(
                    "input {name}: {bad} is outside the range of Signed32, to which the host \
                     narrows int64"
                )
            })?
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        (DataType::Boolean, NpyData::Bool(v)) | (DataType::QAsymmU8, NpyData::U8(v)) => v.clone(),
        (DataType::QAsymmS8 | DataType::QSymmS8, NpyData::I8(v)) => {
            v.iter().map(|&b| b as u8).collect()
        }
        (t, d) => {
            return Err(format!(
                "input {name} is {t} in the network, the file holds {}",
                d.dtype()
            ));
        }
    })
}

/// An output's bytes as `.npy` values of its type: Float32 as float32, Signed32 as int32,
/// Boolean as bool, QAsymmU8 as uint8, QAsymmS8 and QSymmS8 as int8 (quantized values).
///
/// # Errors
/// A message naming the output for any other data type.
pub fn output_values(name: &str, info: &TensorInfo, bytes: &[u8]) -> Result<NpyData, String> {
    use backplane_api::DataType;
    let words = || bytes.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]);
    Ok(match info.data_type {
        DataType::Float32 => NpyData::F32(words().map(f32::from_le_bytes).collect()),
        DataType::Signed32 => NpyData::I32(words().map(i32::from_le_bytes).collect()),
        DataType::Boolean => NpyData::Bool(bytes.to_vec()),
        DataType::QAsymmU8 => NpyData::U8(bytes.to_vec()),
        DataType::QAsymmS8 | DataType::QSymmS8 => {
            NpyData::I8(bytes.iter().map(|&b| b as i8).collect())
        }
        other => {
            return Err(format!(
                "output {name} is {other}, which .npy output does not take"
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{graph::network::NetworkBuilder, runtime::CreationOptions};
    use backplane_api::{ActivationDescriptor, ActivationFunction, DataType, LayerDescriptor};

    fn relu_network() -> Network {
        let mut b = NetworkBuilder::new();
        let x = b
            .add_input("x", TensorInfo::new(&[1, 4], DataType::Float32))
            .unwrap();
        let relu = ActivationDescriptor {
            function: ActivationFunction::ReLU,
            a: 0.0,
            b: 0.0,
        };
        let y = b
            .add_layer("relu", LayerDescriptor::Activation(relu), &[x])
            .unwrap();
        b.add_output("y", y).unwrap();
        b.build().unwrap()
    }

    fn cpu_ref_only() -> Arc<Runtime> {
        Arc::new(Runtime::with_path_list(
            CreationOptions::default(),
            crate::plugins::paths::PathSource::Option,
            "",
        ))
    }

    #[test]
    fn runs_and_unloads_when_dropped() {
        let runtime = cpu_ref_only();
        let session =
            Session::from_network(runtime.clone(), &relu_network(), &SessionOptions::default())
                .unwrap();
        let plan = session.current().unwrap();
        assert_eq!(plan.layers_per_backend().get("CpuRef"), Some(&3));
        let info = TensorInfo::new(&[1, 4], DataType::Float32);
        let data: Vec<u8> = [-1.0f32, 2.0, -3.0, 4.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let out = session
            .run_alloc(&[InputTensor {
                name: "x",
                info: &info,
                data: &data,
            }])
            .unwrap();
        assert_eq!(floats(&out[0].data), [0.0, 2.0, 0.0, 4.0]);
        let id = plan.id();
        drop(plan);
        drop(session);
        assert_eq!(runtime.network_memory(id), None);
    }

    #[test]
    fn a_wrong_shape_runs_nothing() {
        let session =
            Session::from_network(cpu_ref_only(), &relu_network(), &SessionOptions::default())
                .unwrap();
        let info = TensorInfo::new(&[1, 3], DataType::Float32);
        let err = session
            .run_alloc(&[InputTensor {
                name: "x",
                info: &info,
                data: &[0; 12],
            }])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "input x: dimension 1 is 3, the model requires 4 (declared [1, 4])"
        );
        assert_eq!(session.cache_stats().entries, 1);
    }

    fn floats(bytes: &[u8]) -> Vec<f32> {
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// A value info of float32 with these dimensions: a number is fixed, a name symbolic.
    fn declared(name: &str, dims: &[&str]) -> onnx::proto::ValueInfoProto {
        use onnx::proto::{Dimension, TensorShapeProto, TypeProto, TypeProtoTensor, data_type};
        onnx::proto::ValueInfoProto {
            name: name.into(),
            r#type: Some(TypeProto {
                tensor_type: Some(TypeProtoTensor {
                    elem_type: data_type::FLOAT,
                    shape: Some(TensorShapeProto {
                        dim: dims
                            .iter()
                            .map(|d| match d.parse::<i64>() {
                                Ok(v) => Dimension {
                                    dim_value: Some(v),
                                    dim_param: None,
                                },
                                Err(_) => Dimension {
                                    dim_value: None,
                                    dim_param: Some((*d).to_owned()),
                                },
                            })
                            .collect(),
                    }),
                }),
            }),
        }
    }

    fn node(
        op: &str,
        inputs: &[&str],
        output: &str,
        attribute: Vec<onnx::proto::AttributeProto>,
    ) -> onnx::proto::NodeProto {
        onnx::proto::NodeProto {
            op_type: op.into(),
            name: output.into(),
            input: inputs.iter().map(|s| (*s).to_owned()).collect(),
            output: vec![output.into()],
            attribute,
            ..Default::default()
        }
    }

    fn ints(name: &str, v: &[i64]) -> onnx::proto::AttributeProto {
        onnx::proto::AttributeProto {
            name: name.into(),
            ints: v.to_vec(),
            r#type: onnx::proto::attribute_type::INTS,
            ..Default::default()
        }
    }

    fn tensor(name: &str, dims: &[i64], f: &[f32], i: &[i64]) -> onnx::proto::TensorProto {
        onnx::proto::TensorProto {
            dims: dims.to_vec(),
            data_type: if f.is_empty() {
                onnx::proto::data_type::INT64
            } else {
                onnx::proto::data_type::FLOAT
            },
            float_data: f.to_vec(),
            int64_data: i.to_vec(),
            name: name.into(),
            ..Default::default()
        }
    }

    fn model(
        nodes: Vec<onnx::proto::NodeProto>,
        init: Vec<onnx::proto::TensorProto>,
        inputs: Vec<onnx::proto::ValueInfoProto>,
        outputs: Vec<onnx::proto::ValueInfoProto>,
    ) -> onnx::Model {
        use onnx::proto::{GraphProto, ModelProto, OperatorSetIdProto};
        onnx::Model::new(ModelProto {
            ir_version: 8,
            opset_import: vec![OperatorSetIdProto {
                domain: String::new(),
                version: 13,
            }],
            graph: Some(GraphProto {
                node: nodes,
                name: "symbolic".into(),
                initializer: init,
                input: inputs,
                output: outputs,
                ..GraphProto::default()
            }),
            ..ModelProto::default()
        })
        .unwrap()
    }

    /// `x [N, 2, H, W]` + bias, ReLU, 2×2 max pooling of stride 2, then reshaped to
    /// `[N, -1]` through a shape sub-graph (Shape, Gather, Unsqueeze, Concat): a model whose
    /// every size, the Reshape's target included, follows the input's.
    fn pooled_model() -> onnx::Model {
        let pool = vec![ints("kernel_shape", &[2, 2]), ints("strides", &[2, 2])];
        model(
            vec![
                node("Add", &["x", "bias"], "a", vec![]),
                node("Relu", &["a"], "r", vec![]),
                node("MaxPool", &["r"], "p", pool),
                node("Shape", &["p"], "s", vec![]),
                node("Gather", &["s", "zero"], "n", vec![]),
                node("Unsqueeze", &["n", "axes"], "nu", vec![]),
                node("Concat", &["nu", "minus_one"], "target", {
                    let mut axis = ints("axis", &[]);
                    axis.i = 0;
                    axis.r#type = onnx::proto::attribute_type::INT;
                    vec![axis]
                }),
                node("Reshape", &["p", "target"], "y", vec![]),
            ],
            vec![
                tensor("bias", &[2, 1, 1], &[0.5, -1.0], &[]),
                tensor("zero", &[], &[], &[0]),
                tensor("axes", &[1], &[], &[0]),
                tensor("minus_one", &[1], &[], &[-1]),
            ],
            vec![declared("x", &["N", "2", "H", "W"])],
            vec![declared("y", &["N", "F"])],
        )
    }

    /// The oracle of [`pooled_model`], written out.
    fn pooled(x: &[f32], [n, h, w]: [usize; 3]) -> Vec<f32> {
        let bias = [0.5f32, -1.0];
        let mut out = Vec::new();
        for b in 0..n {
            for c in 0..2 {
                for i in 0..h / 2 {
                    for j in 0..w / 2 {
                        let mut m = f32::MIN;
                        for (di, dj) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                            let v = x[((b * 2 + c) * h + 2 * i + di) * w + 2 * j + dj];
                            m = m.max((v + bias[c]).max(0.0));
                        }
                        out.push(m);
                    }
                }
            }
        }
        out
    }

    fn run_pooled(session: &Session, n: u32, h: u32, w: u32) -> Result<OwnedTensor, SessionError> {
        let info = TensorInfo::new(&[n, 2, h, w], DataType::Float32);
        let x: Vec<f32> = (0..n * 2 * h * w)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
            .collect();
        let data: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = session.run_alloc(&[InputTensor {
            name: "x",
            info: &info,
            data: &data,
        }])?;
        assert_eq!(
            floats(&out[0].data),
            pooled(&x, [n as usize, h as usize, w as usize]),
            "shape {n}x2x{h}x{w}"
        );
        Ok(out.remove(0))
    }

    /// One session runs any shape that fits, each through its own plan, with the
    /// initializers' constant shared by every plan.
    #[test]
    fn runs_any_fitting_shape_with_shared_constants() {
        let session =
            Session::from_model(cpu_ref_only(), pooled_model(), &SessionOptions::default())
                .unwrap();
        assert_eq!(session.inputs()[0].dims_text(), "[N, 2, H, W]");
        // H and W are symbolic: nothing could be planned at load.
        assert!(session.current().is_none());
        assert_eq!(
            session.current_or_shapes_needed().unwrap_err().to_string(),
            "input x is declared [N, 2, H, W] and its shape was not given: give it with \
             --shape x=D1,D2,... or --input x=FILE.npy (the library's \
             ImportOptions::input_shapes, Python's shapes=)"
        );
        for (n, h, w, features) in [(1, 4, 6, 12), (3, 2, 2, 2), (2, 8, 4, 16), (1, 4, 6, 12)] {
            let y = run_pooled(&session, n, h, w).unwrap();
            assert_eq!(y.info.shape.as_slice(), [n, features]);
        }
        let stats = session.cache_stats();
        assert_eq!(stats.entries, 3);
        assert_eq!(
            stats.shapes[0],
            [("x".to_owned(), vec![1, 2, 4, 6])],
            "the latest run's plan comes first"
        );
        // The bias's Constant descriptor is one allocation, held by every plan.
        let plans: Vec<Arc<Plan>> = [[1, 2, 4, 6], [3, 2, 2, 2]]
            .iter()
            .map(|s| session.plan(&[("x", s)]).unwrap())
            .collect();
        let bias = |p: &Plan| {
            p.optimized()
                .network()
                .layers()
                .iter()
                .find(|l| l.name == "bias")
                .map(|l| Arc::clone(&l.descriptor))
                .unwrap()
        };
        assert!(Arc::ptr_eq(&bias(&plans[0]), &bias(&plans[1])));
    }

    /// The cache keeps at most its entries; the plans it drops are unloaded.
    #[test]
    fn the_cache_drops_the_least_recently_used_plan() {
        let runtime = cpu_ref_only();
        let mut options = SessionOptions::default();
        options.set_cache_limits(2, u64::MAX);
        let session = Session::from_model(runtime.clone(), pooled_model(), &options).unwrap();
        let mut ids = Vec::new();
        for w in [2, 4, 6, 8, 10] {
            run_pooled(&session, 1, 2, w).unwrap();
            ids.push(session.current().unwrap().id());
        }
        assert_eq!(session.cache_stats().entries, 2);
        let loaded: Vec<bool> = ids
            .iter()
            .map(|&id| runtime.network_memory(id).is_some())
            .collect();
        assert_eq!(loaded, [false, false, false, true, true]);
        // A byte limit below one plan keeps only the latest.
        let mut options = SessionOptions::default();
        options.set_cache_limits(8, 1);
        let session = Session::from_model(runtime, pooled_model(), &options).unwrap();
        for w in [2, 4, 6] {
            run_pooled(&session, 1, 2, w).unwrap();
        }
        assert_eq!(session.cache_stats().entries, 1);
    }

    /// Shapes that do not fit are refused by name and dimension, nothing is loaded for them,
    /// and the session goes on.
    #[test]
    fn shapes_that_do_not_fit_are_named() {
        let session =
            Session::from_model(cpu_ref_only(), pooled_model(), &SessionOptions::default())
                .unwrap();
        let err = |shape: &[u32]| session.plan(&[("x", shape)]).unwrap_err().to_string();
        assert_eq!(
            err(&[1, 2, 4]),
            "input x: got rank 3 ([1, 2, 4]), the model requires rank 4: [N, 2, H, W]"
        );
        assert_eq!(
            err(&[1, 3, 4, 4]),
            "input x: dimension 1 is 3, the model requires 2 (declared [N, 2, H, W])"
        );
        // A size that makes a layer invalid: the pooling window is larger than the input.
        let e = err(&[1, 2, 1, 4]);
        assert!(
            e.starts_with("at input shapes x=[1, 2, 1, 4]: ") && e.contains('p'),
            "{e}"
        );
        assert_eq!(
            session.plan(&[("y", &[1])]).unwrap_err().to_string(),
            "no network input named \"y\" (the network has [\"x\"])"
        );
        assert_eq!(
            session.plan(&[]).unwrap_err().to_string(),
            "network input x is not bound"
        );
        assert_eq!(session.cache_stats().entries, 0);
        run_pooled(&session, 1, 2, 2).unwrap();
        assert_eq!(session.cache_stats().entries, 1);
    }

    /// One symbolic name is one size across inputs; `input_shapes` fixes shapes at load.
    #[test]
    fn a_symbolic_name_has_one_size_and_given_shapes_load_now() {
        let two_inputs = || {
            model(
                vec![node("Add", &["a", "b"], "y", vec![])],
                vec![],
                vec![declared("a", &["N", "3"]), declared("b", &["N", "3"])],
                vec![declared("y", &["N", "3"])],
            )
        };
        let session =
            Session::from_model(cpu_ref_only(), two_inputs(), &SessionOptions::default()).unwrap();
        // Only the batch is symbolic: a plan for N = 1 is made at load.
        assert_eq!(
            session.cache_stats().shapes,
            [vec![
                ("a".to_owned(), vec![1, 3]),
                ("b".to_owned(), vec![1, 3])
            ]]
        );
        assert_eq!(
            session
                .plan(&[("a", &[2, 3]), ("b", &[4, 3])])
                .unwrap_err()
                .to_string(),
            "input b: dimension 0 (N) is 4, but input a has N = 2"
        );
        session.plan(&[("a", &[4, 3]), ("b", &[4, 3])]).unwrap();
        // A shape given for a sizes N in b too.
        let mut options = SessionOptions::default();
        options.set_input_shape("a", &[5, 3]).unwrap();
        let session = Session::from_model(cpu_ref_only(), two_inputs(), &options).unwrap();
        assert_eq!(session.inputs()[0].dims_text(), "[5, 3]");
        assert_eq!(session.inputs()[1].dims_text(), "[5, 3]");
        assert_eq!(
            session
                .plan(&[("a", &[4, 3]), ("b", &[4, 3])])
                .unwrap_err()
                .to_string(),
            "input a: dimension 0 is 4, the model requires 5 (declared [5, 3])"
        );
        options.set_input_shape("a", &[5, 4]).unwrap();
        assert_eq!(
            Session::from_model(cpu_ref_only(), two_inputs(), &options)
                .unwrap_err()
                .to_string(),
            "node a (Input): the given shape [5, 4] does not match the declared one [N, 3]"
        );
    }

    /// The builder the CLI, C and Python share: each kind of option, how text is read, and
    /// what is refused (exact messages).
    #[test]
    fn options_are_built_and_checked_in_one_place() {
        use backplane_api::Value;
        let mut o = SessionOptions::default();
        o.set_backends(" CpuFast, ,CpuRef ".split(','))
            .set_fusion(false);
        assert_eq!(o.backends, ["CpuFast", "CpuRef"]);
        assert!(o.optimizer.no_subgraph_optimization);
        o.add_backend_option_text("CpuFast:Threads=2").unwrap();
        assert_eq!(
            o.optimizer.options_for("CpuFast").get("Threads"),
            Some(&Value::Int(2))
        );
        // A typed value is kept as given: text "2" stays text.
        o.set_backend_option("CpuFast", "Threads", Value::Str("2".into()))
            .unwrap();
        assert_eq!(
            o.optimizer.options_for("CpuFast").get("Threads"),
            Some(&Value::Str("2".into()))
        );
        assert_eq!(o.optimizer.options_for("CpuFast").entries.len(), 1);
        assert_eq!(
            o.add_backend_option_text("CpuFast").unwrap_err(),
            "backend option \"CpuFast\" is not ID:KEY=VALUE"
        );
        assert_eq!(
            o.set_backend_option("", "K", Value::Bool(true))
                .unwrap_err(),
            "backend option \"\":\"K\": the backend id and the key must not be empty"
        );
        o.add_input_shape_text("x=1, 3,48,192").unwrap();
        assert_eq!(o.input_shapes["x"], [1, 3, 48, 192]);
        assert_eq!(
            o.add_input_shape_text("x=1,-3").unwrap_err(),
            "shape \"x=1,-3\": each dimension must be a whole number in 0..=4294967295"
        );
        assert_eq!(
            o.add_input_shape_text("x").unwrap_err(),
            "shape \"x\" is not NAME=D1,D2,..."
        );
        assert_eq!(
            o.set_input_shape("y", &[65536, 32768]).unwrap_err(),
            "input y: shape [65536, 32768] has more than 2147483647 elements"
        );
        o.set_input_shape("y", &[65536, 32767]).unwrap();
        o.set_input_shape("z", &[0, 7]).unwrap();
        assert_eq!(
            o.set_input_shape("", &[1]).unwrap_err(),
            "input shape [1]: the input name is empty"
        );
    }

    /// A layer whose output has more bytes than a `usize` holds (here `BroadcastTo` a
    /// 2^32-per-side cube of floats) fails the load with an error naming it, where its size
    /// used to be read as 0 bytes.
    #[test]
    fn an_output_too_large_to_address_fails_the_load() {
        let mut b = NetworkBuilder::new();
        let x = b
            .add_input("x", TensorInfo::new(&[1], DataType::Float32))
            .unwrap();
        let huge = b
            .add_layer(
                "huge",
                LayerDescriptor::BroadcastTo(backplane_api::BroadcastToDescriptor {
                    shape: vec![u32::MAX; 3].into(),
                }),
                &[x],
            )
            .expect("shape inference takes it: only the size overflows");
        b.add_output("y", huge).unwrap();
        let err = Session::from_network(
            cpu_ref_only(),
            &b.build().unwrap(),
            &SessionOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.ends_with(
                "layer huge: its output [4294967295, 4294967295, 4294967295] Float32 has more \
                 bytes than this machine can address"
            ),
            "{err}"
        );
    }
}
