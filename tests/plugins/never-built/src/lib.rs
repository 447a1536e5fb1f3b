//! The backend type of the test plugins whose factory never returns a backend (it panics,
//! fails, aborts the process or hangs). Such a plugin still has to name a [`Backend`] type for
//! `export_backend!`; [`NeverBuilt`] is that type, and each of its methods says it cannot be
//! reached, so no plugin has to write the impl again.

use std::sync::Arc;

use backplane_api::{
    Backend, BackendError, BackendResult, LayerDescriptor, MemoryManager, Support, TensorInfo,
    WorkloadFactory,
};

/// A backend that no factory ever returns.
#[derive(Debug)]
pub struct NeverBuilt;

impl Backend for NeverBuilt {
    fn is_layer_supported(
        &self,
        _: &LayerDescriptor,
        _: &[TensorInfo],
        _: &[TensorInfo],
    ) -> Support {
        Support::unsupported("unreachable: this test backend is never constructed")
    }

    fn create_workload_factory(
        &self,
        _memory: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        Err(BackendError::failed(
            "unreachable: this test backend is never constructed",
        ))
    }
}
