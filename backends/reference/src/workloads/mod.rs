//! One file per workload. Every workload reads all of its inputs at execution, weights and
//! biases included, so CpuRef accepts non-constant weights.

pub mod activation;
pub mod arg_min_max;
pub mod batch_matmul;
pub mod batch_norm;
pub mod bit_cast;
pub mod broadcast_to;
pub mod cast;
pub mod comparison;
pub mod concat;
pub mod constant;
pub mod convolution;
pub mod copy;
pub mod deformable_convolution;
pub mod detection;
pub mod determinant;
pub mod elementwise;
pub mod fully_connected;
pub mod gather;
pub mod instance_norm;
pub mod layer_norm;
pub mod mean;
pub mod non_zero;
pub mod normalization;
pub(crate) mod numeric;
pub mod pad;
pub mod pooling;
pub mod quantized;
pub mod recurrent;
pub mod reduce;
pub mod resize;
pub mod scatter;
pub mod select;
pub mod slice;
pub mod softmax;
pub mod transpose;
pub mod transpose_convolution;
pub mod unary;
pub mod unique;
pub mod widened;

#[cfg(test)]
pub(crate) mod test_support;

use std::fmt::Display;

use backplane_api::{
    BackendError, BackendResult, DataLayout, DataType, TensorInfo, TensorView, TensorViewMut,
    WorkloadDesc, bytemuck,
};

/// The elements of a tensor that a layer moves without reading them, as `T`, an unsigned
/// integer of the element's size (`u32` for Float32 and Signed32, `u8` for Boolean): the
/// buffer must hold exactly the tensor, with `T`'s alignment.
pub(crate) fn raw<'a, T: bytemuck::Pod>(view: &TensorView<'a>) -> BackendResult<&'a [T]> {
    raw_check::<T>(view.info, view.data.len())?;
    bytemuck::try_cast_slice(view.data.as_slice())
        .map_err(|e| BackendError::invalid_argument(format!("tensor {}: {e:?}", view.info)))
}

/// The values of an index tensor (Signed32 or Signed64) as `i64`.
pub(crate) fn index_values(view: &TensorView<'_>) -> BackendResult<Vec<i64>> {
    Ok(match view.info.data_type {
        DataType::Signed64 => view.as_slice::<i64>()?.to_vec(),
        _ => view
            .as_slice::<i32>()?
            .iter()
            .map(|&i| i64::from(i))
            .collect(),
    })
}

/// [`raw`] for an output.
pub(crate) fn raw_mut<'a, T: bytemuck::Pod>(
    view: &'a mut TensorViewMut<'_>,
) -> BackendResult<&'a mut [T]> {
    let info = view.info;
    raw_check::<T>(info, view.data.len())?;
    bytemuck::try_cast_slice_mut(view.data.as_mut_slice())
        .map_err(|e| BackendError::invalid_argument(format!("tensor {info}: {e:?}")))
}

fn raw_check<T>(info: &TensorInfo, len: usize) -> BackendResult<()> {
    if info.data_type.size_in_bytes() != std::mem::size_of::<T>() {
        return Err(BackendError::invalid_argument(format!(
            "tensor {info} does not have {}-byte elements",
            std::mem::size_of::<T>()
        )));
    }
    match info.num_bytes() {
        Some(n) if n == len => Ok(()),
        n => Err(BackendError::invalid_argument(format!(
            "tensor {info} needs {n:?} bytes, the buffer has {len}"
        ))),
    }
}

/// Evaluates `$body` with the type `$t` standing for the unsigned integer of the size of
/// `$info`'s elements (see [`raw`]): the one dispatch of the layers that move elements of any
/// data type.
macro_rules! by_element_size {
    ($info:expr, |$t:ident| $body:expr) => {{
        match $info.data_type.size_in_bytes() {
            8 => {
                type $t = u64;
                $body
            }
            4 => {
                type $t = u32;
                $body
            }
            2 => {
                type $t = u16;
                $body
            }
            1 => {
                type $t = u8;
                $body
            }
            n => Err(backplane_api::BackendError::unsupported(format!(
                "CpuRef moves no {n}-byte elements"
            ))),
        }
    }};
}
pub(crate) use by_element_size;

/// `impl Workload` for a workload that only moves elements: its execution checks the views
/// against `self.shapes`, then calls its `run::<T>(inputs, outputs)` with `T` chosen by
/// [`by_element_size!`] from the output's data type.
macro_rules! moving_workload {
    ($workload:ty) => {
        impl backplane_api::Workload for $workload {
            fn execute(
                &self,
                inputs: &[backplane_api::TensorView<'_>],
                outputs: &mut [backplane_api::TensorViewMut<'_>],
            ) -> backplane_api::BackendResult<()> {
                self.shapes.check(inputs, outputs)?;
                $crate::workloads::by_element_size!(outputs[0].info, |T| self
                    .run::<T>(inputs, outputs))
            }
        }
    };
}
pub(crate) use moving_workload;

/// `impl Workload` for a workload that computes in Float32 or Float64: its execution checks
/// the views against `self.shapes`, then calls its `run::<T>(inputs, outputs)` with `T` `f64`
/// for a Float64 first input and `f32` otherwise (layer support admits only those).
macro_rules! float_workload {
    ($workload:ty) => {
        impl backplane_api::Workload for $workload {
            fn execute(
                &self,
                inputs: &[backplane_api::TensorView<'_>],
                outputs: &mut [backplane_api::TensorViewMut<'_>],
            ) -> backplane_api::BackendResult<()> {
                self.shapes.check(inputs, outputs)?;
                if inputs[0].info.data_type == backplane_api::DataType::Float64 {
                    self.run::<f64>(inputs, outputs)
                } else {
                    self.run::<f32>(inputs, outputs)
                }
            }
        }
    };
}
pub(crate) use float_workload;

/// Checks the number of tensors a workload was handed.
pub(crate) fn expect_counts(
    inputs: usize,
    outputs: usize,
    n_in: usize,
    n_out: usize,
) -> BackendResult<()> {
    if inputs != n_in || outputs != n_out {
        return Err(BackendError::invalid_argument(format!(
            "expected {n_in} input(s) and {n_out} output(s), got {inputs} and {outputs}"
        )));
    }
    Ok(())
}

/// The one output `desc`'s layer has by the Backend API's shape rules, checked against the
/// output the workload is created for (an invalid-argument error naming the layer when they
/// differ, or when the inputs break the rules).
pub(crate) fn expect_rule_output(desc: &WorkloadDesc<'_>) -> BackendResult<TensorInfo> {
    let expected = backplane_api::shapes::output_infos(desc.layer, &desc.inputs)
        .map_err(|e| invalid_layer(desc, e))?;
    match (expected.as_slice(), desc.outputs.first()) {
        ([want], Some(got)) if want == got => Ok(want.clone()),
        ([want], _) => Err(invalid_layer(
            desc,
            format_args!("the output must be {want}"),
        )),
        _ => Err(invalid_layer(desc, "the layer must have one output")),
    }
}

/// An invalid-argument error about the layer `desc` describes: `layer <name>: <message>`.
pub(crate) fn invalid_layer(desc: &WorkloadDesc<'_>, message: impl Display) -> BackendError {
    BackendError::invalid_argument(format!("layer {}: {message}", desc.name))
}

/// The number of elements of `info`, 0 for an empty tensor whatever its other dimensions;
/// an error about `desc`'s layer if the count overflows `usize`.
pub(crate) fn checked_num_elements(
    desc: &WorkloadDesc<'_>,
    info: &TensorInfo,
) -> BackendResult<usize> {
    if info.shape.contains(&0) {
        return Ok(0);
    }
    info.num_elements()
        .ok_or_else(|| invalid_layer(desc, format_args!("{info} has too many elements")))
}

/// The `[n, c, h, w]` dimensions of a rank-4 activation tensor whose shape in `layout` is
/// `dims`.
pub(crate) fn nchw_dims(layout: DataLayout, [a, b, c, d]: [usize; 4]) -> [usize; 4] {
    match layout {
        DataLayout::Nchw => [a, b, c, d],
        DataLayout::Nhwc => [a, d, b, c],
    }
}

/// The product of the dimensions of `info` after `axis` (the distance between consecutive
/// indices along `axis`), 0 for an empty tensor. The element count is checked first (see
/// [`checked_num_elements`]), so this and every other partial product of the dimensions fits
/// in `usize`.
pub(crate) fn inner_size(
    desc: &WorkloadDesc<'_>,
    info: &TensorInfo,
    axis: usize,
) -> BackendResult<usize> {
    if checked_num_elements(desc, info)? == 0 {
        return Ok(0);
    }
    Ok(info.shape[axis + 1..].iter().map(|&v| v as usize).product())
}

/// The shapes of the tensors a workload was created for. Every execution checks the views it
/// is handed against them, so a kernel never indexes a buffer with another tensor's geometry.
#[derive(Debug, Clone)]
pub(crate) struct ExpectedShapes {
    inputs: Vec<(Vec<u32>, DataType)>,
    outputs: Vec<(Vec<u32>, DataType)>,
}

impl ExpectedShapes {
    /// The shapes of `desc`'s inputs and outputs.
    pub(crate) fn of(desc: &WorkloadDesc<'_>) -> Self {
        let shapes = |infos: &[TensorInfo]| {
            infos
                .iter()
                .map(|t| (t.shape.to_vec(), t.data_type))
                .collect()
        };
        Self {
            inputs: shapes(&desc.inputs),
            outputs: shapes(&desc.outputs),
        }
    }

    /// Checks the number of views (as [`expect_counts`] does), then that every view has the
    /// data type and shape of the tensor in its slot: `input <i> has shape <got>, the workload was created
    /// for <expected>` (or `output <i> ...`) otherwise. The buffer lengths are left to
    /// [`TensorView::as_f32`] and [`TensorViewMut::as_f32_mut`].
    pub(crate) fn check(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &[TensorViewMut<'_>],
    ) -> BackendResult<()> {
        expect_counts(
            inputs.len(),
            outputs.len(),
            self.inputs.len(),
            self.outputs.len(),
        )?;
        for (i, (view, expected)) in inputs.iter().zip(&self.inputs).enumerate() {
            check_shape("input", i, view.info, expected)?;
        }
        for (i, (view, expected)) in outputs.iter().zip(&self.outputs).enumerate() {
            check_shape("output", i, view.info, expected)?;
        }
        Ok(())
    }
}

/// Checks that tensor `i` of the inputs or outputs (`what`) has the shape and data type
/// `expected`.
fn check_shape(
    what: &str,
    i: usize,
    info: &TensorInfo,
    (expected, data_type): &(Vec<u32>, DataType),
) -> BackendResult<()> {
    if info.data_type != *data_type {
        return Err(BackendError::invalid_argument(format!(
            "{what} {i} is {}, the workload was created for {data_type}",
            info.data_type
        )));
    }
    if info.shape.as_slice() != expected.as_slice() {
        return Err(BackendError::invalid_argument(format!(
            "{what} {i} has shape {:?}, the workload was created for {expected:?}",
            info.shape.as_slice()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use backplane_api::{ErrorCode, LayerDescriptor};

    use super::test_support::{desc, f32t};
    use super::*;

    /// The count is checked first, then every input and output shape in slot order; each
    /// mismatch is an `InvalidArgument` naming the tensor.
    #[test]
    fn expected_shapes_check_counts_then_each_tensor() {
        let (ins, outs) = ([f32t(&[2, 3]), f32t(&[3])], [f32t(&[2, 3])]);
        let shapes = ExpectedShapes::of(&desc(&LayerDescriptor::MemCopy, &ins, &outs));
        let (other_in, other_out) = (f32t(&[1, 3]), f32t(&[6]));
        let message = |inputs: &[&TensorInfo], output: &TensorInfo| {
            let views: Vec<TensorView<'_>> =
                inputs.iter().map(|&i| TensorView::new(i, &[])).collect();
            let mut empty = [0u8; 0];
            let out = [TensorViewMut::new(output, &mut empty)];
            match shapes.check(&views, &out) {
                Ok(()) => None,
                Err(e) => {
                    assert_eq!(e.code, ErrorCode::InvalidArgument);
                    Some(e.message.to_string())
                }
            }
        };
        assert_eq!(message(&[&ins[0], &ins[1]], &outs[0]), None);
        assert_eq!(
            message(&[&ins[0]], &outs[0]).unwrap(),
            "expected 2 input(s) and 1 output(s), got 1 and 1"
        );
        assert_eq!(
            message(&[&ins[0], &other_in], &other_out).unwrap(),
            "input 1 has shape [1, 3], the workload was created for [3]"
        );
        assert_eq!(
            message(&[&ins[0], &ins[1]], &other_out).unwrap(),
            "output 0 has shape [6], the workload was created for [2, 3]"
        );
    }
}
