//! Turning an ONNX `ModelProto` into a [`Network`] of v1 layers.
//!
//! Nodes are processed in the order the graph lists them (ONNX requires a topological
//! order). Every ONNX value is tracked as a network tensor, or as a constant the importer
//! holds (float32 or int64) and folds through shape sub-graphs (`Shape`, `Gather`, `Slice`,
//! `Concat`, `Unsqueeze`, `Squeeze`, `Cast`, arithmetic, ...). Float constants become
//! `Constant` layers only where a layer reads them.
//!
//! [`registry`] maps each ONNX `op_type` to its converter, a method of the importer that
//! turns one node into values; the converters live in one file per operator family
//! ([`conv`], [`matmul`], [`elementwise`], [`activation`], [`pool`], [`normalization`],
//! [`reduce`], [`softmax`], [`shape`], [`indexing`], [`constant`], [`resize`],
//! [`quantized`] for `QuantizeLinear`/`DequantizeLinear` and the QOperator form), with
//! [`window`] shared by convolution and pooling. [`attributes`] reads node attributes and
//! [`constants`] decodes constant tensors. [`model`] holds a decoded, checked model and
//! instantiates networks from it. This file holds the public API, the importer's state and its
//! helpers for reading and storing values.

mod activation;
mod attributes;
mod bitwise;
mod comparison;
mod composite;
mod constant;
mod constants;
mod control;
mod conv;
mod detection;
mod elementwise;
mod expand;
mod indexing;
mod logic;
mod loss;
mod matmul;
mod model;
mod normalization;
mod pool;
mod quantized;
mod queue;
mod recurrent;
mod reduce;
mod registry;
mod resize;
mod segments;
mod shape;
mod softmax;
mod unique;
mod window;

use std::{
    collections::{HashMap, HashSet},
    fmt,
    path::{Path, PathBuf},
    sync::Arc,
};

use backplane_api::{ConstTensor, DataType, LayerDescriptor, ReshapeDescriptor, TensorInfo};

use self::constants::{charge, to_const_tensor};
use super::{
    fold::Const,
    proto::{ModelProto, NodeProto, ValueInfoProto, data_type},
};
use crate::graph::network::{Network, NetworkBuilder, NetworkError, TensorRef};
use crate::memory::budget::MemoryBudget;

pub use self::model::{DeclaredTensor, Dim, Model, TensorValues, decode_tensor};
use self::model::{ExactValues, SharedConstants};
use self::queue::Step;
pub use self::segments::{Instance, MAX_DECIDING_ELEMENTS, Resume};

/// The largest total size of the constants of one model (initializers, `Constant` nodes
/// and folded values), in bytes.
pub const MAX_CONSTANT_BYTES: usize = 1 << 30;

/// The `ai.onnx` operator-set versions the importer understands. Opsets 26 and 27 add new
/// operators only, and types to `Range` (read here: its `stash_type` 1, the default).
pub const SUPPORTED_OPSETS: std::ops::RangeInclusive<i64> = 6..=27;

/// How to import a model.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Shapes of graph inputs, by name. An entry replaces the declared shape; it must have
    /// the declared rank and agree with every fixed dimension. Without an entry, a symbolic
    /// leading (batch) dimension is taken as 1, with a warning; any other symbolic dimension
    /// is an error ([`ImportError::SymbolicInput`]), as is an input without a declared shape.
    pub input_shapes: HashMap<String, Vec<u32>>,
    /// Graph inputs promoted to constants, by name (`Float32` or `Signed32` values). They
    /// take precedence over an initializer of the same name.
    pub constant_inputs: HashMap<String, ConstTensor>,
    /// The memory budget of the load this import is part of: the constants the importer
    /// folds and copies are charged to it (and it caps the constants allowed, with
    /// [`MAX_CONSTANT_BYTES`]). `None`: only [`MAX_CONSTANT_BYTES`] applies.
    pub memory: Option<Arc<MemoryBudget>>,
}

/// A node the importer cannot map to v1 layers, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsupportedNode {
    /// The node's name (`<op_type>_<index>` when the model gives none), or the name of a
    /// graph input or the model for model-level limits.
    pub node: String,
    /// The operator (`"Input"` for a graph input, `"opset"` for the operator set).
    pub op: String,
    /// What is missing to import it.
    pub missing: String,
}

impl fmt::Display for UnsupportedNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.node, self.op, self.missing)
    }
}

fn list(nodes: &[UnsupportedNode]) -> String {
    nodes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why a model could not be imported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// The file could not be read.
    #[error("cannot read {}: {message}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's message.
        message: String,
    },
    /// The bytes are not an ONNX model (protobuf decoding failed, the file is truncated, or
    /// a required part such as the graph or the operator set is absent).
    #[error("malformed ONNX model: {0}")]
    Malformed(String),
    /// Nodes (every one of them, not only the first) that have no v1 mapping.
    #[error("{} unsupported node(s): {}", nodes.len(), list(nodes))]
    Unsupported {
        /// The unsupported nodes, in graph order.
        nodes: Vec<UnsupportedNode>,
    },
    /// A node (or initializer, or graph input) is inconsistent with the ONNX operator's
    /// definition.
    #[error("node {node} ({op}): {reason}")]
    InvalidNode {
        /// The node's name (`<op_type>_<index>` when the model gives none).
        node: String,
        /// The operator (`"Initializer"`, `"Input"` or `"ImportOptions"` outside nodes).
        op: String,
        /// What is wrong.
        reason: String,
    },
    /// A graph input has symbolic dimensions besides the batch, and no shape was given.
    #[error(
        "input {input} is declared {declared} and its shape was not given: give it with \
         --shape {input}=D1,D2,... or --input {input}=FILE.npy (the library's \
         ImportOptions::input_shapes, Python's shapes=)"
    )]
    SymbolicInput {
        /// The graph input.
        input: String,
        /// Its declared dimensions, symbolic ones by their name or `?` (`[?, 3, H, W]`).
        declared: String,
    },
    /// The network builder refused a layer (for example mismatching shapes).
    #[error(transparent)]
    Network(#[from] NetworkError),
    /// A node reads a value that nothing before it defines: a missing initializer, a
    /// misspelt name, or nodes out of topological order (a cycle).
    #[error(
        "node {node}: input {input:?} is not defined before it (missing, or the graph is not in topological order)"
    )]
    MissingInput {
        /// The node's name (`"<graph outputs>"` for a graph output).
        node: String,
        /// The undefined value.
        input: String,
    },
}

/// Imports an ONNX model from its serialised bytes.
pub fn import_bytes(bytes: &[u8], options: &ImportOptions) -> Result<Network, ImportError> {
    Model::decode(bytes)?.instantiate(options)
}

/// Imports an `.onnx` file.
pub fn import_file(path: &Path, options: &ImportOptions) -> Result<Network, ImportError> {
    Model::new(super::read_model(path)?)?.instantiate(options)
}

/// Imports a decoded ONNX model.
pub fn import_model(model: &ModelProto, options: &ImportOptions) -> Result<Network, ImportError> {
    Model::new(model.clone())?.instantiate(options)
}

/// A value of the ONNX graph.
#[derive(Debug, Clone)]
enum Value {
    /// A float32 tensor of the network.
    Tensor(TensorRef),
    /// A float32 constant held by the importer.
    F32(Arc<Const<f32>>),
    /// An integer constant (any ONNX integer or bool type) held by the importer.
    I64(Arc<Const<i64>>),
    /// A float value the model computes by dequantising quantised data
    /// ([`quantized::Quantized`]).
    Quantized(quantized::Quantized),
    /// A part of onnxruntime's dynamic quantization pattern ([`quantized::Dynamic`]).
    Dynamic(quantized::Dynamic),
    /// Produced by an unsupported node (already reported).
    Skipped,
    /// A value that cannot be used, and why (reported when a node reads it).
    Unusable(String),
}

/// Why a node could not be imported.
#[derive(Debug)]
enum NodeError {
    /// Valid ONNX the v1 layers cannot express (collected).
    Unsupported(String),
    /// Not valid ONNX.
    Invalid(String),
    /// An undefined input.
    Missing(String),
    /// The builder refused a layer.
    Network(NetworkError),
    /// Values (their names) that are tensors computed at run time, where the operator needs
    /// their values to decide a shape; `message` is what a static import reports.
    NeedsValue {
        /// The values needed.
        names: Vec<String>,
        /// Why, as an unsupported node's reason.
        message: String,
    },
}

impl NodeError {
    fn message(&self) -> String {
        match self {
            NodeError::Unsupported(s) | NodeError::Invalid(s) | NodeError::Missing(s) => s.clone(),
            NodeError::NeedsValue { message, .. } => message.clone(),
            NodeError::Network(e) => e.to_string(),
        }
    }
}

impl From<NetworkError> for NodeError {
    fn from(e: NetworkError) -> Self {
        NodeError::Network(e)
    }
}

type NResult<T> = Result<T, NodeError>;

fn invalid(reason: impl Into<String>) -> NodeError {
    NodeError::Invalid(reason.into())
}

fn unsupported(missing: impl Into<String>) -> NodeError {
    NodeError::Unsupported(missing.into())
}

/// A node and the name its errors and layers use.
struct Node<'a> {
    proto: &'a NodeProto,
    name: String,
}

impl Node<'_> {
    fn op(&self) -> &str {
        &self.proto.op_type
    }
}

// ----------------------------------------------------------------------------------------
// The importer

struct Importer {
    opset: i64,
    builder: NetworkBuilder,
    values: HashMap<String, Value>,
    /// Float constants already added as `Constant` layers, by ONNX name.
    materialised: HashMap<String, TensorRef>,
    /// Layer names taken (or reserved for graph outputs).
    used: HashSet<String>,
    /// Constant bytes still allowed.
    budget: usize,
    unsupported: Vec<UnsupportedNode>,
    /// The model's shared `Constant` descriptors of initializers ([`Model`]).
    shared: SharedConstants,
    /// [`Model`]'s element types of integer initializers.
    elem_types: Arc<HashMap<String, i32>>,
    /// [`Model`]'s stored bytes of double and 8-bit integer initializers.
    exact: ExactValues,
    /// [`Model`]'s `QuantizeLinear` targets.
    q_targets: Arc<quantized::QScan>,
    /// Output parameters the next computing layer takes (a quantised node being imported).
    q_out: Option<backplane_api::Quantization>,
    /// Output type and parameters a QOperator node gives, in place of a `QuantizeLinear`.
    q_target_override: Option<(DataType, backplane_api::Quantization)>,
    /// A counter for internal value keys (QOperator nodes' float operators).
    serial: usize,
    /// The ONNX element type of each integer `Constant` node's output (and of each value a
    /// run decided, [`segments`]).
    local_types: HashMap<String, i32>,
    /// Whether a node that needs a run-time value ends a segment ([`Model::instantiate_dynamic`])
    /// rather than being unsupported.
    dynamic: bool,
    /// The segment's input tensors, and the key each is bound by (a graph input's name, or
    /// the value a previous segment computed).
    input_keys: HashMap<TensorRef, String>,
    /// The segment's inputs in order: (input layer name, key).
    segment_inputs: Vec<(String, String)>,
    /// The load's memory budget ([`ImportOptions::memory`]): every constant the importer
    /// folds or copies is charged to it.
    memory: Option<Arc<MemoryBudget>>,
    /// Float constants computed here (not initializers) already made into `Constant`
    /// descriptors, by the address of their values (kept alive here, so an address names
    /// one value): a value read under many names (Identity chains, graph outputs) is one
    /// descriptor, not a copy per name.
    folded: HashMap<usize, (Arc<Const<f32>>, Arc<LayerDescriptor>)>,
}

impl Importer {
    fn unique(&mut self, base: &str) -> String {
        // Internal value keys carry NUL-separated parts (`<name>\0float`), which no ONNX
        // name has: in a layer name they read as `/`.
        let base = base.replace('\0', "/");
        let base = if base.is_empty() {
            "layer"
        } else {
            base.as_str()
        };
        if self.used.insert(base.to_owned()) {
            return base.to_owned();
        }
        let mut k = 1usize;
        loop {
            let candidate = format!("{base}_{k}");
            if self.used.insert(candidate.clone()) {
                return candidate;
            }
            k += 1;
        }
    }

    fn add_graph_input(
        &mut self,
        vi: &ValueInfoProto,
        given: Option<&Vec<u32>>,
    ) -> Result<(), ImportError> {
        let invalid = |reason: String| ImportError::InvalidNode {
            node: vi.name.clone(),
            op: "Input".to_owned(),
            reason,
        };
        let Some(tt) = vi.r#type.as_ref().and_then(|t| t.tensor_type.as_ref()) else {
            self.unsupported.push(UnsupportedNode {
                node: vi.name.clone(),
                op: "Input".to_owned(),
                missing: "an input that is not a tensor".to_owned(),
            });
            self.values.insert(vi.name.clone(), Value::Skipped);
            return Ok(());
        };
        // Every ONNX numeric type is its own API type (Backend API 1.5): int64 stays Signed64.
        let Some(element) = data_type::plain(tt.elem_type) else {
            self.unsupported.push(UnsupportedNode {
                node: vi.name.clone(),
                op: "Input".to_owned(),
                missing: format!(
                    "a {} input (numeric and bool inputs are supported; give it in \
                     ImportOptions::constant_inputs)",
                    data_type::name(tt.elem_type)
                ),
            });
            self.values.insert(vi.name.clone(), Value::Skipped);
            return Ok(());
        };
        let dims = tt.shape.as_ref().map(|s| s.dim.as_slice()).unwrap_or(&[]);
        let declared_text = || {
            let dims: Vec<String> = dims
                .iter()
                .map(|d| match (d.dim_value, d.dim_param.as_deref()) {
                    (Some(v), _) if v >= 0 => v.to_string(),
                    (_, Some(p)) if !p.is_empty() => p.to_owned(),
                    _ => "?".to_owned(),
                })
                .collect();
            format!("[{}]", dims.join(", "))
        };
        let declared = tt
            .shape
            .as_ref()
            .map(|s| {
                s.dim
                    .iter()
                    .map(|d| match d.dim_value {
                        // Some exporters (PaddlePaddle) write -1 for a dynamic dimension.
                        Some(-1) | None => Ok(None),
                        Some(v) => u32::try_from(v)
                            .map(Some)
                            .map_err(|_| invalid(format!("dimension {v} is out of range"))),
                    })
                    .collect::<Result<Vec<Option<u32>>, _>>()
            })
            .transpose()?;
        let shape = match (given, declared) {
            (Some(given), Some(declared)) => {
                if !DeclaredTensor::of(vi).admits(given) {
                    return Err(invalid(format!(
                        "the given shape {given:?} does not match the declared one {declared:?}"
                    )));
                }
                given.clone()
            }
            (Some(given), None) => given.clone(),
            (None, Some(declared)) => {
                if declared.iter().skip(1).any(Option::is_none) {
                    return Err(ImportError::SymbolicInput {
                        input: vi.name.clone(),
                        declared: declared_text(),
                    });
                }
                if declared.first().is_some_and(Option::is_none) {
                    log::warn!(
                        "input {} is declared {}: its batch dimension is taken as 1",
                        vi.name,
                        declared_text()
                    );
                }
                declared.iter().map(|d| d.unwrap_or(1)).collect()
            }
            (None, None) => {
                return Err(invalid(
                    "the input has no declared shape: give one in ImportOptions::input_shapes"
                        .to_owned(),
                ));
            }
        };
        let info = TensorInfo::new(&shape, element);
        if info.num_bytes().is_none() {
            return Err(invalid(format!("shape {shape:?} is too large")));
        }
        self.used.insert(vi.name.clone());
        let t = self.builder.add_input(&vi.name, info)?;
        self.input_keys.insert(t, vi.name.clone());
        self.segment_inputs.push((vi.name.clone(), vi.name.clone()));
        self.values.insert(vi.name.clone(), Value::Tensor(t));
        Ok(())
    }

    fn node(&mut self, n: &Node<'_>) -> Result<Step, ImportError> {
        let mut skipped = false;
        for input in n.proto.input.iter().filter(|i| !i.is_empty()) {
            match self.values.get(input) {
                None => {
                    return Err(ImportError::MissingInput {
                        node: n.name.clone(),
                        input: input.clone(),
                    });
                }
                Some(Value::Skipped) => skipped = true,
                Some(_) => {}
            }
        }
        let domain = n.proto.domain.as_str();
        if !skipped && registry::is_control(domain, n.op()) {
            let result = self.control(n);
            return self.control_step(n, result);
        }
        if let Some(expand) = registry::expander_of(self, domain, n) {
            if skipped {
                for name in n.proto.output.iter().filter(|o| !o.is_empty()) {
                    self.values.insert(name.clone(), Value::Skipped);
                }
                return Ok(Step::Done);
            }
            let result = expand(self, n);
            return self.control_step(n, result);
        }
        let result = if !registry::known_domain(domain) {
            Err(unsupported(format!(
                "operators of domain {domain:?} are not supported"
            )))
        } else {
            match registry::converter(domain, n.op()) {
                None => Err(unsupported("no v1 mapping for this operator")),
                Some(_) if skipped => Ok(Vec::new()),
                Some(convert) if registry::is_quantized_operator(domain, n.op()) => {
                    convert(self, n)
                }
                Some(convert) => self.convert_float_node(n, convert),
            }
        };
        let outputs = match result {
            Ok(outputs) if skipped => vec![Value::Skipped; outputs.len().max(n.proto.output.len())],
            Ok(outputs) => outputs,
            Err(NodeError::NeedsValue { names, .. }) if self.dynamic => {
                return Ok(Step::Cut(names));
            }
            Err(e) => {
                self.failed(n, e)?;
                vec![Value::Skipped; n.proto.output.len()]
            }
        };
        if n.op() == "Constant"
            && let Ok(Some(t)) = attributes::attr_tensor(n, "value")
            && let Some(out) = n.proto.output.first()
        {
            self.local_types.insert(out.clone(), t.data_type);
        }
        for (i, name) in n.proto.output.iter().enumerate() {
            if name.is_empty() {
                continue;
            }
            if self.values.contains_key(name) {
                return Err(ImportError::InvalidNode {
                    node: n.name.clone(),
                    op: n.op().to_owned(),
                    reason: format!("value {name:?} is defined twice"),
                });
            }
            let v = outputs.get(i).cloned().unwrap_or_else(|| {
                Value::Unusable(format!("output {i} of {} is not supported", n.op()))
            });
            self.values.insert(name.clone(), v);
        }
        Ok(Step::Done)
    }

    /// A node that failed: unsupported (collected, `Ok`), or the import's error.
    fn failed(&mut self, n: &Node<'_>, e: NodeError) -> Result<(), ImportError> {
        match e {
            NodeError::Unsupported(missing)
            | NodeError::NeedsValue {
                message: missing, ..
            } => {
                self.unsupported.push(UnsupportedNode {
                    node: n.name.clone(),
                    op: n.op().to_owned(),
                    missing,
                });
                Ok(())
            }
            NodeError::Invalid(reason) => Err(ImportError::InvalidNode {
                node: n.name.clone(),
                op: n.op().to_owned(),
                reason,
            }),
            NodeError::Missing(input) => Err(ImportError::MissingInput {
                node: n.name.clone(),
                input,
            }),
            NodeError::Network(e) => Err(e.into()),
        }
    }

    // -- values ---------------------------------------------------------------------------

    /// Input `i` (`None` when absent or named `""`).
    fn arg(&self, n: &Node<'_>, i: usize) -> NResult<Option<(String, Value)>> {
        let Some(name) = n.proto.input.get(i).filter(|s| !s.is_empty()) else {
            return Ok(None);
        };
        match self.values.get(name) {
            None => Err(NodeError::Missing(name.clone())),
            Some(Value::Unusable(r)) => Err(unsupported(format!("input {name}: {r}"))),
            Some(v) => Ok(Some((name.clone(), v.clone()))),
        }
    }

    /// Required input `i`.
    fn req(&self, n: &Node<'_>, i: usize) -> NResult<(String, Value)> {
        self.arg(n, i)?
            .ok_or_else(|| invalid(format!("input {i} is required")))
    }

    /// A float tensor of the network for `value`, adding a `Constant` layer for a constant.
    fn tensor(&mut self, name: &str, value: &Value) -> NResult<TensorRef> {
        match value {
            Value::Tensor(t) => Ok(*t),
            Value::F32(c) => {
                if let Some(t) = self.materialised.get(name) {
                    return Ok(*t);
                }
                let layer = self.unique(name);
                // A float16 or bfloat16 constant (its values widened exactly) is a tensor of
                // its own type again.
                let declared = self.elem_type(name).and_then(data_type::plain);
                let half =
                    declared.and_then(|dt| Some((dt, crate::onnx::fold::half_bytes(&c.data, dt)?)));
                // So is a double initializer used as it is (its exact values, kept by the
                // model), and a constant the importer cast to double.
                let exact = self
                    .exact
                    .doubles
                    .get(name)
                    .filter(|b| b.len() == c.data.len() * 8)
                    .map(|b| (DataType::Float64, b.to_vec()));
                let double = (self.local_types.get(name) == Some(&data_type::DOUBLE)).then(|| {
                    let data: Vec<u8> = c
                        .data
                        .iter()
                        .flat_map(|&v| f64::from(v).to_le_bytes())
                        .collect();
                    (DataType::Float64, data)
                });
                let double = exact.or(double);
                if let Some((dt, data)) = half.or(double) {
                    self.charge_memory(data.len(), || {
                        format!("constant {name} {:?} {dt}", c.shape)
                    })?;
                    let constant = ConstTensor {
                        info: TensorInfo::new(&c.shape, dt).constant(),
                        data: data.into(),
                    };
                    let t = self.builder.add_constant(&layer, constant)?;
                    self.materialised.insert(name.to_owned(), t);
                    return Ok(t);
                }
                // An initializer's descriptor is made once per model and shared.
                let descriptor = {
                    let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
                    match shared.get_mut(&(Arc::as_ptr(c) as usize)) {
                        Some(Some(d)) => d.clone(),
                        Some(slot) => {
                            let d = Arc::new(LayerDescriptor::Constant(to_const_tensor(c)));
                            *slot = Some(d.clone());
                            d
                        }
                        None => {
                            drop(shared);
                            let key = Arc::as_ptr(c) as usize;
                            match self.folded.get(&key) {
                                Some((_, d)) => d.clone(),
                                None => {
                                    self.charge_memory(c.data.len().saturating_mul(4), || {
                                        format!("constant {name} {:?} Float32", c.shape)
                                    })?;
                                    let d = Arc::new(LayerDescriptor::Constant(to_const_tensor(c)));
                                    self.folded.insert(key, (c.clone(), d.clone()));
                                    d
                                }
                            }
                        }
                    }
                };
                let t = self.builder.add_shared_constant(&layer, descriptor)?;
                self.materialised.insert(name.to_owned(), t);
                Ok(t)
            }
            Value::I64(c) => {
                if let Some(t) = self.materialised.get(name) {
                    return Ok(*t);
                }
                let layer = self.unique(name);
                let constant = self.integer_constant(name, c)?;
                self.charge_memory(constant.data.len(), || {
                    format!("constant {name} {}", constant.info)
                })?;
                let t = self.builder.add_constant(&layer, constant)?;
                self.materialised.insert(name.to_owned(), t);
                Ok(t)
            }
            Value::Quantized(q) => {
                let q = q.clone();
                match self.dequantized(name, &q)? {
                    Value::Tensor(t) => Ok(t),
                    float => self.tensor(&format!("{name}\u{0}float"), &float),
                }
            }
            Value::Dynamic(_) => Err(unsupported(format!(
                "{name} is a part of the dynamic quantization pattern, read by a node outside it"
            ))),
            Value::Skipped | Value::Unusable(_) => {
                Err(unsupported(format!("the value {name} is not available")))
            }
        }
    }

    /// An integer constant as a tensor of the type ONNX declares for `name` (an initializer's
    /// or a `value_info`'s element type), else Signed64 (what ONNX's shape arithmetic makes).
    /// The values are checked against the type's range: none is ever wrapped.
    fn integer_constant(&self, name: &str, c: &Const<i64>) -> NResult<ConstTensor> {
        let dt = self
            .elem_type(name)
            .and_then(data_type::plain)
            .filter(|t| t.is_integer() || *t == DataType::Boolean)
            .unwrap_or(DataType::Signed64);
        Self::typed_integers(name, c, dt)
    }

    /// Integer values as a constant tensor of the integer type `dt`, every value checked
    /// against its range (none is ever wrapped).
    fn typed_integers(name: &str, c: &Const<i64>, dt: DataType) -> NResult<ConstTensor> {
        let data = crate::onnx::fold::integer_bytes(&c.data, dt)
            .ok_or_else(|| invalid(format!("tensor {name}: {dt} is not an integer type")))?
            .map_err(|v| {
                invalid(format!(
                    "tensor {name} holds {v}, outside the range of its type {dt}"
                ))
            })?;
        Ok(ConstTensor {
            info: TensorInfo::new(&c.shape, dt).constant(),
            data: data.into(),
        })
    }

    /// An integer constant as a `Constant` layer of type `dt` (beside tensors of that type),
    /// its values range-checked.
    fn integer_tensor_as(
        &mut self,
        name: &str,
        c: &Const<i64>,
        dt: DataType,
    ) -> NResult<TensorRef> {
        let constant = Self::typed_integers(name, c, dt)?;
        let layer = self.unique(name);
        Ok(self.builder.add_constant(&layer, constant)?)
    }

    /// The ONNX element type of a value as the model declares it (an initializer's, a
    /// `Constant` node's, `value_info`'s) or the importer recorded it (a value a run decided,
    /// a constant cast to a 16-bit float); `None` when neither gives it, such as a value
    /// folded from others.
    pub(super) fn elem_type(&self, name: &str) -> Option<i32> {
        self.elem_types
            .get(name)
            .or_else(|| self.local_types.get(name))
            .copied()
    }

    /// The data type of a value (integer constants are Signed64 unless the model declares
    /// another integer type for them).
    fn data_type(&self, value: &Value) -> NResult<DataType> {
        match value {
            Value::Tensor(t) => self
                .builder
                .tensor_info(*t)
                .map(|i| i.data_type)
                .ok_or_else(|| invalid("a tensor of another network")),
            Value::F32(_) | Value::Quantized(_) | Value::Dynamic(_) => Ok(DataType::Float32),
            Value::I64(_) => Ok(DataType::Signed64),
            Value::Skipped | Value::Unusable(_) => Err(unsupported("the value is not available")),
        }
    }

    /// A `Constant` layer for a constant the importer made (not an ONNX value).
    fn new_constant(&mut self, base: &str, c: &Const<f32>) -> NResult<TensorRef> {
        let layer = self.unique(base);
        Ok(self.builder.add_constant(&layer, to_const_tensor(c))?)
    }

    fn shape(&self, value: &Value) -> NResult<Vec<u32>> {
        match value {
            Value::Tensor(t) => self
                .builder
                .tensor_info(*t)
                .map(|i| i.shape.to_vec())
                .ok_or_else(|| invalid("a tensor of another network")),
            Value::F32(c) => Ok(c.shape.clone()),
            Value::I64(c) => Ok(c.shape.clone()),
            Value::Quantized(quantized::Quantized::Constant(_, c)) => Ok(c.shape.clone()),
            Value::Dynamic(_) => Err(unsupported(
                "a part of the dynamic quantization pattern read as a tensor",
            )),
            Value::Quantized(quantized::Quantized::Tensor(t)) => self
                .builder
                .tensor_info(*t)
                .map(|i| i.shape.to_vec())
                .ok_or_else(|| invalid("a tensor of another network")),
            Value::Skipped | Value::Unusable(_) => Err(unsupported("the value is not available")),
        }
    }

    fn store_f32(&mut self, c: Const<f32>) -> NResult<Value> {
        charge(&mut self.budget, c.data.len(), 4).map_err(invalid)?;
        self.charge_memory(c.data.len().saturating_mul(4), || {
            format!("a folded constant {:?} Float32", c.shape)
        })?;
        Ok(Value::F32(Arc::new(c)))
    }

    fn store_i64(&mut self, c: Const<i64>) -> NResult<Value> {
        charge(&mut self.budget, c.data.len(), 8).map_err(invalid)?;
        self.charge_memory(c.data.len().saturating_mul(8), || {
            format!("a folded constant {:?} Signed64", c.shape)
        })?;
        Ok(Value::I64(Arc::new(c)))
    }

    /// Charges `bytes` of a constant to the load's memory budget, if there is one.
    fn charge_memory(&self, bytes: usize, what: impl FnOnce() -> String) -> NResult<()> {
        match &self.memory {
            Some(m) => m
                .charge(bytes as u64, what)
                .map_err(|e| invalid(e.to_string())),
            None => Ok(()),
        }
    }

    /// Input `i` as constant integers (`None` when absent).
    fn const_ints(&self, n: &Node<'_>, i: usize, what: &str) -> NResult<Option<Arc<Const<i64>>>> {
        match self.arg(n, i)? {
            None => Ok(None),
            Some((_, Value::I64(c))) => Ok(Some(c)),
            Some((name, Value::F32(_))) => Err(invalid(format!(
                "{what} ({name}) must be an integer tensor"
            ))),
            Some((name, Value::Tensor(_))) => Err(NodeError::NeedsValue {
                message: format!("{what} ({name}) must be a constant (or fold to one)"),
                names: vec![name],
            }),
            Some((name, _)) => Err(unsupported(format!(
                "{what} ({name}) must be a constant (or fold to one)"
            ))),
        }
    }

    /// Input `i` as a constant float scalar (`None` when absent).
    fn const_scalar(&self, n: &Node<'_>, i: usize, what: &str) -> NResult<Option<f32>> {
        match self.arg(n, i)? {
            None => Ok(None),
            Some((name, Value::F32(c))) => match c.data.as_slice() {
                [v] => Ok(Some(*v)),
                _ => Err(invalid(format!(
                    "{what} ({name}) must be a scalar, got shape {:?}",
                    c.shape
                ))),
            },
            Some((name, Value::I64(_))) => {
                Err(invalid(format!("{what} ({name}) must be a float tensor")))
            }
            Some((name, Value::Tensor(_))) => Err(NodeError::NeedsValue {
                message: format!("{what} ({name}) must be a constant"),
                names: vec![name],
            }),
            Some((name, _)) => Err(unsupported(format!("{what} ({name}) must be a constant"))),
        }
    }

    /// Adds a layer named after the node (`<name>/<suffix>` with a suffix).
    fn layer(
        &mut self,
        n: &Node<'_>,
        suffix: Option<&str>,
        descriptor: LayerDescriptor,
        inputs: &[TensorRef],
    ) -> NResult<TensorRef> {
        let base = match suffix {
            None => n.name.clone(),
            Some(s) => format!("{}/{s}", n.name),
        };
        let name = self.unique(&base);
        if Self::takes_output_params(descriptor.kind())
            && let Some(q) = self.q_out.take()
        {
            return Ok(self
                .builder
                .add_quantized_layer(&name, descriptor, inputs, q)?);
        }
        Ok(self.builder.add_layer(&name, descriptor, inputs)?)
    }

    /// A reshaped value: folded for constants, a `Reshape` layer for a tensor.
    fn reshaped(&mut self, n: &Node<'_>, value: &Value, shape: Vec<u32>) -> NResult<Value> {
        match value {
            Value::F32(c) => self.store_f32(c.reshape(shape).map_err(invalid)?),
            Value::I64(c) => self.store_i64(c.reshape(shape).map_err(invalid)?),
            Value::Tensor(t) => {
                let d = LayerDescriptor::Reshape(ReshapeDescriptor {
                    target_shape: shape.into(),
                });
                Ok(Value::Tensor(self.layer(n, None, d, &[*t])?))
            }
            Value::Quantized(_) | Value::Dynamic(_) => {
                Err(unsupported("a reshape of a quantized value"))
            }
            Value::Skipped | Value::Unusable(_) => Err(unsupported("the input is not available")),
        }
    }
}
