//! `optimize_subgraph`: fuses chains into CpuFast `PreCompiled` layers.
//!
//! A chain starts at a Convolution2d, DepthwiseConvolution2d or FullyConnected layer whose
//! weights (and bias, if any) are constant, or at a BatchMatMul whose `b` is constant, and
//! takes in, in this order, each of these that follows directly:
//! 1. a BatchNormalization (NCHW) with constant parameters, folded into the weights and bias
//!    (convolutions only);
//! 2. an ElementwiseBinary Mul by a constant of one element or per channel (as for a bias,
//!    below), folded into the weights and bias (convolutions only);
//! 3. an ElementwiseBinary Add whose other operand is a constant per-channel bias:
//!    `[1, C, 1, 1]` or `[C, 1, 1]` after a convolution; `[C]`, `[1, C]`, ... (leading 1s up
//!    to the output's rank) along the last dimension after a fully connected layer or a batch
//!    matmul; or one element (`[]`, `[1]`, `[1, 1]`, ... up to the output's rank) after any
//!    head (an Add of another constant is no bias; a `[C]` operand after a convolution
//!    broadcasts along the width under numpy rules, so it is not a bias);
//! 4. an ElementwiseBinary Add of a tensor that is not constant and has the head's output
//!    shape exactly (a residual connection: ResNet's and MobileNetV2's blocks, a
//!    transformer's sublayers), other than the head's own input; the fused layer reads it as
//!    an input;
//! 5. an Activation (any function, Gelu included);
//! 6. an ElementwiseBinary Mul by a one-element constant, then
//! 7. an ElementwiseBinary Add of a one-element constant (`y · s + t` after the activation,
//!    each rounded as the layers round it: PP-LCNetV3's learnable affine blocks, in PP-OCRv4);
//! 8. a Pooling2d (NCHW, convolutions only).
//!
//! So Conv→Add→ReLU→MaxPool, Conv→Add→ReLU, Conv→Add→Pool, Conv→Add, FC→Add→activation,
//! FC→Add, Conv→BatchNorm(→…), Conv→ReLU6, and the transformer's feed-forward
//! MatMul→Add→Gelu and projections MatMul→Add, and PP-OCRv4's
//! Conv→Mul→Add→HardSwish→Mul→Add. A chain continues only through a tensor
//! with exactly one consumer that is not an output of the subgraph. A chain of one layer is
//! no fusion: the layer stays untouched. Each chain becomes one substitution named
//! `<head>+bn+scale+bias+add+<activation>+affine+pool` (the parts present), whose payload is a
//! [`FusedOp`]. The result is checked with the workload's own checks; if a chain does not fit
//! (for example a pooling CpuFast cannot run after it), its last stages are dropped.
//!
//! Layers of the subgraph that CpuFast does not support are returned as failed (the host
//! re-assigns them); everything else is untouched.

use std::collections::BTreeSet;

use backplane_api::{
    ActivationDescriptor, BinaryOperation, DataLayout, DataType, LayerDescriptor, LayerId,
    OptimizationViews, Pooling2dDescriptor, SubgraphLayer, SubgraphView, Substitution, TensorId,
};
use backplane_backend_kit::graph::{Chain, Graph, GreedyFusion};

use crate::{
    CPU_FAST_ID,
    fused_op::{BatchNormStage, FusedOp, Head, is_one_element},
    layer_support::is_layer_supported,
};

/// One layer a chain takes in after its head.
#[derive(Debug, Clone)]
enum Stage {
    /// Batch norm: epsilon and the scale, bias, mean and variance tensors.
    BatchNorm(f32, [TensorId; 4]),
    /// A multiplier tensor folded into the weights and bias.
    Scale(TensorId),
    /// An added bias tensor.
    Bias(TensorId),
    /// An added tensor of the head's output shape.
    Residual(TensorId),
    Activation(ActivationDescriptor),
    /// A one-element multiplier after the activation.
    PostScale(TensorId),
    /// A one-element constant added after that.
    PostShift(TensorId),
    Pool(Pooling2dDescriptor),
}

/// The stages that follow the output `t` of a `head`, in the order of the module doc.
/// Layers in `taken` (already in another chain) end it.
fn stages<'v>(
    g: Graph<'v, '_>,
    head: &Head,
    mut t: TensorId,
    taken: &BTreeSet<LayerId>,
) -> Vec<(&'v SubgraphLayer, Stage)> {
    let Some(head_out) = g.info(t).map(|i| i.shape.as_slice()) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for position in 0..8 {
        let Some(layer) = g.chain_successor(t).filter(|l| !taken.contains(&l.id)) else {
            break;
        };
        if let Some(stage) = stage(g, position, layer, t, head, head_out) {
            t = layer.outputs[0];
            found.push((layer, stage));
        }
    }
    found
}

/// `l` (reading `t`, of the head's output shape `head_out`) as stage number `position` of
/// a chain from `head` (0 batch norm, 1 scale, 2 bias, 3 residual, 4 activation, 5
/// post-activation scale, 6 post-activation shift, 7 pooling), if it is one.
fn stage(
    g: Graph<'_, '_>,
    position: usize,
    l: &SubgraphLayer,
    t: TensorId,
    head: &Head,
    head_out: &[u32],
) -> Option<Stage> {
    let (convolution, channels) = (head.is_convolution(), head.channels(head_out));
    match (position, &l.descriptor, l.inputs.as_slice()) {
        (0, LayerDescriptor::BatchNormalization(d), &[x, scale, bias, mean, variance])
            if convolution && d.layout == DataLayout::Nchw && x == t =>
        {
            let params = [scale, bias, mean, variance];
            let per_channel = params.iter().all(|&p| {
                g.float_constant(p)
                    .is_some_and(|i| i.shape.as_slice() == [channels])
            });
            per_channel.then_some(Stage::BatchNorm(d.epsilon, params))
        }
        (3, LayerDescriptor::ElementwiseBinary(BinaryOperation::Add), &[a, b])
            if (a == t) != (b == t) =>
        {
            let other = if a == t { b } else { a };
            let info = g.info(other)?;
            let residual = g.float_constant(other).is_none()
                && info.data_type == DataType::Float32
                && info.shape.as_slice() == head_out;
            residual.then_some(Stage::Residual(other))
        }
        (1 | 2 | 5 | 6, LayerDescriptor::ElementwiseBinary(op), &[a, b])
            if (a == t) != (b == t) =>
        {
            let other = if a == t { b } else { a };
            let shape = g.float_constant(other)?.shape.as_slice();
            let per_channel = head.is_bias(shape, head_out);
            let one = is_one_element(shape, head_out);
            match (position, op) {
                (1, BinaryOperation::Mul) if convolution && per_channel => {
                    Some(Stage::Scale(other))
                }
                (2, BinaryOperation::Add) if per_channel => Some(Stage::Bias(other)),
                (5, BinaryOperation::Mul) if one => Some(Stage::PostScale(other)),
                (6, BinaryOperation::Add) if one => Some(Stage::PostShift(other)),
                _ => None,
            }
        }
        (4, LayerDescriptor::Activation(d), _) => Some(Stage::Activation(*d)),
        (7, LayerDescriptor::Pooling2d(d), _) if convolution && d.layout == DataLayout::Nchw => {
            Some(Stage::Pool(d.clone()))
        }
        _ => None,
    }
}

/// The substitution of the longest chain from `head` that CpuFast accepts, if any.
/// Layers in `taken` are in other chains already: this one stops before them (two
/// convolutions meeting at one residual Add: the first takes it, the other keeps its batch
/// norm).
fn chain(
    g: Graph<'_, '_>,
    head: &SubgraphLayer,
    taken: &BTreeSet<LayerId>,
) -> Option<Substitution> {
    let kind = Head::of(&head.descriptor)?;
    let (&[x, weights, ..], &[out]) = (head.inputs.as_slice(), head.outputs.as_slice()) else {
        return None;
    };
    let head_bias = match &kind {
        Head::Convolution(d) | Head::Depthwise(d) if d.bias_enabled => Some(*head.inputs.get(2)?),
        Head::FullyConnected(d) if d.bias_enabled => Some(*head.inputs.get(2)?),
        _ => None,
    };
    if g.float_constant(weights).is_none()
        || head_bias.is_some_and(|b| g.float_constant(b).is_none())
    {
        return None;
    }
    // A residual that is the head's own input (`x + conv(x)`) would be a second input slot
    // for `x`, which the host refuses: the chain stops before it.
    let stages: Vec<_> = stages(g, &kind, out, taken)
        .into_iter()
        .take_while(|(_, s)| !matches!(s, Stage::Residual(r) if *r == x))
        .collect();
    (1..=stages.len())
        .rev()
        .find_map(|n| substitution(g, head, &kind, [x, weights], head_bias, &stages[..n]))
}

/// The substitution of `head` followed by `stages`, if CpuFast supports it.
fn substitution(
    g: Graph<'_, '_>,
    head: &SubgraphLayer,
    kind: &Head,
    [x, weights]: [TensorId; 2],
    head_bias: Option<TensorId>,
    stages: &[(&SubgraphLayer, Stage)],
) -> Option<Substitution> {
    // The replacement's inputs: each external tensor once, the data input first.
    let mut inputs: Vec<TensorId> = vec![x];
    let mut slot = |t: TensorId| match inputs.iter().position(|&i| i == t) {
        Some(i) if i > 0 => i as u32,
        _ => {
            inputs.push(t);
            (inputs.len() - 1) as u32
        }
    };
    let weights = slot(weights);
    let mut op = FusedOp::head_only(kind.clone(), weights, head_bias.map(&mut slot));
    let mut name = head.name.to_string();
    for (_, stage) in stages {
        match stage {
            Stage::BatchNorm(epsilon, params) => {
                op.batch_norm = Some(BatchNormStage {
                    epsilon: *epsilon,
                    slots: params.map(&mut slot),
                });
                name.push_str("+bn");
            }
            Stage::Scale(t) => {
                op.scale = Some(slot(*t));
                name.push_str("+scale");
            }
            Stage::Bias(t) => {
                op.bias = Some(slot(*t));
                name.push_str("+bias");
            }
            Stage::Residual(t) => {
                op.residual = Some(slot(*t));
                name.push_str("+add");
            }
            Stage::Activation(a) => {
                op.activation = Some(*a);
                name.push_str(&format!("+{:?}", a.function).to_lowercase());
            }
            Stage::PostScale(t) => {
                op.post_scale = Some(slot(*t));
                name.push_str("+affine");
            }
            Stage::PostShift(t) => {
                op.post_shift = Some(slot(*t));
                if op.post_scale.is_none() {
                    name.push_str("+affine");
                }
            }
            Stage::Pool(p) => {
                op.pool = Some(p.clone());
                name.push_str("+pool");
            }
        }
    }
    let last = stages.last().map_or(head, |(l, _)| l).outputs[0];
    let replaced = std::iter::once(head.id)
        .chain(stages.iter().map(|(l, _)| l.id))
        .collect();
    let chain = Chain {
        name,
        operation: op.operation(),
        payload: op.encode(),
        replaced,
        inputs,
        output: last,
    };
    g.substitution(CPU_FAST_ID, chain, &is_layer_supported)
}

/// CpuFast's `optimize_subgraph` (see the module documentation): the int8 passes, then the
/// kit's greedy driver with [`chain`] as the matcher.
pub(crate) fn optimize(view: &SubgraphView<'_>) -> OptimizationViews {
    let mut fusion = GreedyFusion::new(view);
    let islands = crate::int8::island::find(view, fusion.taken_mut());
    fusion.add(islands);
    let unary = crate::int8::island::find_unary(view, fusion.taken_mut());
    fusion.add(unary);
    let clamps = crate::int8::clamp::find(view, fusion.taken_mut());
    fusion.add(clamps);
    fusion.chains(chain);
    fusion.finish(CPU_FAST_ID, &is_layer_supported)
}

#[cfg(test)]
#[path = "fusion_tests.rs"]
mod tests;
