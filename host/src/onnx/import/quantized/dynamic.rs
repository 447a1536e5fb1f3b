//! onnxruntime's dynamic quantization (`quantize_dynamic`): `DynamicQuantizeLinear` and
//! `MatMulInteger` read as one float product with quantised weights.

use std::sync::Arc;

use backplane_api::{ConstTensor, Convolution2dDescriptor, DataType, LayerDescriptor};

use crate::onnx::import::{
    Importer, NResult, Node, Value, attributes::attr_int, invalid, unsupported,
};
use crate::{
    graph::network::TensorRef,
    onnx::{fold::Const, proto::data_type},
};

/// A QOperator node's data input: its index, and those of its scale and zero point with the
/// default axis of per-axis parameters (`None` for a bias).
use super::*;

/// A part of onnxruntime's dynamic quantization pattern (`quantize_dynamic`):
/// `DynamicQuantizeLinear(x)` gives `x_q, x_scale, x_zero_point`;
/// `MatMulInteger(x_q, W, x_zero_point, W_zero_point)` (or `ConvInteger`) their integer
/// product with quantized weights; `Cast` to float; `Mul(x_scale, W_scale)`; and the product
/// of the last two is the float result. The whole pattern is one `FullyConnected` (2-D input),
/// `BatchMatMul` or `Convolution2d` with a Float32 input and quantized constant weights, which
/// the Backend API defines as dynamically quantized (products from 1.2, convolutions from
/// 1.5); its parts exist only while the pattern is read. A convolution's bias may enter
/// before the `Cast`, as older quantizers write it: `Add` of
/// `Cast(Floor(Div(bias, x_scale · W_scale)), int32)` (reshaped per channel).
#[derive(Debug, Clone)]
pub(in crate::onnx::import) enum Dynamic {
    /// Output `index` (0 data, 1 scale, 2 zero point) of `DynamicQuantizeLinear` of `x`.
    Output {
        /// The float tensor quantized per call.
        x: TensorRef,
        /// Which output.
        index: u8,
    },
    /// The integer product of `x`'s quantized data and constant weights.
    Product(Box<Product>),
    /// `x`'s scale times the weights' scales.
    Scale {
        /// The float tensor quantized per call.
        x: TensorRef,
        /// The weights' scales (one, or one per column).
        scales: Vec<f32>,
    },
    /// A float bias on its way into a convolution's accumulator: `Div` by a [`Dynamic::Scale`]
    /// (`Quotient`), `Floor`, `Cast` to int32, `Reshape`.
    Bias {
        /// The float tensor quantized per call.
        x: TensorRef,
        /// The scales it was divided by.
        scales: Vec<f32>,
        /// Its values.
        values: Vec<f32>,
        /// How far along: 0 divided, 1 floored, 2 cast to int32.
        stage: u8,
    },
}

/// `MatMulInteger` or `ConvInteger` of a `DynamicQuantizeLinear`'s output and constant
/// weights, with what followed it so far.
#[derive(Debug, Clone)]
pub(in crate::onnx::import) struct Product {
    /// The float tensor quantized per call.
    x: TensorRef,
    /// The weights' integer values.
    w: Arc<Const<i64>>,
    /// Their element type (`INT8` or `UINT8`).
    elem: i32,
    /// Their zero points (one, or one per column / output channel).
    zero_points: Vec<i64>,
    /// A `ConvInteger`'s convolution (without its bias); `None` for `MatMulInteger`.
    conv: Option<Convolution2dDescriptor>,
    /// A bias added in the integer domain (its values and the scales it was divided by).
    bias: Option<(Vec<f32>, Vec<f32>)>,
    /// Whether a `Cast` to float followed.
    cast: bool,
}

impl Importer {
    /// `DynamicQuantizeLinear`: its three outputs are parts of the dynamic pattern
    /// ([`Dynamic`]); only `MatMulInteger` and the scale's `Mul` may read them.
    pub(in crate::onnx::import) fn dynamic_quantize_linear(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Value>> {
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

    /// `MatMulInteger(A, B, a_zero_point, b_zero_point)` (or `ConvInteger` of the same
    /// operands) where `A` and `a_zero_point` are a `DynamicQuantizeLinear`'s and `B` is a
    /// constant: the integer part of the pattern.
    pub(in crate::onnx::import) fn matmul_integer(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let not_dynamic = || {
            unsupported(format!(
                "{} other than of a DynamicQuantizeLinear's output and constant weights \
                 (onnxruntime's dynamic quantization)",
                n.op()
            ))
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
        let conv = if n.op() == "ConvInteger" {
            let xs = self.info(x)?.shape.to_vec();
            let ws: Vec<u32> = w.shape.clone();
            if xs.len() != 4 || ws.len() != 4 {
                return Err(unsupported(format!(
                    "a dynamically quantized convolution of input {xs:?} and weights {ws:?} \
                     (2-D only)"
                )));
            }
            let d = super::super::conv::conv_descriptor(n, &xs, &ws, false)?;
            if d.groups != 1 {
                return Err(unsupported(
                    "a dynamically quantized convolution of more than one group",
                ));
            }
            Some(d)
        } else {
            None
        };
        Ok(vec![Value::Dynamic(Dynamic::Product(Box::new(Product {
            x,
            w,
            elem,
            zero_points,
            conv,
            bias: None,
            cast: false,
        })))])
    }

    /// A node other than `DynamicQuantizeLinear`/`MatMulInteger`/`ConvInteger` reading a
    /// [`Dynamic`] part: `Cast` to float of the product, `Mul` of the scales, a convolution's
    /// integer bias (`Div`, `Floor`, `Cast` to int32, `Reshape`, `Add`), and the `Mul` that
    /// completes the pattern (the layer). Anything else is refused.
    pub(in crate::onnx::import) fn dynamic_node(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let refuse = || {
            unsupported(format!(
                "{} of a part of the dynamic quantization pattern (only Cast, Mul and a \
                 convolution's integer bias are read)",
                n.op()
            ))
        };
        let first = self.req(n, 0)?.1;
        let second = || -> NResult<Value> { Ok(self.req(n, 1)?.1) };
        let to = || -> NResult<i64> { Ok(attr_int(n, "to")?.unwrap_or(0)) };
        let one = |v: Dynamic| Ok(vec![Value::Dynamic(v)]);
        match (n.op(), first) {
            ("Cast", Value::Dynamic(Dynamic::Product(mut p))) if !p.cast => {
                if to()? != i64::from(data_type::FLOAT) {
                    return Err(refuse());
                }
                p.cast = true;
                one(Dynamic::Product(p))
            }
            ("Div", Value::F32(b)) => match second()? {
                Value::Dynamic(Dynamic::Scale { x, scales }) => one(Dynamic::Bias {
                    x,
                    scales,
                    values: b.data.clone(),
                    stage: 0,
                }),
                _ => Err(refuse()),
            },
            (
                "Floor",
                Value::Dynamic(Dynamic::Bias {
                    x,
                    scales,
                    values,
                    stage: 0,
                }),
            ) => one(Dynamic::Bias {
                x,
                scales,
                values,
                stage: 1,
            }),
            (
                "Cast",
                Value::Dynamic(Dynamic::Bias {
                    x,
                    scales,
                    values,
                    stage: 1,
                }),
            ) if to()? == i64::from(data_type::INT32) => one(Dynamic::Bias {
                x,
                scales,
                values,
                stage: 2,
            }),
            ("Reshape", Value::Dynamic(b @ Dynamic::Bias { stage: 2, .. })) => {
                // Per channel of an NCHW output: one value, or `[1, C, 1, 1]` / `[C, 1, 1]`.
                let Value::I64(shape) = second()? else {
                    return Err(refuse());
                };
                let Dynamic::Bias { ref values, .. } = b else {
                    unreachable!("matched above")
                };
                // `-1` is what the others leave (a 1-D input has no dimension for `0`).
                let known: i64 = shape.data.iter().filter(|&&d| d != -1).product();
                let len = values.len() as i64;
                let dims: Vec<i64> = shape
                    .data
                    .iter()
                    .map(|&d| if d == -1 && known > 0 { len / known } else { d })
                    .collect();
                let per_channel = len == 1
                    || dims.ends_with(&[len, 1, 1])
                        && dims.len() <= 4
                        && dims.iter().rev().skip(3).all(|&d| d == 1);
                if !per_channel {
                    return Err(unsupported(format!(
                        "an integer bias of {} values reshaped to {:?} (per channel only)",
                        values.len(),
                        shape.data
                    )));
                }
                one(b)
            }
            ("Add", a) => match (a, second()?) {
                (
                    Value::Dynamic(Dynamic::Product(mut p)),
                    Value::Dynamic(Dynamic::Bias {
                        x,
                        scales,
                        values,
                        stage: 2,
                    }),
                )
                | (
                    Value::Dynamic(Dynamic::Bias {
                        x,
                        scales,
                        values,
                        stage: 2,
                    }),
                    Value::Dynamic(Dynamic::Product(mut p)),
                ) if p.x == x && p.conv.is_some() && !p.cast && p.bias.is_none() => {
                    p.bias = Some((values, scales));
                    one(Dynamic::Product(p))
                }
                _ => Err(refuse()),
            },
            ("Mul", a) => match (a, second()?) {
                (Value::Dynamic(Dynamic::Output { x, index: 1 }), Value::F32(s))
                | (Value::F32(s), Value::Dynamic(Dynamic::Output { x, index: 1 })) => {
                    one(Dynamic::Scale {
                        x,
                        scales: s.data.clone(),
                    })
                }
                (
                    Value::Dynamic(Dynamic::Product(p)),
                    Value::Dynamic(Dynamic::Scale { x, scales }),
                )
                | (
                    Value::Dynamic(Dynamic::Scale { x, scales }),
                    Value::Dynamic(Dynamic::Product(p)),
                ) if p.cast && p.x == x => {
                    if p.bias.as_ref().is_some_and(|(_, s)| *s != scales) {
                        return Err(unsupported(
                            "an integer bias divided by other scales than the product's",
                        ));
                    }
                    let y = self.dynamic_product(n, &p, &scales)?;
                    Ok(vec![Value::Tensor(y)])
                }
                _ => Err(refuse()),
            },
            _ => Err(refuse()),
        }
    }

    /// The layer of a complete dynamic pattern: `p.x` (Float32) times (or convolved with)
    /// the quantized constant weights (`[K, N]` per tensor or per column; a convolution's
    /// `[M, C, kh, kw]` per tensor or per output channel), a Float32 result.
    fn dynamic_product(&mut self, n: &Node<'_>, p: &Product, scales: &[f32]) -> NResult<TensorRef> {
        if scales.is_empty() {
            return Err(invalid("the weights' scale is empty"));
        }
        let w = &p.w;
        let (axis, channels) = match (&p.conv, &w.shape[..]) {
            (Some(_), &[m, _, _, _]) => (0, m),
            (None, &[_, cols]) => (1, cols),
            _ => {
                return Err(unsupported(format!(
                    "dynamically quantized weights of shape {:?} (2-D, or 4-D of a convolution)",
                    w.shape
                )));
            }
        };
        let per_channel = scales.len() > 1 || p.zero_points.len() > 1;
        for (what, len) in [
            ("scales", scales.len()),
            ("zero points", p.zero_points.len()),
        ]
        .into_iter()
        .chain(p.bias.as_ref().map(|(b, _)| ("bias values", b.len())))
        {
            if len != 1 && len != channels as usize {
                return Err(invalid(format!("{len} {what} for {channels} channels")));
            }
        }
        let params = Params {
            scales: if per_channel && scales.len() == 1 {
                vec![scales[0]; channels as usize]
            } else {
                scales.to_vec()
            },
            zero_points: p.zero_points.clone(),
            elem: Some(p.elem),
            axis: per_channel.then_some(axis),
        };
        // The quantized constant as a DequantizeLinear of the weights would read it (its
        // values range-checked); its float twin is never read.
        let Some(constant) =
            self.quantized_constant(&format!("{}/weights", n.name), w, &w.shape, &params)
        else {
            return Err(unsupported(
                "dynamically quantized weights whose quantization the API cannot say \
                 (differing zero points, values out of range)",
            ));
        };
        let wname = self.unique(&format!("{}/weights", n.name));
        let wt = self.builder.add_constant(&wname, constant)?;
        let mut inputs = vec![p.x, wt];
        let d = match &p.conv {
            Some(conv) => {
                if let Some((values, _)) = &p.bias {
                    let values = if values.len() == 1 {
                        vec![values[0]; channels as usize]
                    } else {
                        values.clone()
                    };
                    let bname = self.unique(&format!("{}/bias", n.name));
                    let b = ConstTensor::from_f32(&[channels], &values);
                    inputs.push(self.builder.add_constant(&bname, b)?);
                }
                LayerDescriptor::Convolution2d(Convolution2dDescriptor {
                    bias_enabled: p.bias.is_some(),
                    ..conv.clone()
                })
            }
            None if self.info(p.x)?.shape.len() == 2 => {
                LayerDescriptor::FullyConnected(backplane_api::FullyConnectedDescriptor {
                    bias_enabled: false,
                    transpose_weights: false,
                })
            }
            None => LayerDescriptor::BatchMatMul(backplane_api::BatchMatMulDescriptor::default()),
        };
        let name = self.unique(&n.name);
        Ok(self.builder.add_layer(&name, d, &inputs)?)
    }
}
