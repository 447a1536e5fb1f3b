//! Why a network could not be compiled, why a compiled network could not be opened or bound,
//! and each way its backends can differ from the runtime's.

use std::path::PathBuf;

use backplane_api::{ApiVersion, ffi::CallError};

use super::container::ContainerError;
use crate::graph::optimizer::OptimizeError;

/// Why a network could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// A backend could not be set up to prepare its workloads.
    #[error("backend {backend}: {message}")]
    Instance {
        /// The backend.
        backend: String,
        /// What failed.
        message: String,
    },
    /// A backend's `prepare_workload` failed.
    #[error("backend {backend}: preparing layer {layer}: {error}")]
    Prepare {
        /// The backend.
        backend: String,
        /// The layer (with the layers it replaced).
        layer: String,
        /// The backend's error.
        #[source]
        error: CallError,
    },
    /// The model's shapes depend on values computed at run time (it runs in segments,
    /// each planned per value): a compiled network stores one static network.
    #[error(
        "the model's shapes depend on values computed at run time (node {node} needs them): \
         compile needs a static model; run it from its .onnx"
    )]
    Dynamic {
        /// The node that needs values computed at run time (`name (op)`).
        node: String,
    },
    /// The network was not made by the optimizer: nothing to optimise again from.
    #[error("the network was not made by the optimizer (it has no source to store)")]
    NoSource,
    /// A backend prepared a blob of another format version than it declares.
    #[error(
        "backend {backend}: layer {layer}: prepared a blob of format {blob}, the backend \
         declares PreparedWorkloadVersion {declared}"
    )]
    BlobVersion {
        /// The backend.
        backend: String,
        /// The layer.
        layer: String,
        /// The blob's version.
        blob: u32,
        /// The backend's capability.
        declared: u32,
    },
    /// The file could not be written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// Why a compiled network could not be read or used here.
#[derive(Debug, thiserror::Error)]
pub enum CompiledError {
    /// The file could not be opened or mapped.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The container is damaged or not a compiled network.
    #[error("compiled network: {0}")]
    Container(#[from] ContainerError),
    /// The network section is missing, damaged or inconsistent (a truncated, corrupted or
    /// crafted file).
    #[error("compiled network: {0}")]
    Invalid(String),
    /// A backend the network was compiled for is absent here or not the same.
    #[error(
        "compiled network: {0}; give --reoptimize (SessionOptions::reoptimize) to optimise the \
         stored layers again for the backends registered here"
    )]
    Mismatch(Mismatch),
    /// Optimising the stored layers again failed.
    #[error(transparent)]
    Optimize(#[from] OptimizeError),
}

/// How a backend differs from the one a network was compiled for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// The backend is not registered.
    #[error(
        "compiled for backend {backend} (release {release}, Backend API {api}), which is not \
         registered here"
    )]
    Absent {
        /// The backend id.
        backend: String,
        /// Its release when compiled.
        release: String,
        /// Its Backend API version when compiled.
        api: ApiVersion,
    },
    /// The backend is registered but faulted (it panicked or crashed in this runtime).
    #[error("compiled for backend {backend}, which is faulted here ({reason})")]
    Faulted {
        /// The backend id.
        backend: String,
        /// Why it is faulted.
        reason: String,
    },
    /// The backend computed in memory of its own when compiled and does not here (it runs out
    /// of process now), or the other way round: the file's memory copies do not fit.
    #[error(
        "compiled for backend {backend} computing in {}; here it computes in {}",
        if *device_then { "its own memory" } else { "host memory" },
        if *device_then { "host memory (out of process, or without DeviceMemory)" } else { "its own memory" }
    )]
    Memory {
        /// The backend id.
        backend: String,
        /// Whether it computed in its own memory when compiled.
        device_then: bool,
    },
    /// The backend here refuses a layer the file assigns to it.
    #[error("backend {backend} refuses layer {layer} here: {reason}")]
    Refused {
        /// The backend id.
        backend: String,
        /// The layer.
        layer: String,
        /// Its reason.
        reason: String,
    },
    /// Another version of something the network depends on.
    #[error("compiled for backend {backend} with {what} {compiled}; this runtime has {present}")]
    Version {
        /// The backend id.
        backend: String,
        /// What differs: `release`, `Backend API`, `prepared-workload format`.
        what: &'static str,
        /// The version when compiled.
        compiled: String,
        /// The version here.
        present: String,
    },
}

/// A malformed file: what is wrong with it.
pub(super) fn invalid(what: impl Into<String>) -> CompiledError {
    CompiledError::Invalid(what.into())
}
