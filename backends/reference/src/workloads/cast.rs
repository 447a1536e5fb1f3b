//! Cast (Backend API 1.1): each element converted to another data type (ONNX `Cast`), between
//! Float32, Signed32 and Boolean. Float32 to Signed32 rounds toward zero and saturates, NaN
//! giving 0 (Rust's `as`); to Boolean anything but zero is true, NaN included; Boolean reads as
//! 0 or 1; Signed32 to Float32 rounds to the nearest float.

use backplane_api::{
    BackendError, BackendResult, DataType, Element, LayerDescriptor, TensorView, TensorViewMut,
    Workload, WorkloadDesc,
};

use super::{ExpectedShapes, expect_counts, invalid_layer};

/// Creates the workload of a `Cast` layer (one input, one output of its shape).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Cast(to) = desc.layer else {
        return Err(invalid_layer(desc, "not a Cast layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    if desc.outputs[0].data_type != *to || desc.inputs[0].shape != desc.outputs[0].shape {
        return Err(invalid_layer(
            desc,
            format_args!(
                "Cast to {to} of {} into {}",
                desc.inputs[0], desc.outputs[0]
            ),
        ));
    }
    Ok(Box::new(CastWorkload {
        shapes: ExpectedShapes::of(desc),
        from: desc.inputs[0].data_type,
        to: *to,
    }))
}

/// Converts element by element.
#[derive(Debug)]
pub struct CastWorkload {
    shapes: ExpectedShapes,
    from: DataType,
    to: DataType,
}

/// `dst[i] = f(src[i])`.
fn convert<S: Element, D: Element>(
    input: &TensorView<'_>,
    output: &mut TensorViewMut<'_>,
    f: impl Fn(S) -> D,
) -> BackendResult<()> {
    let src = input.as_slice::<S>()?;
    for (d, &s) in output.as_mut_slice::<D>()?.iter_mut().zip(src) {
        *d = f(s);
    }
    Ok(())
}

impl Workload for CastWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        use DataType::{Boolean, Float32, Signed32};
        self.shapes.check(inputs, outputs)?;
        let (x, y) = (&inputs[0], &mut outputs[0]);
        match (self.from, self.to) {
            (Float32, Float32) => convert(x, y, |v: f32| v),
            (Float32, Signed32) => convert(x, y, |v: f32| v as i32),
            (Float32, Boolean) => convert(x, y, |v: f32| u8::from(v != 0.0)),
            (Signed32, Float32) => convert(x, y, |v: i32| v as f32),
            (Signed32, Signed32) => convert(x, y, |v: i32| v),
            (Signed32, Boolean) => convert(x, y, |v: i32| u8::from(v != 0)),
            (Boolean, Float32) => convert(x, y, |v: u8| f32::from(u8::from(v != 0))),
            (Boolean, Signed32) => convert(x, y, |v: u8| i32::from(v != 0)),
            (Boolean, Boolean) => convert(x, y, |v: u8| u8::from(v != 0)),
            (from, to) => Err(BackendError::unsupported(format!(
                "CpuRef casts between Float32, Signed32 and Boolean, not {from} to {to}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::test_support::{Bytes, try_run_typed, typed};

    fn cast(from: (DataType, Bytes), to: DataType, n: u32) -> Bytes {
        try_run_typed(
            &LayerDescriptor::Cast(to),
            &[(typed(&[n], from.0), from.1)],
            &typed(&[n], to),
        )
        .unwrap()
    }

    #[test]
    fn every_pair_with_its_edges() {
        let f = [1.9f32, -1.9, 0.0, -0.0, f32::NAN, 3e9, -3e9, 0.5];
        let fb = || (DataType::Float32, Bytes::of(&f));
        assert_eq!(
            cast(fb(), DataType::Signed32, 8).to_vec::<i32>(),
            [1, -1, 0, 0, 0, i32::MAX, i32::MIN, 0]
        );
        assert_eq!(
            cast(fb(), DataType::Boolean, 8).to_vec::<u8>(),
            [1, 1, 0, 0, 1, 1, 1, 1]
        );
        let i = [16_777_217i32, -3, 0, 1];
        let ib = || (DataType::Signed32, Bytes::of(&i));
        assert_eq!(
            cast(ib(), DataType::Float32, 4).to_vec::<f32>(),
            [16_777_216.0, -3.0, 0.0, 1.0]
        );
        assert_eq!(
            cast(ib(), DataType::Boolean, 4).to_vec::<u8>(),
            [1, 1, 0, 1]
        );
        let b = [1u8, 0];
        let bb = || (DataType::Boolean, Bytes::of(&b));
        assert_eq!(cast(bb(), DataType::Float32, 2).to_vec::<f32>(), [1.0, 0.0]);
        assert_eq!(cast(bb(), DataType::Signed32, 2).to_vec::<i32>(), [1, 0]);
        assert_eq!(cast(bb(), DataType::Boolean, 2).to_vec::<u8>(), [1, 0]);
        assert_eq!(cast(ib(), DataType::Signed32, 4).to_vec::<i32>(), i);
    }
}
