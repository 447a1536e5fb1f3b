//! The QOperator form: `QLinear*` operators (ONNX's and onnxruntime's `com.microsoft` ones),
//! each the float operator between dequantised inputs and a quantised output.

use backplane_api::{DataType, LayerDescriptor};

use crate::onnx::import::{
    Importer, NResult, Node, Value, attributes::attr_int, invalid, registry, unsupported,
};
use crate::onnx::proto::{AttributeProto, NodeProto, data_type};

/// A QOperator node's data input: its index, and those of its scale and zero point with the
/// default axis of per-axis parameters (`None` for a bias).
use super::*;

impl Importer {
    /// A QOperator node: the float operator `op` on inputs dequantised with their own
    /// parameters, its output quantised with the node's. `data` lists, per data input of the
    /// float operator, the node's input index and those of its scale and zero point with the
    /// axis of per-axis parameters (a bias has none: int32 in the scale of input times
    /// weights); `out` the indices of the output's scale and zero point (`None`: the output
    /// is float).
    pub(in crate::onnx::import) fn qlinear(
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
    pub(super) fn qlinear_output(
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
}

/// The QOperator converters ([`registry`]): each names the float operator and where the
/// node keeps its inputs' and output's parameters.
impl Importer {
    /// ONNX `QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B?)`: weights per
    /// output channel (axis 0).
    pub(in crate::onnx::import) fn qlinear_conv(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let data = [(0, Some((1, 2, 1))), (3, Some((4, 5, 0))), (8, None)];
        self.qlinear(n, "Conv", &data, Some((6, 7)), n.proto.attribute.clone())
    }

    /// ONNX `QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)`: `b` per
    /// column (its last axis).
    pub(in crate::onnx::import) fn qlinear_matmul(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        // a's parameters may be per row (axis -2), b's per column (its last axis).
        let data = [(0, Some((1, 2, -2))), (3, Some((4, 5, -1)))];
        self.qlinear(n, "MatMul", &data, Some((6, 7)), Vec::new())
    }

    /// `com.microsoft` `QLinearAdd`/`QLinearMul(A, A_scale, A_zp, B, B_scale, B_zp, C_scale,
    /// C_zp)`.
    pub(in crate::onnx::import) fn qlinear_binary(
        &mut self,
        n: &Node<'_>,
        op: &str,
    ) -> NResult<Vec<Value>> {
        let data = [(0, Some((1, 2, 1))), (3, Some((4, 5, 1)))];
        self.qlinear(n, op, &data, Some((6, 7)), Vec::new())
    }

    /// `com.microsoft` `QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp?)`: `B`
    /// per output column; without `y_scale` the output is float.
    pub(in crate::onnx::import) fn qgemm(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        // C's scale is alpha × a_scale × b_scale: with alpha 1 (what onnxruntime's quantizer
        // writes) that is the bias every quantized product takes.
        if crate::onnx::import::attributes::attr_float(n, "alpha")?.is_some_and(|a| a != 1.0) {
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
    pub(in crate::onnx::import) fn qlinear_unary(
        &mut self,
        n: &Node<'_>,
        op: &str,
    ) -> NResult<Vec<Value>> {
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
    pub(in crate::onnx::import) fn qlinear_concat(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
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
