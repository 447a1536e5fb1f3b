//! The cases of the conversions between Float32 and quantised types.

use backplane_api::{DataType, LayerDescriptor, PerAxisQuantization, Quantization, TensorInfo};

use super::{Case, qtensor, qtensor_axis};

/// The three conversions, `Quantize`, `Dequantize` and `Requantize`, per tensor and per axis.
pub(super) fn conversions() -> Vec<Case> {
    let u8q = DataType::QAsymmU8;
    let s8q = DataType::QAsymmS8;
    let s8s = DataType::QSymmS8;
    let f = |s: &[u32]| TensorInfo::new(s, DataType::Float32);
    let per_tensor = Quantization::per_tensor;
    let per_axis = |axis: u32, scales: &[f32]| Quantization {
        scale: 0.0,
        offset: 0,
        per_axis: Some(PerAxisQuantization {
            axis,
            scales: scales.to_vec().into(),
        })
        .into(),
    };
    let mut v: Vec<Case> = Vec::new();
    let mut push = |name: &str, layer, inputs, out: Option<Quantization>| {
        v.push((format!("layer/{name}"), layer, inputs, out));
    };
    push(
        "Quantize/u8_per_tensor",
        LayerDescriptor::Quantize(u8q),
        vec![f(&[2, 3, 4])],
        Some(per_tensor(0.01, 120)),
    );
    push(
        "Quantize/s8_per_axis",
        LayerDescriptor::Quantize(s8s),
        vec![f(&[2, 3, 4])],
        Some(per_axis(1, &[0.004, 0.01, 0.02])),
    );
    push(
        "Dequantize/u8_per_tensor",
        LayerDescriptor::Dequantize,
        vec![qtensor(&[2, 3, 4], u8q, 0.03, 131)],
        None,
    );
    push(
        "Dequantize/s8_per_axis",
        LayerDescriptor::Dequantize,
        vec![qtensor_axis(&[3, 4], s8s, 0, &[0.5, 0.01, 0.125])],
        None,
    );
    push(
        "Requantize/u8_to_s8_per_tensor",
        LayerDescriptor::Requantize(s8q),
        vec![qtensor(&[2, 3, 4], u8q, 0.02, 128)],
        Some(per_tensor(0.03, -5)),
    );
    push(
        "Requantize/per_axis_to_u8",
        LayerDescriptor::Requantize(u8q),
        vec![qtensor_axis(&[2, 3, 4], s8s, 2, &[0.01, 0.02, 0.04, 0.08])],
        Some(per_tensor(0.02, 100)),
    );
    v
}
