//! The optimizer: assigns every layer to the first preferred backend that supports it,
//! records every refusal with its reason, and inserts MemCopy layers where connected layers
//! run on backends that cannot share memory. The result explains itself ([`OptimizedNetwork::explain`],
//! [`OptimizedNetwork::to_dot`]).
//!
//! Then each backend gets its maximal subgraphs through `optimize_subgraph`
//! ([`crate::graph::substitution`]): valid substitutions are applied, invalid ones refused with a
//! note, and failed layers re-assigned to the next preferred backend.
//!
//! Files: this one holds the options, the result types and the [`optimize`] driver; `assign`
//! the assignment and MemCopy passes; `explain` the text and Graphviz explanations.

use std::{
    collections::BTreeMap,
    fmt::{self, Write},
};

use backplane_api::{BackendOptions, LayerDescriptor, LayerKind, TensorInfo, Value};

use crate::{
    graph::network::{Layer, Network, SharedBytes},
    graph::rewrite,
    graph::substitution,
    plugins::registry::{BackendRegistry, describe_options},
};

mod assign;
mod explain;

use assign::{assign, insert_mem_copies};

/// Options of [`optimize`].
#[derive(Debug, Clone, Default)]
pub struct OptimizerOptions {
    /// Fail instead of falling back when a layer's first preferred backend refuses it.
    pub no_fallback: bool,
    /// `(layer name, backend id)`: the layer must run on that backend.
    pub pins: Vec<(String, String)>,
    /// Skip the graph rewrites of `crate::graph::rewrite` and every backend's `optimize_subgraph`
    /// (no fusion or other substitution): each layer runs as its own workload, as imported.
    /// For measuring what fusion gains.
    pub no_subgraph_optimization: bool,
    /// Backend options per backend id (Arm NN's `ModelOptions`): each backend of the network
    /// receives its own in `optimize_subgraph` and at workload-factory creation (Backend API
    /// 1.1) and in `create_backend_context` (every version). A 1.0 plugin is called through
    /// its 1.0 entries, and the runtime warns once that the options did not reach them.
    pub backend_options: BTreeMap<String, BackendOptions>,
}

/// No options.
static NO_OPTIONS: BackendOptions = BackendOptions {
    entries: backplane_api::RVec::new(),
};

impl OptimizerOptions {
    /// Adds one option from the command line's `ID:KEY=VALUE` (the value typed by
    /// [`Value::parse`]); a later value of the same key for the same backend wins.
    ///
    /// # Errors
    /// Text that is not `ID:KEY=VALUE` with a non-empty id and key.
    pub fn add_backend_option(&mut self, spec: &str) -> Result<(), String> {
        let bad = || format!("backend option {spec:?} is not ID:KEY=VALUE");
        let (id, rest) = spec.split_once(':').ok_or_else(bad)?;
        let (key, value) = rest.split_once('=').ok_or_else(bad)?;
        if id.is_empty() || key.is_empty() {
            return Err(bad());
        }
        self.set_backend_option(id, key, Value::parse(value))
    }

    /// Sets option `key` of backend `id` to `value`, as typed by the caller; a later value of
    /// the same key for the same backend wins.
    ///
    /// # Errors
    /// An empty id or key.
    pub fn set_backend_option(&mut self, id: &str, key: &str, value: Value) -> Result<(), String> {
        if id.is_empty() || key.is_empty() {
            return Err(format!(
                "backend option {id:?}:{key:?}: the backend id and the key must not be empty"
            ));
        }
        let options = self.backend_options.entry(id.to_owned()).or_default();
        options.entries.retain(|e| e.name.as_str() != key);
        options.entries.push(backplane_api::NamedValue {
            name: key.into(),
            value,
        });
        Ok(())
    }

    /// The options given for `backend` (empty if none).
    pub fn options_for(&self, backend: &str) -> &BackendOptions {
        self.backend_options.get(backend).unwrap_or(&NO_OPTIONS)
    }
}

/// A backend's refusal of a layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The backend.
    pub backend: String,
    /// Its reason.
    pub reason: String,
}

/// Where a layer runs and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The backend that runs it.
    pub backend: String,
    /// Why this backend (for a person).
    pub why: String,
    /// Every backend tried before, with its reason.
    pub refusals: Vec<Refusal>,
    /// For a backend's substitution: the layers it replaced, as `(name, what)` with `what`
    /// as [`layer_label`] gives it; empty otherwise.
    pub replaced: Vec<(String, String)>,
    /// For a MemCopy the host runs itself: the memory boundary it crosses (Backend API 1.3's
    /// device tensors); `None` for every other layer.
    pub boundary: Option<Boundary>,
    /// The layer's debug handle: for a layer that a backend's substitution or the host's
    /// rewrites made, the names of the layers of the network given to the optimizer that it
    /// stands for (for an imported model, its ONNX nodes); empty for every other layer.
    pub origins: Vec<String>,
}

/// A boundary between two memories that a MemCopy layer crosses: host memory and a device
/// backend's, or two device backends'. The host moves the tensor itself, through the device
/// backends' memory managers (Arm NN's MemCopy and MemImport workloads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boundary {
    /// Where the tensor is: [`HOST`] or a device backend's id.
    pub from: String,
    /// Where it goes.
    pub to: String,
    /// How the host crosses it.
    pub strategy: Strategy,
}

/// A debug handle for a person: `(fused from Conv@0 + BatchNormalization@0 + Relu@0)`.
pub fn fused_from(origins: &[String]) -> String {
    format!("(fused from {})", origins.join(" + "))
}

/// The memory of the host, in a [`Boundary`].
pub const HOST: &str = "host";

/// How the host moves a tensor across a [`Boundary`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Copied on every run.
    Copy,
    /// A network input the device backend uses in the caller's buffer, without a copy
    /// (`import_host`; copied when the backend declines the buffer, or when the host cannot
    /// bind the caller's buffer in place: an unaligned one, or a network with an
    /// out-of-process backend).
    Import,
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Strategy::Copy => "copy",
            Strategy::Import => "import",
        })
    }
}

impl fmt::Display for Boundary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}, {}", self.from, self.to, self.strategy)
    }
}

/// How much [`OptimizedNetwork::explain_at`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExplainDetail {
    /// Notes, per backend its compute layers, fused chains and memory copies, then one row
    /// per group of compute layers that run on the same backend, are the same (or fused the
    /// same layers) and were placed for the same reason (`backplane run --explain`).
    #[default]
    Summary,
    /// The summary, then one row per compute layer with every refusal
    /// (`--explain=layers`).
    Layers,
    /// Every layer, constants, inputs and outputs included, with every refusal
    /// (`--explain=all`).
    All,
}

impl std::str::FromStr for ExplainDetail {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "summary" => Ok(Self::Summary),
            "layers" => Ok(Self::Layers),
            "all" => Ok(Self::All),
            _ => Err(format!("{s:?} is not summary, layers or all")),
        }
    }
}

/// What a layer is, for explanations: its kind, with the function or operation where the
/// kind has several (`Activation(HardSwish)`, `ElementwiseBinary(Add)`).
pub fn layer_label(descriptor: &LayerDescriptor) -> String {
    match descriptor {
        LayerDescriptor::Activation(d) => format!("Activation({:?})", d.function),
        LayerDescriptor::ElementwiseBinary(op) => format!("ElementwiseBinary({op:?})"),
        LayerDescriptor::ElementwiseUnary(op) => format!("ElementwiseUnary({op:?})"),
        LayerDescriptor::Pooling2d(d) => format!("Pooling2d({:?})", d.pool_type),
        other => other.kind().to_string(),
    }
}

/// A layer no backend supports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsupportedLayer {
    /// The layer's name.
    pub layer: String,
    /// Its kind.
    pub kind: LayerKind,
    /// Every backend's reason.
    pub refusals: Vec<Refusal>,
}

/// Why a network could not be optimised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptimizeError {
    /// No usable backend among the preferences.
    #[error("no usable backend among the preferences {preferences:?} (registered: {registered:?})")]
    NoBackends {
        /// The preferences given.
        preferences: Vec<String>,
        /// The registered backends.
        registered: Vec<String>,
    },
    /// [`crate::Runtime::reoptimize`] of a network that `optimize` did not make.
    #[error("this network was not made by optimize: there is nothing to optimise again")]
    NoSource,
    /// Some layers are supported by no preferred backend.
    #[error("{}", describe_unsupported(.0))]
    Unsupported(Vec<UnsupportedLayer>),
    /// Fallback is off and the first preferred backend refused a layer.
    #[error("layer {layer}: {backend} refused it ({reason}) and fallback is off")]
    FallbackDisabled {
        /// The layer.
        layer: String,
        /// The first preferred backend.
        backend: String,
        /// Its reason.
        reason: String,
    },
    /// A pinned layer's backend is not usable or refused the layer.
    #[error("layer {layer} is pinned to {backend}: {reason}")]
    PinFailed {
        /// The layer.
        layer: String,
        /// The pinned backend.
        backend: String,
        /// Why it cannot run there.
        reason: String,
    },
    /// A pin names a layer the network does not have.
    #[error("pin for unknown layer {0}")]
    UnknownPinnedLayer(String),
}

fn describe_unsupported(layers: &[UnsupportedLayer]) -> String {
    let mut s = format!(
        "{} layer(s) supported by no preferred backend:",
        layers.len()
    );
    for l in layers {
        let _ = write!(s, "\n  {} ({}):", l.layer, l.kind);
        for r in &l.refusals {
            let _ = write!(s, " {}: {};", r.backend, r.reason);
        }
    }
    s
}

/// A network with every layer assigned to a backend.
#[derive(Debug, Clone)]
pub struct OptimizedNetwork {
    network: Network,
    assignments: Vec<Assignment>,
    /// Substitutions refused and other remarks of the `optimize_subgraph` round.
    notes: Vec<String>,
    /// The backend options the network was optimised with, handed to each backend at load.
    backend_options: BTreeMap<String, BackendOptions>,
    /// What it was optimised from, to optimise it again ([`OptimizedNetwork::source`]).
    source: Option<std::sync::Arc<Source>>,
    /// Per layer, the workload its backend prepared ahead of time (Backend API 1.4), when the
    /// network was read from a compiled file; empty otherwise.
    prepared: Vec<Option<StoredBlob>>,
}

/// A workload a backend prepared ahead of time (Backend API 1.4's `prepare_workload`), as a
/// compiled network holds it: the blob's format version and its bytes (a checked section of
/// the mapped file).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredBlob {
    /// The backend's blob format version.
    pub version: u32,
    /// The blob.
    pub bytes: SharedBytes,
}

/// The network, preferences and options an [`OptimizedNetwork`] was made from.
#[derive(Debug)]
pub struct Source {
    /// The network as given to `optimize`.
    pub network: Network,
    /// The backend preferences.
    pub preferences: Vec<String>,
    /// The options.
    pub options: OptimizerOptions,
}

impl OptimizedNetwork {
    /// A network optimised earlier and stored (a compiled network file): its layers, their
    /// assignments and notes, options, the source to optimise again, and per layer the
    /// workload its backend prepared, if any (`prepared` is empty or one entry per layer).
    pub(crate) fn from_parts(
        network: Network,
        assignments: Vec<Assignment>,
        notes: Vec<String>,
        backend_options: BTreeMap<String, BackendOptions>,
        source: Option<Source>,
        prepared: Vec<Option<StoredBlob>>,
    ) -> Self {
        debug_assert_eq!(network.layers().len(), assignments.len());
        Self {
            network,
            assignments,
            notes,
            backend_options,
            source: source.map(std::sync::Arc::new),
            prepared,
        }
    }

    /// The workload layer `i`'s backend prepared ahead of time, when the network was read
    /// from a compiled file and the backend prepared one.
    pub fn prepared(&self, i: usize) -> Option<&StoredBlob> {
        self.prepared.get(i)?.as_ref()
    }

    /// Layer `i`'s name for a person, with its debug handle ([`Assignment::origins`]):
    /// `Conv@0+bn+relu (fused from Conv@0 + BatchNormalization@0 + Relu@0)`.
    pub fn debug_name(&self, i: usize) -> String {
        let name = self
            .network
            .layers()
            .get(i)
            .map_or("<layer>", |l| l.name.as_str());
        match self.assignments.get(i) {
            Some(a) if !a.origins.is_empty() => format!("{name} {}", fused_from(&a.origins)),
            _ => name.to_owned(),
        }
    }

    /// The network, preferences and options it was optimised from (to optimise it again, for
    /// example without a backend that faulted: [`crate::Runtime::reoptimize`]).
    pub fn source(&self) -> Option<&Source> {
        self.source.as_deref()
    }

    /// The network as it will run (MemCopy layers included).
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// Per layer (same order as `network().layers()`), where it runs and why.
    pub fn assignments(&self) -> &[Assignment] {
        &self.assignments
    }

    /// The backend of the layer called `name`.
    pub fn backend_of(&self, name: &str) -> Option<&str> {
        let i = self.network.layers().iter().position(|l| l.name == name)?;
        Some(&self.assignments[i].backend)
    }

    /// The backends used, in first-use order.
    pub fn backends_used(&self) -> Vec<&str> {
        let mut v: Vec<&str> = Vec::new();
        for a in &self.assignments {
            if !v.contains(&a.backend.as_str()) {
                v.push(&a.backend);
            }
        }
        v
    }

    /// The backend options given for `backend` (empty if none).
    pub fn backend_options(&self, backend: &str) -> &BackendOptions {
        self.backend_options.get(backend).unwrap_or(&NO_OPTIONS)
    }

    /// Adds a remark (shown with the notes).
    pub(crate) fn add_note(&mut self, note: String) {
        self.notes.push(note);
    }

    /// Remarks of the `optimize_subgraph` round (refused substitutions, …).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }
}

/// The input tensors a backend is asked about. An Input layer reads the caller's tensor, which
/// has the layer's own shape.
fn infos(network: &Network, layer: &Layer) -> Vec<TensorInfo> {
    match layer.kind() {
        LayerKind::Input => layer.outputs.clone(),
        _ => layer
            .inputs
            .iter()
            .map(|t| network.tensor_info(*t).clone())
            .collect(),
    }
}

/// Assigns every layer of `network` to a backend of `registry`, by `preferences`.
pub fn optimize(
    network: &Network,
    registry: &BackendRegistry,
    preferences: &[&str],
    options: &OptimizerOptions,
) -> Result<OptimizedNetwork, OptimizeError> {
    let network_in = network;
    let usable: Vec<&str> = preferences
        .iter()
        .copied()
        .filter(|id| match registry.get(id) {
            None => {
                log::warn!("backend preference {id} is not registered; skipped");
                false
            }
            Some(b) if b.is_faulted() => {
                log::warn!("backend {id} is faulted; skipped");
                false
            }
            Some(_) => true,
        })
        .collect();
    if usable.is_empty() {
        return Err(OptimizeError::NoBackends {
            preferences: preferences.iter().map(|s| s.to_string()).collect(),
            registered: registry.ids().iter().map(|s| s.to_string()).collect(),
        });
    }
    let mut option_notes = Vec::new();
    for (id, given) in &options.backend_options {
        if given.entries.is_empty() {
            continue;
        }
        match registry.get(id) {
            Some(b) if usable.contains(&id.as_str()) => b.note_options(given),
            _ => option_notes.push(format!(
                "options for {id} ({}) ignored: {id} is not a usable preferred backend",
                describe_options(given)
            )),
        }
    }
    for (layer, _) in &options.pins {
        if !network.layers().iter().any(|l| &l.name == layer) {
            return Err(OptimizeError::UnknownPinnedLayer(layer.clone()));
        }
    }
    // Backend-independent rewrites first (part of the fusion that `no_subgraph_optimization`
    // turns off).
    let folded = (!options.no_subgraph_optimization)
        .then(|| rewrite::rewrite(network))
        .flatten();
    let network = folded.as_ref().map_or(network, |r| &r.network);
    let n = network.layers().len();
    let mut skips: Vec<Vec<String>> = vec![Vec::new(); n];
    // What every round refused: an earlier round's failure explains a later re-assignment.
    let mut refused: Vec<String> = Vec::new();
    let (assignments, round) = loop {
        let assignments = assign(network, registry, &usable, options, &skips)?;
        let backends: Vec<String> = assignments.iter().map(|a| a.backend.clone()).collect();
        let round = if options.no_subgraph_optimization {
            substitution::RoundResult::default()
        } else {
            substitution::round(network, &backends, registry, &options.backend_options)
        };
        for r in &round.refused {
            if !refused.contains(r) {
                refused.push(r.clone());
            }
        }
        let mut progressed = false;
        for (layer, backend) in &round.failed {
            if !skips[*layer].contains(backend) {
                skips[*layer].push(backend.clone());
                progressed = true;
            }
        }
        if !progressed {
            break (assignments, round);
        }
    };
    let mut notes: Vec<String> = folded
        .iter()
        .flat_map(|r| r.notes.iter().cloned())
        .collect();
    notes.extend(option_notes);
    notes.extend(refused);
    let applied = match substitution::apply(network, &round.accepted) {
        _ if round.accepted.is_empty() => None,
        Ok(done) => Some(done),
        Err(why) => {
            notes.push(format!("substitutions not applied: {why}"));
            None
        }
    };
    let (network, assignments) = match applied {
        None => (network.clone(), assignments),
        Some((rewritten, origin)) => {
            let assignments = origin
                .iter()
                .map(|o| match o {
                    Ok(i) => assignments[*i].clone(),
                    Err(k) => {
                        let a = &round.accepted[*k];
                        let names: Vec<&str> = a
                            .replaced
                            .iter()
                            .map(|&i| network.layers()[i].name.as_str())
                            .collect();
                        let replaced = a
                            .replaced
                            .iter()
                            .map(|&i| {
                                let l = &network.layers()[i];
                                (l.name.clone(), layer_label(&l.descriptor))
                            })
                            .collect();
                        Assignment {
                            backend: a.backend.clone(),
                            why: format!(
                                "substitution by {}: replaces {}",
                                a.backend,
                                names.join(" + ")
                            ),
                            refusals: vec![],
                            replaced,
                            boundary: None,
                            origins: vec![],
                        }
                    }
                })
                .collect();
            (rewritten, assignments)
        }
    };
    let mut optimized = insert_mem_copies(&network, assignments, registry, &usable)?;
    // Debug handles: a fused layer's replaced layers, each a rewrite made expanded into the
    // layers it replaced; a layer a rewrite made, its replaced layers.
    let rewritten = folded.as_ref().map(|r| &r.origins);
    let expand = |name: &str| -> Vec<String> {
        rewritten
            .and_then(|o| o.get(name))
            .cloned()
            .unwrap_or_else(|| vec![name.to_owned()])
    };
    for (l, a) in optimized
        .network
        .layers()
        .iter()
        .zip(&mut optimized.assignments)
    {
        a.origins = if a.replaced.is_empty() {
            rewritten
                .and_then(|o| o.get(&l.name))
                .cloned()
                .unwrap_or_default()
        } else {
            a.replaced.iter().flat_map(|(n, _)| expand(n)).collect()
        };
    }
    optimized.notes = notes;
    optimized.backend_options = options.backend_options.clone();
    optimized.source = Some(std::sync::Arc::new(Source {
        network: network_in.clone(),
        preferences: preferences.iter().map(|p| (*p).to_owned()).collect(),
        options: options.clone(),
    }));
    Ok(optimized)
}
