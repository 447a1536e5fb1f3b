//! Test plugin `TestBeta` (vendor `Test`): a backend that loads fine but can run nothing.
//!
//! Every layer is refused with the reason `"TestBeta supports no layers"`; its workload factory
//! returns an error for every layer. Capabilities: `TestBetaCapability = true`.
//!
//! Failure mode: none at load time. The host must report it `registered` as `TestBeta`; the
//! optimizer must never assign it a layer.

use std::sync::Arc;

use backplane_api::{
    Backend, BackendError, BackendResult, Capabilities, LayerDescriptor, MemoryManager, Support,
    TensorInfo, Workload, WorkloadDesc, WorkloadFactory,
};

/// The reason every layer is refused with.
pub const REFUSAL: &str = "TestBeta supports no layers";

/// The `TestBeta` backend.
#[derive(Debug, Default)]
pub struct TestBeta;

impl Backend for TestBeta {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new().with_bool("TestBetaCapability", true)
    }

    fn is_layer_supported(
        &self,
        _: &LayerDescriptor,
        _: &[TensorInfo],
        _: &[TensorInfo],
    ) -> Support {
        Support::unsupported(REFUSAL)
    }

    fn create_workload_factory(
        &self,
        _memory: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        Ok(Box::new(BetaWorkloadFactory))
    }
}

/// A workload factory that creates nothing.
#[derive(Debug)]
pub struct BetaWorkloadFactory;

impl WorkloadFactory for BetaWorkloadFactory {
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
        Err(BackendError::unsupported(format!(
            "layer {} ({}): {REFUSAL}",
            desc.name,
            desc.layer.kind()
        )))
    }
}

backplane_api::export_backend!(id: "TestBeta", vendor: "Test", backend: TestBeta::default);
