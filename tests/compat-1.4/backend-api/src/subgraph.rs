//! Subgraphs handed to `optimize_subgraph`, and what a backend hands back.

use abi_stable::{
    StableAbi,
    std_types::{ROption, RSlice, RString, RVec},
};

use crate::{LayerDescriptor, TensorInfo};

/// Identifies a layer within one subgraph.
pub type LayerId = u32;
/// Identifies a tensor (a layer output) within one subgraph.
pub type TensorId = u32;

/// A tensor of a subgraph.
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct SubgraphTensor<'a> {
    /// Its id, unique within the subgraph.
    pub id: TensorId,
    /// Shape and type.
    pub info: TensorInfo,
    /// Its value, when it is constant (weights, biases).
    pub value: ROption<RSlice<'a, u8>>,
}

/// A layer of a subgraph.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
pub struct SubgraphLayer {
    /// Its id, unique within the subgraph.
    pub id: LayerId,
    /// Its name in the network.
    pub name: RString,
    /// Kind and parameters.
    pub descriptor: LayerDescriptor,
    /// Tensors it reads, in input-slot order.
    pub inputs: RVec<TensorId>,
    /// Tensors it writes, in output-slot order.
    pub outputs: RVec<TensorId>,
}

/// A connected part of a network assigned to one backend.
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct SubgraphView<'a> {
    /// The layers, in a topological order.
    pub layers: RVec<SubgraphLayer>,
    /// Every tensor a layer of the subgraph reads or writes.
    pub tensors: RVec<SubgraphTensor<'a>>,
    /// Tensors produced outside the subgraph and read inside it.
    pub inputs: RVec<TensorId>,
    /// Tensors produced inside the subgraph and read outside it (or network outputs).
    pub outputs: RVec<TensorId>,
}

impl SubgraphView<'_> {
    /// The tensor with this id.
    pub fn tensor(&self, id: TensorId) -> Option<&SubgraphTensor<'_>> {
        self.tensors.iter().find(|t| t.id == id)
    }

    /// The layer with this id.
    pub fn layer(&self, id: LayerId) -> Option<&SubgraphLayer> {
        self.layers.iter().find(|l| l.id == id)
    }
}

/// A set of layers replaced by one backend-specific layer.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
pub struct Substitution {
    /// The layers replaced (a connected part of the subgraph).
    pub replaced: RVec<LayerId>,
    /// The replacement. Its `inputs` must be exactly the tensors the replaced layers read from
    /// outside the set, its `outputs` exactly those read outside the set; its `id` is ignored.
    pub replacement: SubgraphLayer,
}

/// What a backend did with a subgraph (Arm NN's `OptimizationViews`).
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Default)]
pub struct OptimizationViews {
    /// Layer sets replaced by backend-specific layers.
    pub substitutions: RVec<Substitution>,
    /// Layers the backend cannot run after all: re-assigned to the next preferred backend.
    pub failed: RVec<LayerId>,
    /// Layers left as they were.
    pub untouched: RVec<LayerId>,
}

impl OptimizationViews {
    /// Everything untouched: the default answer.
    pub fn untouched(subgraph: &SubgraphView<'_>) -> Self {
        Self {
            untouched: subgraph.layers.iter().map(|l| l.id).collect(),
            ..Self::default()
        }
    }
}
