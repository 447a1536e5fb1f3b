//! Turning an ONNX `ModelProto` into a [`Network`] of v1 layers.
//!
//! Nodes are processed in the order the graph lists them (ONNX requires a topological
//! order). Every ONNX value is tracked as a network tensor, or as a constant the importer
//! holds (float32 or int64) and folds through shape sub-graphs (`Shape`, `Gather`, `Slice`,
//! `Concat`, `Unsqueeze`, `Squeeze`, `Cast`, arithmetic, ...). Float constants become
//! `Constant` layers only where a layer reads them.

use std::{
    collections::{HashMap, HashSet},
    fmt,
    path::{Path, PathBuf},
    rc::Rc,
};

use backplane_api::{
    ActivationDescriptor, ActivationFunction, BatchMatMulDescriptor, BatchNormalizationDescriptor,
    BinaryOperation, ConcatDescriptor, ConstTensor, Convolution2dDescriptor,
    CoordinateTransformation, DataLayout, DataType, FlattenDescriptor, FullyConnectedDescriptor,
    LayerDescriptor, MeanDescriptor, NearestRounding, NormalizationDescriptor, OutputRounding,
    PadDescriptor, PadMode, PadPair, Padding2d, Pooling2dDescriptor, PoolingType,
    ReshapeDescriptor, ResizeDescriptor, ResizeMethod, SliceDescriptor, SoftmaxDescriptor,
    TensorInfo, TransposeConvolution2dDescriptor, TransposeDescriptor, UnaryOperation, shapes,
};
use prost::Message;

use super::{
    fold::{Const, numel},
    proto::{
        AttributeProto, ModelProto, NodeProto, TensorProto, ValueInfoProto, attribute_type,
        data_type,
    },
};
use crate::network::{Network, NetworkBuilder, NetworkError, TensorRef};

/// The largest total size of the constants of one model (initializers, `Constant` nodes
/// and folded values), in bytes.
pub const MAX_CONSTANT_BYTES: usize = 1 << 30;

/// The `ai.onnx` operator-set versions the importer understands.
pub const SUPPORTED_OPSETS: std::ops::RangeInclusive<i64> = 6..=25;

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
    let model = ModelProto::decode(bytes).map_err(|e| ImportError::Malformed(format!("{e}")))?;
    import_model(&model, options)
}

/// Imports an `.onnx` file.
pub fn import_file(path: &Path, options: &ImportOptions) -> Result<Network, ImportError> {
    let bytes = std::fs::read(path).map_err(|e| ImportError::Io {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    import_bytes(&bytes, options)
}

/// Imports a decoded ONNX model.
pub fn import_model(model: &ModelProto, options: &ImportOptions) -> Result<Network, ImportError> {
    let opset = model
        .opset_import
        .iter()
        .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .ok_or_else(|| {
            ImportError::Malformed("the model imports no ai.onnx operator set".to_owned())
        })?;
    if !SUPPORTED_OPSETS.contains(&opset) {
        return Err(ImportError::Unsupported {
            nodes: vec![UnsupportedNode {
                node: "<model>".to_owned(),
                op: "opset".to_owned(),
                missing: format!(
                    "ai.onnx opset {opset} (supported: {} to {})",
                    SUPPORTED_OPSETS.start(),
                    SUPPORTED_OPSETS.end()
                ),
            }],
        });
    }
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| ImportError::Malformed("the model has no graph".to_owned()))?;

    let mut im = Importer {
        opset,
        builder: NetworkBuilder::new(),
        values: HashMap::new(),
        materialised: HashMap::new(),
        used: HashSet::new(),
        budget: MAX_CONSTANT_BYTES,
        unsupported: Vec::new(),
    };

    let input_names: HashSet<&str> = graph.input.iter().map(|i| i.name.as_str()).collect();
    for key in options
        .input_shapes
        .keys()
        .chain(options.constant_inputs.keys())
    {
        if !input_names.contains(key.as_str()) {
            return Err(ImportError::InvalidNode {
                node: key.clone(),
                op: "ImportOptions".to_owned(),
                reason: "the graph has no input of this name".to_owned(),
            });
        }
    }
    // Graph inputs and outputs keep their names: reserve them before any layer is named.
    for o in &graph.output {
        im.used.insert(o.name.clone());
    }

    for t in &graph.initializer {
        let invalid = |reason: String| ImportError::InvalidNode {
            node: t.name.clone(),
            op: "Initializer".to_owned(),
            reason,
        };
        if im.values.contains_key(&t.name) {
            return Err(invalid("the initializer is defined twice".to_owned()));
        }
        let v = tensor_value(t, &mut im.budget).map_err(invalid)?;
        im.values.insert(t.name.clone(), v);
    }
    for (name, c) in &options.constant_inputs {
        let v =
            const_tensor_value(c, &mut im.budget).map_err(|reason| ImportError::InvalidNode {
                node: name.clone(),
                op: "ImportOptions".to_owned(),
                reason,
            })?;
        im.values.insert(name.clone(), v);
    }
    for vi in &graph.input {
        if im.values.contains_key(&vi.name) {
            continue; // an initializer or a promoted constant
        }
        im.add_graph_input(vi, options.input_shapes.get(&vi.name))?;
    }

    for (index, proto) in graph.node.iter().enumerate() {
        let name = if proto.name.is_empty() {
            format!("{}_{index}", proto.op_type)
        } else {
            proto.name.clone()
        };
        im.node(&Node { proto, name })?;
    }
    if !im.unsupported.is_empty() {
        return Err(ImportError::Unsupported {
            nodes: im.unsupported,
        });
    }

    for o in &graph.output {
        let v = im
            .values
            .get(&o.name)
            .cloned()
            .ok_or_else(|| ImportError::MissingInput {
                node: "<graph outputs>".to_owned(),
                input: o.name.clone(),
            })?;
        let unsupported = |missing: String| ImportError::Unsupported {
            nodes: vec![UnsupportedNode {
                node: o.name.clone(),
                op: "Output".to_owned(),
                missing,
            }],
        };
        let t = match v {
            Value::Tensor(t) => t,
            Value::F32(_) => match im.tensor(&o.name, &v) {
                Ok(t) => t,
                Err(NodeError::Network(e)) => return Err(e.into()),
                Err(e) => return Err(unsupported(e.message())),
            },
            Value::I64(_) => {
                return Err(unsupported(
                    "an int64 graph output (only float32 outputs are supported)".to_owned(),
                ));
            }
            Value::Unusable(r) => return Err(unsupported(r)),
            Value::Skipped => return Err(unsupported("produced by an unsupported node".into())),
        };
        im.builder.add_output(&o.name, t)?;
    }
    Ok(im.builder.build()?)
}

/// A value of the ONNX graph.
#[derive(Debug, Clone)]
enum Value {
    /// A float32 tensor of the network.
    Tensor(TensorRef),
    /// A float32 constant held by the importer.
    F32(Rc<Const<f32>>),
    /// An integer constant (any ONNX integer or bool type) held by the importer.
    I64(Rc<Const<i64>>),
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
}

impl NodeError {
    fn message(&self) -> String {
        match self {
            NodeError::Unsupported(s) | NodeError::Invalid(s) | NodeError::Missing(s) => s.clone(),
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

/// Every operator the importer maps (whether an instance is supported can still depend on
/// its attributes and inputs).
const OPERATORS: &[&str] = &[
    "Abs",
    "Add",
    "AveragePool",
    "BatchNormalization",
    "Cast",
    "Ceil",
    "Clip",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "Conv",
    "ConvTranspose",
    "Cos",
    "Div",
    "Dropout",
    "Elu",
    "Erf",
    "Exp",
    "Flatten",
    "Floor",
    "Gather",
    "Gemm",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "LeakyRelu",
    "LRN",
    "Log",
    "MatMul",
    "Max",
    "MaxPool",
    "Mean",
    "Min",
    "Mul",
    "Neg",
    "Pad",
    "Pow",
    "Reciprocal",
    "ReduceMean",
    "Relu",
    "Reshape",
    "Resize",
    "Shape",
    "Sigmoid",
    "Sin",
    "Slice",
    "Softmax",
    "Split",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Sum",
    "Tanh",
    "Transpose",
    "Unsqueeze",
];

// ----------------------------------------------------------------------------------------
// Attributes

fn find_attr<'a>(n: &'a Node<'_>, name: &str) -> Option<&'a AttributeProto> {
    n.proto.attribute.iter().find(|a| a.name == name)
}

fn typed<'a>(n: &'a Node<'_>, name: &str, ty: i32) -> NResult<Option<&'a AttributeProto>> {
    match find_attr(n, name) {
        None => Ok(None),
        Some(a) if a.r#type == ty || a.r#type == attribute_type::UNDEFINED => Ok(Some(a)),
        Some(a) => Err(invalid(format!(
            "attribute {name} must be {}, got {}",
            attribute_type::name(ty),
            attribute_type::name(a.r#type)
        ))),
    }
}

fn attr_int(n: &Node<'_>, name: &str) -> NResult<Option<i64>> {
    Ok(typed(n, name, attribute_type::INT)?.map(|a| a.i))
}

fn attr_float(n: &Node<'_>, name: &str) -> NResult<Option<f32>> {
    Ok(typed(n, name, attribute_type::FLOAT)?.map(|a| a.f))
}

fn attr_string(n: &Node<'_>, name: &str) -> NResult<Option<String>> {
    Ok(typed(n, name, attribute_type::STRING)?.map(|a| String::from_utf8_lossy(&a.s).into_owned()))
}

fn attr_ints(n: &Node<'_>, name: &str) -> NResult<Option<Vec<i64>>> {
    Ok(typed(n, name, attribute_type::INTS)?.map(|a| a.ints.clone()))
}

fn attr_floats(n: &Node<'_>, name: &str) -> NResult<Option<Vec<f32>>> {
    Ok(typed(n, name, attribute_type::FLOATS)?.map(|a| a.floats.clone()))
}

fn attr_tensor<'a>(n: &'a Node<'_>, name: &str) -> NResult<Option<&'a TensorProto>> {
    match typed(n, name, attribute_type::TENSOR)? {
        None => Ok(None),
        Some(a) => {
            a.t.as_ref()
                .map(Some)
                .ok_or_else(|| invalid(format!("attribute {name} holds no tensor")))
        }
    }
}

/// A boolean (0/1) integer attribute.
fn attr_flag(n: &Node<'_>, name: &str, default: bool) -> NResult<bool> {
    match attr_int(n, name)? {
        None => Ok(default),
        Some(0) => Ok(false),
        Some(1) => Ok(true),
        Some(v) => Err(invalid(format!("attribute {name} must be 0 or 1, got {v}"))),
    }
}

fn to_u32(v: i64, what: &str) -> NResult<u32> {
    u32::try_from(v).map_err(|_| invalid(format!("{what} {v} is out of range")))
}

fn positive_u32(v: i64, what: &str) -> NResult<u32> {
    match u32::try_from(v) {
        Ok(x) if x >= 1 => Ok(x),
        _ => Err(invalid(format!("{what} must be at least 1, got {v}"))),
    }
}

/// A 2-element attribute of values >= 1 (strides, dilations), `[y, x]`.
fn pair(n: &Node<'_>, name: &str) -> NResult<[u32; 2]> {
    match attr_ints(n, name)? {
        None => Ok([1, 1]),
        Some(v) if v.len() == 2 => Ok([positive_u32(v[0], name)?, positive_u32(v[1], name)?]),
        Some(v) => Err(invalid(format!(
            "{name} must have 2 values for a 2-D window, got {v:?}"
        ))),
    }
}

/// A Conv or ConvTranspose `kernel_shape`, when given, must be the weights' last two
/// dimensions.
fn check_kernel_shape(n: &Node<'_>, ws: &[u32]) -> NResult<()> {
    match attr_ints(n, "kernel_shape")? {
        Some(k) if k != [i64::from(ws[2]), i64::from(ws[3])] => Err(invalid(format!(
            "kernel_shape {k:?} does not match the weights {ws:?}"
        ))),
        _ => Ok(()),
    }
}

fn normalize_axis(axis: i64, rank: usize) -> NResult<usize> {
    shapes::normalize_axis(axis, rank).map_err(invalid)
}

// ----------------------------------------------------------------------------------------
// Constants

fn charge(budget: &mut usize, elements: usize, size: usize) -> Result<(), String> {
    let bytes = elements.saturating_mul(size);
    *budget = budget.checked_sub(bytes).ok_or_else(|| {
        format!("the model's constants exceed the limit of {MAX_CONSTANT_BYTES} bytes")
    })?;
    Ok(())
}

fn raw_values<T>(raw: &[u8], n: usize, size: usize, read: impl Fn(&[u8]) -> T) -> Option<Vec<T>> {
    (raw.len() == n.checked_mul(size)?).then(|| raw.chunks_exact(size).map(read).collect())
}

/// A tensor from a `TensorProto` (initializer or `Constant` attribute). Malformed data is an
/// error; an element type the importer does not handle gives [`Value::Unusable`].
fn tensor_value(t: &TensorProto, budget: &mut usize) -> Result<Value, String> {
    let shape = t
        .dims
        .iter()
        .map(|&d| {
            u32::try_from(d).map_err(|_| format!("dimension {d} of {:?} is out of range", t.dims))
        })
        .collect::<Result<Vec<u32>, _>>()?;
    let n = numel(&shape)?;
    let ty = t.data_type;
    let raw = t.raw_data.as_slice();
    let wrong = |got: usize| {
        format!(
            "{} tensor of shape {shape:?} needs {n} values, holds {got} (or {} raw bytes); external data is not supported",
            data_type::name(ty),
            raw.len()
        )
    };
    let le8 = |c: &[u8]| <[u8; 8]>::try_from(c).unwrap_or_default();
    let le4 = |c: &[u8]| <[u8; 4]>::try_from(c).unwrap_or_default();
    let le2 = |c: &[u8]| <[u8; 2]>::try_from(c).unwrap_or_default();
    let floats = |typed: Vec<f32>, raw_f: Option<Vec<f32>>| -> Result<Vec<f32>, String> {
        if !raw.is_empty() {
            raw_f.ok_or_else(|| wrong(0))
        } else if typed.len() == n {
            Ok(typed)
        } else {
            Err(wrong(typed.len()))
        }
    };
    let ints = |typed: Vec<i64>, raw_i: Option<Vec<i64>>| -> Result<Vec<i64>, String> {
        if !raw.is_empty() {
            raw_i.ok_or_else(|| wrong(0))
        } else if typed.len() == n {
            Ok(typed)
        } else {
            Err(wrong(typed.len()))
        }
    };
    let int32s = || {
        t.int32_data
            .iter()
            .map(|&v| i64::from(v))
            .collect::<Vec<_>>()
    };
    match ty {
        data_type::FLOAT => {
            let data = floats(
                t.float_data.clone(),
                raw_values(raw, n, 4, |c| f32::from_le_bytes(le4(c))),
            )?;
            charge(budget, n, 4)?;
            Ok(Value::F32(Rc::new(Const::new(shape, data)?)))
        }
        data_type::DOUBLE => {
            let data = floats(
                t.double_data.iter().map(|&v| v as f32).collect(),
                raw_values(raw, n, 8, |c| f64::from_le_bytes(le8(c)) as f32),
            )?;
            charge(budget, n, 4)?;
            Ok(Value::F32(Rc::new(Const::new(shape, data)?)))
        }
        data_type::INT64
        | data_type::INT32
        | data_type::INT16
        | data_type::INT8
        | data_type::UINT16
        | data_type::UINT8
        | data_type::BOOL => {
            let raw_i = match ty {
                data_type::INT64 => raw_values(raw, n, 8, |c| i64::from_le_bytes(le8(c))),
                data_type::INT32 => {
                    raw_values(raw, n, 4, |c| i64::from(i32::from_le_bytes(le4(c))))
                }
                data_type::INT16 => {
                    raw_values(raw, n, 2, |c| i64::from(i16::from_le_bytes(le2(c))))
                }
                data_type::UINT16 => {
                    raw_values(raw, n, 2, |c| i64::from(u16::from_le_bytes(le2(c))))
                }
                data_type::INT8 => raw_values(raw, n, 1, |c| i64::from(c[0] as i8)),
                _ => raw_values(raw, n, 1, |c| i64::from(c[0])),
            };
            let typed = if ty == data_type::INT64 {
                t.int64_data.clone()
            } else {
                int32s()
            };
            let data = ints(typed, raw_i)?;
            charge(budget, n, 8)?;
            Ok(Value::I64(Rc::new(Const::new(shape, data)?)))
        }
        _ => Ok(Value::Unusable(format!(
            "{} constants are not supported (only float32, float64 and integer types)",
            data_type::name(ty)
        ))),
    }
}

/// The values of a serialised ONNX `TensorProto`, as the importer reads constants.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorValues {
    /// `float` or `double` elements (doubles rounded to `f32`).
    Float32 {
        /// Dimensions, outermost first (empty for a scalar).
        shape: Vec<u32>,
        /// The elements, row-major.
        data: Vec<f32>,
    },
    /// Any ONNX integer type or `bool`, widened to `i64`.
    Int64 {
        /// Dimensions, outermost first (empty for a scalar).
        shape: Vec<u32>,
        /// The elements, row-major.
        data: Vec<i64>,
    },
}

/// A tensor file: one serialised `TensorProto`, such as the `input_0.pb` / `output_0.pb`
/// files of ONNX's backend tests. Returns the tensor's name (may be empty) and its values.
/// Malformed bytes, an inconsistent size or an element type other than float, double,
/// integer or bool are errors ([`ImportError::Malformed`]).
pub fn decode_tensor(bytes: &[u8]) -> Result<(String, TensorValues), ImportError> {
    let t = TensorProto::decode(bytes).map_err(|e| ImportError::Malformed(format!("{e}")))?;
    let mut budget = MAX_CONSTANT_BYTES;
    let values = match tensor_value(&t, &mut budget).map_err(ImportError::Malformed)? {
        Value::F32(c) => TensorValues::Float32 {
            shape: c.shape.clone(),
            data: c.data.clone(),
        },
        Value::I64(c) => TensorValues::Int64 {
            shape: c.shape.clone(),
            data: c.data.clone(),
        },
        Value::Unusable(why) => return Err(ImportError::Malformed(why)),
        Value::Tensor(_) | Value::Skipped => {
            return Err(ImportError::Malformed("not a tensor value".to_owned()));
        }
    };
    Ok((t.name, values))
}

fn const_tensor_value(c: &ConstTensor, budget: &mut usize) -> Result<Value, String> {
    if c.info.num_bytes() != Some(c.data.len()) {
        return Err(format!("constant {} holds {} bytes", c.info, c.data.len()));
    }
    let shape = c.info.shape.to_vec();
    let n = numel(&shape)?;
    let words = c.data.chunks_exact(4).map(|w| [w[0], w[1], w[2], w[3]]);
    match c.info.data_type {
        DataType::Float32 => {
            charge(budget, n, 4)?;
            let data = words.map(f32::from_le_bytes).collect();
            Ok(Value::F32(Rc::new(Const::new(shape, data)?)))
        }
        DataType::Signed32 => {
            charge(budget, n, 8)?;
            let data = words.map(|w| i64::from(i32::from_le_bytes(w))).collect();
            Ok(Value::I64(Rc::new(Const::new(shape, data)?)))
        }
        t => Err(format!(
            "constant inputs must be Float32 or Signed32, got {t}"
        )),
    }
}

fn to_const_tensor(c: &Const<f32>) -> ConstTensor {
    ConstTensor {
        info: TensorInfo::new(&c.shape, DataType::Float32).constant(),
        data: c.data.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

/// Output size of ONNX `auto_pad = SAME_*` padding for one axis: `(begin, end)`.
fn same_padding(
    input: u32,
    kernel: u32,
    stride: u32,
    dilation: u32,
    upper: bool,
) -> NResult<(u32, u32)> {
    let (input, kernel, stride, dilation) = (
        i128::from(input),
        i128::from(kernel),
        i128::from(stride),
        i128::from(dilation),
    );
    let out = (input + stride - 1) / stride;
    let span = dilation * (kernel - 1) + 1;
    let total = ((out - 1).max(0) * stride + span - input).max(0);
    let (small, large) = (total / 2, total - total / 2);
    let (begin, end) = if upper {
        (small, large)
    } else {
        (large, small)
    };
    let fit =
        |v: i128| u32::try_from(v).map_err(|_| invalid(format!("padding {v} is out of range")));
    Ok((fit(begin)?, fit(end)?))
}

/// Explicit padding of a 2-D window from `pads` / `auto_pad`, and whether it was automatic.
fn window_padding(
    n: &Node<'_>,
    spatial: [u32; 2],
    kernel: [u32; 2],
    strides: [u32; 2],
    dilations: [u32; 2],
) -> NResult<(Padding2d, bool)> {
    let auto = attr_string(n, "auto_pad")?.unwrap_or_else(|| "NOTSET".to_owned());
    match auto.as_str() {
        "NOTSET" | "" => {
            let pads = attr_ints(n, "pads")?.unwrap_or_else(|| vec![0; 4]);
            if pads.len() != 4 {
                return Err(invalid(format!(
                    "pads must have 4 values for a 2-D window, got {pads:?}"
                )));
            }
            Ok((
                Padding2d {
                    top: to_u32(pads[0], "pad")?,
                    left: to_u32(pads[1], "pad")?,
                    bottom: to_u32(pads[2], "pad")?,
                    right: to_u32(pads[3], "pad")?,
                },
                false,
            ))
        }
        "VALID" => Ok((Padding2d::default(), true)),
        "SAME_UPPER" | "SAME_LOWER" => {
            let upper = auto == "SAME_UPPER";
            let (top, bottom) =
                same_padding(spatial[0], kernel[0], strides[0], dilations[0], upper)?;
            let (left, right) =
                same_padding(spatial[1], kernel[1], strides[1], dilations[1], upper)?;
            Ok((
                Padding2d {
                    left,
                    right,
                    top,
                    bottom,
                },
                true,
            ))
        }
        other => Err(invalid(format!("unknown auto_pad {other:?}"))),
    }
}

/// The target of ONNX `Reshape`: `0` copies the input dimension (unless `allow_zero`),
/// `-1` is inferred.
fn reshape_target(input: &[u32], spec: &[i64], allow_zero: bool) -> NResult<Vec<u32>> {
    let total = input
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(u64::from(d)))
        .ok_or_else(|| invalid("the input's element count overflows"))?;
    let mut out = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &v) in spec.iter().enumerate() {
        match v {
            -1 if infer.is_some() => return Err(invalid("shape has more than one -1")),
            -1 => {
                infer = Some(i);
                out.push(1);
            }
            0 if !allow_zero => out.push(*input.get(i).ok_or_else(|| {
                invalid(format!(
                    "shape {spec:?} copies dimension {i} (0) that input {input:?} lacks"
                ))
            })?),
            v => out.push(to_u32(v, "shape dimension")?),
        }
    }
    if let Some(i) = infer {
        let known = out
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(u64::from(d)))
            .ok_or_else(|| invalid(format!("shape {spec:?} overflows")))?;
        if known == 0 || total % known != 0 {
            return Err(invalid(format!(
                "cannot infer the -1 of {spec:?} for input {input:?}"
            )));
        }
        out[i] = u32::try_from(total / known)
            .map_err(|_| invalid(format!("the inferred dimension of {spec:?} is too large")))?;
    }
    Ok(out)
}

/// Normalised, sorted, distinct axes.
fn distinct_axes(axes: &[i64], rank: usize) -> NResult<Vec<usize>> {
    let mut out = axes
        .iter()
        .map(|&a| normalize_axis(a, rank))
        .collect::<NResult<Vec<_>>>()?;
    out.sort_unstable();
    if out.windows(2).any(|w| w[0] == w[1]) {
        return Err(invalid(format!("axes {axes:?} repeat an axis")));
    }
    Ok(out)
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
}

impl Importer {
    fn unique(&mut self, base: &str) -> String {
        let base = if base.is_empty() { "layer" } else { base };
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
        if tt.elem_type != data_type::FLOAT {
            self.unsupported.push(UnsupportedNode {
                node: vi.name.clone(),
                op: "Input".to_owned(),
                missing: format!(
                    "a {} input (only float32 inputs; give it in ImportOptions::constant_inputs)",
                    data_type::name(tt.elem_type)
                ),
            });
            self.values.insert(vi.name.clone(), Value::Skipped);
            return Ok(());
        }
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
                let agrees = given.len() == declared.len()
                    && given
                        .iter()
                        .zip(&declared)
                        .all(|(g, d)| d.is_none_or(|d| d == *g));
                if !agrees {
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
        let info = TensorInfo::new(&shape, DataType::Float32);
        if info.num_bytes().is_none() {
            return Err(invalid(format!("shape {shape:?} is too large")));
        }
        self.used.insert(vi.name.clone());
        let t = self.builder.add_input(&vi.name, info)?;
        self.values.insert(vi.name.clone(), Value::Tensor(t));
        Ok(())
    }

    fn node(&mut self, n: &Node<'_>) -> Result<(), ImportError> {
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
        let known_domain = n.proto.domain.is_empty() || n.proto.domain == "ai.onnx";
        let result = if !known_domain {
            Err(unsupported(format!(
                "operators of domain {:?} are not supported",
                n.proto.domain
            )))
        } else if !OPERATORS.contains(&n.op()) {
            Err(unsupported("no v1 mapping for this operator"))
        } else if skipped {
            Ok(Vec::new())
        } else {
            self.dispatch(n)
        };
        let outputs = match result {
            Ok(outputs) if skipped => vec![Value::Skipped; outputs.len().max(n.proto.output.len())],
            Ok(outputs) => outputs,
            Err(NodeError::Unsupported(missing)) => {
                self.unsupported.push(UnsupportedNode {
                    node: n.name.clone(),
                    op: n.op().to_owned(),
                    missing,
                });
                vec![Value::Skipped; n.proto.output.len()]
            }
            Err(NodeError::Invalid(reason)) => {
                return Err(ImportError::InvalidNode {
                    node: n.name.clone(),
                    op: n.op().to_owned(),
                    reason,
                });
            }
            Err(NodeError::Missing(input)) => {
                return Err(ImportError::MissingInput {
                    node: n.name.clone(),
                    input,
                });
            }
            Err(NodeError::Network(e)) => return Err(e.into()),
        };
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
        Ok(())
    }

    fn dispatch(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        use ActivationFunction as F;
        use BinaryOperation as B;
        let v = match n.op() {
            "Conv" if self.rank_of_input(n)? == 3 => self.as_2d(n, Self::conv)?,
            "Conv" => self.conv(n)?,
            "ConvTranspose" if self.rank_of_input(n)? == 3 => {
                self.as_2d(n, Self::conv_transpose)?
            }
            "ConvTranspose" => self.conv_transpose(n)?,
            "Resize" => self.resize(n)?,
            "Gemm" => self.gemm(n)?,
            "MatMul" => self.matmul(n)?,
            "Add" => self.binary(n, B::Add)?,
            "Sub" => self.binary(n, B::Sub)?,
            "Mul" => self.binary(n, B::Mul)?,
            "Div" => self.binary(n, B::Div)?,
            "Max" => vec![self.fold(n, B::Maximum)?],
            "Min" => vec![self.fold(n, B::Minimum)?],
            "Sum" => vec![self.fold(n, B::Add)?],
            "Mean" => self.mean(n)?,
            "Pow" => self.binary(n, B::Power)?,
            "Abs" => self.unary(n, UnaryOperation::Abs)?,
            "Neg" => self.unary(n, UnaryOperation::Neg)?,
            "Exp" => self.unary(n, UnaryOperation::Exp)?,
            "Log" => self.unary(n, UnaryOperation::Log)?,
            "Sqrt" => self.unary(n, UnaryOperation::Sqrt)?,
            "Reciprocal" => self.unary(n, UnaryOperation::Reciprocal)?,
            "Sin" => self.unary(n, UnaryOperation::Sin)?,
            "Cos" => self.unary(n, UnaryOperation::Cos)?,
            "Erf" => self.unary(n, UnaryOperation::Erf)?,
            "Ceil" => self.unary(n, UnaryOperation::Ceil)?,
            "Floor" => self.unary(n, UnaryOperation::Floor)?,
            "Relu" => self.activation(n, F::ReLU, 0.0, 0.0)?,
            "Sigmoid" => self.activation(n, F::Sigmoid, 0.0, 0.0)?,
            "Tanh" => self.activation(n, F::TanH, 1.0, 1.0)?,
            "HardSwish" => self.activation(n, F::HardSwish, 0.0, 0.0)?,
            "LeakyRelu" => {
                let alpha = attr_float(n, "alpha")?.unwrap_or(0.01);
                self.activation(n, F::LeakyReLU, alpha, 0.0)?
            }
            "Elu" => {
                let alpha = attr_float(n, "alpha")?.unwrap_or(1.0);
                self.activation(n, F::Elu, alpha, 0.0)?
            }
            "Clip" => self.clip(n)?,
            "LRN" => self.lrn(n)?,
            "HardSigmoid" => self.hard_sigmoid(n)?,
            "MaxPool" | "AveragePool" if self.rank_of_input(n)? == 3 => {
                let t = if n.op() == "MaxPool" {
                    PoolingType::Max
                } else {
                    PoolingType::Average
                };
                self.as_2d(n, |im, n| im.pool(n, t))?
            }
            "MaxPool" => self.pool(n, PoolingType::Max)?,
            "AveragePool" => self.pool(n, PoolingType::Average)?,
            "GlobalAveragePool" => self.global_average_pool(n)?,
            "GlobalMaxPool" => self.global_max_pool(n)?,
            "Softmax" => self.softmax(n)?,
            "Reshape" => self.reshape(n)?,
            "Flatten" => self.flatten(n)?,
            "Concat" => self.concat(n)?,
            "Transpose" => self.transpose(n)?,
            "Pad" => self.pad(n)?,
            "BatchNormalization" => self.batch_norm(n)?,
            "ReduceMean" => self.reduce_mean(n)?,
            "Constant" => self.constant(n)?,
            "ConstantOfShape" => self.constant_of_shape(n)?,
            "Identity" => vec![self.req(n, 0)?.1],
            "Dropout" => self.dropout(n)?,
            "Shape" => self.shape_op(n)?,
            "Gather" => self.gather(n)?,
            "Slice" => self.slice(n)?,
            "Unsqueeze" => self.unsqueeze(n)?,
            "Squeeze" => self.squeeze(n)?,
            "Cast" => self.cast(n)?,
            "Split" => self.split(n)?,
            other => return Err(unsupported(format!("no v1 mapping for {other}"))),
        };
        Ok(v)
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
                let t = self.builder.add_constant(&layer, to_const_tensor(c))?;
                self.materialised.insert(name.to_owned(), t);
                Ok(t)
            }
            Value::I64(_) => Err(unsupported(format!(
                "the integer tensor {name} is used as an activation (only float32 is supported)"
            ))),
            Value::Skipped | Value::Unusable(_) => {
                Err(unsupported(format!("the value {name} is not available")))
            }
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
            Value::Skipped | Value::Unusable(_) => Err(unsupported("the value is not available")),
        }
    }

    fn store_f32(&mut self, c: Const<f32>) -> NResult<Value> {
        charge(&mut self.budget, c.data.len(), 4).map_err(invalid)?;
        Ok(Value::F32(Rc::new(c)))
    }

    fn store_i64(&mut self, c: Const<i64>) -> NResult<Value> {
        charge(&mut self.budget, c.data.len(), 8).map_err(invalid)?;
        Ok(Value::I64(Rc::new(c)))
    }

    /// Input `i` as constant integers (`None` when absent).
    fn const_ints(&self, n: &Node<'_>, i: usize, what: &str) -> NResult<Option<Rc<Const<i64>>>> {
        match self.arg(n, i)? {
            None => Ok(None),
            Some((_, Value::I64(c))) => Ok(Some(c)),
            Some((name, Value::F32(_))) => Err(invalid(format!(
                "{what} ({name}) must be an integer tensor"
            ))),
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
            Value::Skipped | Value::Unusable(_) => Err(unsupported("the input is not available")),
        }
    }

    // -- operators ------------------------------------------------------------------------

    fn conv(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let (wn, wv) = self.req(n, 1)?;
        let bias = self.arg(n, 2)?;
        let xs = self.shape(&xv)?;
        let ws = self.shape(&wv)?;
        if xs.len() != 4 || ws.len() != 4 {
            return Err(unsupported(format!(
                "only 2-D convolution of a 4-D NCHW input is supported (input {xs:?}, weights {ws:?})"
            )));
        }
        let kernel = [ws[2], ws[3]];
        check_kernel_shape(n, &ws)?;
        let strides = pair(n, "strides")?;
        let dilations = pair(n, "dilations")?;
        let group = positive_u32(attr_int(n, "group")?.unwrap_or(1), "group")?;
        let (padding, _) = window_padding(n, [xs[2], xs[3]], kernel, strides, dilations)?;
        let desc = Convolution2dDescriptor {
            padding,
            stride_x: strides[1],
            stride_y: strides[0],
            dilation_x: dilations[1],
            dilation_y: dilations[0],
            groups: group,
            bias_enabled: bias.is_some(),
            layout: DataLayout::Nchw,
        };
        let depthwise = group != 1 && group == xs[1] && ws[1] == 1;
        let mut inputs = vec![self.tensor(&xn, &xv)?, self.tensor(&wn, &wv)?];
        if let Some((bn, bv)) = bias {
            inputs.push(self.tensor(&bn, &bv)?);
        }
        let d = if depthwise {
            LayerDescriptor::DepthwiseConvolution2d(desc)
        } else {
            LayerDescriptor::Convolution2d(desc)
        };
        Ok(vec![Value::Tensor(self.layer(n, None, d, &inputs)?)])
    }

    /// The rank of node `n`'s first input.
    fn rank_of_input(&self, n: &Node<'_>) -> NResult<usize> {
        let (_, v) = self.req(n, 0)?;
        Ok(self.shape(&v)?.len())
    }

    /// A 1-D convolution or pooling (`[N, C, L]` input) as the 2-D one with a unit height:
    /// the input (and a convolution's weights) gain a height of 1, the window attributes a
    /// leading 1 (pads a leading 0 at both ends), and the 2-D operator's output loses the
    /// height again. `op` is the 2-D importer, called with a node that reads the reshaped
    /// values.
    fn as_2d(
        &mut self,
        n: &Node<'_>,
        op: impl FnOnce(&mut Self, &Node<'_>) -> NResult<Vec<Value>>,
    ) -> NResult<Vec<Value>> {
        let mut proto = n.proto.clone();
        for a in &mut proto.attribute {
            match a.name.as_str() {
                "kernel_shape" | "strides" | "dilations" if a.ints.len() == 1 => {
                    a.ints.insert(0, 1);
                }
                "output_padding" if a.ints.len() == 1 => a.ints.insert(0, 0),
                "pads" if a.ints.len() == 2 => a.ints = vec![0, a.ints[0], 0, a.ints[1]],
                _ => {}
            }
        }
        // The input and, for Conv, the weights get a unit height under names of their own.
        let reshaped_inputs = if n.op().starts_with("Conv") { 2 } else { 1 };
        for i in 0..reshaped_inputs.min(proto.input.len()) {
            let (_, v) = self.req(n, i)?;
            let mut shape = self.shape(&v)?;
            if shape.len() != 3 {
                return Err(unsupported(format!(
                    "a 1-D {} with a {}-D input {i}",
                    n.op(),
                    shape.len()
                )));
            }
            shape.insert(2, 1);
            let v = match v {
                Value::Tensor(t) => {
                    let d = LayerDescriptor::Reshape(ReshapeDescriptor {
                        target_shape: shape.into(),
                    });
                    Value::Tensor(self.layer(n, Some(&format!("as_2d_{i}")), d, &[t])?)
                }
                other => self.reshaped(n, &other, shape)?,
            };
            let name = format!("{}\u{0}as_2d_{i}", n.name);
            self.values.insert(name.clone(), v);
            proto.input[i] = name;
        }
        let node_2d = Node {
            proto: &proto,
            name: n.name.clone(),
        };
        let mut outputs = op(self, &node_2d)?;
        if let Some(Value::Tensor(t)) = outputs.first().cloned() {
            let mut shape = self
                .builder
                .tensor_info(t)
                .map(|i| i.shape.to_vec())
                .unwrap_or_default();
            if shape.len() == 4 && shape[2] == 1 {
                shape.remove(2);
            }
            let d = LayerDescriptor::Reshape(ReshapeDescriptor {
                target_shape: shape.into(),
            });
            outputs[0] = Value::Tensor(self.layer(n, Some("as_1d"), d, &[t])?);
        }
        Ok(outputs)
    }

    /// `ConvTranspose` on a 4-D NCHW input: Backend API 1.1's `TransposeConvolution2d`.
    /// Explicit pads only (`auto_pad` and `output_shape` are refused with a reason).
    fn conv_transpose(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let (wn, wv) = self.req(n, 1)?;
        let bias = self.arg(n, 2)?;
        let xs = self.shape(&xv)?;
        let ws = self.shape(&wv)?;
        if xs.len() != 4 || ws.len() != 4 {
            return Err(unsupported(format!(
                "only 2-D ConvTranspose of a 4-D NCHW input is supported (input {xs:?}, weights {ws:?})"
            )));
        }
        check_kernel_shape(n, &ws)?;
        let auto = attr_string(n, "auto_pad")?.unwrap_or_default();
        if !matches!(auto.as_str(), "" | "NOTSET") {
            return Err(unsupported(format!("ConvTranspose with auto_pad {auto}")));
        }
        if attr_ints(n, "output_shape")?.is_some() {
            return Err(unsupported("ConvTranspose with output_shape"));
        }
        let strides = pair(n, "strides")?;
        let dilations = pair(n, "dilations")?;
        let output_padding = match attr_ints(n, "output_padding")? {
            None => [0, 0],
            Some(v) if v.len() == 2 => [
                to_u32(v[0], "output_padding")?,
                to_u32(v[1], "output_padding")?,
            ],
            Some(v) => {
                return Err(invalid(format!(
                    "output_padding must have 2 values, got {v:?}"
                )));
            }
        };
        let (padding, _) = window_padding(n, [xs[2], xs[3]], [ws[2], ws[3]], strides, dilations)?;
        let d = LayerDescriptor::TransposeConvolution2d(TransposeConvolution2dDescriptor {
            padding,
            stride_x: strides[1],
            stride_y: strides[0],
            dilation_x: dilations[1],
            dilation_y: dilations[0],
            groups: positive_u32(attr_int(n, "group")?.unwrap_or(1), "group")?,
            output_padding_x: output_padding[1],
            output_padding_y: output_padding[0],
            bias_enabled: bias.is_some(),
        });
        let mut inputs = vec![self.tensor(&xn, &xv)?, self.tensor(&wn, &wv)?];
        if let Some((bn, bv)) = bias {
            inputs.push(self.tensor(&bn, &bv)?);
        }
        Ok(vec![Value::Tensor(self.layer(n, None, d, &inputs)?)])
    }

    /// `Resize` (opset 11 and later) of the height and width of a 4-D NCHW input, nearest or
    /// linear: Backend API 1.1's `Resize`. Scales or sizes must be constant, and leave N and C
    /// unchanged.
    fn resize(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        if self.opset < 11 {
            return Err(unsupported(
                "Resize before opset 11 (no coordinate transformation)",
            ));
        }
        let (xn, xv) = self.req(n, 0)?;
        let xs = self.shape(&xv)?;
        if xs.len() != 4 {
            return Err(unsupported(format!(
                "Resize of a {}-D input (only 4-D NCHW)",
                xs.len()
            )));
        }
        let text = |name: &str, default: &str| -> NResult<String> {
            Ok(attr_string(n, name)?.unwrap_or_else(|| default.to_owned()))
        };
        let method = match text("mode", "nearest")?.as_str() {
            "nearest" => ResizeMethod::Nearest,
            "linear" => ResizeMethod::Linear,
            other => return Err(unsupported(format!("Resize mode {other}"))),
        };
        let coordinates = match text("coordinate_transformation_mode", "half_pixel")?.as_str() {
            "half_pixel" => CoordinateTransformation::HalfPixel,
            "asymmetric" => CoordinateTransformation::Asymmetric,
            "align_corners" => CoordinateTransformation::AlignCorners,
            "pytorch_half_pixel" => CoordinateTransformation::PytorchHalfPixel,
            other => {
                return Err(unsupported(format!(
                    "Resize coordinate_transformation_mode {other}"
                )));
            }
        };
        let nearest = match text("nearest_mode", "round_prefer_floor")?.as_str() {
            "round_prefer_floor" => NearestRounding::RoundPreferFloor,
            "round_prefer_ceil" => NearestRounding::RoundPreferCeil,
            "floor" => NearestRounding::Floor,
            "ceil" => NearestRounding::Ceil,
            other => return Err(unsupported(format!("Resize nearest_mode {other}"))),
        };
        if attr_int(n, "antialias")?.unwrap_or(0) != 0 {
            return Err(unsupported("Resize with antialias"));
        }
        if attr_ints(n, "axes")?.is_some() {
            return Err(unsupported("Resize with axes"));
        }
        if !matches!(
            text("keep_aspect_ratio_policy", "stretch")?.as_str(),
            "stretch"
        ) {
            return Err(unsupported("Resize with a keep_aspect_ratio_policy"));
        }
        let scales = match self.arg(n, 2)? {
            None => None,
            Some((_, Value::F32(c))) if c.data.is_empty() => None,
            Some((_, Value::F32(c))) => Some(c.data.clone()),
            Some((name, _)) => {
                return Err(unsupported(format!(
                    "Resize scales ({name}) must be a constant"
                )));
            }
        };
        let sizes = self.const_ints(n, 3, "sizes")?.map(|c| c.data.clone());
        let (height, width, scale_y, scale_x) = match (scales, sizes) {
            (Some(s), None) if s.len() == 4 => {
                if s[0] != 1.0 || s[1] != 1.0 {
                    return Err(unsupported(format!("Resize scales {s:?} change N or C")));
                }
                let out = |len: u32, scale: f32| -> NResult<u32> {
                    let v = (f64::from(len) * f64::from(scale)).floor();
                    if !(v.is_finite() && v >= 0.0 && v <= f64::from(u32::MAX)) {
                        return Err(invalid(format!("Resize scale {scale} of {len}")));
                    }
                    Ok(v as u32)
                };
                (out(xs[2], s[2])?, out(xs[3], s[3])?, s[2], s[3])
            }
            (None, Some(z)) if z.len() == 4 => {
                if z[0] != i64::from(xs[0]) || z[1] != i64::from(xs[1]) {
                    return Err(unsupported(format!("Resize sizes {z:?} change N or C")));
                }
                let (h, w) = (to_u32(z[2], "sizes")?, to_u32(z[3], "sizes")?);
                let scale = |o: u32, i: u32| if i == 0 { 1.0 } else { o as f32 / i as f32 };
                (h, w, scale(h, xs[2]), scale(w, xs[3]))
            }
            (None, None) => return Err(invalid("Resize needs scales or sizes")),
            _ => {
                return Err(invalid(
                    "Resize needs exactly one of scales and sizes, for every axis of the input",
                ));
            }
        };
        let d = LayerDescriptor::Resize(ResizeDescriptor {
            method,
            coordinates,
            nearest,
            height,
            width,
            scale_y,
            scale_x,
        });
        let x = self.tensor(&xn, &xv)?;
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)])
    }

    fn gemm(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let alpha = attr_float(n, "alpha")?.unwrap_or(1.0);
        let beta = attr_float(n, "beta")?.unwrap_or(1.0);
        let trans_a = attr_flag(n, "transA", false)?;
        let trans_b = attr_flag(n, "transB", false)?;
        let (an, av) = self.req(n, 0)?;
        let (bn, bv) = self.req(n, 1)?;
        let c = self.arg(n, 2)?;
        let a = self.tensor(&an, &av)?;
        let a = if trans_a {
            let rank = self.shape(&av)?.len();
            if rank != 2 {
                return Err(invalid(format!("A must be 2-D, got rank {rank}")));
            }
            let d = LayerDescriptor::Transpose(TransposeDescriptor {
                permutation: vec![1, 0].into(),
            });
            self.layer(n, Some("transposeA"), d, &[a])?
        } else {
            a
        };
        let bs = self.shape(&bv)?;
        if bs.len() != 2 {
            return Err(invalid(format!("B must be 2-D, got {bs:?}")));
        }
        let w = match &bv {
            Value::F32(b) if alpha != 1.0 => {
                let scaled = b.try_map(|v| Ok(v * alpha)).map_err(invalid)?;
                charge(&mut self.budget, scaled.data.len(), 4).map_err(invalid)?;
                self.new_constant(&format!("{}/weights", n.name), &scaled)?
            }
            Value::F32(_) => self.tensor(&bn, &bv)?,
            _ if alpha != 1.0 => {
                return Err(unsupported("alpha != 1 with a non-constant B"));
            }
            _ => self.tensor(&bn, &bv)?,
        };
        let out = if trans_b { bs[0] } else { bs[1] };
        let mut bias = None;
        let mut add_after = None;
        if let Some((cn, cv)) = c
            && beta != 0.0
        {
            match &cv {
                Value::F32(cc) => {
                    let vector = cc.shape == [out] || cc.shape == [1, out];
                    if vector && beta == 1.0 && cc.shape.len() == 1 {
                        bias = Some(self.tensor(&cn, &cv)?);
                    } else {
                        let scaled = cc.try_map(|v| Ok(v * beta)).map_err(invalid)?;
                        charge(&mut self.budget, scaled.data.len(), 4).map_err(invalid)?;
                        if vector {
                            let flat = scaled.reshape(vec![out]).map_err(invalid)?;
                            bias = Some(self.new_constant(&format!("{}/bias", n.name), &flat)?);
                        } else {
                            add_after =
                                Some(self.new_constant(&format!("{}/bias", n.name), &scaled)?);
                        }
                    }
                }
                Value::Tensor(_) if beta == 1.0 => add_after = Some(self.tensor(&cn, &cv)?),
                Value::Tensor(_) => return Err(unsupported("beta != 1 with a non-constant C")),
                _ => return Err(invalid("C must be a float tensor")),
            }
        }
        let fc = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
            bias_enabled: bias.is_some(),
            transpose_weights: trans_b,
        });
        let mut inputs = vec![a, w];
        inputs.extend(bias);
        let y = match add_after {
            None => self.layer(n, None, fc, &inputs)?,
            Some(c) => {
                let y = self.layer(n, Some("matmul"), fc, &inputs)?;
                let add = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
                self.layer(n, None, add, &[y, c])?
            }
        };
        Ok(vec![Value::Tensor(y)])
    }

    /// `MatMul`: a 2-D input times constant 2-D weights is a `FullyConnected` layer (which
    /// backends fuse with a bias and an activation); every other form is numpy's matmul, a
    /// Backend API 1.1 `BatchMatMul`, with a 1-D operand given a unit dimension (in front for
    /// `a`, behind for `b`) that the result loses again.
    fn matmul(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (an, av) = self.req(n, 0)?;
        let (bn, bv) = self.req(n, 1)?;
        let a_shape = self.shape(&av)?;
        let b_shape = self.shape(&bv)?;
        if a_shape.len() == 2 && matches!(&bv, Value::F32(b) if b.shape.len() == 2) {
            let a = self.tensor(&an, &av)?;
            let w = self.tensor(&bn, &bv)?;
            let fc = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
                bias_enabled: false,
                transpose_weights: false,
            });
            return Ok(vec![Value::Tensor(self.layer(n, None, fc, &[a, w])?)]);
        }
        if a_shape.is_empty() || b_shape.is_empty() {
            return Err(invalid(format!(
                "MatMul of a scalar ({a_shape:?} and {b_shape:?})"
            )));
        }
        let mut a = self.tensor(&an, &av)?;
        let mut b = self.tensor(&bn, &bv)?;
        let reshape = |im: &mut Self, t, shape: Vec<u32>, suffix: &str| {
            let d = LayerDescriptor::Reshape(ReshapeDescriptor {
                target_shape: shape.into(),
            });
            im.layer(n, Some(suffix), d, &[t])
        };
        if a_shape.len() == 1 {
            a = reshape(self, a, vec![1, a_shape[0]], "a_2d")?;
        }
        if b_shape.len() == 1 {
            b = reshape(self, b, vec![b_shape[0], 1], "b_2d")?;
        }
        let d = LayerDescriptor::BatchMatMul(BatchMatMulDescriptor::default());
        let mut y = self.layer(n, None, d, &[a, b])?;
        if a_shape.len() == 1 || b_shape.len() == 1 {
            let mut shape = self
                .builder
                .tensor_info(y)
                .map(|i| i.shape.to_vec())
                .unwrap_or_default();
            let r = shape.len();
            if b_shape.len() == 1 {
                shape.remove(r - 1);
            }
            if a_shape.len() == 1 {
                shape.remove(r - 2);
            }
            y = reshape(self, y, shape, "squeeze")?;
        }
        Ok(vec![Value::Tensor(y)])
    }

    /// Inference-mode Dropout is the identity (as is every Dropout before opset 12, which
    /// runtimes run in inference mode). Opset 12's `training_mode` input with a non-zero
    /// ratio drops values at random, which no v1 layer does.
    fn dropout(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let x = self.req(n, 0)?.1;
        let training = if self.opset >= 12 {
            match self.const_ints(n, 2, "training_mode")? {
                None => false,
                Some(t) => t.data.iter().any(|&v| v != 0),
            }
        } else {
            false
        };
        let ratio = if self.opset >= 12 {
            self.const_scalar(n, 1, "ratio")?.unwrap_or(0.5)
        } else {
            attr_float(n, "ratio")?.unwrap_or(0.5)
        };
        if training && ratio != 0.0 {
            return Err(unsupported(format!(
                "training mode with ratio {ratio} (random dropout has no v1 layer)"
            )));
        }
        Ok(vec![
            x,
            Value::Unusable("the mask output of Dropout is not supported".to_owned()),
        ])
    }

    /// A variadic node (Max, Min, Sum: 1 or more inputs, numpy broadcasting): folded left to
    /// right, one `ElementwiseBinary` layer per input after the first (ONNX Runtime adds in
    /// the same order). Two inputs make one layer named after the node.
    fn fold(&mut self, n: &Node<'_>, op: BinaryOperation) -> NResult<Value> {
        let count = n.proto.input.len();
        if count == 0 {
            return Err(invalid("expects at least 1 input"));
        }
        if count == 2 {
            let (an, av) = self.req(n, 0)?;
            let (bn, bv) = self.req(n, 1)?;
            return self.binary_pair(n, op, (an, av), (bn, bv), None);
        }
        let mut acc = self.req(n, 0)?.1;
        for i in 1..count {
            let (bn, bv) = self.req(n, i)?;
            let an = format!("{}/{}", n.name, i - 1);
            let suffix = i.to_string();
            acc = self.binary_pair(n, op, (an, acc), (bn, bv), Some(&suffix))?;
        }
        Ok(acc)
    }

    /// `Mean`: the inputs added left to right ([`Self::fold`]), then divided by their count.
    fn mean(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let sum = self.fold(n, BinaryOperation::Add)?;
        let count = n.proto.input.len();
        if count == 1 {
            return Ok(vec![sum]);
        }
        let divisor = self.store_f32(Const::new(vec![], vec![count as f32]).map_err(invalid)?)?;
        let sum_name = format!("{}/sum", n.name);
        let divisor_name = format!("{}/count", n.name);
        Ok(vec![self.binary_pair(
            n,
            BinaryOperation::Div,
            (sum_name, sum),
            (divisor_name, divisor),
            Some("mean"),
        )?])
    }

    fn binary(&mut self, n: &Node<'_>, op: BinaryOperation) -> NResult<Vec<Value>> {
        let count = n.proto.input.len();
        if count != 2 {
            return Err(invalid(format!("expects 2 inputs, got {count}")));
        }
        let (an, av) = self.req(n, 0)?;
        let (bn, bv) = self.req(n, 1)?;
        Ok(vec![self.binary_pair(n, op, (an, av), (bn, bv), None)?])
    }

    /// One binary operation of node `n` on two values: folded when both are constant, else
    /// an `ElementwiseBinary` layer named after the node (with `suffix`).
    fn binary_pair(
        &mut self,
        n: &Node<'_>,
        op: BinaryOperation,
        (an, av): (String, Value),
        (bn, mut bv): (String, Value),
        suffix: Option<&str>,
    ) -> NResult<Value> {
        // Before opset 7, `broadcast = 1` aligned B at `axis` instead of at the end.
        if self.opset < 7
            && attr_int(n, "broadcast")?.unwrap_or(0) != 0
            && let Some(axis) = attr_int(n, "axis")?
        {
            let ar = self.shape(&av)?.len();
            let bshape = self.shape(&bv)?;
            let axis = normalize_axis(axis, ar)?;
            let trailing = ar
                .checked_sub(axis + bshape.len())
                .ok_or_else(|| invalid("B does not fit A at axis"))?;
            if trailing > 0 {
                let mut s = bshape;
                s.extend(std::iter::repeat_n(1, trailing));
                bv = match &bv {
                    Value::F32(c) => self.store_f32(c.reshape(s).map_err(invalid)?)?,
                    Value::I64(c) => self.store_i64(c.reshape(s).map_err(invalid)?)?,
                    _ => {
                        return Err(unsupported(
                            "legacy broadcast along an axis with a non-constant B",
                        ));
                    }
                };
            }
        }
        match (&av, &bv) {
            (Value::F32(a), Value::F32(b)) => {
                let f = |x: f32, y: f32| -> Result<f32, String> {
                    Ok(match op {
                        BinaryOperation::Add => x + y,
                        BinaryOperation::Sub => x - y,
                        BinaryOperation::Mul => x * y,
                        BinaryOperation::Div => x / y,
                        BinaryOperation::Maximum => x.max(y),
                        BinaryOperation::Minimum => x.min(y),
                        BinaryOperation::Power => x.powf(y),
                        BinaryOperation::SquaredDifference => (x - y) * (x - y),
                    })
                };
                let c = Const::binary(a, b, f).map_err(invalid)?;
                Ok(self.store_f32(c)?)
            }
            (Value::I64(a), Value::I64(b)) => {
                let f = |x: i64, y: i64| -> Result<i64, String> {
                    match op {
                        BinaryOperation::Add => x.checked_add(y),
                        BinaryOperation::Sub => x.checked_sub(y),
                        BinaryOperation::Mul => x.checked_mul(y),
                        BinaryOperation::Div => x.checked_div(y),
                        BinaryOperation::Maximum => Some(x.max(y)),
                        BinaryOperation::Minimum => Some(x.min(y)),
                        BinaryOperation::Power => u32::try_from(y).ok().and_then(|e| x.checked_pow(e)),
                        BinaryOperation::SquaredDifference => x
                            .checked_sub(y)
                            .and_then(|d| d.checked_mul(d)),
                    }
                    .ok_or_else(|| {
                        format!("integer overflow, division by zero or negative exponent in {x} {op:?} {y}")
                    })
                };
                let c = Const::binary(a, b, f).map_err(invalid)?;
                Ok(self.store_i64(c)?)
            }
            (Value::I64(_), Value::F32(_)) | (Value::F32(_), Value::I64(_)) => {
                Err(invalid("the inputs have different element types"))
            }
            _ => {
                let a = self.tensor(&an, &av)?;
                let b = self.tensor(&bn, &bv)?;
                let d = LayerDescriptor::ElementwiseBinary(op);
                Ok(Value::Tensor(self.layer(n, suffix, d, &[a, b])?))
            }
        }
    }

    /// An element-wise function of one tensor (Backend API 1.1's `ElementwiseUnary`).
    fn unary(&mut self, n: &Node<'_>, op: UnaryOperation) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let x = self.tensor(&xn, &xv)?;
        let d = LayerDescriptor::ElementwiseUnary(op);
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)])
    }

    /// `LRN` (Backend API 1.1's `Normalization`): across the channels of a 4-D NCHW tensor.
    fn lrn(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let rank = self.shape(&xv)?.len();
        if rank != 4 {
            return Err(unsupported(format!(
                "LRN of a {rank}-D tensor (only 4-D NCHW)"
            )));
        }
        let size = attr_int(n, "size")?.ok_or_else(|| invalid("the size attribute is required"))?;
        let size = u32::try_from(size)
            .ok()
            .filter(|s| *s > 0)
            .ok_or_else(|| invalid(format!("size {size} is not a positive window")))?;
        let d = LayerDescriptor::Normalization(NormalizationDescriptor {
            size,
            alpha: attr_float(n, "alpha")?.unwrap_or(1e-4),
            beta: attr_float(n, "beta")?.unwrap_or(0.75),
            k: attr_float(n, "bias")?.unwrap_or(1.0),
        });
        let x = self.tensor(&xn, &xv)?;
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)])
    }

    fn activation(
        &mut self,
        n: &Node<'_>,
        function: ActivationFunction,
        a: f32,
        b: f32,
    ) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let x = self.tensor(&xn, &xv)?;
        let d = LayerDescriptor::Activation(ActivationDescriptor { function, a, b });
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)])
    }

    fn clip(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (min, max) = if self.opset < 11 {
            (
                attr_float(n, "min")?.unwrap_or(f32::MIN),
                attr_float(n, "max")?.unwrap_or(f32::MAX),
            )
        } else {
            (
                self.const_scalar(n, 1, "min")?.unwrap_or(f32::NEG_INFINITY),
                self.const_scalar(n, 2, "max")?.unwrap_or(f32::INFINITY),
            )
        };
        self.activation(n, ActivationFunction::BoundedReLU, max, min)
    }

    /// `max(0, min(1, alpha * x + beta))` as Mul, Add and BoundedReLU(1, 0).
    fn hard_sigmoid(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let alpha = attr_float(n, "alpha")?.unwrap_or(0.2);
        let beta = attr_float(n, "beta")?.unwrap_or(0.5);
        let (xn, xv) = self.req(n, 0)?;
        let x = self.tensor(&xn, &xv)?;
        let a = self.new_constant(&format!("{}/alpha", n.name), &Const::scalar(alpha))?;
        let mul = LayerDescriptor::ElementwiseBinary(BinaryOperation::Mul);
        let m = self.layer(n, Some("mul"), mul, &[x, a])?;
        let b = self.new_constant(&format!("{}/beta", n.name), &Const::scalar(beta))?;
        let add = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
        let s = self.layer(n, Some("add"), add, &[m, b])?;
        let clamp = LayerDescriptor::Activation(ActivationDescriptor {
            function: ActivationFunction::BoundedReLU,
            a: 1.0,
            b: 0.0,
        });
        Ok(vec![Value::Tensor(self.layer(n, None, clamp, &[s])?)])
    }

    fn pool(&mut self, n: &Node<'_>, pool_type: PoolingType) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let xs = self.shape(&xv)?;
        if xs.len() != 4 {
            return Err(unsupported(format!(
                "only 2-D pooling of a 4-D NCHW input is supported (input {xs:?})"
            )));
        }
        let kernel =
            attr_ints(n, "kernel_shape")?.ok_or_else(|| invalid("kernel_shape is required"))?;
        let [kh, kw] = kernel.as_slice() else {
            return Err(invalid(format!(
                "kernel_shape must have 2 values for a 4-D input, got {kernel:?}"
            )));
        };
        let kernel = [
            positive_u32(*kh, "kernel_shape")?,
            positive_u32(*kw, "kernel_shape")?,
        ];
        let strides = pair(n, "strides")?;
        if pair(n, "dilations")? != [1, 1] {
            return Err(unsupported("pooling dilations other than 1"));
        }
        let ceil = attr_flag(n, "ceil_mode", false)?;
        let count_include_pad = attr_flag(n, "count_include_pad", false)?;
        let (padding, auto) = window_padding(n, [xs[2], xs[3]], kernel, strides, [1, 1])?;
        // With auto_pad, ONNX fixes the output size regardless of ceil_mode.
        let rounding = if ceil && !auto {
            OutputRounding::Ceiling
        } else {
            OutputRounding::Floor
        };
        let x = self.tensor(&xn, &xv)?;
        let d = LayerDescriptor::Pooling2d(Pooling2dDescriptor {
            pool_type,
            padding,
            pool_width: kernel[1],
            pool_height: kernel[0],
            stride_x: strides[1],
            stride_y: strides[0],
            rounding,
            count_include_pad: pool_type == PoolingType::Average && count_include_pad,
            layout: DataLayout::Nchw,
        });
        Ok(vec![
            Value::Tensor(self.layer(n, None, d, &[x])?),
            Value::Unusable("the Indices output of MaxPool is not supported".to_owned()),
        ])
    }

    fn global_average_pool(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let rank = self.shape(&xv)?.len();
        if rank < 3 {
            return Err(invalid(format!(
                "the input must have rank >= 3, got {rank}"
            )));
        }
        let x = self.tensor(&xn, &xv)?;
        let d = LayerDescriptor::Mean(MeanDescriptor {
            axes: (2..rank as u32).collect(),
            keep_dims: true,
        });
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)])
    }

    fn global_max_pool(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let xs = self.shape(&xv)?;
        let [_, _, h, w] = xs.as_slice() else {
            return Err(unsupported(format!(
                "GlobalMaxPool of a non-4-D input {xs:?}"
            )));
        };
        let x = self.tensor(&xn, &xv)?;
        let d = LayerDescriptor::Pooling2d(Pooling2dDescriptor {
            pool_type: PoolingType::Max,
            padding: Padding2d::default(),
            pool_width: *w,
            pool_height: *h,
            stride_x: 1,
            stride_y: 1,
            rounding: OutputRounding::Floor,
            count_include_pad: false,
            layout: DataLayout::Nchw,
        });
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)])
    }

    fn softmax(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let xs = self.shape(&xv)?;
        let r = xs.len();
        let x = self.tensor(&xn, &xv)?;
        let softmax = |axis: usize| {
            LayerDescriptor::Softmax(SoftmaxDescriptor {
                beta: 1.0,
                axis: axis as i32,
            })
        };
        if self.opset >= 13 {
            let axis = normalize_axis(attr_int(n, "axis")?.unwrap_or(-1), r)?;
            return Ok(vec![Value::Tensor(self.layer(
                n,
                None,
                softmax(axis),
                &[x],
            )?)]);
        }
        // Before opset 13: the input is coerced to 2-D [prod(..axis), prod(axis..)].
        let axis = normalize_axis(attr_int(n, "axis")?.unwrap_or(1), r)?;
        let wide: Vec<usize> = (axis..r).filter(|&i| xs[i] != 1).collect();
        if wide.len() <= 1 {
            // At most one dimension from `axis` on is not 1: a softmax along it is the same.
            let along = wide.first().copied().unwrap_or(r - 1);
            return Ok(vec![Value::Tensor(self.layer(
                n,
                None,
                softmax(along),
                &[x],
            )?)]);
        }
        let flat = LayerDescriptor::Flatten(FlattenDescriptor { axis: axis as u32 });
        let f = self.layer(n, Some("flatten"), flat, &[x])?;
        let s = self.layer(n, Some("softmax"), softmax(1), &[f])?;
        let back = LayerDescriptor::Reshape(ReshapeDescriptor {
            target_shape: xs.into(),
        });
        Ok(vec![Value::Tensor(self.layer(n, None, back, &[s])?)])
    }

    fn reshape(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (_, xv) = self.req(n, 0)?;
        let spec = self
            .const_ints(n, 1, "shape")?
            .ok_or_else(|| invalid("input 1 (shape) is required"))?;
        if spec.shape.len() != 1 {
            return Err(invalid(format!("shape must be 1-D, got {:?}", spec.shape)));
        }
        let allow_zero = self.opset >= 14 && attr_flag(n, "allowzero", false)?;
        let target = reshape_target(&self.shape(&xv)?, &spec.data, allow_zero)?;
        Ok(vec![self.reshaped(n, &xv, target)?])
    }

    fn flatten(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let xs = self.shape(&xv)?;
        let r = xs.len() as i64;
        let axis = attr_int(n, "axis")?.unwrap_or(1);
        let axis = if axis < 0 { axis + r } else { axis };
        if !(0..=r).contains(&axis) {
            return Err(invalid(format!("axis {axis} is out of range for rank {r}")));
        }
        let axis = axis as usize;
        if let Value::Tensor(_) = xv {
            let x = self.tensor(&xn, &xv)?;
            let d = LayerDescriptor::Flatten(FlattenDescriptor { axis: axis as u32 });
            return Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)]);
        }
        let prod = |d: &[u32]| {
            d.iter()
                .try_fold(1u32, |acc, &x| acc.checked_mul(x))
                .ok_or_else(|| invalid("the flattened shape overflows"))
        };
        let target = vec![prod(&xs[..axis])?, prod(&xs[axis..])?];
        Ok(vec![self.reshaped(n, &xv, target)?])
    }

    fn concat(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let axis = attr_int(n, "axis")?.ok_or_else(|| invalid("attribute axis is required"))?;
        let mut args = Vec::new();
        for i in 0..n.proto.input.len() {
            if let Some(a) = self.arg(n, i)? {
                args.push(a);
            }
        }
        let Some((_, first)) = args.first() else {
            return Err(invalid("Concat needs at least one input"));
        };
        let axis = normalize_axis(axis, self.shape(first)?.len())?;
        let ints: Vec<&Const<i64>> = args
            .iter()
            .filter_map(|(_, v)| match v {
                Value::I64(c) => Some(c.as_ref()),
                _ => None,
            })
            .collect();
        if ints.len() == args.len() {
            let c = Const::concat(&ints, axis).map_err(invalid)?;
            return Ok(vec![self.store_i64(c)?]);
        }
        if !ints.is_empty() {
            return Err(unsupported(
                "concatenation of integer constants with float tensors",
            ));
        }
        let floats: Vec<&Const<f32>> = args
            .iter()
            .filter_map(|(_, v)| match v {
                Value::F32(c) => Some(c.as_ref()),
                _ => None,
            })
            .collect();
        if floats.len() == args.len() {
            let c = Const::concat(&floats, axis).map_err(invalid)?;
            return Ok(vec![self.store_f32(c)?]);
        }
        let mut inputs = Vec::with_capacity(args.len());
        for (name, v) in &args {
            inputs.push(self.tensor(name, v)?);
        }
        let d = LayerDescriptor::Concat(ConcatDescriptor { axis: axis as u32 });
        Ok(vec![Value::Tensor(self.layer(n, None, d, &inputs)?)])
    }

    fn transpose(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let r = self.shape(&xv)?.len();
        let perm: Vec<usize> = match attr_ints(n, "perm")? {
            None => (0..r).rev().collect(),
            Some(p) => p
                .iter()
                .map(|&a| {
                    usize::try_from(a).ok().filter(|&a| a < r).ok_or_else(|| {
                        invalid(format!("perm {p:?} is not a permutation of rank {r}"))
                    })
                })
                .collect::<NResult<_>>()?,
        };
        match &xv {
            Value::F32(c) => Ok(vec![self.store_f32(c.transpose(&perm).map_err(invalid)?)?]),
            Value::I64(c) => Ok(vec![self.store_i64(c.transpose(&perm).map_err(invalid)?)?]),
            _ => {
                let x = self.tensor(&xn, &xv)?;
                let d = LayerDescriptor::Transpose(TransposeDescriptor {
                    permutation: perm.iter().map(|&p| p as u32).collect(),
                });
                Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)])
            }
        }
    }

    fn pad(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let r = self.shape(&xv)?.len();
        let mode = match attr_string(n, "mode")?.as_deref().unwrap_or("constant") {
            "constant" => PadMode::Constant,
            "reflect" => PadMode::Reflect,
            "edge" => PadMode::Edge,
            other => return Err(unsupported(format!("pad mode {other:?}"))),
        };
        let (pads, value, axes) = if self.opset < 11 {
            let pads =
                attr_ints(n, "pads")?.ok_or_else(|| invalid("attribute pads is required"))?;
            (pads, attr_float(n, "value")?.unwrap_or(0.0), None)
        } else {
            let pads = self
                .const_ints(n, 1, "pads")?
                .ok_or_else(|| invalid("input 1 (pads) is required"))?;
            let value = self.const_scalar(n, 2, "constant_value")?.unwrap_or(0.0);
            let axes = if self.opset >= 18 {
                self.const_ints(n, 3, "axes")?
            } else {
                None
            };
            (pads.data.clone(), value, axes.map(|a| a.data.clone()))
        };
        let axes: Vec<usize> = match axes {
            None => (0..r).collect(),
            Some(a) => a
                .iter()
                .map(|&x| normalize_axis(x, r))
                .collect::<NResult<_>>()?,
        };
        if pads.len() != 2 * axes.len() {
            return Err(invalid(format!(
                "pads {pads:?} must have 2 values per padded axis ({})",
                axes.len()
            )));
        }
        let mut padding = vec![
            PadPair {
                before: 0,
                after: 0
            };
            r
        ];
        for (k, &a) in axes.iter().enumerate() {
            let (before, after) = (pads[k], pads[k + axes.len()]);
            if before < 0 || after < 0 {
                return Err(unsupported(format!("negative pads {pads:?} (cropping)")));
            }
            padding[a] = PadPair {
                before: to_u32(before, "pad")?,
                after: to_u32(after, "pad")?,
            };
        }
        let x = self.tensor(&xn, &xv)?;
        let d = LayerDescriptor::Pad(PadDescriptor {
            padding: padding.into(),
            value,
            mode,
        });
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)])
    }

    fn batch_norm(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        if self.opset >= 14 && attr_flag(n, "training_mode", false)? {
            return Err(unsupported("training_mode = 1"));
        }
        if self.opset < 9 && !attr_flag(n, "spatial", true)? {
            return Err(unsupported("spatial = 0 (per-element statistics)"));
        }
        let epsilon = attr_float(n, "epsilon")?.unwrap_or(1e-5);
        let (xn, xv) = self.req(n, 0)?;
        let mut inputs = vec![self.tensor(&xn, &xv)?];
        for (i, what) in [(1, "scale"), (2, "B"), (3, "mean"), (4, "var")] {
            let (name, v) = self.req(n, i)?;
            if !matches!(v, Value::F32(_)) {
                return Err(unsupported(format!(
                    "{what} ({name}) must be a float constant"
                )));
            }
            inputs.push(self.tensor(&name, &v)?);
        }
        let d = LayerDescriptor::BatchNormalization(BatchNormalizationDescriptor {
            epsilon,
            layout: DataLayout::Nchw,
        });
        Ok(vec![Value::Tensor(self.layer(n, None, d, &inputs)?)])
    }

    fn reduce_mean(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let r = self.shape(&xv)?.len();
        let keep_dims = attr_flag(n, "keepdims", true)?;
        let axes = if self.opset < 18 {
            attr_ints(n, "axes")?
        } else {
            self.const_ints(n, 1, "axes")?.map(|a| a.data.clone())
        };
        let axes = match axes {
            Some(a) if !a.is_empty() => distinct_axes(&a, r)?,
            _ if self.opset >= 18 && attr_flag(n, "noop_with_empty_axes", false)? => {
                return Ok(vec![xv]);
            }
            _ => (0..r).collect(),
        };
        let x = self.tensor(&xn, &xv)?;
        let d = LayerDescriptor::Mean(MeanDescriptor {
            axes: axes.iter().map(|&a| a as u32).collect(),
            keep_dims,
        });
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)])
    }

    fn constant(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        if let Some(t) = attr_tensor(n, "value")? {
            return Ok(vec![tensor_value(t, &mut self.budget).map_err(invalid)?]);
        }
        if let Some(f) = attr_float(n, "value_float")? {
            return Ok(vec![self.store_f32(Const::scalar(f))?]);
        }
        if let Some(fs) = attr_floats(n, "value_floats")? {
            return Ok(vec![self.store_f32(Const::vector(fs).map_err(invalid)?)?]);
        }
        if let Some(i) = attr_int(n, "value_int")? {
            return Ok(vec![self.store_i64(Const::scalar(i))?]);
        }
        if let Some(is) = attr_ints(n, "value_ints")? {
            return Ok(vec![self.store_i64(Const::vector(is).map_err(invalid)?)?]);
        }
        match n.proto.attribute.first() {
            Some(a) => Err(unsupported(format!("a Constant given by {}", a.name))),
            None => Err(invalid("a Constant without a value")),
        }
    }

    fn constant_of_shape(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let shape = self
            .const_ints(n, 0, "shape")?
            .ok_or_else(|| invalid("input 0 (shape) is required"))?;
        let shape = shape
            .data
            .iter()
            .map(|&d| to_u32(d, "dimension"))
            .collect::<NResult<Vec<u32>>>()?;
        let count = numel(&shape).map_err(invalid)?;
        let fill = match attr_tensor(n, "value")? {
            None => Value::F32(Rc::new(Const::scalar(0.0))),
            Some(t) => tensor_value(t, &mut self.budget).map_err(invalid)?,
        };
        match fill {
            Value::F32(c) if c.data.len() == 1 => {
                Ok(vec![self.store_f32(
                    Const::new(shape, vec![c.data[0]; count]).map_err(invalid)?,
                )?])
            }
            Value::I64(c) if c.data.len() == 1 => {
                Ok(vec![self.store_i64(
                    Const::new(shape, vec![c.data[0]; count]).map_err(invalid)?,
                )?])
            }
            Value::Unusable(r) => Err(unsupported(r)),
            _ => Err(invalid("value must hold exactly one element")),
        }
    }

    fn shape_op(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (_, xv) = self.req(n, 0)?;
        let xs = self.shape(&xv)?;
        let r = xs.len() as i64;
        let clamp = |v: i64| {
            let v = if v < 0 { v.saturating_add(r) } else { v };
            v.clamp(0, r) as usize
        };
        let (start, end) = if self.opset >= 15 {
            (
                clamp(attr_int(n, "start")?.unwrap_or(0)),
                clamp(attr_int(n, "end")?.unwrap_or(r)),
            )
        } else {
            (0, xs.len())
        };
        let dims: Vec<i64> = xs
            .get(start..end.max(start))
            .unwrap_or(&[])
            .iter()
            .map(|&d| i64::from(d))
            .collect();
        Ok(vec![self.store_i64(Const::vector(dims).map_err(invalid)?)?])
    }

    fn gather(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (_, dv) = self.req(n, 0)?;
        let indices = self
            .const_ints(n, 1, "indices")?
            .ok_or_else(|| invalid("input 1 (indices) is required"))?;
        let r = self.shape(&dv)?.len();
        let axis = normalize_axis(attr_int(n, "axis")?.unwrap_or(0), r)?;
        match &dv {
            Value::I64(c) => Ok(vec![
                self.store_i64(c.gather(axis, &indices).map_err(invalid)?)?,
            ]),
            Value::F32(c) => Ok(vec![
                self.store_f32(c.gather(axis, &indices).map_err(invalid)?)?,
            ]),
            _ => Err(unsupported(
                "Gather of a non-constant tensor (only folded on constants; no v1 layer)",
            )),
        }
    }

    fn slice(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (_, dv) = self.req(n, 0)?;
        let (starts, ends, axes, steps) = if self.opset < 10 {
            let starts =
                attr_ints(n, "starts")?.ok_or_else(|| invalid("attribute starts is required"))?;
            let ends =
                attr_ints(n, "ends")?.ok_or_else(|| invalid("attribute ends is required"))?;
            (starts, ends, attr_ints(n, "axes")?, None)
        } else {
            let get = |i: usize, what: &str| -> NResult<Option<Vec<i64>>> {
                Ok(self.const_ints(n, i, what)?.map(|c| c.data.clone()))
            };
            let starts =
                get(1, "starts")?.ok_or_else(|| invalid("input 1 (starts) is required"))?;
            let ends = get(2, "ends")?.ok_or_else(|| invalid("input 2 (ends) is required"))?;
            (starts, ends, get(3, "axes")?, get(4, "steps")?)
        };
        let (axes, steps) = (axes.as_deref(), steps.as_deref());
        match &dv {
            Value::I64(c) => {
                let s = c.slice(&starts, &ends, axes, steps).map_err(invalid)?;
                Ok(vec![self.store_i64(s)?])
            }
            Value::F32(c) => {
                let s = c.slice(&starts, &ends, axes, steps).map_err(invalid)?;
                Ok(vec![self.store_f32(s)?])
            }
            Value::Tensor(t) => {
                // Backend API 1.1's Slice, with ONNX's ranges resolved on the known shape.
                let shape = self.shape(&dv)?;
                let ranges = super::fold::slice_ranges(&shape, &starts, &ends, axes, steps)
                    .map_err(invalid)?;
                let d = LayerDescriptor::Slice(SliceDescriptor {
                    // A first index is within its dimension (clamped); a count of 0 reads
                    // nothing, whatever its first index.
                    begin: ranges
                        .iter()
                        .map(|r| u32::try_from(r.0).unwrap_or(0))
                        .collect(),
                    // A step beyond i32 is clamped only where it takes one index at most.
                    step: ranges
                        .iter()
                        .map(|r| match i32::try_from(r.1) {
                            Ok(s) => Ok(s),
                            Err(_) if r.2 <= 1 => Ok(r.1.signum() as i32),
                            Err(_) => Err(unsupported(format!(
                                "Slice step {} beyond 32 bits taking {} indices",
                                r.1, r.2
                            ))),
                        })
                        .collect::<NResult<_>>()?,
                    size: ranges.iter().map(|r| r.2).collect(),
                });
                let t = *t;
                Ok(vec![Value::Tensor(self.layer(n, None, d, &[t])?)])
            }
            _ => Err(unsupported("Slice of a value that is not available")),
        }
    }

    /// The `axes` of Squeeze / Unsqueeze: an attribute before opset 13, an input from 13.
    fn squeeze_axes(&self, n: &Node<'_>) -> NResult<Option<Vec<i64>>> {
        if self.opset < 13 {
            attr_ints(n, "axes")
        } else {
            Ok(self.const_ints(n, 1, "axes")?.map(|c| c.data.clone()))
        }
    }

    fn unsqueeze(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (_, xv) = self.req(n, 0)?;
        let xs = self.shape(&xv)?;
        let axes = self
            .squeeze_axes(n)?
            .ok_or_else(|| invalid("axes are required"))?;
        let out_rank = xs.len() + axes.len();
        let axes = distinct_axes(&axes, out_rank)?;
        let mut dims = xs.iter();
        let target = (0..out_rank)
            .map(|i| {
                if axes.contains(&i) {
                    1
                } else {
                    dims.next().copied().unwrap_or(1)
                }
            })
            .collect();
        Ok(vec![self.reshaped(n, &xv, target)?])
    }

    fn squeeze(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (_, xv) = self.req(n, 0)?;
        let xs = self.shape(&xv)?;
        let target = match self.squeeze_axes(n)? {
            None => xs.iter().copied().filter(|&d| d != 1).collect(),
            Some(axes) => {
                let axes = distinct_axes(&axes, xs.len())?;
                if let Some(&a) = axes.iter().find(|&&a| xs[a] != 1) {
                    return Err(invalid(format!(
                        "cannot squeeze axis {a} of size {} from {xs:?}",
                        xs[a]
                    )));
                }
                xs.iter()
                    .enumerate()
                    .filter(|(i, _)| !axes.contains(i))
                    .map(|(_, &d)| d)
                    .collect()
            }
        };
        Ok(vec![self.reshaped(n, &xv, target)?])
    }

    fn cast(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (_, xv) = self.req(n, 0)?;
        let to = attr_int(n, "to")?.ok_or_else(|| invalid("attribute to is required"))?;
        let to = i32::try_from(to).unwrap_or(data_type::UNDEFINED);
        let float = matches!(to, data_type::FLOAT | data_type::DOUBLE);
        let integer = matches!(
            to,
            data_type::INT64
                | data_type::INT32
                | data_type::INT16
                | data_type::INT8
                | data_type::UINT8
                | data_type::UINT16
                | data_type::BOOL
        );
        let bool_of = |v: i64| i64::from(v != 0);
        match (&xv, float, integer) {
            (Value::Tensor(_), true, _) if to == data_type::FLOAT => Ok(vec![xv]),
            (Value::F32(_), true, _) => Ok(vec![xv]),
            (Value::I64(c), true, _) => {
                let f = c.try_map(|v| Ok(v as f32)).map_err(invalid)?;
                Ok(vec![self.store_f32(f)?])
            }
            (Value::I64(c), _, true) if to == data_type::BOOL => {
                let b = c.try_map(|v| Ok(bool_of(v))).map_err(invalid)?;
                Ok(vec![self.store_i64(b)?])
            }
            (Value::I64(_), _, true) => Ok(vec![xv]),
            (Value::F32(c), _, true) => {
                let i = c
                    .try_map(|v| {
                        if !v.is_finite() {
                            Err(format!("cannot cast {v} to an integer"))
                        } else if to == data_type::BOOL {
                            Ok(i64::from(v != 0.0))
                        } else {
                            Ok(v.trunc() as i64)
                        }
                    })
                    .map_err(invalid)?;
                Ok(vec![self.store_i64(i)?])
            }
            _ => Err(unsupported(format!(
                "Cast to {} of a non-constant tensor (only float32 activations)",
                data_type::name(to)
            ))),
        }
    }

    fn split(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (_, xv) = self.req(n, 0)?;
        let xs = self.shape(&xv)?;
        let axis = normalize_axis(attr_int(n, "axis")?.unwrap_or(0), xs.len())?;
        let outputs = n.proto.output.len();
        let dim = i64::from(xs[axis]);
        let sizes = if self.opset < 13 {
            attr_ints(n, "split")?
        } else {
            self.const_ints(n, 1, "split")?.map(|c| c.data.clone())
        };
        let sizes = match sizes {
            Some(s) => s,
            None => {
                let parts = if self.opset >= 18 {
                    attr_int(n, "num_outputs")?.unwrap_or(outputs as i64)
                } else {
                    outputs as i64
                };
                if parts < 1 || parts != outputs as i64 {
                    return Err(invalid(format!(
                        "Split into {parts} parts needs as many outputs, it has {outputs}"
                    )));
                }
                let chunk = (dim + parts - 1) / parts;
                (0..parts)
                    .map(|k| (dim - k * chunk).clamp(0, chunk))
                    .collect()
            }
        };
        let total = sizes.iter().try_fold(
            0i64,
            |acc, &s| if s < 0 { None } else { acc.checked_add(s) },
        );
        if total != Some(dim) {
            return Err(invalid(format!(
                "split sizes {sizes:?} do not add up to the dimension {dim}"
            )));
        }
        let mut out = Vec::with_capacity(sizes.len());
        let mut start = 0i64;
        for s in sizes {
            let (b, e) = ([start], [start + s]);
            let ax = [axis as i64];
            out.push(match &xv {
                Value::I64(c) => {
                    let part = c.slice(&b, &e, Some(&ax), None).map_err(invalid)?;
                    self.store_i64(part)?
                }
                Value::F32(c) => {
                    let part = c.slice(&b, &e, Some(&ax), None).map_err(invalid)?;
                    self.store_f32(part)?
                }
                _ => {
                    return Err(unsupported(
                        "Split of a non-constant tensor (only folded on constants; no v1 layer)",
                    ));
                }
            });
            start += s;
        }
        Ok(out)
    }
}
