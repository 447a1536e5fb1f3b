//! Quantised averages, as onnxruntime computes them and so as CpuRef does, byte for byte:
//!
//! - `Mean` over axes 2 and 3 of an NCHW tensor (`GlobalAveragePool`), all tensors
//!   `QAsymmU8` (onnxruntime's `QLinearGlobalAveragePool` integer kernel; it leaves the `i8`
//!   form in float): per channel `acc = Σ q - x_zp · count` in integers, then
//!   `saturate(round_half_even(acc as f32 · m) + y_zp)` with `m = x_scale / (y_scale ·
//!   count as f32)` in f32;
//! - `Pooling2d` `Average` (NCHW) whose every window lies inside the input (no padding, the
//!   windows fitting exactly, so each divides by its size): each window's dequantised values
//!   `(q - x_zp) as f32 · x_scale` summed in f32 row by row, divided by the window's size, then
//!   quantised as onnxruntime's `QLinearAveragePool` does for `u8` tensors
//!   (`saturate(round_half_even(v / y_scale + y_zp))`, the zero point added before rounding)
//!   or, with an `i8` tensor (left unfused), as `QuantizeLinear` does
//!   (`saturate(round_half_even(v / y_scale) + y_zp)`).
//!
//! Other averages (padding, clipped windows, other axes) are refused with a reason and run on
//! the next backend.

use backplane_api::{
    BackendError, BackendResult, DataLayout, DataType, LayerDescriptor, PoolingType, TensorInfo,
    TensorView, TensorViewMut, Workload, shapes,
};

use super::{QTensor, kernels::round_clamp};
use crate::{
    gemm::{for_each_part, worth},
    workloads::{MIN_PARALLEL_ELEMENTS, Signature},
};

/// What an average layer computes, checked.
#[derive(Debug, Clone, Copy)]
enum Plan {
    /// `planes` channels of `count` elements each.
    Global { planes: usize, count: usize },
    /// `planes` channels, `[h, w]` in, `[oh, ow]` out, the window and its stride.
    Window {
        planes: usize,
        input: [usize; 2],
        output: [usize; 2],
        kernel: [usize; 2],
        stride: [usize; 2],
    },
}

/// The dimensions of `t` as `usize`.
fn dims(t: &TensorInfo) -> Vec<usize> {
    t.shape.iter().map(|&d| d as usize).collect()
}

/// The plan of average `layer` of `inputs` into `outputs`, or why CpuFast cannot run it.
fn plan(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<Plan, String> {
    let ([x], [y]) = (inputs, outputs) else {
        return Err("an average has one input and one output".to_owned());
    };
    QTensor::activation(x)?;
    QTensor::activation(y)?;
    let expected = shapes::output_shapes(layer, inputs)?;
    if [y.shape.to_vec()] != expected.as_slice() {
        return Err(format!("output {y} differs from the expected {expected:?}"));
    }
    let (xs, ys) = (dims(x), dims(y));
    match layer {
        LayerDescriptor::Mean(d) => {
            let mut axes = d.axes.to_vec();
            axes.sort_unstable();
            if xs.len() != 4 || axes != [2, 3] {
                return Err("a quantized Mean runs over axes 2 and 3 of rank 4 only".to_owned());
            }
            if [x, y].iter().any(|t| t.data_type != DataType::QAsymmU8) {
                return Err(
                    "a quantized Mean runs on QAsymmU8 tensors only (falls back)".to_owned(),
                );
            }
            let count = xs[2] * xs[3];
            if i32::try_from(count.saturating_mul(255)).is_err() {
                return Err("too many elements per channel".to_owned());
            }
            Ok(Plan::Global {
                planes: xs[0] * xs[1],
                count,
            })
        }
        LayerDescriptor::Pooling2d(d) if d.pool_type == PoolingType::Average => {
            if d.layout != DataLayout::Nchw || xs.len() != 4 {
                return Err("only NCHW average pooling".to_owned());
            }
            let p = &d.padding;
            let (kernel, stride) = (
                [d.pool_height as usize, d.pool_width as usize],
                [d.stride_y as usize, d.stride_x as usize],
            );
            let inside =
                |i: usize| ys[2 + i] == 0 || (ys[2 + i] - 1) * stride[i] + kernel[i] <= xs[2 + i];
            if (p.top, p.left, p.bottom, p.right) != (0, 0, 0, 0) || !inside(0) || !inside(1) {
                return Err(
                    "quantized average pooling with padding or clipped windows is not supported (falls back)"
                        .to_owned(),
                );
            }
            if kernel.contains(&0) {
                return Err("an empty pooling window".to_owned());
            }
            Ok(Plan::Window {
                planes: xs[0] * xs[1],
                input: [xs[2], xs[3]],
                output: [ys[2], ys[3]],
                kernel,
                stride,
            })
        }
        other => Err(format!("quantized {} is not an average", other.kind())),
    }
}

/// Whether `layer` is an average this module takes (or refuses with its reason): a `Mean`
/// or an average `Pooling2d`.
pub(crate) fn is_average(layer: &LayerDescriptor) -> bool {
    match layer {
        LayerDescriptor::Mean(_) => true,
        LayerDescriptor::Pooling2d(d) => d.pool_type == PoolingType::Average,
        _ => false,
    }
}

/// Why CpuFast cannot run the quantised average `layer`, or `Ok`.
pub(crate) fn check(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
    plan(layer, inputs, outputs).map(drop)
}

/// A quantised average's workload.
#[derive(Debug)]
struct AverageWorkload {
    plan: Plan,
    x: QTensor,
    y: QTensor,
    /// onnxruntime's fused form: the output zero point added before rounding.
    offset_first: bool,
    signature: Signature,
    threads: usize,
}

/// Creates the workload of a quantised average [`check`] accepted.
pub(crate) fn create(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
    signature: Signature,
    threads: usize,
) -> Result<Box<dyn Workload>, String> {
    let plan = plan(layer, inputs, outputs)?;
    Ok(Box::new(AverageWorkload {
        plan,
        x: QTensor::activation(&inputs[0])?,
        y: QTensor::activation(&outputs[0])?,
        offset_first: inputs
            .iter()
            .chain(outputs)
            .all(|t| t.data_type == DataType::QAsymmU8),
        signature,
        threads,
    }))
}

impl AverageWorkload {
    /// The stored byte of quantised value `q` (within the output's range: its low byte is
    /// the `u8` or the `i8`).
    fn byte(q: i32) -> u8 {
        q as u8
    }

    /// Global averages of `planes` (`count` bytes each) into `out`, one byte each.
    fn global(&self, x: &[u8], count: usize, out: &mut [u8]) {
        let (lo, hi) = self.y.range();
        let zp = self.y.zp;
        let m = self.x.scales[0] / (self.y.scales[0] * count as f32);
        let bias = self.x.zp * count as i32;
        for (o, plane) in out.iter_mut().zip(x.chunks_exact(count.max(1))) {
            let sum: u32 = plane.iter().map(|&b| u32::from(b)).sum();
            let acc = sum as i32 - bias;
            *o = Self::byte(round_clamp(acc as f32 * m, (lo - zp) as f32, (hi - zp) as f32) + zp);
        }
    }

    /// Window averages of whole planes `x` into `out`.
    fn windows(
        &self,
        x: &[u8],
        [h, w]: [usize; 2],
        [oh, ow]: [usize; 2],
        k: [usize; 2],
        s: [usize; 2],
        out: &mut [u8],
    ) {
        let (flip, x_zp) = self.x.as_u8();
        let xs = self.x.scales[0];
        let table: [f32; 256] = std::array::from_fn(|b| (b as i32 - x_zp) as f32 * xs);
        let (lo, hi) = self.y.range();
        let (ys, zp) = (self.y.scales[0], self.y.zp);
        let divisor = (k[0] * k[1]) as f32;
        for (xp, yp) in x.chunks_exact(h * w).zip(out.chunks_exact_mut(oh * ow)) {
            for (oy, row) in yp.chunks_exact_mut(ow).enumerate() {
                for (ox, o) in row.iter_mut().enumerate() {
                    let mut sum = 0f32;
                    for ky in 0..k[0] {
                        let start = (oy * s[0] + ky) * w + ox * s[1];
                        for &b in &xp[start..start + k[1]] {
                            sum += table[usize::from(b ^ flip)];
                        }
                    }
                    let v = sum / divisor;
                    let q = if self.offset_first {
                        round_clamp(v / ys + zp as f32, lo as f32, hi as f32)
                    } else {
                        round_clamp(v / ys, (lo - zp) as f32, (hi - zp) as f32) + zp
                    };
                    *o = Self::byte(q);
                }
            }
        }
    }
}

impl Workload for AverageWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let x = inputs[0].data.as_slice();
        let y = outputs[0].data.as_mut_slice();
        let (planes, per_in, per_out) = match self.plan {
            Plan::Global { planes, count } => (planes, count, 1),
            Plan::Window {
                planes,
                input,
                output,
                ..
            } => (planes, input[0] * input[1], output[0] * output[1]),
        };
        if x.len() != planes * per_in || y.len() != planes * per_out {
            return Err(BackendError::invalid_argument(
                "buffer sizes differ from the tensors'",
            ));
        }
        if planes == 0 || per_out == 0 {
            return Ok(());
        }
        if per_in == 0 {
            // The mean of nothing (an empty plane): CpuRef writes the zero point.
            y.fill(Self::byte(self.y.zp));
            return Ok(());
        }
        let parts = worth(x.len(), MIN_PARALLEL_ELEMENTS, self.threads).min(planes);
        let per = planes.div_ceil(parts.max(1));
        let split_in = per * per_in;
        for_each_part(
            parts.max(1),
            x.chunks(split_in).zip(y.chunks_mut(per * per_out)),
            |(x, y)| match self.plan {
                Plan::Global { count, .. } => self.global(x, count, y),
                Plan::Window {
                    input,
                    output,
                    kernel,
                    stride,
                    ..
                } => self.windows(x, input, output, kernel, stride, y),
            },
        );
        Ok(())
    }
}
