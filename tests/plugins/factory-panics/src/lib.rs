//! Test plugin `PanicFactory` (vendor `Test`): the backend constructor panics with the message
//! `"constructor exploded"`.
//!
//! The export macro catches the panic inside the plugin: `BackendFactory` returns null and
//! `BackplaneTakeFactoryError` returns an error with code `Panicked` whose message contains
//! `"constructor exploded"`. The host must reject the file with reason `panicked` (not
//! `factory_failed`: the taken error says the factory panicked), carry the message, register
//! nothing, and keep running.

use std::sync::Arc;

use backplane_api::{
    Backend, BackendError, BackendResult, LayerDescriptor, MemoryManager, Support, TensorInfo,
    WorkloadFactory,
};

/// A backend that is never built.
#[derive(Debug)]
pub struct PanicFactory;

impl Default for PanicFactory {
    /// Panics with `"constructor exploded"`.
    fn default() -> Self {
        panic!("constructor exploded")
    }
}

impl Backend for PanicFactory {
    fn is_layer_supported(
        &self,
        _: &LayerDescriptor,
        _: &[TensorInfo],
        _: &[TensorInfo],
    ) -> Support {
        Support::unsupported("unreachable: PanicFactory is never constructed")
    }

    fn create_workload_factory(
        &self,
        _memory: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        Err(BackendError::failed(
            "unreachable: PanicFactory is never constructed",
        ))
    }
}

backplane_api::export_backend!(id: "PanicFactory", vendor: "Test", backend: PanicFactory::default);
