//! Quantised `Softmax`, as onnxruntime's `QLinearSoftmax` computes it
//! (`contrib_ops/cpu/quantization/qlinear_softmax.cc`), which its QDQ transformer also makes of
//! a `DequantizeLinear` → `Softmax` → `QuantizeLinear` group. In our words:
//!
//! - A 256-entry f32 table of exponentials is built once for the input scale `s` and the
//!   length `D` of the softmax axis: with `shift = max(0, ln(f32::MAX / D) - 5) / s` (the log
//!   and the rest in f64; `f32::MAX / D` in f32), entry `i` is
//!   `f32(exp((i - 255 + shift) * s))`, so that a row's largest input reads the table's last
//!   entry and the sum of a row cannot overflow f32.
//! - Per row: the largest byte `m`; each element reads entry `x - m + 255` (for int8 inputs
//!   the same after taking `x + 128`); `sum` adds the entries in order, in f32.
//! - The output is `round_half_even((entry * floor(1 / y_scale)) / sum) + y_offset`, the
//!   products and the division in f32, saturated to the output type. (onnxruntime leaves a
//!   row whose sum is 0 unwritten; that cannot happen with the shift, and CpuRef writes the
//!   offset there.)
//!
//! The result is a softmax whose output step is `1 / floor(1 / y_scale)`, not `y_scale`
//! itself; it is what onnxruntime gives, which is what a quantised model is checked against.

use backplane_api::{
    BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::{QParams, check_len};
use crate::workloads::{ExpectedShapes, expect_counts, invalid_layer};

/// A quantised softmax along one axis, through a table of exponentials.
#[derive(Debug)]
pub struct QSoftmaxWorkload {
    /// The exponential of each (shifted) input byte.
    table: [f32; 256],
    /// `floor(1 / y_scale)`.
    y_inverse: f32,
    x: QParams,
    y: QParams,
    /// Elements before the axis, along it, after it.
    outer: usize,
    len: usize,
    inner: usize,
    shapes: ExpectedShapes,
}

/// The table of exponentials for input scale `scale` and an axis of `len` elements.
pub(crate) fn exp_table(scale: f32, len: usize) -> [f32; 256] {
    let headroom = (f32::MAX / len as f32) as f64;
    let shift = (headroom.ln() - 5.0).max(0.0) / f64::from(scale);
    let mut table = [0f32; 256];
    for (i, t) in table.iter_mut().enumerate() {
        *t = ((i as f64 - 255.0 + shift) * f64::from(scale)).exp() as f32;
    }
    table
}

/// Creates the workload of a quantised `Softmax` layer (`beta` 1).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Softmax(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a Softmax layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    if d.beta != 1.0 {
        return Err(invalid_layer(desc, "a quantized Softmax takes beta 1"));
    }
    let (x, y) = (
        QParams::per_tensor(desc, &desc.inputs[0])?,
        QParams::per_tensor(desc, &desc.outputs[0])?,
    );
    let shape: Vec<usize> = desc.inputs[0].shape.iter().map(|&d| d as usize).collect();
    let rank = shape.len() as i64;
    let axis = i64::from(d.axis);
    let axis = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&axis) {
        return Err(invalid_layer(
            desc,
            format!("axis {} of a rank-{rank} input", d.axis),
        ));
    }
    let axis = axis as usize;
    let len = shape[axis].max(1);
    Ok(Box::new(QSoftmaxWorkload {
        table: exp_table(x.scale(), len),
        y_inverse: (1.0f32 / y.scale()).floor(),
        outer: shape[..axis].iter().product(),
        len: shape[axis],
        inner: shape[axis + 1..].iter().product(),
        x,
        y,
        shapes: ExpectedShapes::of(desc),
    }))
}

impl Workload for QSoftmaxWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let src = inputs[0].data.as_slice();
        check_len(inputs[0].info, src)?;
        let dst = outputs[0].data.as_mut_slice();
        check_len(outputs[0].info, dst)?;
        // The table index of a byte: its value counted from the type's lowest.
        let lo = self.x.qtype.lo();
        let index = |b: u8| (self.x.qtype.read(b) - lo) as usize;
        for o in 0..self.outer {
            for i in 0..self.inner {
                let at = |k: usize| (o * self.len + k) * self.inner + i;
                let max = (0..self.len).map(|k| index(src[at(k)])).max().unwrap_or(0);
                let entry = |k: usize| self.table[index(src[at(k)]) + 255 - max];
                let mut sum = 0f32;
                for k in 0..self.len {
                    sum += entry(k);
                }
                for k in 0..self.len {
                    let q = if sum == 0.0 {
                        self.y.offset
                    } else {
                        let v = ((entry(k) * self.y_inverse) / sum).round_ties_even();
                        (v as i32).saturating_add(self.y.offset)
                    };
                    dst[at(k)] = self
                        .y
                        .qtype
                        .write(q.clamp(self.y.qtype.lo(), self.y.qtype.hi()));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{DataType, LayerDescriptor, SoftmaxDescriptor};

    use super::super::test_support::{qt, run_bytes};

    /// The table form against a naive transcription of its definition in f64 arithmetic
    /// where the definition allows, on rows of u8 and s8 inputs, along the last axis and a
    /// middle one; and every output is a probability: within a step or two of the f64 softmax.
    #[test]
    fn quantized_softmax_is_onnxruntimes_table_form() {
        let (xs, ys) = (0.1f32, 1.0f32 / 256.0);
        for dt in [DataType::QAsymmU8, DataType::QAsymmS8] {
            let (xz, yz) = if dt == DataType::QAsymmU8 {
                (128, 0)
            } else {
                (0, -128)
            };
            // Shape [2, 5, 3], softmax over axis 1 (5 elements, inner 3).
            let bytes: Vec<u8> = (0..30u32).map(|i| ((i * 53 + 7) % 256) as u8).collect();
            let d = LayerDescriptor::Softmax(SoftmaxDescriptor { beta: 1.0, axis: 1 });
            let got = run_bytes(
                &d,
                &[(qt(&[2, 5, 3], dt, xs, xz), bytes.clone())],
                &qt(&[2, 5, 3], dt, ys, yz),
            )
            .unwrap();
            let value = |b: u8| {
                if dt == DataType::QAsymmU8 {
                    i32::from(b)
                } else {
                    i32::from(b as i8)
                }
            };
            let lo = if dt == DataType::QAsymmU8 { 0 } else { -128 };
            let shift = ((f32::MAX / 5.0) as f64).ln() - 5.0;
            let shift = shift.max(0.0) / f64::from(xs);
            let table = |i: i32| ((f64::from(i) - 255.0 + shift) * f64::from(xs)).exp() as f32;
            let inverse = (1.0f32 / ys).floor();
            for o in 0..2 {
                for i in 0..3 {
                    let at = |k: usize| (o * 5 + k) * 3 + i;
                    let idx = |k: usize| value(bytes[at(k)]) - lo;
                    let max = (0..5).map(idx).max().unwrap();
                    let e = |k: usize| table(idx(k) + 255 - max);
                    let sum = (0..5).fold(0f32, |s, k| s + e(k));
                    let reals: Vec<f64> = (0..5)
                        .map(|k| (f64::from(value(bytes[at(k)]) - xz) * f64::from(xs)).exp())
                        .collect();
                    let total: f64 = reals.iter().sum();
                    for k in 0..5 {
                        let want = ((e(k) * inverse) / sum).round_ties_even() as i32 + yz;
                        let want = want.clamp(lo, lo + 255);
                        let got = value(got[at(k)]);
                        assert_eq!(got, want, "{dt} row ({o}, {i}) element {k}");
                        let exact = reals[k] / total * 256.0 + f64::from(yz);
                        assert!((f64::from(got) - exact).abs() <= 2.0, "{got} vs {exact}");
                    }
                }
            }
        }
    }
}
