//! The CpuRef [`Backend`].

use std::sync::Arc;

use backplane_api::{
    Backend, BackendResult, Capabilities, LayerDescriptor, MemoryManager, Support, TensorInfo,
    WorkloadFactory, capabilities::names,
};

use crate::{layer_support, workload_factory::CpuRefWorkloadFactory};

/// The reference CPU backend.
#[derive(Debug, Default)]
pub struct CpuRef;

impl CpuRef {
    /// A new instance.
    pub fn new() -> Self {
        Self
    }
}

impl Backend for CpuRef {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with_bool(names::NON_CONST_WEIGHTS, true)
            .with_bool(names::HOST_MEMORY, true)
            .with_bool(names::HAS_FP16, false)
    }

    fn is_layer_supported(
        &self,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Support {
        layer_support::is_layer_supported(layer, inputs, outputs)
    }

    fn create_workload_factory(
        &self,
        _memory: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        Ok(Box::new(CpuRefWorkloadFactory))
    }
}
