//! A decoded, checked ONNX model ([`Model`]): its declared inputs and outputs, its constants,
//! and the networks instantiated from it; and single tensor files ([`decode_tensor`]).

use std::{
    collections::{HashMap, HashSet},
    fmt,
    sync::{Arc, Mutex},
};

use backplane_api::{DataType, LayerDescriptor};
use prost::Message;

use super::{
    ImportError, ImportOptions, Importer, Instance, MAX_CONSTANT_BYTES, SUPPORTED_OPSETS,
    UnsupportedNode, Value,
    constants::{const_tensor_value, tensor_value},
    quantized,
    queue::{Pending, subgraphs},
    registry,
};
use crate::{
    graph::network::Network,
    onnx::proto::{GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto, data_type},
};

/// A dimension of a graph input or output as the model declares it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Dim {
    /// A fixed size.
    Fixed(u32),
    /// A symbolic dimension with its name (`"batch"`, `"H"`); every dimension of that name,
    /// in any input, has the same size, except `"?"`, which some exporters (PaddlePaddle)
    /// write for every unknown dimension.
    Named(String),
    /// A dynamic dimension without a name (none, or `-1` as some exporters write it).
    Any,
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(v) => write!(f, "{v}"),
            Dim::Named(n) => f.write_str(n),
            Dim::Any => f.write_str("?"),
        }
    }
}

/// A graph input or output as the model declares it: name, element type and dimensions.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeclaredTensor {
    /// The value's name.
    pub name: String,
    /// ONNX's element type name in lower case (`"float"`, `"int64"`, `"bool"`; onnxruntime
    /// writes `tensor(<it>)`); empty when the model does not say.
    pub element: String,
    /// The host's data type for it (`None` for a type the host does not take).
    pub data_type: Option<DataType>,
    /// The dimensions, outermost first; `None` when the model declares no shape.
    pub dims: Option<Vec<Dim>>,
}

impl DeclaredTensor {
    pub(super) fn of(vi: &ValueInfoProto) -> Self {
        let tt = vi.r#type.as_ref().and_then(|t| t.tensor_type.as_ref());
        let element = tt.map_or(0, |t| t.elem_type);
        let dims = tt.and_then(|t| t.shape.as_ref()).map(|s| {
            s.dim
                .iter()
                .map(|d| match (d.dim_value, d.dim_param.as_deref()) {
                    (Some(v), _) if v >= 0 => u32::try_from(v).map_or(Dim::Any, Dim::Fixed),
                    (_, Some(p)) if !p.is_empty() => Dim::Named(p.to_owned()),
                    _ => Dim::Any,
                })
                .collect()
        });
        Self {
            name: vi.name.clone(),
            element: if tt.is_some() {
                data_type::name(element).to_lowercase()
            } else {
                String::new()
            },
            data_type: data_type::plain(element),
            dims,
        }
    }

    /// The dimensions as text: `[N, 3, H, W]` (`?` for an unnamed one, `[?]` for no shape).
    pub fn dims_text(&self) -> String {
        match &self.dims {
            None => "[?]".to_owned(),
            Some(d) => format!(
                "[{}]",
                d.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// Whether `shape` can be this tensor's: no declared shape, or the same rank with every
    /// fixed dimension equal (symbolic and dynamic ones take any size).
    pub fn admits(&self, shape: &[u32]) -> bool {
        self.dims.as_ref().is_none_or(|dims| {
            dims.len() == shape.len()
                && dims
                    .iter()
                    .zip(shape)
                    .all(|(d, v)| !matches!(d, Dim::Fixed(f) if f != v))
        })
    }

    /// True when every dimension is fixed.
    pub fn is_fixed(&self) -> bool {
        self.dims
            .as_ref()
            .is_some_and(|d| d.iter().all(|d| matches!(d, Dim::Fixed(_))))
    }
}

/// `Constant` descriptors of a model's float initializers, by the address of the decoded
/// value; `None` until a network uses the initializer.
pub(super) type SharedConstants = Arc<Mutex<HashMap<usize, Option<Arc<LayerDescriptor>>>>>;

/// The stored bytes of initializers whose decoded form is wider than they are.
#[derive(Debug, Default)]
pub(super) struct StoredBytes {
    /// The exact values (little-endian f64 bytes) of the double initializers, by name: the
    /// importer folds float constants in f32, and a double initializer used as it is becomes
    /// a Float64 constant of these.
    pub(super) doubles: HashMap<String, Arc<[u8]>>,
    /// The stored bytes of the 8-bit integer initializers held as raw data, with their ONNX
    /// element type, by the address of their decoded values (which the model keeps alive):
    /// a quantized constant of one is these bytes, not its `i64` values narrowed again
    /// (ddddocr's `[1024, 8210]` weights: 20 ms a plan).
    pub(super) bytes8: HashMap<usize, (i32, Arc<[u8]>)>,
}

/// A model's [`StoredBytes`], shared by every import of it.
pub(super) type ExactValues = Arc<StoredBytes>;

/// An ONNX model decoded and checked once, its initializers decoded once, ready to be
/// imported for any input shapes ([`Model::instantiate`]): what a session keeps to make a
/// network per shape. The constants of every network it makes are shared: an initializer
/// becomes one `Constant` layer descriptor that each network holds (`Arc`), never a copy.
#[derive(Debug)]
pub struct Model {
    /// The model without its initializers (decoded into `initializers`).
    proto: ModelProto,
    opset: i64,
    initializers: Vec<(String, Value)>,
    /// The constant bytes still allowed after the initializers.
    budget: usize,
    /// `Constant` layer descriptors of float initializers, by the address of their decoded
    /// values (which this model keeps alive, so an address names one initializer), made
    /// when a network first uses them.
    shared: SharedConstants,
    inputs: Vec<DeclaredTensor>,
    outputs: Vec<DeclaredTensor>,
    /// The ONNX element type of each integer initializer (a quantised constant's type).
    elem_types: Arc<HashMap<String, i32>>,
    /// The stored bytes of double and 8-bit integer initializers ([`StoredBytes`]).
    exact: ExactValues,
    /// The `QuantizeLinear` each value reaches, and the dynamic patterns ([`quantized::QScan`]).
    q_targets: Arc<quantized::QScan>,
    /// The graph's nodes, named (`<op_type>_<index>` for a node without a name).
    nodes: Vec<Pending>,
    /// The graph's output names.
    output_names: Arc<Vec<String>>,
}

impl Model {
    /// Decodes serialised ONNX bytes ([`Model::new`]).
    ///
    /// # Errors
    /// [`ImportError::Malformed`] for bytes that are not a model; as [`Model::new`].
    pub fn decode(bytes: &[u8]) -> Result<Self, ImportError> {
        let model =
            ModelProto::decode(bytes).map_err(|e| ImportError::Malformed(format!("{e}")))?;
        Self::new(model)
    }

    /// Checks a decoded model's operator set and graph, and decodes its initializers.
    ///
    /// # Errors
    /// An operator set outside [`SUPPORTED_OPSETS`], no graph, an invalid or duplicate
    /// initializer, constants over [`MAX_CONSTANT_BYTES`].
    pub fn new(mut proto: ModelProto) -> Result<Self, ImportError> {
        let opset = proto
            .opset_import
            .iter()
            .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
            .map(|o| o.version)
            .ok_or_else(|| {
                ImportError::Malformed("the model imports no ai.onnx operator set".to_owned())
            })?;
        let opset = match opset {
            1..6 => read_as_opset_6(&proto, opset)?,
            _ => opset,
        };
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
        let graph = proto
            .graph
            .as_mut()
            .ok_or_else(|| ImportError::Malformed("the model has no graph".to_owned()))?;
        let mut budget = MAX_CONSTANT_BYTES;
        let mut initializers: Vec<(String, Value)> = Vec::new();
        let mut seen = HashSet::new();
        // Read off the whole graph while it still holds its initializers.
        let q_targets = Arc::new(quantized::QScan::of(graph));
        let mut elem_types = HashMap::new();
        let mut exact = StoredBytes::default();
        for t in std::mem::take(&mut graph.initializer) {
            elem_types.insert(t.name.clone(), t.data_type);
            let invalid = |reason: String| ImportError::InvalidNode {
                node: t.name.clone(),
                op: "Initializer".to_owned(),
                reason,
            };
            if !seen.insert(t.name.clone()) {
                return Err(invalid("the initializer is defined twice".to_owned()));
            }
            let v = tensor_value(&t, &mut budget).map_err(invalid)?;
            if t.data_type == data_type::DOUBLE {
                // Checked by `tensor_value`: raw bytes of 8 per element, or `double_data`.
                let bytes: Arc<[u8]> = if t.raw_data.is_empty() {
                    t.double_data.iter().flat_map(|v| v.to_le_bytes()).collect()
                } else {
                    t.raw_data.as_slice().into()
                };
                crate::onnx::import::constants::charge(&mut budget, bytes.len(), 1)
                    .map_err(invalid)?;
                exact.doubles.insert(t.name.clone(), bytes);
            }
            let narrow = [data_type::INT8, data_type::UINT8].contains(&t.data_type);
            if let (true, false, Value::I64(c)) = (narrow, t.raw_data.is_empty(), &v) {
                let bytes: Arc<[u8]> = t.raw_data.as_slice().into();
                crate::onnx::import::constants::charge(&mut budget, bytes.len(), 1)
                    .map_err(invalid)?;
                let at = Arc::as_ptr(c) as usize;
                exact.bytes8.insert(at, (t.data_type, bytes));
            }
            initializers.push((t.name, v));
        }
        // The element types the model declares for other values: `Constant` nodes' tensors,
        // then `value_info` and the graph's outputs (an initializer's own type wins).
        for node in graph.node.iter().filter(|n| n.op_type == "Constant") {
            let value = node.attribute.iter().find(|a| a.name == "value");
            if let (Some(out), Some(t)) = (node.output.first(), value.and_then(|a| a.t.as_ref())) {
                elem_types.entry(out.clone()).or_insert(t.data_type);
            }
        }
        for vi in graph.value_info.iter().chain(&graph.output) {
            if let Some(tt) = vi.r#type.as_ref().and_then(|t| t.tensor_type.as_ref()) {
                elem_types.entry(vi.name.clone()).or_insert(tt.elem_type);
            }
        }
        let shared: HashMap<usize, Option<Arc<LayerDescriptor>>> = initializers
            .iter()
            .filter_map(|(_, v)| match v {
                Value::F32(c) => Some((Arc::as_ptr(c) as usize, None)),
                _ => None,
            })
            .collect();
        let inputs = graph
            .input
            .iter()
            .filter(|i| !seen.contains(&i.name))
            .map(DeclaredTensor::of)
            .collect();
        let outputs = graph.output.iter().map(DeclaredTensor::of).collect();
        let nodes = std::mem::take(&mut graph.node)
            .into_iter()
            .enumerate()
            .map(|(index, proto)| {
                let name = if proto.name.is_empty() {
                    format!("{}_{index}", proto.op_type)
                } else {
                    proto.name.clone()
                };
                Pending::node(proto, name)
            })
            .collect();
        let output_names = Arc::new(graph.output.iter().map(|o| o.name.clone()).collect());
        Ok(Self {
            nodes,
            output_names,
            elem_types: Arc::new(elem_types),
            exact: Arc::new(exact),
            q_targets,
            proto,
            opset,
            initializers,
            budget,
            shared: Arc::new(Mutex::new(shared)),
            inputs,
            outputs,
        })
    }

    /// The graph inputs that are not initializers, as declared, in the model's order.
    pub fn inputs(&self) -> &[DeclaredTensor] {
        &self.inputs
    }

    /// The graph outputs as declared, in the model's order.
    pub fn outputs(&self) -> &[DeclaredTensor] {
        &self.outputs
    }

    /// The model's metadata.
    pub fn metadata(&self) -> crate::onnx::ModelMetadata {
        crate::onnx::ModelMetadata::of(&self.proto)
    }

    /// The bytes of the decoded initializers (what every network made from the model shares).
    pub fn constant_bytes(&self) -> usize {
        MAX_CONSTANT_BYTES - self.budget
    }

    /// Imports the model for `options` (input shapes, constant inputs): a network with fixed
    /// shapes, whose initializer constants are shared with every other network made here.
    /// A node that needs a value computed at run time is unsupported here (a session runs
    /// such a model in segments: [`Model::instantiate_dynamic`]).
    ///
    /// # Errors
    /// [`ImportError`] for a node that cannot be imported at these shapes.
    pub fn instantiate(&self, options: &ImportOptions) -> Result<Network, ImportError> {
        match self.start(options, false)? {
            Instance::Complete { network, .. } | Instance::Cut { network, .. } => Ok(network),
        }
    }

    /// Imports the model for `options` as [`Model::instantiate`] does, except that a node
    /// needing a value computed at run time ends the first segment ([`Instance::Cut`]).
    ///
    /// # Errors
    /// As [`Model::instantiate`], for the first segment.
    pub fn instantiate_dynamic(&self, options: &ImportOptions) -> Result<Instance, ImportError> {
        self.start(options, true)
    }

    fn start(&self, options: &ImportOptions, dynamic: bool) -> Result<Instance, ImportError> {
        let graph = self
            .proto
            .graph
            .as_ref()
            .ok_or_else(|| ImportError::Malformed("the model has no graph".to_owned()))?;
        let mut im = Importer::empty(
            self.opset,
            self.budget,
            &self.shared,
            &self.elem_types,
            &self.exact,
            &self.q_targets,
            dynamic,
        );
        if let Some(m) = &options.memory {
            im.budget = im
                .budget
                .min(usize::try_from(m.left()).unwrap_or(usize::MAX));
            im.memory = Some(m.clone());
        }

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
        for (name, v) in &self.initializers {
            im.values.insert(name.clone(), v.clone());
        }
        for (name, c) in &options.constant_inputs {
            let v = const_tensor_value(c, &mut im.budget).map_err(|reason| {
                ImportError::InvalidNode {
                    node: name.clone(),
                    op: "ImportOptions".to_owned(),
                    reason,
                }
            })?;
            im.values.insert(name.clone(), v);
        }
        for vi in &graph.input {
            if im.values.contains_key(&vi.name) {
                continue; // an initializer or a promoted constant
            }
            im.add_graph_input(vi, options.input_shapes.get(&vi.name))?;
        }
        im.run(
            self.nodes.iter().cloned().collect(),
            self.output_names.clone(),
        )
    }

    /// The nodes no converter exists for (another domain, or an operator without a v1
    /// mapping), found without importing: what a session reports at load when the shapes
    /// are not known yet.
    pub fn unsupported_nodes(&self) -> Vec<UnsupportedNode> {
        let mut found = Vec::new();
        let mut nodes: Vec<(String, &NodeProto)> = self
            .nodes
            .iter()
            .map(|p| (p.name.clone(), p.proto.as_ref()))
            .collect();
        // Sub-graphs' nodes too (their names prefixed by the node that holds them).
        while let Some((name, n)) = nodes.pop() {
            for g in subgraphs(n) {
                for (k, inner) in g.node.iter().enumerate() {
                    let local = if inner.name.is_empty() {
                        format!("{}_{k}", inner.op_type)
                    } else {
                        inner.name.clone()
                    };
                    nodes.push((format!("{name}/{local}"), inner));
                }
            }
            let missing = if !registry::known_domain(&n.domain) {
                format!("operators of domain {:?} are not supported", n.domain)
            } else if !registry::is_known(&n.domain, &n.op_type) {
                "no v1 mapping for this operator".to_owned()
            } else {
                continue;
            };
            found.push(UnsupportedNode {
                node: name,
                op: n.op_type.clone(),
                missing,
            });
        }
        found.reverse();
        found
    }
}

/// The values of a serialised ONNX `TensorProto`, as the importer reads constants.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorValues {
    /// `float`, `double` (rounded to `f32`), `float16` or `bfloat16` (widened exactly) elements.
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
/// Malformed bytes, an inconsistent size or an element type other than a float (float16 and
/// bfloat16 widened exactly, double rounded to f32), an integer or bool are errors
/// ([`ImportError::Malformed`]).
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
        Value::Tensor(_) | Value::Skipped | Value::Quantized(_) | Value::Dynamic(_) => {
            return Err(ImportError::Malformed("not a tensor value".to_owned()));
        }
    };
    Ok((t.name, values))
}

/// The default-domain operators whose definition changed in opsets 2 to 6 (ONNX's operator
/// changelog: `onnx.defs` schemas with a `since_version` of 2 to 6): every other operator of
/// an opset 1 to 5 model means what it means in opset 6.
const CHANGED_IN_OPSETS_2_TO_6: [&str; 38] = [
    "Abs",
    "Add",
    "BatchNormalization",
    "Cast",
    "Ceil",
    "Clip",
    "Concat",
    "Div",
    "Dropout",
    "Elu",
    "Exp",
    "Floor",
    "GRU",
    "Gemm",
    "GlobalLpPool",
    "HardSigmoid",
    "InstanceNormalization",
    "LeakyRelu",
    "Log",
    "LpPool",
    "Max",
    "Mean",
    "Min",
    "Mul",
    "Neg",
    "PRelu",
    "Pad",
    "Reciprocal",
    "Relu",
    "Reshape",
    "Selu",
    "Sigmoid",
    "Split",
    "Sqrt",
    "Sub",
    "Sum",
    "Tanh",
    "Tile",
];

/// A model of ai.onnx opset 1 to 5 read as opset 6 (the oldest the importer reads): 6, when
/// none of its nodes (sub-graphs' included) is an operator whose definition changed in
/// between, else the error naming every such node.
fn read_as_opset_6(proto: &ModelProto, opset: i64) -> Result<i64, ImportError> {
    let mut changed = Vec::new();
    let mut graphs: Vec<&GraphProto> = proto.graph.iter().collect();
    while let Some(g) = graphs.pop() {
        for n in &g.node {
            graphs.extend(subgraphs(n));
            let default_domain = n.domain.is_empty() || n.domain == "ai.onnx";
            if default_domain && CHANGED_IN_OPSETS_2_TO_6.contains(&n.op_type.as_str()) {
                changed.push(UnsupportedNode {
                    node: n.name.clone(),
                    op: n.op_type.clone(),
                    missing: format!(
                        "{} of ai.onnx opset {opset}: its definition changed by opset 6, the \
                         oldest the importer reads (supported: {} to {}; an older model whose \
                         operators are unchanged since is read as opset 6)",
                        n.op_type,
                        SUPPORTED_OPSETS.start(),
                        SUPPORTED_OPSETS.end()
                    ),
                });
            }
        }
    }
    if changed.is_empty() {
        Ok(6)
    } else {
        Err(ImportError::Unsupported { nodes: changed })
    }
}
