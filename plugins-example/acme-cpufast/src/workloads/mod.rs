//! The kernels, one file per operation, and what every workload shares: the tensor shapes it
//! was created for (checked at every execution) and error helpers.
//!
//! - `chain.rs` is the workload of Convolution2d, DepthwiseConvolution2d, FullyConnected and
//!   BatchMatMul, alone or fused with batch norm, bias, activation and pooling; its kernels are
//!   in `convolution.rs` (im2col + GEMM), `winograd.rs` (3×3 stride-1 convolutions with
//!   constant weights, Winograd F(4×4, 3×3)), `depthwise.rs` (direct), `fully_connected.rs`
//!   and `batch_matmul.rs` (one GEMM per broadcast batch). `conv_geometry.rs` holds what the
//!   convolution kernels share (the geometry, the index ranges, the column split), so that
//!   `convolution.rs` imports `depthwise.rs` and never the reverse.
//! - `activation.rs`, `pooling.rs` and `batch_norm.rs` are both stand-alone workloads and
//!   stages of a chain (a chain folds its bias Add into the bias).
//! - `elementwise.rs` (every binary operation, numpy broadcasting), `mean.rs` (Mean over
//!   adjacent axes: GlobalAveragePool), `softmax.rs`, `reshape.rs` and `layer_norm.rs`
//!   (LayerNormalization) are stand-alone workloads, and so is `transpose_convolution.rs`
//!   (TransposeConvolution2d: GEMM + col2im).
//!
//! The reductions (layer norm, mean, softmax) share [`sum_f64`], [`max_f32`] and
//! [`split_axes`] from here.

pub(crate) mod activation;
pub(crate) mod batch_matmul;
pub(crate) mod batch_norm;
pub(crate) mod chain;
pub(crate) mod conv_geometry;
pub(crate) mod convolution;
pub(crate) mod depthwise;
pub(crate) mod elementwise;
pub(crate) mod fully_connected;
pub(crate) mod layer_norm;
pub(crate) mod mean;
pub(crate) mod pooling;
pub(crate) mod recurrent;
pub(crate) mod reshape;
pub(crate) mod softmax;
pub(crate) mod transpose_convolution;
pub(crate) mod winograd;

#[cfg(test)]
pub(crate) mod test_support;

use std::{fmt::Display, ops::Range};

use backplane_api::{
    BackendError, BackendResult, TensorInfo, TensorView, TensorViewMut, WorkloadDesc,
};
use backplane_backend_kit::constants;

/// An invalid-argument error about the layer `desc` describes: `layer <name>: <message>`.
pub(crate) fn invalid_layer(desc: &WorkloadDesc<'_>, message: impl Display) -> BackendError {
    BackendError::invalid_argument(format!("layer {}: {message}", desc.name))
}

/// The value of constant input `slot` of `desc` as `f32`s (copied: a constant's bytes need
/// not be aligned; the kit's reader, its error naming the layer).
pub(crate) fn constant_f32(desc: &WorkloadDesc<'_>, slot: usize) -> BackendResult<Vec<f32>> {
    constants::constant_f32(desc, slot).map_err(|e| invalid_layer(desc, e))
}

/// From this many elements an element-wise operation or a stand-alone activation is split
/// between threads (about 40 µs of work on one; handing it out costs a wake-up).
pub(crate) const MIN_PARALLEL_ELEMENTS: usize = 1 << 17;

/// Partial sums (or maxima) of a reduction: independent operations the compiler can
/// vectorise.
pub(crate) const LANES: usize = 8;

/// The sum of `f(v)` over `values`, in f64, in [`LANES`] interleaved partial sums.
pub(crate) fn sum_f64(values: &[f32], f: impl Fn(f64) -> f64) -> f64 {
    let mut lanes = [0.0f64; LANES];
    let chunks = values.chunks_exact(LANES);
    let tail: f64 = chunks.remainder().iter().map(|&v| f(f64::from(v))).sum();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane += f(f64::from(v));
        }
    }
    lanes.iter().sum::<f64>() + tail
}

/// The largest `f(v)` over `values` (`-inf` for none; NaNs are ignored, as by
/// [`f32::max`]), in [`LANES`] interleaved partial maxima.
pub(crate) fn max_f32(values: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = values.chunks_exact(LANES);
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| m.max(f(v)));
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane = lane.max(f(v));
        }
    }
    lanes.iter().fold(tail, |m, &l| m.max(l))
}

/// `shape` seen as `[outer, len, inner]` around the axes `axes`: the products of the
/// dimensions before them, of them, and after them.
pub(crate) fn split_axes(shape: &[u32], axes: Range<usize>) -> (usize, usize, usize) {
    let product = |dims: &[u32]| dims.iter().map(|&d| d as usize).product::<usize>();
    (
        product(&shape[..axes.start]),
        product(&shape[axes.clone()]),
        product(&shape[axes.end..]),
    )
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
