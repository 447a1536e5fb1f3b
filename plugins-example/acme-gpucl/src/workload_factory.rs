//! The GpuCl [`WorkloadFactory`]: routes the layer again (the host may ask for anything) with
//! the routing function that also answers layer support (`layer_support.rs`), then builds the
//! workload the route names. Every workload shares the backend's device:
//! its program (built once per process while an instance is alive) and its queue, shared with
//! the other instances on the device, and the instance's buffer table.

use std::sync::Arc;

use backplane_api::{BackendResult, Workload, WorkloadDesc, WorkloadFactory};
use backplane_backend_kit::support::Route;

use crate::{
    device::Device,
    layer_support::GpuClRoute,
    workloads::{convolution, elementwise, matmul, movement, pooling, reduce},
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
        let device = &self.device;
        match GpuClRoute::for_workload(&(), desc)? {
            GpuClRoute::Convolution => convolution::create(device, desc),
            GpuClRoute::Fused(op) => convolution::create_fused(device, desc, &op),
            GpuClRoute::MatMul => matmul::create(device, desc),
            GpuClRoute::Elementwise => elementwise::create(device, desc),
            GpuClRoute::Pooling => pooling::create(device, desc),
            GpuClRoute::Reduce => reduce::create(device, desc),
            GpuClRoute::Movement => movement::create(device, desc),
        }
    }
}
