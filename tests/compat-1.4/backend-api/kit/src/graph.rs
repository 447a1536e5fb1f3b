//! Questions about the subgraph a backend is asked to optimise ([`Graph`]), and the greedy
//! fusion driver that every `optimize_subgraph` needs ([`GreedyFusion`]).
//!
//! The driver walks the subgraph's layers in their (topological) order and asks the plugin's
//! own matcher for a chain starting at each layer not yet taken; a chain it returns is
//! recorded as a substitution and its layers are taken. At the end, every layer left is
//! either untouched (the backend supports it) or failed (the host re-assigns it). So a plugin
//! keeps only its patterns; [`Graph::substitution`] builds the `PreCompiled` replacement of
//! a chain and checks it with the plugin's own layer support first.
//!
//! ```
//! use backplane_api::{
//!     LayerDescriptor, OptimizationViews, SubgraphView, Support, TensorInfo,
//! };
//! use backplane_backend_kit::graph::{Chain, GreedyFusion};
//!
//! /// The backend's own layer support (here: everything).
//! fn supported(_: &LayerDescriptor, _: &[TensorInfo], _: &[TensorInfo]) -> Support {
//!     Support::Supported
//! }
//!
//! /// `optimize_subgraph`: every layer followed by an Activation that alone reads its output
//! /// becomes one `PreCompiled` layer.
//! fn optimize(view: &SubgraphView<'_>) -> OptimizationViews {
//!     let mut fusion = GreedyFusion::new(view);
//!     fusion.chains(|g, head, taken| {
//!         let next = g
//!             .chain_successor(*head.outputs.first()?)
//!             .filter(|l| !taken.contains(&l.id))?;
//!         let LayerDescriptor::Activation(_) = next.descriptor else {
//!             return None;
//!         };
//!         let chain = Chain {
//!             name: format!("{}+act", head.name),
//!             operation: "WithActivation".to_owned(),
//!             payload: vec![1],
//!             replaced: vec![head.id, next.id],
//!             inputs: head.inputs.to_vec(),
//!             output: next.outputs[0],
//!         };
//!         g.substitution("Acme", chain, &supported)
//!     });
//!     fusion.finish("Acme", &supported)
//! }
//!
//! let empty = SubgraphView {
//!     layers: Vec::new().into(),
//!     tensors: Vec::new().into(),
//!     inputs: Vec::new().into(),
//!     outputs: Vec::new().into(),
//! };
//! assert!(optimize(&empty).substitutions.is_empty());
//! ```

use std::collections::BTreeSet;

use backplane_api::{
    DataType, LayerDescriptor, LayerId, OptimizationViews, SubgraphLayer, SubgraphTensor,
    SubgraphView, Substitution, Support, TensorId, TensorInfo,
};

use crate::payload::precompiled;

/// A backend's layer support, as [`Backend::is_layer_supported`](backplane_api::Backend)
/// answers it: the layer, its inputs and its outputs.
pub type SupportFn<'f> = &'f dyn Fn(&LayerDescriptor, &[TensorInfo], &[TensorInfo]) -> Support;

/// Read-only questions about one subgraph.
#[derive(Debug, Clone, Copy)]
pub struct Graph<'v, 'a> {
    view: &'v SubgraphView<'a>,
}

impl<'v, 'a> Graph<'v, 'a> {
    /// The questions about `view`.
    pub fn new(view: &'v SubgraphView<'a>) -> Self {
        Self { view }
    }

    /// The subgraph.
    pub fn view(&self) -> &'v SubgraphView<'a> {
        self.view
    }

    /// Tensor `t`, with its value if it is a constant.
    pub fn tensor(&self, t: TensorId) -> Option<&'v SubgraphTensor<'a>> {
        self.view.tensors.iter().find(|x| x.id == t)
    }

    /// Tensor `t`'s description.
    pub fn info(&self, t: TensorId) -> Option<&'v TensorInfo> {
        self.tensor(t).map(|x| &x.info)
    }

    /// The descriptions of `ids`, or `None` if one is unknown.
    pub fn infos(&self, ids: &[TensorId]) -> Option<Vec<TensorInfo>> {
        ids.iter().map(|&t| self.info(t).cloned()).collect()
    }

    /// Whether `t` is a constant (its value is in the subgraph), of any type.
    pub fn has_value(&self, t: TensorId) -> bool {
        self.tensor(t).is_some_and(|x| x.value.is_some())
    }

    /// `t`'s description if it is a Float32 constant.
    pub fn float_constant(&self, t: TensorId) -> Option<&'v TensorInfo> {
        self.tensor(t)
            .filter(|x| x.value.is_some() && x.info.data_type == DataType::Float32)
            .map(|x| &x.info)
    }

    /// The layer of the subgraph that writes `t`, if one does.
    pub fn producer(&self, t: TensorId) -> Option<&'v SubgraphLayer> {
        self.view.layers.iter().find(|l| l.outputs.contains(&t))
    }

    /// The layers of the subgraph that read `t`, in order.
    pub fn consumers(&self, t: TensorId) -> impl Iterator<Item = &'v SubgraphLayer> + use<'v> {
        self.view
            .layers
            .iter()
            .filter(move |l| l.inputs.contains(&t))
    }

    /// The one layer reading `t`, if exactly one does and `t` is not read outside the
    /// subgraph (not one of its outputs).
    pub fn sole_consumer(&self, t: TensorId) -> Option<&'v SubgraphLayer> {
        if self.view.outputs.contains(&t) {
            return None;
        }
        let mut readers = self.consumers(t);
        match (readers.next(), readers.next()) {
            (Some(l), None) => Some(l),
            _ => None,
        }
    }

    /// The next layer of a chain through `t`: its [sole consumer](Self::sole_consumer), if
    /// that layer has exactly one output.
    pub fn chain_successor(&self, t: TensorId) -> Option<&'v SubgraphLayer> {
        self.sole_consumer(t).filter(|l| l.outputs.len() == 1)
    }

    /// Whether `supported` accepts layer `l` with the tensors it has here (`true` if a
    /// tensor is unknown: the host asked about it before and assigned it).
    pub fn supports(&self, l: &SubgraphLayer, supported: SupportFn<'_>) -> bool {
        match (self.infos(&l.inputs), self.infos(&l.outputs)) {
            (Some(i), Some(o)) => supported(&l.descriptor, &i, &o).is_supported(),
            _ => true,
        }
    }

    /// The substitution of `chain` by one `PreCompiled` layer of `backend_id`, if
    /// `supported` accepts that layer with the tensors here. Both verdicts are logged
    /// (`debug` for a refusal, `info` for a fusion), prefixed with `backend_id`.
    pub fn substitution(
        &self,
        backend_id: &str,
        chain: Chain,
        supported: SupportFn<'_>,
    ) -> Option<Substitution> {
        let Chain {
            name,
            operation,
            payload,
            replaced,
            inputs,
            output,
        } = chain;
        let descriptor = precompiled(backend_id, &operation, payload);
        let infos = self.infos(&inputs)?;
        let out = self.info(output)?.clone();
        if let Support::Unsupported(why) = supported(&descriptor, &infos, &[out]) {
            log::debug!("{backend_id}: not fusing {name}: {why}");
            return None;
        }
        log::info!("{backend_id}: fusing {name} ({operation})");
        Some(Substitution {
            replaced: replaced.into(),
            replacement: SubgraphLayer {
                id: 0,
                name: name.into(),
                descriptor,
                inputs: inputs.into(),
                outputs: vec![output].into(),
            },
        })
    }
}

/// A chain of layers a plugin's matcher found, to become one `PreCompiled` layer
/// ([`Graph::substitution`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Chain {
    /// The new layer's name (for reports), as `conv1+bn+relu`.
    pub name: String,
    /// What it computes, a short name for reports, as `Conv2dBatchNormReLU`.
    pub operation: String,
    /// The plugin's description of it (see [`payload`](crate::payload)).
    pub payload: Vec<u8>,
    /// The layers it replaces, the head first.
    pub replaced: Vec<LayerId>,
    /// Its inputs, the data input first, each tensor once.
    pub inputs: Vec<TensorId>,
    /// Its one output: the last replaced layer's.
    pub output: TensorId,
}

/// The greedy fusion driver of one `optimize_subgraph` call (see the module documentation).
#[derive(Debug)]
pub struct GreedyFusion<'v, 'a> {
    graph: Graph<'v, 'a>,
    views: OptimizationViews,
    taken: BTreeSet<LayerId>,
}

impl<'v, 'a> GreedyFusion<'v, 'a> {
    /// A driver over `view`, nothing taken yet.
    pub fn new(view: &'v SubgraphView<'a>) -> Self {
        Self {
            graph: Graph::new(view),
            views: OptimizationViews::default(),
            taken: BTreeSet::new(),
        }
    }

    /// The questions about the subgraph.
    pub fn graph(&self) -> Graph<'v, 'a> {
        self.graph
    }

    /// The layers in substitutions so far.
    pub fn taken(&self) -> &BTreeSet<LayerId> {
        &self.taken
    }

    /// Records substitutions found by a pass of the plugin's own (a pass that already added
    /// their layers to [`taken_mut`](Self::taken_mut) or not: they are taken either way).
    pub fn add(&mut self, substitutions: impl IntoIterator<Item = Substitution>) {
        for s in substitutions {
            self.taken.extend(s.replaced.iter().copied());
            self.views.substitutions.push(s);
        }
    }

    /// The layers taken so far, for a pass of the plugin's own that takes layers itself.
    pub fn taken_mut(&mut self) -> &mut BTreeSet<LayerId> {
        &mut self.taken
    }

    /// Asks `chain` for a chain from each layer not yet taken, in the subgraph's order, with
    /// the layers taken so far (a chain must stop before them); a chain that takes none of
    /// them is recorded.
    pub fn chains(
        &mut self,
        mut chain: impl FnMut(Graph<'v, 'a>, &SubgraphLayer, &BTreeSet<LayerId>) -> Option<Substitution>,
    ) {
        for head in self.graph.view.layers.iter() {
            if self.taken.contains(&head.id) {
                continue;
            }
            if let Some(s) = chain(self.graph, head, &self.taken)
                .filter(|s| s.replaced.iter().all(|id| !self.taken.contains(id)))
            {
                self.add([s]);
            }
        }
    }

    /// The result: the substitutions, and every other layer untouched if `supported`
    /// accepts it (see [`Graph::supports`]), else failed (logged at `debug`).
    pub fn finish(mut self, backend_id: &str, supported: SupportFn<'_>) -> OptimizationViews {
        for l in self.graph.view.layers.iter() {
            if self.taken.contains(&l.id) {
                continue;
            }
            if self.graph.supports(l, supported) {
                self.views.untouched.push(l.id);
            } else {
                log::debug!("{backend_id}: returning layer {} as failed", l.name);
                self.views.failed.push(l.id);
            }
        }
        self.views
    }
}

#[cfg(test)]
#[path = "graph_tests.rs"]
mod tests;
