//! Constant: writes the value held by the layer descriptor to the one output (any data
//! type); no inputs.

use backplane_api::{
    BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::{ExpectedShapes, expect_counts, invalid_layer};

/// Creates the workload of a `Constant` layer (no inputs, one output of the constant's shape).
/// The value is decoded once, here.
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Constant(c) = desc.layer else {
        return Err(invalid_layer(desc, "not a Constant layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 0, 1)?;
    if desc.outputs[0].shape != c.info.shape {
        return Err(invalid_layer(
            desc,
            format_args!("constant {} written to {}", c.info, desc.outputs[0]),
        ));
    }
    if c.info.num_bytes() != Some(c.data.len()) {
        return Err(invalid_layer(
            desc,
            format_args!("constant {} holds {} bytes", c.info, c.data.len()),
        ));
    }
    Ok(Box::new(ConstantWorkload {
        shapes: ExpectedShapes::of(desc),
        value: c.data.to_vec(),
        value_type: c.info.data_type,
    }))
}

/// Copies a fixed value to its output.
#[derive(Debug)]
pub struct ConstantWorkload {
    shapes: ExpectedShapes,
    /// The constant's bytes (checked against its info by layer support).
    value: Vec<u8>,
    value_type: backplane_api::DataType,
}

impl Workload for ConstantWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let out = &mut outputs[0];
        if out.info.data_type != self.value_type || out.data.len() != self.value.len() {
            return Err(backplane_api::BackendError::invalid_argument(format!(
                "constant of {} bytes written to {} ({} bytes)",
                self.value.len(),
                out.info,
                out.data.len()
            )));
        }
        out.data.as_mut_slice().copy_from_slice(&self.value);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::ConstTensor;

    use super::*;
    use crate::workloads::test_support::{
        assert_invalid_argument, desc, execute, f32t, make, nan_output,
    };

    /// Builds the workload through the factory (layer support included) and runs it twice on
    /// an output that starts as NaN.
    fn run(c: &ConstTensor) -> BackendResult<Vec<f32>> {
        let layer = LayerDescriptor::Constant(c.clone());
        let outs = [f32t(&c.info.shape)];
        let w = make(&layer, &[], &outs)?;
        let mut out = nan_output(&outs[0]);
        execute(&*w, &[], &outs[0], &mut out)?;
        // Twice: a workload is reusable.
        execute(&*w, &[], &outs[0], &mut out)?;
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
        let wrong = [f32t(&[4])];
        assert!(make(&layer, &[], &wrong).is_err());
        assert!(create(&desc(&layer, &[], &wrong)).is_err());
        let outs = [f32t(&[3])];
        let w = create(&desc(&layer, &[], &outs)).unwrap();
        let mut out = [0f32; 3];
        let mut short_buf = [0f32; 2];
        let x = [0f32; 3];
        let input = [(&outs[0], &x[..])];
        assert_invalid_argument(execute(&*w, &input, &outs[0], &mut out));
        assert_invalid_argument(execute(&*w, &[], &outs[0], &mut short_buf));
        assert_invalid_argument(execute(&*w, &[], &wrong[0], &mut out));
        // A constant whose bytes do not match its shape is refused.
        let mut broken = c;
        broken.data.pop();
        let layer = LayerDescriptor::Constant(broken);
        assert!(make(&layer, &[], &outs).is_err());
        assert!(create(&desc(&layer, &[], &outs)).is_err());
    }
}
