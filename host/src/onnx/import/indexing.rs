//! Selecting elements: `Gather` and `Slice` are folded on constants and are Backend API
//! 1.1's layers of the same names on tensors; `Split` is folded on constants and is one
//! `Slice` per output on tensors; `GatherElements` is a `Gather` from the flattened data at
//! computed flat indices; `ScatterElements` (and `Scatter`) and `ScatterND` are Backend API
//! 1.5's scatter layers.

use backplane_api::{
    BinaryOperation, ComparisonOperation, DataType, GatherDescriptor, LayerDescriptor,
    ReshapeDescriptor, ScatterElementsDescriptor, ScatterReduction, SliceDescriptor,
};

use crate::onnx::fold::Const;

use super::{
    Importer, NResult, Node, Value,
    attributes::{attr_int, attr_ints, attr_string, normalize_axis},
    invalid, unsupported,
};

impl Importer {
    /// `Gather`: folded when data and indices are constant, else Backend API 1.1's `Gather`
    /// layer (constant indices become a Signed32 constant, range-checked against the axis).
    pub(super) fn gather(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (dn, dv) = self.req(n, 0)?;
        let (iname, iv) = self.req(n, 1)?;
        let ds = self.shape(&dv)?;
        let axis = normalize_axis(attr_int(n, "axis")?.unwrap_or(0), ds.len())?;
        match (&dv, &iv) {
            (Value::I64(c), Value::I64(indices)) => {
                return Ok(vec![
                    self.store_i64(c.gather(axis, indices).map_err(invalid)?)?,
                ]);
            }
            (Value::F32(c), Value::I64(indices)) => {
                return Ok(vec![
                    self.store_f32(c.gather(axis, indices).map_err(invalid)?)?,
                ]);
            }
            (_, Value::F32(_)) => return Err(invalid("indices must be integers")),
            (_, Value::I64(indices)) => {
                // Checked here, where the error can name the node.
                let d = i64::from(ds[axis]);
                if let Some(bad) = indices.data.iter().find(|&&i| i < -d || i >= d) {
                    return Err(invalid(format!(
                        "index {bad} is out of range for axis {axis} of size {d}"
                    )));
                }
            }
            _ => {}
        }
        if !matches!(
            self.data_type(&iv)?,
            backplane_api::DataType::Signed32 | backplane_api::DataType::Signed64
        ) {
            return Err(unsupported("Gather indices that are not int32 or int64"));
        }
        let data = self.tensor(&dn, &dv)?;
        let indices = self.tensor(&iname, &iv)?;
        let d = LayerDescriptor::Gather(backplane_api::GatherDescriptor { axis: axis as u32 });
        Ok(vec![Value::Tensor(self.layer(
            n,
            None,
            d,
            &[data, indices],
        )?)])
    }

    /// `GatherElements`: `out[p] = data[p with p[axis] = indices[p]]`. The flat index of each
    /// element is `index * stride(axis) + base[p]` (a negative index first gets the axis's
    /// size added; `base` is the constant position of `p` along the other axes), and the
    /// result a `Gather` of the flattened data at those indices: every layer exact, every
    /// type the layers move.
    pub(super) fn gather_elements(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (dn, dv) = self.req(n, 0)?;
        let (iname, iv) = self.req(n, 1)?;
        let ds = self.shape(&dv)?;
        let is = self.shape(&iv)?;
        if ds.len() != is.len() || ds.is_empty() {
            return Err(invalid(format!(
                "data {ds:?} and indices {is:?} must have one rank, at least 1"
            )));
        }
        let axis = normalize_axis(attr_int(n, "axis")?.unwrap_or(0), ds.len())?;
        if let Some(k) = (0..ds.len()).find(|&k| k != axis && is[k] > ds[k]) {
            return Err(invalid(format!(
                "indices {is:?} exceed data {ds:?} along axis {k}"
            )));
        }
        // Row-major strides of the data, and the flat position of each index element along
        // the other axes.
        let mut strides = vec![1i64; ds.len()];
        for k in (0..ds.len() - 1).rev() {
            strides[k] = strides[k + 1] * i64::from(ds[k + 1]);
        }
        let count: usize = is.iter().map(|&d| d as usize).product();
        let mut base = Vec::with_capacity(count);
        let mut pos = vec![0u32; is.len()];
        for _ in 0..count {
            let b: i64 = (0..is.len())
                .filter(|&k| k != axis)
                .map(|k| i64::from(pos[k]) * strides[k])
                .sum();
            base.push(b);
            for k in (0..is.len()).rev() {
                pos[k] += 1;
                if pos[k] < is[k] {
                    break;
                }
                pos[k] = 0;
            }
        }
        let size = i64::from(ds[axis]);
        let name = |what: &str| format!("{}\u{0}{what}", n.name);
        let flat = if let Value::I64(c) = &iv {
            let mut flat = Vec::with_capacity(count);
            for (&i, &b) in c.data.iter().zip(&base) {
                if i < -size || i >= size {
                    return Err(invalid(format!(
                        "index {i} is out of range for axis {axis} of size {size}"
                    )));
                }
                flat.push((if i < 0 { i + size } else { i }) * strides[axis] + b);
            }
            let flat = Const::new(is.clone(), flat).map_err(invalid)?;
            self.integer_tensor_as(&name("flat"), &flat, DataType::Signed64)?
        } else {
            let mut idx = self.tensor(&iname, &iv)?;
            let it = self.data_type(&iv)?;
            if it != DataType::Signed64 {
                if !it.is_integer() {
                    return Err(invalid(format!("indices are {it}, not integers")));
                }
                let d = LayerDescriptor::Cast(DataType::Signed64);
                idx = self.layer(n, Some("indices"), d, &[idx])?;
            }
            let scalar = |im: &mut Self, what: &str, v: i64| {
                im.integer_tensor_as(&name(what), &Const::scalar(v), DataType::Signed64)
            };
            let zero = scalar(self, "zero", 0)?;
            let dim = scalar(self, "size", size)?;
            let stride = scalar(self, "stride", strides[axis])?;
            let base = Const::new(is.clone(), base).map_err(invalid)?;
            let base = self.integer_tensor_as(&name("base"), &base, DataType::Signed64)?;
            let negative = LayerDescriptor::Comparison(ComparisonOperation::Less);
            let neg = self.layer(n, Some("negative"), negative, &[idx, zero])?;
            let add = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
            let wrapped = self.layer(n, Some("wrapped"), add.clone(), &[idx, dim])?;
            let idx = self.layer(
                n,
                Some("index"),
                LayerDescriptor::Where,
                &[neg, wrapped, idx],
            )?;
            let mul = LayerDescriptor::ElementwiseBinary(BinaryOperation::Mul);
            let scaled = self.layer(n, Some("scaled"), mul, &[idx, stride])?;
            self.layer(n, Some("flat"), add, &[scaled, base])?
        };
        let data = self.tensor(&dn, &dv)?;
        let total = ds
            .iter()
            .try_fold(1u32, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| invalid(format!("data {ds:?} has too many elements")))?;
        let flat_data = LayerDescriptor::Reshape(ReshapeDescriptor {
            target_shape: vec![total].into(),
        });
        let data = self.layer(n, Some("data"), flat_data, &[data])?;
        let gather = LayerDescriptor::Gather(GatherDescriptor { axis: 0 });
        Ok(vec![Value::Tensor(self.layer(
            n,
            None,
            gather,
            &[data, flat],
        )?)])
    }

    pub(super) fn slice(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (_, dv) = self.req(n, 0)?;
        let (starts, ends, axes, steps) = if self.opset < 10 {
            let starts =
                attr_ints(n, "starts")?.ok_or_else(|| invalid("attribute starts is required"))?;
            let ends =
                attr_ints(n, "ends")?.ok_or_else(|| invalid("attribute ends is required"))?;
            (starts, ends, attr_ints(n, "axes")?, None)
        } else {
            let get = |i: usize, what: &str| -> NResult<Option<Vec<i64>>> {
                Ok(self.const_ints(n, i, what)?.map(|c| c.data.clone()))
            };
            let starts =
                get(1, "starts")?.ok_or_else(|| invalid("input 1 (starts) is required"))?;
            let ends = get(2, "ends")?.ok_or_else(|| invalid("input 2 (ends) is required"))?;
            (starts, ends, get(3, "axes")?, get(4, "steps")?)
        };
        let (axes, steps) = (axes.as_deref(), steps.as_deref());
        match &dv {
            Value::I64(c) => {
                let s = c.slice(&starts, &ends, axes, steps).map_err(invalid)?;
                Ok(vec![self.store_i64(s)?])
            }
            Value::F32(c) => {
                let s = c.slice(&starts, &ends, axes, steps).map_err(invalid)?;
                Ok(vec![self.store_f32(s)?])
            }
            Value::Tensor(t) => {
                // Backend API 1.1's Slice, with ONNX's ranges resolved on the known shape.
                let shape = self.shape(&dv)?;
                let ranges = crate::onnx::fold::slice_ranges(&shape, &starts, &ends, axes, steps)
                    .map_err(invalid)?;
                let whole = |(r, &dim): (&(i64, i64, u32), &u32)| *r == (0, 1, dim);
                if ranges.iter().zip(&shape).all(whole) {
                    // Every index of every axis in order (magika's exporter writes two such
                    // slices around its convolution): the input itself, no copy.
                    return Ok(vec![dv]);
                }
                let d = LayerDescriptor::Slice(SliceDescriptor {
                    // A first index is within its dimension (clamped); a count of 0 reads
                    // nothing, whatever its first index.
                    begin: ranges
                        .iter()
                        .map(|r| u32::try_from(r.0).unwrap_or(0))
                        .collect(),
                    // A step beyond i32 is clamped only where it takes one index at most.
                    step: ranges
                        .iter()
                        .map(|r| match i32::try_from(r.1) {
                            Ok(s) => Ok(s),
                            Err(_) if r.2 <= 1 => Ok(r.1.signum() as i32),
                            Err(_) => Err(unsupported(format!(
                                "Slice step {} beyond 32 bits taking {} indices",
                                r.1, r.2
                            ))),
                        })
                        .collect::<NResult<_>>()?,
                    size: ranges.iter().map(|r| r.2).collect(),
                });
                let t = *t;
                Ok(vec![Value::Tensor(self.layer(n, None, d, &[t])?)])
            }
            _ => Err(unsupported("Slice of a value that is not available")),
        }
    }

    pub(super) fn split(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (_, xv) = self.req(n, 0)?;
        let xs = self.shape(&xv)?;
        let axis = normalize_axis(attr_int(n, "axis")?.unwrap_or(0), xs.len())?;
        let outputs = n.proto.output.len();
        let dim = i64::from(xs[axis]);
        let sizes = if self.opset < 13 {
            attr_ints(n, "split")?
        } else {
            self.const_ints(n, 1, "split")?.map(|c| c.data.clone())
        };
        let sizes = match sizes {
            Some(s) => s,
            None => {
                let parts = if self.opset >= 18 {
                    attr_int(n, "num_outputs")?.unwrap_or(outputs as i64)
                } else {
                    outputs as i64
                };
                if parts < 1 || parts != outputs as i64 {
                    return Err(invalid(format!(
                        "Split into {parts} parts needs as many outputs, it has {outputs}"
                    )));
                }
                let chunk = (dim + parts - 1) / parts;
                (0..parts)
                    .map(|k| (dim - k * chunk).clamp(0, chunk))
                    .collect()
            }
        };
        let total = sizes.iter().try_fold(
            0i64,
            |acc, &s| if s < 0 { None } else { acc.checked_add(s) },
        );
        if total != Some(dim) {
            return Err(invalid(format!(
                "split sizes {sizes:?} do not add up to the dimension {dim}"
            )));
        }
        let mut out = Vec::with_capacity(sizes.len());
        let mut start = 0i64;
        for s in sizes {
            let (b, e) = ([start], [start + s]);
            let ax = [axis as i64];
            out.push(match &xv {
                Value::I64(c) => {
                    let part = c.slice(&b, &e, Some(&ax), None).map_err(invalid)?;
                    self.store_i64(part)?
                }
                Value::F32(c) => {
                    let part = c.slice(&b, &e, Some(&ax), None).map_err(invalid)?;
                    self.store_f32(part)?
                }
                Value::Tensor(t) => {
                    let t = *t;
                    let mut begin = vec![0u32; xs.len()];
                    let mut size = xs.clone();
                    begin[axis] = u32::try_from(start).map_err(|_| invalid("split start"))?;
                    size[axis] = u32::try_from(s).map_err(|_| invalid("split size"))?;
                    let d = LayerDescriptor::Slice(SliceDescriptor {
                        begin: begin.into(),
                        step: vec![1; xs.len()].into(),
                        size: size.into(),
                    });
                    let suffix = out.len().to_string();
                    Value::Tensor(self.layer(n, Some(&suffix), d, &[t])?)
                }
                _ => return Err(unsupported("the input is not available")),
            });
            start += s;
        }
        Ok(out)
    }

    /// `ScatterElements` (and opset 9's `Scatter`, the same without a reduction) and
    /// `ScatterND`: Backend API 1.5's scatter layers, with `reduction` (opset 16: none, add,
    /// mul; 18: max, min).
    pub(super) fn scatter(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let reduction = match attr_string(n, "reduction")?.as_deref() {
            None | Some("none") => ScatterReduction::None,
            Some("add") => ScatterReduction::Add,
            Some("mul") => ScatterReduction::Mul,
            Some("max") => ScatterReduction::Max,
            Some("min") => ScatterReduction::Min,
            Some(other) => return Err(invalid(format!("reduction {other:?}"))),
        };
        let (dn, dv) = self.req(n, 0)?;
        let (iname, iv) = self.req(n, 1)?;
        let (un, uv) = self.req(n, 2)?;
        let rank = self.shape(&dv)?.len();
        let layer = if n.op() == "ScatterND" {
            LayerDescriptor::ScatterNd(reduction)
        } else {
            let axis = normalize_axis(attr_int(n, "axis")?.unwrap_or(0), rank)?;
            LayerDescriptor::ScatterElements(ScatterElementsDescriptor {
                axis: axis as u32,
                reduction,
            })
        };
        let data = self.tensor(&dn, &dv)?;
        let dt = self.data_type(&Value::Tensor(data))?;
        let indices = match &iv {
            Value::I64(c) => self.integer_tensor_as(&iname, c, DataType::Signed64)?,
            v => self.tensor(&iname, v)?,
        };
        let updates = match &uv {
            Value::I64(c) if dt.is_integer() => self.integer_tensor_as(&un, c, dt)?,
            v => self.tensor(&un, v)?,
        };
        Ok(vec![Value::Tensor(self.layer(
            n,
            None,
            layer,
            &[data, indices, updates],
        )?)])
    }
}
