//! Input and Output: copy the tensor through.

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
        let (src, dst) = (inputs[0].as_f32()?, outputs[0].as_f32_mut()?);
        if src.len() != dst.len() {
            return Err(BackendError::invalid_argument(format!(
                "copy of {} elements into {}",
                src.len(),
                dst.len()
            )));
        }
        dst.copy_from_slice(src);
        Ok(())
    }
}
