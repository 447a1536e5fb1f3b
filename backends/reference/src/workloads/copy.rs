//! Input, Output, MemCopy, Reshape and Flatten: the bytes of the tensor copied through, of any
//! data type.

use backplane_api::{BackendError, BackendResult, TensorView, TensorViewMut, Workload};

use super::expect_counts;

/// Copies its one input to its one output.
#[derive(Debug)]
pub struct CopyWorkload;

impl Workload for CopyWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        expect_counts(inputs.len(), outputs.len(), 1, 1)?;
        let (src, dst) = (&inputs[0], &mut outputs[0]);
        let sized = |info: &backplane_api::TensorInfo, len: usize| info.num_bytes() == Some(len);
        if src.info.data_type != dst.info.data_type
            || !sized(src.info, src.data.len())
            || !sized(dst.info, dst.data.len())
            || src.data.len() != dst.data.len()
        {
            return Err(BackendError::invalid_argument(format!(
                "copy of {} ({} bytes) into {} ({} bytes)",
                src.info,
                src.data.len(),
                dst.info,
                dst.data.len()
            )));
        }
        dst.data.as_mut_slice().copy_from_slice(src.data.as_slice());
        Ok(())
    }
}
