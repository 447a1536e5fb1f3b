//! One file per workload.

pub mod copy;
pub mod elementwise;

use backplane_api::{BackendError, BackendResult};

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
