//! The cases of the normalisations: `Normalization` (local response) and `Softmax`.

use backplane_api::{
    DataType, LayerDescriptor, NormalizationDescriptor, SoftmaxDescriptor, TensorInfo,
};

use super::FloatCase;

/// `Normalization` (local response): AlexNet's and an even window.
pub(super) fn local_response() -> Vec<FloatCase> {
    let t = |s: &[u32]| TensorInfo::new(s, DataType::Float32);
    let mut v: Vec<FloatCase> = Vec::new();
    for (name, size, alpha, beta, k) in [
        ("alexnet", 5, 1e-4, 0.75, 1.0),
        ("even_window", 4, 0.3, 1.0, 2.0),
    ] {
        v.push((
            format!("layer/Normalization/{name}"),
            LayerDescriptor::Normalization(NormalizationDescriptor {
                size,
                alpha,
                beta,
                k,
            }),
            vec![t(&[2, 6, 3, 3])],
        ));
    }
    v
}

/// `Softmax` along the first, second and last axis.
pub(super) fn softmax() -> Vec<FloatCase> {
    let t = |s: &[u32]| TensorInfo::new(s, DataType::Float32);
    let mut v: Vec<FloatCase> = Vec::new();
    for axis in [0, 1, -1] {
        v.push((
            format!("layer/Softmax/axis{axis}"),
            LayerDescriptor::Softmax(SoftmaxDescriptor { beta: 1.0, axis }),
            vec![t(&[2, 3, 4])],
        ));
    }
    v
}
