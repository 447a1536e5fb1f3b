//! Test plugin `HangFactory` (vendor `Test`): the backend constructor never returns.
//!
//! Loaded in the host's own process it would hang discovery forever, so tests load it only
//! with isolation (`CreationOptions::isolation`, CLI `--isolate`): the probe child is killed
//! when its time is up and the host rejects the file with reason `crashed`, registers
//! nothing, and goes on.

use std::sync::Arc;

use backplane_api::{
    Backend, BackendError, BackendResult, LayerDescriptor, MemoryManager, Support, TensorInfo,
    WorkloadFactory,
};

/// A backend that is never built.
#[derive(Debug)]
pub struct HangFactory;

impl Default for HangFactory {
    /// Sleeps forever.
    fn default() -> Self {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}

impl Backend for HangFactory {
    fn is_layer_supported(
        &self,
        _: &LayerDescriptor,
        _: &[TensorInfo],
        _: &[TensorInfo],
    ) -> Support {
        Support::unsupported("unreachable: HangFactory is never constructed")
    }

    fn create_workload_factory(
        &self,
        _memory: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        Err(BackendError::failed(
            "unreachable: HangFactory is never constructed",
        ))
    }
}

backplane_api::export_backend!(id: "HangFactory", vendor: "Test", backend: HangFactory::default);
