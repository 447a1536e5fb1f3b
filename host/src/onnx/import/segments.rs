//! Segments: a model whose shapes depend on values computed at run time, imported one static
//! network at a time (docs/ARCHITECTURE.md, "Dynamic networks").
//!
//! The importer works through a queue of nodes ([`Pending`]). A node that needs the value of a
//! tensor computed at run time (a `Reshape` by a computed shape, an `If` on a computed
//! condition) ends the segment when the import is dynamic ([`Model::instantiate_dynamic`]):
//! the network built so far gets, as outputs, every tensor a later node or the graph's outputs
//! read, and the importer's state is kept as a [`Resume`]. After the segment ran, the host
//! gives the [`Resume`] the values it computed ([`Resume::resume`]): the values the node needed
//! become constants, so the node folds (or inlines its branch) exactly as a value known at
//! import does, and the other tensors become inputs of the next segment. A model without such
//! a node is one segment, imported as before.
//!
//! [`Model::instantiate_dynamic`]: super::Model::instantiate_dynamic

use std::{
    collections::{HashSet, VecDeque},
    sync::Arc,
};

use backplane_api::{ConstTensor, TensorInfo};

use super::{
    ImportError, Importer, Node, NodeError, UnsupportedNode, Value,
    constants::const_tensor_value,
    queue::{Pending, Step, subgraphs},
};
use crate::{
    graph::network::{Network, NetworkBuilder},
    memory::budget::MemoryBudget,
    onnx::proto::GraphProto,
};

/// The largest number of elements of a value that decides a shape at run time (it becomes a
/// constant of the next segment, and part of the key its plan is cached by).
pub const MAX_DECIDING_ELEMENTS: usize = 1 << 16;

/// A tensor the next segment reads: its ONNX name there, the key of the value the host
/// keeps (a graph input's name, or the name a segment output it under), and its shape and
/// type when the segment was cut.
#[derive(Debug, Clone)]
struct Carried {
    name: String,
    key: String,
    info: TensorInfo,
}

/// One static network of a model, with how its inputs and outputs map to the values the host
/// keeps between segments.
#[derive(Debug)]
pub enum Instance {
    /// The last segment (or the whole model): its outputs are the graph's outputs.
    Complete {
        /// The network.
        network: Network,
        /// Its inputs in order: (input layer name, key of the value it reads).
        inputs: Vec<(String, String)>,
    },
    /// A segment that ends at a node needing values computed at run time.
    Cut {
        /// The network.
        network: Network,
        /// Its inputs in order: (input layer name, key of the value it reads).
        inputs: Vec<(String, String)>,
        /// Its outputs: (output layer name, key the host keeps the value under).
        outputs: Vec<(String, String)>,
        /// What follows, once the values are known.
        next: Box<Resume>,
    },
}

/// The importer's state where a segment ended: what [`Resume::resume`] continues from.
pub struct Resume {
    /// The importer's values and names, its builder empty.
    importer: Importer,
    /// The nodes left, the one that ended the segment first.
    queue: VecDeque<Pending>,
    /// The tensors the rest reads.
    carried: Vec<Carried>,
    /// The values the first node needs (a subset of `carried`'s names).
    deciding: Vec<String>,
    /// The node that ended the segment, and its operator (for messages).
    at: (String, String),
    graph_outputs: Arc<Vec<String>>,
}

impl std::fmt::Debug for Resume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resume")
            .field("at", &self.at)
            .field("deciding", &self.deciding)
            .field("carried", &self.carried)
            .field("nodes_left", &self.queue.len())
            .finish_non_exhaustive()
    }
}

impl Resume {
    /// The node that ended the segment: (its name, its operator).
    pub fn at(&self) -> (&str, &str) {
        (&self.at.0, &self.at.1)
    }

    /// What decides the next segment: every carried tensor's type and shape, and the bytes
    /// of each deciding value. Two runs with the same key get the same next segment.
    ///
    /// # Errors
    /// A value `values` does not hold.
    pub fn key<'a>(
        &self,
        values: impl Fn(&str) -> Option<(&'a TensorInfo, &'a [u8])>,
    ) -> Result<Vec<u8>, ImportError> {
        let mut key = Vec::new();
        for c in &self.carried {
            let (info, bytes) = values(&c.key).ok_or_else(|| self.lost(&c.key))?;
            key.extend_from_slice(&(info.data_type as u32).to_le_bytes());
            key.extend_from_slice(&(info.shape.len() as u32).to_le_bytes());
            for d in info.shape.iter() {
                key.extend_from_slice(&d.to_le_bytes());
            }
            if self.deciding.contains(&c.name) {
                key.extend_from_slice(bytes);
            }
        }
        Ok(key)
    }

    fn lost(&self, key: &str) -> ImportError {
        ImportError::InvalidNode {
            node: self.at.0.clone(),
            op: self.at.1.clone(),
            reason: format!("the value {key} computed before this node is not available"),
        }
    }

    /// The next segment, with the values the segments so far computed (`values` by key):
    /// the deciding ones become constants, the other tensors inputs of the network. What the
    /// importer folds and copies for it is charged to `memory`, the budget of the load it is
    /// made for (as [`ImportOptions::memory`](super::ImportOptions::memory)).
    ///
    /// # Errors
    /// As [`Model::instantiate`](super::Model::instantiate), for the next segment.
    pub fn resume<'a>(
        &self,
        values: impl Fn(&str) -> Option<(&'a TensorInfo, &'a [u8])>,
        memory: Option<Arc<MemoryBudget>>,
    ) -> Result<Instance, ImportError> {
        let mut im = self.importer.fork();
        im.memory = memory;
        for c in &self.carried {
            let (info, bytes) = values(&c.key).ok_or_else(|| self.lost(&c.key))?;
            if self.deciding.contains(&c.name) {
                let constant = ConstTensor {
                    info: TensorInfo::new(&info.shape, info.data_type),
                    data: bytes.to_vec().into(),
                };
                let v = const_tensor_value(&constant, &mut im.budget).map_err(|reason| {
                    ImportError::InvalidNode {
                        node: self.at.0.clone(),
                        op: self.at.1.clone(),
                        reason: format!("the value {} computed at run time: {reason}", c.name),
                    }
                })?;
                if info.data_type.is_integer() || info.data_type == backplane_api::DataType::Boolean
                {
                    im.local_types
                        .insert(c.name.clone(), info.data_type.onnx_code());
                }
                im.values.insert(c.name.clone(), v);
            } else {
                let layer = im.unique(&c.name);
                let info = TensorInfo::new(&info.shape, info.data_type);
                let t = im.builder.add_input(&layer, info)?;
                im.input_keys.insert(t, c.key.clone());
                im.segment_inputs.push((layer, c.key.clone()));
                im.values.insert(c.name.clone(), Value::Tensor(t));
            }
        }
        im.run(self.queue.clone(), self.graph_outputs.clone())
    }
}

impl Importer {
    /// A copy of the importer's state with an empty network: what the next segment starts
    /// from. Tensors of this segment's network are left out (they are not the next one's).
    pub(super) fn fork(&self) -> Importer {
        let mut next = Importer::empty(
            self.opset,
            self.budget,
            &self.shared,
            &self.elem_types,
            &self.exact,
            &self.q_targets,
            self.dynamic,
        );
        next.values = self
            .values
            .iter()
            .filter(|(_, v)| !matches!(v, Value::Tensor(_)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        // Not the memory budget: it is the first load's, and a later segment is made at a
        // later run, for a load of its own (`resume` takes that one).
        next.used = self.used.clone();
        next.serial = self.serial;
        next.local_types = self.local_types.clone();
        next
    }

    /// An importer with no values, names or layers yet, sharing a model's constants.
    pub(super) fn empty(
        opset: i64,
        budget: usize,
        shared: &super::SharedConstants,
        elem_types: &Arc<std::collections::HashMap<String, i32>>,
        exact: &super::ExactValues,
        q_targets: &Arc<super::quantized::QScan>,
        dynamic: bool,
    ) -> Importer {
        Importer {
            opset,
            builder: NetworkBuilder::new(),
            values: Default::default(),
            materialised: Default::default(),
            used: Default::default(),
            budget,
            memory: None,
            folded: Default::default(),
            unsupported: Vec::new(),
            shared: shared.clone(),
            elem_types: elem_types.clone(),
            exact: exact.clone(),
            q_targets: q_targets.clone(),
            q_out: None,
            q_target_override: None,
            serial: 0,
            local_types: Default::default(),
            dynamic,
            input_keys: Default::default(),
            segment_inputs: Vec::new(),
        }
    }

    /// Imports the queued nodes, then the graph's outputs: the whole model (or what is left
    /// of it), or a segment that ends at a node needing run-time values.
    pub(super) fn run(
        mut self,
        mut queue: VecDeque<Pending>,
        graph_outputs: Arc<Vec<String>>,
    ) -> Result<Instance, ImportError> {
        while let Some(p) = queue.pop_front() {
            let n = Node {
                proto: &p.proto,
                name: p.name.clone(),
            };
            let step = match &p.state {
                None => self.node(&n)?,
                Some(state) => self.continue_node(&n, state)?,
            };
            match step {
                Step::Done => {}
                Step::Expand(nodes) => {
                    for n in nodes.into_iter().rev() {
                        queue.push_front(n);
                    }
                }
                Step::Cut(deciding) => {
                    if !self.unsupported.is_empty() {
                        return Err(ImportError::Unsupported {
                            nodes: self.unsupported,
                        });
                    }
                    queue.push_front(p);
                    return self.cut(queue, deciding, graph_outputs);
                }
            }
        }
        if !self.unsupported.is_empty() {
            return Err(ImportError::Unsupported {
                nodes: self.unsupported,
            });
        }
        self.graph_outputs(&graph_outputs)?;
        Ok(Instance::Complete {
            network: self.builder.build()?,
            inputs: self.segment_inputs,
        })
    }

    /// Adds an `Output` layer for each graph output (a constant becomes a `Constant` layer).
    fn graph_outputs(&mut self, names: &[String]) -> Result<(), ImportError> {
        for name in names {
            let v = self
                .values
                .get(name)
                .cloned()
                .ok_or_else(|| ImportError::MissingInput {
                    node: "<graph outputs>".to_owned(),
                    input: name.clone(),
                })?;
            let unsupported = |missing: String| ImportError::Unsupported {
                nodes: vec![UnsupportedNode {
                    node: name.clone(),
                    op: "Output".to_owned(),
                    missing,
                }],
            };
            let t = match v {
                Value::Tensor(t) => t,
                Value::F32(_) | Value::I64(_) | Value::Quantized(_) | Value::Dynamic(_) => {
                    match self.tensor(name, &v) {
                        Ok(t) => t,
                        Err(NodeError::Network(e)) => return Err(e.into()),
                        Err(NodeError::Invalid(reason)) => {
                            return Err(ImportError::InvalidNode {
                                node: name.clone(),
                                op: "Output".to_owned(),
                                reason,
                            });
                        }
                        Err(e) => return Err(unsupported(e.message())),
                    }
                }
                Value::Unusable(r) => return Err(unsupported(r)),
                Value::Skipped => {
                    return Err(unsupported("produced by an unsupported node".into()));
                }
            };
            self.builder.add_output(name, t)?;
        }
        Ok(())
    }

    /// Ends the segment before the queue's first node, which needs `deciding`.
    fn cut(
        mut self,
        queue: VecDeque<Pending>,
        deciding: Vec<String>,
        graph_outputs: Arc<Vec<String>>,
    ) -> Result<Instance, ImportError> {
        let (node, op) = queue
            .front()
            .map(|p| (p.name.clone(), p.proto.op_type.clone()))
            .unwrap_or_default();
        let unsupported = |missing: String| ImportError::Unsupported {
            nodes: vec![UnsupportedNode {
                node: node.clone(),
                op: op.clone(),
                missing,
            }],
        };
        let mut carried: Vec<Carried> = Vec::new();
        let mut outputs: Vec<(String, String)> = Vec::new();
        let mut produced: std::collections::HashMap<crate::graph::network::TensorRef, String> =
            Default::default();
        for name in live_names(&queue, &graph_outputs) {
            match self.values.get(&name) {
                Some(Value::Tensor(t)) => {
                    let t = *t;
                    let info = self
                        .builder
                        .tensor_info(t)
                        .cloned()
                        .ok_or_else(|| unsupported(format!("{name} is not a tensor")))?;
                    let key = if let Some(key) = self.input_keys.get(&t).or(produced.get(&t)) {
                        key.clone()
                    } else {
                        let layer = self.unique(&name);
                        self.builder.add_output(&layer, t)?;
                        outputs.push((layer, name.clone()));
                        produced.insert(t, name.clone());
                        name.clone()
                    };
                    carried.push(Carried { name, key, info });
                }
                Some(Value::Quantized(_) | Value::Dynamic(_)) => {
                    return Err(unsupported(format!(
                        "the quantized value {name} is read after a value computed at run time \
                         decides a shape (not supported yet)"
                    )));
                }
                _ => {}
            }
        }
        for name in &deciding {
            let Some(c) = carried.iter().find(|c| &c.name == name) else {
                return Err(unsupported(format!(
                    "{name} is needed as a constant and is not a tensor of the network"
                )));
            };
            let elements = c.info.num_elements().unwrap_or(usize::MAX);
            if elements > MAX_DECIDING_ELEMENTS {
                return Err(unsupported(format!(
                    "{name} ({}) decides a shape at run time; at most {MAX_DECIDING_ELEMENTS} \
                     elements can",
                    c.info
                )));
            }
        }
        if outputs.is_empty() {
            // Nothing computed here is read later (the deciding values are inputs): the
            // segment still needs an output to be a network.
            if let Some(c) = carried.first()
                && let Some(Value::Tensor(t)) = self.values.get(&c.name).cloned()
            {
                let layer = self.unique(&c.name);
                self.builder.add_output(&layer, t)?;
                outputs.push((layer, c.key.clone()));
            }
        }
        let importer = self.fork();
        let network = self.builder.build()?;
        Ok(Instance::Cut {
            network,
            inputs: self.segment_inputs,
            outputs,
            next: Box::new(Resume {
                importer,
                queue,
                carried,
                deciding,
                at: (node, op),
                graph_outputs,
            }),
        })
    }
}

/// The names the queued nodes read (their inputs, and the outer-scope names their
/// sub-graphs read), then the graph's outputs; each once, in that order.
fn live_names(queue: &VecDeque<Pending>, graph_outputs: &[String]) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut names = Vec::new();
    let mut add = |name: &str| {
        if !name.is_empty() && seen.insert(name.to_owned()) {
            names.push(name.to_owned());
        }
    };
    for p in queue {
        for i in &p.proto.input {
            add(i);
        }
        if let Some(state) = &p.state {
            for name in state.reads() {
                add(name);
            }
        }
        for g in subgraphs(&p.proto) {
            for name in outer_names(g) {
                add(&name);
            }
        }
    }
    for o in graph_outputs {
        add(o);
    }
    names
}

/// The names a graph reads from outer scopes: read by its nodes (or its nested graphs), or
/// named as its outputs, and not defined in it.
pub(super) fn outer_names(g: &GraphProto) -> Vec<String> {
    let mut defined: HashSet<&str> = g
        .input
        .iter()
        .map(|i| i.name.as_str())
        .chain(g.initializer.iter().map(|t| t.name.as_str()))
        .collect();
    let mut names = Vec::new();
    for n in &g.node {
        for i in n.input.iter().filter(|i| !i.is_empty()) {
            if !defined.contains(i.as_str()) {
                names.push(i.clone());
            }
        }
        for inner in subgraphs(n) {
            names.extend(
                outer_names(inner)
                    .into_iter()
                    .filter(|i| !defined.contains(i.as_str())),
            );
        }
        defined.extend(n.output.iter().map(String::as_str));
    }
    names.extend(
        g.output
            .iter()
            .map(|o| o.name.clone())
            .filter(|o| !defined.contains(o.as_str())),
    );
    names
}
