//! One file per workload. Every workload reads all of its inputs at execution, weights and
//! biases included, so CpuRef accepts non-constant weights.

pub mod activation;
pub mod batch_norm;
pub mod concat;
pub mod constant;
pub mod convolution;
pub mod copy;
pub mod elementwise;
pub mod fully_connected;
pub mod mean;
pub mod pad;
pub mod pooling;
pub mod softmax;
pub mod transpose;

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
