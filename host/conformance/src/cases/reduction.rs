//! The cases of the reductions: quantised `Mean`.

use backplane_api::{DataType, LayerDescriptor, Quantization};

use super::{Case, qtensor};

/// `Mean` on u8: a global average.
pub(super) fn quantized_mean() -> Vec<Case> {
    let u8q = DataType::QAsymmU8;
    let per_tensor = Quantization::per_tensor;
    let mut v: Vec<Case> = Vec::new();
    let mut push = |name: &str, layer, inputs, out: Option<Quantization>| {
        v.push((format!("layer/{name}"), layer, inputs, out));
    };
    push(
        "Mean/q_global_average",
        LayerDescriptor::Mean(backplane_api::MeanDescriptor {
            axes: vec![2, 3].into(),
            keep_dims: true,
        }),
        vec![qtensor(&[1, 3, 4, 4], u8q, 0.02, 128)],
        Some(per_tensor(0.005, 128)),
    );
    v
}
