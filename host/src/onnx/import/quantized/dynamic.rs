//! onnxruntime's dynamic quantization (`quantize_dynamic`): `DynamicQuantizeLinear` and
//! `MatMulInteger` read as one float product with quantised weights.

use std::sync::Arc;

use backplane_api::{DataType, LayerDescriptor};

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
/// `MatMulInteger(x_q, W, x_zero_point, W_zero_point)` their integer product with quantized
/// weights; `Cast` to float; `Mul(x_scale, W_scale)`; and the product of the last two is the
/// float result. The whole pattern is one `FullyConnected` (2-D input) or `BatchMatMul` with a
/// Float32 input and quantized constant weights, which Backend API 1.2 defines as dynamically
/// quantized; its parts exist only while the pattern is read.
#[derive(Debug, Clone)]
pub(in crate::onnx::import) enum Dynamic {
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

    /// `MatMulInteger(A, B, a_zero_point, b_zero_point)` where `A` and `a_zero_point` are a
    /// `DynamicQuantizeLinear`'s and `B` is a constant: the integer part of the pattern.
    pub(in crate::onnx::import) fn matmul_integer(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
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
    pub(in crate::onnx::import) fn dynamic_node(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
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
    pub(super) fn dynamic_matmul(
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
        // values range-checked); its float twin is never read.
        let Some(constant) =
            self.quantized_constant(&format!("{}/weights", n.name), w, &w.shape, &p)
        else {
            return Err(unsupported(
                "dynamically quantized weights whose quantization the API cannot say \
                 (differing zero points, values out of range)",
            ));
        };
        let wname = self.unique(&format!("{}/weights", n.name));
        let wt = self.builder.add_constant(&wname, constant)?;
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
