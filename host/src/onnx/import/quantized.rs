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

use std::{collections::HashMap, sync::Arc};

use backplane_api::{
    ConstTensor, DataType, LayerDescriptor, LayerKind, PerAxisQuantization, Quantization,
    TensorInfo,
};

use super::{
    Importer, NResult, Node, Value,
    attributes::{attr_int, normalize_axis},
    constants::charge,
    invalid, registry, unsupported,
};
use crate::{
    graph::network::TensorRef,
    onnx::{
        fold::Const,
        proto::{AttributeProto, GraphProto, NodeProto, data_type},
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

/// For each value of `graph`, the `QuantizeLinear` it reaches as the only consumer, directly
/// or through `Relu`/`Clip` nodes that are each their input's only consumer.
pub(super) fn q_targets(graph: &GraphProto) -> HashMap<String, QTarget> {
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
    /// The ONNX element type of a constant integer value: an initializer's or a `Constant`
    /// node's (`None` when neither gives it, such as a value folded from others).
    pub(super) fn elem_type(&self, name: &str) -> Option<i32> {
        self.elem_types
            .get(name)
            .or_else(|| self.local_types.get(name))
            .copied()
    }

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

    /// `DequantizeLinear`: a [`Quantized`] value (no layer yet), or a folded float constant
    /// when the constant's quantisation cannot be said in the API's terms.
    pub(super) fn dequantize_linear(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let shape = self.shape(&xv)?;
        let p = self.params(n, (1, 2, 1), &shape)?;
        match xv {
            Value::Tensor(t) => {
                let info = self.info(t)?;
                let q = p.quantization();
                match q {
                    Some(q) if info.data_type.is_quantized() && same_params(&info, &q) => {
                        Ok(vec![Value::Quantized(Quantized::Tensor(t))])
                    }
                    _ if !info.data_type.is_quantized() => Err(invalid(format!(
                        "input {xn} is {}, not a quantized tensor",
                        info.data_type
                    ))),
                    _ => Err(unsupported(format!(
                        "DequantizeLinear of {xn} with parameters other than those it was \
                         quantized with ({info})"
                    ))),
                }
            }
            Value::I64(c) => Ok(vec![self.dequantize_constant(&xn, &c, &shape, &p)?]),
            Value::Quantized(_) | Value::F32(_) => Err(invalid(format!(
                "input {xn} is a float value, not quantized data"
            ))),
            Value::Dynamic(_) => Err(unsupported(format!(
                "DequantizeLinear of {xn}, a part of the dynamic quantization pattern"
            ))),
            Value::Skipped | Value::Unusable(_) => {
                Err(unsupported(format!("input {xn} is not available")))
            }
        }
    }

    /// An integer constant read by a `DequantizeLinear` with parameters `p`: a [`Quantized`]
    /// constant (its quantised form and float twin) when the API's terms can say its
    /// quantisation (a known element type, one zero point, values in range), else the folded
    /// float constant alone.
    fn dequantize_constant(
        &mut self,
        name: &str,
        c: &Const<i64>,
        shape: &[u32],
        p: &Params,
    ) -> NResult<Value> {
        let axis_len = p.axis.map(|a| shape[a] as usize);
        let inner: usize = p
            .axis
            .map_or(1, |a| shape[a + 1..].iter().map(|&d| d as usize).product());
        let float: Vec<f32> = c
            .data
            .iter()
            .enumerate()
            .map(|(i, &q)| {
                let k = axis_len.map_or(0, |len| (i / inner) % len);
                let (s, z) = p.at(k);
                q.checked_sub(z)
                    .map(|d| d as f32 * s)
                    .ok_or_else(|| invalid(format!("{name}: {q} - {z} overflows")))
            })
            .collect::<NResult<_>>()?;
        charge(&mut self.budget, float.len(), 4).map_err(invalid)?;
        let float = Arc::new(Const::new(shape.to_vec(), float).map_err(invalid)?);
        let elem = self.elem_type(name).or(p.elem);
        // Symmetric int8 is a weight's type (per axis); a per-tensor int8 constant reads as the
        // activations it meets do (QAsymmS8).
        let all_zero = p.axis.is_some() && p.zero_points.iter().all(|&z| z == 0);
        let twin = elem
            .and_then(|e| quantized_type(e, all_zero))
            .zip(p.quantization())
            .and_then(|(dt, q)| {
                let (lo, hi) = range(dt);
                let fits = c.data.iter().all(|v| (lo..=hi).contains(v));
                fits.then(|| {
                    let data: Vec<u8> = match dt {
                        DataType::Signed32 => c
                            .data
                            .iter()
                            .flat_map(|&v| (v as i32).to_le_bytes())
                            .collect(),
                        _ => c.data.iter().map(|&v| v as u8).collect(),
                    };
                    ConstTensor {
                        info: TensorInfo::new(shape, dt).constant().with_quantization(q),
                        data: data.into(),
                    }
                })
            })
            .filter(|t| t.info.check_quantization().is_ok());
        Ok(match twin {
            Some(t) => Value::Quantized(Quantized::Constant(Arc::new(t), float)),
            None => Value::F32(float),
        })
    }

    /// `QuantizeLinear`: nothing for a value already quantised with these parameters, a
    /// `Requantize` layer for one quantised otherwise, a `Quantize` layer for a float tensor.
    pub(super) fn quantize_linear(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let shape = self.shape(&xv)?;
        let p = self.params(n, (1, 2, 1), &shape)?;
        let all_zero = p.zero_points.iter().all(|&z| z == 0);
        // Opset 21's `output_dtype` names the type when no zero point does.
        let given = attr_int(n, "output_dtype")?
            .filter(|&t| t != 0)
            .map(|t| i32::try_from(t).unwrap_or(data_type::UNDEFINED));
        let dt = match p.elem.or(given) {
            None => DataType::QAsymmU8,
            Some(e) => match quantized_type(e, all_zero) {
                Some(DataType::QSymmS8) if p.axis.is_none() => DataType::QAsymmS8,
                Some(dt) if dt != DataType::Signed32 => dt,
                _ => {
                    return Err(unsupported(format!(
                        "QuantizeLinear to {}",
                        data_type::name(e)
                    )));
                }
            },
        };
        let q = p
            .quantization()
            .ok_or_else(|| unsupported("per-axis quantization with differing zero points"))?;
        let out = match xv {
            Value::Quantized(Quantized::Tensor(t)) => {
                let info = self.info(t)?;
                if info.data_type == dt && same_params(&info, &q) {
                    t
                } else {
                    self.quantized_layer(n, LayerDescriptor::Requantize(dt), &[t], q)?
                }
            }
            Value::Quantized(Quantized::Constant(_, f)) | Value::F32(f) => {
                let x = self.tensor(&xn, &Value::F32(f))?;
                self.quantized_layer(n, LayerDescriptor::Quantize(dt), &[x], q)?
            }
            Value::Tensor(t) => {
                let info = self.info(t)?;
                if info.data_type != DataType::Float32 {
                    return Err(invalid(format!(
                        "input {xn} is {}, not float",
                        info.data_type
                    )));
                }
                self.quantized_layer(n, LayerDescriptor::Quantize(dt), &[t], q)?
            }
            Value::I64(_) => return Err(invalid(format!("input {xn} is an integer tensor"))),
            Value::Dynamic(_) => {
                return Err(unsupported(format!(
                    "QuantizeLinear of {xn}, a part of the dynamic quantization pattern"
                )));
            }
            Value::Skipped | Value::Unusable(_) => {
                return Err(unsupported(format!("input {xn} is not available")));
            }
        };
        Ok(vec![Value::Tensor(out)])
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

    /// The output parameters node `n`'s output takes from the `QuantizeLinear` it reaches,
    /// when there is one with constant per-tensor parameters.
    fn q_target(&self, n: &Node<'_>) -> Option<(DataType, Quantization)> {
        if let Some(given) = &self.q_target_override {
            return Some(given.clone());
        }
        let out = n.proto.output.first()?;
        let p = self.target_params(self.q_targets.get(out)?)?;
        let dt = match quantized_type(p.elem?, false)? {
            DataType::Signed32 => return None,
            dt => dt,
        };
        let q = Quantization::per_tensor(p.scales[0], i32::try_from(p.zero_points[0]).ok()?);
        TensorInfo::new(&[], dt)
            .with_quantization(q.clone())
            .check_quantization()
            .ok()?;
        Some((dt, q))
    }

    /// The per-tensor parameters a [`QTarget`] names: a constant scalar scale and zero point
    /// of known element type (uint8 when there is no zero point, as ONNX defaults); `None`
    /// otherwise.
    fn target_params(&self, t: &QTarget) -> Option<Params> {
        let scale = match self.values.get(&t.scale)? {
            Value::F32(c) if c.data.len() == 1 => c.data[0],
            _ => return None,
        };
        let (zero_point, elem) = match &t.zero_point {
            None => (0, data_type::UINT8),
            Some(z) => match self.values.get(z)? {
                Value::I64(c) if c.data.len() == 1 => (c.data[0], self.elem_type(z)?),
                _ => return None,
            },
        };
        Some(Params {
            scales: vec![scale],
            zero_points: vec![zero_point],
            elem: Some(elem),
            axis: None,
        })
    }

    /// Runs a float operator's converter on node `n`: on quantised data when its inputs are
    /// [`Quantized`] and that is exact (see the module's documentation), else on their float
    /// twins.
    pub(super) fn convert_float_node(
        &mut self,
        n: &Node<'_>,
        convert: registry::Converter,
    ) -> NResult<Vec<Value>> {
        let inputs: Vec<(String, Value)> = n
            .proto
            .input
            .iter()
            .filter(|i| !i.is_empty())
            .filter_map(|i| self.values.get(i).map(|v| (i.clone(), v.clone())))
            .collect();
        if inputs.iter().any(|(_, v)| matches!(v, Value::Dynamic(_))) {
            return self.dynamic_node(n);
        }
        if n.op() == "Gather"
            && let Some((name, Value::I64(c))) = inputs.first()
            && let Some(out) = n.proto.output.first()
            && let Some(t) = self.q_targets.get(&format!("{out}\u{0}dq")).cloned()
        {
            return self.gather_quantized_constant(n, convert, name, c, &t);
        }
        if !inputs.iter().any(|(_, v)| matches!(v, Value::Quantized(_))) {
            // Quantised tensors read directly (the QOperator form's `MaxPool`, `Reshape`):
            // only by operators that move elements, which keep their parameters.
            for (k, (name, v)) in inputs.iter().enumerate() {
                if let Value::Tensor(t) = v
                    && self.info(*t)?.data_type.is_quantized()
                    && !(k == 0 && moves_elements(n))
                {
                    return Err(unsupported(format!(
                        "input {name} is a quantized tensor read without DequantizeLinear"
                    )));
                }
            }
            return convert(self, n);
        }
        let plan = self.quantized_plan(n, &inputs);
        // Each input read as the plan says, once (a node may read one value twice), and put
        // back whatever happens.
        let mut saved: Vec<(String, Option<Value>)> = Vec::new();
        let mut swapped = Ok(());
        for (name, v) in &inputs {
            let Value::Quantized(q) = v else { continue };
            if saved.iter().any(|(s, _)| s == name) {
                continue;
            }
            let read = match plan {
                Some(_) => self.quantized_tensor(name, q).map(Value::Tensor),
                None => self.dequantized(name, q),
            };
            match read {
                Ok(v) => saved.push((name.clone(), self.values.insert(name.clone(), v))),
                Err(e) => {
                    swapped = Err(e);
                    break;
                }
            }
        }
        let out_q = plan.clone().flatten();
        let requantizing = out_q.is_some();
        let result = swapped.and_then(|()| {
            self.q_out = out_q;
            convert(self, n)
        });
        let left = self.q_out.take();
        for (name, v) in saved.into_iter().rev() {
            if let Some(v) = v {
                self.values.insert(name, v);
            }
        }
        let outputs = result?;
        if requantizing && left.is_some() {
            return Err(unsupported(
                "the quantized form of this node made no layer that takes its output parameters",
            ));
        }
        if plan.is_none() {
            return Ok(outputs);
        }
        outputs
            .into_iter()
            .map(|v| match v {
                Value::Tensor(t) if self.info(t)?.data_type.is_quantized() => {
                    Ok(Value::Quantized(Quantized::Tensor(t)))
                }
                other => Ok(other),
            })
            .collect()
    }

    /// A `Gather` of an integer constant whose output only a `DequantizeLinear` reads
    /// (onnxruntime's quantized embedding table): the gather runs on the constant quantized
    /// with that `DequantizeLinear`'s parameters, and gives a quantized tensor.
    fn gather_quantized_constant(
        &mut self,
        n: &Node<'_>,
        convert: registry::Converter,
        name: &str,
        c: &Arc<Const<i64>>,
        target: &QTarget,
    ) -> NResult<Vec<Value>> {
        let Some(p) = self.target_params(target) else {
            return convert(self, n);
        };
        let Value::Quantized(q) = self.dequantize_constant(name, c, &c.shape.clone(), &p)? else {
            return convert(self, n);
        };
        let t = self.quantized_tensor(name, &q)?;
        let saved = self.values.insert(name.to_owned(), Value::Tensor(t));
        let result = convert(self, n);
        if let Some(v) = saved {
            self.values.insert(name.to_owned(), v);
        }
        result
    }

    /// Whether node `n` runs on the quantised data of its [`Quantized`] inputs: `None` when
    /// it reads their float twins; `Some(None)` for an operator that moves elements (its
    /// output keeps its input's parameters); `Some(Some(q))` for a computing operator whose
    /// one layer takes output parameters `q`.
    fn quantized_plan(
        &self,
        n: &Node<'_>,
        inputs: &[(String, Value)],
    ) -> Option<Option<Quantization>> {
        let data_inputs = match n.op() {
            _ if moves_elements(n) => 1,
            "Resize" => return self.compute_plan(n, inputs, 1),
            "Conv" | "Gemm" => return self.compute_plan(n, inputs, 3),
            "MatMul" | "Add" | "Mul" => return self.compute_plan(n, inputs, 2),
            "Concat" => return self.compute_plan(n, inputs, inputs.len()),
            "Relu" | "Clip" | "LeakyRelu" | "Sigmoid" | "HardSwish" | "AveragePool"
            | "GlobalAveragePool" | "Softmax" => return self.compute_plan(n, inputs, 1),
            _ => return None,
        };
        let first_is_tensor = matches!(
            inputs.first(),
            Some((_, Value::Quantized(Quantized::Tensor(t))))
                if self.builder.tensor_info(*t).is_some_and(per_tensor)
        );
        let others_plain = inputs[data_inputs.min(inputs.len())..]
            .iter()
            .all(|(_, v)| !matches!(v, Value::Quantized(_)));
        (first_is_tensor && others_plain).then_some(None)
    }

    /// [`Importer::quantized_plan`] for a computing operator whose first `data` inputs must
    /// all be quantised (a bias, `Conv`'s and `Gemm`'s third input, Signed32 with the scale
    /// of input times weights).
    fn compute_plan(
        &self,
        n: &Node<'_>,
        inputs: &[(String, Value)],
        data: usize,
    ) -> Option<Option<Quantization>> {
        let (dt, q) = self.q_target(n)?;
        let quantized = |i: usize| match inputs.get(i).map(|(_, v)| v) {
            Some(Value::Quantized(q)) => Some(q),
            _ => None,
        };
        let info = |q: &Quantized| match q {
            Quantized::Tensor(t) => self.builder.tensor_info(*t).cloned(),
            Quantized::Constant(c, _) => Some(c.info.clone()),
        };
        let first = info(quantized(0)?)?;
        // Activations per tensor, of the output's type.
        if first.data_type != dt || first.scale_at(1).is_some_and(|_| !per_tensor(&first)) {
            return None;
        }
        let with_bias = matches!(n.op(), "Conv" | "Gemm");
        let weights = matches!(n.op(), "Conv" | "Gemm" | "MatMul");
        for i in 1..data.min(inputs.len()) {
            let t = info(quantized(i)?)?;
            let is_bias = with_bias && i == 2;
            if is_bias != (t.data_type == DataType::Signed32) {
                return None;
            }
            // Weights may be of another 8-bit type; every other operand is an activation
            // like the first (Add, Mul, Concat).
            let activation = !(is_bias || weights && i == 1);
            if activation && (t.data_type != dt || !per_tensor(&t)) {
                return None;
            }
            if is_bias {
                // One value per output channel.
                if t.shape.len() != 1 {
                    return None;
                }
                // The bias must be in the accumulator's scale: input scale times weights'.
                let w = info(quantized(1)?)?;
                let channels = t.num_elements()?;
                for c in 0..channels {
                    let want = first.scale_at(0)? * w.scale_at(c)?;
                    let got = t.scale_at(c)?;
                    if (got - want).abs() > want * 1e-5 {
                        return None;
                    }
                }
            }
        }
        if inputs[data.min(inputs.len())..]
            .iter()
            .any(|(_, v)| matches!(v, Value::Quantized(_)))
        {
            return None;
        }
        Some(Some(q))
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

    /// A QOperator node: the float operator `op` on inputs dequantised with their own
    /// parameters, its output quantised with the node's. `data` lists, per data input of the
    /// float operator, the node's input index and those of its scale and zero point with the
    /// axis of per-axis parameters (a bias has none: int32 in the scale of input times
    /// weights); `out` the indices of the output's scale and zero point (`None`: the output
    /// is float).
    pub(super) fn qlinear(
        &mut self,
        n: &Node<'_>,
        op: &str,
        data: &[QInput],
        out: Option<(usize, usize)>,
        attributes: Vec<AttributeProto>,
    ) -> NResult<Vec<Value>> {
        // The float operator's inputs under keys no ONNX value has (a NUL and a serial), all
        // made before any is stored, and all removed after.
        self.serial += 1;
        let serial = self.serial;
        let key = |what: &str| format!("{}/{what}\u{0}{serial}", n.name);
        let mut names = Vec::new();
        let mut prepared = Vec::new();
        let mut scales: Vec<Vec<f32>> = Vec::new();
        for (k, &(i, params)) in data.iter().enumerate() {
            let Some((xn, xv)) = self.arg(n, i)? else {
                names.push(String::new());
                continue;
            };
            let shape = self.shape(&xv)?;
            let name = key(&format!("input{k}"));
            let value = match params {
                Some(params) => {
                    let p = self.params(n, params, &shape)?;
                    scales.push(p.scales.clone());
                    self.quantized_input(&xn, xv, &shape, &p)?
                }
                None => {
                    // A bias: int32 with scale input scale × weight scale, zero point 0, one
                    // per output channel.
                    let (Some(x), Some(w)) = (scales.first(), scales.get(1)) else {
                        return Err(invalid("a bias without the input's and weights' scales"));
                    };
                    if shape.len() != 1 {
                        return Err(unsupported(format!(
                            "a bias of shape {shape:?} (one value per output channel only)"
                        )));
                    }
                    let channels = shape.iter().map(|&d| d as usize).product::<usize>();
                    if w.len() != 1 && w.len() != channels {
                        return Err(invalid(format!(
                            "a bias of {channels} values for {} weight scales",
                            w.len()
                        )));
                    }
                    let bias_scales: Vec<f32> = (0..channels)
                        .map(|c| x[0] * w[if w.len() == 1 { 0 } else { c }])
                        .collect();
                    let p = Params {
                        zero_points: vec![0],
                        elem: Some(data_type::INT32),
                        axis: (bias_scales.len() > 1).then_some(0),
                        scales: if bias_scales.len() > 1 {
                            bias_scales
                        } else {
                            vec![bias_scales.first().copied().unwrap_or(1.0)]
                        },
                    };
                    self.quantized_input(&xn, xv, &shape, &p)?
                }
            };
            prepared.push((name.clone(), value));
            names.push(name);
        }
        for (name, value) in prepared {
            self.values.insert(name, value);
        }
        let out_name = key("output");
        let proto = NodeProto {
            input: names.clone(),
            output: vec![out_name.clone()],
            name: n.name.clone(),
            op_type: op.to_owned(),
            domain: String::new(),
            attribute: attributes,
        };
        let inner = Node {
            proto: &proto,
            name: n.name.clone(),
        };
        let convert = registry::converter("", op).ok_or_else(|| unsupported(op.to_owned()))?;
        let result = match out {
            Some((s, z)) => self.qlinear_output(n, &inner, convert, &names, (s, z)),
            None => {
                let mut plan_free = Vec::new();
                for name in names.iter().filter(|s| !s.is_empty()) {
                    if let Some(Value::Quantized(q)) = self.values.get(name).cloned() {
                        let f = self.dequantized(name, &q)?;
                        plan_free.push((name.clone(), f));
                    }
                }
                for (name, f) in plan_free {
                    self.values.insert(name, f);
                }
                convert(self, &inner)
            }
        };
        for name in names.iter().filter(|s| !s.is_empty()) {
            self.values.remove(name);
        }
        self.values.remove(&out_name);
        result
    }

    /// [`Importer::qlinear`] with output parameters (inputs `s`, `z` of `n`): the float
    /// operator `inner` taking them (one quantized layer), else, as the operator's definition
    /// says, its float result quantized with them.
    fn qlinear_output(
        &mut self,
        n: &Node<'_>,
        inner: &Node<'_>,
        convert: registry::Converter,
        names: &[String],
        (s, z): (usize, usize),
    ) -> NResult<Vec<Value>> {
        let p = self.params(n, (s, z, 0), &[])?;
        if p.scales.len() > 1 || p.zero_points.len() > 1 {
            return Err(unsupported("per-axis output parameters"));
        }
        let q = p
            .quantization()
            .ok_or_else(|| invalid("output parameters"))?;
        // The output's type is its zero point's (the input's when it has none).
        let first = match self.values.get(&names[0]) {
            Some(Value::Quantized(q)) => self.quantized_kind(q),
            _ => None,
        };
        let dt = match p.elem {
            Some(e) => quantized_type(e, false)
                .filter(|t| *t != DataType::Signed32)
                .ok_or_else(|| unsupported(format!("a {} output", data_type::name(e))))?,
            None => first.unwrap_or(DataType::QAsymmU8),
        };
        self.q_target_override = Some((dt, q.clone()));
        let result = self.convert_float_node(inner, convert);
        self.q_target_override = None;
        let mut outputs = result?;
        let Some(first_out) = outputs.first().cloned() else {
            return Err(invalid("the operator gave no output"));
        };
        let t = match first_out {
            Value::Quantized(Quantized::Tensor(t)) => {
                let info = self.info(t)?;
                if info.data_type == dt && same_params(&info, &q) {
                    t
                } else {
                    self.quantized_layer(n, LayerDescriptor::Requantize(dt), &[t], q)?
                }
            }
            Value::Tensor(t) if self.info(t)?.data_type == DataType::Float32 => {
                self.quantized_layer(n, LayerDescriptor::Quantize(dt), &[t], q)?
            }
            other => {
                let f = self.tensor(&format!("{}\u{0}float", n.name), &other)?;
                self.quantized_layer(n, LayerDescriptor::Quantize(dt), &[f], q)?
            }
        };
        outputs[0] = Value::Tensor(t);
        Ok(outputs)
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
}

/// The QOperator converters ([`registry`]): each names the float operator and where the
/// node keeps its inputs' and output's parameters.
impl Importer {
    /// ONNX `QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B?)`: weights per
    /// output channel (axis 0).
    pub(super) fn qlinear_conv(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let data = [(0, Some((1, 2, 1))), (3, Some((4, 5, 0))), (8, None)];
        self.qlinear(n, "Conv", &data, Some((6, 7)), n.proto.attribute.clone())
    }

    /// ONNX `QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)`: `b` per
    /// column (its last axis).
    pub(super) fn qlinear_matmul(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        // a's parameters may be per row (axis -2), b's per column (its last axis).
        let data = [(0, Some((1, 2, -2))), (3, Some((4, 5, -1)))];
        self.qlinear(n, "MatMul", &data, Some((6, 7)), Vec::new())
    }

    /// `com.microsoft` `QLinearAdd`/`QLinearMul(A, A_scale, A_zp, B, B_scale, B_zp, C_scale,
    /// C_zp)`.
    pub(super) fn qlinear_binary(&mut self, n: &Node<'_>, op: &str) -> NResult<Vec<Value>> {
        let data = [(0, Some((1, 2, 1))), (3, Some((4, 5, 1)))];
        self.qlinear(n, op, &data, Some((6, 7)), Vec::new())
    }

    /// `com.microsoft` `QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp?)`: `B`
    /// per output column; without `y_scale` the output is float.
    pub(super) fn qgemm(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        // C's scale is alpha × a_scale × b_scale: with alpha 1 (what onnxruntime's quantizer
        // writes) that is the bias every quantized product takes.
        if super::attributes::attr_float(n, "alpha")?.is_some_and(|a| a != 1.0) {
            return Err(unsupported("QGemm with alpha other than 1"));
        }
        let trans_b = attr_int(n, "transB")?.unwrap_or(0) != 0;
        let data = [
            (0, Some((1, 2, 1))),
            (3, Some((4, 5, if trans_b { 0 } else { 1 }))),
            (6, None),
        ];
        let out = n
            .proto
            .input
            .get(7)
            .is_some_and(|s| !s.is_empty())
            .then_some((7, 8));
        self.qlinear(n, "Gemm", &data, out, n.proto.attribute.clone())
    }

    /// `com.microsoft` operators of one quantised input
    /// (`X, X_scale, X_zp, Y_scale, Y_zp`): `QLinearGlobalAveragePool`,
    /// `QLinearAveragePool`, `QLinearSigmoid`, `QLinearLeakyRelu`, `QLinearSoftmax`. Their
    /// float operator's attributes pass through; `channels_last` must be 0 and the softmax's
    /// `opset` attribute is dropped (the model's operator set gives `Softmax` its axis rule).
    pub(super) fn qlinear_unary(&mut self, n: &Node<'_>, op: &str) -> NResult<Vec<Value>> {
        if attr_int(n, "channels_last")?.unwrap_or(0) != 0 {
            return Err(unsupported("channels_last = 1 (NHWC)"));
        }
        let attributes = n
            .proto
            .attribute
            .iter()
            .filter(|a| !matches!(a.name.as_str(), "channels_last" | "opset"))
            .cloned()
            .collect();
        self.qlinear(n, op, &[(0, Some((1, 2, 1)))], Some((3, 4)), attributes)
    }

    /// `com.microsoft` `QLinearConcat(Y_scale, Y_zp, X1, X1_scale, X1_zp, ...)`.
    pub(super) fn qlinear_concat(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let count = n.proto.input.len().saturating_sub(2);
        if count == 0 || !count.is_multiple_of(3) {
            return Err(invalid(format!(
                "expects 2 + 3k inputs, got {}",
                n.proto.input.len()
            )));
        }
        let data: Vec<QInput> = (0..count / 3)
            .map(|k| (2 + 3 * k, Some((3 + 3 * k, 4 + 3 * k, 1))))
            .collect();
        self.qlinear(n, "Concat", &data, Some((0, 1)), n.proto.attribute.clone())
    }
}

/// A part of onnxruntime's dynamic quantization pattern (`quantize_dynamic`):
/// `DynamicQuantizeLinear(x)` gives `x_q, x_scale, x_zero_point`;
/// `MatMulInteger(x_q, W, x_zero_point, W_zero_point)` their integer product with quantized
/// weights; `Cast` to float; `Mul(x_scale, W_scale)`; and the product of the last two is the
/// float result. The whole pattern is one `FullyConnected` (2-D input) or `BatchMatMul` with a
/// Float32 input and quantized constant weights, which Backend API 1.2 defines as dynamically
/// quantized; its parts exist only while the pattern is read.
#[derive(Debug, Clone)]
pub(super) enum Dynamic {
    /// Output `index` (0 data, 1 scale, 2 zero point) of `DynamicQuantizeLinear` of `x`.
    Output {
        /// The float tensor quantized per call.
        x: TensorRef,
        /// Which output.
        index: u8,
    },
    /// `MatMulInteger` of `x`'s quantized data and constant weights (`cast` once cast to
    /// float).
    Product {
        /// The float tensor quantized per call.
        x: TensorRef,
        /// The weights' integer values and ONNX element type.
        w: Arc<Const<i64>>,
        /// Its element type (`INT8` or `UINT8`).
        elem: i32,
        /// Its zero points (one, or one per column).
        zero_points: Vec<i64>,
        /// Whether a `Cast` to float followed.
        cast: bool,
    },
    /// `x`'s scale times the weights' scales.
    Scale {
        /// The float tensor quantized per call.
        x: TensorRef,
        /// The weights' scales (one, or one per column).
        scales: Vec<f32>,
    },
}

impl Importer {
    /// `DynamicQuantizeLinear`: its three outputs are parts of the dynamic pattern
    /// ([`Dynamic`]); only `MatMulInteger` and the scale's `Mul` may read them.
    pub(super) fn dynamic_quantize_linear(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let x = match xv {
            Value::Quantized(q) => match self.dequantized(&xn, &q)? {
                Value::Tensor(t) => t,
                f => self.tensor(&format!("{xn}\u{0}float"), &f)?,
            },
            other => self.tensor(&xn, &other)?,
        };
        if self.info(x)?.data_type != DataType::Float32 {
            return Err(invalid(format!("input {xn} must be float")));
        }
        Ok((0..3)
            .map(|index| Value::Dynamic(Dynamic::Output { x, index }))
            .collect())
    }

    /// `MatMulInteger(A, B, a_zero_point, b_zero_point)` where `A` and `a_zero_point` are a
    /// `DynamicQuantizeLinear`'s and `B` is a constant: the integer part of the pattern.
    pub(super) fn matmul_integer(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let not_dynamic = || {
            unsupported(
                "MatMulInteger other than of a DynamicQuantizeLinear's output and constant \
                 weights (onnxruntime's dynamic quantization)",
            )
        };
        let x = match (self.req(n, 0)?.1, self.arg(n, 2)?.map(|a| a.1)) {
            (
                Value::Dynamic(Dynamic::Output { x, index: 0 }),
                Some(Value::Dynamic(Dynamic::Output { x: z, index: 2 })),
            ) if x == z => x,
            _ => return Err(not_dynamic()),
        };
        let (wn, wv) = self.req(n, 1)?;
        let Value::I64(w) = wv else {
            return Err(not_dynamic());
        };
        let elem = match self.elem_type(&wn) {
            Some(e @ (data_type::INT8 | data_type::UINT8)) => e,
            _ => return Err(unsupported(format!("weights {wn} must be int8 or uint8"))),
        };
        let zero_points = match self.arg(n, 3)? {
            None => vec![0],
            Some((_, Value::I64(z))) => z.data.clone(),
            Some((zn, _)) => {
                return Err(unsupported(format!("zero point {zn} must be a constant")));
            }
        };
        Ok(vec![Value::Dynamic(Dynamic::Product {
            x,
            w,
            elem,
            zero_points,
            cast: false,
        })])
    }

    /// A node other than `DynamicQuantizeLinear`/`MatMulInteger` reading a [`Dynamic`] part:
    /// `Cast` to float of the product, `Mul` of the scales, and the `Mul` that completes the
    /// pattern (the layer). Anything else is refused.
    pub(super) fn dynamic_node(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let refuse = || {
            unsupported(format!(
                "{} of a part of the dynamic quantization pattern (only Cast and Mul are read)",
                n.op()
            ))
        };
        let first = self.req(n, 0)?.1;
        match (n.op(), first) {
            (
                "Cast",
                Value::Dynamic(Dynamic::Product {
                    x,
                    w,
                    elem,
                    zero_points,
                    cast: false,
                }),
            ) => {
                let to = attr_int(n, "to")?.unwrap_or(0);
                if to != i64::from(data_type::FLOAT) {
                    return Err(refuse());
                }
                Ok(vec![Value::Dynamic(Dynamic::Product {
                    x,
                    w,
                    elem,
                    zero_points,
                    cast: true,
                })])
            }
            ("Mul", a) => {
                let b = self.req(n, 1)?.1;
                match (a, b) {
                    (Value::Dynamic(Dynamic::Output { x, index: 1 }), Value::F32(s))
                    | (Value::F32(s), Value::Dynamic(Dynamic::Output { x, index: 1 })) => {
                        Ok(vec![Value::Dynamic(Dynamic::Scale {
                            x,
                            scales: s.data.clone(),
                        })])
                    }
                    (
                        Value::Dynamic(Dynamic::Product {
                            x,
                            w,
                            elem,
                            zero_points,
                            cast: true,
                        }),
                        Value::Dynamic(Dynamic::Scale { x: sx, scales }),
                    )
                    | (
                        Value::Dynamic(Dynamic::Scale { x: sx, scales }),
                        Value::Dynamic(Dynamic::Product {
                            x,
                            w,
                            elem,
                            zero_points,
                            cast: true,
                        }),
                    ) if x == sx => {
                        let y = self.dynamic_matmul(n, x, &w, elem, &zero_points, &scales)?;
                        Ok(vec![Value::Tensor(y)])
                    }
                    _ => Err(refuse()),
                }
            }
            _ => Err(refuse()),
        }
    }

    /// The layer of a complete dynamic pattern: `x` (Float32) times the quantized constant
    /// weights `w` (`[K, N]`, per tensor or per column), a Float32 result.
    fn dynamic_matmul(
        &mut self,
        n: &Node<'_>,
        x: TensorRef,
        w: &Const<i64>,
        elem: i32,
        zero_points: &[i64],
        scales: &[f32],
    ) -> NResult<TensorRef> {
        if scales.is_empty() {
            return Err(invalid("the weights' scale is empty"));
        }
        let [_, cols] = w.shape[..] else {
            return Err(unsupported(format!(
                "dynamically quantized weights of shape {:?} (2-D only)",
                w.shape
            )));
        };
        let per_column = scales.len() > 1 || zero_points.len() > 1;
        for (what, len) in [("scales", scales.len()), ("zero points", zero_points.len())] {
            if len != 1 && len != cols as usize {
                return Err(invalid(format!("{len} {what} for {cols} columns")));
            }
        }
        let p = Params {
            scales: if per_column && scales.len() == 1 {
                vec![scales[0]; cols as usize]
            } else {
                scales.to_vec()
            },
            zero_points: zero_points.to_vec(),
            elem: Some(elem),
            axis: per_column.then_some(1),
        };
        // The quantized constant as a DequantizeLinear of the weights would read it (its
        // values range-checked).
        let Value::Quantized(Quantized::Constant(constant, _)) =
            self.dequantize_constant(&format!("{}/weights", n.name), w, &w.shape, &p)?
        else {
            return Err(unsupported(
                "dynamically quantized weights whose quantization the API cannot say \
                 (differing zero points, values out of range)",
            ));
        };
        let wname = self.unique(&format!("{}/weights", n.name));
        let wt = self.builder.add_constant(&wname, (*constant).clone())?;
        let rank = self.info(x)?.shape.len();
        let d = if rank == 2 {
            LayerDescriptor::FullyConnected(backplane_api::FullyConnectedDescriptor {
                bias_enabled: false,
                transpose_weights: false,
            })
        } else {
            LayerDescriptor::BatchMatMul(backplane_api::BatchMatMulDescriptor::default())
        };
        let name = self.unique(&n.name);
        Ok(self.builder.add_layer(&name, d, &[x, wt])?)
    }
}
