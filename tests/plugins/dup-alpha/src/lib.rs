//! Test plugin: a DIFFERENT library (vendor `Other`) that also exports the id `TestAlpha`.
//!
//! It is a valid backend on its own (it supports no layers and reports the capability
//! `DupAlpha = true`, so a test can tell which `TestAlpha` won). Loaded together with
//! `bp-test-valid-alpha`, the second one the host meets must be rejected as a duplicate id
//! (`duplicate_id`), and the first registration must be unaffected. Loaded alone, it is
//! `registered`.

use std::sync::Arc;

use backplane_api::{
    Backend, BackendError, BackendResult, Capabilities, LayerDescriptor, MemoryManager, Support,
    TensorInfo, WorkloadFactory,
};

/// The impostor `TestAlpha` backend.
#[derive(Debug, Default)]
pub struct DupAlpha;

impl Backend for DupAlpha {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new().with_bool("DupAlpha", true)
    }

    fn is_layer_supported(
        &self,
        layer: &LayerDescriptor,
        _: &[TensorInfo],
        _: &[TensorInfo],
    ) -> Support {
        Support::unsupported(format!("DupAlpha does not support {}", layer.kind()))
    }

    fn create_workload_factory(
        &self,
        _memory: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        Err(BackendError::unsupported(
            "DupAlpha has no workload factory",
        ))
    }
}

backplane_api::export_backend!(id: "TestAlpha", vendor: "Other", backend: DupAlpha::default);
