//! Constant: writes the value held by the layer descriptor to the one output; no inputs.

use backplane_api::{
    BackendError, BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::expect_counts;

/// Creates the workload of a `Constant` layer (no inputs, one output of the constant's shape).
/// The value is decoded once, here.
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Constant(c) = desc.layer else {
        return Err(BackendError::invalid_argument(format!(
            "layer {}: not a Constant layer",
            desc.name
        )));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 0, 1)?;
    if desc.outputs[0].shape != c.info.shape {
        return Err(BackendError::invalid_argument(format!(
            "layer {}: constant {} written to {}",
            desc.name, c.info, desc.outputs[0]
        )));
    }
    Ok(Box::new(ConstantWorkload {
        shape: c.info.shape.to_vec(),
        value: c.to_f32_vec()?,
    }))
}

/// Copies a fixed value to its output.
#[derive(Debug)]
pub struct ConstantWorkload {
    shape: Vec<u32>,
    value: Vec<f32>,
}

impl Workload for ConstantWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        expect_counts(inputs.len(), outputs.len(), 0, 1)?;
        if outputs[0].info.shape.as_slice() != self.shape.as_slice() {
            return Err(BackendError::invalid_argument(format!(
                "constant of shape {:?} written to {}",
                self.shape, outputs[0].info
            )));
        }
        outputs[0].as_f32_mut()?.copy_from_slice(&self.value);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{
        ConstTensor, DataType, ErrorCode, RSlice, RStr, TensorInfo, WorkloadFactory, bytemuck,
    };

    use super::*;
    use crate::workload_factory::CpuRefWorkloadFactory;

    fn desc<'a>(layer: &'a LayerDescriptor, outs: &'a [TensorInfo]) -> WorkloadDesc<'a> {
        WorkloadDesc {
            name: RStr::from("const"),
            layer,
            inputs: RSlice::from_slice(&[]),
            outputs: RSlice::from_slice(outs),
            constants: RSlice::from_slice(&[]),
        }
    }

    /// Builds the workload through the factory (layer support included) and runs it; the
    /// output starts as NaN so an unwritten element fails the comparison.
    fn run(c: &ConstTensor) -> BackendResult<Vec<f32>> {
        let layer = LayerDescriptor::Constant(c.clone());
        let outs = [TensorInfo::new(&c.info.shape, DataType::Float32)];
        let w = CpuRefWorkloadFactory.create_workload(&desc(&layer, &outs))?;
        let n = outs[0].num_elements().unwrap_or(0);
        let mut out = vec![f32::NAN; n];
        let mut ov = [TensorViewMut::new(
            &outs[0],
            bytemuck::cast_slice_mut(&mut out),
        )];
        w.execute(&[], &mut ov)?;
        // Twice: a workload is reusable.
        w.execute(&[], &mut ov)?;
        Ok(out)
    }

    /// The output is the constant's value, bit for bit, for several shapes.
    #[test]
    fn writes_the_value() {
        let values = [
            1.5f32,
            -2.0,
            0.0,
            -0.0,
            f32::MAX,
            f32::MIN_POSITIVE,
            3.25,
            -7.0,
        ];
        assert_eq!(
            run(&ConstTensor::from_f32(&[2, 4], &values)).unwrap(),
            values
        );
        assert_eq!(
            run(&ConstTensor::from_f32(&[2, 2, 2], &values)).unwrap(),
            values
        );
        assert_eq!(run(&ConstTensor::from_f32(&[], &[42.0])).unwrap(), [42.0]);
        assert_eq!(
            run(&ConstTensor::from_f32(&[0, 3], &[])).unwrap(),
            Vec::<f32>::new()
        );
        let got = run(&ConstTensor::from_f32(&[8], &values)).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&values));
    }

    /// Inputs, a wrong output shape or a short buffer are errors, not panics.
    #[test]
    fn bad_configurations_are_errors() {
        let c = ConstTensor::from_f32(&[3], &[1.0, 2.0, 3.0]);
        let layer = LayerDescriptor::Constant(c.clone());
        let wrong = [TensorInfo::new(&[4], DataType::Float32)];
        assert!(
            CpuRefWorkloadFactory
                .create_workload(&desc(&layer, &wrong))
                .is_err()
        );
        assert!(create(&desc(&layer, &wrong)).is_err());
        let outs = [TensorInfo::new(&[3], DataType::Float32)];
        let w = create(&desc(&layer, &outs)).unwrap();
        let mut out = [0f32; 3];
        let mut short_buf = [0f32; 2];
        let x = [0f32; 3];
        let input = [TensorView::new(&outs[0], bytemuck::cast_slice(&x))];
        let mut ov = [TensorViewMut::new(
            &outs[0],
            bytemuck::cast_slice_mut(&mut out),
        )];
        assert_eq!(
            w.execute(&input, &mut ov).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        let mut short = [TensorViewMut::new(
            &outs[0],
            bytemuck::cast_slice_mut(&mut short_buf),
        )];
        assert_eq!(
            w.execute(&[], &mut short).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        let mut other = [TensorViewMut::new(
            &wrong[0],
            bytemuck::cast_slice_mut(&mut out),
        )];
        assert_eq!(
            w.execute(&[], &mut other).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        // A constant whose bytes do not match its shape is refused.
        let mut broken = c;
        broken.data.pop();
        let layer = LayerDescriptor::Constant(broken);
        assert!(
            CpuRefWorkloadFactory
                .create_workload(&desc(&layer, &outs))
                .is_err()
        );
        assert!(create(&desc(&layer, &outs)).is_err());
    }
}
