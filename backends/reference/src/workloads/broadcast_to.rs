//! BroadcastTo (Backend API 1.1): the one input repeated along broadcast dimensions to the
//! descriptor's shape (ONNX `Expand`), for data of any type.

use backplane_api::{
    BackendError, BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload,
    WorkloadDesc, bytemuck,
};
use ndarray::{ArrayViewD, ArrayViewMutD, IxDyn, Zip};

use super::{ExpectedShapes, expect_counts, invalid_layer, moving_workload, raw, raw_mut};

/// `shape` as an ndarray dimension.
pub(crate) fn dims(shape: &[u32]) -> IxDyn {
    IxDyn(&shape.iter().map(|&d| d as usize).collect::<Vec<_>>())
}

/// `data` as an array of `shape`.
pub(crate) fn input_view<'a, T>(data: &'a [T], shape: &[u32]) -> BackendResult<ArrayViewD<'a, T>> {
    ArrayViewD::from_shape(dims(shape), data).map_err(|e| {
        BackendError::invalid_argument(format!("tensor does not match its shape: {e}"))
    })
}

/// `a` broadcast to `to` (an error when it does not broadcast).
pub(crate) fn broadcast<'a, T>(
    a: &'a ArrayViewD<'_, T>,
    to: &IxDyn,
) -> BackendResult<ArrayViewD<'a, T>> {
    a.broadcast(to.clone()).ok_or_else(|| {
        BackendError::invalid_argument(format!("{:?} does not broadcast to {to:?}", a.shape()))
    })
}

/// `data` as a writable array of `shape`.
pub(crate) fn output_view<'a, T>(
    data: &'a mut [T],
    shape: &IxDyn,
) -> BackendResult<ArrayViewMutD<'a, T>> {
    ArrayViewMutD::from_shape(shape.clone(), data).map_err(|e| {
        BackendError::invalid_argument(format!("output does not match its shape: {e}"))
    })
}

/// Creates the workload of a `BroadcastTo` layer (one input, one output).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::BroadcastTo(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a BroadcastTo layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    if desc.outputs[0].shape != d.shape {
        return Err(invalid_layer(
            desc,
            format_args!(
                "BroadcastTo {:?} written to {}",
                d.shape.as_slice(),
                desc.outputs[0]
            ),
        ));
    }
    Ok(Box::new(BroadcastToWorkload {
        shapes: ExpectedShapes::of(desc),
        input: desc.inputs[0].shape.to_vec(),
        output: dims(&d.shape),
    }))
}

/// Repeats its input.
#[derive(Debug)]
pub struct BroadcastToWorkload {
    shapes: ExpectedShapes,
    input: Vec<u32>,
    output: IxDyn,
}

impl BroadcastToWorkload {
    /// Moves the elements, as `T` (see [`raw`]).
    fn run<T: bytemuck::Pod>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let x = input_view(raw::<T>(&inputs[0])?, &self.input)?;
        let out = output_view(raw_mut::<T>(&mut outputs[0])?, &self.output)?;
        Zip::from(out)
            .and(&broadcast(&x, &self.output)?)
            .for_each(|o, &v| *o = v);
        Ok(())
    }
}

moving_workload!(BroadcastToWorkload);

#[cfg(test)]
mod tests {
    use backplane_api::{BroadcastToDescriptor, DataType};

    use super::*;
    use crate::workloads::test_support::{Bytes, try_run_typed, typed};

    #[test]
    fn repeats_along_new_and_unit_dimensions() {
        let layer = LayerDescriptor::BroadcastTo(BroadcastToDescriptor {
            shape: vec![2, 2, 3].into(),
        });
        let got = try_run_typed(
            &layer,
            &[(typed(&[2, 1], DataType::Signed32), Bytes::of(&[7i32, -1]))],
            &typed(&[2, 2, 3], DataType::Signed32),
        )
        .unwrap();
        // out[i, j, k] = x[j, 0], by the definition.
        let want: Vec<i32> = (0..12).map(|f| [7, -1][(f / 3) % 2]).collect();
        assert_eq!(got.to_vec::<i32>(), want);
        let got = try_run_typed(
            &layer,
            &[(
                typed(&[3], DataType::Float32),
                Bytes::of(&[0.5f32, 1.5, 2.5]),
            )],
            &typed(&[2, 2, 3], DataType::Float32),
        )
        .unwrap();
        let want: Vec<f32> = (0..12).map(|f| [0.5, 1.5, 2.5][f % 3]).collect();
        assert_eq!(got.to_vec::<f32>(), want);
    }

    #[test]
    fn a_shape_that_does_not_broadcast_is_refused() {
        let layer = LayerDescriptor::BroadcastTo(BroadcastToDescriptor {
            shape: vec![2, 3].into(),
        });
        let err = try_run_typed(
            &layer,
            &[(typed(&[2], DataType::Float32), Bytes::of(&[1.0f32, 2.0]))],
            &typed(&[2, 3], DataType::Float32),
        )
        .unwrap_err();
        assert_eq!(err.code, backplane_api::ErrorCode::Unsupported);
    }
}
