//! Spatial operators as pooling, scatters and products:
//!
//! - `LpPool`: `(Σ |x|^p)^(1/p)` over each window, the sum an `AveragePool` that counts the
//!   padding (the padding's zeros add nothing) times the window's size;
//! - `MaxUnpool`: each value scattered (`ScatterND`) to the flat position its index gives in a
//!   zero output of `output_shape` (or the shape pooling's inverse gives);
//! - `Col2Im`: every column entry added (`ScatterND` with `add`) at its position in the
//!   padded image, whose padding is then cut off;
//! - `AffineGrid`: the normalised base grid (`[-1, 1]`, with or without the corners aligned)
//!   times each `theta`;
//! - `MaxPool` with its `Indices` output (2-D): the pooled maximum, then each window's tap
//!   that holds it, the first in row-major order as onnxruntime's kernel keeps it (the input
//!   padded with -inf, one strided `Slice` per tap compared with the maximum, padding masked
//!   out, the taps taken from the last so that the first match is the one kept), its position in the input (`storage_order` 0 row-major, 1 column-major within each
//!   plane) plus the plane's offset.

use super::{Expansion, int, rearrange::first_output, string};
use crate::onnx::import::{
    Importer, NResult, Node, NodeError, Value,
    attributes::{attr_int, attr_ints},
    invalid,
    queue::Pending,
    unsupported,
};

/// A 1-D integer input that sizes the output (see `signal.rs`'s `size_input`).
fn ints_input(im: &Importer, n: &Node<'_>, i: usize, what: &str) -> NResult<Option<Vec<i64>>> {
    match im.arg(n, i)? {
        None => Ok(None),
        Some((_, Value::I64(c))) => Ok(Some(c.data.clone())),
        Some((name, Value::Tensor(_))) => Err(NodeError::NeedsValue {
            message: format!(
                "{what} ({name}) is computed at run time: it sizes the output (a session runs \
                 the model in segments)"
            ),
            names: vec![name],
        }),
        Some((name, _)) => Err(invalid(format!("{what} ({name}) must be integers"))),
    }
}

/// The attributes of a pooling node that `AveragePool` takes too.
const POOL_ATTRIBUTES: [&str; 6] = [
    "auto_pad",
    "ceil_mode",
    "dilations",
    "kernel_shape",
    "pads",
    "strides",
];

impl Importer {
    /// `LpPool`.
    pub(in crate::onnx::import) fn lp_pool(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let p = attr_int(n, "p")?.unwrap_or(2);
        if p <= 0 {
            return Err(invalid(format!("p = {p}")));
        }
        let kernel =
            attr_ints(n, "kernel_shape")?.ok_or_else(|| invalid("kernel_shape is required"))?;
        let size: i64 = kernel.iter().product();
        let elem = self.data_type(&xv)?.onnx_code();
        let mut attrs: Vec<_> = n
            .proto
            .attribute
            .iter()
            .filter(|a| POOL_ATTRIBUTES.contains(&a.name.as_str()))
            .cloned()
            .collect();
        attrs.push(int("count_include_pad", 1));
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let a = e.op("Abs", &[&xn], Vec::new());
        let pw = if p == 1 {
            a
        } else if p == 2 {
            e.op("Mul", &[&a, &a], Vec::new())
        } else {
            let c = e.scalar_like(p as f32, &xn, elem);
            e.op("Pow", &[&a, &c], Vec::new())
        };
        let mean = e.op("AveragePool", &[&pw], attrs);
        let k = e.scalar_like(size as f32, &xn, elem);
        let sum = e.op("Mul", &[&mean, &k], Vec::new());
        let y = match p {
            1 => sum,
            2 => e.op("Sqrt", &[&sum], Vec::new()),
            _ => {
                let c = e.scalar_like(1.0 / p as f32, &xn, elem);
                e.op("Pow", &[&sum, &c], Vec::new())
            }
        };
        e.bind(&y, &out);
        Ok(e.finish())
    }

    /// `MaxUnpool`.
    pub(in crate::onnx::import) fn max_unpool(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let (idx, _) = self.req(n, 1)?;
        let xs: Vec<i64> = self.shape(&xv)?.iter().map(|&d| i64::from(d)).collect();
        let spatial = xs.len().saturating_sub(2);
        let requested = ints_input(self, n, 2, "output_shape")?;
        let kernel =
            attr_ints(n, "kernel_shape")?.ok_or_else(|| invalid("kernel_shape is required"))?;
        let strides = attr_ints(n, "strides")?.unwrap_or_else(|| vec![1; spatial]);
        let pads = attr_ints(n, "pads")?.unwrap_or_else(|| vec![0; 2 * spatial]);
        if kernel.len() != spatial || strides.len() != spatial || pads.len() != 2 * spatial {
            return Err(invalid(
                "kernel_shape, strides and pads do not fit the input",
            ));
        }
        // The indices address the shape pooling's inverse gives; a larger output_shape holds
        // it at its origin, zeros after.
        let mut shape = xs[..2].to_vec();
        for d in 0..spatial {
            shape.push((xs[2 + d] - 1) * strides[d] - pads[d] - pads[spatial + d] + kernel[d]);
        }
        let grow: Vec<i64> = match &requested {
            Some(r) if r.len() == shape.len() && r.iter().zip(&shape).all(|(a, b)| a >= b) => {
                r.iter().zip(&shape).map(|(a, b)| a - b).collect()
            }
            Some(r) => {
                return Err(invalid(format!(
                    "output_shape {r:?} is smaller than the unpooled {shape:?}"
                )));
            }
            None => vec![0; shape.len()],
        };
        let total: i64 = shape.iter().product();
        super::check_elements(total, "MaxUnpool's output")?;
        if shape.len() != xs.len() || total <= 0 {
            return Err(unsupported(format!("MaxUnpool to {shape:?}")));
        }
        let elem = self.data_type(&xv)?.onnx_code();
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let zeros = e.f32s_like(&vec![0.0; total as usize], &[total], &xn, elem);
        let at = e.reshape(&idx, &[-1, 1]);
        let values = e.reshape(&xn, &[-1]);
        let flat = e.op("ScatterND", &[&zeros, &at, &values], Vec::new());
        let mut y = e.reshape(&flat, &shape);
        if grow.iter().any(|&g| g != 0) {
            let mut p = vec![0i64; grow.len()];
            p.extend(&grow);
            let p = e.i64v(&p);
            y = e.op("Pad", &[&y, &p], vec![string("mode", "constant")]);
        }
        e.bind(&y, &out);
        Ok(e.finish())
    }

    /// `Col2Im`.
    pub(in crate::onnx::import) fn col2im(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let image = ints_input(self, n, 1, "image_shape")?
            .ok_or_else(|| invalid("image_shape is required"))?;
        let block = ints_input(self, n, 2, "block_shape")?
            .ok_or_else(|| invalid("block_shape is required"))?;
        let dims = image.len();
        if block.len() != dims || dims == 0 {
            return Err(invalid(format!(
                "image_shape {image:?} and block_shape {block:?}"
            )));
        }
        let dil = attr_ints(n, "dilations")?.unwrap_or_else(|| vec![1; dims]);
        let strides = attr_ints(n, "strides")?.unwrap_or_else(|| vec![1; dims]);
        let pads = attr_ints(n, "pads")?.unwrap_or_else(|| vec![0; 2 * dims]);
        if dil.len() != dims || strides.len() != dims || pads.len() != 2 * dims {
            return Err(invalid(
                "dilations, strides and pads do not fit image_shape",
            ));
        }
        let xs: Vec<i64> = self.shape(&xv)?.iter().map(|&d| i64::from(d)).collect();
        let [batch, ck, l] = <[i64; 3]>::try_from(xs.as_slice())
            .map_err(|_| invalid(format!("the input must be 3-D, got {xs:?}")))?;
        let k: i64 = block.iter().product();
        if k <= 0 || ck % k != 0 {
            return Err(invalid(format!("{ck} rows for blocks of {k}")));
        }
        let c = ck / k;
        let padded: Vec<i64> = (0..dims)
            .map(|d| image[d] + pads[d] + pads[dims + d])
            .collect();
        let grid: Vec<i64> = (0..dims)
            .map(|d| (padded[d] - dil[d] * (block[d] - 1) - 1) / strides[d] + 1)
            .collect();
        if grid.iter().product::<i64>() != l || grid.iter().any(|&g| g <= 0) {
            return Err(invalid(format!(
                "{l} blocks do not tile the padded image {padded:?}"
            )));
        }
        let positions: i64 = padded.iter().product();
        super::check_elements(c * positions * batch, "Col2Im's image")?;
        super::check_elements(2 * c * k * l, "Col2Im's positions")?;
        // The position in the padded image of each (kernel offset, block) pair, row-major.
        let unravel = |mut f: i64, shape: &[i64]| -> Vec<i64> {
            let mut v = vec![0; shape.len()];
            for d in (0..shape.len()).rev() {
                v[d] = f % shape[d];
                f /= shape[d];
            }
            v
        };
        let mut tuples = Vec::with_capacity((c * k * l * 2) as usize);
        for ch in 0..c {
            for kk in 0..k {
                let ko = unravel(kk, &block);
                for ll in 0..l {
                    let bo = unravel(ll, &grid);
                    let flat = (0..dims).fold(0, |acc, d| {
                        acc * padded[d] + bo[d] * strides[d] + ko[d] * dil[d]
                    });
                    tuples.push(ch);
                    tuples.push(flat);
                }
            }
        }
        let elem = self.data_type(&xv)?.onnx_code();
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let idx = e.i64s(&tuples, &[c * k * l, 2]);
        let zeros = e.f32s_like(
            &vec![0.0; (c * positions * batch) as usize],
            &[c, positions, batch],
            &xn,
            elem,
        );
        let flat = e.reshape(&xn, &[batch, -1]);
        let updates = e.transpose(&flat, &[1, 0]);
        let summed = e.op(
            "ScatterND",
            &[&zeros, &idx, &updates],
            vec![string("reduction", "add")],
        );
        let t = e.transpose(&summed, &[2, 0, 1]);
        let mut full = vec![batch, c];
        full.extend(&padded);
        let mut y = e.reshape(&t, &full);
        if pads.iter().any(|&p| p != 0) {
            let starts: Vec<i64> = pads[..dims].to_vec();
            let ends: Vec<i64> = (0..dims).map(|d| pads[d] + image[d]).collect();
            let axes: Vec<i64> = (2..2 + dims as i64).collect();
            y = e.slice(&y, &starts, &ends, &axes);
        }
        e.bind(&y, &out);
        Ok(e.finish())
    }

    /// `AffineGrid` (2-D and 3-D).
    pub(in crate::onnx::import) fn affine_grid(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let (tn, tv) = self.req(n, 0)?;
        let size = ints_input(self, n, 1, "size")?.ok_or_else(|| invalid("size is required"))?;
        let align = attr_int(n, "align_corners")?.unwrap_or(0) != 0;
        let spatial: Vec<i64> = size.get(2..).map(<[i64]>::to_vec).unwrap_or_default();
        let dims = spatial.len();
        let ts = self.shape(&tv)?;
        if !(dims == 2 || dims == 3)
            || ts.len() != 3
            || ts[1] as usize != dims
            || ts[2] as usize != dims + 1
        {
            return Err(invalid(format!("theta {ts:?} for size {size:?}")));
        }
        let coord = |i: i64, s: i64| -> f32 {
            if align {
                if s > 1 {
                    -1.0 + 2.0 * i as f32 / (s - 1) as f32
                } else {
                    0.0
                }
            } else {
                (2 * i + 1) as f32 / s as f32 - 1.0
            }
        };
        let points: i64 = spatial.iter().product();
        super::check_elements(points * (dims as i64 + 1), "AffineGrid's base grid")?;
        let mut base = Vec::with_capacity((points as usize) * (dims + 1));
        for p in 0..points {
            // Row-major over (D,) H, W; the coordinates are (x, y(, z)): W first.
            let mut rest = p;
            let mut idx = vec![0i64; dims];
            for d in (0..dims).rev() {
                idx[d] = rest % spatial[d];
                rest /= spatial[d];
            }
            for d in (0..dims).rev() {
                base.push(coord(idx[d], spatial[d]));
            }
            base.push(1.0);
        }
        let elem = self.data_type(&tv)?.onnx_code();
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let b = e.f32s_like(&base, &[1, points, dims as i64 + 1], &tn, elem);
        let tt = e.transpose(&tn, &[0, 2, 1]);
        let g = e.op("MatMul", &[&b, &tt], Vec::new());
        let mut shape = vec![size[0]];
        shape.extend(&spatial);
        shape.push(dims as i64);
        let y = e.reshape(&g, &shape);
        e.bind(&y, &out);
        Ok(e.finish())
    }
}

/// Whether node `n` is a `MaxPool` whose `Indices` output is used.
pub(in crate::onnx::import) fn has_pool_indices(n: &Node<'_>) -> bool {
    n.proto.output.get(1).is_some_and(|o| !o.is_empty())
}

impl Importer {
    /// `MaxPool` with its `Indices` output, of a 4-D NCHW float input (see the module's
    /// notes).
    pub(in crate::onnx::import) fn max_pool_with_indices(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        use backplane_api::{DataType, LayerDescriptor, PoolingType, TensorInfo, shapes};
        let (xn, xv) = self.req(n, 0)?;
        let xs = self.shape(&xv)?;
        if xs.len() != 4 || self.opset < 11 {
            return Err(unsupported(format!(
                "the Indices output of MaxPool of a rank-{} input in opset {} (4-D inputs, \
                 opset 11 and later)",
                xs.len(),
                self.opset
            )));
        }
        let d = crate::onnx::import::pool::pool_descriptor(n, &xs, PoolingType::Max)?;
        let (pooling, [dy, dx]) = match &d {
            LayerDescriptor::Pooling2d(p) => (p.clone(), [1, 1]),
            LayerDescriptor::DilatedPooling2d(p) => {
                (p.pooling.clone(), [p.dilation_y, p.dilation_x])
            }
            _ => unreachable!("pool_descriptor gives a pooling layer"),
        };
        let ys = shapes::output_shapes(&d, &[TensorInfo::new(&xs, DataType::Float32)])
            .map_err(invalid)?
            .remove(0);
        let [n_, c, h, w] = [xs[0], xs[1], xs[2], xs[3]].map(i64::from);
        let (oh, ow) = (i64::from(ys[2]), i64::from(ys[3]));
        let (kh, kw) = (
            i64::from(pooling.pool_height),
            i64::from(pooling.pool_width),
        );
        let (sy, sx) = (i64::from(pooling.stride_y), i64::from(pooling.stride_x));
        let (dy, dx) = (i64::from(dy), i64::from(dx));
        let (top, left) = (
            i64::from(pooling.padding.top),
            i64::from(pooling.padding.left),
        );
        let column_major = attr_int(n, "storage_order")?.unwrap_or(0) == 1;
        let elements = n_ * c * oh * ow;
        super::check_elements(elements.saturating_mul(kh * kw), "MaxPool's indices")?;
        let out = first_output(n)?;
        let indices = n.proto.output[1].clone();
        let attrs = n.proto.attribute.clone();
        let mut e = Expansion::new(self, n);
        let y = e.op("MaxPool", &[&xn], attrs);
        // The input padded with -inf so that every window's taps exist (ceil mode's last
        // window included).
        let (span_h, span_w) = (
            (oh - 1) * sy + (kh - 1) * dy + 1,
            (ow - 1) * sx + (kw - 1) * dx + 1,
        );
        let (bottom, right) = ((span_h - h - top).max(0), (span_w - w - left).max(0));
        let pads = e.i64v(&[0, 0, top, left, 0, 0, bottom, right]);
        let low = e.f32s(&[f32::NEG_INFINITY], &[]);
        let low = e.op("CastLike", &[&low, &xn], Vec::new());
        let padded = e.op("Pad", &[&xn, &pads, &low], vec![string("mode", "constant")]);
        // The taps from the last to the first: each one that holds the maximum replaces the
        // index found so far, so the first in row-major order is the one left.
        let mut chosen: Option<String> = None;
        for ky in (0..kh).rev() {
            for kx in (0..kw).rev() {
                let (y0, x0) = (ky * dy, kx * dx);
                let (starts, ends) = (
                    e.i64v(&[y0, x0]),
                    e.i64v(&[y0 + (oh - 1) * sy + 1, x0 + (ow - 1) * sx + 1]),
                );
                let (axes, steps) = (e.i64v(&[2, 3]), e.i64v(&[sy, sx]));
                let taps = e.op(
                    "Slice",
                    &[&padded, &starts, &ends, &axes, &steps],
                    Vec::new(),
                );
                let mut hit = e.op("Equal", &[&taps, &y], Vec::new());
                // Each output position's input row and column under this tap, and whether it
                // lies inside the input (not the padding).
                let mut at = Vec::with_capacity((oh * ow) as usize);
                let mut inside = Vec::with_capacity((oh * ow) as usize);
                for oy in 0..oh {
                    for ox in 0..ow {
                        let (iy, ix) = (oy * sy + y0 - top, ox * sx + x0 - left);
                        inside.push(iy >= 0 && iy < h && ix >= 0 && ix < w);
                        at.push(if column_major {
                            ix * h + iy
                        } else {
                            iy * w + ix
                        });
                    }
                }
                if inside.iter().any(|&i| !i) {
                    let mask: Vec<i64> = inside.iter().map(|&i| i64::from(i)).collect();
                    let mask = e.i64s(&mask, &[1, 1, oh, ow]);
                    let mask = e.op("Cast", &[&mask], vec![int("to", 9)]);
                    hit = e.op("And", &[&hit, &mask], Vec::new());
                }
                let at = e.i64s(&at, &[1, 1, oh, ow]);
                chosen = Some(match chosen {
                    None => {
                        let zero = e.i64s(&[0], &[]);
                        e.op("Where", &[&hit, &at, &zero], Vec::new())
                    }
                    Some(index) => e.op("Where", &[&hit, &at, &index], Vec::new()),
                });
            }
        }
        let index = chosen.ok_or_else(|| invalid("an empty kernel"))?;
        // Each plane's offset in the flattened input.
        let planes: Vec<i64> = (0..n_ * c).map(|p| p * h * w).collect();
        let planes = e.i64s(&planes, &[n_, c, 1, 1]);
        let index = e.op("Add", &[&index, &planes], Vec::new());
        e.bind(&y, &out);
        e.bind(&index, &indices);
        Ok(e.finish())
    }
}
