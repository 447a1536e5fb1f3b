//! BitCast (Backend API 1.5): the input's bytes copied unchanged into an output of another
//! plain type of the same width (ONNX `BitCast`; little-endian, as every tensor here is).

use backplane_api::{
    BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::{ExpectedShapes, expect_counts, expect_rule_output, invalid_layer};

/// Creates the workload of a `BitCast` layer (one input, one output).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    if !matches!(desc.layer, LayerDescriptor::BitCast(_)) {
        return Err(invalid_layer(desc, "not a BitCast layer"));
    }
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    expect_rule_output(desc)?;
    Ok(Box::new(BitCastWorkload {
        shapes: ExpectedShapes::of(desc),
    }))
}

/// Copies bytes.
#[derive(Debug)]
pub struct BitCastWorkload {
    shapes: ExpectedShapes,
}

impl Workload for BitCastWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let src = inputs[0].data.as_slice();
        let dst = outputs[0].data.as_mut_slice();
        let n = src.len().min(dst.len());
        dst[..n].copy_from_slice(&src[..n]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{DataType, LayerDescriptor, TensorInfo};

    use crate::workloads::test_support::{Bytes, try_run_typed};

    #[test]
    fn bits_are_kept() {
        let x = [1.0f32, -2.5, f32::NAN, -0.0];
        let got = try_run_typed(
            &LayerDescriptor::BitCast(DataType::Signed32),
            &[(TensorInfo::new(&[2, 2], DataType::Float32), Bytes::of(&x))],
            &TensorInfo::new(&[2, 2], DataType::Signed32),
        )
        .unwrap()
        .to_vec::<i32>();
        // 1.0 = 0x3f800000, -2.5 = 0xc0200000, the canonical NaN 0x7fc00000, -0 = 0x80000000.
        assert_eq!(
            got,
            [0x3f80_0000, 0xc020_0000_u32 as i32, 0x7fc0_0000, i32::MIN]
        );
    }

    #[test]
    fn widths_must_match() {
        let err = try_run_typed(
            &LayerDescriptor::BitCast(DataType::Signed64),
            &[(
                TensorInfo::new(&[2], DataType::Float32),
                Bytes::of(&[0f32; 2]),
            )],
            &TensorInfo::new(&[2], DataType::Signed64),
        )
        .unwrap_err();
        assert!(err.to_string().contains("types of one width"), "{err}");
    }
}
