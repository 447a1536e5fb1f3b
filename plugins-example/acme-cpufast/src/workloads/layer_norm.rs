//! LayerNormalization (Backend API 1.1, ONNX `LayerNormalization`): each group of the
//! elements that share their indices before `axis` (a row of `x [B, S, H]` with `axis = 2`)
//! is normalised by its mean and biased variance, then scaled and shifted element-wise:
//! `y = (x - mean) / sqrt(variance + epsilon) * scale + bias`.
//!
//! Precision: the statistics are accumulated in f64, in two passes (the mean, then the
//! squared deviations from it), in eight interleaved partial sums that the compiler
//! vectorises; so they stay exact to f32 rounding even when the mean is large against the
//! spread, where a one-pass f32 `E[x²] - E[x]²` would cancel. The normalisation itself is f32,
//! `((x - mean_hi) - mean_lo) * (1 / sqrt(variance + epsilon)) * scale + bias`, with the mean
//! split into its f32 rounding and the rest (the first subtraction is exact when `x` is near
//! the mean), so `x - mean` keeps f32 precision relative to itself, however large the mean.

use backplane_api::{
    BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::{Signature, invalid_layer, sum_f64};

/// Normalises `x` into `y` in groups of `group` consecutive elements (see the module
/// documentation); `scale` and `bias` have `group` elements.
pub(crate) fn normalize(
    x: &[f32],
    y: &mut [f32],
    group: usize,
    epsilon: f32,
    scale: &[f32],
    bias: Option<&[f32]>,
) {
    if group == 0 {
        return;
    }
    let n = group as f64;
    for (xs, ys) in x.chunks_exact(group).zip(y.chunks_exact_mut(group)) {
        let mean = sum_f64(xs, |v| v) / n;
        let variance = sum_f64(xs, |v| (v - mean) * (v - mean)) / n;
        let inv = (1.0 / (variance + f64::from(epsilon)).sqrt()) as f32;
        let hi = mean as f32;
        let lo = (mean - f64::from(hi)) as f32;
        match bias {
            Some(bias) => {
                for (((o, &v), &s), &b) in ys.iter_mut().zip(xs).zip(scale).zip(bias) {
                    *o = ((v - hi) - lo) * inv * s + b;
                }
            }
            None => {
                for ((o, &v), &s) in ys.iter_mut().zip(xs).zip(scale) {
                    *o = ((v - hi) - lo) * inv * s;
                }
            }
        }
    }
}

/// A LayerNormalization layer (inputs `[x, scale, bias?]`, read at every execution).
#[derive(Debug)]
pub(crate) struct LayerNormWorkload {
    /// Elements per normalised group.
    group: usize,
    epsilon: f32,
    signature: Signature,
}

/// Creates the workload of a `LayerNormalization` layer whose shapes layer support accepted.
pub(crate) fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::LayerNormalization(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a LayerNormalization layer"));
    };
    let x = &desc.inputs[0];
    let Some(tail) = x.shape.get(d.axis as usize..) else {
        return Err(invalid_layer(desc, format_args!("axis {} of {x}", d.axis)));
    };
    Ok(Box::new(LayerNormWorkload {
        group: tail.iter().map(|&v| v as usize).product(),
        epsilon: d.epsilon,
        signature: Signature::of(desc),
    }))
}

impl Workload for LayerNormWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let x = inputs[0].as_f32()?;
        let scale = inputs[1].as_f32()?;
        let bias = inputs.get(2).map(TensorView::as_f32).transpose()?;
        let y = outputs[0].as_f32_mut()?;
        normalize(x, y, self.group, self.epsilon, scale, bias);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::LayerNormalizationDescriptor;

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, numel, run_with_constants};

    /// Relative tolerance against the f64 oracle: the conformance kit's 1e-4 with margin.
    const REL_TOL: f64 = 1e-5;

    /// CpuRef's definition with naive loops, all in f64: per group, the mean, the biased
    /// variance (two passes), then each element.
    fn oracle(
        x: &[f32],
        group: usize,
        epsilon: f32,
        scale: &[f32],
        bias: Option<&[f32]>,
    ) -> Vec<f64> {
        let mut want = Vec::with_capacity(x.len());
        for g in x.chunks(group) {
            let n = group as f64;
            let mean = g.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
            let var = g
                .iter()
                .map(|&v| (f64::from(v) - mean) * (f64::from(v) - mean))
                .sum::<f64>()
                / n;
            for (i, &v) in g.iter().enumerate() {
                let b = bias.map_or(0.0, |b| f64::from(b[i]));
                want.push(
                    (f64::from(v) - mean) / (var + f64::from(epsilon)).sqrt() * f64::from(scale[i])
                        + b,
                );
            }
        }
        want
    }

    /// Every axis, with and without bias, parameters constant or not, the transformer's
    /// `[1, 16, 384]` (a group over the lane count and not a multiple of it) and odd groups.
    #[test]
    fn matches_the_definition() {
        let mut rng = Lcg(21);
        for shape in [&[2u32, 3, 4][..], &[1, 16, 384], &[3, 5, 7], &[4, 1]] {
            let x = rng.vec_in(numel(shape), -3.0, 3.0);
            for axis in 0..shape.len() {
                let pshape = &shape[axis..];
                let group = numel(pshape);
                let scale = rng.vec(group);
                let bias = rng.vec(group);
                for (with_bias, constant) in [(false, false), (true, false), (true, true)] {
                    let layer = LayerDescriptor::LayerNormalization(LayerNormalizationDescriptor {
                        axis: axis as u32,
                        epsilon: 1e-5,
                        bias_enabled: with_bias,
                    });
                    let mut inputs: Vec<(&[u32], &[f32], bool)> =
                        vec![(shape, &x, false), (pshape, &scale, constant)];
                    if with_bias {
                        inputs.push((pshape, &bias, constant));
                    }
                    let got = run_with_constants(&layer, &inputs, shape);
                    let want = oracle(&x, group, 1e-5, &scale, with_bias.then_some(&bias[..]));
                    assert_close(
                        &got,
                        &want,
                        REL_TOL,
                        &format!("{shape:?} axis {axis} bias {with_bias} constant {constant}"),
                    );
                }
            }
        }
    }

    /// A mean large against the spread (1000 ± 1) and a tiny epsilon: f64 statistics and the
    /// split mean keep the result within tolerance, where f32 statistics (or an f32 mean)
    /// would lose digits. A constant group normalises to the bias (its variance is 0, epsilon
    /// alone divides).
    #[test]
    fn large_mean_and_constant_groups() {
        let mut rng = Lcg(5);
        let group = 384;
        let x: Vec<f32> = rng.vec(2 * group).iter().map(|v| 1000.0 + v).collect();
        let (scale, bias) = (rng.vec(group), rng.vec(group));
        let mut y = vec![f32::NAN; x.len()];
        normalize(&x, &mut y, group, 1e-12, &scale, Some(&bias));
        assert_close(
            &y,
            &oracle(&x, group, 1e-12, &scale, Some(&bias)),
            REL_TOL,
            "1000 ± 1",
        );
        let flat = vec![7.5f32; group];
        let mut y = vec![f32::NAN; group];
        normalize(&flat, &mut y, group, 1e-5, &scale, Some(&bias));
        assert_eq!(y, bias);
    }
}
