//! What CpuRef supports, with a reason for every refusal: every layer in Float32, the layers
//! that move, select or convert elements in every plain type, elementwise arithmetic and
//! comparisons in every plain numeric type (Backend API 1.5), with the shapes and data types
//! `backplane_api::shapes` defines (ONNX semantics); and, with quantised tensors (Backend API
//! 1.2), the layers [`check_quantized`] lists.

use backplane_api::{
    BinaryOperation, DataType, LayerDescriptor, PoolingType, ResizeMethod, Support, TensorInfo,
    shapes,
};

use crate::workloads::widened::as_f32;

/// The types CpuRef runs the layers that only move, select or convert elements in: every
/// plain (not quantised) type.
fn is_plain(t: DataType) -> bool {
    !t.is_quantized()
}

/// The types CpuRef computes elementwise arithmetic and comparisons in: every plain numeric
/// type (not Boolean).
fn is_numeric(t: DataType) -> bool {
    is_plain(t) && t != DataType::Boolean
}

fn all_f32(what: &str, tensors: &[TensorInfo]) -> Result<(), String> {
    match tensors
        .iter()
        .position(|t| t.data_type != DataType::Float32)
    {
        Some(i) => Err(format!(
            "CpuRef supports only Float32; {what} {i} is {}",
            tensors[i].data_type
        )),
        None => Ok(()),
    }
}

fn all_in(what: &str, tensors: &[TensorInfo], allowed: &[DataType]) -> Result<(), String> {
    match tensors.iter().position(|t| !allowed.contains(&t.data_type)) {
        Some(i) => Err(format!(
            "CpuRef runs this layer in {}; {what} {i} is {}",
            allowed
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            tensors[i].data_type
        )),
        None => Ok(()),
    }
}

/// [`all_in`] for the types `allowed` accepts, named `label` in the refusal (`every plain
/// numeric type`).
fn all_of(
    what: &str,
    tensors: &[TensorInfo],
    allowed: fn(DataType) -> bool,
    label: &str,
) -> Result<(), String> {
    match tensors.iter().position(|t| !allowed(t.data_type)) {
        Some(i) => Err(format!(
            "CpuRef runs this layer in {label}; {what} {i} is {}",
            tensors[i].data_type
        )),
        None => Ok(()),
    }
}

/// The quantised activation types (inputs and outputs of the layers that compute).
const ACTIVATIONS: [DataType; 2] = [DataType::QAsymmU8, DataType::QAsymmS8];

/// The quantised weight types of the products.
const WEIGHTS: [DataType; 3] = [DataType::QSymmS8, DataType::QAsymmS8, DataType::QAsymmU8];

/// `what` (a tensor of `types`) quantised per tensor.
fn per_tensor(what: &str, t: &TensorInfo, types: &[DataType]) -> Result<(), String> {
    all_in(what, std::slice::from_ref(t), types)?;
    if t.quantization
        .as_ref()
        .into_option()
        .is_some_and(|q| q.per_axis.is_some())
    {
        return Err(format!("CpuRef needs {what} {t} quantized per tensor"));
    }
    Ok(())
}

/// Weights of `types` quantised per tensor or along `axis`.
fn weights(t: &TensorInfo, axis: usize) -> Result<(), String> {
    all_in("weights", std::slice::from_ref(t), &WEIGHTS)?;
    match t
        .quantization
        .as_ref()
        .into_option()
        .and_then(|q| q.per_axis.as_ref().into_option())
    {
        Some(p) if p.axis as usize != axis => Err(format!(
            "CpuRef needs weights {t} quantized per tensor or along axis {axis} (the output \
             channels), got axis {}",
            p.axis
        )),
        _ => Ok(()),
    }
}

/// A `Signed32` bias, if the layer has one.
fn bias(inputs: &[TensorInfo]) -> Result<(), String> {
    match inputs.get(2) {
        Some(b) if b.data_type != DataType::Signed32 => Err(format!(
            "CpuRef needs a Signed32 bias for quantized inputs, got {}",
            b.data_type
        )),
        _ => Ok(()),
    }
}

/// The first of `tensors` (`what` names them in the error).
fn one<'a>(what: &str, tensors: &'a [TensorInfo]) -> Result<&'a TensorInfo, String> {
    tensors.first().ok_or_else(|| format!("expects an {what}"))
}

/// Whether every quantised input's parameters equal the output's.
fn same_parameters(inputs: &[TensorInfo], outputs: &[TensorInfo]) -> Result<(), String> {
    if crate::workloads::quantized::same_parameters(inputs, outputs) {
        Ok(())
    } else {
        Err(
            "CpuRef moves quantized elements only when the output has the input's data type \
             and quantization parameters"
                .to_owned(),
        )
    }
}

/// A dynamically quantised product (`FullyConnected` or `BatchMatMul`, named `name`): a
/// Float32 input, quantised weights per tensor or along `axis` (their output columns), an
/// optional Float32 bias and one Float32 output.
fn dynamic(
    name: &str,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
    axis: usize,
) -> Result<(), String> {
    let [_, w, rest @ ..] = inputs else {
        return Err("expects an input and weights".to_owned());
    };
    weights(w, axis)?;
    if let Some(b) = rest.first().filter(|b| b.data_type != DataType::Float32) {
        return Err(format!(
            "CpuRef needs a Float32 bias for a dynamically quantized {name} (Float32 input), \
             got {}",
            b.data_type
        ));
    }
    match outputs {
        [y] if y.data_type == DataType::Float32 => Ok(()),
        [y] => Err(format!(
            "CpuRef runs a dynamically quantized {name} (Float32 input, quantized weights) \
             into a Float32 output, got {}",
            y.data_type
        )),
        _ => Err("expects one output".to_owned()),
    }
}

/// A layer with quantised tensors. Supported (every tensor's parameters checked by
/// `TensorInfo::check_quantization`):
/// - `Quantize` (Float32 to a quantised type, per tensor or per axis), `Dequantize` and
///   `Requantize` (either side per tensor or per axis);
/// - `Convolution2d`, `DepthwiseConvolution2d`: a QAsymmU8 or QAsymmS8 input per tensor,
///   QSymmS8/QAsymmS8/QAsymmU8 weights per tensor or along axis 0, an optional Signed32 bias,
///   an output of the input's type per tensor;
/// - `FullyConnected` likewise, the weights per tensor or along their output axis;
///   `BatchMatMul` with a QAsymmU8/QAsymmS8 `a` per tensor and a quantised `b` per tensor or
///   along its column axis;
/// - dynamically quantised `FullyConnected`, `BatchMatMul` and (1.5) `Convolution2d` (see the
///   layers doc): a Float32 input, QSymmS8/QAsymmS8/QAsymmU8 weights per tensor or along their
///   output axis (constant or not: the workload reads them at every call), an optional Float32
///   bias and a Float32 output;
/// - `ElementwiseBinary` `Add` and `Mul`, `Activation` (ReLU, BoundedReLU, LeakyReLU,
///   Sigmoid, TanH, HardSwish), `Pooling2d`, `Mean`, `Softmax`, `Resize`, `Pad`, `Concat`:
///   QAsymmU8/QAsymmS8 per tensor, each tensor with its own parameters, except that
///   `Pooling2d` max, `Pad` and `Resize` nearest keep the input's parameters;
/// - the layers that move elements (`Input`, `Output`, `Constant`, `MemCopy`, `Reshape`,
///   `Flatten`, `Transpose`, `Slice`, `Gather`, `BroadcastTo`): any quantised type, the
///   output's parameters equal to the input's; per axis only through `Input`, `Output`,
///   `Constant`, `MemCopy`, `Reshape` and `Flatten` (the others would move the axis).
fn check_quantized(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
    for t in inputs.iter().chain(outputs) {
        t.check_quantization()?;
    }
    let quantized = |t: &&TensorInfo| t.data_type.is_quantized();
    let name = layer.kind();
    match layer {
        LayerDescriptor::Quantize(_) => {
            all_f32("input", inputs)?;
        }
        LayerDescriptor::Dequantize | LayerDescriptor::Requantize(_) => {}
        LayerDescriptor::Convolution2d(_)
            if inputs.first().map(|x| x.data_type) == Some(DataType::Float32) =>
        {
            dynamic("Convolution2d", inputs, outputs, 0)?;
        }
        LayerDescriptor::Convolution2d(_) | LayerDescriptor::DepthwiseConvolution2d(_) => {
            let [x, w, ..] = inputs else {
                return Err("expects an input and weights".to_owned());
            };
            per_tensor("input", x, &ACTIVATIONS)?;
            weights(w, 0)?;
            bias(inputs)?;
            per_tensor("output", one("output", outputs)?, &[x.data_type])?;
        }
        LayerDescriptor::FullyConnected(d)
            if inputs.first().map(|x| x.data_type) == Some(DataType::Float32) =>
        {
            dynamic(
                "FullyConnected",
                inputs,
                outputs,
                usize::from(!d.transpose_weights),
            )?;
        }
        LayerDescriptor::BatchMatMul(d)
            if inputs.first().map(|x| x.data_type) == Some(DataType::Float32) =>
        {
            let b_rank = inputs.get(1).map_or(0, |b| b.shape.len());
            let axis = b_rank.saturating_sub(if d.transpose_b { 2 } else { 1 });
            dynamic("BatchMatMul", inputs, outputs, axis)?;
        }
        LayerDescriptor::FullyConnected(d) => {
            let [x, w, ..] = inputs else {
                return Err("expects an input and weights".to_owned());
            };
            per_tensor("input", x, &ACTIVATIONS)?;
            weights(w, usize::from(!d.transpose_weights))?;
            bias(inputs)?;
            per_tensor("output", one("output", outputs)?, &[x.data_type])?;
        }
        LayerDescriptor::BatchMatMul(d) => {
            let [a, b] = inputs else {
                return Err("expects two inputs".to_owned());
            };
            per_tensor("input", a, &ACTIVATIONS)?;
            weights(
                b,
                b.shape
                    .len()
                    .saturating_sub(if d.transpose_b { 2 } else { 1 }),
            )?;
            per_tensor("output", one("output", outputs)?, &[a.data_type])?;
        }
        LayerDescriptor::ElementwiseBinary(
            op @ (BinaryOperation::Sub
            | BinaryOperation::Div
            | BinaryOperation::Maximum
            | BinaryOperation::Minimum
            | BinaryOperation::Power
            | BinaryOperation::SquaredDifference),
        ) => {
            return Err(format!(
                "CpuRef runs quantized ElementwiseBinary Add and Mul, not {op:?}"
            ));
        }
        LayerDescriptor::ElementwiseBinary(_)
        | LayerDescriptor::Mean(_)
        | LayerDescriptor::Softmax(_) => {
            for t in inputs.iter().chain(outputs) {
                per_tensor("tensor", t, &ACTIVATIONS)?;
            }
        }
        LayerDescriptor::Concat(_) => {
            for t in inputs.iter().chain(outputs) {
                per_tensor("tensor", t, &ACTIVATIONS)?;
            }
        }
        LayerDescriptor::Activation(a) => {
            use backplane_api::ActivationFunction as F;
            if !matches!(
                a.function,
                F::ReLU | F::BoundedReLU | F::LeakyReLU | F::Sigmoid | F::TanH | F::HardSwish
            ) {
                return Err(format!(
                    "CpuRef runs quantized Activation ReLU, BoundedReLU, LeakyReLU, Sigmoid, \
                     TanH and HardSwish, not {:?}",
                    a.function
                ));
            }
            for t in inputs.iter().chain(outputs) {
                per_tensor("tensor", t, &ACTIVATIONS)?;
            }
        }
        LayerDescriptor::Pooling2d(p) => {
            for t in inputs.iter().chain(outputs) {
                per_tensor("tensor", t, &ACTIVATIONS)?;
            }
            if p.pool_type == PoolingType::Max {
                same_parameters(inputs, outputs)?;
            }
        }
        LayerDescriptor::Resize(r) => {
            per_tensor("input", one("input", inputs)?, &ACTIVATIONS)?;
            per_tensor("output", one("output", outputs)?, &ACTIVATIONS)?;
            if r.method == ResizeMethod::Nearest {
                same_parameters(&inputs[..1.min(inputs.len())], outputs)?;
            }
        }
        LayerDescriptor::Pad(_) => {
            per_tensor("input", one("input", inputs)?, &ACTIVATIONS)?;
            same_parameters(&inputs[..1.min(inputs.len())], outputs)?;
        }
        LayerDescriptor::Input(_)
        | LayerDescriptor::Output(_)
        | LayerDescriptor::Constant(_)
        | LayerDescriptor::MemCopy
        | LayerDescriptor::Reshape(_)
        | LayerDescriptor::Flatten(_) => {
            same_parameters(inputs, outputs)?;
        }
        LayerDescriptor::Transpose(_)
        | LayerDescriptor::Slice(_)
        | LayerDescriptor::Gather(_)
        | LayerDescriptor::BroadcastTo(_) => {
            let data = &inputs[..1.min(inputs.len())];
            for t in data.iter().chain(outputs).filter(quantized) {
                per_tensor("tensor", t, &[t.data_type])?;
            }
            same_parameters(data, outputs)?;
        }
        _ => {
            return Err(format!(
                "CpuRef does not run {name:?} with quantized tensors"
            ));
        }
    }
    Ok(())
}

/// The data types of `layer`'s tensors: those `shapes` fixes, then CpuRef's own limits.
fn check_types(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
    let quantized = |t: &TensorInfo| t.data_type.is_quantized();
    if inputs.iter().chain(outputs).any(quantized) {
        check_quantized(layer, inputs, outputs)?;
        if is_dynamic(layer, inputs) {
            // `check_quantized` has checked every type; `shapes::output_data_types` asks a
            // BatchMatMul for one input type.
            return Ok(());
        }
    } else {
        check_unquantized_types(layer, inputs, outputs)?;
    }
    if matches!(layer, LayerDescriptor::Input(_)) {
        return Ok(());
    }
    let expected = shapes::output_data_types(layer, inputs)?;
    let got: Vec<DataType> = outputs.iter().map(|t| t.data_type).collect();
    if got != expected {
        return Err(format!(
            "output data types {got:?} differ from the expected {expected:?}"
        ));
    }
    Ok(())
}

/// Whether `layer` is a dynamically quantised product: a `FullyConnected`, `BatchMatMul` or
/// `Convolution2d` whose first input is Float32 and whose weights are quantised.
fn is_dynamic(layer: &LayerDescriptor, inputs: &[TensorInfo]) -> bool {
    matches!(
        layer,
        LayerDescriptor::FullyConnected(_)
            | LayerDescriptor::BatchMatMul(_)
            | LayerDescriptor::Convolution2d(_)
    ) && matches!(inputs, [x, w, ..] if x.data_type == DataType::Float32 && w.data_type.is_quantized())
}

/// How CpuRef's layers take data types (without quantised tensors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Types {
    /// Moves, selects or converts elements: every plain type.
    Plain,
    /// Elementwise arithmetic and comparisons: every plain numeric type.
    Numeric,
    /// ArgMinMax: a numeric input of any type (its output is Signed32).
    NumericInput,
    /// Computes in Float32 (and on the 16-bit floats through `workloads::widened`).
    Float32,
    /// Computes in Float32 and in Float64 (and on the 16-bit floats through
    /// `workloads::widened`): `ElementwiseUnary`, `BatchMatMul`, `FullyConnected`, the
    /// convolutions (transposed too), pooling, `Resize`, `Mean`, the normalisations (batch, layer, instance, LRN),
    /// `Softmax`, `Activation`.
    Float32Or64,
    /// Computes in every plain type but the 16-bit floats, which run through
    /// `workloads::widened`: `Reduce`, `Pad`.
    AnyPlain,
    /// Every type the Backend API's shape rules allow (they are few, and checked with the
    /// output types): `NonMaxSuppression`, `RoiAlign`, `BitCast`, `Determinant`,
    /// `DeformableConvolution2d`, `Lstm`.
    AsDefined,
}

fn types_of(layer: &LayerDescriptor) -> Types {
    match layer {
        LayerDescriptor::Input(_)
        | LayerDescriptor::Output(_)
        | LayerDescriptor::Constant(_)
        | LayerDescriptor::MemCopy
        | LayerDescriptor::Reshape(_)
        | LayerDescriptor::Flatten(_)
        | LayerDescriptor::Transpose(_)
        | LayerDescriptor::Concat(_)
        | LayerDescriptor::Slice(_)
        | LayerDescriptor::Gather(_)
        | LayerDescriptor::BroadcastTo(_)
        | LayerDescriptor::Where
        | LayerDescriptor::NonZero
        | LayerDescriptor::Unique(_)
        | LayerDescriptor::ScatterElements(_)
        | LayerDescriptor::ScatterNd(_)
        | LayerDescriptor::Cast(_) => Types::Plain,
        LayerDescriptor::ElementwiseBinary(_) | LayerDescriptor::Comparison(_) => Types::Numeric,
        LayerDescriptor::ArgMinMax(_) => Types::NumericInput,
        LayerDescriptor::ElementwiseUnary(_)
        | LayerDescriptor::BatchMatMul(_)
        | LayerDescriptor::FullyConnected(_)
        | LayerDescriptor::Mean(_)
        | LayerDescriptor::BatchNormalization(_)
        | LayerDescriptor::LayerNormalization(_)
        | LayerDescriptor::InstanceNormalization(_)
        | LayerDescriptor::Normalization(_)
        | LayerDescriptor::TransposeConvolution2d(_)
        | LayerDescriptor::Resize(_)
        | LayerDescriptor::Pooling2d(_)
        | LayerDescriptor::DilatedPooling2d(_)
        | LayerDescriptor::Convolution2d(_)
        | LayerDescriptor::DepthwiseConvolution2d(_)
        | LayerDescriptor::Softmax(_)
        | LayerDescriptor::Activation(_) => Types::Float32Or64,
        LayerDescriptor::Reduce(_) | LayerDescriptor::Pad(_) => Types::AnyPlain,
        LayerDescriptor::NonMaxSuppression(_)
        | LayerDescriptor::RoiAlign(_)
        | LayerDescriptor::BitCast(_)
        | LayerDescriptor::Determinant
        | LayerDescriptor::DeformableConvolution2d(_)
        | LayerDescriptor::Lstm(_) => Types::AsDefined,
        _ => Types::Float32,
    }
}

/// CpuRef's own type limits for a layer without quantised tensors.
fn check_unquantized_types(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
    const PLAIN: &str = "every plain (not quantized) type";
    match types_of(layer) {
        Types::Plain => {
            all_of("input", inputs, is_plain, PLAIN)?;
            all_of("output", outputs, is_plain, PLAIN)?;
        }
        Types::Numeric => all_of("input", inputs, is_numeric, "every plain numeric type")?,
        Types::NumericInput => all_of("input", inputs, is_numeric, "every plain numeric type")?,
        Types::AsDefined => {}
        Types::AnyPlain if half_of(inputs, outputs).is_none() => {
            all_of("input", inputs, is_plain, PLAIN)?;
            all_of("output", outputs, is_plain, PLAIN)?;
        }
        Types::Float32Or64
            if inputs
                .iter()
                .chain(outputs)
                .all(|t| t.data_type == DataType::Float64) => {}
        Types::Float32 | Types::Float32Or64 | Types::AnyPlain => {
            if half_of(inputs, outputs).is_some() {
                // Computed in Float32 between a widening and a rounding (`workloads::widened`).
                let wide_in: Vec<TensorInfo> = inputs.iter().map(as_f32).collect();
                let wide_out: Vec<TensorInfo> = outputs.iter().map(as_f32).collect();
                return check_unquantized_types(layer, &wide_in, &wide_out);
            }
            all_f32("input", inputs)?;
            all_f32("output", outputs)?;
        }
    }
    Ok(())
}

/// `true` for the layers CpuRef computes in Float32 (or also Float64) but not in 16 bits,
/// which run on 16-bit floats through `workloads::widened`.
pub(crate) fn computes_in_f32_only(layer: &LayerDescriptor) -> bool {
    matches!(
        types_of(layer),
        Types::Float32 | Types::Float32Or64 | Types::AnyPlain
    )
}

/// The 16-bit float type every tensor of a layer has, if they all have one (`Float16` or
/// `BFloat16`, not mixed).
pub(crate) fn half_of(inputs: &[TensorInfo], outputs: &[TensorInfo]) -> Option<DataType> {
    let first = inputs.first().or(outputs.first())?.data_type;
    (matches!(first, DataType::Float16 | DataType::BFloat16)
        && inputs
            .iter()
            .chain(outputs)
            .all(|t| t.data_type == first && t.quantization.is_none()))
    .then_some(first)
}

fn check(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
    if let LayerDescriptor::PreCompiled(p) = layer {
        return Err(format!(
            "CpuRef does not run backend-specific layers ({} of {})",
            p.operation, p.backend
        ));
    }
    check_types(layer, inputs, outputs)?;
    let expected = shapes::output_shapes(layer, inputs)?;
    let got: Vec<&[u32]> = outputs.iter().map(|t| t.shape.as_slice()).collect();
    if got != expected.iter().map(Vec::as_slice).collect::<Vec<_>>() {
        return Err(format!(
            "output shapes {got:?} differ from the expected {expected:?}"
        ));
    }
    Ok(())
}

/// CpuRef's answer for one layer.
pub fn is_layer_supported(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Support {
    match check(layer, inputs, outputs) {
        Ok(()) => Support::Supported,
        Err(reason) => Support::unsupported(reason),
    }
}

#[cfg(test)]
#[path = "layer_support_tests.rs"]
mod tests;
