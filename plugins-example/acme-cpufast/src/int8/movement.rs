//! Quantised layers that move bytes: `Concat` of inputs with the output's type and
//! parameters (any axis), `Resize` `Nearest` (rank 4, NCHW) and `Pooling2d` `Max` (NCHW)
//! with equal input and output parameters. Each keeps the bytes it selects, as CpuRef does
//! (a maximum of `i8` values is taken on the bytes XOR 0x80, which orders them as `u8`).

use std::ops::Range;

use backplane_api::{
    BackendError, BackendResult, CoordinateTransformation, DataLayout, DataType, LayerDescriptor,
    NearestRounding, PoolingType, ResizeDescriptor, ResizeMethod, TensorInfo, TensorView,
    TensorViewMut, Workload, shapes,
};

use crate::workloads::Signature;

/// Whether `a` and `b` have the same type and quantisation.
fn same_parameters(a: &TensorInfo, b: &TensorInfo) -> bool {
    a.data_type == b.data_type && a.quantization == b.quantization
}

/// The input coordinate a nearest resize reads for output coordinate `o` (ONNX `Resize`:
/// the coordinate transformation, then the rounding, clamped to the input).
fn nearest_source(d: &ResizeDescriptor, o: usize, scale: f32, in_len: usize) -> usize {
    let x = o as f32;
    let resized = in_len as f32 * scale;
    let s = match d.coordinates {
        CoordinateTransformation::HalfPixel => (x + 0.5) / scale - 0.5,
        CoordinateTransformation::Asymmetric => x / scale,
        CoordinateTransformation::AlignCorners if resized == 1.0 => 0.0,
        CoordinateTransformation::AlignCorners => x * (in_len as f32 - 1.0) / (resized - 1.0),
        CoordinateTransformation::PytorchHalfPixel if resized <= 1.0 => 0.0,
        CoordinateTransformation::PytorchHalfPixel => (x + 0.5) / scale - 0.5,
    };
    let r = match d.nearest {
        NearestRounding::RoundPreferFloor if s.fract() == 0.5 => s.floor(),
        NearestRounding::RoundPreferCeil if s.fract() == 0.5 => s.ceil(),
        NearestRounding::RoundPreferFloor | NearestRounding::RoundPreferCeil => s.round(),
        NearestRounding::Floor => s.floor(),
        NearestRounding::Ceil => s.ceil(),
    };
    r.clamp(0.0, in_len.saturating_sub(1) as f32) as usize
}

/// Why CpuFast cannot run the quantised `Concat` or `Resize`, or `Ok`.
pub(crate) fn check(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
    let [y] = outputs else {
        return Err("one output".to_owned());
    };
    if let LayerDescriptor::Concat(_) = layer {
        // Inputs with other parameters are requantised (a table each).
        for t in inputs.iter().chain([y]) {
            super::QTensor::of(t).and_then(|q| match q.axis {
                Some(_) => Err(format!("{t} must be quantized per tensor")),
                None => Ok(()),
            })?;
        }
    } else if let Some(t) = inputs.iter().find(|t| !same_parameters(t, y)) {
        return Err(format!(
            "quantized {} of {t} with other parameters than its output's",
            layer.kind()
        ));
    }
    let expected = shapes::output_shapes(layer, inputs)?;
    if [y.shape.to_vec()] != expected.as_slice() {
        return Err(format!("output {y} differs from the expected {expected:?}"));
    }
    match layer {
        LayerDescriptor::Pooling2d(d) if d.pool_type != PoolingType::Max => Err(format!(
            "quantized {:?} pooling is not supported (falls back)",
            d.pool_type
        )),
        LayerDescriptor::Pooling2d(d) if d.layout != DataLayout::Nchw => {
            Err("only NCHW pooling".to_owned())
        }
        LayerDescriptor::Pooling2d(d) => {
            let ([n, c, h, w], [_, _, oh, ow]) = (dims4(&inputs[0])?, dims4(y)?);
            let empty = max_windows(oh, h, d.padding.top, d.pool_height, d.stride_y)
                .into_iter()
                .chain(max_windows(ow, w, d.padding.left, d.pool_width, d.stride_x))
                .any(|r| r.is_empty());
            if empty && n * c > 0 {
                return Err("a pooling window holds only padding".to_owned());
            }
            Ok(())
        }
        LayerDescriptor::Resize(d) if d.method != ResizeMethod::Nearest => {
            Err("quantized linear Resize is not supported (falls back)".to_owned())
        }
        LayerDescriptor::Resize(_) if y.shape.len() != 4 => {
            Err("quantized Resize of rank 4 only".to_owned())
        }
        _ => Ok(()),
    }
}

/// A quantised nearest `Resize`: one source row and column table.
#[derive(Debug)]
struct ResizeWorkload {
    planes: usize,
    in_hw: [usize; 2],
    rows: Vec<usize>,
    cols: Vec<usize>,
    signature: Signature,
}

impl Workload for ResizeWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let [h, w] = self.in_hw;
        let (oh, ow) = (self.rows.len(), self.cols.len());
        let (x, y) = (inputs[0].data.as_slice(), outputs[0].data.as_mut_slice());
        if x.len() != self.planes * h * w || y.len() != self.planes * oh * ow {
            return Err(BackendError::invalid_argument("buffer sizes differ"));
        }
        for (xp, yp) in x.chunks_exact(h * w).zip(y.chunks_exact_mut(oh * ow)) {
            for (oy, &iy) in self.rows.iter().enumerate() {
                // A row reading the same input row as the previous one is a copy of it.
                if oy > 0 && self.rows[oy - 1] == iy {
                    yp.copy_within((oy - 1) * ow..oy * ow, oy * ow);
                    continue;
                }
                let src = &xp[iy * w..(iy + 1) * w];
                for (o, &ix) in yp[oy * ow..(oy + 1) * ow].iter_mut().zip(&self.cols) {
                    *o = src[ix];
                }
            }
        }
        Ok(())
    }
}

fn dims4(t: &TensorInfo) -> Result<[usize; 4], String> {
    match t.shape.as_slice() {
        &[a, b, c, d] => Ok([a, b, c, d].map(|v| v as usize)),
        s => Err(format!("pooling needs rank 4, got {s:?}")),
    }
}

/// The input cells of each of `out_len` windows of `kernel` cells, `stride` apart, the first
/// starting `pad` cells before the input.
fn max_windows(
    out_len: usize,
    in_len: usize,
    pad: u32,
    kernel: u32,
    stride: u32,
) -> Vec<Range<usize>> {
    (0..out_len as i64)
        .map(|o| {
            let begin = o * i64::from(stride) - i64::from(pad);
            let end = begin + i64::from(kernel);
            let start = begin.clamp(0, in_len as i64) as usize;
            start..(end.clamp(0, in_len as i64) as usize).max(start)
        })
        .collect()
}

/// A quantised max pooling: the maximum over each window's rows, then over its columns.
#[derive(Debug)]
struct MaxPoolWorkload {
    planes: usize,
    in_hw: [usize; 2],
    rows: Vec<Range<usize>>,
    cols: Vec<Range<usize>>,
    flip: u8,
    signature: Signature,
}

impl Workload for MaxPoolWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let [h, w] = self.in_hw;
        let (oh, ow) = (self.rows.len(), self.cols.len());
        let (x, y) = (inputs[0].data.as_slice(), outputs[0].data.as_mut_slice());
        if x.len() != self.planes * h * w || y.len() != self.planes * oh * ow {
            return Err(BackendError::invalid_argument("buffer sizes differ"));
        }
        // The widest window, and from each column the maximum of that many (fewer at the
        // row's end): a full window's maximum is one read of it.
        let k = self.cols.iter().map(|c| c.len()).max().unwrap_or(0);
        let (mut row, mut span) = (vec![0u8; w], vec![0u8; w]);
        for (xp, yp) in x.chunks_exact(h * w).zip(y.chunks_exact_mut(oh * ow)) {
            for (rows, out) in self.rows.iter().zip(yp.chunks_exact_mut(ow)) {
                row.fill(0);
                for r in rows.clone() {
                    for (m, &v) in row.iter_mut().zip(&xp[r * w..(r + 1) * w]) {
                        *m = (*m).max(v ^ self.flip);
                    }
                }
                span.copy_from_slice(&row);
                for t in 1..k {
                    for (m, &v) in span.iter_mut().zip(&row[t..]) {
                        *m = (*m).max(v);
                    }
                }
                for (o, cols) in out.iter_mut().zip(&self.cols) {
                    let m = if cols.len() == k {
                        span[cols.start]
                    } else {
                        row[cols.clone()].iter().copied().max().unwrap_or(0)
                    };
                    *o = m ^ self.flip;
                }
            }
        }
        Ok(())
    }
}

/// A quantised `Concat`: for each index of the dimensions before the axis, each input's
/// block in turn.
#[derive(Debug)]
struct ConcatWorkload {
    outer: usize,
    /// Bytes of each input's block.
    blocks: Vec<usize>,
    /// For an input with other parameters than the output's: the output byte of each byte,
    /// `quantize(dequantize(q))` in f32 (CpuRef's arithmetic for such a `Concat`).
    tables: Vec<Option<[u8; 256]>>,
    signature: Signature,
}

impl Workload for ConcatWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let total: usize = self.blocks.iter().sum();
        let y = outputs[0].data.as_mut_slice();
        if y.len() != self.outer * total
            || inputs
                .iter()
                .zip(&self.blocks)
                .any(|(v, &b)| v.data.as_slice().len() != self.outer * b)
        {
            return Err(BackendError::invalid_argument("buffer sizes differ"));
        }
        let mut at = 0;
        for ((v, &b), table) in inputs.iter().zip(&self.blocks).zip(&self.tables) {
            let x = v.data.as_slice();
            for o in 0..self.outer {
                let (dst, src) = (
                    &mut y[o * total + at..o * total + at + b],
                    &x[o * b..(o + 1) * b],
                );
                match table {
                    None => dst.copy_from_slice(src),
                    Some(t) => {
                        for (d, &q) in dst.iter_mut().zip(src) {
                            *d = t[usize::from(q)];
                        }
                    }
                }
            }
            at += b;
        }
        Ok(())
    }
}

/// The workload of a layer [`check`] accepted.
pub(crate) fn create(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
    signature: Signature,
) -> Result<Box<dyn Workload>, String> {
    check(layer, inputs, outputs)?;
    let dims = |t: &TensorInfo| t.shape.iter().map(|&d| d as usize).collect::<Vec<_>>();
    let y = dims(&outputs[0]);
    match layer {
        LayerDescriptor::Pooling2d(d) => {
            let x = dims(&inputs[0]);
            Ok(Box::new(MaxPoolWorkload {
                planes: x[0] * x[1],
                in_hw: [x[2], x[3]],
                rows: max_windows(y[2], x[2], d.padding.top, d.pool_height, d.stride_y),
                cols: max_windows(y[3], x[3], d.padding.left, d.pool_width, d.stride_x),
                flip: if inputs[0].data_type == DataType::QAsymmU8 {
                    0
                } else {
                    0x80
                },
                signature,
            }))
        }
        LayerDescriptor::Resize(d) => {
            let x = dims(&inputs[0]);
            Ok(Box::new(ResizeWorkload {
                planes: x[0] * x[1],
                in_hw: [x[2], x[3]],
                rows: (0..y[2])
                    .map(|o| nearest_source(d, o, d.scale_y, x[2]))
                    .collect(),
                cols: (0..y[3])
                    .map(|o| nearest_source(d, o, d.scale_x, x[3]))
                    .collect(),
                signature,
            }))
        }
        LayerDescriptor::Concat(d) => {
            let axis = d.axis as usize;
            let outer: usize = y[..axis].iter().product();
            let blocks = inputs
                .iter()
                .map(|t| dims(t)[axis..].iter().product::<usize>() * t.data_type.size_in_bytes())
                .collect();
            let out = super::QTensor::of(&outputs[0])?;
            let (lo, hi) = out.range();
            let tables = inputs
                .iter()
                .map(|t| {
                    if same_parameters(t, &outputs[0]) {
                        return Ok(None);
                    }
                    let q = super::QTensor::of(t)?;
                    Ok(Some(std::array::from_fn(|b| {
                        let real = q.value(b as u8) as f32 * q.scales[0];
                        let r = (real / out.scales[0])
                            .round_ties_even()
                            .clamp((lo - out.zp) as f32, (hi - out.zp) as f32);
                        (r as i32 + out.zp) as u8
                    })))
                })
                .collect::<Result<_, String>>()?;
            Ok(Box::new(ConcatWorkload {
                outer,
                blocks,
                tables,
                signature,
            }))
        }
        other => Err(format!("{} moves no bytes here", other.kind())),
    }
}
