//! Test plugin `AbortFactory` (vendor `Test`): the backend constructor aborts the process.
//!
//! Nothing in a process can survive this: `catch_unwind` does not see an abort. Loaded in the
//! host's own process it would end the host, so tests load it only with isolation
//! (`CreationOptions::isolation`, CLI `--isolate`): the probe child dies of SIGABRT and the host
//! rejects the file with reason `crashed`, registers nothing, and goes on.

use std::sync::Arc;

use backplane_api::{
    Backend, BackendError, BackendResult, LayerDescriptor, MemoryManager, Support, TensorInfo,
    WorkloadFactory,
};

/// A backend that is never built.
#[derive(Debug)]
pub struct AbortFactory;

impl Default for AbortFactory {
    /// Aborts the process.
    fn default() -> Self {
        eprintln!("AbortFactory: aborting");
        std::process::abort()
    }
}

impl Backend for AbortFactory {
    fn is_layer_supported(
        &self,
        _: &LayerDescriptor,
        _: &[TensorInfo],
        _: &[TensorInfo],
    ) -> Support {
        Support::unsupported("unreachable: AbortFactory is never constructed")
    }

    fn create_workload_factory(
        &self,
        _memory: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        Err(BackendError::failed(
            "unreachable: AbortFactory is never constructed",
        ))
    }
}

backplane_api::export_backend!(id: "AbortFactory", vendor: "Test", backend: AbortFactory::default);
