//! Test plugin `WrongRef` (vendor `Test`): CpuRef with exactly one wrong kernel.
//!
//! Every layer is CpuRef's (`backplane-ref`), claimed and run as CpuRef does, except
//! `Activation` `ReLU`, which runs CpuRef's `LeakyReLU` with slope 0.01: positive inputs
//! and zero come out right, a negative `x` gives `0.01 * x` instead of 0. The error is at
//! most 1% of the input's magnitude, small enough to pass a glance at the output, and it is
//! the kind of slip (a shared activation kernel called with the wrong function) that a
//! conformance kit comparing CpuRef with itself could never see.
//!
//! The conformance kit must report exactly the ReLU cases of its layer suite as failed
//! (`tests/integration/tests/oracle.rs`).

use std::sync::Arc;

use backplane_api::{
    ActivationDescriptor, ActivationFunction, Backend, BackendResult, Capabilities,
    LayerDescriptor, MemoryManager, Support, TensorInfo, Workload, WorkloadDesc, WorkloadFactory,
};
use backplane_ref::CpuRef;

/// The id this plugin exports.
pub const ID: &str = "WrongRef";

/// The slope the wrong ReLU gives negative inputs (a right ReLU gives them 0).
pub const WRONG_SLOPE: f32 = 0.01;

/// CpuRef with a wrong ReLU.
#[derive(Debug, Default)]
pub struct WrongRef {
    inner: CpuRef,
}

impl WrongRef {
    /// A new instance.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Backend for WrongRef {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn is_layer_supported(
        &self,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Support {
        self.inner.is_layer_supported(layer, inputs, outputs)
    }

    fn create_workload_factory(
        &self,
        memory: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        Ok(Box::new(WrongFactory {
            inner: self.inner.create_workload_factory(memory)?,
        }))
    }
}

/// CpuRef's workload factory, with ReLU swapped for a leaky one.
struct WrongFactory {
    inner: Box<dyn WorkloadFactory>,
}

impl WorkloadFactory for WrongFactory {
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
        match desc.layer {
            LayerDescriptor::Activation(d) if d.function == ActivationFunction::ReLU => {
                // The one wrong kernel.
                let leaky = LayerDescriptor::Activation(ActivationDescriptor {
                    function: ActivationFunction::LeakyReLU,
                    a: WRONG_SLOPE,
                    b: 0.0,
                });
                self.inner.create_workload(&WorkloadDesc {
                    layer: &leaky,
                    ..*desc
                })
            }
            _ => self.inner.create_workload(desc),
        }
    }
}

backplane_api::export_backend!(id: "WrongRef", vendor: "Test", backend: WrongRef::new);
