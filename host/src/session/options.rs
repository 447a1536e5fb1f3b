//! What a session is made with: preferences, fusion, per-backend options, input shapes and
//! the plan cache's limits, each checked as it is given.

use std::collections::HashMap;

use crate::graph::optimizer::OptimizerOptions;

/// How a [`Session`](super::Session) is made.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// Backend ids in order of preference; empty: [`Runtime::default_preferences`](crate::Runtime::default_preferences).
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
    /// The memory budget of each load, in bytes ([`MemoryBudget`](crate::MemoryBudget)): the constants
    /// the importer folds and copies, then the loaded network's constants, planned tensors
    /// and outputs, charged before they are allocated. `None`: this machine's physical memory.
    pub max_memory: Option<u64>,
}

/// How many plans a [`Session`](super::Session) keeps loaded: at most `entries` of them and at most `bytes`
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
    /// The memory budget of each load in bytes: [`SessionOptions::max_memory`], else this
    /// machine's physical memory.
    pub fn max_memory(&self) -> u64 {
        self.max_memory
            .unwrap_or_else(crate::memory::budget::physical_memory)
    }

    /// Sets the memory budget of each load from text as people write it (`4G`, `512M`,
    /// `1048576`; [`parse_bytes`](crate::parse_bytes)).
    ///
    /// # Errors
    /// What is wrong with the text; zero bytes.
    pub fn set_max_memory(&mut self, text: &str) -> Result<&mut Self, String> {
        let bytes = crate::memory::budget::parse_bytes(text)?;
        if bytes == 0 {
            return Err("a memory budget of 0 bytes allows nothing".to_owned());
        }
        self.max_memory = Some(bytes);
        Ok(self)
    }

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
