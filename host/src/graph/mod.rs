//! Networks as graphs, and what the optimizer does with them.
//!
//! - [`network`]: layers, tensors and the builder.
//! - `rewrite`: backend-independent rewrites applied before assignment (HardSwish,
//!   layer-norm and GELU folding, …).
//! - [`substitution`]: applying a backend's `optimize_subgraph` answer to the network.
//! - [`optimizer`]: assignment by preference and support, subgraphs, substitutions, MemCopy
//!   insertion, and the explanation.
//!
//! Imports: `plugins` (the registry a network is optimised against).

pub mod network;
pub mod optimizer;
pub(crate) mod rewrite;
pub mod substitution;
