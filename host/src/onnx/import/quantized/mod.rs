//! Quantised ONNX models (Backend API 1.2's quantised tensors), in both of the forms
//! onnxruntime's quantiser writes.
//!
//! **QDQ form.** `QuantizeLinear`/`DequantizeLinear` pairs around float operators. A
//! `DequantizeLinear` does not add a layer: its value is [`Quantized`], a float value the model
//! computes as the dequantisation of quantised data (a quantised tensor, or a quantised
//! constant with its float twin). A node that reads such values runs on the quantised data
//! itself when that is exact (the fold onnxruntime's QDQ transformer makes):
//! - operators that only move or select elements (`Reshape`, `Transpose`, `MaxPool`, `Slice`,
//!   nearest `Resize`, ...) run on the quantised tensor and keep its parameters;
//! - computing operators (`Conv`, `MatMul`, `Gemm`, `Add`, `Mul`, activations, average pools,
//!   `Softmax`, `Concat`) run as one quantised layer when their output goes to exactly one
//!   `QuantizeLinear` (possibly through `Relu`/`Clip`, which are exact in the quantised
//!   domain): that `QuantizeLinear`'s parameters are the layer's output parameters, and the
//!   `QuantizeLinear` itself then adds nothing (equal parameters) or a `Requantize` layer.
//!
//! Anything else reads the float value: a `Dequantize` layer is added for it when a float
//! node first reads it (a float island between quantised parts), and a `QuantizeLinear` of a
//! float tensor is a `Quantize` layer.
//!
//! **QOperator form.** ONNX's `QLinearConv` and `QLinearMatMul` and onnxruntime's
//! `com.microsoft` operators (`QLinearAdd`, `QLinearMul`, `QGemm`, `QLinearGlobalAveragePool`,
//! `QLinearAveragePool`, `QLinearConcat`, `QLinearSigmoid`, `QLinearLeakyRelu`,
//! `QLinearSoftmax`) are each the float operator between dequantised inputs and a quantised
//! output, as their definitions say: they are imported through the same path, as the float
//! operator on [`Quantized`] inputs with the node's output parameters.
//!
//! Its files: the QDQ form in `qdq.rs`, the QOperator form in `qoperator.rs`, onnxruntime's
//! dynamic quantization in `dynamic.rs`; what they share (parameters, quantised values and
//! layers) here.

mod dynamic;
mod qdq;
mod qoperator;

pub(super) use self::dynamic::Dynamic;

use std::{collections::HashMap, sync::Arc};

use backplane_api::{
    ConstTensor, DataType, LayerDescriptor, LayerKind, PerAxisQuantization, Quantization,
    TensorInfo,
};

use super::{
    Importer, NResult, Node, Value,
    attributes::{attr_int, normalize_axis},
    invalid, unsupported,
};
use crate::{
    graph::network::TensorRef,
    onnx::{
        fold::Const,
        proto::{GraphProto, NodeProto, data_type},
    },
};

/// A QOperator node's data input: its index, and those of its scale and zero point with the
/// default axis of per-axis parameters (`None` for a bias).
type QInput = (usize, Option<(usize, usize, i64)>);

/// A float value the model computes as the dequantisation of quantised data.
#[derive(Debug, Clone)]
pub(super) enum Quantized {
    /// A quantised tensor of the network (its info carries the parameters).
    Tensor(TensorRef),
    /// A quantised constant (weights, an int32 bias) and its dequantised values.
    Constant(Arc<ConstTensor>, Arc<Const<f32>>),
}

/// The `QuantizeLinear` that takes a value's output parameters: its scale and zero point
/// inputs, by name.
#[derive(Debug, Clone)]
pub(super) struct QTarget {
    scale: String,
    zero_point: Option<String>,
}

/// What the importer reads off a whole graph before its nodes: for its quantised parts, the
/// `QuantizeLinear` each value reaches ([`q_targets`]) and the `DynamicQuantizeLinear` nodes
/// that only onnxruntime's dynamic pattern reads ([`dynamic_patterns`]); and which values
/// anything reads at all ([`QScan::is_read`]).
#[derive(Debug, Default)]
pub(super) struct QScan {
    targets: HashMap<String, QTarget>,
    /// The first outputs of the `DynamicQuantizeLinear` nodes in the dynamic pattern.
    dynamic: std::collections::HashSet<String>,
    /// Every value a node reads (a sub-graph's nodes too) and every graph output.
    read: std::collections::HashSet<String>,
}

/// Adds to `read` every input of `graph`'s nodes (their sub-graphs' too) and its outputs.
fn values_read(graph: &GraphProto, read: &mut std::collections::HashSet<String>) {
    read.extend(graph.output.iter().map(|o| o.name.clone()));
    for n in &graph.node {
        read.extend(n.input.iter().filter(|i| !i.is_empty()).cloned());
        for a in &n.attribute {
            for g in a.g.iter().map(|g| &**g).chain(&a.graphs) {
                values_read(g, read);
            }
        }
    }
}

impl QScan {
    /// The scan of `graph`.
    pub(super) fn of(graph: &GraphProto) -> Self {
        let mut read = std::collections::HashSet::new();
        values_read(graph, &mut read);
        Self {
            targets: q_targets(graph),
            dynamic: dynamic_patterns(graph),
            read,
        }
    }

    /// Whether a node of the graph (or of a sub-graph) reads value `name`, or it is a graph
    /// output: an output of a node that nothing reads need not be made.
    pub(super) fn is_read(&self, name: &str) -> bool {
        self.read.contains(name)
    }

    /// The `QuantizeLinear` value `name` reaches (or a `<name>\0dq` key's).
    pub(super) fn get(&self, name: &str) -> Option<&QTarget> {
        self.targets.get(name)
    }

    /// Whether the `DynamicQuantizeLinear` with first output `y` is read only by onnxruntime's
    /// dynamic pattern: its data and zero point only by `MatMulInteger`s or one-group 2-D
    /// `ConvInteger`s (as their `A` and `a_zero_point`, with constant weights, cast to float,
    /// a convolution's through an `Add` of its integer bias first), its scale only by `Mul`s, none
    /// of them a graph output. Any other `DynamicQuantizeLinear` is computed in floats
    /// (`expand/quantization.rs`).
    pub(super) fn in_dynamic_pattern(&self, y: &str) -> bool {
        self.dynamic.contains(y)
    }
}

/// [`QScan::in_dynamic_pattern`]'s `DynamicQuantizeLinear` nodes, by first output.
fn dynamic_patterns(graph: &GraphProto) -> std::collections::HashSet<String> {
    let mut consumers: HashMap<&str, Vec<(&NodeProto, usize)>> = HashMap::new();
    for n in &graph.node {
        for (k, i) in n.input.iter().enumerate().filter(|(_, i)| !i.is_empty()) {
            consumers.entry(i.as_str()).or_default().push((n, k));
        }
    }
    let constants: std::collections::HashSet<&str> = graph
        .initializer
        .iter()
        .map(|t| t.name.as_str())
        .chain(
            graph
                .node
                .iter()
                .filter(|n| n.op_type == "Constant")
                .flat_map(|n| n.output.iter().map(String::as_str)),
        )
        .collect();
    let ranks: HashMap<&str, usize> = graph
        .initializer
        .iter()
        .map(|t| (t.name.as_str(), t.dims.len()))
        .collect();
    let outputs: std::collections::HashSet<&str> =
        graph.output.iter().map(|o| o.name.as_str()).collect();
    let read_only_as = |v: &str, ok: &dyn Fn(&NodeProto, usize) -> bool| {
        !outputs.contains(v)
            && consumers
                .get(v)
                .is_some_and(|cs| cs.iter().all(|&(c, k)| onnx_domain(&c.domain) && ok(c, k)))
    };
    let cast_to_float = |c: &NodeProto| {
        c.output.first().is_some_and(|o| {
            read_only_as(o, &|d, _| {
                d.op_type == "Cast"
                    && d.attribute
                        .iter()
                        .any(|a| a.name == "to" && a.i == i64::from(data_type::FLOAT))
            })
        })
    };
    graph
        .node
        .iter()
        .filter(|n| n.op_type == "DynamicQuantizeLinear" && onnx_domain(&n.domain))
        .filter_map(|n| {
            let [y, s, z] = n.output.as_slice() else {
                return None;
            };
            let product = |c: &NodeProto| {
                let weights = c.input.get(1).map(String::as_str);
                let conv = c.op_type == "ConvInteger"
                    && c.attribute.iter().all(|a| a.name != "group" || a.i == 1)
                    && weights.and_then(|w| ranks.get(w)) == Some(&4);
                (c.op_type == "MatMulInteger" || conv)
                    && c.input.get(2) == Some(z)
                    && weights.is_some_and(|w| constants.contains(w))
                    && (cast_to_float(c)
                        || conv
                            && c.output.first().is_some_and(|o| {
                                read_only_as(o, &|d, _| d.op_type == "Add" && cast_to_float(d))
                            }))
            };
            let fits = read_only_as(y, &|c, k| k == 0 && product(c))
                && read_only_as(z, &|c, k| k == 2 && product(c))
                && read_only_as(s, &|c, _| c.op_type == "Mul");
            fits.then(|| y.clone())
        })
        .collect()
}

/// For each value of `graph`, the `QuantizeLinear` it reaches as the only consumer, directly
/// or through `Relu`/`Clip` nodes that are each their input's only consumer.
fn q_targets(graph: &GraphProto) -> HashMap<String, QTarget> {
    let mut targets = quantize_targets(graph);
    let mut reads: HashMap<&str, usize> = HashMap::new();
    for i in graph.node.iter().flat_map(|c| c.input.iter()) {
        *reads.entry(i.as_str()).or_default() += 1;
    }
    // A value whose only consumer is a DequantizeLinear (onnxruntime's `Gather` of a uint8
    // embedding table, then `DequantizeLinear`): its parameters, for the quantized constant
    // the `Gather` reads ([`Importer::convert_float_node`]).
    for n in &graph.node {
        if n.op_type == "DequantizeLinear" && onnx_domain(&n.domain) && n.input.len() >= 2 {
            let only = reads.get(n.input[0].as_str()) == Some(&1);
            if only && !targets.contains_key(&n.input[0]) {
                targets.insert(
                    format!("{}\u{0}dq", n.input[0]),
                    QTarget {
                        scale: n.input[1].clone(),
                        zero_point: n.input.get(2).filter(|z| !z.is_empty()).cloned(),
                    },
                );
            }
        }
    }
    targets
}

/// [`q_targets`]'s `QuantizeLinear` part.
fn quantize_targets(graph: &GraphProto) -> HashMap<String, QTarget> {
    let mut consumers: HashMap<&str, Vec<&NodeProto>> = HashMap::new();
    for n in &graph.node {
        for i in n.input.iter().filter(|i| !i.is_empty()) {
            consumers.entry(i.as_str()).or_default().push(n);
        }
    }
    let outputs: std::collections::HashSet<&str> =
        graph.output.iter().map(|o| o.name.as_str()).collect();
    let only = |v: &str| -> Option<&NodeProto> {
        match consumers.get(v).map(Vec::as_slice) {
            Some([c]) if !outputs.contains(v) && onnx_domain(&c.domain) => Some(*c),
            _ => None,
        }
    };
    let mut targets = HashMap::new();
    for n in &graph.node {
        let Some(start) = n.output.first().filter(|o| !o.is_empty()) else {
            continue;
        };
        let mut cur = start.as_str();
        for _ in 0..4 {
            let Some(c) = only(cur) else { break };
            if c.input.first().map(String::as_str) != Some(cur) {
                break;
            }
            match c.op_type.as_str() {
                "QuantizeLinear" if c.input.len() >= 2 => {
                    targets.insert(
                        start.clone(),
                        QTarget {
                            scale: c.input[1].clone(),
                            zero_point: c.input.get(2).filter(|z| !z.is_empty()).cloned(),
                        },
                    );
                    break;
                }
                "Relu" | "Clip" => match c.output.first() {
                    Some(o) => cur = o.as_str(),
                    None => break,
                },
                _ => break,
            }
        }
    }
    targets
}

/// Whether node `n` only moves or selects the elements of its first input (exact on
/// quantised data, which keeps its parameters): `Reshape`, `Transpose`, `MaxPool`, nearest
/// `Resize`, ...
fn moves_elements(n: &Node<'_>) -> bool {
    match n.op() {
        "Reshape" | "Flatten" | "Transpose" | "Squeeze" | "Unsqueeze" | "Identity" | "Dropout"
        | "Slice" | "MaxPool" | "GlobalMaxPool" => true,
        "Resize" => {
            let mode = super::attributes::attr_string(n, "mode").ok().flatten();
            mode.as_deref().unwrap_or("nearest") == "nearest"
        }
        _ => false,
    }
}

/// `ai.onnx`, by either spelling.
fn onnx_domain(domain: &str) -> bool {
    matches!(domain, "" | "ai.onnx")
}

/// The quantised type an ONNX element type stores (`zero_points_all_zero` makes int8
/// symmetric).
fn quantized_type(elem: i32, zero_points_all_zero: bool) -> Option<DataType> {
    match elem {
        data_type::UINT8 => Some(DataType::QAsymmU8),
        data_type::INT8 if zero_points_all_zero => Some(DataType::QSymmS8),
        data_type::INT8 => Some(DataType::QAsymmS8),
        data_type::INT32 => Some(DataType::Signed32),
        _ => None,
    }
}

/// The range of a quantised type's elements.
fn range(dt: DataType) -> (i64, i64) {
    match dt {
        DataType::QAsymmU8 => (0, 255),
        DataType::QAsymmS8 | DataType::QSymmS8 => (-128, 127),
        _ => (i64::from(i32::MIN), i64::from(i32::MAX)),
    }
}

/// Scale and zero point of one `QuantizeLinear`/`DequantizeLinear` (or a `QLinear*`
/// operator's pair): per tensor, or per index of `axis`.
#[derive(Debug, Clone)]
struct Params {
    scales: Vec<f32>,
    zero_points: Vec<i64>,
    /// ONNX element type of the zero point (`UINT8` when absent, as ONNX defaults).
    elem: Option<i32>,
    axis: Option<usize>,
}

impl Params {
    /// The scale and zero point at index `i` of the axis (the only ones per tensor).
    fn at(&self, i: usize) -> (f32, i64) {
        let pick = |n: usize| if n == 1 { 0 } else { i };
        (
            self.scales[pick(self.scales.len())],
            self.zero_points
                .get(pick(self.zero_points.len()))
                .copied()
                .unwrap_or(0),
        )
    }

    /// As the API's [`Quantization`], when it can say it: per tensor, or per axis with one
    /// zero point.
    fn quantization(&self) -> Option<Quantization> {
        let zp0 = self.zero_points.first().copied().unwrap_or(0);
        if self.zero_points.iter().any(|&z| z != zp0) {
            return None;
        }
        let offset = i32::try_from(zp0).ok()?;
        Some(match self.axis {
            None => Quantization::per_tensor(self.scales[0], offset),
            Some(axis) => Quantization {
                scale: self.scales[0],
                offset,
                per_axis: Some(PerAxisQuantization {
                    axis: u32::try_from(axis).ok()?,
                    scales: self.scales.clone().into(),
                })
                .into(),
            },
        })
    }
}

/// `true` when a tensor is quantized per tensor.
fn per_tensor(info: &TensorInfo) -> bool {
    info.quantization
        .as_ref()
        .into_option()
        .is_some_and(|q| q.per_axis.is_none())
}

/// `true` when a tensor's own parameters are `p` (per tensor).
fn same_params(info: &TensorInfo, q: &Quantization) -> bool {
    info.quantization.as_ref().into_option() == Some(q)
}

impl Importer {
    /// Reads the scale (input `s`) and zero point (input `z`) of node `n` for a tensor of
    /// `shape`: per tensor for scalars, per index of the `axis` attribute (default 1) for
    /// 1-D ones.
    fn params(
        &self,
        n: &Node<'_>,
        (s, z, default_axis): (usize, usize, i64),
        shape: &[u32],
    ) -> NResult<Params> {
        let (sn, sv) = self.req(n, s)?;
        let scales = match &sv {
            Value::F32(c) => c.data.clone(),
            _ => return Err(unsupported(format!("scale {sn} must be a float constant"))),
        };
        let (zero_points, elem) = match self.arg(n, z)? {
            None => (vec![0], None),
            Some((zn, Value::I64(c))) => match self.elem_type(&zn) {
                Some(e) => (c.data.clone(), Some(e)),
                None => {
                    return Err(unsupported(format!(
                        "zero point {zn} has no known element type (an initializer or a \
                         Constant node gives it)"
                    )));
                }
            },
            Some((zn, _)) => {
                return Err(unsupported(format!(
                    "zero point {zn} must be an integer constant"
                )));
            }
        };
        if scales.is_empty() || zero_points.is_empty() {
            return Err(invalid("empty scale or zero point"));
        }
        if attr_int(n, "block_size")?.unwrap_or(0) != 0 {
            return Err(unsupported("blocked quantization (block_size)"));
        }
        let per_axis = scales.len() > 1 || zero_points.len() > 1;
        let axis = if per_axis {
            let axis = normalize_axis(attr_int(n, "axis")?.unwrap_or(default_axis), shape.len())?;
            let dim = shape[axis] as usize;
            if [scales.len(), zero_points.len()]
                .iter()
                .any(|&l| l != 1 && l != dim)
            {
                return Err(invalid(format!(
                    "{} scales and {} zero points along axis {axis} of {shape:?}",
                    scales.len(),
                    zero_points.len()
                )));
            }
            Some(axis)
        } else {
            None
        };
        let mut scales = scales;
        if let Some(axis) = axis
            && scales.len() == 1
        {
            scales = vec![scales[0]; shape[axis] as usize];
        }
        Ok(Params {
            scales,
            zero_points,
            elem,
            axis,
        })
    }

    /// A layer with quantised output parameters `q`, named after the node.
    fn quantized_layer(
        &mut self,
        n: &Node<'_>,
        d: LayerDescriptor,
        inputs: &[TensorRef],
        q: Quantization,
    ) -> NResult<TensorRef> {
        let name = self.unique(&n.name);
        Ok(self.builder.add_quantized_layer(&name, d, inputs, q)?)
    }

    /// The info of a tensor of the network being built.
    fn info(&self, t: TensorRef) -> NResult<TensorInfo> {
        self.builder
            .tensor_info(t)
            .cloned()
            .ok_or_else(|| invalid("a tensor of another network"))
    }

    /// A quantised network tensor for a [`Quantized`] value: the tensor, or a `Constant` layer
    /// of the quantised constant (made once per value).
    fn quantized_tensor(&mut self, name: &str, q: &Quantized) -> NResult<TensorRef> {
        match q {
            Quantized::Tensor(t) => Ok(*t),
            Quantized::Constant(c, _) => {
                let key = format!("{name}\u{0}quantized");
                if let Some(t) = self.materialised.get(&key) {
                    return Ok(*t);
                }
                let layer = self.unique(name);
                let t = self.builder.add_constant(&layer, (**c).clone())?;
                self.materialised.insert(key, t);
                Ok(t)
            }
        }
    }

    /// The float twin of a [`Quantized`] value: its dequantised constant, or a `Dequantize`
    /// layer of the tensor (made once per value).
    pub(super) fn dequantized(&mut self, name: &str, q: &Quantized) -> NResult<Value> {
        match q {
            Quantized::Constant(_, f) => Ok(Value::F32(f.clone())),
            Quantized::Tensor(t) => {
                if let Some(d) = self.materialised.get(name) {
                    return Ok(Value::Tensor(*d));
                }
                let layer = self.unique(&format!("{name}/dequantize"));
                let d = self
                    .builder
                    .add_layer(&layer, LayerDescriptor::Dequantize, &[*t])?;
                self.materialised.insert(name.to_owned(), d);
                Ok(Value::Tensor(d))
            }
        }
    }

    fn quantized_kind(&self, q: &Quantized) -> Option<DataType> {
        match q {
            Quantized::Tensor(t) => self.builder.tensor_info(*t).map(|i| i.data_type),
            Quantized::Constant(c, _) => Some(c.info.data_type),
        }
    }

    /// A QOperator input as a [`Quantized`] value: a quantised tensor must already carry
    /// these parameters; a constant is read as `DequantizeLinear` reads it.
    fn quantized_input(
        &mut self,
        name: &str,
        value: Value,
        shape: &[u32],
        p: &Params,
    ) -> NResult<Value> {
        match value {
            Value::Tensor(t) => {
                let info = self.info(t)?;
                match p.quantization() {
                    Some(q) if info.data_type.is_quantized() && same_params(&info, &q) => {
                        Ok(Value::Quantized(Quantized::Tensor(t)))
                    }
                    _ => Err(unsupported(format!(
                        "input {name} ({info}) is not quantized with the node's parameters for it"
                    ))),
                }
            }
            // Read exactly as a DequantizeLinear of the constant would be.
            Value::I64(c) => self.dequantize_constant(name, &c, shape, p),
            other => Err(unsupported(format!(
                "input {name} must be quantized data, got {}",
                match other {
                    Value::F32(_) | Value::Quantized(_) => "a float value",
                    _ => "an unavailable value",
                }
            ))),
        }
    }

    /// Whether a layer of this kind takes the node's output parameters ([`Importer::layer`]):
    /// every computing kind, not those that move elements.
    pub(super) fn takes_output_params(kind: LayerKind) -> bool {
        !matches!(
            kind,
            LayerKind::Reshape
                | LayerKind::Flatten
                | LayerKind::Transpose
                | LayerKind::Slice
                | LayerKind::Gather
                | LayerKind::BroadcastTo
                | LayerKind::Pad
                | LayerKind::Constant
        )
    }
}
