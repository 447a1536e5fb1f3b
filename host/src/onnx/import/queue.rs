//! The importer's queue of nodes: a node waiting to be imported ([`Pending`]), what importing
//! one did ([`Step`]), and the rest of a node imported in steps ([`Continuation`]: a `Loop`
//! being unrolled, a `NonZero` whose count a run gives). [`segments`](super::segments) drives
//! the queue; [`control`](super::control) makes and continues the steps.

use std::sync::Arc;

use crate::onnx::proto::{GraphProto, NodeProto};

/// A node waiting to be imported, with the name its layers and errors use.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub(super) proto: Arc<NodeProto>,
    pub(super) name: String,
    /// For the rest of a node imported in steps (a `Loop` being unrolled, a `NonZero` whose
    /// count a run gives): where it is ([`super::control`]).
    pub(super) state: Option<Arc<Continuation>>,
}

impl Pending {
    /// A node of the model (or of an inlined sub-graph) named `name`.
    pub(super) fn node(proto: NodeProto, name: String) -> Self {
        Self {
            proto: Arc::new(proto),
            name,
            state: None,
        }
    }
}

/// What importing one node did.
#[derive(Debug)]
pub(super) enum Step {
    /// Imported (or found unsupported, and collected).
    Done,
    /// It needs these run-time values: the segment ends before it.
    Cut(Vec<String>),
    /// It stands for these nodes (a branch inlined), imported next in its place.
    Expand(Vec<Pending>),
}

/// Where the unrolling of a `Loop` is: the next iteration, and the names of the values its
/// body reads.
#[derive(Debug)]
pub(crate) struct LoopState {
    /// The next iteration's number.
    pub(super) iteration: i64,
    /// The trip count (none: until the condition is false).
    pub(super) trip: Option<i64>,
    /// The condition's value name (none: no condition).
    pub(super) cond: Option<String>,
    /// The loop-carried values' names.
    pub(super) carried: Vec<String>,
    /// Per scan output, each iteration's value name.
    pub(super) scans: Vec<Vec<String>>,
    /// Per scan output, the axis it is stacked along (`Scan`'s `scan_output_axes`, negative
    /// counting from the end of the stacked rank); empty: 0 for every one (`Loop`).
    pub(super) scan_axes: Vec<i64>,
}

/// The rest of a node imported in steps.
#[derive(Debug)]
pub(crate) enum Continuation {
    /// A `Loop` being unrolled.
    Loop(LoopState),
    /// A layer whose result's extent is a count it writes into its output (`NonZero`,
    /// `NonMaxSuppression`: the API's counted layout, the count in row 0): its layer's output
    /// (`padded`) and the count (`count`, a `[1, 1]` tensor, or the constant a run gave), from
    /// which its result is sliced: rows `1..=rows`, the first `count` columns, transposed
    /// when `transpose`.
    Counted {
        /// The value name of the layer's output.
        padded: String,
        /// The value name of the count.
        count: String,
        /// The rows of the result (a `NonZero` input's rank; 3 for `NonMaxSuppression`).
        rows: u32,
        /// Whether the result is the slice transposed (`[count, rows]`).
        transpose: bool,
    },
    /// A `Unique` of a tensor: its layer's output (`padded`, the counted layout), the count,
    /// and the items it gathers its distinct ones from (`items`: the input, flattened when
    /// the items are elements) along `axis`; `n` items.
    Unique {
        /// The value name of the layer's output.
        padded: String,
        /// The value name of the count.
        count: String,
        /// The value name of the items' tensor.
        items: String,
        /// The axis the distinct items are gathered along.
        axis: u32,
        /// The number of items.
        n: u32,
    },
}

impl Continuation {
    /// The names of the values the rest of the node reads.
    pub(super) fn reads(&self) -> Vec<&str> {
        match self {
            Continuation::Loop(l) => l
                .cond
                .iter()
                .chain(&l.carried)
                .chain(l.scans.iter().flatten())
                .map(String::as_str)
                .collect(),
            Continuation::Counted { padded, count, .. } => vec![padded, count],
            Continuation::Unique {
                padded,
                count,
                items,
                ..
            } => vec![padded, count, items],
        }
    }
}

/// The graphs a node's attributes hold.
pub(super) fn subgraphs(n: &NodeProto) -> impl Iterator<Item = &GraphProto> {
    n.attribute
        .iter()
        .flat_map(|a| a.g.as_deref().into_iter().chain(a.graphs.iter()))
}
