//! Benchmark plugin: a minimal valid backend for `scripts/bench-discovery.sh`.
//!
//! Its id is the placeholder `BenchId0000`; the benchmark writes copies with the four digits
//! replaced, so 64 copies register as 64 distinct backends. Failure mode: none.

use std::sync::Arc;

use backplane_api::{
    Backend, BackendError, BackendResult, Capabilities, LayerDescriptor, MemoryManager, Support,
    TensorInfo, Workload, WorkloadDesc, WorkloadFactory,
};

/// The benchmark backend: supports nothing.
#[derive(Debug, Default)]
pub struct BenchBackend;

/// Its workload factory: creates nothing.
#[derive(Debug)]
pub struct BenchFactory;

impl Backend for BenchBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new().with_bool("Benchmark", true)
    }

    fn is_layer_supported(
        &self,
        layer: &LayerDescriptor,
        _: &[TensorInfo],
        _: &[TensorInfo],
    ) -> Support {
        Support::unsupported(format!("the benchmark backend runs no {}", layer.kind()))
    }

    fn create_workload_factory(
        &self,
        _memory: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        Ok(Box::new(BenchFactory))
    }
}

impl WorkloadFactory for BenchFactory {
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
        Err(BackendError::unsupported(format!(
            "no workload for {}",
            desc.name
        )))
    }
}

backplane_api::export_backend!(id: "BenchId0000", vendor: "Bench", backend: BenchBackend::default);
