//! InstanceNormalization (Backend API 1.1): each channel of each batch item normalised over
//! its spatial elements, then scaled and shifted per channel (ONNX `InstanceNormalization`).
//! Float32 or Float64; statistics in f64, as in `LayerNormalization`.

use backplane_api::{
    BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::layer_norm::{Real, normalize};
use super::{ExpectedShapes, checked_num_elements, expect_counts, float_workload, invalid_layer};

/// Creates the workload of an `InstanceNormalization` layer (inputs `[x, scale, bias]`).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::InstanceNormalization(d) = desc.layer else {
        return Err(invalid_layer(desc, "not an InstanceNormalization layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 3, 1)?;
    let x = &desc.inputs[0];
    checked_num_elements(desc, x)?;
    if x.shape.len() < 3 {
        return Err(invalid_layer(
            desc,
            format_args!("InstanceNormalization of {x}"),
        ));
    }
    Ok(Box::new(InstanceNormWorkload {
        shapes: ExpectedShapes::of(desc),
        group: x.shape[2..].iter().map(|&v| v as usize).product(),
        epsilon: d.epsilon,
    }))
}

/// Normalises each `(n, c)` plane.
#[derive(Debug)]
pub struct InstanceNormWorkload {
    shapes: ExpectedShapes,
    /// Spatial elements per plane.
    group: usize,
    epsilon: f32,
}

impl InstanceNormWorkload {
    /// The normalisation in `T` (`f32` or `f64`, the tensors' type).
    fn run<T: Real>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let x = inputs[0].as_slice::<T>()?;
        let (scale, bias) = (inputs[1].as_slice::<T>()?, inputs[2].as_slice::<T>()?);
        let y = outputs[0].as_mut_slice::<T>()?;
        if scale.is_empty() {
            return Ok(());
        }
        normalize(x, y, self.group, self.epsilon, false, scale, Some(bias));
        Ok(())
    }
}

float_workload!(InstanceNormWorkload);

#[cfg(test)]
mod tests {
    use backplane_api::InstanceNormalizationDescriptor;

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, run};

    #[test]
    fn matches_the_definition_per_plane() {
        let shape = [2u32, 3, 2, 5];
        let mut rng = Lcg(33);
        let x = rng.vec_in(60, -2.0, 4.0);
        let (scale, bias) = (rng.vec(3), rng.vec(3));
        let layer = LayerDescriptor::InstanceNormalization(InstanceNormalizationDescriptor {
            epsilon: 1e-3,
        });
        let got = run(
            &layer,
            &[(&shape, &x), (&[3], &scale), (&[3], &bias)],
            &shape,
        );
        let mut want = Vec::new();
        for (p, plane) in x.chunks(10).enumerate() {
            let c = p % 3;
            let m = plane.iter().map(|&v| f64::from(v)).sum::<f64>() / 10.0;
            let v = plane
                .iter()
                .map(|&v| (f64::from(v) - m).powi(2))
                .sum::<f64>()
                / 10.0;
            for &e in plane {
                want.push(
                    (f64::from(e) - m) / (v + 1e-3).sqrt() * f64::from(scale[c])
                        + f64::from(bias[c]),
                );
            }
        }
        assert_close(&got, &want, 1e-6, "instance norm");
    }
}
