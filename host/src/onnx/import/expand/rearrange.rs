//! Operators that rearrange or select elements, as graphs of `Reshape`, `Transpose`,
//! `Gather`, `NonZero`, `Equal`, `Where`, `Slice` and `Pad`:
//!
//! - `DepthToSpace` (`DCR` and `CRD`) and `SpaceToDepth`: a reshape to six dimensions, a
//!   transpose, and a reshape back;
//! - `Compress`: `Gather` at the positions `NonZero` finds in the condition (a run decides
//!   their number when the condition is computed);
//! - `OneHot`: the indices (negative ones from the end) compared with `0..depth` along the
//!   new axis, selecting `on` or `off`;
//! - `GatherND`: the index tuples turned into flat positions (`Σ index_j · stride_j`, per
//!   batch) and one `Gather` from the data reshaped to `[positions, rest…]`;
//! - `CenterCropPad`: per axis, a centred `Slice` where it crops and a centred `Pad` where it
//!   pads.

use super::{Expansion, int, string};
use crate::onnx::import::{
    Importer, NResult, Node, NodeError, Value,
    attributes::{attr_int, attr_ints, attr_string, normalize_axis},
    invalid,
    queue::Pending,
    unsupported,
};

impl Importer {
    /// `DepthToSpace` and `SpaceToDepth` of a 4-D NCHW input.
    pub(in crate::onnx::import) fn depth_space(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let s = self.shape(&xv)?;
        let [b, c, h, w] = <[u32; 4]>::try_from(s.as_slice())
            .map_err(|_| unsupported(format!("{} of a {}-D input (4-D NCHW)", n.op(), s.len())))?;
        let (b, c, h, w) = (i64::from(b), i64::from(c), i64::from(h), i64::from(w));
        let k = attr_int(n, "blocksize")?.ok_or_else(|| invalid("blocksize is required"))?;
        if k <= 0 {
            return Err(invalid(format!("blocksize {k}")));
        }
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let y = if n.op() == "DepthToSpace" {
            if c % (k * k) != 0 {
                return Err(invalid(format!("{c} channels for blocksize {k}")));
            }
            let crd = attr_string(n, "mode")?.as_deref() == Some("CRD");
            let (dims, perm) = if crd {
                ([b, c / (k * k), k, k, h, w], [0, 1, 4, 2, 5, 3])
            } else {
                ([b, k, k, c / (k * k), h, w], [0, 3, 4, 1, 5, 2])
            };
            let r = e.reshape(&xn, &dims);
            let t = e.transpose(&r, &perm);
            e.reshape(&t, &[b, c / (k * k), h * k, w * k])
        } else {
            if h % k != 0 || w % k != 0 {
                return Err(invalid(format!(
                    "{h}x{w} is not a multiple of blocksize {k}"
                )));
            }
            let r = e.reshape(&xn, &[b, c, h / k, k, w / k, k]);
            let t = e.transpose(&r, &[0, 3, 5, 1, 2, 4]);
            e.reshape(&t, &[b, c * k * k, h / k, w / k])
        };
        e.bind(&y, &out);
        Ok(e.finish())
    }

    /// `Compress`: the slices along `axis` (of the flattened input without one) where the
    /// 1-D condition holds.
    pub(in crate::onnx::import) fn compress(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let (cn, cv) = self.req(n, 1)?;
        if self.shape(&cv)?.len() != 1 {
            return Err(invalid("the condition must be 1-D"));
        }
        let rank = self.shape(&xv)?.len();
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let (x, axis) = match attr_int(n, "axis")? {
            Some(a) => (xn, normalize_axis(a, rank)? as i64),
            None => (e.reshape(&xn, &[-1]), 0),
        };
        let nz = e.op("NonZero", &[&cn], Vec::new());
        let positions = e.reshape(&nz, &[-1]);
        let y = e.op("Gather", &[&x, &positions], vec![int("axis", axis)]);
        e.bind(&y, &out);
        Ok(e.finish())
    }

    /// `OneHot` (opset 9 and later): `depth` must be known at import (it sizes the output).
    pub(in crate::onnx::import) fn one_hot(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let (idx_n, idx_v) = self.req(n, 0)?;
        let (depth_n, depth_v) = self.req(n, 1)?;
        let (values_n, _) = self.req(n, 2)?;
        let depth = match &depth_v {
            Value::I64(c) if c.data.len() == 1 => c.data[0],
            // A float depth is truncated (as onnxruntime reads it).
            Value::F32(c) if c.data.len() == 1 => c.data[0] as i64,
            Value::Tensor(_) => {
                return Err(NodeError::NeedsValue {
                    message: format!(
                        "OneHot's depth ({depth_n}) is computed at run time: it sizes the \
                         output (a session runs the model in segments)"
                    ),
                    names: vec![depth_n],
                });
            }
            _ => return Err(invalid("depth must be a scalar")),
        };
        if depth <= 0 {
            return Err(invalid(format!("depth {depth}")));
        }
        let rank = self.shape(&idx_v)?.len();
        let axis = normalize_axis(attr_int(n, "axis")?.unwrap_or(-1), rank + 1)?;
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let idx = e.op("Cast", &[&idx_n], vec![int("to", 7)]);
        // Negative indices count from the end; indices outside [-depth, depth) match nothing.
        let zero = e.i64s(&[0], &[]);
        let d = e.i64s(&[depth], &[]);
        let negative = e.op("Less", &[&idx, &zero], Vec::new());
        let wrapped = e.op("Add", &[&idx, &d], Vec::new());
        let idx = e.op("Where", &[&negative, &wrapped, &idx], Vec::new());
        let idx = e.unsqueeze(&idx, &[axis as i64]);
        super::check_elements(depth, "OneHot's positions")?;
        let positions: Vec<i64> = (0..depth).collect();
        let mut dims = vec![depth];
        dims.resize(rank + 1 - axis, 1);
        let r = e.i64s(&positions, &dims);
        let hot = e.op("Equal", &[&idx, &r], Vec::new());
        let (i0, i1) = (e.i64s(&[0], &[]), e.i64s(&[1], &[]));
        let off = e.op("Gather", &[&values_n, &i0], vec![int("axis", 0)]);
        let on = e.op("Gather", &[&values_n, &i1], vec![int("axis", 0)]);
        let y = e.op("Where", &[&hot, &on, &off], Vec::new());
        e.bind(&y, &out);
        Ok(e.finish())
    }

    /// `GatherND` with `batch_dims`.
    pub(in crate::onnx::import) fn gather_nd(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let (dn, dv) = self.req(n, 0)?;
        let (in_, iv) = self.req(n, 1)?;
        let ds: Vec<i64> = self.shape(&dv)?.iter().map(|&d| i64::from(d)).collect();
        let is: Vec<i64> = self.shape(&iv)?.iter().map(|&d| i64::from(d)).collect();
        let b = attr_int(n, "batch_dims")?.unwrap_or(0);
        let b = usize::try_from(b).map_err(|_| invalid(format!("batch_dims {b}")))?;
        let k = *is
            .last()
            .ok_or_else(|| invalid("indices must have a rank of 1 or more"))?;
        let k = usize::try_from(k).map_err(|_| invalid(format!("index tuples of {k}")))?;
        if b >= is.len() || b + k > ds.len() || ds[..b] != is[..b] {
            return Err(invalid(format!(
                "indices {is:?} do not fit data {ds:?} with batch_dims {b}"
            )));
        }
        let batch: i64 = ds[..b].iter().product();
        let tuples: i64 = is[b..is.len() - 1].iter().product();
        let indexed = &ds[b..b + k];
        let cells: i64 = indexed.iter().product();
        let rest = &ds[b + k..];
        let mut strides = vec![1i64; k];
        for j in (0..k.saturating_sub(1)).rev() {
            strides[j] = strides[j + 1] * indexed[j + 1];
        }
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let idx = e.op("Cast", &[&in_], vec![int("to", 7)]);
        let idx = e.reshape(&idx, &[batch, tuples, k as i64]);
        // Negative indices count from the end of their dimension.
        let dims = e.i64v(indexed);
        let zero = e.i64s(&[0], &[]);
        let negative = e.op("Less", &[&idx, &zero], Vec::new());
        let wrapped = e.op("Add", &[&idx, &dims], Vec::new());
        let idx = e.op("Where", &[&negative, &wrapped, &idx], Vec::new());
        let st = e.i64v(&strides);
        let scaled = e.op("Mul", &[&idx, &st], Vec::new());
        let flat = e.reduce("ReduceSum", &scaled, &[2], false);
        super::check_elements(batch, "GatherND's batch offsets")?;
        let offsets: Vec<i64> = (0..batch).map(|i| i * cells).collect();
        let base = e.i64s(&offsets, &[batch, 1]);
        let flat = e.op("Add", &[&flat, &base], Vec::new());
        let mut table = vec![batch * cells];
        table.extend_from_slice(rest);
        let data = e.reshape(&dn, &table);
        let g = e.op("Gather", &[&data, &flat], vec![int("axis", 0)]);
        let mut shape = is[..is.len() - 1].to_vec();
        shape.extend_from_slice(rest);
        let y = e.reshape(&g, &shape);
        e.bind(&y, &out);
        Ok(e.finish())
    }

    /// `CenterCropPad`: `shape` (a constant) for `axes` (all by default).
    pub(in crate::onnx::import) fn center_crop_pad(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let s: Vec<i64> = self.shape(&xv)?.iter().map(|&d| i64::from(d)).collect();
        let target = self
            .const_ints(n, 1, "shape")?
            .ok_or_else(|| invalid("shape is required"))?;
        let axes: Vec<usize> = match attr_ints(n, "axes")? {
            Some(a) => a
                .iter()
                .map(|&a| normalize_axis(a, s.len()))
                .collect::<NResult<_>>()?,
            None => (0..s.len()).collect(),
        };
        if axes.len() != target.data.len() {
            return Err(invalid(format!(
                "shape has {} values for {} axes",
                target.data.len(),
                axes.len()
            )));
        }
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let mut y = xn;
        let mut pads = vec![0i64; 2 * s.len()];
        for (&axis, &want) in axes.iter().zip(&target.data) {
            let have = s[axis];
            if want < have {
                let start = (have - want) / 2;
                y = e.slice(&y, &[start], &[start + want], &[axis as i64]);
            } else if want > have {
                let before = (want - have) / 2;
                pads[axis] = before;
                pads[s.len() + axis] = want - have - before;
            }
        }
        if pads.iter().any(|&p| p != 0) {
            let p = e.i64v(&pads);
            y = if e.opset() >= 11 {
                e.op("Pad", &[&y, &p], vec![string("mode", "constant")])
            } else {
                e.op("Pad", &[&y], vec![super::ints("pads", &pads)])
            };
        }
        e.bind(&y, &out);
        Ok(e.finish())
    }
}

impl Importer {
    /// `ReverseSequence`: each batch entry's first `sequence_lens[b]` steps along
    /// `time_axis` reversed (a `GatherElements` at the reversed positions).
    pub(in crate::onnx::import) fn reverse_sequence(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let (ln, _) = self.req(n, 1)?;
        let xs: Vec<i64> = self.shape(&xv)?.iter().map(|&d| i64::from(d)).collect();
        let rank = xs.len();
        let time = normalize_axis(attr_int(n, "time_axis")?.unwrap_or(0), rank)?;
        let batch = normalize_axis(attr_int(n, "batch_axis")?.unwrap_or(1), rank)?;
        if rank < 2 || time == batch {
            return Err(invalid("time_axis and batch_axis must be two axes"));
        }
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let shaped = |along: usize, len: i64| -> Vec<i64> {
            (0..rank)
                .map(|a| if a == along { len } else { 1 })
                .collect()
        };
        super::check_elements(xs[time], "ReverseSequence's steps")?;
        let steps: Vec<i64> = (0..xs[time]).collect();
        let t = e.i64s(&steps, &shaped(time, xs[time]));
        let lens = e.op("Cast", &[&ln], vec![int("to", 7)]);
        let lens = e.reshape(&lens, &shaped(batch, xs[batch]));
        let one = e.i64s(&[1], &[]);
        let last = e.op("Sub", &[&lens, &one], Vec::new());
        let reversed = e.op("Sub", &[&last, &t], Vec::new());
        let inside = e.op("Less", &[&t, &lens], Vec::new());
        let idx = e.op("Where", &[&inside, &reversed, &t], Vec::new());
        let full = e.i64v(&xs);
        let idx = e.op("Expand", &[&idx, &full], Vec::new());
        let y = e.op(
            "GatherElements",
            &[&xn, &idx],
            vec![int("axis", time as i64)],
        );
        e.bind(&y, &out);
        Ok(e.finish())
    }

    /// `TensorScatter` (opset 24): `update` written into `past_cache` along `axis` (-2 by
    /// default) from each batch entry's `write_indices` (0 without them), wrapping around the
    /// axis in `circular` mode (a `ScatterElements`).
    pub(in crate::onnx::import) fn tensor_scatter(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        let (cn, cv) = self.req(n, 0)?;
        let (un, uv) = self.req(n, 1)?;
        let write = self.arg(n, 2)?.map(|(name, _)| name);
        let cs: Vec<i64> = self.shape(&cv)?.iter().map(|&d| i64::from(d)).collect();
        let us: Vec<i64> = self.shape(&uv)?.iter().map(|&d| i64::from(d)).collect();
        let rank = cs.len();
        if us.len() != rank || rank < 2 {
            return Err(invalid(format!("past_cache {cs:?} and update {us:?}")));
        }
        let axis = normalize_axis(attr_int(n, "axis")?.unwrap_or(-2), rank)?;
        if axis == 0 {
            return Err(invalid("the axis cannot be the batch axis"));
        }
        let circular = match attr_string(n, "mode")?.as_deref() {
            None | Some("linear") => false,
            Some("circular") => true,
            Some(other) => return Err(invalid(format!("mode {other:?}"))),
        };
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let along: Vec<i64> = (0..rank)
            .map(|a| if a == axis { us[axis] } else { 1 })
            .collect();
        super::check_elements(us[axis], "TensorScatter's positions")?;
        let steps: Vec<i64> = (0..us[axis]).collect();
        let mut idx = e.i64s(&steps, &along);
        if let Some(w) = &write {
            let mut per_batch = vec![1i64; rank];
            per_batch[0] = us[0];
            let w = e.op("Cast", &[w], vec![int("to", 7)]);
            let w = e.reshape(&w, &per_batch);
            idx = e.op("Add", &[&idx, &w], Vec::new());
        }
        if circular {
            let size = e.i64s(&[cs[axis]], &[]);
            idx = e.op("Mod", &[&idx, &size], Vec::new());
        }
        let full = e.i64v(&us);
        let idx = e.op("Expand", &[&idx, &full], Vec::new());
        let y = e.op(
            "ScatterElements",
            &[&cn, &idx, &un],
            vec![int("axis", axis as i64)],
        );
        e.bind(&y, &out);
        Ok(e.finish())
    }
}

/// Whether node `n` (a `Pad`) pads in `wrap` mode (opset 19), which `PadMode` lacks.
pub(in crate::onnx::import) fn is_wrap_pad(_: &Importer, n: &Node<'_>) -> bool {
    attr_string(n, "mode").ok().flatten().as_deref() == Some("wrap")
}

impl Importer {
    /// `Pad` in `wrap` mode: along each padded axis a `Gather` of the positions
    /// `(i - before) mod size` (a negative pad crops, as ONNX's does).
    pub(in crate::onnx::import) fn pad_wrap(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let xs: Vec<i64> = self.shape(&xv)?.iter().map(|&d| i64::from(d)).collect();
        let rank = xs.len();
        let pads = self
            .const_ints(n, 1, "pads")?
            .ok_or_else(|| invalid("input 1 (pads) is required"))?
            .data
            .clone();
        let axes: Vec<usize> = match self.const_ints(n, 3, "axes")? {
            Some(a) => a
                .data
                .iter()
                .map(|&v| normalize_axis(v, rank))
                .collect::<NResult<_>>()?,
            None => (0..rank).collect(),
        };
        if pads.len() != 2 * axes.len() {
            return Err(invalid(format!(
                "{} pads for {} axes",
                pads.len(),
                axes.len()
            )));
        }
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let mut y = xn;
        for (k, &a) in axes.iter().enumerate() {
            let (before, after, size) = (pads[k], pads[axes.len() + k], xs[a]);
            if before == 0 && after == 0 {
                continue;
            }
            let len = size + before + after;
            if size <= 0 || len <= 0 {
                return Err(invalid(format!(
                    "wrap padding of an axis of {size} to {len}"
                )));
            }
            super::check_elements(len, "the wrap padding's positions")?;
            let idx: Vec<i64> = (0..len).map(|i| (i - before).rem_euclid(size)).collect();
            let idx = e.i64v(&idx);
            y = e.op("Gather", &[&y, &idx], vec![int("axis", a as i64)]);
        }
        e.bind(&y, &out);
        Ok(e.finish())
    }
}

/// The node's first output (which the expansion binds).
pub(super) fn first_output(n: &Node<'_>) -> NResult<String> {
    n.proto
        .output
        .first()
        .filter(|o| !o.is_empty())
        .cloned()
        .ok_or_else(|| invalid(format!("{} has no output", n.op())))
}
