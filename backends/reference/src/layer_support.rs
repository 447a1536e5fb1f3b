//! What CpuRef supports, with a reason for every refusal: every layer in Float32, the layers
//! that move or select elements also in Signed32 and Boolean, with the shapes and data types
//! `backplane_api::shapes` defines (ONNX semantics).

use backplane_api::{DataType, LayerDescriptor, Support, TensorInfo, shapes};

/// The types CpuRef runs the layers that only move, select or convert elements in.
const MOVED: [DataType; 3] = [DataType::Float32, DataType::Signed32, DataType::Boolean];

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

/// The data types of `layer`'s tensors: those `shapes` fixes, then CpuRef's own limits.
fn check_types(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
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
        | LayerDescriptor::Cast(_) => {
            all_in("input", inputs, &MOVED)?;
            all_in("output", outputs, &MOVED)?;
        }
        LayerDescriptor::ElementwiseBinary(_) | LayerDescriptor::Comparison(_) => {
            all_in("input", inputs, &[DataType::Float32, DataType::Signed32])?;
        }
        LayerDescriptor::ArgMinMax(_) => all_f32("input", inputs)?,
        _ => {
            all_f32("input", inputs)?;
            all_f32("output", outputs)?;
        }
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
mod tests {
    use backplane_api::{BinaryOperation, PreCompiledDescriptor};

    use super::*;
    use crate::workloads::test_support::f32t;

    #[test]
    fn add_broadcast_support() {
        let add = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
        let ok = is_layer_supported(&add, &[f32t(&[2, 3]), f32t(&[3])], &[f32t(&[2, 3])]);
        assert_eq!(ok, Support::Supported);
        let bad = is_layer_supported(&add, &[f32t(&[2, 3]), f32t(&[2])], &[f32t(&[2, 3])]);
        assert_eq!(
            bad,
            Support::unsupported("shapes [2, 3] and [2] do not broadcast")
        );
        let wrong_out = is_layer_supported(&add, &[f32t(&[2, 3]), f32t(&[3])], &[f32t(&[3, 2])]);
        assert_eq!(
            wrong_out,
            Support::unsupported("output shapes [[3, 2]] differ from the expected [[2, 3]]")
        );
        let int = is_layer_supported(
            &add,
            &[TensorInfo::new(&[2], DataType::Signed32), f32t(&[2])],
            &[f32t(&[2])],
        );
        assert_eq!(
            int,
            Support::unsupported("inputs must share one data type, got Signed32 and Float32")
        );
        let bools = TensorInfo::new(&[2], DataType::Boolean);
        assert_eq!(
            is_layer_supported(&add, &[bools.clone(), bools.clone()], &[bools]),
            Support::unsupported("CpuRef runs this layer in Float32, Signed32; input 0 is Boolean")
        );
    }

    #[test]
    fn refuses_backend_specific_layers_with_reason() {
        let p = LayerDescriptor::PreCompiled(PreCompiledDescriptor {
            backend: "CpuFast".into(),
            operation: "Conv2dBiasReLU".into(),
            payload: Default::default(),
        });
        let s = is_layer_supported(&p, &[f32t(&[1])], &[f32t(&[1])]);
        assert_eq!(
            s,
            Support::unsupported(
                "CpuRef does not run backend-specific layers (Conv2dBiasReLU of CpuFast)"
            )
        );
    }
}
