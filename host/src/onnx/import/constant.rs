//! Operators that make or pass on values without a layer: `Constant`, `ConstantOfShape` and `Range`
//! (constants), `Identity` and inference-mode `Dropout` (their input), `Cast` (folded on
//! constants; a tensor cast to its own type is itself, else Backend API 1.1's `Cast`).

use std::sync::Arc;

use backplane_api::LayerDescriptor;

use super::{
    Importer, NResult, Node, NodeError, Value,
    attributes::{attr_float, attr_floats, attr_int, attr_ints, attr_tensor, to_u32},
    constants::tensor_value,
    invalid, unsupported,
};
use crate::onnx::{
    fold::{Const, numel},
    proto::data_type,
};

impl Importer {
    pub(super) fn constant(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
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

    pub(super) fn constant_of_shape(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
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
            None => Value::F32(Arc::new(Const::scalar(0.0))),
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

    /// `Range` (opset 11): `start`, `start + delta`, ... up to `limit` (excluded), folded. Its
    /// three scalars are constants, or values a segment computed first
    /// ([`segments`](super::segments)).
    pub(super) fn range(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        // Opset 27: float16 and bfloat16 computed in float32 (stash_type 1), as here.
        if attr_int(n, "stash_type")?.is_some_and(|t| t != 1) {
            return Err(unsupported("Range with stash_type other than 1 (float)"));
        }
        let mut runtime = Vec::new();
        let mut args = Vec::with_capacity(3);
        for (i, what) in ["start", "limit", "delta"].into_iter().enumerate() {
            let (name, v) = self.req(n, i)?;
            if matches!(v, Value::Tensor(_)) {
                runtime.push(name.clone());
            }
            args.push((what, name, v));
        }
        if !runtime.is_empty() {
            return Err(NodeError::NeedsValue {
                message: format!("Range's {} must be constants", runtime.join(", ")),
                names: runtime,
            });
        }
        let scalar_len = |what: &str, name: &str, len: usize| {
            if len == 1 {
                Ok(())
            } else {
                Err(invalid(format!("{what} ({name}) must be a scalar")))
            }
        };
        match (&args[0].2, &args[1].2, &args[2].2) {
            (Value::I64(a), Value::I64(b), Value::I64(c)) => {
                for ((what, name, _), c) in args.iter().zip([a, b, c]) {
                    scalar_len(what, name, c.data.len())?;
                }
                let (start, limit, delta) = (a.data[0], b.data[0], c.data[0]);
                if delta == 0 {
                    return Err(invalid("delta is 0"));
                }
                // ceil((limit - start) / delta), in i128 so that no difference overflows.
                let span = i128::from(limit) - i128::from(start);
                let d = i128::from(delta);
                let count = ((span + d - d.signum()) / d).max(0);
                let count = u32::try_from(count)
                    .map_err(|_| invalid(format!("Range of {count} elements")))?;
                numel(&[count]).map_err(invalid)?;
                let data = (0..i64::from(count))
                    .map(|k| start.wrapping_add(k.wrapping_mul(delta)))
                    .collect();
                if let Some(t) = self.elem_type(&args[0].1)
                    && let Some(out) = n.proto.output.first()
                {
                    self.local_types.insert(out.clone(), t);
                }
                Ok(vec![self.store_i64(
                    Const::new(vec![count], data).map_err(invalid)?,
                )?])
            }
            (Value::F32(a), Value::F32(b), Value::F32(c)) => {
                for ((what, name, _), c) in args.iter().zip([a, b, c]) {
                    scalar_len(what, name, c.data.len())?;
                }
                let (start, limit, delta) = (a.data[0], b.data[0], c.data[0]);
                let count = ((limit - start) / delta).ceil();
                if !count.is_finite() {
                    return Err(invalid(format!("Range from {start} to {limit} by {delta}")));
                }
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                // reason: checked finite, clamped at 0 and below u32::MAX first
                let count = count.clamp(0.0, f32::from(u16::MAX) * f32::from(u16::MAX)) as u32;
                numel(&[count]).map_err(invalid)?;
                #[allow(clippy::cast_precision_loss)]
                // reason: an index below MAX_ELEMENTS, as onnxruntime computes it in the element type
                let data = (0..count).map(|k| start + k as f32 * delta).collect();
                Ok(vec![self.store_f32(
                    Const::new(vec![count], data).map_err(invalid)?,
                )?])
            }
            _ => Err(unsupported(
                "Range of mixed or non-numeric types (start, limit and delta must be of one type)",
            )),
        }
    }

    /// `Identity`: its input.
    pub(super) fn identity(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        Ok(vec![self.req(n, 0)?.1])
    }

    /// `Optional` of a value, `OptionalGetElement` of one and `OptionalHasElement` (opsets 15
    /// and 18) where the optional is a tensor or absent: the importer holds no optional
    /// values, so an `Optional` is its one input (one without an input, an empty optional, is
    /// refused), `OptionalGetElement` of a tensor is that tensor, and `OptionalHasElement` is
    /// the constant `true` for a present input and `false` for none.
    pub(super) fn optional(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let present = self.arg(n, 0)?;
        match (n.op(), present) {
            ("OptionalHasElement", present) => {
                let has = crate::onnx::fold::Const::scalar(i64::from(present.is_some()));
                if let Some(out) = n.proto.output.first() {
                    self.local_types.insert(out.clone(), data_type::BOOL);
                }
                Ok(vec![self.store_i64(has)?])
            }
            (_, Some((_, v))) => Ok(vec![v]),
            (op, None) => Err(unsupported(format!(
                "{op} of an empty optional: the importer holds no optional values"
            ))),
        }
    }

    /// Inference-mode Dropout is the identity (as is every Dropout before opset 12, which
    /// runtimes run in inference mode). Opset 12's `training_mode` input with a non-zero
    /// ratio drops values at random, which no v1 layer does.
    pub(super) fn dropout(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
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
        // In inference (or with ratio 0) nothing is dropped: the mask is all true.
        let mask = match n.proto.output.get(1).filter(|o| !o.is_empty()) {
            None => Value::Unusable("the mask output of Dropout is not read".to_owned()),
            Some(_) => {
                let shape = self.shape(&x)?;
                let count: usize = shape.iter().map(|&d| d as usize).product();
                let t = backplane_api::ConstTensor {
                    info: backplane_api::TensorInfo::new(&shape, backplane_api::DataType::Boolean)
                        .constant(),
                    data: vec![1u8; count].into(),
                };
                let name = self.unique(&format!("{}/mask", n.name));
                Value::Tensor(self.builder.add_constant(&name, t)?)
            }
        };
        Ok(vec![x, mask])
    }

    /// `BitCast` (opset 26): Backend API 1.5's layer of the same name, on the input as a
    /// tensor of its type (a constant added as one).
    pub(super) fn bit_cast(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let to = attr_int(n, "to")?.ok_or_else(|| invalid("attribute to is required"))?;
        let to = i32::try_from(to)
            .ok()
            .and_then(data_type::plain)
            .ok_or_else(|| {
                unsupported(format!(
                    "BitCast to ONNX type {to}: the plain numeric and bool types"
                ))
            })?;
        let (name, v) = self.req(n, 0)?;
        let x = self.tensor(&name, &v)?;
        let y = self.layer(n, None, LayerDescriptor::BitCast(to), &[x])?;
        Ok(vec![Value::Tensor(y)])
    }

    pub(super) fn cast(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let to = attr_int(n, "to")?.ok_or_else(|| invalid("attribute to is required"))?;
        self.cast_to(n, i32::try_from(to).unwrap_or(data_type::UNDEFINED))
    }

    /// `CastLike` (opset 15): `Cast` to the type of its second input.
    pub(super) fn cast_like(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (name, like) = self.req(n, 1)?;
        let to = match &like {
            Value::Tensor(_) => self.data_type(&like)?.onnx_code(),
            // A constant's declared type, else what the importer holds it as.
            Value::F32(_) | Value::I64(_) => {
                self.elem_type(&name)
                    .unwrap_or(if matches!(like, Value::F32(_)) {
                        data_type::FLOAT
                    } else {
                        data_type::INT64
                    })
            }
            _ => return Err(unsupported(format!("the type of {name} is not known"))),
        };
        self.cast_to(n, to)
    }

    /// Input 0 of `n` cast to the ONNX element type `to`.
    fn cast_to(&mut self, n: &Node<'_>, to: i32) -> NResult<Vec<Value>> {
        let (_, xv) = self.req(n, 0)?;
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
        if let (Value::F32(c), data_type::FLOAT16 | data_type::BFLOAT16) = (&xv, to) {
            // Rounded to the 16-bit type now; the value keeps that type when it becomes a
            // tensor.
            let round = |v: f32| {
                if to == data_type::FLOAT16 {
                    half::f16::from_f32(v).to_f32()
                } else {
                    half::bf16::from_f32(v).to_f32()
                }
            };
            let rounded = c.try_map(|v| Ok(round(v))).map_err(invalid)?;
            if let Some(out) = n.proto.output.first() {
                self.local_types.insert(out.clone(), to);
            }
            return Ok(vec![self.store_f32(rounded)?]);
        }
        // A constant cast to double keeps its f32 value (exact: every f32 is a double), and
        // the type, so that it becomes a Float64 tensor where a layer reads it.
        // So does a constant cast to an integer type, so that it becomes a tensor of that type
        // where a layer reads it.
        if (to == data_type::DOUBLE || integer)
            && matches!(xv, Value::F32(_) | Value::I64(_))
            && let Some(out) = n.proto.output.first()
        {
            self.local_types.insert(out.clone(), to);
        }
        match (&xv, float, integer) {
            (Value::F32(_), true, _) => Ok(vec![xv]),
            (Value::I64(c), true, _) => {
                let f = c
                    .try_map(|v| {
                        if to == data_type::DOUBLE && (v as f32) as i64 != v {
                            Err(format!(
                                "{v} as a double constant (held in f32) is not exact"
                            ))
                        } else {
                            Ok(v as f32)
                        }
                    })
                    .map_err(invalid)?;
                Ok(vec![self.store_f32(f)?])
            }
            (Value::I64(c), _, true) if to == data_type::BOOL => {
                let b = c.try_map(|v| Ok(bool_of(v))).map_err(invalid)?;
                Ok(vec![self.store_i64(b)?])
            }
            // Keeps the low bits, as the Cast layer does.
            (Value::I64(c), _, true) => {
                let wrapped = c.try_map(|v| Ok(wrap_integer(v, to))).map_err(invalid)?;
                Ok(vec![self.store_i64(wrapped)?])
            }
            (Value::F32(c), _, true) => {
                let i = c
                    .try_map(|v| {
                        if !v.is_finite() {
                            Err(format!("cannot cast {v} to an integer"))
                        } else if to == data_type::BOOL {
                            Ok(i64::from(v != 0.0))
                        } else {
                            Ok(wrap_integer(v.trunc() as i64, to))
                        }
                    })
                    .map_err(invalid)?;
                Ok(vec![self.store_i64(i)?])
            }
            (Value::Tensor(t), _, _) => {
                let Some(target) = data_type::plain(to) else {
                    return Err(unsupported(format!(
                        "Cast of a tensor to {} (tensors are numeric or bool)",
                        data_type::name(to)
                    )));
                };
                let t = *t;
                if self.data_type(&xv)? == target {
                    return Ok(vec![xv]);
                }
                Ok(vec![Value::Tensor(self.layer(
                    n,
                    None,
                    LayerDescriptor::Cast(target),
                    &[t],
                )?)])
            }
            _ => Err(unsupported(format!(
                "Cast to {} of this value",
                data_type::name(to)
            ))),
        }
    }
}

/// `v` cast to the ONNX integer type `to` (its low bits, two's complement), as an `i64`.
fn wrap_integer(v: i64, to: i32) -> i64 {
    match to {
        data_type::INT32 => i64::from(v as i32),
        data_type::INT16 => i64::from(v as i16),
        data_type::INT8 => i64::from(v as i8),
        data_type::UINT16 => i64::from(v as u16),
        data_type::UINT8 => i64::from(v as u8),
        _ => v,
    }
}
