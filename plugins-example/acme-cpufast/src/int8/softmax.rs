//! Quantised `Softmax` (a `DequantizeLinear` → `Softmax` → `QuantizeLinear` group, or
//! onnxruntime's `QLinearSoftmax`), computed as onnxruntime's CPU kernel does and so as CpuRef
//! does, byte for byte:
//!
//! - one 256-entry f32 table of exponentials per layer, for the input scale `s` and the
//!   length `D` of the axis: `shift = max(0, ln(f32::MAX / D) - 5) / s` (in f64, the quotient
//!   `f32::MAX / D` in f32), entry `i = f32(exp((i - 255 + shift) · s))`, so a row's largest
//!   byte reads the last entry and no row's sum overflows;
//! - per row: the largest byte `m` (counted from the type's lowest value), each element's
//!   entry `x - m + 255`, their sum in f32 in order (this is what fixes the bytes);
//! - each output `round_half_even(entry · floor(1 / y_scale) / sum) + y_zp`, in f32,
//!   saturated.
//!
//! The rows along the last axis are read in place; along another axis each row is gathered
//! first. Rows are split between threads.

use backplane_api::{
    BackendError, BackendResult, DataType, SoftmaxDescriptor, TensorInfo, TensorView,
    TensorViewMut, Workload,
};

use super::{QTensor, kernels::round_clamp};
use crate::{
    gemm::{for_each_part, worth},
    workloads::{MIN_PARALLEL_ELEMENTS, Signature},
};

/// The layer's axis as `[outer, len, inner]`, or why CpuFast cannot run it.
fn split(d: &SoftmaxDescriptor, x: &TensorInfo, y: &TensorInfo) -> Result<[usize; 3], String> {
    if d.beta != 1.0 {
        return Err(format!("a quantized Softmax takes beta 1, got {}", d.beta));
    }
    if x.shape != y.shape {
        return Err(format!("output {y} differs from the input {x}'s shape"));
    }
    let rank = x.shape.len() as i64;
    let axis = i64::from(d.axis);
    let axis = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&axis) {
        return Err(format!("axis {} of a rank-{rank} input", d.axis));
    }
    let dims: Vec<usize> = x.shape.iter().map(|&v| v as usize).collect();
    let axis = axis as usize;
    Ok([
        dims[..axis].iter().product(),
        dims[axis],
        dims[axis + 1..].iter().product(),
    ])
}

/// Why CpuFast cannot run the quantised softmax `d` of `inputs` into `outputs`, or `Ok`.
pub(crate) fn check(
    d: &SoftmaxDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
    let ([x], [y]) = (inputs, outputs) else {
        return Err("a softmax has one input and one output".to_owned());
    };
    QTensor::activation(x)?;
    QTensor::activation(y)?;
    split(d, x, y).map(drop)
}

/// The exponential of each byte's distance below a row's largest, shifted (module doc).
fn exp_table(scale: f32, len: usize) -> [f32; 256] {
    let headroom = f64::from(f32::MAX / len.max(1) as f32);
    let shift = (headroom.ln() - 5.0).max(0.0) / f64::from(scale);
    std::array::from_fn(|i| ((i as f64 - 255.0 + shift) * f64::from(scale)).exp() as f32)
}

/// A quantised softmax's workload.
#[derive(Debug)]
struct SoftmaxWorkload {
    table: [f32; 256],
    /// `floor(1 / y_scale)`.
    y_inverse: f32,
    /// XORed into an input byte: its table index (0x80 for `i8`).
    x_flip: u8,
    y_zp: i32,
    /// The output's stored range.
    y_range: (i32, i32),
    outer: usize,
    len: usize,
    inner: usize,
    signature: Signature,
    threads: usize,
}

/// Creates the workload of a quantised softmax [`check`] accepted.
pub(crate) fn create(
    d: &SoftmaxDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
    signature: Signature,
    threads: usize,
) -> Result<Box<dyn Workload>, String> {
    check(d, inputs, outputs)?;
    let (x, y) = (&inputs[0], &outputs[0]);
    let (xq, yq) = (QTensor::activation(x)?, QTensor::activation(y)?);
    let [outer, len, inner] = split(d, x, y)?;
    Ok(Box::new(SoftmaxWorkload {
        table: exp_table(xq.scales[0], len),
        y_inverse: (1.0f32 / yq.scales[0]).floor(),
        x_flip: if x.data_type == DataType::QAsymmS8 {
            0x80
        } else {
            0
        },
        y_zp: yq.zp,
        y_range: yq.range(),
        outer,
        len,
        inner,
        signature,
        threads,
    }))
}

impl SoftmaxWorkload {
    /// One row: `x` its bytes, `entries` scratch of the same length, `y` its output bytes.
    fn row(&self, x: &[u8], entries: &mut [f32], y: &mut [u8]) {
        let flip = self.x_flip;
        let max = x.iter().map(|&b| b ^ flip).max().unwrap_or(0);
        // Entry `b - max + 255` of the table is entry `b` of this slice of it (`b <= max`).
        let table = &self.table[usize::from(255 - max)..];
        let mut sum = 0f32;
        for (e, &b) in entries.iter_mut().zip(x) {
            *e = table[usize::from(b ^ flip)];
            sum += *e;
        }
        let (lo, hi) = (
            (self.y_range.0 - self.y_zp) as f32,
            (self.y_range.1 - self.y_zp) as f32,
        );
        for (o, &e) in y.iter_mut().zip(entries.iter()) {
            let q = if sum == 0.0 {
                self.y_zp
            } else {
                round_clamp((e * self.y_inverse) / sum, lo, hi) + self.y_zp
            };
            // `q` is within the stored range: its low byte is the u8 or the i8.
            *o = q as u8;
        }
    }
}

impl Workload for SoftmaxWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let x = inputs[0].data.as_slice();
        let y = outputs[0].data.as_mut_slice();
        let (len, inner) = (self.len, self.inner);
        let total = self.outer * len * inner;
        if x.len() != total || y.len() != total {
            return Err(BackendError::invalid_argument(
                "buffer sizes differ from the tensors'",
            ));
        }
        if total == 0 {
            return Ok(());
        }
        // Whole slices `[len, inner]` per part, so a part owns its output bytes.
        let slice = len * inner;
        let parts = worth(total, MIN_PARALLEL_ELEMENTS, self.threads).min(self.outer);
        let per = self.outer.div_ceil(parts.max(1)) * slice;
        for_each_part(
            parts.max(1),
            x.chunks(per).zip(y.chunks_mut(per)),
            |(x, y)| {
                let mut entries = vec![0f32; len];
                if inner == 1 {
                    for (x, y) in x.chunks_exact(len).zip(y.chunks_exact_mut(len)) {
                        self.row(x, &mut entries, y);
                    }
                    return;
                }
                let (mut xs, mut ys) = (vec![0u8; len], vec![0u8; len]);
                for (x, y) in x.chunks_exact(slice).zip(y.chunks_exact_mut(slice)) {
                    for i in 0..inner {
                        for (k, v) in xs.iter_mut().enumerate() {
                            *v = x[k * inner + i];
                        }
                        self.row(&xs, &mut entries, &mut ys);
                        for (k, &v) in ys.iter().enumerate() {
                            y[k * inner + i] = v;
                        }
                    }
                }
            },
        );
        Ok(())
    }
}
