//! The network section of a compiled network file: what is serialised (postcard), and the
//! checks that turn it back into a [`Network`] and its assignments. The section is made of
//! types of its own, not of the host's (whose fields may change): a field added to one of
//! these is a new container version, and the golden files in `golden/` prove that none was
//! added silently. The Backend API's types it holds (descriptors, tensor infos, versions,
//! options) are frozen by the API's own rule: a minor only appends variants. Everything read here is
//! untrusted: indices, ranges and counts are checked before use, and the network is rebuilt
//! through [`NetworkBuilder`], which infers every shape again.

use std::{ops::Range, sync::Arc};

use backplane_api::{
    ApiVersion, BackendOptions, ConstTensor, DataType, LayerDescriptor, LayerKind, RVec, TensorInfo,
};
use serde::{Deserialize, Serialize};

use super::container::ALIGN;
use crate::{
    graph::network::{Layer, Network, NetworkBuilder, SharedBytes},
    graph::optimizer::{Assignment, Boundary, Refusal, Strategy},
    onnx::{DeclaredTensor, Dim, ModelMetadata},
};

/// The network section.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct StoredNetwork {
    /// The host that wrote it (`backplane 0.1.0`).
    pub producer: String,
    /// Its Backend API version.
    pub api: ApiVersion,
    /// The model's metadata.
    pub metadata: StoredMetadata,
    /// The graph inputs and outputs as the session declared them (fixed shapes).
    pub inputs: Vec<StoredDeclared>,
    /// See `inputs`.
    pub outputs: Vec<StoredDeclared>,
    /// Every backend the network uses.
    pub backends: Vec<StoredBackend>,
    /// The optimised network, in order, each layer with its assignment.
    pub layers: Vec<StoredLayer>,
    /// The optimizer's notes.
    pub notes: Vec<String>,
    /// Backend options by backend id.
    pub backend_options: Vec<(String, BackendOptions)>,
    /// The backend preferences it was optimised for.
    pub preferences: Vec<String>,
    /// The optimizer's switches.
    pub no_fallback: bool,
    /// `(layer, backend)` pins.
    pub pins: Vec<(String, String)>,
    /// Fusion off.
    pub no_subgraph_optimization: bool,
    /// The network as given to the optimizer (no assignments), to optimise again.
    pub source: Vec<StoredLayer>,
}

/// A model's metadata as stored: the host's [`ModelMetadata`] may grow, this may not (a new
/// field here is a new container version).
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct StoredMetadata {
    pub producer_name: String,
    pub producer_version: String,
    pub domain: String,
    pub model_version: i64,
    pub doc_string: String,
    pub graph_name: String,
    pub graph_doc_string: String,
    pub custom: Vec<(String, String)>,
}

impl StoredMetadata {
    pub fn of(m: &ModelMetadata) -> Self {
        Self {
            producer_name: m.producer_name.clone(),
            producer_version: m.producer_version.clone(),
            domain: m.domain.clone(),
            model_version: m.model_version,
            doc_string: m.doc_string.clone(),
            graph_name: m.graph_name.clone(),
            graph_doc_string: m.graph_doc_string.clone(),
            custom: m.custom.clone(),
        }
    }

    pub fn metadata(self) -> ModelMetadata {
        ModelMetadata {
            producer_name: self.producer_name,
            producer_version: self.producer_version,
            domain: self.domain,
            model_version: self.model_version,
            doc_string: self.doc_string,
            graph_name: self.graph_name,
            graph_doc_string: self.graph_doc_string,
            custom: self.custom,
        }
    }
}

/// A graph input or output as stored (the host's [`DeclaredTensor`], frozen).
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct StoredDeclared {
    pub name: String,
    /// ONNX's element type name (`"float"`).
    pub element: String,
    pub data_type: Option<DataType>,
    pub dims: Option<Vec<StoredDim>>,
}

/// A dimension as stored (the host's [`Dim`], frozen). A compiled network's are all `Fixed`;
/// the other two keep the encoding of the files that could hold them.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum StoredDim {
    Fixed(u32),
    Named(String),
    Any,
}

impl StoredDeclared {
    /// `name`, of ONNX element type `element`, with `info`'s type and shape.
    pub fn fixed(name: &str, element: String, info: &TensorInfo) -> Self {
        Self {
            name: name.to_owned(),
            element,
            data_type: Some(info.data_type),
            dims: Some(info.shape.iter().map(|&v| StoredDim::Fixed(v)).collect()),
        }
    }

    /// `true` when it declares exactly `name` with `info`'s type and shape.
    pub fn is(&self, name: &str, info: &TensorInfo) -> bool {
        self.name == name
            && self.data_type == Some(info.data_type)
            && self.dims.as_ref().is_some_and(|dims| {
                dims.len() == info.shape.len()
                    && dims
                        .iter()
                        .zip(info.shape.iter())
                        .all(|(d, &v)| *d == StoredDim::Fixed(v))
            })
    }

    pub fn declared(self) -> DeclaredTensor {
        DeclaredTensor {
            name: self.name,
            element: self.element,
            data_type: self.data_type,
            dims: self.dims.map(|dims| {
                dims.into_iter()
                    .map(|d| match d {
                        StoredDim::Fixed(v) => Dim::Fixed(v),
                        StoredDim::Named(n) => Dim::Named(n),
                        StoredDim::Any => Dim::Any,
                    })
                    .collect()
            }),
        }
    }
}

/// A backend a compiled network uses, as it was when compiled.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct StoredBackend {
    /// Its id.
    pub id: String,
    /// The Backend API version it was built against.
    pub api: ApiVersion,
    /// Its release (plugin crate version, or the host's for a built-in), when known.
    pub release: Option<String>,
    /// The format version of its prepared workloads, when it prepared any.
    pub blob_version: Option<u32>,
    /// The file section holding its prepared workloads.
    pub blob_section: Option<u32>,
}

/// One layer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct StoredLayer {
    pub name: String,
    /// A Constant's descriptor has empty `data`: its bytes are `constant`.
    pub descriptor: LayerDescriptor,
    /// `(layer, slot)` of each input.
    pub inputs: Vec<(u32, u32)>,
    pub outputs: Vec<TensorInfo>,
    /// A Constant's bytes: offset and length in the constants section.
    pub constant: Option<(u64, u64)>,
    /// Where it runs and why (the optimised network's layers only).
    pub assignment: Option<StoredAssignment>,
    /// Its prepared workload: offset and length in its backend's blob section.
    pub blob: Option<(u64, u64)>,
}

/// An [`Assignment`], stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct StoredAssignment {
    pub backend: String,
    pub why: String,
    /// `(backend, reason)`.
    pub refusals: Vec<(String, String)>,
    /// `(name, what)`: the layers a fused layer replaced.
    pub replaced: Vec<(String, String)>,
    /// `(from, to, imported)`.
    pub boundary: Option<(String, String, bool)>,
    /// The debug handle: the original layers' names.
    pub origins: Vec<String>,
}

impl StoredAssignment {
    pub fn of(a: &Assignment) -> Self {
        Self {
            backend: a.backend.clone(),
            why: a.why.clone(),
            refusals: a
                .refusals
                .iter()
                .map(|r| (r.backend.clone(), r.reason.clone()))
                .collect(),
            replaced: a.replaced.clone(),
            boundary: a
                .boundary
                .as_ref()
                .map(|b| (b.from.clone(), b.to.clone(), b.strategy == Strategy::Import)),
            origins: a.origins.clone(),
        }
    }

    pub fn assignment(&self) -> Assignment {
        Assignment {
            backend: self.backend.clone(),
            why: self.why.clone(),
            refusals: self
                .refusals
                .iter()
                .map(|(backend, reason)| Refusal {
                    backend: backend.clone(),
                    reason: reason.clone(),
                })
                .collect(),
            replaced: self.replaced.clone(),
            boundary: self.boundary.as_ref().map(|(from, to, import)| Boundary {
                from: from.clone(),
                to: to.clone(),
                strategy: if *import {
                    Strategy::Import
                } else {
                    Strategy::Copy
                },
            }),
            origins: self.origins.clone(),
        }
    }
}

/// A layer as stored: a Constant's bytes are left out of its descriptor (`constant` says
/// where they are).
pub(super) fn store_layer(layer: &Layer) -> StoredLayer {
    let descriptor = match &*layer.descriptor {
        LayerDescriptor::Constant(c) => LayerDescriptor::Constant(ConstTensor {
            info: c.info.clone(),
            data: RVec::new(),
        }),
        d => d.clone(),
    };
    StoredLayer {
        name: layer.name.clone(),
        descriptor,
        inputs: layer
            .inputs
            .iter()
            .map(|t| (t.layer as u32, t.slot as u32))
            .collect(),
        outputs: layer.outputs.clone(),
        constant: None,
        assignment: None,
        blob: None,
    }
}

/// `offset, length` as a range inside a section of `section_len` bytes, aligned.
pub(super) fn range_in(
    (offset, length): (u64, u64),
    section_len: usize,
) -> Result<Range<usize>, String> {
    let start = usize::try_from(offset).map_err(|_| format!("offset {offset} is too large"))?;
    let len = usize::try_from(length).map_err(|_| format!("length {length} is too large"))?;
    let end = start
        .checked_add(len)
        .filter(|&e| e <= section_len)
        .ok_or_else(|| {
            format!("bytes {offset}+{length} are outside their section ({section_len} bytes)")
        })?;
    if start % ALIGN != 0 {
        return Err(format!("offset {offset} is not a multiple of {ALIGN}"));
    }
    Ok(start..end)
}

/// What the network builder copies of `t` when a layer reads it: the tensor, its dimensions
/// and its per-axis scales.
fn copy_size(t: &TensorInfo) -> usize {
    let scales = t
        .quantization
        .as_ref()
        .into_option()
        .and_then(|q| q.per_axis.as_ref().into_option())
        .map_or(0, |p| p.scales.len());
    1 + t.shape.len() + scales
}

/// Rebuilds a network from its stored layers: inputs must name earlier layers, a Constant's
/// bytes must be a range of the constants section (`constants`, in `file`) of exactly its
/// tensor's size, the builder checks every layer (shape inference) as it would a network
/// built by hand, and the tensors the layers read are at most one tensor, dimension or scale
/// per byte of `file`.
pub(super) fn rebuild(
    layers: &[StoredLayer],
    file: &Arc<dyn AsRef<[u8]> + Send + Sync>,
    constants: &Range<usize>,
) -> Result<Network, String> {
    let mut builder = NetworkBuilder::new();
    // The builder copies each tensor a layer reads (for shape inference; an Output's into
    // itself), with its dimensions and scales: one tensor of many dimensions or scales, read
    // by many layers that store little, would ask for memory growing with the square of the
    // file's size. At most one tensor, dimension or scale copied per byte of the file: far
    // more than any network reads.
    let budget = (**file).as_ref().len();
    let mut copied = 0usize;
    for (i, s) in layers.iter().enumerate() {
        let what = |reason: String| format!("layer {i} ({:?}): {reason}", s.name);
        let mut inputs = Vec::with_capacity(s.inputs.len());
        for &(layer, slot) in &s.inputs {
            let t = (layer as usize)
                .lt(&i)
                .then(|| builder.tensor(layer as usize, slot as usize))
                .flatten()
                .ok_or_else(|| what(format!("input ({layer}, {slot}) is not an earlier tensor")))?;
            copied = copied.saturating_add(builder.tensor_info(t).map_or(0, copy_size));
            inputs.push(t);
        }
        if copied > budget {
            return Err(what(format!(
                "the layers up to this one read tensors of {copied} dimensions and scales in \
                 all, more than the file's {budget} bytes justify"
            )));
        }
        // No tensor larger than an int32 index reaches (the limit a session puts on the
        // shapes it is given): a small file cannot ask for memory beyond that.
        if let Some(big) = s
            .outputs
            .iter()
            .find(|t| t.num_elements().is_none_or(|n| n > i32::MAX as usize))
        {
            return Err(what(format!(
                "a tensor of shape {:?} is too large",
                big.shape
            )));
        }
        let kind = s.descriptor.kind();
        let arity_ok = match kind {
            LayerKind::Output => s.inputs.len() == 1,
            LayerKind::Input | LayerKind::Constant => s.inputs.is_empty() && s.outputs.len() == 1,
            _ => !s.outputs.is_empty(),
        };
        if !arity_ok {
            return Err(what(format!(
                "a {kind} layer with {} inputs and {} outputs",
                s.inputs.len(),
                s.outputs.len()
            )));
        }
        let shared = match (&s.descriptor, s.constant) {
            (LayerDescriptor::Constant(c), Some(at)) => {
                let range = range_in(at, constants.len()).map_err(what)?;
                if Some(range.len()) != c.info.num_bytes() || !c.data.is_empty() {
                    return Err(what(format!(
                        "{} bytes stored for a constant of {:?} bytes",
                        range.len(),
                        c.info.num_bytes()
                    )));
                }
                let absolute = constants.start + range.start..constants.start + range.end;
                Some(
                    SharedBytes::new(Arc::clone(file), absolute)
                        .ok_or_else(|| what("constant out of the file".to_owned()))?,
                )
            }
            (LayerDescriptor::Constant(_), None) => {
                return Err(what("a constant without bytes".to_owned()));
            }
            (_, None) => None,
            (_, Some(_)) => {
                return Err(what(
                    "bytes stored for a layer that is not a constant".to_owned(),
                ));
            }
        };
        let layer = Layer {
            name: s.name.clone(),
            descriptor: Arc::new(s.descriptor.clone()),
            inputs: Vec::new(),
            outputs: s.outputs.clone(),
            shared,
        };
        let out = builder
            .re_add(&layer, &inputs)
            .map_err(|e| what(e.to_string()))?;
        if kind != LayerKind::Output && builder.tensor_info(out) != s.outputs.first() {
            return Err(what(format!(
                "its output is {:?}, the file says {:?}",
                builder.tensor_info(out),
                s.outputs.first()
            )));
        }
    }
    builder.build().map_err(|e| e.to_string())
}
