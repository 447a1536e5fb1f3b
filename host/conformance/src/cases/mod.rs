//! The layer suite's cases: every layer kind's sample and variants of its attributes in
//! Float32 (and Signed32, Boolean: [`layer_cases`]), then the cases with quantised tensors
//! ([`quantized_cases`]), one file per operator family; and the kit's seeded input data.

mod convolution;
mod elementwise;
mod matmul;
mod movement;
mod normalization;
mod quantization;
mod reduction;
mod resize;

use backplane::{plugins::inspect, seeded::uniform as seeded_data};
use backplane_api::{
    DataType, LayerDescriptor, LayerKind, Padding2d, PerAxisQuantization, Quantization, TensorInfo,
};

/// A layer case: its name, layer, inputs, and the output's quantisation parameters when the
/// network chooses them (a quantised output not inferred from the first input).
pub(crate) type Case = (
    String,
    LayerDescriptor,
    Vec<TensorInfo>,
    Option<Quantization>,
);

/// A case of [`layer_cases`]: its name, layer and inputs (Float32, Signed32 or Boolean).
pub(crate) type FloatCase = (String, LayerDescriptor, Vec<TensorInfo>);

/// One element of padding on every side.
fn pad_one() -> Padding2d {
    Padding2d {
        left: 1,
        right: 1,
        top: 1,
        bottom: 1,
    }
}

/// A per-tensor quantised tensor.
fn qtensor(shape: &[u32], data_type: DataType, scale: f32, offset: i32) -> TensorInfo {
    TensorInfo::new(shape, data_type).with_quantization(Quantization::per_tensor(scale, offset))
}

/// A tensor quantised along `axis` with `scales` (offset 0).
fn qtensor_axis(shape: &[u32], data_type: DataType, axis: u32, scales: &[f32]) -> TensorInfo {
    TensorInfo::new(shape, data_type).with_quantization(Quantization {
        scale: 0.0,
        offset: 0,
        per_axis: Some(PerAxisQuantization {
            axis,
            scales: scales.to_vec().into(),
        })
        .into(),
    })
}

/// The layer cases: every v1 layer, and variants of its attributes (one file per operator
/// family).
pub(crate) fn layer_cases() -> Vec<FloatCase> {
    let mut v: Vec<FloatCase> = Vec::new();
    for kind in LayerKind::ALL {
        if matches!(
            kind,
            LayerKind::Input
                | LayerKind::Output
                | LayerKind::PreCompiled
                | LayerKind::Quantize
                | LayerKind::Dequantize
                | LayerKind::Requantize
        ) {
            continue;
        }
        if let Some((d, ins, _)) = inspect::sample_layer(kind, DataType::Float32) {
            v.push((format!("layer/{kind}/basic"), d, ins));
        }
    }
    v.extend(convolution::convolutions());
    v.extend(elementwise::activations());
    v.extend(elementwise::binary());
    v.extend(elementwise::unary());
    v.extend(resize::resize());
    v.extend(convolution::transpose_convolution());
    v.extend(movement::slice());
    v.extend(matmul::batch_matmul());
    v.extend(normalization::local_response());
    v.extend(convolution::pooling());
    v.extend(normalization::softmax());
    v.extend(movement::pad());
    v.extend(movement::non_zero());
    v.extend(movement::scatter());
    v
}

/// The cases with quantised tensors (Backend API 1.2), as the layers doc defines them: the
/// three conversions per tensor and per axis; the products with u8 or s8 activations, s8
/// per-channel or per-tensor weights and a Signed32 bias; the dynamically quantised
/// `FullyConnected` (Float32 input); the layers that compute on real values; and the layers
/// that move stored values.
pub(crate) fn quantized_cases() -> Vec<Case> {
    let mut v = quantization::conversions();
    v.extend(convolution::quantized_convolutions());
    v.extend(matmul::quantized());
    v.extend(elementwise::quantized());
    v.extend(convolution::quantized_pooling());
    v.extend(reduction::quantized_mean());
    v.extend(movement::quantized());
    v
}

/// The infos of a case's outputs: [`backplane_api::shapes::output_infos`], with the case's
/// output quantisation when it gives one.
pub(crate) fn case_outputs(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    quantization: Option<&Quantization>,
) -> Result<Vec<TensorInfo>, String> {
    let mut outputs = backplane_api::shapes::output_infos(layer, inputs)?;
    if let (Some(q), Some(out)) = (quantization, outputs.first_mut()) {
        out.quantization = Some(q.clone()).into();
    }
    Ok(outputs)
}

/// Every case of the layer suite: the Float32 (and Signed32, Boolean) cases, then the
/// quantised ones.
pub(crate) fn all_cases() -> Vec<Case> {
    layer_cases()
        .into_iter()
        .map(|(name, layer, inputs)| (name, layer, inputs, None))
        .chain(quantized_cases())
        .collect()
}

/// The kit's seeded data for a tensor of `info`, as bytes: Float32 from [`seeded_data`];
/// a quantised Signed32 tensor (a bias) in `[-2000, 2000)`, any other Signed32 in `[0, 3)`
/// (valid indices for the suite's `Gather` cases); UnsignedInt32 in `[0, 8)`; Boolean true
/// where the seeded value is positive; the quantised types over their whole range.
pub(crate) fn seeded_bytes(info: &TensorInfo, seed: u64) -> Result<Vec<u8>, String> {
    let values = seeded_data(info.num_elements().unwrap_or(0), seed);
    Ok(match info.data_type {
        DataType::Float32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DataType::Signed32 if info.quantization.is_some() => values
            .iter()
            .flat_map(|v| ((v * 2000.0).floor() as i32).to_le_bytes())
            .collect(),
        DataType::QAsymmU8 => values
            .iter()
            .map(|v| ((v + 1.0) * 128.0).floor().clamp(0.0, 255.0) as u8)
            .collect(),
        DataType::QAsymmS8 | DataType::QSymmS8 => values
            .iter()
            .map(|v| (v * 128.0).floor().clamp(-128.0, 127.0) as i8 as u8)
            .collect(),
        DataType::Signed32 => values
            .iter()
            .flat_map(|v| (((v + 1.0) * 1.5) as i32).min(2).to_le_bytes())
            .collect(),
        DataType::Boolean => values.iter().map(|&v| u8::from(v > 0.0)).collect(),
        // Small enough that the suite's shifts (by up to 7) stay inside the type.
        DataType::UnsignedInt32 => values
            .iter()
            .flat_map(|v| (((v + 1.0) * 4.0) as u32).min(7).to_le_bytes())
            .collect(),
        other => return Err(format!("the layer suite makes no {other} data")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{oracle, quantized_oracle};

    /// Every case of the layer suite has an oracle (none is left to a comparison with CpuRef),
    /// and the oracle's output has the shape the Backend API's shape rules give.
    #[test]
    fn every_layer_case_has_an_oracle() {
        let cases = layer_cases();
        assert!(cases.len() >= 84, "{}", cases.len());
        for (name, layer, inputs) in cases {
            let tensors: Vec<oracle::Tensor> = inputs
                .iter()
                .enumerate()
                .map(|(i, info)| {
                    let bytes = seeded_bytes(info, 7 + i as u64).unwrap();
                    oracle::Tensor::from_bytes(info, &bytes).unwrap()
                })
                .collect();
            let want = oracle::evaluate(&layer, &tensors)
                .unwrap_or_else(|e| panic!("{name}: no oracle: {e}"));
            let infos = backplane_api::shapes::output_infos(&layer, &inputs).unwrap();
            let shape: Vec<usize> = infos[0].shape.iter().map(|&d| d as usize).collect();
            assert_eq!(want.shape, shape, "{name}");
        }
    }

    /// Every quantised case is valid (its output infos pass the quantisation checks) and has a
    /// quantised oracle, whose output has the output's shape; the conversions, products and
    /// moves are compared exactly, the computations on real values within one step.
    #[test]
    fn every_quantized_case_has_an_oracle() {
        let cases = quantized_cases();
        assert!(cases.len() >= 24, "{}", cases.len());
        for (name, layer, inputs, quantization) in cases {
            let outputs = case_outputs(&layer, &inputs, quantization.as_ref()).unwrap();
            for t in inputs.iter().chain(&outputs) {
                t.check_quantization()
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
            }
            let data: Vec<Vec<u8>> = inputs
                .iter()
                .enumerate()
                .map(|(i, info)| seeded_bytes(info, 7 + i as u64).unwrap())
                .collect();
            let pairs: Vec<(&TensorInfo, &[u8])> = inputs
                .iter()
                .zip(&data)
                .map(|(i, b)| (i, b.as_slice()))
                .collect();
            let want = quantized_oracle::evaluate(&layer, &pairs, &outputs[0])
                .unwrap_or_else(|e| panic!("{name}: no oracle: {e}"));
            let shape: Vec<usize> = outputs[0].shape.iter().map(|&d| d as usize).collect();
            assert_eq!(want.values.shape, shape, "{name}");
            let real = matches!(
                layer,
                LayerDescriptor::ElementwiseBinary(_)
                    | LayerDescriptor::Activation(_)
                    | LayerDescriptor::Mean(_)
            ) || name.contains("avg")
                || name.contains("differing");
            let expected = if real {
                quantized_oracle::Tolerance::OneStep
            } else {
                quantized_oracle::Tolerance::Exact
            };
            assert_eq!(want.tolerance, expected, "{name}");
        }
    }
}
