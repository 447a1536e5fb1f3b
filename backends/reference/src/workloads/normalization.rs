//! Normalization (Backend API 1.1): local response normalisation across the channels of an
//! NCHW tensor, ONNX `LRN` (AlexNet, ZFNet, GoogLeNet). For each element, the squares of the
//! same position in the neighbouring channels `lo..=hi` (`lo = c - (size - 1) / 2`,
//! `hi = c + size / 2`, clipped to the tensor) are summed in channel order, and
//! `y = x / (k + alpha / size * sum) ^ beta`, in the tensors' type (Float32 or Float64).

use backplane_api::{
    BackendResult, LayerDescriptor, NormalizationDescriptor, TensorView, TensorViewMut, Workload,
    WorkloadDesc,
};

use super::{ExpectedShapes, checked_num_elements, expect_counts, float_workload, invalid_layer};

/// Creates the workload of a `Normalization` layer (one 4-D NCHW input, an output of its shape).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Normalization(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a Normalization layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    let x = &desc.inputs[0];
    if x.shape.len() != 4 || x.shape != desc.outputs[0].shape || d.size == 0 {
        return Err(invalid_layer(
            desc,
            format_args!("LRN of size {} from {} into {}", d.size, x, desc.outputs[0]),
        ));
    }
    checked_num_elements(desc, x)?;
    let dims = [x.shape[0], x.shape[1], x.shape[2], x.shape[3]].map(|v| v as usize);
    Ok(Box::new(NormalizationWorkload {
        d: *d,
        dims,
        shapes: ExpectedShapes::of(desc),
    }))
}

/// LRN across channels.
#[derive(Debug)]
pub struct NormalizationWorkload {
    d: NormalizationDescriptor,
    /// `[n, c, h, w]`.
    dims: [usize; 4],
    shapes: ExpectedShapes,
}

impl NormalizationWorkload {
    /// The normalisation in `T` (`f32` or `f64`, the tensors' type): the window's sum of
    /// squares and the power in `T`.
    fn run<T>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()>
    where
        T: backplane_api::Element + num_traits::Float + std::ops::AddAssign + From<f32>,
    {
        let src = inputs[0].as_slice::<T>()?;
        let dst = outputs[0].as_mut_slice::<T>()?;
        let [n, c, h, w] = self.dims;
        let plane = h * w;
        let size = self.d.size as usize;
        let (before, after) = ((size - 1) / 2, size / 2);
        let scale = <T as From<f32>>::from(self.d.alpha / self.d.size as f32);
        let (k, beta) = (
            <T as From<f32>>::from(self.d.k),
            <T as From<f32>>::from(self.d.beta),
        );
        for b in 0..n {
            let image = &src[b * c * plane..(b + 1) * c * plane];
            let out = &mut dst[b * c * plane..(b + 1) * c * plane];
            for ch in 0..c {
                let lo = ch.saturating_sub(before);
                let hi = (ch + after).min(c - 1);
                for p in 0..plane {
                    let mut sum = T::zero();
                    for j in lo..=hi {
                        let v = image[j * plane + p];
                        sum += v * v;
                    }
                    let x = image[ch * plane + p];
                    out[ch * plane + p] = x / (k + scale * sum).powf(beta);
                }
            }
        }
        Ok(())
    }
}

float_workload!(NormalizationWorkload);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, run};

    /// The oracle, in f64 from ONNX's definition: the window as ONNX writes it,
    /// `[max(0, c - floor((size - 1) / 2)), min(C - 1, c + ceil((size - 1) / 2))]`.
    fn oracle(d: &NormalizationDescriptor, dims: [usize; 4], x: &[f32]) -> Vec<f64> {
        let [n, c, h, w] = dims;
        let size = f64::from(d.size);
        let mut y = vec![0.0; x.len()];
        let at = |b: usize, ch: usize, i: usize, j: usize| ((b * c + ch) * h + i) * w + j;
        for b in 0..n {
            for ch in 0..c {
                let lo = (ch as f64 - ((size - 1.0) / 2.0).floor()).max(0.0) as usize;
                let hi = (ch as f64 + ((size - 1.0) / 2.0).ceil()).min((c - 1) as f64) as usize;
                for i in 0..h {
                    for j in 0..w {
                        let sum: f64 = (lo..=hi)
                            .map(|k| f64::from(x[at(b, k, i, j)]).powi(2))
                            .sum();
                        let base = f64::from(d.k) + f64::from(d.alpha) / size * sum;
                        y[at(b, ch, i, j)] =
                            f64::from(x[at(b, ch, i, j)]) / base.powf(f64::from(d.beta));
                    }
                }
            }
        }
        y
    }

    #[test]
    fn matches_onnx_definition_for_odd_and_even_windows() {
        let shape = [2u32, 7, 3, 4];
        let dims = shape.map(|v| v as usize);
        let mut rng = Lcg(31);
        let x = rng.vec_in(2 * 7 * 3 * 4, -3.0, 3.0);
        for (size, alpha, beta, k) in [
            (5, 1e-4, 0.75, 1.0), // AlexNet's
            (3, 0.5, 0.5, 2.0),
            (4, 0.3, 1.0, 1.0), // even: one more channel after than before
            (1, 1.0, 1.0, 1.0),
            (9, 2.0, 0.75, 0.5), // wider than the channels
        ] {
            let d = NormalizationDescriptor {
                size,
                alpha,
                beta,
                k,
            };
            let got = run(&LayerDescriptor::Normalization(d), &[(&shape, &x)], &shape);
            assert_close(&got, &oracle(&d, dims, &x), 1e-5, &format!("size {size}"));
        }
    }
}
