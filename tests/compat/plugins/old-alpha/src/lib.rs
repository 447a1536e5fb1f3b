//! `OldAlpha` (vendor `Old`): a plugin built against the frozen Backend API 1.0 that
//! implements nothing optional. It runs `ElementwiseBinary` (the six 1.0 operations) and ReLU.

use std::sync::Arc;

use backplane_api::{
    Backend, BackendResult, Capabilities, LayerDescriptor, MemoryManager, Support, TensorInfo,
    Workload, WorkloadDesc, WorkloadFactory, capabilities::names,
};

/// The id this plugin exports.
pub const ID: &str = "OldAlpha";

/// The backend.
#[derive(Debug)]
pub struct OldAlpha;

impl Backend for OldAlpha {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new().with_bool(names::HOST_MEMORY, true)
    }

    fn is_layer_supported(&self, layer: &LayerDescriptor, inputs: &[TensorInfo], outputs: &[TensorInfo]) -> Support {
        bp_compat_common::support(ID, layer, inputs, outputs)
    }

    fn create_workload_factory(&self, _memory: Option<Arc<dyn MemoryManager>>) -> BackendResult<Box<dyn WorkloadFactory>> {
        Ok(Box::new(Factory))
    }
}

struct Factory;

impl WorkloadFactory for Factory {
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
        bp_compat_common::create_workload(ID, desc)
    }
}

backplane_api::export_backend!(id: "OldAlpha", vendor: "Old", backend: || OldAlpha);
