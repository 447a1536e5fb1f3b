//! Control flow: `If`, whose branch is chosen by a condition. A condition known at import
//! (or computed by the segments before it, [`segments`](super::segments)) picks the branch,
//! and the branch's nodes are imported in the `If`'s place, their names prefixed by the
//! `If`'s; a condition computed at run time ends a segment first.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use super::{
    Importer, NResult, Node, NodeError, Value, attributes::attr_graph, constants::tensor_value,
    invalid, segments::Pending, unsupported,
};
use crate::onnx::proto::{GraphProto, NodeProto};

impl Importer {
    /// A control node, replaced by the nodes it stands for.
    pub(super) fn control(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        match n.op() {
            "If" => self.if_node(n),
            op => Err(unsupported(format!("control operator {op}"))),
        }
    }

    /// `If`: the chosen branch's nodes, then an `Identity` per output from the branch's.
    fn if_node(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let (name, cond) = self.req(n, 0)?;
        let cond = match cond {
            Value::I64(c) => c.data.clone(),
            Value::Tensor(_) => {
                return Err(NodeError::NeedsValue {
                    message: format!(
                        "If's condition ({name}) is computed at run time (a session runs it)"
                    ),
                    names: vec![name],
                });
            }
            Value::F32(_) => return Err(invalid(format!("the condition {name} is not a bool"))),
            _ => {
                return Err(unsupported(format!(
                    "the condition {name} is not available"
                )));
            }
        };
        let [cond] = cond.as_slice() else {
            return Err(invalid(format!(
                "the condition {name} has {} elements, not one",
                cond.len()
            )));
        };
        let attribute = if *cond != 0 {
            "then_branch"
        } else {
            "else_branch"
        };
        let branch = attr_graph(n, attribute)?
            .ok_or_else(|| invalid(format!("the attribute {attribute} is missing")))?;
        if branch.output.len() != n.proto.output.len() {
            return Err(invalid(format!(
                "{attribute} has {} outputs, the node {}",
                branch.output.len(),
                n.proto.output.len()
            )));
        }
        let (mut nodes, map) = self.inline(n, branch)?;
        for (k, (out, from)) in n.proto.output.iter().zip(&branch.output).enumerate() {
            if out.is_empty() {
                continue;
            }
            let from = map.get(&from.name).unwrap_or(&from.name).clone();
            nodes.push(Pending {
                proto: Arc::new(NodeProto {
                    input: vec![from],
                    output: vec![out.clone()],
                    op_type: "Identity".to_owned(),
                    ..Default::default()
                }),
                name: format!("{}/output_{k}", n.name),
            });
        }
        Ok(nodes)
    }

    /// The nodes of `graph` (a sub-graph of `n` without inputs) as nodes of the model: every
    /// value it defines renamed `<n>/<name>` (unique), its initializers stored as values.
    /// Returns the nodes and the renaming.
    fn inline(
        &mut self,
        n: &Node<'_>,
        graph: &GraphProto,
    ) -> NResult<(Vec<Pending>, HashMap<String, String>)> {
        if !graph.input.is_empty() {
            return Err(invalid("a branch of If takes no inputs"));
        }
        let mut map: HashMap<String, String> = HashMap::new();
        let defined = graph
            .initializer
            .iter()
            .map(|t| &t.name)
            .chain(graph.node.iter().flat_map(|n| n.output.iter()))
            .filter(|s| !s.is_empty());
        for name in defined {
            let mut new = format!("{}/{name}", n.name);
            let mut k = 1;
            while self.values.contains_key(&new) || map.values().any(|v| *v == new) {
                new = format!("{}/{name}_{k}", n.name);
                k += 1;
            }
            map.insert(name.clone(), new);
        }
        for t in &graph.initializer {
            let v = tensor_value(t, &mut self.budget).map_err(invalid)?;
            let new = map[&t.name].clone();
            self.local_types.insert(new.clone(), t.data_type);
            self.values.insert(new, v);
        }
        let mut nodes = Vec::with_capacity(graph.node.len() + 1);
        for (k, inner) in graph.node.iter().enumerate() {
            let mut proto = inner.clone();
            for name in proto.input.iter_mut().chain(proto.output.iter_mut()) {
                if let Some(new) = map.get(name.as_str()) {
                    name.clone_from(new);
                }
            }
            for a in &mut proto.attribute {
                for g in a.g.as_deref_mut().into_iter().chain(a.graphs.iter_mut()) {
                    rename_outer(g, &map);
                }
            }
            let local = if inner.name.is_empty() {
                format!("{}_{k}", inner.op_type)
            } else {
                inner.name.clone()
            };
            nodes.push(Pending {
                proto: Arc::new(proto),
                name: format!("{}/{local}", n.name),
            });
        }
        Ok((nodes, map))
    }
}

/// Renames, in a nested sub-graph, the outer-scope names it reads.
fn rename_outer(g: &mut GraphProto, map: &HashMap<String, String>) {
    let mut defined: HashSet<String> = g
        .input
        .iter()
        .map(|i| i.name.clone())
        .chain(g.initializer.iter().map(|t| t.name.clone()))
        .collect();
    for node in &mut g.node {
        for i in &mut node.input {
            if !defined.contains(i.as_str())
                && let Some(new) = map.get(i.as_str())
            {
                i.clone_from(new);
            }
        }
        let inner: HashMap<String, String> = map
            .iter()
            .filter(|(k, _)| !defined.contains(k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for a in &mut node.attribute {
            for sub in a.g.as_deref_mut().into_iter().chain(a.graphs.iter_mut()) {
                rename_outer(sub, &inner);
            }
        }
        defined.extend(node.output.iter().cloned());
    }
    for o in &mut g.output {
        if !defined.contains(o.name.as_str())
            && let Some(new) = map.get(o.name.as_str())
        {
            o.name.clone_from(new);
        }
    }
}
