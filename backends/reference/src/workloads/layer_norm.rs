//! LayerNormalization (Backend API 1.1): each group of elements sharing their indices before
//! `axis` normalised by its mean and biased variance, then scaled and shifted element-wise
//! (ONNX `LayerNormalization`), in Float32 or Float64. Statistics in f64.

use backplane_api::{
    BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::{ExpectedShapes, checked_num_elements, expect_counts, float_workload, invalid_layer};

/// The element types the normalisations compute in: `f32` and `f64` (statistics in f64).
pub(crate) trait Real: backplane_api::Element + num_traits::Float + Into<f64> {}

impl<T: backplane_api::Element + num_traits::Float + Into<f64>> Real for T {}

/// Normalises `x` in groups of `group` consecutive elements: `y = (x - mean) / sqrt(var + eps)
/// * scale(i) + bias(i)`, where `i` is the element's position in its group for
/// LayerNormalization (`per_element`) and its group's number modulo the channels otherwise.
pub(crate) fn normalize<T: Real>(
    x: &[T],
    y: &mut [T],
    group: usize,
    epsilon: f32,
    per_element: bool,
    scale: &[T],
    bias: Option<&[T]>,
) {
    if group == 0 {
        return;
    }
    for (g, (xs, ys)) in x
        .chunks_exact(group)
        .zip(y.chunks_exact_mut(group))
        .enumerate()
    {
        let n = group as f64;
        let mean = xs.iter().map(|&v| v.into()).sum::<f64>() / n;
        let var = xs.iter().map(|&v| (v.into() - mean).powi(2)).sum::<f64>() / n;
        let inv = 1.0 / (var + f64::from(epsilon)).sqrt();
        for (i, (&v, out)) in xs.iter().zip(ys.iter_mut()).enumerate() {
            let k = if per_element { i } else { g % scale.len() };
            let b = bias.map_or(0.0, |b| b[k].into());
            *out = T::from((v.into() - mean) * inv * scale[k].into() + b).unwrap_or_else(T::nan);
        }
    }
}

/// Creates the workload of a `LayerNormalization` layer (inputs `[x, scale, bias?]`).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::LayerNormalization(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a LayerNormalization layer"));
    };
    let n_in = if d.bias_enabled { 3 } else { 2 };
    expect_counts(desc.inputs.len(), desc.outputs.len(), n_in, 1)?;
    let x = &desc.inputs[0];
    checked_num_elements(desc, x)?;
    let axis = d.axis as usize;
    if axis >= x.shape.len() {
        return Err(invalid_layer(desc, format_args!("axis {axis} of {x}")));
    }
    Ok(Box::new(LayerNormWorkload {
        shapes: ExpectedShapes::of(desc),
        group: x.shape[axis..].iter().map(|&v| v as usize).product(),
        epsilon: d.epsilon,
    }))
}

/// Normalises groups of trailing elements.
#[derive(Debug)]
pub struct LayerNormWorkload {
    shapes: ExpectedShapes,
    /// Elements per normalised group.
    group: usize,
    epsilon: f32,
}

impl LayerNormWorkload {
    /// The normalisation in `T` (`f32` or `f64`, the tensors' type).
    fn run<T: Real>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let x = inputs[0].as_slice::<T>()?;
        let scale = inputs[1].as_slice::<T>()?;
        let bias = inputs.get(2).map(TensorView::as_slice::<T>).transpose()?;
        let y = outputs[0].as_mut_slice::<T>()?;
        normalize(x, y, self.group, self.epsilon, true, scale, bias);
        Ok(())
    }
}

float_workload!(LayerNormWorkload);

#[cfg(test)]
mod tests {
    use backplane_api::LayerNormalizationDescriptor;

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, run};

    #[test]
    fn every_axis_with_and_without_bias_matches_the_definition() {
        let shape = [2u32, 3, 4];
        let mut rng = Lcg(21);
        let x = rng.vec_in(24, -3.0, 3.0);
        for axis in 0..3usize {
            let group: usize = shape[axis..].iter().map(|&v| v as usize).product();
            let pshape = &shape[axis..];
            let scale = rng.vec(group);
            let bias = rng.vec(group);
            for with_bias in [false, true] {
                let layer = LayerDescriptor::LayerNormalization(LayerNormalizationDescriptor {
                    axis: axis as u32,
                    epsilon: 1e-5,
                    bias_enabled: with_bias,
                });
                let mut inputs: Vec<(&[u32], &[f32])> = vec![(&shape, &x), (pshape, &scale)];
                if with_bias {
                    inputs.push((pshape, &bias));
                }
                let got = run(&layer, &inputs, &shape);
                // The oracle: two passes per group, in f64, by the definition.
                let mut want = Vec::new();
                for g in x.chunks(group) {
                    let m = g.iter().map(|&v| f64::from(v)).sum::<f64>() / group as f64;
                    let v = g
                        .iter()
                        .map(|&v| (f64::from(v) - m) * (f64::from(v) - m))
                        .sum::<f64>()
                        / group as f64;
                    for (i, &e) in g.iter().enumerate() {
                        let b = if with_bias { f64::from(bias[i]) } else { 0.0 };
                        want.push((f64::from(e) - m) / (v + 1e-5).sqrt() * f64::from(scale[i]) + b);
                    }
                }
                assert_close(&got, &want, 1e-6, &format!("axis {axis} bias {with_bias}"));
            }
        }
    }
}
