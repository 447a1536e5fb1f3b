//! The [`Backend`] trait: what a vendor implements (Arm NN's `IBackendInternal`).

use crate::{
    BackendOptions, BackendResult, Capabilities, CustomAllocator, LayerDescriptor,
    OptimizationViews, SubgraphView, Support, TensorInfo, context::BackendContext,
    memory::MemoryManager, workload::WorkloadFactory,
};
use std::sync::Arc;

/// A backend. Vendors implement this safe trait; [`export_backend!`](crate::export_backend)
/// generates the C symbols and the ABI-stable, panic-guarded tables around it.
///
/// Every method may be called from any thread. A panic in any method is caught inside the
/// plugin and reported to the host as [`ErrorCode::Panicked`](crate::ErrorCode::Panicked); the
/// host then marks the backend faulted and stops using it.
pub trait Backend: Send + Sync + 'static {
    /// Named capabilities (see [`names`](crate::capabilities::names)); unknown names read as false.
    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
    }

    /// Whether the backend can run `layer` with these input and output tensors; a refusal
    /// carries a reason for a person.
    fn is_layer_supported(
        &self,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Support;

    /// A memory manager, if the backend has one. `acquire` runs before the first execution,
    /// `release` when the network is unloaded.
    fn create_memory_manager(&self) -> BackendResult<Option<Arc<dyn MemoryManager>>> {
        Ok(None)
    }

    /// A workload factory; `memory` is this backend's own memory manager when it made one.
    fn create_workload_factory(
        &self,
        memory: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>>;

    /// A workload factory for one network, with the backend options the application gave for
    /// this backend (Arm NN's `ModelOptions`; Backend API 1.1). The default ignores the
    /// options and calls [`create_workload_factory`](Self::create_workload_factory). A host
    /// calls a 1.0 plugin through `create_workload_factory` only.
    fn create_workload_factory_with_options(
        &self,
        memory: Option<Arc<dyn MemoryManager>>,
        options: &BackendOptions,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        let _ = options;
        self.create_workload_factory(memory)
    }

    /// A context that observes network load, unload and enqueue, if the backend wants one.
    fn create_backend_context(
        &self,
        options: &BackendOptions,
    ) -> BackendResult<Option<Box<dyn BackendContext>>> {
        let _ = options;
        Ok(None)
    }

    /// Optimises the subgraph assigned to this backend: substitutions, failed and untouched
    /// layers. The default leaves everything untouched.
    fn optimize_subgraph(&self, subgraph: &SubgraphView<'_>) -> BackendResult<OptimizationViews> {
        Ok(OptimizationViews::untouched(subgraph))
    }

    /// [`optimize_subgraph`](Self::optimize_subgraph) with the backend options of the network
    /// being optimised (Backend API 1.1). The default ignores the options.
    fn optimize_subgraph_with_options(
        &self,
        subgraph: &SubgraphView<'_>,
        options: &BackendOptions,
    ) -> BackendResult<OptimizationViews> {
        let _ = options;
        self.optimize_subgraph(subgraph)
    }

    /// Offers an application-provided allocator; `true` if the backend will use it.
    fn use_custom_allocator(&self, allocator: CustomAllocator) -> bool {
        let _ = allocator;
        false
    }
}
