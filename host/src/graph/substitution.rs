//! The `optimize_subgraph` round: each backend gets its maximal connected subgraphs; what it
//! returns is validated here before anything is applied.
//!
//! A substitution is accepted only if it replaces a connected, convex set of the subgraph's
//! layers (no path leaves the set and comes back, so the result stays acyclic) that no other
//! substitution took, with a `PreCompiled` layer of that backend whose inputs are exactly the
//! tensors the set reads from outside and whose one output is the tensor read outside the set,
//! and which the backend then says it supports. Anything else is refused with a warning and
//! treated as untouched. Failed layers are handed back for re-assignment.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use backplane_api::{
    BackendOptions, LayerDescriptor, LayerKind, OptimizationViews, RVec, SubgraphLayer,
    SubgraphTensor, SubgraphView, Substitution, TensorInfo,
};

use crate::{
    graph::network::{Network, NetworkBuilder, TensorRef},
    plugins::registry::BackendRegistry,
};

/// An accepted substitution, in network terms.
#[derive(Debug, Clone)]
pub struct Accepted {
    /// The backend.
    pub backend: String,
    /// Replaced layer indices, ascending.
    pub replaced: Vec<usize>,
    /// The new layer's descriptor.
    pub descriptor: LayerDescriptor,
    /// Its name.
    pub name: String,
    /// Producers of its inputs, in slot order.
    pub inputs: Vec<usize>,
    /// The replaced layer whose output it produces.
    pub output: usize,
}

/// What the round produced.
#[derive(Debug, Default)]
pub struct RoundResult {
    /// Accepted substitutions.
    pub accepted: Vec<Accepted>,
    /// `(layer index, backend)` the backend returned as failed.
    pub failed: Vec<(usize, String)>,
    /// Why substitutions were refused (for the explanation).
    pub refused: Vec<String>,
}

fn is_bound(network: &Network, i: usize) -> bool {
    matches!(
        network.layers()[i].kind(),
        LayerKind::Input | LayerKind::Output
    )
}

/// Maximal weakly connected sets of layers on `backend` (Input and Output layers excluded).
fn subgraphs(network: &Network, backends: &[String], backend: &str) -> Vec<BTreeSet<usize>> {
    let n = network.layers().len();
    let mine = |i: usize| backends[i] == backend && !is_bound(network, i);
    let mut parent: Vec<usize> = (0..n).collect();
    fn find(p: &mut [usize], x: usize) -> usize {
        let mut r = x;
        while p[r] != r {
            r = p[r];
        }
        p[x] = r;
        r
    }
    for (i, l) in network.layers().iter().enumerate() {
        for t in &l.inputs {
            if mine(i) && mine(t.layer) {
                let (a, b) = (find(&mut parent, i), find(&mut parent, t.layer));
                parent[a] = b;
            }
        }
    }
    let mut groups: HashMap<usize, BTreeSet<usize>> = HashMap::new();
    for i in (0..n).filter(|&i| mine(i)) {
        let root = find(&mut parent, i);
        groups.entry(root).or_default().insert(i);
    }
    let mut v: Vec<_> = groups.into_values().collect();
    v.sort_by_key(|g| *g.iter().next().expect("non-empty"));
    v
}

fn view<'a>(network: &'a Network, set: &BTreeSet<usize>) -> SubgraphView<'a> {
    let layers = network.layers();
    let mut tensors = BTreeSet::new();
    let (mut inputs, mut outputs) = (BTreeSet::new(), BTreeSet::new());
    for &i in set {
        tensors.insert(i);
        for t in &layers[i].inputs {
            tensors.insert(t.layer);
            if !set.contains(&t.layer) {
                inputs.insert(t.layer);
            }
        }
        if network
            .consumers(network.output_of(i))
            .any(|(c, _)| !set.contains(&c))
        {
            outputs.insert(i);
        }
    }
    let as_id = |i: &usize| *i as u32;
    SubgraphView {
        layers: set
            .iter()
            .map(|&i| SubgraphLayer {
                id: i as u32,
                name: layers[i].name.as_str().into(),
                descriptor: (*layers[i].descriptor).clone(),
                inputs: layers[i].inputs.iter().map(|t| t.layer as u32).collect(),
                outputs: RVec::from(vec![i as u32]),
            })
            .collect(),
        tensors: tensors
            .iter()
            .map(|&i| SubgraphTensor {
                id: i as u32,
                info: layers[i].outputs[0].clone(),
                value: layers[i].constant_bytes().map(Into::into).into(),
            })
            .collect(),
        inputs: inputs.iter().map(as_id).collect(),
        outputs: outputs.iter().map(as_id).collect(),
    }
}

/// Every layer reachable from `from` (not counting `from` itself unless a path returns to
/// it): along the tensors' direction (`forward`), or against it.
fn reaches(network: &Network, from: &BTreeSet<usize>, forward: bool) -> BTreeSet<usize> {
    let layers = network.layers();
    // Each layer's neighbours in the direction of the walk, made once: the consumers of a
    // layer are found in one pass over every layer's inputs.
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); layers.len()];
    for (c, l) in layers.iter().enumerate() {
        for t in &l.inputs {
            if forward {
                next[t.layer].push(c);
            } else {
                next[c].push(t.layer);
            }
        }
    }
    let mut seen: BTreeSet<usize> = BTreeSet::new();
    let mut stack: Vec<usize> = from.iter().copied().collect();
    while let Some(x) = stack.pop() {
        for &y in &next[x] {
            if seen.insert(y) {
                stack.push(y);
            }
        }
    }
    seen
}

fn validate(
    network: &Network,
    judge: &dyn SubgraphJudge,
    backend: &str,
    set: &BTreeSet<usize>,
    taken: &BTreeSet<usize>,
    s: &Substitution,
) -> Result<Accepted, String> {
    let layers = network.layers();
    let replaced: BTreeSet<usize> = s.replaced.iter().map(|&i| i as usize).collect();
    if replaced.is_empty() || replaced.len() != s.replaced.len() {
        return Err("replaces no layer, or a layer twice".into());
    }
    if let Some(i) = replaced.iter().find(|i| !set.contains(i)) {
        return Err(format!("layer id {i} is not in the subgraph"));
    }
    if let Some(i) = replaced.iter().find(|i| taken.contains(i)) {
        return Err(format!(
            "layer {} is already replaced by another substitution",
            layers[*i].name
        ));
    }
    // Connected.
    let first = *replaced.iter().next().expect("non-empty");
    let mut reached = BTreeSet::from([first]);
    let mut stack = vec![first];
    while let Some(x) = stack.pop() {
        for &y in &replaced {
            let linked = layers[y].inputs.iter().any(|t| t.layer == x)
                || layers[x].inputs.iter().any(|t| t.layer == y);
            if linked && reached.insert(y) {
                stack.push(y);
            }
        }
    }
    if reached.len() != replaced.len() {
        return Err("the replaced layers are not connected".into());
    }
    // Convex: nothing outside lies on a path from the set back into it.
    let down = reaches(network, &replaced, true);
    let up = reaches(network, &replaced, false);
    if let Some(i) = down
        .iter()
        .find(|i| !replaced.contains(i) && up.contains(i))
    {
        return Err(format!(
            "layer {} lies on a path that leaves and re-enters the replaced layers",
            layers[*i].name
        ));
    }
    // Inputs: exactly the tensors read from outside.
    let mut external: Vec<usize> = Vec::new();
    for &i in &replaced {
        for t in &layers[i].inputs {
            if !replaced.contains(&t.layer) && !external.contains(&t.layer) {
                external.push(t.layer);
            }
        }
    }
    let given: Vec<usize> = s.replacement.inputs.iter().map(|&t| t as usize).collect();
    let mut a = given.clone();
    let mut b = external.clone();
    a.sort_unstable();
    b.sort_unstable();
    if a != b || given.len() != external.len() {
        return Err(format!(
            "its inputs {given:?} are not the tensors the replaced layers read from outside {external:?}"
        ));
    }
    // One output: the tensor read outside.
    let read_outside: Vec<usize> = replaced
        .iter()
        .copied()
        .filter(|&i| {
            layers
                .iter()
                .enumerate()
                .any(|(c, l)| !replaced.contains(&c) && l.inputs.iter().any(|t| t.layer == i))
        })
        .collect();
    let outs: Vec<usize> = s.replacement.outputs.iter().map(|&t| t as usize).collect();
    if read_outside.len() != 1 || outs != read_outside {
        return Err(format!(
            "its outputs {outs:?} must be the one tensor read outside the replaced layers {read_outside:?}"
        ));
    }
    let LayerDescriptor::PreCompiled(p) = &s.replacement.descriptor else {
        return Err(format!(
            "the replacement is a {}, not a PreCompiled layer",
            s.replacement.descriptor.kind()
        ));
    };
    if p.backend.as_str() != backend {
        return Err(format!(
            "the replacement belongs to backend {}, not {backend}",
            p.backend
        ));
    }
    let infos: Vec<TensorInfo> = given
        .iter()
        .map(|&i| layers[i].outputs[0].clone())
        .collect();
    let out_info = layers[outs[0]].outputs[0].clone();
    judge
        .supports(
            backend,
            &s.replacement.descriptor,
            &infos,
            std::slice::from_ref(&out_info),
        )
        .map_err(|r| format!("the backend does not support its own replacement: {r}"))?;
    Ok(Accepted {
        backend: backend.to_owned(),
        replaced: replaced.into_iter().collect(),
        descriptor: s.replacement.descriptor.clone(),
        name: s.replacement.name.to_string(),
        inputs: given,
        output: outs[0],
    })
}

/// Why a backend's `optimize_subgraph` gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoAnswer {
    /// The error, for the explanation.
    pub message: String,
    /// `true` when the backend can no longer run the subgraph (it panicked and is faulted):
    /// its layers go back for re-assignment. Otherwise they stay assigned, untouched.
    pub give_back: bool,
}

/// The backend side of a round: what `optimize_subgraph` answers and what a backend supports.
/// The registry is the real one; tests and the fuzzer supply their own.
pub trait SubgraphJudge {
    /// The backend's answer for `subgraph`, given the network's `options` for it.
    fn optimize(
        &self,
        backend: &str,
        subgraph: &SubgraphView<'_>,
        options: &BackendOptions,
    ) -> Result<OptimizationViews, NoAnswer>;
    /// Whether `backend` runs `layer` with these tensors (`Err` carries why not).
    fn supports(
        &self,
        backend: &str,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Result<(), String>;
}

impl SubgraphJudge for BackendRegistry {
    fn optimize(
        &self,
        backend: &str,
        subgraph: &SubgraphView<'_>,
        options: &BackendOptions,
    ) -> Result<OptimizationViews, NoAnswer> {
        let entry = self.get(backend).ok_or_else(|| NoAnswer {
            message: format!("backend {backend} is not registered"),
            give_back: true,
        })?;
        entry
            .instance()
            .optimize_subgraph(subgraph, options)
            .map_err(|e| NoAnswer {
                message: e.to_string(),
                give_back: entry.is_faulted(),
            })
    }

    fn supports(
        &self,
        backend: &str,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Result<(), String> {
        self.get(backend)
            .ok_or_else(|| "backend not registered".to_owned())?
            .supports(layer, inputs, outputs)
    }
}

/// Hands every backend its subgraphs (with its entry of `options`, if any) and validates what
/// comes back.
pub fn round(
    network: &Network,
    backends: &[String],
    judge: &dyn SubgraphJudge,
    options: &BTreeMap<String, BackendOptions>,
) -> RoundResult {
    let none = BackendOptions::new();
    let mut result = RoundResult::default();
    let mut used: Vec<&str> = backends.iter().map(String::as_str).collect();
    used.sort_unstable();
    used.dedup();
    let mut taken = BTreeSet::new();
    for backend in used {
        for set in subgraphs(network, backends, backend) {
            // A set of constants alone leaves nothing to fuse: no view of it is made (a view
            // copies each Constant's value: ddddocr beta's 64 MB of weights at every round).
            let layers = network.layers();
            if set.iter().all(|&i| layers[i].kind() == LayerKind::Constant) {
                continue;
            }
            let given = options.get(backend).unwrap_or(&none);
            let views = match judge.optimize(backend, &view(network, &set), given) {
                Ok(v) => v,
                Err(e) => {
                    if e.give_back {
                        log::warn!("{}; its layers go to the next preferred backend", e.message);
                        result
                            .failed
                            .extend(set.iter().map(|&i| (i, backend.to_owned())));
                    } else {
                        log::warn!("{}; subgraph left untouched", e.message);
                    }
                    result.refused.push(e.message);
                    continue;
                }
            };
            for s in views.substitutions.iter() {
                let checked = validate(network, judge, backend, &set, &taken, s).and_then(|a| {
                    let name_taken = network.layers().iter().any(|l| l.name == a.name)
                        || result.accepted.iter().any(|b| b.name == a.name);
                    if a.name.is_empty() || name_taken {
                        return Err(format!("the replacement's name {:?} is empty or already used", a.name));
                    }
                    let mut together = result.accepted.clone();
                    together.push(a.clone());
                    if !acyclic(network, &together) {
                        return Err("it would make the network cyclic together with an earlier substitution".into());
                    }
                    Ok(a)
                });
                match checked {
                    Ok(a) => {
                        taken.extend(a.replaced.iter().copied());
                        result.accepted.push(a);
                    }
                    Err(why) => {
                        let msg = format!(
                            "substitution {:?} from {backend} refused: {why}",
                            s.replacement.name.as_str()
                        );
                        log::warn!("{msg}");
                        result.refused.push(msg);
                    }
                }
            }
            for &f in views.failed.iter() {
                let f = f as usize;
                if set.contains(&f) && !taken.contains(&f) {
                    result.failed.push((f, backend.to_owned()));
                } else {
                    result.refused.push(format!(
                        "{backend} returned layer id {f} as failed, which it was not given"
                    ));
                }
            }
        }
    }
    result
}

/// A node of the rewritten graph: a kept layer, or substitution `k`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Node {
    Layer(usize),
    Sub(usize),
}

/// The rewritten graph's nodes in a topological order (ties by original position), or `None`
/// if the substitutions together make it cyclic.
fn topological_order(network: &Network, accepted: &[Accepted]) -> Option<Vec<(Node, Vec<Node>)>> {
    let layers = network.layers();
    let owner: HashMap<usize, usize> = accepted
        .iter()
        .enumerate()
        .flat_map(|(k, a)| a.replaced.iter().map(move |&i| (i, k)))
        .collect();
    let node_of = |i: usize| owner.get(&i).map_or(Node::Layer(i), |&k| Node::Sub(k));
    let deps = |n: Node| -> Vec<Node> {
        match n {
            Node::Layer(i) => layers[i].inputs.iter().map(|t| node_of(t.layer)).collect(),
            Node::Sub(k) => accepted[k].inputs.iter().map(|&i| node_of(i)).collect(),
        }
    };
    let pos = |n: Node| match n {
        Node::Layer(i) => i,
        Node::Sub(k) => accepted[k].replaced[0],
    };
    let mut nodes: Vec<Node> = (0..layers.len())
        .filter(|i| !owner.contains_key(i))
        .map(Node::Layer)
        .collect();
    nodes.extend((0..accepted.len()).map(Node::Sub));
    nodes.sort_by_key(|&n| pos(n));
    // Kahn's algorithm, always taking the ready node of the lowest position: the order of
    // "the first node in position order whose inputs are all placed", in O(n log n).
    let index: HashMap<Node, usize> = nodes.iter().enumerate().map(|(k, &n)| (n, k)).collect();
    let deps_of: Vec<Vec<Node>> = nodes.iter().map(|&n| deps(n)).collect();
    let mut waiting = vec![0usize; nodes.len()];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (k, deps) in deps_of.iter().enumerate() {
        for d in deps {
            dependents[*index.get(d)?].push(k);
            waiting[k] += 1;
        }
    }
    let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> = (0..nodes.len())
        .filter(|&k| waiting[k] == 0)
        .map(std::cmp::Reverse)
        .collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(std::cmp::Reverse(k)) = ready.pop() {
        for &j in &dependents[k] {
            waiting[j] -= 1;
            if waiting[j] == 0 {
                ready.push(std::cmp::Reverse(j));
            }
        }
        order.push((nodes[k], deps_of[k].clone()));
    }
    (order.len() == nodes.len()).then_some(order)
}

/// `true` if applying `accepted` together keeps the network acyclic.
pub(crate) fn acyclic(network: &Network, accepted: &[Accepted]) -> bool {
    topological_order(network, accepted).is_some()
}

/// Applies accepted substitutions: returns the new network and, per new layer, the index of
/// the old layer it comes from (`Err(k)` for the substitution `accepted[k]`).
pub fn apply(
    network: &Network,
    accepted: &[Accepted],
) -> Result<(Network, Vec<Result<usize, usize>>), String> {
    let layers = network.layers();
    let order =
        topological_order(network, accepted).ok_or("the substitutions together form a cycle")?;
    let mut builder = NetworkBuilder::new();
    let mut map: HashMap<Node, TensorRef> = HashMap::new();
    let mut origin = Vec::new();
    for (n, deps) in order {
        let inputs: Vec<TensorRef> = deps.iter().map(|d| map[d]).collect();
        let out = match n {
            Node::Layer(i) => {
                origin.push(Ok(i));
                builder.re_add(&layers[i], &inputs)
            }
            Node::Sub(k) => {
                let a = &accepted[k];
                origin.push(Err(k));
                builder.add_precompiled(
                    &a.name,
                    std::sync::Arc::new(a.descriptor.clone()),
                    &inputs,
                    layers[a.output].outputs[0].clone(),
                )
            }
        }
        .map_err(|e| e.to_string())?;
        map.insert(n, out);
    }
    Ok((builder.build().map_err(|e| e.to_string())?, origin))
}
