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
//! The workload factory builds with the same table constructors, so a supported layer always
//! gets a workload.

use backplane_api::{DataLayout, DataType, LayerDescriptor, Support, TensorInfo, shapes};

use crate::{
    GPU_CL_ID,
    fused_op::FusedOp,
    workloads::{MAX_RANK, convolution::ConvGeometry, count, matmul, movement, pooling, reduce},
};

/// Why GpuCl cannot run `layer` (without the `GpuCl:` prefix), or `Ok`.
fn check(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
    match layer {
        LayerDescriptor::Input(_) | LayerDescriptor::Output(_) | LayerDescriptor::Constant(_) => {
            return Err(format!(
                "{} layers are the host's (it feeds inputs, reads outputs and holds constants)",
                layer.kind()
            ));
        }
        LayerDescriptor::PreCompiled(p) if p.backend.as_str() != GPU_CL_ID => {
            return Err(format!(
                "{} is a layer of backend {}, not of GpuCl",
                p.operation, p.backend
            ));
        }
        LayerDescriptor::Convolution2d(_)
        | LayerDescriptor::DepthwiseConvolution2d(_)
        | LayerDescriptor::FullyConnected(_)
        | LayerDescriptor::BatchMatMul(_)
        | LayerDescriptor::ElementwiseBinary(_)
        | LayerDescriptor::ElementwiseUnary(_)
        | LayerDescriptor::Activation(_)
        | LayerDescriptor::Pooling2d(_)
        | LayerDescriptor::Mean(_)
        | LayerDescriptor::Reduce(_)
        | LayerDescriptor::Softmax(_)
        | LayerDescriptor::LayerNormalization(_)
        | LayerDescriptor::BatchNormalization(_)
        | LayerDescriptor::Reshape(_)
        | LayerDescriptor::Flatten(_)
        | LayerDescriptor::Transpose(_)
        | LayerDescriptor::Concat(_)
        | LayerDescriptor::MemCopy
        | LayerDescriptor::PreCompiled(_) => {}
        other => return Err(format!("{} is not supported (falls back)", other.kind())),
    }
    if let Some(t) = inputs
        .iter()
        .chain(outputs)
        .find(|t| t.data_type != DataType::Float32)
    {
        return Err(format!("only Float32, got {}", t.data_type));
    }
    for t in inputs.iter().chain(outputs) {
        count(t)?;
    }
    if let LayerDescriptor::PreCompiled(p) = layer {
        let op = FusedOp::decode(&p.payload).map_err(|e| format!("{}: {e}", p.operation))?;
        return op.check(inputs, outputs).map(drop);
    }
    let expected = shapes::output_shapes(layer, inputs)?;
    let got: Vec<&[u32]> = outputs.iter().map(|t| t.shape.as_slice()).collect();
    if got != expected.iter().map(Vec::as_slice).collect::<Vec<_>>() {
        return Err(format!(
            "output shapes {got:?} differ from the expected {expected:?}"
        ));
    }
    let out = &outputs[0];
    match layer {
        LayerDescriptor::Convolution2d(d) | LayerDescriptor::DepthwiseConvolution2d(d) => {
            if d.layout != DataLayout::Nchw {
                return Err("only NCHW convolutions".to_owned());
            }
            let depthwise = matches!(layer, LayerDescriptor::DepthwiseConvolution2d(_));
            ConvGeometry::new(d, depthwise, &inputs[0], &inputs[1], out).map(drop)
        }
        LayerDescriptor::Pooling2d(d) => pooling::table(d, &inputs[0], out).map(drop),
        LayerDescriptor::FullyConnected(_) | LayerDescriptor::BatchMatMul(_) => {
            matmul::layer_table(layer, inputs, out).map(drop)
        }
        LayerDescriptor::ElementwiseBinary(_) if out.shape.len() > MAX_RANK => Err(format!(
            "rank {} exceeds the kernels' {MAX_RANK}",
            out.shape.len()
        )),
        LayerDescriptor::Mean(d) => reduce::table(&inputs[0].shape, &d.axes).map(drop),
        LayerDescriptor::Reduce(d) => reduce::table(&inputs[0].shape, &d.axes).map(drop),
        LayerDescriptor::Transpose(d) => {
            movement::transpose_table(&inputs[0].shape, &d.permutation).map(drop)
        }
        LayerDescriptor::BatchNormalization(d) => {
            if d.layout != DataLayout::Nchw {
                return Err("only NCHW batch normalisation".to_owned());
            }
            if inputs[0].shape.len() < 2 {
                return Err("batch normalisation needs a channel axis".to_owned());
            }
            match inputs[1..].iter().position(|t| !t.is_constant) {
                Some(i) => Err(format!(
                    "batch normalisation parameter {} is not constant (they are folded when the workload is made)",
                    i + 1
                )),
                None => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// GpuCl's answer for one layer.
pub(crate) fn is_layer_supported(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Support {
    match check(layer, inputs, outputs) {
        Ok(()) => Support::Supported,
        Err(reason) => Support::unsupported(format!("{GPU_CL_ID}: {reason}")),
    }
}
