//! The layer suite's cases: every layer kind's sample and variants of its attributes in
//! Float32 (and Signed32, Boolean: [`layer_cases`]), then the cases with quantised tensors
//! ([`quantized_cases`]), one file per operator family; and the kit's seeded input data.

use backplane::{plugins::inspect, seeded::uniform as seeded_data};
use backplane_api::{
    DataType, LayerDescriptor, LayerKind, PerAxisQuantization, Quantization, TensorInfo,
};
use serde::Deserialize;

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

/// The case files, one per operator family, each beside the oracle file of that family
/// (`oracle/<family>.rs` and `oracle/<family>.json`; the conversions' oracle is
/// `quantized_oracle.rs`). Adding a family is one line here.
const CASE_FILES: [(&str, &str); 10] = [
    ("convolution", include_str!("oracle/convolution.json")),
    ("elementwise", include_str!("oracle/elementwise.json")),
    ("resize", include_str!("oracle/resize.json")),
    ("movement", include_str!("oracle/movement.json")),
    ("scatter", include_str!("oracle/scatter.json")),
    ("detection", include_str!("oracle/detection.json")),
    ("matmul", include_str!("oracle/matmul.json")),
    ("normalization", include_str!("oracle/normalization.json")),
    ("reduction", include_str!("oracle/reduction.json")),
    ("quantization", include_str!("oracle/quantization.json")),
];

/// One case file: the cases the f64 oracle ([`crate::oracle`]) judges, and the cases with
/// quantised tensors that [`crate::quantized_oracle`] judges.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    #[serde(default)]
    cases: Vec<CaseSpec>,
    #[serde(default)]
    quantized_cases: Vec<CaseSpec>,
}

/// One case as written: `{"name", "layer" (the descriptor in its serde form), "inputs",
/// "output_quantization"?}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseSpec {
    name: String,
    layer: LayerDescriptor,
    inputs: Vec<TensorSpec>,
    #[serde(default)]
    output_quantization: Option<QuantizationSpec>,
}

/// An input as written: `{"shape", "type", "quantization"?, "constant"?}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TensorSpec {
    shape: Vec<u32>,
    #[serde(rename = "type")]
    data_type: DataType,
    #[serde(default)]
    quantization: Option<QuantizationSpec>,
    #[serde(default)]
    constant: bool,
}

/// Quantisation as written: `{"scale", "offset"}` per tensor or `{"axis", "scales"}` per axis
/// (offset 0).
#[derive(Deserialize)]
#[serde(untagged, deny_unknown_fields)]
enum QuantizationSpec {
    PerTensor { scale: f32, offset: i32 },
    PerAxis { axis: u32, scales: Vec<f32> },
}

impl QuantizationSpec {
    fn to_quantization(&self) -> Quantization {
        match self {
            Self::PerTensor { scale, offset } => Quantization::per_tensor(*scale, *offset),
            Self::PerAxis { axis, scales } => Quantization {
                scale: 0.0,
                offset: 0,
                per_axis: Some(PerAxisQuantization {
                    axis: *axis,
                    scales: scales.clone().into(),
                })
                .into(),
            },
        }
    }
}

impl TensorSpec {
    fn to_info(&self) -> TensorInfo {
        let mut info = TensorInfo::new(&self.shape, self.data_type);
        if let Some(q) = &self.quantization {
            info = info.with_quantization(q.to_quantization());
        }
        if self.constant {
            info = info.constant();
        }
        info
    }
}

/// Every case file, parsed. Panics when one does not parse: the files are part of the kit's
/// source (compiled in), and a unit test parses every one.
fn case_files() -> Vec<CaseFile> {
    CASE_FILES
        .iter()
        .map(|(family, text)| {
            serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("the kit's case file oracle/{family}.json: {e}"))
        })
        .collect()
}

/// The layer cases: every layer kind's sample (from `inspect::sample_layer`), then the cases
/// of each family's file.
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
    for file in case_files() {
        for c in file.cases {
            v.push((
                c.name,
                c.layer,
                c.inputs.iter().map(TensorSpec::to_info).collect(),
            ));
        }
    }
    v
}

/// The cases with quantised tensors (Backend API 1.2), as the layers doc defines them: the
/// three conversions per tensor and per axis; the products with u8 or s8 activations, s8
/// per-channel or per-tensor weights and a Signed32 bias; the dynamically quantised
/// `FullyConnected` (Float32 input); the layers that compute on real values; and the layers
/// that move stored values.
pub(crate) fn quantized_cases() -> Vec<Case> {
    case_files()
        .into_iter()
        .flat_map(|file| file.quantized_cases)
        .map(|c| {
            let inputs = c.inputs.iter().map(TensorSpec::to_info).collect();
            let output = c
                .output_quantization
                .as_ref()
                .map(QuantizationSpec::to_quantization);
            (c.name, c.layer, inputs, output)
        })
        .collect()
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

    /// Every case file parses, every case name is unique and names its layer kind, and every
    /// operation of the element-wise layers has a case (the files are data: nothing generates
    /// a case for an operation a minor appends).
    #[test]
    fn case_files_parse_and_cover_every_operation() {
        let cases = all_cases();
        let mut names: Vec<&str> = cases.iter().map(|c| c.0.as_str()).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "duplicate case names");
        for (name, layer, _, _) in &cases {
            let kind = format!("layer/{}/", layer.kind());
            assert!(name.starts_with(&kind), "{name} is not a {kind} case");
        }
        let has = |want: &LayerDescriptor| cases.iter().any(|c| &c.1 == want);
        for op in backplane_api::UnaryOperation::ALL {
            assert!(has(&LayerDescriptor::ElementwiseUnary(op)), "{op:?}");
        }
        for op in backplane_api::BinaryOperation::ALL {
            assert!(has(&LayerDescriptor::ElementwiseBinary(op)), "{op:?}");
        }
        for f in backplane_api::ActivationFunction::ALL {
            assert!(
                cases
                    .iter()
                    .any(|c| matches!(&c.1, LayerDescriptor::Activation(a) if a.function == f)),
                "{f:?}"
            );
        }
    }

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
            let types: Vec<_> = inputs.iter().map(|t| t.data_type).collect();
            let want = oracle::evaluate_typed(&layer, &tensors, &types)
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
                    | LayerDescriptor::Softmax(_)
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
