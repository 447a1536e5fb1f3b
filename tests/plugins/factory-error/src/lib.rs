//! Test plugin `ErrFactory` (vendor `Test`): the backend constructor returns
//! `Err(BackendError::failed("no device found"))`.
//!
//! `BackendFactory` returns null and `BackplaneTakeFactoryError` returns that error (code
//! `Failed`). The host must report `factory_failed` with the message `"no device found"` and
//! register nothing.

use std::sync::Arc;

use backplane_api::{
    Backend, BackendError, BackendResult, LayerDescriptor, MemoryManager, Support, TensorInfo,
    WorkloadFactory,
};

/// The message of the constructor's error.
pub const MESSAGE: &str = "no device found";

/// A backend whose device is never found.
#[derive(Debug)]
pub struct ErrFactory;

impl ErrFactory {
    /// Always fails with [`MESSAGE`].
    pub fn try_new() -> BackendResult<Self> {
        Err(BackendError::failed(MESSAGE))
    }
}

impl Backend for ErrFactory {
    fn is_layer_supported(
        &self,
        _: &LayerDescriptor,
        _: &[TensorInfo],
        _: &[TensorInfo],
    ) -> Support {
        Support::unsupported("unreachable: ErrFactory is never constructed")
    }

    fn create_workload_factory(
        &self,
        _memory: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        Err(BackendError::failed(
            "unreachable: ErrFactory is never constructed",
        ))
    }
}

backplane_api::export_backend!(id: "ErrFactory", vendor: "Test", backend: ErrFactory::try_new);
