//! BatchNormalization (inference form), NCHW (channel axis 1, any rank >= 2):
//! `y = scale * (x - mean) / sqrt(variance + epsilon) + bias` per channel, computed as the
//! affine map `y = x * factor + shift` of [`affine`]. A chain folds the same map into its
//! convolution's weights and bias; on its own the layer reads its statistics at execution.

use backplane_api::{
    BackendResult, DataLayout, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::{Signature, invalid_layer};

/// The per-channel `(factor, shift)` of a batch normalisation: `factor = scale /
/// sqrt(variance + epsilon)` (in f64, as CpuRef) and `shift = bias - mean * factor`.
pub(crate) fn affine(
    scale: &[f32],
    bias: &[f32],
    mean: &[f32],
    variance: &[f32],
    epsilon: f32,
) -> (Vec<f32>, Vec<f32>) {
    let eps = f64::from(epsilon);
    let factor: Vec<f32> = scale
        .iter()
        .zip(variance)
        .map(|(&s, &v)| (f64::from(s) / (f64::from(v) + eps).sqrt()) as f32)
        .collect();
    let shift = bias
        .iter()
        .zip(mean)
        .zip(&factor)
        .map(|((&b, &m), &f)| b - m * f)
        .collect();
    (factor, shift)
}

/// A stand-alone batch normalisation.
#[derive(Debug)]
pub(crate) struct BatchNormWorkload {
    epsilon: f32,
    /// Elements per channel per image.
    inner: usize,
    signature: Signature,
}

/// Creates the workload of a `BatchNormalization` layer.
pub(crate) fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::BatchNormalization(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a BatchNormalization layer"));
    };
    if d.layout != DataLayout::Nchw || desc.inputs.len() != 5 || desc.outputs.len() != 1 {
        return Err(invalid_layer(
            desc,
            "an NCHW batch norm has 5 inputs and 1 output",
        ));
    }
    let x = &desc.inputs[0].shape;
    let channels = x.get(1).copied().unwrap_or(0);
    if x.len() < 2
        || desc.outputs[0].shape != *x
        || desc.inputs[1..]
            .iter()
            .any(|t| t.shape.as_slice() != [channels])
    {
        return Err(invalid_layer(desc, "inconsistent batch norm tensors"));
    }
    Ok(Box::new(BatchNormWorkload {
        epsilon: d.epsilon,
        inner: x[2..].iter().map(|&v| v as usize).product(),
        signature: Signature::of(desc),
    }))
}

impl Workload for BatchNormWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let x = inputs[0].as_f32()?;
        let (factor, shift) = affine(
            inputs[1].as_f32()?,
            inputs[2].as_f32()?,
            inputs[3].as_f32()?,
            inputs[4].as_f32()?,
            self.epsilon,
        );
        let out = outputs[0].as_f32_mut()?;
        if self.inner == 0 || factor.is_empty() {
            return Ok(());
        }
        let image = factor.len() * self.inner;
        for (x_n, y_n) in x.chunks_exact(image).zip(out.chunks_exact_mut(image)) {
            for (((x_c, y_c), &f), &s) in x_n
                .chunks_exact(self.inner)
                .zip(y_n.chunks_exact_mut(self.inner))
                .zip(&factor)
                .zip(&shift)
            {
                for (y, &v) in y_c.iter_mut().zip(x_c) {
                    *y = v * f + s;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::BatchNormalizationDescriptor;

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, run};

    /// Relative tolerance against the f64 oracle.
    const REL_TOL: f64 = 1e-5;

    #[test]
    fn matches_the_definition() {
        let mut rng = Lcg(21);
        let (n, c, h, w) = (2, 3, 4, 5);
        let x = rng.vec(n * c * h * w);
        let (scale, bias, mean) = (rng.vec(c), rng.vec(c), rng.vec(c));
        let var = rng.vec_in(c, 0.1, 2.0);
        let eps = 1e-3;
        let layer = LayerDescriptor::BatchNormalization(BatchNormalizationDescriptor {
            epsilon: eps,
            layout: DataLayout::Nchw,
        });
        let got = run(
            &layer,
            &[
                (&[2, 3, 4, 5], &x),
                (&[3], &scale),
                (&[3], &bias),
                (&[3], &mean),
                (&[3], &var),
            ],
            &[2, 3, 4, 5],
        );
        let want: Vec<f64> = x
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let ch = (i / (h * w)) % c;
                let f = |t: &[f32]| f64::from(t[ch]);
                f(&scale) * (f64::from(v) - f(&mean)) / (f(&var) + f64::from(eps)).sqrt() + f(&bias)
            })
            .collect();
        assert_close(&got, &want, REL_TOL, "batch norm");
    }
}
