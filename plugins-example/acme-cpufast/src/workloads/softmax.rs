//! Softmax of `beta · x` along one axis (ONNX opset 13: every 1-D slice along the axis is
//! normalised on its own; a negative axis counts from the end), numerically stable: the
//! slice's maximum of `beta · x` is subtracted before exponentiating, so no exponent is
//! positive and nothing overflows. The sum of the exponentials is taken in f64 and its
//! reciprocal scales the slice. A NaN in a slice makes the slice NaN.
//!
//! The tensor is seen as `[outer, len, inner]` (`len` the axis): with `inner = 1` (the last
//! axis, the classifier's case) each slice is a contiguous row, reduced in interleaved
//! partial maxima and sums ([`max_f32`], [`sum_f64`]), its exponentials by CpuFast's
//! vectorised `exp` ([`exp_shifted`]; relative error about 2e-7, an exponent below -87 gives
//! `e^-87` instead of a smaller number or zero); otherwise the `inner` slices of a block are
//! processed together, row by row, with per-slice maxima and sums.

use backplane_api::{
    BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
    shapes::normalize_axis,
};

use super::{Signature, activation::exp_shifted, invalid_layer, max_f32, split_axes, sum_f64};

/// A stand-alone Softmax layer.
#[derive(Debug)]
pub(crate) struct SoftmaxWorkload {
    beta: f32,
    /// The axis' size.
    len: usize,
    /// The product of the dimensions after the axis (the stride along it).
    inner: usize,
    signature: Signature,
}

/// Creates the workload of a `Softmax` layer (one input, one output of its shape).
pub(crate) fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let (LayerDescriptor::Softmax(d), [x], [y]) =
        (desc.layer, desc.inputs.as_slice(), desc.outputs.as_slice())
    else {
        return Err(invalid_layer(desc, "not a Softmax of one input"));
    };
    if x.shape != y.shape {
        return Err(invalid_layer(
            desc,
            format_args!("the softmax of {x} is not {y}"),
        ));
    }
    let axis =
        normalize_axis(i64::from(d.axis), x.shape.len()).map_err(|e| invalid_layer(desc, e))?;
    let (_, len, inner) = split_axes(&x.shape, axis..axis + 1);
    Ok(Box::new(SoftmaxWorkload {
        beta: d.beta,
        len,
        inner,
        signature: Signature::of(desc),
    }))
}

impl SoftmaxWorkload {
    /// `y` = the softmax of every contiguous row of `len` in `x`.
    fn last_axis(&self, x: &[f32], y: &mut [f32]) {
        let beta = self.beta;
        for (row, out) in x.chunks_exact(self.len).zip(y.chunks_exact_mut(self.len)) {
            let max = max_f32(row, |v| beta * v);
            exp_shifted(row, beta, max, out);
            let scale = (1.0 / sum_f64(out, |e| e)) as f32;
            for o in out.iter_mut() {
                *o *= scale;
            }
        }
    }

    /// `y` = the softmax of `x` along an axis with `inner` slices interleaved in each block.
    fn outer_axis(&self, x: &[f32], y: &mut [f32]) {
        let (beta, inner) = (self.beta, self.inner);
        let mut max = vec![f32::NEG_INFINITY; inner];
        let mut sum = vec![0.0f64; inner];
        let mut scale = vec![0.0f32; inner];
        for (block, out) in x
            .chunks_exact(self.len * inner)
            .zip(y.chunks_exact_mut(self.len * inner))
        {
            max.fill(f32::NEG_INFINITY);
            for row in block.chunks_exact(inner) {
                for (m, &v) in max.iter_mut().zip(row) {
                    *m = m.max(beta * v);
                }
            }
            sum.fill(0.0);
            for (row, out_row) in block.chunks_exact(inner).zip(out.chunks_exact_mut(inner)) {
                for (((o, &v), &m), s) in out_row.iter_mut().zip(row).zip(&max).zip(&mut sum) {
                    *o = (beta * v - m).exp();
                    *s += f64::from(*o);
                }
            }
            for (r, &s) in scale.iter_mut().zip(&sum) {
                *r = (1.0 / s) as f32;
            }
            for out_row in out.chunks_exact_mut(inner) {
                for (o, &r) in out_row.iter_mut().zip(&scale) {
                    *o *= r;
                }
            }
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
        let x = inputs[0].as_f32()?;
        let y = outputs[0].as_f32_mut()?;
        if x.is_empty() {
            return Ok(());
        }
        if self.inner == 1 {
            self.last_axis(x, y);
        } else {
            self.outer_axis(x, y);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::SoftmaxDescriptor;

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, numel, run};

    /// Relative tolerance against the f64 oracle: the f32 rounding of `beta · x` and of the
    /// subtracted maximum (|x| ≤ 8) moves the exponential by about 1e-6 relative.
    const REL_TOL: f64 = 1e-5;

    fn softmax(axis: i32, beta: f32) -> LayerDescriptor {
        LayerDescriptor::Softmax(SoftmaxDescriptor { beta, axis })
    }

    /// The definition with naive loops in f64: for each output element, the exponential of
    /// `beta · x` over the sum of the exponentials along the axis (no maximum subtracted:
    /// the test values are small enough for f64).
    fn oracle(shape: &[u32], axis: usize, beta: f32, x: &[f32]) -> Vec<f64> {
        let len = shape[axis] as usize;
        let inner: usize = shape[axis + 1..].iter().map(|&d| d as usize).product();
        let beta = f64::from(beta);
        (0..x.len())
            .map(|i| {
                let (outer, at) = (i / (len * inner), i % inner);
                let e =
                    |k: usize| (beta * f64::from(x[outer * len * inner + k * inner + at])).exp();
                e(i / inner % len) / (0..len).map(e).sum::<f64>()
            })
            .collect()
    }

    /// Every axis (negative ones too) of a few shapes, the classifier's `[1, 2]`, slices
    /// longer than the lane count, and betas other than 1 (negative too).
    #[test]
    fn every_axis_matches_the_definition() {
        let mut rng = Lcg(17);
        for shape in [&[2u32, 3, 4][..], &[1, 2], &[3, 37], &[2, 19, 3], &[5]] {
            let x = rng.vec_in(numel(shape), -8.0, 8.0);
            let rank = shape.len() as i32;
            for axis in -rank..rank {
                for beta in [1.0, 0.5, -1.0, 0.7] {
                    let got = run(&softmax(axis, beta), &[(shape, &x)], shape);
                    let want = oracle(shape, axis.rem_euclid(rank) as usize, beta, &x);
                    assert_close(
                        &got,
                        &want,
                        REL_TOL,
                        &format!("{shape:?} axis {axis} beta {beta}"),
                    );
                }
            }
        }
    }

    /// Inputs whose exponentials overflow f32 (and f64) give the exact softmax once the
    /// maximum is subtracted, along the last axis and an outer one; NaN makes its slice NaN.
    #[test]
    fn large_inputs_are_stable() {
        let shape: &[u32] = &[2, 3];
        let x = [1000.0f32, 999.0, 998.0, -1000.0, 0.0, 1000.0];
        let shifted = |x: &[f32]| -> Vec<f32> {
            let m = x.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            x.iter().map(|v| v - m).collect()
        };
        let mut rows = shifted(&x[..3]);
        rows.extend(shifted(&x[3..]));
        let want = oracle(shape, 1, 1.0, &rows);
        assert_close(
            &run(&softmax(1, 1.0), &[(shape, &x)], shape),
            &want,
            REL_TOL,
            "rows",
        );
        let columns = [1000.0f32, -1000.0, 999.0, 0.0, 1000.0, 1000.0];
        let got = run(&softmax(0, 1.0), &[(&[2, 3], &columns)], &[2, 3]);
        let p = 1.0 / (1.0 + (-1.0f64).exp());
        assert_close(&got, &[1.0, 0.0, 1.0 - p, 0.0, 1.0, p], REL_TOL, "columns");
        let got = run(
            &softmax(-1, 1.0),
            &[(&[2, 2], &[f32::NAN, 1.0, 2.0, 2.0])],
            &[2, 2],
        );
        assert!(got[0].is_nan() && got[1].is_nan(), "{got:?}");
        assert_eq!(got[2..], [0.5, 0.5]);
    }
}
