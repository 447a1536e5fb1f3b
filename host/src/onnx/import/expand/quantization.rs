//! Quantisation in the forms the quantised tensor types cannot say, computed as ONNX's
//! definitions compute them, in floats (and integer products in doubles, exact below 2^53):
//! - `QuantizeLinear` to 16-bit integers, with blocked scales (`block_size`), or with per-axis
//!   zero points that differ: `saturate(round(x / scale) + zero_point)`, rounded half to even;
//! - `DequantizeLinear` of a plain integer tensor (not a quantised one: a 16-bit input, an
//!   expanded `DynamicQuantizeLinear`'s output) or with blocked scales: `(x - zero_point) *
//!   scale`;
//! - `DynamicQuantizeLinear` whose outputs something other than onnxruntime's dynamic pattern
//!   reads (a graph output, another operator): its scale and zero point from the range of `x`
//!   widened to include 0, then `x` quantised to uint8;
//! - `MatMulInteger` and `ConvInteger` of any operands: the product of `(a - a_zero_point)`
//!   and `(b - b_zero_point)` (differences in int32) in doubles, cast to int32.
//!
//! The 8-bit forms the types can say keep their quantised layers ([`super::super::quantized`]).

use super::{Expansion, int, rearrange::first_output};
use crate::onnx::{
    import::{
        Importer, NResult, Node, Value,
        attributes::{attr_int, normalize_axis},
        invalid,
        quantized::Dynamic,
        queue::Pending,
        unsupported,
    },
    proto::data_type,
};

/// The ONNX element type of value `name`, when the importer knows it.
fn onnx_type(im: &Importer, name: &str, v: &Value) -> Option<i32> {
    match v {
        Value::Tensor(_) => im.data_type(v).ok().map(|t| t.onnx_code()),
        Value::I64(_) => im.elem_type(name),
        Value::F32(_) => Some(im.elem_type(name).unwrap_or(data_type::FLOAT)),
        _ => None,
    }
}

/// The range of integer type `elem` (the types a `QuantizeLinear` computed in floats writes).
fn integer_range(elem: i32) -> Option<(f32, f32)> {
    Some(match elem {
        data_type::UINT8 => (0.0, 255.0),
        data_type::INT8 => (-128.0, 127.0),
        data_type::UINT16 => (0.0, 65535.0),
        data_type::INT16 => (-32768.0, 32767.0),
        _ => return None,
    })
}

/// The type a `QuantizeLinear` writes: its zero point's, else opset 21's `output_dtype`, else
/// uint8.
fn quantize_target(im: &Importer, n: &Node<'_>) -> NResult<i32> {
    if let Some((zn, zv)) = im.arg(n, 2)? {
        return onnx_type(im, &zn, &zv)
            .ok_or_else(|| unsupported(format!("zero point {zn} has no known element type")));
    }
    Ok(match attr_int(n, "output_dtype")?.filter(|&t| t != 0) {
        Some(t) => i32::try_from(t).map_err(|_| invalid(format!("output_dtype {t}")))?,
        None => data_type::UINT8,
    })
}

/// Whether a zero point given as a constant with several values has two that differ (per-axis
/// parameters the API's one offset cannot say).
fn zero_points_differ(im: &Importer, n: &Node<'_>) -> bool {
    matches!(im.arg(n, 2), Ok(Some((_, Value::I64(z)))) if z.data.windows(2).any(|w| w[0] != w[1]))
}

/// A `QuantizeLinear` or `DequantizeLinear` in a form the quantised types cannot say.
pub(in crate::onnx::import) fn is_float_quantization(im: &Importer, n: &Node<'_>) -> bool {
    if attr_int(n, "block_size").ok().flatten().unwrap_or(0) != 0 {
        return true;
    }
    match n.op() {
        "QuantizeLinear" => {
            matches!(
                quantize_target(im, n),
                Ok(data_type::UINT16 | data_type::INT16)
            ) || zero_points_differ(im, n)
        }
        "DequantizeLinear" => match im.arg(n, 0) {
            Ok(Some((_, v @ Value::Tensor(_)))) => im.data_type(&v).is_ok_and(|t| t.is_integer()),
            _ => false,
        },
        _ => false,
    }
}

/// A `DynamicQuantizeLinear` whose outputs are read other than by onnxruntime's dynamic
/// pattern, or a `MatMulInteger` or `ConvInteger` not of such a `DynamicQuantizeLinear`'s
/// outputs.
pub(in crate::onnx::import) fn is_integer_form_alone(im: &Importer, n: &Node<'_>) -> bool {
    match n.op() {
        "DynamicQuantizeLinear" => !n
            .proto
            .output
            .first()
            .is_some_and(|y| im.q_targets.in_dynamic_pattern(y)),
        "MatMulInteger" | "ConvInteger" => !matches!(
            im.arg(n, 0),
            Ok(Some((_, Value::Dynamic(Dynamic::Output { .. }))))
        ),
        _ => false,
    }
}

impl Importer {
    /// Scale or zero point `v` (of shape `vs`) shaped to broadcast against `x` (of shape
    /// `xs`): as it is per tensor; along `axis` per axis; each value repeated `block` times
    /// along `axis` (and cut to `x`'s extent) when blocked.
    fn quantization_parameter(
        e: &mut Expansion,
        v: &str,
        vs: &[i64],
        xs: &[i64],
        axis: usize,
        block: i64,
    ) -> NResult<String> {
        let rank = xs.len();
        if vs.iter().product::<i64>() == 1 && block == 0 {
            return Ok(v.to_owned());
        }
        if block == 0 {
            if vs != [xs[axis]] {
                return Err(invalid(format!(
                    "per-axis parameters {vs:?} for axis {axis} of {xs:?}"
                )));
            }
            let shape: Vec<i64> = (0..rank)
                .map(|a| if a == axis { xs[axis] } else { 1 })
                .collect();
            return Ok(e.reshape(v, &shape));
        }
        let blocks = (xs[axis] + block - 1) / block;
        let mut want = xs.to_vec();
        want[axis] = blocks;
        if vs != want.as_slice() {
            return Err(invalid(format!(
                "blocked parameters {vs:?} for blocks of {block} along axis {axis} of {xs:?} \
                 (want {want:?})"
            )));
        }
        super::check_elements(
            blocks * block * xs.iter().product::<i64>() / xs[axis].max(1),
            "the blocked parameters",
        )?;
        let a = axis as i64;
        let u = e.unsqueeze(v, &[a + 1]);
        let mut wide = want.clone();
        wide.insert(axis + 1, block);
        let shape = e.i64v(&wide);
        let repeated = e.op("Expand", &[&u, &shape], Vec::new());
        let mut merged = want;
        merged[axis] = blocks * block;
        let merged = e.reshape(&repeated, &merged);
        Ok(if blocks * block == xs[axis] {
            merged
        } else {
            e.slice(&merged, &[0], &[xs[axis]], &[a])
        })
    }

    /// `QuantizeLinear` or `DequantizeLinear` computed in floats ([`is_float_quantization`]).
    pub(in crate::onnx::import) fn quantization_in_floats(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let (sn, sv) = self.req(n, 1)?;
        let zero = self.arg(n, 2)?;
        let xs: Vec<i64> = self.shape(&xv)?.iter().map(|&d| i64::from(d)).collect();
        let ss: Vec<i64> = self.shape(&sv)?.iter().map(|&d| i64::from(d)).collect();
        let block = attr_int(n, "block_size")?.unwrap_or(0);
        if block < 0 {
            return Err(invalid(format!("block_size {block}")));
        }
        // The axis matters only for per-axis or blocked parameters.
        let per_tensor = block == 0 && ss.iter().product::<i64>() == 1;
        let axis = if per_tensor {
            0
        } else {
            normalize_axis(attr_int(n, "axis")?.unwrap_or(1), xs.len())?
        };
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let scale = Self::quantization_parameter(&mut e, &sn, &ss, &xs, axis, block)?;
        if n.op() == "DequantizeLinear" {
            let x = e.op("CastLike", &[&xn, &sn], Vec::new());
            let shifted = match &zero {
                Some((zn, zv)) => {
                    let zs: Vec<i64> = self.shape(zv)?.iter().map(|&d| i64::from(d)).collect();
                    let z = e.op("CastLike", &[zn, &sn], Vec::new());
                    let z = Self::quantization_parameter(&mut e, &z, &zs, &xs, axis, block)?;
                    e.op("Sub", &[&x, &z], Vec::new())
                }
                None => x,
            };
            let y = e.op("Mul", &[&shifted, &scale], Vec::new());
            e.bind(&y, &out);
            return Ok(e.finish());
        }
        let target = quantize_target(self, n)?;
        let (lo, hi) = integer_range(target).ok_or_else(|| {
            unsupported(format!(
                "QuantizeLinear to ONNX type {target}: the 8- and 16-bit integers"
            ))
        })?;
        let x_type = onnx_type(self, &xn, &xv).unwrap_or(data_type::FLOAT);
        let divided = e.op("Div", &[&xn, &scale], Vec::new());
        let mut q = e.op("Round", &[&divided], Vec::new());
        if let Some((zn, zv)) = &zero {
            let zs: Vec<i64> = self.shape(zv)?.iter().map(|&d| i64::from(d)).collect();
            let z = e.op("CastLike", &[zn, &xn], Vec::new());
            let z = Self::quantization_parameter(&mut e, &z, &zs, &xs, axis, block)?;
            q = e.op("Add", &[&q, &z], Vec::new());
        }
        let (lo, hi) = (
            e.scalar_like(lo, &xn, x_type),
            e.scalar_like(hi, &xn, x_type),
        );
        let q = e.op("Max", &[&q, &lo], Vec::new());
        let q = e.op("Min", &[&q, &hi], Vec::new());
        let y = e.op("Cast", &[&q], vec![int("to", i64::from(target))]);
        e.bind(&y, &out);
        Ok(e.finish())
    }

    /// `DynamicQuantizeLinear` or `MatMulInteger` outside onnxruntime's dynamic pattern
    /// ([`is_integer_form_alone`]).
    pub(in crate::onnx::import) fn integer_form_alone(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        match n.op() {
            "DynamicQuantizeLinear" => self.dynamic_quantize_in_floats(n),
            _ => self.integer_product_in_doubles(n),
        }
    }

    /// `DynamicQuantizeLinear` by its definition: `scale = (max(x, 0) - min(x, 0)) / 255`,
    /// `zero_point = round(saturate(-min(x, 0) / scale))`, `y = saturate(round(x / scale) +
    /// zero_point)` in uint8.
    fn dynamic_quantize_in_floats(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let rank = self.shape(&xv)?.len() as i64;
        let mut e = Expansion::new(self, n);
        let all: Vec<i64> = (0..rank).collect();
        let zero = e.f32s(&[0.0], &[]);
        let low = e.reduce("ReduceMin", &xn, &all, false);
        let low = e.op("Min", &[&low, &zero], Vec::new());
        let high = e.reduce("ReduceMax", &xn, &all, false);
        let high = e.op("Max", &[&high, &zero], Vec::new());
        let range = e.op("Sub", &[&high, &low], Vec::new());
        let steps = e.f32s(&[255.0], &[]);
        let scale = e.op("Div", &[&range, &steps], Vec::new());
        let top = e.f32s(&[255.0], &[]);
        let clamp = |e: &mut Expansion, v: &str| {
            let v = e.op("Max", &[v, &zero], Vec::new());
            e.op("Min", &[&v, &top], Vec::new())
        };
        let negated = e.op("Neg", &[&low], Vec::new());
        let z = e.op("Div", &[&negated, &scale], Vec::new());
        let z = clamp(&mut e, &z);
        let z = e.op("Round", &[&z], Vec::new());
        let divided = e.op("Div", &[&xn, &scale], Vec::new());
        let rounded = e.op("Round", &[&divided], Vec::new());
        let shifted = e.op("Add", &[&rounded, &z], Vec::new());
        let y = clamp(&mut e, &shifted);
        let to_u8 = || int("to", i64::from(data_type::UINT8));
        let outputs = [
            e.op("Cast", &[&y], vec![to_u8()]),
            scale,
            e.op("Cast", &[&z], vec![to_u8()]),
        ];
        for (value, out) in outputs.iter().zip(&n.proto.output) {
            if !out.is_empty() {
                e.bind(value, out);
            }
        }
        Ok(e.finish())
    }

    /// `MatMulInteger` or `ConvInteger`: `(a - a_zero_point)` and `(b - b_zero_point)` in
    /// doubles (the zero points per tensor, per row of `a` or per column (per output channel)
    /// of `b`), their `MatMul` (or `Conv`, with the node's attributes), cast to int32.
    pub(in crate::onnx::import) fn integer_product_in_doubles(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        let an = self.req(n, 0)?.0;
        let (bn, bv) = self.req(n, 1)?;
        let b_shape = self.shape(&bv)?;
        let conv = n.op() == "ConvInteger";
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let double = || int("to", i64::from(data_type::DOUBLE));
        // The difference in int32 (exact for 8- and 16-bit operands, and folded exactly on
        // constants), then in doubles.
        let int32 = || int("to", i64::from(data_type::INT32));
        let operand = |e: &mut Expansion, im: &Importer, name: &str, zi: usize, per: Vec<i64>| {
            let x = e.op("Cast", &[name], vec![int32()]);
            let shifted = match im.arg(n, zi)? {
                Some((zn, zv)) => {
                    let count: u32 = im.shape(&zv)?.iter().product();
                    // Shaped first: a folded constant keeps the type its last Cast gave.
                    let z = if count > 1 { e.reshape(&zn, &per) } else { zn };
                    let z = e.op("Cast", &[&z], vec![int32()]);
                    e.op("Sub", &[&x, &z], Vec::new())
                }
                None => x,
            };
            NResult::Ok(e.op("Cast", &[&shifted], vec![double()]))
        };
        let (a_per, b_per) = if conv {
            // x's zero point is per tensor; w's per output channel ([M, 1, 1, ...]).
            let mut w = vec![-1];
            w.extend(std::iter::repeat_n(1, b_shape.len().saturating_sub(1)));
            (vec![1], w)
        } else {
            // a's per row ([M, 1]); b's per column (its last axis).
            (vec![-1, 1], vec![-1])
        };
        let a = operand(&mut e, self, &an, 2, a_per)?;
        let b = operand(&mut e, self, &bn, 3, b_per)?;
        let product = if conv {
            let attrs = n.proto.attribute.clone();
            e.op("Conv", &[&a, &b], attrs)
        } else {
            e.op("MatMul", &[&a, &b], Vec::new())
        };
        let y = e.op(
            "Cast",
            &[&product],
            vec![int("to", i64::from(data_type::INT32))],
        );
        e.bind(&y, &out);
        Ok(e.finish())
    }
}
