//! What GpuCl runs, with a reason for every refusal (each starts with `GpuCl:`, so the
//! optimizer's explanation says who refused):
//!
//! - Convolution2d and DepthwiseConvolution2d (NCHW), FullyConnected, BatchMatMul,
//!   ElementwiseBinary (every operation, numpy broadcasting up to rank 6), ElementwiseUnary
//!   (every operation), Activation (every function), Pooling2d (NCHW), Mean, Reduce, Softmax,
//!   LayerNormalization, BatchNormalization (constant parameters), Reshape, Flatten,
//!   Transpose, Concat and MemCopy, in Float32, with the shapes `backplane_api::shapes`
//!   defines;
//! - its own `PreCompiled` layers (`fusion.rs`), whose payload must decode and fit;
//! - not Input, Output and Constant layers (the host's), no other type than Float32, nothing
//!   else: the next preferred backend runs it.
//!
//! One routing function, [`GpuClRoute::route`], decides both: `is_layer_supported` is its
//! verdict and the workload factory makes the workload it names (the kit's `Route`
//! pattern), so a supported layer always gets a workload and an unsupported one never does.
//! The checks use the factory's own table constructors.

use backplane_api::{DataLayout, LayerDescriptor, Support, TensorInfo};
use backplane_backend_kit::{
    geometry::Geometry2d,
    support::{Route, not_supported, require_float32, require_output_shapes, require_own},
};

use crate::{
    GPU_CL_ID,
    fused_op::FusedOp,
    workloads::{MAX_RANK, count, matmul, movement, pooling, reduce},
};

/// What GpuCl makes for a layer it runs (the file of `workloads/` that builds it).
#[derive(Debug)]
pub(crate) enum GpuClRoute {
    /// Convolution2d and DepthwiseConvolution2d (`convolution.rs`).
    Convolution,
    /// A fused convolution chain, its payload decoded and checked (`convolution.rs`).
    Fused(FusedOp),
    /// FullyConnected and BatchMatMul (`matmul.rs`).
    MatMul,
    /// Activation, ElementwiseUnary, ElementwiseBinary, BatchNormalization
    /// (`elementwise.rs`).
    Elementwise,
    /// Pooling2d (`pooling.rs`).
    Pooling,
    /// Mean, Reduce, Softmax, LayerNormalization (`reduce.rs`).
    Reduce,
    /// Reshape, Flatten, MemCopy, Transpose, Concat (`movement.rs`).
    Movement,
}

impl Route for GpuClRoute {
    const BACKEND_ID: &'static str = GPU_CL_ID;
    /// GpuCl's answers depend on the layer alone (not on the device).
    type Context = ();

    /// What GpuCl makes for `layer`, or why it cannot run it (without the `GpuCl:` prefix).
    fn route(
        _: &(),
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Result<Self, String> {
        let route = match layer {
            LayerDescriptor::Input(_)
            | LayerDescriptor::Output(_)
            | LayerDescriptor::Constant(_) => {
                return Err(format!(
                    "{} layers are the host's (it feeds inputs, reads outputs and holds constants)",
                    layer.kind()
                ));
            }
            // Decoded once the tensors pass the gates below.
            LayerDescriptor::PreCompiled(p) => {
                require_own(p, GPU_CL_ID)?;
                None
            }
            LayerDescriptor::Convolution2d(_) | LayerDescriptor::DepthwiseConvolution2d(_) => {
                Some(Self::Convolution)
            }
            LayerDescriptor::FullyConnected(_) | LayerDescriptor::BatchMatMul(_) => {
                Some(Self::MatMul)
            }
            LayerDescriptor::ElementwiseBinary(_)
            | LayerDescriptor::ElementwiseUnary(_)
            | LayerDescriptor::Activation(_)
            | LayerDescriptor::BatchNormalization(_) => Some(Self::Elementwise),
            LayerDescriptor::Pooling2d(_) => Some(Self::Pooling),
            LayerDescriptor::Mean(_)
            | LayerDescriptor::Reduce(_)
            | LayerDescriptor::Softmax(_)
            | LayerDescriptor::LayerNormalization(_) => Some(Self::Reduce),
            LayerDescriptor::Reshape(_)
            | LayerDescriptor::Flatten(_)
            | LayerDescriptor::Transpose(_)
            | LayerDescriptor::Concat(_)
            | LayerDescriptor::MemCopy => Some(Self::Movement),
            other => return Err(not_supported(other)),
        };
        require_float32(inputs, outputs)?;
        for t in inputs.iter().chain(outputs) {
            count(t)?;
        }
        let route = match (route, layer) {
            (Some(route), _) => route,
            // Its own PreCompiled layer: the payload says what it computes.
            (None, LayerDescriptor::PreCompiled(p)) => {
                let op =
                    FusedOp::decode(&p.payload).map_err(|e| format!("{}: {e}", p.operation))?;
                op.check(inputs, outputs)?;
                return Ok(Self::Fused(op));
            }
            (None, other) => return Err(not_supported(other)),
        };
        require_output_shapes(layer, inputs, outputs)?;
        let out = &outputs[0];
        match layer {
            LayerDescriptor::Convolution2d(d) | LayerDescriptor::DepthwiseConvolution2d(d) => {
                if d.layout != DataLayout::Nchw {
                    return Err("only NCHW convolutions".to_owned());
                }
                let depthwise = matches!(layer, LayerDescriptor::DepthwiseConvolution2d(_));
                Geometry2d::convolution(d, depthwise, &inputs[0], &inputs[1], out)?;
            }
            LayerDescriptor::Pooling2d(d) => {
                pooling::table(d, &inputs[0], out)?;
            }
            LayerDescriptor::FullyConnected(_) | LayerDescriptor::BatchMatMul(_) => {
                matmul::layer_table(layer, inputs, out)?;
            }
            LayerDescriptor::ElementwiseBinary(_) if out.shape.len() > MAX_RANK => {
                return Err(format!(
                    "rank {} exceeds the kernels' {MAX_RANK}",
                    out.shape.len()
                ));
            }
            LayerDescriptor::Mean(d) => {
                reduce::table(&inputs[0].shape, &d.axes)?;
            }
            LayerDescriptor::Reduce(d) => {
                reduce::table(&inputs[0].shape, &d.axes)?;
            }
            LayerDescriptor::Transpose(d) => {
                movement::transpose_table(&inputs[0].shape, &d.permutation)?;
            }
            LayerDescriptor::BatchNormalization(d) => {
                if d.layout != DataLayout::Nchw {
                    return Err("only NCHW batch normalisation".to_owned());
                }
                if inputs[0].shape.len() < 2 {
                    return Err("batch normalisation needs a channel axis".to_owned());
                }
                if let Some(i) = inputs[1..].iter().position(|t| !t.is_constant) {
                    return Err(format!(
                        "batch normalisation parameter {} is not constant (they are folded when the workload is made)",
                        i + 1
                    ));
                }
            }
            _ => {}
        }
        Ok(route)
    }
}

/// GpuCl's answer for one layer: the verdict of [`GpuClRoute::route`].
pub(crate) fn is_layer_supported(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Support {
    GpuClRoute::support(&(), layer, inputs, outputs)
}
