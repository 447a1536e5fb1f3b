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
//! re-assigns them); everything else is untouched.

use std::collections::BTreeSet;

use backplane_api::{
    DataLayout, DataType, LayerDescriptor, LayerId, OptimizationViews, PreCompiledDescriptor,
    SubgraphLayer, SubgraphView, Substitution, Support, TensorId, TensorInfo,
};

use crate::{
    GPU_CL_ID,
    fused_op::{BatchNormStage, FusedOp},
    layer_support::is_layer_supported,
};

/// Read-only questions about one subgraph.
struct Graph<'v, 'a> {
    view: &'v SubgraphView<'a>,
}

impl<'v> Graph<'v, '_> {
    fn info(&self, t: TensorId) -> Option<&'v TensorInfo> {
        self.view
            .tensors
            .iter()
            .find(|x| x.id == t)
            .map(|x| &x.info)
    }

    /// Whether `t` is a Float32 constant.
    fn is_constant(&self, t: TensorId) -> bool {
        self.view
            .tensors
            .iter()
            .any(|x| x.id == t && x.value.is_some() && x.info.data_type == DataType::Float32)
    }

    /// The one layer reading `t`, if exactly one does and `t` is not read outside.
    fn sole_consumer(&self, t: TensorId) -> Option<&'v SubgraphLayer> {
        if self.view.outputs.contains(&t) {
            return None;
        }
        let mut readers = self.view.layers.iter().filter(|l| l.inputs.contains(&t));
        match (readers.next(), readers.next()) {
            (Some(l), None) if l.outputs.len() == 1 => Some(l),
            _ => None,
        }
    }

    /// Whether GpuCl supports `l` with its tensors here (`true` when a tensor is unknown).
    fn supported(&self, l: &SubgraphLayer) -> bool {
        let infos = |ids: &[TensorId]| {
            ids.iter()
                .map(|&t| self.info(t).cloned())
                .collect::<Option<Vec<_>>>()
        };
        match (infos(&l.inputs), infos(&l.outputs)) {
            (Some(i), Some(o)) => is_layer_supported(&l.descriptor, &i, &o).is_supported(),
            _ => true,
        }
    }

    /// The substitution of the chain from `head`, if it has more than one layer and GpuCl
    /// accepts it.
    fn chain(&self, head: &SubgraphLayer, taken: &BTreeSet<LayerId>) -> Option<Substitution> {
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
        if !self.is_constant(w) || bias.is_some_and(|b| !self.is_constant(b)) {
            return None;
        }
        let channels = *self.info(t)?.shape.get(1)?;
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
        let next = |t: TensorId| self.sole_consumer(t).filter(|l| !taken.contains(&l.id));
        if let Some(l) = next(t)
            && let (LayerDescriptor::BatchNormalization(d), &[bx, s, b, m, v]) =
                (&l.descriptor, l.inputs.as_slice())
            && bx == t
            && d.layout == DataLayout::Nchw
            && [s, b, m, v].iter().all(|&p| {
                self.is_constant(p)
                    && self
                        .info(p)
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
        let descriptor = LayerDescriptor::PreCompiled(PreCompiledDescriptor {
            backend: GPU_CL_ID.into(),
            operation: op.operation().into(),
            payload: op.encode().into(),
        });
        let infos: Vec<TensorInfo> = inputs
            .iter()
            .map(|&i| self.info(i).cloned())
            .collect::<Option<_>>()?;
        let out = self.info(t)?.clone();
        if let Support::Unsupported(why) = is_layer_supported(&descriptor, &infos, &[out]) {
            log::debug!("GpuCl: not fusing {name}: {why}");
            return None;
        }
        log::info!("GpuCl: fusing {name} ({})", op.operation());
        Some(Substitution {
            replaced: replaced.into(),
            replacement: SubgraphLayer {
                id: 0,
                name: name.into(),
                descriptor,
                inputs: inputs.into(),
                outputs: vec![t].into(),
            },
        })
    }
}

/// GpuCl's `optimize_subgraph` (see the module documentation).
pub(crate) fn optimize(view: &SubgraphView<'_>) -> OptimizationViews {
    let graph = Graph { view };
    let mut views = OptimizationViews::default();
    let mut fused: BTreeSet<LayerId> = BTreeSet::new();
    for head in view.layers.iter() {
        if fused.contains(&head.id) {
            continue;
        }
        if let Some(s) = graph.chain(head, &fused) {
            fused.extend(s.replaced.iter().copied());
            views.substitutions.push(s);
        }
    }
    for l in view.layers.iter().filter(|l| !fused.contains(&l.id)) {
        if graph.supported(l) {
            views.untouched.push(l.id);
        } else {
            views.failed.push(l.id);
        }
    }
    views
}
