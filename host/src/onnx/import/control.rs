//! Control flow: `If` and `Loop`, imported by inlining their sub-graphs.
//!
//! - `If`: a condition known at import (or computed by the segments before it,
//!   [`segments`](super::segments)) picks the branch, whose nodes are imported in the `If`'s
//!   place, their values renamed `<if>/<name>`. A condition computed at run time ends a
//!   segment first.
//! - `Loop`: unrolled one iteration at a time. A step ([`LoopState`]) checks the trip count and
//!   the condition (each a constant, or a value a segment computed first: a condition computed
//!   by the body ends a segment per iteration), then queues the body's nodes, renamed
//!   `<loop>/<iteration>/<name>`, with the iteration number a constant and the loop-carried
//!   values bound to the previous iteration's, followed by the next step. The last step binds
//!   the outputs: the final loop-carried values, and each scan output stacked (a `Concat` of
//!   the iterations' values, each reshaped to a leading dimension of 1).

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use super::{
    Importer, NResult, Node, NodeError, Value,
    attributes::{attr_graph, attr_int, attr_ints, normalize_axis},
    constants::tensor_value,
    invalid,
    queue::{Continuation, LoopState, Pending, Step},
    unsupported,
};
use crate::graph::network::TensorRef;
use backplane_api::{LayerDescriptor, SliceDescriptor};

use crate::onnx::{
    fold::Const,
    proto::{AttributeProto, GraphProto, NodeProto, attribute_type, data_type},
};

/// The most iterations a `Loop` is unrolled to.
pub const MAX_LOOP_ITERATIONS: i64 = 4096;

impl Importer {
    /// A control node, replaced by the nodes it stands for.
    pub(super) fn control(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        match n.op() {
            "If" => self.if_node(n),
            "Loop" => self.loop_node(n),
            "Scan" => self.scan_node(n),
            "NonZero" => self.non_zero(n),
            "NonMaxSuppression" => self.non_max_suppression(n),
            "Unique" => self.unique_node(n),
            op => Err(unsupported(format!("control operator {op}"))),
        }
    }

    /// A condition: a constant with one element (true when not zero).
    fn condition(&self, name: &str, what: &str) -> NResult<bool> {
        let v = match self.values.get(name) {
            None => return Err(NodeError::Missing(name.to_owned())),
            Some(v) => v,
        };
        let data = match v {
            Value::I64(c) => c.data.clone(),
            Value::Tensor(_) => {
                return Err(NodeError::NeedsValue {
                    message: format!(
                        "{what} ({name}) is computed at run time (a session runs the model in \
                         segments)"
                    ),
                    names: vec![name.to_owned()],
                });
            }
            Value::F32(_) => return Err(invalid(format!("{what} ({name}) is not a bool"))),
            _ => return Err(unsupported(format!("{what} ({name}) is not available"))),
        };
        match data.as_slice() {
            [v] => Ok(*v != 0),
            _ => Err(invalid(format!(
                "{what} ({name}) has {} elements, not one",
                data.len()
            ))),
        }
    }

    /// `If`: the chosen branch's nodes, then an `Identity` per output from the branch's.
    fn if_node(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let name = self.req(n, 0)?.0;
        let attribute = if self.condition(&name, "If's condition")? {
            "then_branch"
        } else {
            "else_branch"
        };
        let branch = attr_graph(n, attribute)?
            .ok_or_else(|| invalid(format!("the attribute {attribute} is missing")))?;
        if !branch.input.is_empty() {
            return Err(invalid("a branch of If takes no inputs"));
        }
        if branch.output.len() != n.proto.output.len() {
            return Err(invalid(format!(
                "{attribute} has {} outputs, the node {}",
                branch.output.len(),
                n.proto.output.len()
            )));
        }
        let prefix = n.name.clone();
        let (mut nodes, map) = self.inline(&prefix, branch)?;
        for (k, (out, from)) in n.proto.output.iter().zip(&branch.output).enumerate() {
            if !out.is_empty() {
                let from = map.get(&from.name).unwrap_or(&from.name);
                nodes.push(identity(from, out, format!("{prefix}/output_{k}")));
            }
        }
        Ok(nodes)
    }

    /// `Loop`: its first step.
    fn loop_node(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let body =
            attr_graph(n, "body")?.ok_or_else(|| invalid("the attribute body is missing"))?;
        let carried: Vec<String> = n.proto.input.iter().skip(2).cloned().collect();
        if carried.iter().any(String::is_empty) {
            return Err(invalid("a loop-carried input is empty"));
        }
        if body.input.len() != carried.len() + 2 {
            return Err(invalid(format!(
                "the body takes {} inputs; the Loop gives {} loop-carried values (plus the \
                 iteration number and the condition)",
                body.input.len(),
                carried.len()
            )));
        }
        if body.output.len() < carried.len() + 1 {
            return Err(invalid(format!(
                "the body has {} outputs, fewer than the condition and {} loop-carried values",
                body.output.len(),
                carried.len()
            )));
        }
        if n.proto.output.len() > body.output.len() - 1 {
            return Err(invalid("the Loop has more outputs than its body"));
        }
        let trip = match n.proto.input.first().filter(|s| !s.is_empty()) {
            None => None,
            Some(m) => match self.values.get(m) {
                Some(Value::I64(c)) if c.data.len() == 1 => Some(c.data[0].max(0)),
                Some(Value::Tensor(_)) => {
                    return Err(NodeError::NeedsValue {
                        message: format!(
                            "the Loop's trip count ({m}) is computed at run time (a session \
                             runs the model in segments)"
                        ),
                        names: vec![m.clone()],
                    });
                }
                Some(_) => return Err(invalid(format!("the trip count {m} is not one integer"))),
                None => return Err(NodeError::Missing(m.clone())),
            },
        };
        let cond = n.proto.input.get(1).filter(|s| !s.is_empty()).cloned();
        if trip.is_none() && cond.is_none() {
            return Err(unsupported(
                "a Loop without a trip count or a condition (it never ends)",
            ));
        }
        let scans = body.output.len() - 1 - carried.len();
        Ok(vec![Pending {
            proto: Arc::new(n.proto.clone()),
            name: n.name.clone(),
            state: Some(Arc::new(Continuation::Loop(LoopState {
                iteration: 0,
                trip,
                cond,
                carried,
                scans: vec![Vec::new(); scans],
                scan_axes: Vec::new(),
            }))),
        }])
    }

    /// `Scan` (opset 9 and later; opset 8's batched form through [`Self::scan_8`]), unrolled
    /// over its sequence length, which the scan inputs'
    /// shapes fix at import: each iteration's slices of the scan inputs (along their axes, in
    /// their directions) are made first; each iteration's body follows, renamed
    /// `<scan>/<t>/<name>`, its state inputs bound (`Identity`) to the previous iteration's
    /// state outputs; the last step binds the final states and stacks each scan output along
    /// its axis, in its direction (as `Loop`'s does).
    fn scan_node(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        // Opset 8's batched form; its expansion writes opset 9's, marked by its explicit
        // `scan_input_axes` (an attribute opset 8 does not have).
        if self.opset < 9 && attr_ints(n, "scan_input_axes")?.is_none() {
            return self.scan_8(n);
        }
        let body =
            attr_graph(n, "body")?.ok_or_else(|| invalid("the attribute body is missing"))?;
        let m = usize::try_from(
            attr_int(n, "num_scan_inputs")?
                .ok_or_else(|| invalid("the attribute num_scan_inputs is missing"))?,
        )
        .map_err(|_| invalid("num_scan_inputs is negative"))?;
        let inputs = &n.proto.input;
        let states = inputs
            .len()
            .checked_sub(m)
            .ok_or_else(|| invalid("fewer inputs than num_scan_inputs"))?;
        if body.input.len() != inputs.len() || body.output.len() < states {
            return Err(invalid(format!(
                "the body takes {} inputs and gives {} outputs for {} states and {m} scan inputs",
                body.input.len(),
                body.output.len(),
                states
            )));
        }
        let k_out = body.output.len() - states;
        let list = |name: &str, len: usize| -> NResult<Vec<i64>> {
            let v = attr_ints(n, name)?.unwrap_or_else(|| vec![0; len]);
            if v.len() == len {
                Ok(v)
            } else {
                Err(invalid(format!("{name} has {} values, not {len}", v.len())))
            }
        };
        let in_axes = list("scan_input_axes", m)?;
        let in_dirs = list("scan_input_directions", m)?;
        let out_axes = list("scan_output_axes", k_out)?;
        let out_dirs = list("scan_output_directions", k_out)?;
        // Each scan input as a tensor, its axis, and the sequence length they share.
        let mut scanned = Vec::with_capacity(m);
        let mut length: Option<u32> = None;
        for (j, name) in inputs[states..].iter().enumerate() {
            let value = self.req_value(name)?;
            let shape = self.shape(&value)?;
            let axis = normalize_axis(in_axes[j], shape.len())?;
            match length {
                Some(l) if l != shape[axis] => {
                    return Err(invalid(format!(
                        "scan input {name} has {} along its axis, another {l}",
                        shape[axis]
                    )));
                }
                _ => length = Some(shape[axis]),
            }
            let t = self.tensor(name, &value)?;
            scanned.push((t, shape, axis));
        }
        let length = length.unwrap_or(0);
        if length == 0 {
            return Err(unsupported(
                "a Scan over no element (empty tensors are not supported yet)",
            ));
        }
        let mut nodes = Vec::new();
        let mut current: Vec<String> = inputs[..states].to_vec();
        let mut scans: Vec<Vec<String>> = vec![Vec::new(); k_out];
        for t in 0..length {
            let prefix = format!("{}/{t}", n.name);
            let (body_nodes, map) = self.inline(&prefix, body)?;
            let renamed = |name: &str| map.get(name).cloned().unwrap_or_else(|| name.to_owned());
            for (k, from) in current.iter().enumerate() {
                let to = renamed(&body.input[k].name);
                nodes.push(identity(from, &to, format!("{prefix}/state_{k}")));
            }
            for (j, (tensor, shape, axis)) in scanned.iter().enumerate() {
                let at = if in_dirs[j] == 0 { t } else { length - 1 - t };
                let mut begin = vec![0u32; shape.len()];
                begin[*axis] = at;
                let mut size = shape.clone();
                size[*axis] = 1;
                let slice = LayerDescriptor::Slice(SliceDescriptor {
                    begin: begin.into(),
                    step: vec![1; shape.len()].into(),
                    size: size.into(),
                });
                let s = self.layer(n, Some(&format!("{t}/slice_{j}")), slice, &[*tensor])?;
                let mut squeezed = shape.clone();
                squeezed.remove(*axis);
                let value = self.reshaped(n, &Value::Tensor(s), squeezed)?;
                self.values
                    .insert(renamed(&body.input[states + j].name), value);
            }
            nodes.extend(body_nodes);
            current = body.output[..states]
                .iter()
                .map(|o| renamed(&o.name))
                .collect();
            for (k, o) in body.output[states..].iter().enumerate() {
                scans[k].push(renamed(&o.name));
            }
        }
        for (k, list) in scans.iter_mut().enumerate() {
            if out_dirs[k] != 0 {
                list.reverse();
            }
        }
        let length = i64::from(length);
        nodes.push(Pending {
            proto: Arc::new(n.proto.clone()),
            name: n.name.clone(),
            state: Some(Arc::new(Continuation::Loop(LoopState {
                iteration: length,
                trip: Some(length),
                cond: None,
                carried: current,
                scans,
                scan_axes: out_axes,
            }))),
        });
        Ok(nodes)
    }

    /// `Scan` of opset 8: batched (axis 0 of every state and scan input is the batch, axis 1
    /// of each scan input the sequence), with `sequence_lens` and `directions`. Each batch
    /// entry's states and sequences (the batch axis sliced off) go through opset 9's `Scan`,
    /// and the results are stacked back along the batch axis. Every entry runs the whole
    /// sequence: `sequence_lens` must be absent or the sequence's length everywhere.
    fn scan_8(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        use super::expand::{Expansion, int, ints};
        let m = usize::try_from(
            attr_int(n, "num_scan_inputs")?
                .ok_or_else(|| invalid("the attribute num_scan_inputs is missing"))?,
        )
        .map_err(|_| invalid("num_scan_inputs is negative"))?;
        let inputs = &n.proto.input;
        if inputs.len() < 1 + m || m == 0 {
            return Err(invalid(format!(
                "{} inputs for sequence_lens and {m} scan inputs",
                inputs.len()
            )));
        }
        let first_scan = self.req_value(&inputs[inputs.len() - m])?;
        let shape = self.shape(&first_scan)?;
        let (Some(&batch), Some(&length)) = (shape.first(), shape.get(1)) else {
            return Err(invalid(format!(
                "scan input {} must be [batch, sequence, ...], got {shape:?}",
                inputs[inputs.len() - m]
            )));
        };
        if let Some(lens) = inputs.first().filter(|s| !s.is_empty()) {
            match self.req_value(lens)? {
                Value::I64(c) if c.data.iter().all(|&l| l == i64::from(length)) => {}
                Value::I64(c) => {
                    return Err(unsupported(format!(
                        "Scan of opset 8 with sequence_lens {:?} shorter than the sequence \
                         ({length}): every batch entry runs the whole sequence",
                        c.data
                    )));
                }
                _ => {
                    return Err(unsupported(
                        "Scan of opset 8 with sequence_lens computed at run time",
                    ));
                }
            }
        }
        let directions = attr_ints(n, "directions")?.unwrap_or_else(|| vec![0; m]);
        if directions.len() != m {
            return Err(invalid(format!(
                "directions has {} values, not {m}",
                directions.len()
            )));
        }
        let body = n
            .proto
            .attribute
            .iter()
            .find(|a| a.name == "body")
            .cloned()
            .ok_or_else(|| invalid("the attribute body is missing"))?;
        let attrs = vec![
            body,
            int("num_scan_inputs", m as i64),
            ints("scan_input_directions", &directions),
            ints("scan_input_axes", &vec![0; m]),
        ];
        let outputs = n.proto.output.clone();
        let mut e = Expansion::new(self, n);
        let mut stacked: Vec<Vec<String>> = vec![Vec::new(); outputs.len()];
        for b in 0..i64::from(batch) {
            let entry: Vec<String> = inputs[1..]
                .iter()
                .map(|name| {
                    let one = e.slice(name, &[b], &[b + 1], &[0]);
                    e.squeeze(&one, &[0])
                })
                .collect();
            let results: Vec<String> = outputs.iter().map(|_| e.fresh()).collect();
            let ins: Vec<&str> = entry.iter().map(String::as_str).collect();
            let outs: Vec<&str> = results.iter().map(String::as_str).collect();
            e.node_into("Scan", &ins, attrs.clone(), &outs);
            for (k, r) in results.iter().enumerate() {
                let r = e.unsqueeze(r, &[0]);
                stacked[k].push(r);
            }
        }
        for (out, parts) in outputs.iter().zip(&stacked) {
            if out.is_empty() {
                continue;
            }
            let whole = match parts.as_slice() {
                [one] => one.clone(),
                _ => {
                    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
                    e.op("Concat", &refs, vec![int("axis", 0)])
                }
            };
            e.bind(&whole, out);
        }
        Ok(e.finish())
    }

    /// The next step of a node imported in steps: for a `Loop` (`n`), the next iteration's
    /// nodes and step or, once the loop ends, the nodes that bind its outputs; for a
    /// `NonZero`, its result once the count is known.
    pub(super) fn continue_node(
        &mut self,
        n: &Node<'_>,
        state: &Continuation,
    ) -> Result<Step, super::ImportError> {
        let result = match state {
            Continuation::Loop(state) => self.loop_step_nodes(n, state),
            Continuation::Counted {
                padded,
                count,
                rows,
                transpose,
            } => self.counted_result(n, padded, count, *rows, *transpose),
            Continuation::Unique {
                padded,
                count,
                items,
                axis,
                n: len,
            } => self.unique_result(n, (padded, count, items), *axis, *len),
        };
        self.control_step(n, result)
    }

    /// What a control node's (or a step's) result means for the queue: its nodes, imported
    /// next; a cut before it, for values a run gives (in a dynamic import); or, failed, the
    /// node unsupported (collected) and its outputs skipped.
    pub(super) fn control_step(
        &mut self,
        n: &Node<'_>,
        result: NResult<Vec<Pending>>,
    ) -> Result<Step, super::ImportError> {
        match result {
            Ok(nodes) if nodes.is_empty() => Ok(Step::Done),
            Ok(nodes) => Ok(Step::Expand(nodes)),
            Err(NodeError::NeedsValue { names, .. }) if self.dynamic => Ok(Step::Cut(names)),
            Err(e) => {
                self.failed(n, e)?;
                for name in n.proto.output.iter().filter(|o| !o.is_empty()) {
                    self.values.insert(name.clone(), Value::Skipped);
                }
                Ok(Step::Done)
            }
        }
    }

    fn loop_step_nodes(&mut self, n: &Node<'_>, state: &LoopState) -> NResult<Vec<Pending>> {
        let body =
            attr_graph(n, "body")?.ok_or_else(|| invalid("the attribute body is missing"))?;
        let go_on = state.trip.is_none_or(|m| state.iteration < m)
            && match &state.cond {
                None => true,
                Some(c) => self.condition(c, "the Loop's condition")?,
            };
        if !go_on {
            return self.loop_outputs(n, state);
        }
        if state.iteration >= MAX_LOOP_ITERATIONS {
            return Err(unsupported(format!(
                "a Loop of more than {MAX_LOOP_ITERATIONS} iterations (it is unrolled)"
            )));
        }
        let prefix = format!("{}/{}", n.name, state.iteration);
        // The body's inputs: the iteration number, the condition, the loop-carried values.
        let mut bound: Vec<(String, Value)> = Vec::with_capacity(body.input.len());
        bound.push((
            body.input[0].name.clone(),
            self.store_i64(Const::scalar(state.iteration))?,
        ));
        let cond = match &state.cond {
            Some(c) => self.req_value(c)?,
            None => self.store_i64(Const::scalar(1))?,
        };
        bound.push((body.input[1].name.clone(), cond));
        for (input, from) in body.input.iter().skip(2).zip(&state.carried) {
            bound.push((input.name.clone(), self.req_value(from)?));
        }
        let (mut nodes, map) = self.inline(&prefix, body)?;
        for (name, value) in bound {
            let new = map
                .get(&name)
                .cloned()
                .ok_or_else(|| invalid(format!("body input {name} is not renamed")))?;
            if let Value::I64(_) = value {
                self.local_types.insert(new.clone(), data_type::INT64);
            }
            self.values.insert(new, value);
        }
        let renamed = |name: &str| map.get(name).cloned().unwrap_or_else(|| name.to_owned());
        let carried_out = body.output.iter().skip(1).take(state.carried.len());
        let scan_out = body.output.iter().skip(1 + state.carried.len());
        let mut scans = state.scans.clone();
        for (list, out) in scans.iter_mut().zip(scan_out) {
            list.push(renamed(&out.name));
        }
        nodes.push(Pending {
            proto: Arc::new(n.proto.clone()),
            name: n.name.clone(),
            state: Some(Arc::new(Continuation::Loop(LoopState {
                iteration: state.iteration + 1,
                trip: state.trip,
                cond: state.cond.as_ref().map(|_| renamed(&body.output[0].name)),
                carried: carried_out.map(|o| renamed(&o.name)).collect(),
                scans,
                scan_axes: state.scan_axes.clone(),
            }))),
        });
        Ok(nodes)
    }

    /// The nodes binding a finished `Loop`'s outputs: an `Identity` of each final
    /// loop-carried value, and per scan output a `Concat` of the iterations' values.
    fn loop_outputs(&mut self, n: &Node<'_>, state: &LoopState) -> NResult<Vec<Pending>> {
        let mut nodes = Vec::new();
        let outputs = n.proto.output.iter().enumerate();
        for (k, out) in outputs.filter(|(_, o)| !o.is_empty()) {
            let name = format!("{}/output_{k}", n.name);
            if let Some(from) = state.carried.get(k) {
                nodes.push(identity(from, out, name));
                continue;
            }
            let j = k - state.carried.len();
            let values = &state.scans[j];
            if values.is_empty() {
                return Err(unsupported(format!(
                    "a scan output of a {} that ran no iteration (its shape is not known)",
                    n.op()
                )));
            }
            let mut parts = Vec::with_capacity(values.len());
            let mut axis = 0;
            for (i, v) in values.iter().enumerate() {
                let value = self.req_value(v)?;
                let mut shape = self.shape(&value)?;
                axis = normalize_axis(
                    state.scan_axes.get(j).copied().unwrap_or(0),
                    shape.len() + 1,
                )?;
                shape.insert(axis, 1);
                let part = format!("{name}/{i}");
                let reshaped = self.reshaped(n, &value, shape)?;
                self.values.insert(part.clone(), reshaped);
                parts.push(part);
            }
            nodes.push(Pending::node(
                NodeProto {
                    input: parts,
                    output: vec![out.clone()],
                    op_type: "Concat".to_owned(),
                    attribute: vec![AttributeProto {
                        name: "axis".to_owned(),
                        i: axis as i64,
                        r#type: attribute_type::INT,
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                name,
            ));
        }
        Ok(nodes)
    }

    /// `NonZero`: folded for a constant; for a tensor, Backend API 1.5's `NonZero` layer (the
    /// indices and their count, in an output sized for every element), then the count read
    /// (sliced out; a run gives its value: [`segments`](super::segments)) and the result
    /// sliced to it.
    fn non_zero(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let (name, x) = self.req(n, 0)?;
        let out = n
            .proto
            .output
            .first()
            .filter(|o| !o.is_empty())
            .ok_or_else(|| invalid("NonZero has no output"))?
            .clone();
        let t = match x {
            Value::Tensor(t) => t,
            Value::F32(c) => {
                let nz: Vec<bool> = c.data.iter().map(|&v| v != 0.0 || v.is_nan()).collect();
                let v = self.store_i64(non_zero_const(&c.shape, &nz).map_err(invalid)?)?;
                self.values.insert(out, v);
                return Ok(Vec::new());
            }
            Value::I64(c) => {
                let nz: Vec<bool> = c.data.iter().map(|&v| v != 0).collect();
                let v = self.store_i64(non_zero_const(&c.shape, &nz).map_err(invalid)?)?;
                self.values.insert(out, v);
                return Ok(Vec::new());
            }
            _ => return Err(unsupported(format!("the input {name} is not available"))),
        };
        let rank = u32::try_from(self.shape(&Value::Tensor(t))?.len())
            .map_err(|_| invalid("rank too large"))?;
        let padded = self.layer(n, Some("nonzero"), LayerDescriptor::NonZero, &[t])?;
        self.counted(n, padded, rank, false)
    }

    /// The rest of a layer whose output has the API's counted layout (`padded`: the count in
    /// row 0, column 0): the count sliced out, and a step that slices the result once a run
    /// gives the count ([`Self::counted_result`]).
    pub(super) fn counted(
        &mut self,
        n: &Node<'_>,
        padded: TensorRef,
        rows: u32,
        transpose: bool,
    ) -> NResult<Vec<Pending>> {
        let out = n
            .proto
            .output
            .first()
            .filter(|o| !o.is_empty())
            .ok_or_else(|| invalid(format!("{} has no output", n.op())))?;
        let count = self.count_of(n, padded)?;
        let (padded_name, count_name) = (format!("{out}\0counted"), format!("{out}\0count"));
        self.values
            .insert(padded_name.clone(), Value::Tensor(padded));
        self.values.insert(count_name.clone(), Value::Tensor(count));
        Ok(vec![Pending {
            proto: Arc::new(n.proto.clone()),
            name: n.name.clone(),
            state: Some(Arc::new(Continuation::Counted {
                padded: padded_name,
                count: count_name,
                rows,
                transpose,
            })),
        }])
    }

    /// The count a counted layer's output holds in row 0, column 0 (a `[1, 1]` slice).
    pub(super) fn count_of(&mut self, n: &Node<'_>, padded: TensorRef) -> NResult<TensorRef> {
        self.layer(
            n,
            Some("count"),
            LayerDescriptor::Slice(SliceDescriptor {
                begin: vec![0, 0].into(),
                step: vec![1, 1].into(),
                size: vec![1, 1].into(),
            }),
            &[padded],
        )
    }

    /// The result of a counted layer whose count is known: rows `1..=rows` of its output, the
    /// first `count` columns (transposed when `transpose`).
    fn counted_result(
        &mut self,
        n: &Node<'_>,
        padded: &str,
        count: &str,
        rows: u32,
        transpose: bool,
    ) -> NResult<Vec<Pending>> {
        let op = n.op();
        let k = match self.req_value(count)? {
            Value::I64(c) if c.data.len() == 1 => c.data[0],
            Value::Tensor(_) => {
                return Err(NodeError::NeedsValue {
                    message: format!("{op}'s count is known only at run time (a session runs it)"),
                    names: vec![count.to_owned()],
                });
            }
            _ => return Err(invalid(format!("{op}'s count is not one integer"))),
        };
        let k = u32::try_from(k).map_err(|_| invalid(format!("{op}'s count {k}")))?;
        if k == 0 {
            return Err(unsupported(format!(
                "{op} selected no element: empty tensors are not supported yet"
            )));
        }
        let Value::Tensor(p) = self.req_value(padded)? else {
            return Err(invalid(format!("{op}'s layer output is not a tensor")));
        };
        let slice = LayerDescriptor::Slice(SliceDescriptor {
            begin: vec![1, 0].into(),
            step: vec![1, 1].into(),
            size: vec![rows, k].into(),
        });
        let result = if transpose {
            let rows = self.layer(n, Some("rows"), slice, &[p])?;
            self.layer(
                n,
                None,
                LayerDescriptor::Transpose(backplane_api::TransposeDescriptor {
                    permutation: vec![1, 0].into(),
                }),
                &[rows],
            )?
        } else {
            self.layer(n, None, slice, &[p])?
        };
        if let Some(out) = n.proto.output.first() {
            self.values.insert(out.clone(), Value::Tensor(result));
        }
        Ok(Vec::new())
    }

    /// The value named `name`, which must be defined.
    pub(super) fn req_value(&self, name: &str) -> NResult<Value> {
        match self.values.get(name) {
            None => Err(NodeError::Missing(name.to_owned())),
            Some(Value::Unusable(r)) => Err(unsupported(format!("input {name}: {r}"))),
            Some(v) => Ok(v.clone()),
        }
    }

    /// The nodes of `graph` (a sub-graph) as nodes of the model: every value it defines (its
    /// inputs, initializers and node outputs) renamed `<prefix>/<name>` (unique), its
    /// initializers stored as values. Returns the nodes and the renaming; the caller binds
    /// the renamed inputs.
    fn inline(
        &mut self,
        prefix: &str,
        graph: &GraphProto,
    ) -> NResult<(Vec<Pending>, HashMap<String, String>)> {
        let mut map: HashMap<String, String> = HashMap::new();
        let mut taken: HashSet<String> = HashSet::new();
        let defined = graph
            .input
            .iter()
            .map(|i| &i.name)
            .chain(graph.initializer.iter().map(|t| &t.name))
            .chain(graph.node.iter().flat_map(|n| n.output.iter()))
            .filter(|s| !s.is_empty());
        for name in defined {
            let mut new = format!("{prefix}/{name}");
            let mut k = 1;
            while self.values.contains_key(&new) || taken.contains(&new) {
                new = format!("{prefix}/{name}_{k}");
                k += 1;
            }
            taken.insert(new.clone());
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
            nodes.push(Pending::node(proto, format!("{prefix}/{local}")));
        }
        Ok((nodes, map))
    }
}

/// An `Identity` node `to = from`.
fn identity(from: &str, to: &str, name: String) -> Pending {
    Pending::node(
        NodeProto {
            input: vec![from.to_owned()],
            output: vec![to.to_owned()],
            op_type: "Identity".to_owned(),
            ..Default::default()
        },
        name,
    )
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

/// The result of `NonZero` on a constant of `shape` whose non-zero elements `nz` marks:
/// `[rank, count]`, each column an element's index, in row-major order.
fn non_zero_const(shape: &[u32], nz: &[bool]) -> Result<Const<i64>, String> {
    if shape.is_empty() {
        return Err("NonZero of a scalar".to_owned());
    }
    let positions: Vec<usize> = (0..nz.len()).filter(|&i| nz[i]).collect();
    let k = positions.len();
    if k == 0 {
        return Err(
            "NonZero found no non-zero element: empty tensors are not supported yet".into(),
        );
    }
    let rank = shape.len();
    let mut data = vec![0i64; rank * k];
    for (col, &flat) in positions.iter().enumerate() {
        let mut rest = flat;
        for d in (0..rank).rev() {
            let dim = shape[d] as usize;
            data[d * k + col] = i64::try_from(rest % dim).unwrap_or(0);
            rest /= dim;
        }
    }
    Const::new(
        vec![
            u32::try_from(rank).map_err(|e| e.to_string())?,
            u32::try_from(k).map_err(|e| e.to_string())?,
        ],
        data,
    )
}
