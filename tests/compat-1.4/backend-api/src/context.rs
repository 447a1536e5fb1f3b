//! The [`BackendContext`] trait: hooks around the life of a loaded network.

use crate::BackendResult;

/// Identifies a loaded network within a runtime.
pub type NetworkId = u64;

/// Observes networks as the runtime loads, runs and unloads them (Arm NN's `IBackendContext`).
///
/// An `Err` from a hook is the "false" of Arm NN: for `before_unload_network` it keeps the
/// network loaded and the message says why.
pub trait BackendContext: Send + Sync + 'static {
    /// Before the network's workloads are created.
    fn before_load_network(&self, network: NetworkId) -> BackendResult<()> {
        let _ = network;
        Ok(())
    }
    /// After the network is loaded.
    fn after_load_network(&self, network: NetworkId) -> BackendResult<()> {
        let _ = network;
        Ok(())
    }
    /// Before the network is unloaded; an `Err` keeps it loaded.
    fn before_unload_network(&self, network: NetworkId) -> BackendResult<()> {
        let _ = network;
        Ok(())
    }
    /// After the network is unloaded.
    fn after_unload_network(&self, network: NetworkId) -> BackendResult<()> {
        let _ = network;
        Ok(())
    }
    /// After each inference of the network.
    fn after_enqueue(&self, network: NetworkId) -> BackendResult<()> {
        let _ = network;
        Ok(())
    }
}
