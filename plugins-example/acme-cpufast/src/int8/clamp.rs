//! A quantised product (Convolution2d, DepthwiseConvolution2d, FullyConnected, BatchMatMul)
//! followed by a quantised `Activation` ReLU or BoundedReLU whose input and output have the
//! same parameters: the activation only clamps (in the quantised domain: each stored value
//! maps to itself or to a bound), so it becomes the clamp of the product's requantisation
//! ([`super::Output`]'s `lo..=hi`), in one CpuFast `PreCompiled` layer.
//!
//! The payload is a [`FusedOp`] (the float chains' format) with a head, its bias and the
//! activation only; the tensors being quantised is what sends it here.

use std::collections::BTreeSet;

use backplane_api::{
    ActivationDescriptor, ActivationFunction, BackendResult, LayerDescriptor, LayerId,
    PreCompiledDescriptor, SubgraphLayer, SubgraphView, Substitution, TensorInfo, Workload,
    WorkloadDesc,
};
use backplane_backend_kit::graph::Graph;

use super::{Plan, QTensor};
use crate::{
    CPU_FAST_ID,
    fused_op::{FusedOp, Head},
    workloads::invalid_layer,
};

/// The clamp, in stored values of `y`, of a quantised `Activation` ReLU or BoundedReLU whose
/// input and output parameters are `y`'s (so that it clamps and changes no other value);
/// `None` for any other activation.
fn fused_clamp(a: &ActivationDescriptor, y: &QTensor) -> Option<(i32, i32)> {
    let (lo, hi) = y.range();
    let q = |v: f32| {
        ((v / y.scales[0]).round_ties_even() + y.zp as f32).clamp(lo as f32, hi as f32) as i32
    };
    match a.function {
        ActivationFunction::ReLU => Some((q(0.0), hi)),
        ActivationFunction::BoundedReLU if a.b <= a.a => Some((q(a.b), q(a.a))),
        _ => None,
    }
}

/// The head descriptor and clamp of the fused product `op` over `outputs`, or why it is no
/// quantised product with a clamp.
fn head_and_clamp(
    op: &FusedOp,
    outputs: &[TensorInfo],
) -> Result<(LayerDescriptor, (i32, i32)), String> {
    let plain = FusedOp {
        activation: None,
        ..FusedOp::plain(&op.head.descriptor()).ok_or("no product head")?
    };
    let Some(a) = op.activation else {
        return Err("a quantized fused product needs an activation".to_owned());
    };
    if *op
        != (FusedOp {
            activation: Some(a),
            ..plain
        })
    {
        return Err(format!(
            "a quantized {} fuses only an activation",
            op.operation()
        ));
    }
    let [y] = outputs else {
        return Err("one output".to_owned());
    };
    let clamp = fused_clamp(&a, &QTensor::activation(y)?)
        .ok_or_else(|| format!("quantized {:?} is no clamp", a.function))?;
    Ok((op.head.descriptor(), clamp))
}

/// Why CpuFast cannot run the quantised fused product `op`, or `Ok`.
pub(crate) fn check(
    op: &FusedOp,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
    let (head, clamp) = head_and_clamp(op, outputs)?;
    Plan::new(&head, inputs, outputs, Some(clamp)).map(drop)
}

/// The workload of the quantised fused product `op`.
pub(crate) fn create(
    desc: &WorkloadDesc<'_>,
    op: &FusedOp,
    threads: usize,
) -> BackendResult<Box<dyn Workload>> {
    let (head, clamp) = head_and_clamp(op, &desc.outputs).map_err(|e| invalid_layer(desc, e))?;
    super::create(desc, &head, Some(clamp), threads)
}

/// The products of `view` followed by a clamping activation (none of their layers in
/// `taken`), as substitutions; their layers are added to `taken`.
pub(crate) fn find(view: &SubgraphView<'_>, taken: &mut BTreeSet<LayerId>) -> Vec<Substitution> {
    let g = Graph::new(view);
    let info = |t| g.info(t);
    let mut found = Vec::new();
    for head in &view.layers {
        if Head::of(&head.descriptor).is_none() {
            continue;
        }
        let [out] = head.outputs.as_slice() else {
            continue;
        };
        if taken.contains(&head.id) {
            continue;
        }
        let Some(act) = g.sole_consumer(*out) else {
            continue;
        };
        let LayerDescriptor::Activation(
            a @ ActivationDescriptor {
                function: ActivationFunction::ReLU | ActivationFunction::BoundedReLU,
                ..
            },
        ) = &act.descriptor
        else {
            continue;
        };
        let (Some(head_out), Some(act_out)) =
            (info(*out), act.outputs.first().and_then(|&t| info(t)))
        else {
            continue;
        };
        if taken.contains(&act.id)
            || !head_out.data_type.is_quantized()
            || head_out.data_type != act_out.data_type
            || head_out.quantization != act_out.quantization
        {
            continue;
        }
        let mut op = FusedOp::plain(&head.descriptor).expect("a product head");
        op.activation = Some(*a);
        let inputs: Option<Vec<TensorInfo>> =
            head.inputs.iter().map(|&t| info(t).cloned()).collect();
        let Some(inputs) = inputs else {
            continue;
        };
        if let Err(why) = check(&op, &inputs, std::slice::from_ref(act_out)) {
            log::debug!("CpuFast: not fusing {} with {}: {why}", head.name, act.name);
            continue;
        }
        log::info!("CpuFast: fusing {} with {}", head.name, act.name);
        taken.extend([head.id, act.id]);
        found.push(Substitution {
            replaced: vec![head.id, act.id].into(),
            replacement: SubgraphLayer {
                id: 0,
                name: format!("{}+{:?}", head.name, a.function)
                    .to_lowercase()
                    .into(),
                descriptor: LayerDescriptor::PreCompiled(PreCompiledDescriptor {
                    backend: CPU_FAST_ID.into(),
                    operation: op.operation().into(),
                    payload: op.encode().into(),
                }),
                inputs: head.inputs.clone(),
                outputs: act.outputs.clone(),
            },
        });
    }
    found
}
