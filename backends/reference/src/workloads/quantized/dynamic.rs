//! Dynamically quantised `FullyConnected` and `BatchMatMul` (ONNX `DynamicQuantizeLinear`
//! followed by `MatMulInteger`, what onnxruntime's `quantize_dynamic` writes): a Float32
//! input, quantised weights (per tensor or per output column), an optional Float32 bias
//! (`FullyConnected`'s third input) and a Float32 output.
//!
//! Every call quantises the whole input to u8 with parameters it computes from the input
//! ([`DynamicQuantization::of`]), accumulates `acc = sum((q - zp) * (w - w_offset))` exactly
//! in `i32` (the [`Geometry`] the static products use), and gives
//! `y = (acc as f32) * (s * w_scale[c])`, the product of the scales in f32, then `+ bias[c]`
//! in f32.
//!
//! # What onnxruntime does (checked in its sources)
//!
//! Its CPU kernel for `DynamicQuantizeLinear`
//! (`onnxruntime/core/providers/cpu/quantization/dynamicquantizelinear.cc`) takes the
//! parameters from `GetQuantizationParameter` in `onnxruntime/core/util/qmath.h` and
//! quantises with MLAS's `QuantizeLinear` (`onnxruntime/core/mlas/lib/quantize.cpp`):
//! - the range is the input's minimum and maximum, widened to include 0;
//! - the scale is `(max - min) / 255` in f32, except that when `max == min` (only an
//!   all-zero input, the range holding 0) the scale is 1, not 0;
//! - the zero point is `0 - min / scale` in f32, clamped to `0..=255` and then rounded half
//!   to even (clamping to integer bounds first or last gives the same integer);
//! - each element is divided by the scale (a true f32 division, not a multiplication by a
//!   reciprocal), clamped to `[-zp, 255 - zp]`, rounded half to even (the processor's
//!   default rounding), and the zero point is added.
//!
//! CpuRef does the same. The layers doc's wording (`s = 0` and `q = 0` for an all-zero
//! input) and onnxruntime's (`s = 1`, hence `zp = 0` and `q = 0`) give the same outputs:
//! every `q - zp` is 0, so `acc = 0` and `y = 0 * (s * w_scale) = +0` (then the bias); CpuRef
//! follows onnxruntime so that no division by zero happens. A NaN in the input is not
//! specified (it is ignored by the range and quantises to the zero point here).

use backplane_api::{BackendResult, DataType, TensorView, TensorViewMut, Workload, WorkloadDesc};

use super::{
    QParams, QType, check_buffers,
    matmul::{self, Geometry},
};
use crate::workloads::{ExpectedShapes, invalid_layer};

/// The parameters `DynamicQuantizeLinear` computes for one input: u8 with scale `scale` and
/// zero point `zero_point`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct DynamicQuantization {
    /// The scale `s`.
    pub(crate) scale: f32,
    /// The zero point `zp`, in `0..=255`.
    pub(crate) zero_point: i32,
}

impl DynamicQuantization {
    /// The parameters of `x`: `lo = min(0, min x)`, `hi = max(0, max x)`,
    /// `s = (hi - lo) / 255` in f32 (1 when `hi == lo`, as onnxruntime does),
    /// `zp = saturate_u8(round_half_even(0 - lo / s))`.
    pub(crate) fn of(x: &[f32]) -> Self {
        let (lo, hi) = x
            .iter()
            .fold((0.0f32, 0.0f32), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        let scale = if hi == lo { 1.0 } else { (hi - lo) / 255.0 };
        let zero_point = U8.saturate_round(0.0 - lo / scale, 0);
        Self { scale, zero_point }
    }

    /// `saturate_u8(round_half_even(v / s) + zp)`, the division in f32.
    #[inline]
    pub(crate) fn quantize(self, v: f32) -> i32 {
        U8.quantize(v, self.scale, self.zero_point)
    }
}

/// The storage of the dynamically quantised input.
const U8: QType = QType { signed: false };

/// A dynamically quantised matrix product.
#[derive(Debug)]
pub struct DynamicMatMulWorkload {
    geometry: Geometry,
    w_q: QParams,
    shapes: ExpectedShapes,
}

/// Creates the workload of a `FullyConnected` or `BatchMatMul` layer with a Float32 input,
/// quantised weights and a Float32 output (layer support has accepted it).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let (x, w, y) = matmul::operands(desc)?;
    for (what, t) in [("input", x), ("output", y)]
        .into_iter()
        .chain(desc.inputs.get(2).map(|b| ("bias", b)))
    {
        if t.data_type != DataType::Float32 {
            return Err(invalid_layer(
                desc,
                format_args!("a dynamically quantized product needs a Float32 {what}, got {t}"),
            ));
        }
    }
    let geometry = Geometry::of(desc, x, w, y)?;
    let w_q = QParams::of(desc, w)?;
    geometry.check_weight_axis(desc, w, &w_q)?;
    Ok(Box::new(DynamicMatMulWorkload {
        geometry,
        w_q,
        shapes: ExpectedShapes::of(desc),
    }))
}

/// The f32 values of a Float32 buffer (any alignment).
fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

impl Workload for DynamicMatMulWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        check_buffers(&self.shapes, inputs, outputs)?;
        let out = &mut outputs[0];
        let x = f32s(inputs[0].data.as_slice());
        let dq = DynamicQuantization::of(&x);
        let xq: Vec<i32> = x.iter().map(|&v| dq.quantize(v) - dq.zero_point).collect();
        let (wb, wt, w_off) = (inputs[1].data.as_slice(), self.w_q.qtype, self.w_q.offset);
        let n = self.geometry.n;
        let multipliers: Vec<f32> = (0..n)
            .map(|j| dq.scale * self.w_q.scales[if self.w_q.scales.len() == 1 { 0 } else { j }])
            .collect();
        let bias = inputs.get(2).map(|b| f32s(b.data.as_slice()));
        let y = out.data.as_mut_slice();
        self.geometry.for_each_product(
            |i| xq[i],
            |i| wt.read(wb[i]) - w_off,
            |o, j, acc| {
                let mut v = acc as f32 * multipliers[j];
                if let Some(b) = &bias {
                    v += b[j];
                }
                y[o * 4..o * 4 + 4].copy_from_slice(&v.to_ne_bytes());
            },
        );
        Ok(())
    }
}

#[cfg(test)]
#[path = "dynamic_tests.rs"]
mod tests;
