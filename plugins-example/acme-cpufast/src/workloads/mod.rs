//! The kernels, one file per operation, and what every workload shares: the tensor shapes it
//! was created for (checked at every execution) and error helpers.
//!
//! - `chain.rs` is the workload of Convolution2d, DepthwiseConvolution2d, FullyConnected and
//!   BatchMatMul, alone or fused with batch norm, bias, activation and pooling; its kernels are
//!   in `convolution.rs` (im2col + GEMM), `depthwise.rs` (direct), `fully_connected.rs` and
//!   `batch_matmul.rs` (one GEMM per broadcast batch).
//! - `activation.rs`, `pooling.rs`, `elementwise.rs` (Add) and `batch_norm.rs` are both
//!   stand-alone workloads and stages of a chain.
//! - `layer_norm.rs` is LayerNormalization, stand-alone.

pub(crate) mod activation;
pub(crate) mod batch_matmul;
pub(crate) mod batch_norm;
pub(crate) mod chain;
pub(crate) mod convolution;
pub(crate) mod depthwise;
pub(crate) mod elementwise;
pub(crate) mod fully_connected;
pub(crate) mod layer_norm;
pub(crate) mod pooling;

#[cfg(test)]
pub(crate) mod test_support;

use std::fmt::Display;

use backplane_api::{
    BackendError, BackendResult, TensorInfo, TensorView, TensorViewMut, WorkloadDesc,
};

/// An invalid-argument error about the layer `desc` describes: `layer <name>: <message>`.
pub(crate) fn invalid_layer(desc: &WorkloadDesc<'_>, message: impl Display) -> BackendError {
    BackendError::invalid_argument(format!("layer {}: {message}", desc.name))
}

/// The dimensions of a rank-4 tensor.
pub(crate) fn dims4(what: &str, t: &TensorInfo) -> Result<[usize; 4], String> {
    match t.shape.as_slice() {
        &[a, b, c, d] => Ok([a as usize, b as usize, c as usize, d as usize]),
        s => Err(format!("{what} must have rank 4, got {s:?}")),
    }
}

/// The value of constant input `slot` of `desc` as `f32`s (copied: a constant's bytes need
/// not be aligned).
pub(crate) fn constant_f32(desc: &WorkloadDesc<'_>, slot: usize) -> BackendResult<Vec<f32>> {
    let view = desc
        .constant(slot)
        .ok_or_else(|| invalid_layer(desc, format_args!("input {slot} must be constant")))?;
    let bytes = view.data.as_slice();
    if Some(bytes.len()) != view.info.num_bytes() {
        return Err(invalid_layer(
            desc,
            format_args!(
                "constant input {slot} holds {} bytes for {}",
                bytes.len(),
                view.info
            ),
        ));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// The shapes of the tensors a workload was created for. Every execution checks the views
/// it is handed against them, so a kernel never indexes a buffer with another geometry.
#[derive(Debug, Clone)]
pub(crate) struct Signature {
    inputs: Vec<Vec<u32>>,
    outputs: Vec<Vec<u32>>,
}

impl Signature {
    /// The shapes of `desc`'s inputs and outputs.
    pub(crate) fn of(desc: &WorkloadDesc<'_>) -> Self {
        let shapes = |infos: &[TensorInfo]| infos.iter().map(|t| t.shape.to_vec()).collect();
        Self {
            inputs: shapes(&desc.inputs),
            outputs: shapes(&desc.outputs),
        }
    }

    /// Checks the number and shapes of the views (buffer lengths are checked by `as_f32`).
    pub(crate) fn check(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &[TensorViewMut<'_>],
    ) -> BackendResult<()> {
        if inputs.len() != self.inputs.len() || outputs.len() != self.outputs.len() {
            return Err(BackendError::invalid_argument(format!(
                "expected {} input(s) and {} output(s), got {} and {}",
                self.inputs.len(),
                self.outputs.len(),
                inputs.len(),
                outputs.len()
            )));
        }
        let given = inputs
            .iter()
            .map(|v| ("input", v.info))
            .chain(outputs.iter().map(|v| ("output", v.info)));
        let expected = self
            .inputs
            .iter()
            .enumerate()
            .chain(self.outputs.iter().enumerate());
        for ((what, info), (i, want)) in given.zip(expected) {
            if info.shape.as_slice() != want.as_slice() {
                return Err(BackendError::invalid_argument(format!(
                    "{what} {i} has shape {:?}, the workload was created for {want:?}",
                    info.shape.as_slice()
                )));
            }
        }
        Ok(())
    }
}
