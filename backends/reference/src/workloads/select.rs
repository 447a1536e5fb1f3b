//! Where (Backend API 1.1): `out = condition ? a : b` element by element, the three inputs
//! broadcast as numpy does (ONNX `Where`), for values of any type.

use backplane_api::{
    BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc, bytemuck,
};
use ndarray::{IxDyn, Zip};

use super::broadcast_to::{broadcast, dims, input_view, output_view};
use super::{ExpectedShapes, expect_counts, invalid_layer, moving_workload, raw, raw_mut};

/// Creates the workload of a `Where` layer (inputs `[condition, a, b]`, one output).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    if !matches!(desc.layer, LayerDescriptor::Where) {
        return Err(invalid_layer(desc, "not a Where layer"));
    }
    expect_counts(desc.inputs.len(), desc.outputs.len(), 3, 1)?;
    Ok(Box::new(SelectWorkload {
        shapes: ExpectedShapes::of(desc),
        inputs: desc.inputs.iter().map(|t| t.shape.to_vec()).collect(),
        output: dims(&desc.outputs[0].shape),
    }))
}

/// Picks each element from `a` or `b`.
#[derive(Debug)]
pub struct SelectWorkload {
    shapes: ExpectedShapes,
    inputs: Vec<Vec<u32>>,
    output: IxDyn,
}

impl SelectWorkload {
    /// Moves the elements, as `T` (see [`raw`]).
    fn run<T: bytemuck::Pod>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let c = input_view(inputs[0].as_slice::<u8>()?, &self.inputs[0])?;
        let a = input_view(raw::<T>(&inputs[1])?, &self.inputs[1])?;
        let b = input_view(raw::<T>(&inputs[2])?, &self.inputs[2])?;
        let out = output_view(raw_mut::<T>(&mut outputs[0])?, &self.output)?;
        Zip::from(out)
            .and(&broadcast(&c, &self.output)?)
            .and(&broadcast(&a, &self.output)?)
            .and(&broadcast(&b, &self.output)?)
            .for_each(|o, &c, &a, &b| *o = if c != 0 { a } else { b });
        Ok(())
    }
}

moving_workload!(SelectWorkload);

#[cfg(test)]
mod tests {
    use backplane_api::DataType;

    use super::*;
    use crate::workloads::test_support::{Bytes, try_run_typed, typed};

    #[test]
    fn picks_with_three_way_broadcasting() {
        let cond = [1u8, 0, 1];
        let a = [10.0f32, 20.0];
        let b = [-1.0f32];
        let got = try_run_typed(
            &LayerDescriptor::Where,
            &[
                (typed(&[3], DataType::Boolean), Bytes::of(&cond)),
                (typed(&[2, 1], DataType::Float32), Bytes::of(&a)),
                (typed(&[], DataType::Float32), Bytes::of(&b)),
            ],
            &typed(&[2, 3], DataType::Float32),
        )
        .unwrap();
        // out[i, j] = cond[j] ? a[i] : b, by the definition.
        let want: Vec<f32> = (0..6)
            .map(|f| if cond[f % 3] != 0 { a[f / 3] } else { b[0] })
            .collect();
        assert_eq!(got.to_vec::<f32>(), want);
        let got = try_run_typed(
            &LayerDescriptor::Where,
            &[
                (typed(&[2], DataType::Boolean), Bytes::of(&[0u8, 1])),
                (typed(&[2], DataType::Signed32), Bytes::of(&[1i32, 2])),
                (typed(&[2], DataType::Signed32), Bytes::of(&[3i32, 4])),
            ],
            &typed(&[2], DataType::Signed32),
        )
        .unwrap();
        assert_eq!(got.to_vec::<i32>(), [3, 2]);
    }
}
