//! Compiled networks (`.bpn`, ExecuTorch's ahead-of-time split): a network optimised once,
//! with each backend's prepared workloads, saved as one file that loads without the ONNX
//! importer, the optimizer or the backends' preparation.
//!
//! 1. [`compile`] takes an optimised network (a session's plan) and writes: the network as it
//!    runs (every layer, its assignment, refusals and the layers each fused layer replaced:
//!    the debug handles), the network as given to the optimizer (to optimise again), the
//!    constants once each, 64-byte aligned, and per backend of Backend API 1.4 or later the
//!    blobs of its `prepare_workload` with the backend's id, release, API version and blob
//!    format version ([`container`] for the file's layout; a CRC-32 per section).
//! 2. [`CompiledNetwork::open`] reads the file whole into memory it owns (64-byte aligned;
//!    not mapped, so that nothing done to the file later changes a live session), checks the
//!    container (bounds, alignment, every checksum) and rebuilds both networks through the
//!    network builder, each constant a view of that memory
//!    ([`SharedBytes`](crate::graph::network::SharedBytes)): no constant is copied again.
//! 3. [`CompiledNetwork::bind`] checks every backend against this runtime's registry: an
//!    absent backend, another release, another Backend API version or another blob format is
//!    an error naming the backend and both versions ([`CompiledError::Mismatch`]), or, when
//!    asked to re-optimise, the stored source network is optimised again for the backends
//!    present and a note says why. Bound, the network loads like any other: each workload
//!    with a blob is restored from it (`restore_workload`), the others created.
//!
//! Its files: [`compile`](fn@compile) and [`compile_to`] in `compile.rs`, the reader and
//! binder ([`CompiledNetwork`]) in `open.rs`, the errors in `error.rs`, the container in
//! [`container`], and the stored forms of networks in `stored.rs`.
//!
//! Imports: `sys`, `graph`, `plugins`, `onnx`, `runtime`.

mod compile;
pub mod container;
mod error;
mod open;
pub mod seal;
mod stored;
#[cfg(test)]
mod tests;

use std::{collections::BTreeMap, path::Path};

use self::stored::StoredBackend;
use crate::{
    graph::network::Network,
    graph::optimizer::{Assignment, OptimizerOptions, StoredBlob},
    onnx::{DeclaredTensor, ModelMetadata},
};

pub use self::{
    compile::{compile, compile_to},
    container::{ContainerError, looks_compiled},
    error::{CompileError, CompiledError, Mismatch},
};

/// What a compiled network carries besides the network: the model's metadata and its declared
/// inputs and outputs (what a session shows of a model). [`compile`] stores the network's own
/// inputs and outputs at its shapes, with the element type names given here.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelFacts {
    /// The model's metadata.
    pub metadata: ModelMetadata,
    /// The graph inputs, as declared (shapes fixed at compile time).
    pub inputs: Vec<DeclaredTensor>,
    /// The graph outputs.
    pub outputs: Vec<DeclaredTensor>,
}

/// `true` when the file at `path` starts like a compiled network (its first 8 bytes); `false`
/// for any other file, or one that cannot be read (opening it as a model then says why).
pub fn is_compiled_file(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| looks_compiled(&head))
}

/// A compiled network read and checked: its networks rebuilt on the mapped file, ready to be
/// bound to a runtime.
#[derive(Debug)]
pub struct CompiledNetwork {
    facts: ModelFacts,
    producer: String,
    backends: Vec<StoredBackend>,
    network: Network,
    assignments: Vec<Assignment>,
    prepared: Vec<Option<StoredBlob>>,
    /// Per layer, the seal of its prepared workload, when the file has one.
    seals: Vec<Option<seal::Seal>>,
    notes: Vec<String>,
    backend_options: BTreeMap<String, backplane_api::BackendOptions>,
    source: Network,
    preferences: Vec<String>,
    options: OptimizerOptions,
    bytes: usize,
}
