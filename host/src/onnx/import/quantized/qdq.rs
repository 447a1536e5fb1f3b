//! The QDQ form: `DequantizeLinear` values, `QuantizeLinear` targets, and float operators
//! between them run as quantised layers where that is exact.

use std::sync::Arc;

use backplane_api::{ConstTensor, DataType, LayerDescriptor, Quantization, TensorInfo};

use crate::onnx::import::{
    Importer, NResult, Node, Value, attributes::attr_int, constants::charge, invalid, registry,
    unsupported,
};
use crate::onnx::{fold::Const, proto::data_type};

/// A QOperator node's data input: its index, and those of its scale and zero point with the
/// default axis of per-axis parameters (`None` for a bias).
use super::*;

impl Importer {
    /// `DequantizeLinear`: a [`Quantized`] value (no layer yet), or a folded float constant
    /// when the constant's quantisation cannot be said in the API's terms.
    pub(in crate::onnx::import) fn dequantize_linear(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Value>> {
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
    pub(super) fn dequantize_constant(
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
        // `q - z` cannot overflow for any value if it does not for the smallest and largest.
        let lo = c.data.iter().copied().min().unwrap_or(0);
        let hi = c.data.iter().copied().max().unwrap_or(0);
        for &z in &p.zero_points {
            for q in [lo, hi] {
                if q.checked_sub(z).is_none() {
                    return Err(invalid(format!("{name}: {q} - {z} overflows")));
                }
            }
        }
        // By runs of `inner` elements that share one index of the axis (one scale and zero
        // point), without a division per element.
        let mut float = Vec::with_capacity(c.data.len());
        let run_len = if p.axis.is_some() {
            inner
        } else {
            c.data.len()
        };
        for (run, qs) in c.data.chunks(run_len.max(1)).enumerate() {
            let (s, z) = p.at(axis_len.map_or(0, |len| run % len));
            float.extend(qs.iter().map(|&q| (q - z) as f32 * s));
        }
        charge(&mut self.budget, float.len(), 4).map_err(invalid)?;
        let float = Arc::new(Const::new(shape.to_vec(), float).map_err(invalid)?);
        Ok(match self.quantized_constant(name, c, shape, p) {
            Some(t) => Value::Quantized(Quantized::Constant(Arc::new(t), float)),
            None => Value::F32(float),
        })
    }

    /// The quantized tensor of constant `c` with parameters `p`, when the API's types can say
    /// it (its values in its type's range, its parameters valid); not its float twin.
    pub(super) fn quantized_constant(
        &self,
        name: &str,
        c: &Const<i64>,
        shape: &[u32],
        p: &Params,
    ) -> Option<ConstTensor> {
        let elem = self.elem_type(name).or(p.elem);
        // Symmetric int8 is a weight's type (per axis); a per-tensor int8 constant reads as the
        // activations it meets do (QAsymmS8).
        let all_zero = p.axis.is_some() && p.zero_points.iter().all(|&z| z == 0);
        elem.and_then(|e| quantized_type(e, all_zero))
            .zip(p.quantization())
            .and_then(|(dt, q)| {
                // An 8-bit initializer's stored bytes, when they are this type's values.
                let stored = self
                    .exact
                    .bytes8
                    .get(&(std::ptr::from_ref(c) as usize))
                    .filter(|(ty, b)| {
                        let signed = matches!(dt, DataType::QAsymmS8 | DataType::QSymmS8);
                        b.len() == c.data.len()
                            && (*ty == data_type::INT8 && signed
                                || *ty == data_type::UINT8 && dt == DataType::QAsymmU8)
                    });
                let (lo, hi) = range(dt);
                let fits = stored.is_some() || c.data.iter().all(|v| (lo..=hi).contains(v));
                fits.then(|| {
                    let data: Vec<u8> = match (dt, stored) {
                        (_, Some((_, bytes))) => bytes.to_vec(),
                        (DataType::Signed32, _) => c
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
            .filter(|t| t.info.check_quantization().is_ok())
    }

    /// `QuantizeLinear`: nothing for a value already quantised with these parameters, a
    /// `Requantize` layer for one quantised otherwise, a `Quantize` layer for a float tensor.
    pub(in crate::onnx::import) fn quantize_linear(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        if let (_, Value::Tensor(scale)) = self.req(n, 1)? {
            return self.quantize_computed(n, scale);
        }
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

    /// `QuantizeLinear` with a scale computed at run time (as DynamicQuantizeLinear's
    /// function body computes it), per tensor: `saturate(round(x / scale) + zero_point)` in
    /// Float32 layers (`Round` halves to even, as ONNX says), cast to the plain 8-bit type of
    /// the zero point (UnsignedInt8 without one). Exact: every step is a correctly rounded
    /// IEEE operation on the values onnxruntime computes with.
    fn quantize_computed(
        &mut self,
        n: &Node<'_>,
        scale: crate::graph::network::TensorRef,
    ) -> NResult<Vec<Value>> {
        use backplane_api::{BinaryOperation as B, UnaryOperation};
        let (xn, xv) = self.req(n, 0)?;
        let x = self.tensor(&xn, &xv)?;
        let float = DataType::Float32;
        for (what, t) in [("input", x), ("scale", scale)] {
            let info = self.info(t)?;
            if info.data_type != float {
                return Err(unsupported(format!(
                    "QuantizeLinear of a {what} of {} with a scale computed at run time",
                    info.data_type
                )));
            }
        }
        if self.info(scale)?.num_elements() != Some(1) {
            return Err(unsupported(
                "QuantizeLinear per axis with a scale computed at run time",
            ));
        }
        let zero_point = match self.arg(n, 2)? {
            None => None,
            Some((zn, zv)) => Some((self.tensor(&zn, &zv)?, zn)),
        };
        let out_type = match &zero_point {
            None => DataType::UnsignedInt8,
            Some((z, zn)) => match self.info(*z)?.data_type {
                DataType::UnsignedInt8 | DataType::QAsymmU8 => DataType::UnsignedInt8,
                DataType::Signed8 | DataType::QAsymmS8 | DataType::QSymmS8 => DataType::Signed8,
                other => {
                    return Err(unsupported(format!(
                        "QuantizeLinear to {other} (zero point {zn}) with a scale computed at \
                         run time"
                    )));
                }
            },
        };
        let (lo, hi) = if out_type == DataType::UnsignedInt8 {
            (0.0, 255.0)
        } else {
            (-128.0, 127.0)
        };
        let bin = |op| LayerDescriptor::ElementwiseBinary(op);
        let scaled = self.layer(n, Some("scaled"), bin(B::Div), &[x, scale])?;
        let round = LayerDescriptor::ElementwiseUnary(UnaryOperation::Round);
        let mut y = self.layer(n, Some("rounded"), round, &[scaled])?;
        if let Some((z, _)) = zero_point {
            let zf = self.layer(n, Some("zero_point"), LayerDescriptor::Cast(float), &[z])?;
            y = self.layer(n, Some("shifted"), bin(B::Add), &[y, zf])?;
        }
        let lo = self.float_scalar_as(n, "low", lo, float)?;
        let hi = self.float_scalar_as(n, "high", hi, float)?;
        let y = self.layer(n, Some("above_low"), bin(B::Maximum), &[y, lo])?;
        let y = self.layer(n, Some("saturated"), bin(B::Minimum), &[y, hi])?;
        let y = self.layer(n, None, LayerDescriptor::Cast(out_type), &[y])?;
        Ok(vec![Value::Tensor(y)])
    }

    /// The output parameters node `n`'s output takes from the `QuantizeLinear` it reaches,
    /// when there is one with constant per-tensor parameters.
    pub(super) fn q_target(&self, n: &Node<'_>) -> Option<(DataType, Quantization)> {
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
    pub(super) fn target_params(&self, t: &QTarget) -> Option<Params> {
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
    pub(in crate::onnx::import) fn convert_float_node(
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
    pub(super) fn gather_quantized_constant(
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
    pub(super) fn quantized_plan(
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
    pub(super) fn compute_plan(
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
}
