//! The GpuCl [`Backend`]: the device it opened, capabilities, layer support, and the objects
//! it makes for each network (memory manager, workload factory), plus `optimize_subgraph`
//! (`fusion.rs`).

use std::sync::Arc;

use backplane_api::{
    Backend, BackendError, BackendResult, BinaryOperation, Capabilities, LayerDescriptor,
    LayerKind, MemoryManager, OptimizationViews, SubgraphView, Support, TensorInfo, Value,
    WorkloadFactory, capabilities::names,
};

use crate::{
    cl::Gpu, device::Device, fusion, layer_support, memory::GpuMemory,
    workload_factory::GpuClWorkloadFactory,
};

/// The environment variable that chooses the OpenCL device: a part of its name (as `clinfo
/// -l` prints it). Without it: the first GPU, else the first device of any type.
pub const DEVICE_VAR: &str = "BACKPLANE_GPUCL_DEVICE";

/// The layer kinds GpuCl runs, each reported as a capability of its name (in Float32).
const KINDS: [LayerKind; 19] = [
    LayerKind::Convolution2d,
    LayerKind::DepthwiseConvolution2d,
    LayerKind::FullyConnected,
    LayerKind::BatchMatMul,
    LayerKind::ElementwiseBinary,
    LayerKind::ElementwiseUnary,
    LayerKind::Activation,
    LayerKind::Pooling2d,
    LayerKind::Mean,
    LayerKind::Reduce,
    LayerKind::Softmax,
    LayerKind::LayerNormalization,
    LayerKind::BatchNormalization,
    LayerKind::Reshape,
    LayerKind::Flatten,
    LayerKind::Transpose,
    LayerKind::Concat,
    LayerKind::MemCopy,
    LayerKind::PreCompiled,
];

/// Acme's OpenCL backend.
#[derive(Debug)]
pub struct GpuCl {
    device: Arc<Device>,
}

impl GpuCl {
    /// A backend on the device [`DEVICE_VAR`] names (see there for the default).
    ///
    /// # Errors
    /// `Failed` when there is no OpenCL library, platform or device (the message says which):
    /// the host then rejects the plugin file (`factory_failed`) with it.
    pub fn from_env() -> BackendResult<Self> {
        let selector = std::env::var(DEVICE_VAR).ok().filter(|s| !s.is_empty());
        Self::open(selector.as_deref())
    }

    /// A backend on the first device whose name contains `selector`, or on the default one.
    ///
    /// # Errors
    /// As [`from_env`](Self::from_env).
    pub fn open(selector: Option<&str>) -> BackendResult<Self> {
        let gpu = Gpu::open(selector).map_err(|e| BackendError::failed(format!("GpuCl: {e}")))?;
        log::info!(
            "GpuCl: created on {} (platform {})",
            gpu.name(),
            gpu.platform()
        );
        Ok(Self {
            device: Arc::new(Device::new(gpu)),
        })
    }

    /// The OpenCL device's name.
    pub fn device_name(&self) -> &str {
        self.device.gpu().name()
    }
}

impl Backend for GpuCl {
    fn capabilities(&self) -> Capabilities {
        let gpu = self.device.gpu();
        let caps = Capabilities::new()
            .with_bool(names::DEVICE_MEMORY, true)
            .with_bool(names::HOST_MEMORY_IMPORT, true)
            .with_bool(names::NON_CONST_WEIGHTS, true)
            .with_bool(names::HAS_FP16, false)
            .with_bool("Float32", true)
            .with_bool("Fusion", true)
            .with("Device", Value::Str(gpu.name().into()))
            .with("Platform", Value::Str(gpu.platform().into()));
        let caps = BinaryOperation::ALL.iter().fold(caps, |caps, op| {
            caps.with_bool(&format!("ElementwiseBinary{op:?}"), true)
        });
        KINDS
            .iter()
            .fold(caps, |caps, kind| caps.with_bool(&kind.to_string(), true))
    }

    fn is_layer_supported(
        &self,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Support {
        layer_support::is_layer_supported(layer, inputs, outputs)
    }

    fn create_memory_manager(&self) -> BackendResult<Option<Arc<dyn MemoryManager>>> {
        Ok(Some(Arc::new(GpuMemory::new(Arc::clone(&self.device)))))
    }

    fn create_workload_factory(
        &self,
        _memory: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        // Workloads find buffers in the backend's table, whichever manager made them.
        Ok(Box::new(GpuClWorkloadFactory::new(Arc::clone(
            &self.device,
        ))))
    }

    fn optimize_subgraph(&self, subgraph: &SubgraphView<'_>) -> BackendResult<OptimizationViews> {
        Ok(fusion::optimize(subgraph))
    }
}
