//! Comparison (Backend API 1.1): `a op b` element by element with numpy broadcasting, giving
//! Boolean (ONNX `Equal`, `Greater`, `GreaterOrEqual`, `Less`, `LessOrEqual`), on inputs of
//! any plain numeric type (Backend API 1.5). NaN compares unequal to everything.

use super::broadcast_to::zip_broadcast;
use super::numeric::{by_numeric_type, is_half, widen_half};
use super::{ExpectedShapes, expect_counts, invalid_layer};
use backplane_api::{
    BackendError, BackendResult, ComparisonOperation, Element, LayerDescriptor, TensorView,
    TensorViewMut, Workload, WorkloadDesc,
};

/// Creates the workload of a `Comparison` layer (inputs `[a, b]`, one Boolean output).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Comparison(op) = desc.layer else {
        return Err(invalid_layer(desc, "not a Comparison layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 2, 1)?;
    Ok(Box::new(ComparisonWorkload {
        op: *op,
        shapes: ExpectedShapes::of(desc),
        a: desc.inputs[0].shape.to_vec(),
        b: desc.inputs[1].shape.to_vec(),
        output: desc.outputs[0].shape.to_vec(),
    }))
}

/// Compares two tensors.
#[derive(Debug)]
pub struct ComparisonWorkload {
    op: ComparisonOperation,
    shapes: ExpectedShapes,
    a: Vec<u32>,
    b: Vec<u32>,
    output: Vec<u32>,
}

impl ComparisonWorkload {
    fn run<T: Element + PartialOrd>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.compare(
            inputs[0].as_slice::<T>()?,
            inputs[1].as_slice::<T>()?,
            outputs,
        )
    }

    fn compare<T: Copy + PartialOrd>(
        &self,
        a: &[T],
        b: &[T],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let (a, b) = ((a, &self.a[..]), (b, &self.b[..]));
        let out = (outputs[0].as_mut_slice::<u8>()?, &self.output[..]);
        // One loop per operation: the comparison inlined, not matched per element.
        use ComparisonOperation as C;
        match self.op {
            C::Equal => zip_broadcast(a, b, out, |o, x, y| *o = u8::from(x == y)),
            C::NotEqual => zip_broadcast(a, b, out, |o, x, y| *o = u8::from(x != y)),
            C::Greater => zip_broadcast(a, b, out, |o, x, y| *o = u8::from(x > y)),
            C::GreaterOrEqual => zip_broadcast(a, b, out, |o, x, y| *o = u8::from(x >= y)),
            C::Less => zip_broadcast(a, b, out, |o, x, y| *o = u8::from(x < y)),
            C::LessOrEqual => zip_broadcast(a, b, out, |o, x, y| *o = u8::from(x <= y)),
        }
    }
}

impl Workload for ComparisonWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let dt = inputs[0].info.data_type;
        if is_half(dt) {
            // Widening to f32 is exact: the comparison is that of the 16-bit values.
            let a = widen_half(dt, inputs[0].as_slice::<u16>()?);
            let b = widen_half(dt, inputs[1].as_slice::<u16>()?);
            return self.compare(&a, &b, outputs);
        }
        by_numeric_type!(
            dt,
            |T| self.run::<T>(inputs, outputs),
            Err(BackendError::unsupported(format!(
                "CpuRef compares the plain numeric types, not {dt}"
            )))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::test_support::{Bytes, try_run_typed, typed};
    use backplane_api::DataType;

    #[test]
    fn every_operation_on_floats_and_integers_with_broadcasting() {
        let a = [1.0f32, 2.0, f32::NAN, -0.0];
        let b = [2.0f32];
        let ai = [1i32, 2, 3, 0];
        let bi = [2i32];
        for op in ComparisonOperation::ALL {
            let got = try_run_typed(
                &LayerDescriptor::Comparison(op),
                &[
                    (typed(&[2, 2], DataType::Float32), Bytes::of(&a)),
                    (typed(&[1], DataType::Float32), Bytes::of(&b)),
                ],
                &typed(&[2, 2], DataType::Boolean),
            )
            .unwrap();
            let want: Vec<u8> = a.iter().map(|&x| u8::from(op.compare(x, b[0]))).collect();
            assert_eq!(got.to_vec::<u8>(), want, "{op:?}");
            let got = try_run_typed(
                &LayerDescriptor::Comparison(op),
                &[
                    (typed(&[4], DataType::Signed32), Bytes::of(&ai)),
                    (typed(&[], DataType::Signed32), Bytes::of(&bi)),
                ],
                &typed(&[4], DataType::Boolean),
            )
            .unwrap();
            let want: Vec<u8> = ai.iter().map(|&x| u8::from(op.compare(x, bi[0]))).collect();
            assert_eq!(got.to_vec::<u8>(), want, "{op:?}");
        }
        // NaN: only NotEqual holds.
        let nan = |op| {
            try_run_typed(
                &LayerDescriptor::Comparison(op),
                &[
                    (typed(&[1], DataType::Float32), Bytes::of(&[f32::NAN])),
                    (typed(&[1], DataType::Float32), Bytes::of(&[f32::NAN])),
                ],
                &typed(&[1], DataType::Boolean),
            )
            .unwrap()
            .to_vec::<u8>()[0]
        };
        assert_eq!(nan(ComparisonOperation::Equal), 0);
        assert_eq!(nan(ComparisonOperation::NotEqual), 1);
        assert_eq!(nan(ComparisonOperation::LessOrEqual), 0);
    }
}
