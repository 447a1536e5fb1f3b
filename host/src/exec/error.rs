//! What can go wrong while a network is loaded, run or unloaded, and the small conversions
//! from the errors of the layers below.

use backplane_api::ffi::CallError;

use super::device::DeviceError;

/// Identifies a loaded network within its runtime.
pub type NetworkId = u64;

/// Why a network could not be loaded, run or unloaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecuteError {
    /// No loaded network has this id.
    #[error("no loaded network {0}")]
    UnknownNetwork(NetworkId),
    /// A backend the network was optimised for is not registered in this runtime.
    #[error("backend {0} is not registered in this runtime")]
    UnknownBackend(String),
    /// A backend could not be instantiated.
    #[error("backend {backend}: {message}")]
    Instance {
        /// The backend.
        backend: String,
        /// Why.
        message: String,
    },
    /// A call into a backend failed while handling `layer` (or the network as a whole).
    #[error("layer {layer}: {error}")]
    Backend {
        /// The layer (or `"<network>"` for hooks and memory managers).
        layer: String,
        /// The backend's error.
        error: CallError,
    },
    /// The inputs or outputs handed to `enqueue` do not match the network.
    #[error("{0}")]
    Binding(String),
    /// The network's memory (constants, planned tensors, outputs) is over the load's memory
    /// budget: nothing of it was allocated.
    #[error("{0}")]
    OverBudget(crate::memory::budget::OverBudget),
    /// A device backend could not allocate a buffer of its memory (the load is rolled back).
    #[error(
        "network {network}: backend {backend} could not allocate {bytes} bytes of device memory: \
         {message}"
    )]
    DeviceMemory {
        /// The network.
        network: NetworkId,
        /// The device backend.
        backend: String,
        /// The size asked for.
        bytes: u64,
        /// The backend's error.
        message: String,
    },
    /// A model whose shapes depend on values computed at run time: the segment that follows
    /// node `node` could not be imported, optimised or loaded for the values this run computed.
    #[error("at node {node}, for the values computed at run time: {message}")]
    Segment {
        /// The node that ended the previous segment.
        node: String,
        /// What failed.
        message: String,
    },
    /// A context refused to unload the network; it stays loaded.
    #[error("network {network} stays loaded: backend {backend} refused to unload it: {reason}")]
    UnloadRefused {
        /// The network.
        network: NetworkId,
        /// The backend whose context refused.
        backend: String,
        /// Its reason.
        reason: String,
    },
}

pub(super) fn backend_error(layer: &str) -> impl FnOnce(CallError) -> ExecuteError + '_ {
    move |error| ExecuteError::Backend {
        layer: layer.to_owned(),
        error,
    }
}

/// The error of a network's device memory.
pub(super) fn device_error(network: NetworkId, e: DeviceError) -> ExecuteError {
    match e {
        DeviceError::UnknownBackend(b) => ExecuteError::UnknownBackend(b),
        DeviceError::NoMemoryManager(backend) => ExecuteError::Instance {
            message: format!(
                "backend {backend} declares DeviceMemory but made no memory manager with the \
                 device-memory entries"
            ),
            backend,
        },
        DeviceError::Allocation {
            backend,
            bytes,
            message,
        } => ExecuteError::DeviceMemory {
            network,
            backend,
            bytes,
            message,
        },
    }
}

/// The error of a layer whose tensors do not fit the arena (a broken plan: a host bug).
pub(super) fn arena_error(layer: &str) -> ExecuteError {
    ExecuteError::Binding(format!(
        "layer {layer}: its tensors do not fit the network's memory plan"
    ))
}
