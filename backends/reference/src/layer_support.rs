//! What CpuRef supports, with a reason for every refusal.

use backplane_api::{DataType, LayerDescriptor, Support, TensorInfo};

use crate::workloads::elementwise::broadcast_shape;

fn all_f32(what: &str, tensors: &[TensorInfo]) -> Result<(), Support> {
    match tensors
        .iter()
        .position(|t| t.data_type != DataType::Float32)
    {
        Some(i) => Err(Support::unsupported(format!(
            "CpuRef supports only Float32; {what} {i} is {}",
            tensors[i].data_type
        ))),
        None => Ok(()),
    }
}

fn counts(
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
    n_in: usize,
    n_out: usize,
) -> Result<(), Support> {
    if inputs.len() != n_in || outputs.len() != n_out {
        return Err(Support::unsupported(format!(
            "expected {n_in} input(s) and {n_out} output(s), got {} and {}",
            inputs.len(),
            outputs.len()
        )));
    }
    Ok(())
}

fn check(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), Support> {
    match layer {
        LayerDescriptor::Input(_) | LayerDescriptor::Output(_) => {
            counts(inputs, outputs, 1, 1)?;
            all_f32("input", inputs)?;
            all_f32("output", outputs)?;
            if inputs[0].shape != outputs[0].shape {
                return Err(Support::unsupported("input and output shapes differ"));
            }
            Ok(())
        }
        LayerDescriptor::ElementwiseBinary(_) => {
            counts(inputs, outputs, 2, 1)?;
            all_f32("input", inputs)?;
            all_f32("output", outputs)?;
            match broadcast_shape(&inputs[0].shape, &inputs[1].shape) {
                Some(s) if s.as_slice() == outputs[0].shape.as_slice() => Ok(()),
                Some(s) => Err(Support::unsupported(format!(
                    "output shape {:?} is not the broadcast shape {s:?}",
                    outputs[0].shape.as_slice()
                ))),
                None => Err(Support::unsupported(format!(
                    "shapes {:?} and {:?} do not broadcast",
                    inputs[0].shape.as_slice(),
                    inputs[1].shape.as_slice()
                ))),
            }
        }
        other => Err(Support::unsupported(format!(
            "CpuRef does not implement {} yet",
            other.kind()
        ))),
    }
}

/// CpuRef's answer for one layer.
pub fn is_layer_supported(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Support {
    check(layer, inputs, outputs)
        .err()
        .unwrap_or(Support::Supported)
}

#[cfg(test)]
mod tests {
    use backplane_api::{BinaryOperation, LayerKind};

    use super::*;

    fn f32t(shape: &[u32]) -> TensorInfo {
        TensorInfo::new(shape, DataType::Float32)
    }

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
        let int = is_layer_supported(
            &add,
            &[TensorInfo::new(&[2], DataType::Signed32), f32t(&[2])],
            &[f32t(&[2])],
        );
        assert_eq!(
            int,
            Support::unsupported("CpuRef supports only Float32; input 0 is Signed32")
        );
    }

    #[test]
    fn refuses_unimplemented_layers_with_reason() {
        let s = is_layer_supported(&LayerDescriptor::MemCopy, &[f32t(&[1])], &[f32t(&[1])]);
        assert_eq!(
            s,
            Support::unsupported(format!(
                "CpuRef does not implement {} yet",
                LayerKind::MemCopy
            ))
        );
    }
}
