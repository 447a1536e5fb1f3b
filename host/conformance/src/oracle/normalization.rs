//! The normalisations: `Softmax`, `BatchNormalization`, `Normalization` (local response),
//! `LayerNormalization` and `InstanceNormalization`.

use backplane_api::{BatchNormalizationDescriptor, DataLayout, NormalizationDescriptor};

use super::{Tensor, dims4, indices, input, normalize_axis};

/// `Softmax` along `axis`: `y = e^(beta x) / sum along the axis of e^(beta x)` (computed as
/// `e^(beta (x - max))`, the same value without overflow).
pub fn softmax(x: &Tensor, beta: f64, axis: i32) -> Result<Tensor, String> {
    let axis = normalize_axis(axis, x.shape.len())?;
    let mut y = Tensor::zeros(&x.shape);
    for index in indices(&x.shape) {
        let along = |k: usize| {
            let mut i = index.clone();
            i[axis] = k;
            x.at(&i)
        };
        let n = x.shape[axis];
        let max = (0..n).map(along).fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = (0..n).map(|k| (beta * (along(k) - max)).exp()).sum();
        y.set(&index, (beta * (x.at(&index) - max)).exp() / sum);
    }
    Ok(y)
}

/// `BatchNormalization` (inference, NCHW: channels on axis 1), inputs
/// `[x, scale, bias, mean, variance]`:
/// `y = (x - mean[c]) / sqrt(variance[c] + epsilon) * scale[c] + bias[c]`.
pub fn batch_normalization(
    inputs: &[Tensor],
    d: &BatchNormalizationDescriptor,
) -> Result<Tensor, String> {
    if d.layout != DataLayout::Nchw {
        return Err("the oracle's batch normalisation is NCHW".into());
    }
    let x = input(inputs, 0)?;
    let [scale, bias, mean, variance] = [1, 2, 3, 4].map(|slot| input(inputs, slot));
    let (scale, bias, mean, variance) = (scale?, bias?, mean?, variance?);
    let eps = f64::from(d.epsilon);
    let mut y = Tensor::zeros(&x.shape);
    for i in indices(&x.shape) {
        let c = [i[1]];
        let v =
            (x.at(&i) - mean.at(&c)) / (variance.at(&c) + eps).sqrt() * scale.at(&c) + bias.at(&c);
        y.set(&i, v);
    }
    Ok(y)
}

/// `Normalization` (ONNX `LRN`, NCHW): for channel `c` of `C`, with
/// `lo = max(0, c - (size - 1) / 2)` and `hi = min(C - 1, c + size / 2)`,
/// `y = x / (k + alpha / size * sum over lo..=hi of x^2) ^ beta`.
pub fn local_response_normalization(
    x: &Tensor,
    d: &NormalizationDescriptor,
) -> Result<Tensor, String> {
    let [_, channels, _, _] = dims4(x, "input")?;
    let size = d.size as usize;
    let (alpha, beta, k) = (f64::from(d.alpha), f64::from(d.beta), f64::from(d.k));
    let mut y = Tensor::zeros(&x.shape);
    for i in indices(&x.shape) {
        let c = i[1];
        let lo = c.saturating_sub((size - 1) / 2);
        let hi = (c + size / 2).min(channels - 1);
        let mut sum = 0.0;
        for j in lo..=hi {
            let v = x.at(&[i[0], j, i[2], i[3]]);
            sum += v * v;
        }
        y.set(&i, x.at(&i) / (k + alpha / size as f64 * sum).powf(beta));
    }
    Ok(y)
}

/// The mean and the biased variance of `values`.
fn mean_variance(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    (mean, variance)
}

/// `LayerNormalization`, inputs `[x, scale, bias?]`: each group of the elements sharing their
/// indices before `axis` is normalised, `y = (x - mean) / sqrt(variance + epsilon) * scale +
/// bias` with the group's mean and biased variance, `scale` and `bias` indexed by the
/// position in the group.
pub fn layer_normalization(
    inputs: &[Tensor],
    axis: usize,
    epsilon: f64,
    bias_enabled: bool,
) -> Result<Tensor, String> {
    let (x, scale) = (input(inputs, 0)?, input(inputs, 1)?);
    let inner: usize = x.shape[axis..].iter().product();
    let mut data = Vec::with_capacity(x.len());
    for group in x.data.chunks(inner.max(1)) {
        let (mean, variance) = mean_variance(group);
        for (j, &v) in group.iter().enumerate() {
            let bias = if bias_enabled {
                input(inputs, 2)?.data[j]
            } else {
                0.0
            };
            data.push((v - mean) / (variance + epsilon).sqrt() * scale.data[j] + bias);
        }
    }
    Ok(Tensor::new(&x.shape, data))
}

/// `InstanceNormalization`, inputs `[x, scale, bias]` with `x` `[N, C, ...]`: each `x[n, c]`
/// normalised over its other dimensions as [`layer_normalization`] does, then
/// `* scale[c] + bias[c]`.
pub fn instance_normalization(inputs: &[Tensor], epsilon: f64) -> Result<Tensor, String> {
    let [x, scale, bias] = [0, 1, 2].map(|slot| input(inputs, slot));
    let (x, scale, bias) = (x?, scale?, bias?);
    let channels = x.shape[1];
    let plane: usize = x.shape[2..].iter().product();
    let mut data = Vec::with_capacity(x.len());
    for (k, group) in x.data.chunks(plane.max(1)).enumerate() {
        let c = k % channels;
        let (mean, variance) = mean_variance(group);
        for &v in group {
            data.push((v - mean) / (variance + epsilon).sqrt() * scale.data[c] + bias.data[c]);
        }
    }
    Ok(Tensor::new(&x.shape, data))
}
