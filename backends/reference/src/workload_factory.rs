//! The CpuRef [`WorkloadFactory`].

use backplane_api::{
    BackendError, BackendResult, LayerDescriptor, Support, Workload, WorkloadDesc, WorkloadFactory,
};

use crate::{
    layer_support::is_layer_supported,
    workloads::{copy::CopyWorkload, elementwise::ElementwiseWorkload},
};

/// Creates CpuRef workloads.
#[derive(Debug)]
pub struct CpuRefWorkloadFactory;

impl WorkloadFactory for CpuRefWorkloadFactory {
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
        let (inputs, outputs) = (desc.inputs.as_slice(), desc.outputs.as_slice());
        if let Support::Unsupported(reason) = is_layer_supported(desc.layer, inputs, outputs) {
            return Err(BackendError::unsupported(format!(
                "layer {}: {reason}",
                desc.name
            )));
        }
        Ok(match desc.layer {
            LayerDescriptor::Input(_) | LayerDescriptor::Output(_) => Box::new(CopyWorkload),
            LayerDescriptor::ElementwiseBinary(op) => Box::new(ElementwiseWorkload::new(
                *op,
                &inputs[0],
                &inputs[1],
                &outputs[0],
            )),
            other => {
                return Err(BackendError::unsupported(format!(
                    "{} has no CpuRef workload",
                    other.kind()
                )));
            }
        })
    }
}
