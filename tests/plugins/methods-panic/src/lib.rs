//! Test plugin `PanicMethods` (vendor `Test`): loads and registers normally
//! (`capabilities` works and returns `PanicMethods = true`), but `is_layer_supported`,
//! `create_workload_factory` and `optimize_subgraph` panic (`"<method> exploded"`).
//!
//! Load result: `registered`. Each panicking call must come back to the host as an error with
//! code `panicked` whose message contains `"<method> exploded"`; the host marks the backend
//! faulted, stops using it, and keeps running.

use std::sync::Arc;

use backplane_api::{
    Backend, BackendResult, Capabilities, LayerDescriptor, MemoryManager, OptimizationViews,
    SubgraphView, Support, TensorInfo, WorkloadFactory,
};

/// A backend whose methods (other than `capabilities`) panic.
#[derive(Debug, Default)]
pub struct PanicMethods;

impl Backend for PanicMethods {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new().with_bool("PanicMethods", true)
    }

    fn is_layer_supported(
        &self,
        _: &LayerDescriptor,
        _: &[TensorInfo],
        _: &[TensorInfo],
    ) -> Support {
        panic!("is_layer_supported exploded")
    }

    fn create_workload_factory(
        &self,
        _memory: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        panic!("create_workload_factory exploded")
    }

    fn optimize_subgraph(&self, _: &SubgraphView<'_>) -> BackendResult<OptimizationViews> {
        panic!("optimize_subgraph exploded")
    }
}

backplane_api::export_backend!(id: "PanicMethods", vendor: "Test", backend: PanicMethods::default);
