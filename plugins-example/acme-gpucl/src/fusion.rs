//! `optimize_subgraph`: fuses convolution chains into GpuCl `PreCompiled` layers.
//!
//! A chain starts at a Convolution2d or DepthwiseConvolution2d (NCHW) whose weights (and bias,
//! if any) are constant, and takes in, in this order, each of these that follows directly:
//! 1. a BatchNormalization (NCHW) with constant per-channel parameters, folded into the
//!    weights and bias when the workload is made;
//! 2. an Activation (any function), run in the convolution kernel.
//!
//! A chain continues only through a tensor with exactly one consumer that is not an output of
//! the subgraph. A chain of one layer is no fusion. Each chain becomes one substitution named
//! `<head>+bn+<activation>` whose payload is a [`FusedOp`], checked with the workload's own
//! checks. Layers of the subgraph that GpuCl does not support are returned as failed (the host
//! re-assigns them); everything else is untouched. The walk, the subgraph queries and the
//! substitution are the kit's (`backplane_backend_kit::graph`); this file holds the pattern.

use std::collections::BTreeSet;

use backplane_api::{
    DataLayout, LayerDescriptor, LayerId, OptimizationViews, SubgraphLayer, SubgraphView,
    Substitution,
};
use backplane_backend_kit::graph::{Chain, Graph, GreedyFusion};

use crate::{
    GPU_CL_ID,
    fused_op::{BatchNormStage, FusedOp},
    layer_support::is_layer_supported,
};

/// The substitution of the chain from `head`, if it has more than one layer and GpuCl
/// accepts it; layers in `taken` end it.
fn chain(
    g: Graph<'_, '_>,
    head: &SubgraphLayer,
    taken: &BTreeSet<LayerId>,
) -> Option<Substitution> {
    let (conv, depthwise) = match &head.descriptor {
        LayerDescriptor::Convolution2d(d) => (d, false),
        LayerDescriptor::DepthwiseConvolution2d(d) => (d, true),
        _ => return None,
    };
    if conv.layout != DataLayout::Nchw {
        return None;
    }
    let (&[x, w, ..], &[mut t]) = (head.inputs.as_slice(), head.outputs.as_slice()) else {
        return None;
    };
    let bias = if conv.bias_enabled {
        Some(*head.inputs.get(2)?)
    } else {
        None
    };
    let is_constant = |t| g.float_constant(t).is_some();
    if !is_constant(w) || bias.is_some_and(|b| !is_constant(b)) {
        return None;
    }
    let channels = *g.info(t)?.shape.get(1)?;
    let mut inputs = vec![x, w];
    inputs.extend(bias);
    let mut op = FusedOp {
        conv: conv.clone(),
        depthwise,
        weights: 1,
        bias: bias.map(|_| 2),
        batch_norm: None,
        activation: None,
    };
    let mut replaced = vec![head.id];
    let mut name = head.name.to_string();
    let next = |t| g.chain_successor(t).filter(|l| !taken.contains(&l.id));
    if let Some(l) = next(t)
        && let (LayerDescriptor::BatchNormalization(d), &[bx, s, b, m, v]) =
            (&l.descriptor, l.inputs.as_slice())
        && bx == t
        && d.layout == DataLayout::Nchw
        && [s, b, m, v].iter().all(|&p| {
            g.float_constant(p)
                .is_some_and(|i| i.shape.as_slice() == [channels])
        })
    {
        let first = inputs.len() as u32;
        inputs.extend([s, b, m, v]);
        op.batch_norm = Some(BatchNormStage {
            epsilon: d.epsilon,
            slots: [first, first + 1, first + 2, first + 3],
        });
        replaced.push(l.id);
        name.push_str("+bn");
        t = l.outputs[0];
    }
    if let Some(l) = next(t)
        && let LayerDescriptor::Activation(a) = &l.descriptor
    {
        op.activation = Some(*a);
        replaced.push(l.id);
        name.push_str(&format!("+{:?}", a.function).to_lowercase());
        t = l.outputs[0];
    }
    if replaced.len() < 2 {
        return None;
    }
    let chain = Chain {
        name,
        operation: op.operation(),
        payload: op.encode(),
        replaced,
        inputs,
        output: t,
    };
    g.substitution(GPU_CL_ID, chain, &is_layer_supported)
}

/// GpuCl's `optimize_subgraph` (see the module documentation): the kit's greedy driver with
/// [`chain`] as the matcher.
pub(crate) fn optimize(view: &SubgraphView<'_>) -> OptimizationViews {
    let mut fusion = GreedyFusion::new(view);
    fusion.chains(chain);
    fusion.finish(GPU_CL_ID, &is_layer_supported)
}

#[cfg(test)]
mod tests {
    use backplane_api::{
        ActivationDescriptor, ActivationFunction, BatchNormalizationDescriptor,
        Convolution2dDescriptor, Padding2d, RSlice, SubgraphTensor,
    };

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, cst, f32t, numel, run1, var};

    /// Conv(+bias) → BatchNorm → HardSwish becomes one PreCompiled layer whose result is the
    /// three layers' (oracle: the unfused layers run one by one on GpuCl, each tested
    /// against its own f64 oracle elsewhere); a truncated or altered payload is refused.
    #[test]
    fn conv_bn_activation_fuses_and_computes_the_chain() {
        let mut g = Lcg(60);
        let (x_shape, w_shape, c) = ([1u32, 4, 9, 8], [6u32, 2, 3, 3], 6u32);
        let conv = Convolution2dDescriptor {
            padding: Padding2d {
                left: 1,
                right: 1,
                top: 1,
                bottom: 1,
            },
            groups: 2,
            bias_enabled: true,
            ..Default::default()
        };
        let (x, w, bias) = (g.vec(numel(&x_shape)), g.vec(numel(&w_shape)), g.vec(6));
        let (s, b, m) = (g.vec(6), g.vec(6), g.vec(6));
        let v: Vec<f32> = g.vec(6).iter().map(|v| v.abs() + 0.1).collect();
        let act = ActivationDescriptor {
            function: ActivationFunction::HardSwish,
            a: 0.0,
            b: 0.0,
        };
        let bn = BatchNormalizationDescriptor {
            epsilon: 1e-3,
            layout: DataLayout::Nchw,
        };
        let out_shape = [1u32, 6, 9, 8];
        let bytes = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let consts: Vec<Vec<u8>> = [&w, &bias, &s, &b, &m, &v]
            .iter()
            .map(|v| bytes(v))
            .collect();
        fn tensor<'a>(id: u32, shape: &[u32], value: Option<&'a Vec<u8>>) -> SubgraphTensor<'a> {
            SubgraphTensor {
                id,
                info: if value.is_some() {
                    f32t(shape).constant()
                } else {
                    f32t(shape)
                },
                value: value.map(|v| RSlice::from_slice(v)).into(),
            }
        }
        let tensors = vec![
            tensor(0, &x_shape, None),
            tensor(1, &w_shape, Some(&consts[0])),
            tensor(2, &[c], Some(&consts[1])),
            tensor(3, &out_shape, None),
            tensor(4, &[c], Some(&consts[2])),
            tensor(5, &[c], Some(&consts[3])),
            tensor(6, &[c], Some(&consts[4])),
            tensor(7, &[c], Some(&consts[5])),
            tensor(8, &out_shape, None),
            tensor(9, &out_shape, None),
        ];
        let layer = |id, d, inputs: Vec<u32>, out| SubgraphLayer {
            id,
            name: format!("l{id}").into(),
            descriptor: d,
            inputs: inputs.into(),
            outputs: vec![out].into(),
        };
        let view = SubgraphView {
            layers: vec![
                layer(
                    0,
                    LayerDescriptor::Convolution2d(conv.clone()),
                    vec![0, 1, 2],
                    3,
                ),
                layer(
                    1,
                    LayerDescriptor::BatchNormalization(bn),
                    vec![3, 4, 5, 6, 7],
                    8,
                ),
                layer(2, LayerDescriptor::Activation(act), vec![8], 9),
            ]
            .into(),
            tensors: tensors.into(),
            inputs: vec![0].into(),
            outputs: vec![9].into(),
        };
        let views = optimize(&view);
        assert_eq!(views.substitutions.len(), 1, "{views:?}");
        assert!(views.untouched.is_empty() && views.failed.is_empty());
        let sub = &views.substitutions[0];
        assert_eq!(sub.replaced.as_slice(), [0, 1, 2]);
        assert_eq!(sub.replacement.name.as_str(), "l0+bn+hardswish");
        assert_eq!(sub.replacement.inputs.as_slice(), [0, 1, 2, 4, 5, 6, 7]);
        assert_eq!(sub.replacement.outputs.as_slice(), [9]);
        let LayerDescriptor::PreCompiled(p) = &sub.replacement.descriptor else {
            panic!("not PreCompiled");
        };
        assert_eq!(p.operation.as_str(), "Conv2dBiasBatchNormHardSwish");
        // The fused workload against the chain of unfused ones.
        let fused = run1(
            &sub.replacement.descriptor,
            &[
                var(&x_shape, x.clone()),
                cst(&w_shape, w.clone()),
                cst(&[c], bias.clone()),
                cst(&[c], s.clone()),
                cst(&[c], b.clone()),
                cst(&[c], m.clone()),
                cst(&[c], v.clone()),
            ],
            &out_shape,
        );
        let y = run1(
            &LayerDescriptor::Convolution2d(conv),
            &[var(&x_shape, x), cst(&w_shape, w), cst(&[c], bias)],
            &out_shape,
        );
        let y = run1(
            &LayerDescriptor::BatchNormalization(bn),
            &[
                var(&out_shape, y),
                cst(&[c], s),
                cst(&[c], b),
                cst(&[c], m),
                cst(&[c], v),
            ],
            &out_shape,
        );
        let want: Vec<f64> = y.iter().map(|&v| act.reference_f64(v)).collect();
        assert_close(&fused, &want, "fused chain");
        // Untrusted payloads: every truncation, trailing bytes, a wrong version.
        let payload = p.payload.to_vec();
        for n in 0..payload.len() {
            assert!(FusedOp::decode(&payload[..n]).is_err(), "truncated at {n}");
        }
        let mut longer = payload.clone();
        longer.push(0);
        assert_eq!(FusedOp::decode(&longer), Err("1 trailing bytes".to_owned()));
        let mut v2 = payload;
        v2[0] = 9;
        assert_eq!(
            FusedOp::decode(&v2),
            Err("payload version 9, this build reads 1".to_owned())
        );
    }
}
