//! Operators on shape and layout: `Reshape`, `Flatten`, `Squeeze` and `Unsqueeze` (folded
//! on constants, a `Reshape` or `Flatten` layer on tensors), `Concat` and `Transpose`
//! (folded, or a `Concat` / `Transpose` layer), `Shape` (always a constant), and `Pad` (a
//! `Pad` layer).

use backplane_api::{
    ConcatDescriptor, FlattenDescriptor, LayerDescriptor, PadDescriptor, PadMode, PadPair,
    TransposeDescriptor,
};

use super::{
    Importer, NResult, Node, Value,
    attributes::{
        attr_flag, attr_float, attr_int, attr_ints, attr_string, distinct_axes, normalize_axis,
        to_u32,
    },
    invalid, unsupported,
};
use crate::onnx::fold::Const;

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

impl Importer {
    pub(super) fn reshape(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
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

    pub(super) fn flatten(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
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

    pub(super) fn concat(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
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
            // Integer constants beside integer tensors (shape arithmetic on values computed
            // at run time): a Concat layer of the tensors' type.
            let tensor_type = args.iter().find_map(|(_, v)| match v {
                Value::Tensor(t) => self.builder.tensor_info(*t).map(|i| i.data_type),
                _ => None,
            });
            let Some(dt) = tensor_type.filter(|t| t.is_integer()) else {
                return Err(unsupported(
                    "concatenation of integer constants with float tensors",
                ));
            };
            let mut inputs = Vec::with_capacity(args.len());
            for (name, v) in &args {
                inputs.push(match v {
                    Value::I64(c) => self.integer_tensor_as(name, c, dt)?,
                    v => self.tensor(name, v)?,
                });
            }
            let d = LayerDescriptor::Concat(ConcatDescriptor { axis: axis as u32 });
            return Ok(vec![Value::Tensor(self.layer(n, None, d, &inputs)?)]);
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

    pub(super) fn transpose(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
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

    pub(super) fn pad(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
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
            // An integer tensor's constant is an integer; the descriptor holds an f32, which
            // must hold it exactly.
            let value = match self.arg(n, 2)? {
                Some((name, Value::I64(c))) => match c.data.as_slice() {
                    [v] if (*v as f32) as i64 == *v => *v as f32,
                    [v] => {
                        return Err(unsupported(format!(
                            "constant_value ({name}) {v} is not exact in the Pad layer's f32"
                        )));
                    }
                    _ => return Err(invalid(format!("constant_value ({name}) must be a scalar"))),
                },
                _ => self.const_scalar(n, 2, "constant_value")?.unwrap_or(0.0),
            };
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

    pub(super) fn shape_op(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
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

    /// `Size`: the number of elements of its input, folded (shapes are known at import).
    pub(super) fn size_op(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (_, xv) = self.req(n, 0)?;
        let count = self
            .shape(&xv)?
            .iter()
            .try_fold(1i64, |acc, &d| acc.checked_mul(i64::from(d)))
            .ok_or_else(|| invalid("the element count overflows int64"))?;
        Ok(vec![self.store_i64(Const::scalar(count))?])
    }

    /// The `axes` of Squeeze / Unsqueeze: an attribute before opset 13, an input from 13.
    fn squeeze_axes(&self, n: &Node<'_>) -> NResult<Option<Vec<i64>>> {
        if self.opset < 13 {
            attr_ints(n, "axes")
        } else {
            Ok(self.const_ints(n, 1, "axes")?.map(|c| c.data.clone()))
        }
    }

    pub(super) fn unsqueeze(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
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

    pub(super) fn squeeze(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
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
}

impl Importer {
    /// `Expand`: folded on constants, else Backend API 1.1's `BroadcastTo` to the broadcast of
    /// the input's shape and the (constant) target.
    pub(super) fn expand(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let spec = self
            .const_ints(n, 1, "shape")?
            .ok_or_else(|| invalid("input 1 (shape) is required"))?;
        let target = spec
            .data
            .iter()
            .map(|&d| u32::try_from(d).map_err(|_| invalid(format!("dimension {d} in shape"))))
            .collect::<NResult<Vec<u32>>>()?;
        let xs = self.shape(&xv)?;
        let out = backplane_api::shapes::broadcast(&xs, &target).map_err(invalid)?;
        match &xv {
            Value::F32(c) => Ok(vec![
                self.store_f32(c.broadcast_to(&out).map_err(invalid)?)?,
            ]),
            Value::I64(c) => Ok(vec![
                self.store_i64(c.broadcast_to(&out).map_err(invalid)?)?,
            ]),
            _ if out == xs => Ok(vec![xv]),
            _ => {
                let x = self.tensor(&xn, &xv)?;
                let d = LayerDescriptor::BroadcastTo(backplane_api::BroadcastToDescriptor {
                    shape: out.into(),
                });
                Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)])
            }
        }
    }
}
