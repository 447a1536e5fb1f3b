//! The GpuCl [`WorkloadFactory`]: checks layer support again (the host may ask for anything),
//! then builds the workload of the layer's kind. Every workload shares the backend's device:
//! its program (built once per process while an instance is alive) and its queue, shared with
//! the other instances on the device, and the instance's buffer table.

use std::sync::Arc;

use backplane_api::{
    BackendError, BackendResult, LayerDescriptor, Support, Workload, WorkloadDesc, WorkloadFactory,
};

use crate::{
    device::Device,
    fused_op::FusedOp,
    layer_support::is_layer_supported,
    workloads::{convolution, elementwise, invalid_layer, matmul, movement, pooling, reduce},
};

/// Creates GpuCl workloads on one device.
#[derive(Debug)]
pub struct GpuClWorkloadFactory {
    device: Arc<Device>,
}

impl GpuClWorkloadFactory {
    /// A factory of workloads on `device`.
    pub(crate) fn new(device: Arc<Device>) -> Self {
        Self { device }
    }
}

impl WorkloadFactory for GpuClWorkloadFactory {
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
        if let Support::Unsupported(reason) =
            is_layer_supported(desc.layer, &desc.inputs, &desc.outputs)
        {
            return Err(BackendError::unsupported(format!(
                "layer {}: {reason}",
                desc.name
            )));
        }
        let device = &self.device;
        match desc.layer {
            LayerDescriptor::Convolution2d(_) | LayerDescriptor::DepthwiseConvolution2d(_) => {
                convolution::create(device, desc)
            }
            LayerDescriptor::PreCompiled(p) => {
                // Decoded again: the payload is untrusted until checked (layer support did).
                let op = FusedOp::decode(&p.payload).map_err(|e| invalid_layer(desc, e))?;
                convolution::create_fused(device, desc, &op)
            }
            LayerDescriptor::FullyConnected(_) | LayerDescriptor::BatchMatMul(_) => {
                matmul::create(device, desc)
            }
            LayerDescriptor::Activation(_)
            | LayerDescriptor::ElementwiseUnary(_)
            | LayerDescriptor::ElementwiseBinary(_)
            | LayerDescriptor::BatchNormalization(_) => elementwise::create(device, desc),
            LayerDescriptor::Pooling2d(_) => pooling::create(device, desc),
            LayerDescriptor::Mean(_)
            | LayerDescriptor::Reduce(_)
            | LayerDescriptor::Softmax(_)
            | LayerDescriptor::LayerNormalization(_) => reduce::create(device, desc),
            LayerDescriptor::Reshape(_)
            | LayerDescriptor::Flatten(_)
            | LayerDescriptor::MemCopy
            | LayerDescriptor::Transpose(_)
            | LayerDescriptor::Concat(_) => movement::create(device, desc),
            other => Err(BackendError::unsupported(format!(
                "layer {}: GpuCl has no workload for {}",
                desc.name,
                other.kind()
            ))),
        }
    }
}
