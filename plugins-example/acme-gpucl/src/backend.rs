//! The GpuCl [`Backend`]: the device it opened, capabilities, layer support, and the objects
//! it makes for each network (memory manager, workload factory), plus `optimize_subgraph`
//! (`fusion.rs`).

use std::sync::Arc;

use backplane_api::{
    Backend, BackendError, BackendResult, Capabilities, LayerDescriptor, LayerKind, MemoryManager,
    OptimizationViews, SubgraphView, Support, TensorInfo, Value, WorkloadFactory,
    capabilities::names,
};
use backplane_backend_kit::capabilities;

use crate::{
    device::Device, fusion, layer_support, memory::GpuMemory,
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
    /// While another instance on that device is alive in this process, this one shares its
    /// OpenCL context, queue and compiled program (`device.rs`); its buffers are its own.
    ///
    /// # Errors
    /// As [`from_env`](Self::from_env).
    pub fn open(selector: Option<&str>) -> BackendResult<Self> {
        let device =
            Device::open(selector).map_err(|e| BackendError::failed(format!("GpuCl: {e}")))?;
        log::info!(
            "GpuCl: created on {} (platform {})",
            device.gpu().name(),
            device.gpu().platform()
        );
        Ok(Self {
            device: Arc::new(device),
        })
    }

    /// The OpenCL device's name.
    pub fn device_name(&self) -> &str {
        self.device.gpu().name()
    }

    /// The instance's device.
    #[cfg(test)]
    pub(crate) fn device(&self) -> &Device {
        &self.device
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
        capabilities::with_layer_kinds(capabilities::with_all_binary_operations(caps), &KINDS)
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

#[cfg(test)]
mod tests {
    use backplane_api::{ActivationDescriptor, ActivationFunction, DataType, capabilities::names};

    use super::*;
    use crate::workloads::test_support::{backend, f32t};

    #[test]
    fn capabilities_declare_device_memory() {
        let caps = backend().capabilities();
        for name in [
            names::DEVICE_MEMORY,
            names::HOST_MEMORY_IMPORT,
            names::NON_CONST_WEIGHTS,
            "Float32",
            "Fusion",
            "Convolution2d",
            "BatchMatMul",
            "LayerNormalization",
            "MemCopy",
            "ElementwiseBinaryPower",
        ] {
            assert!(caps.is_enabled(name), "{name}");
        }
        assert!(!caps.is_enabled(names::HOST_MEMORY));
        assert!(!caps.is_enabled(names::HAS_FP16));
        assert!(matches!(caps.get("Device"), Some(Value::Str(_))));
    }

    #[test]
    fn a_device_that_is_not_there_is_a_factory_error() {
        let e = GpuCl::open(Some("no such device, surely")).unwrap_err();
        assert_eq!(e.code, backplane_api::ErrorCode::Failed);
        assert!(
            e.message
                .starts_with("GpuCl: no OpenCL device whose name contains"),
            "{e}"
        );
        // The chosen device, by a part of its name.
        let name = backend().device_name().to_owned();
        let part = &name[..name.len().min(6)];
        assert_eq!(GpuCl::open(Some(part)).unwrap().device_name(), name);
    }

    #[test]
    fn refusals_say_why() {
        let b = backend();
        let reason = |s: Support| match s {
            Support::Supported => "supported".to_owned(),
            Support::Unsupported(r) => r.to_string(),
        };
        let relu = LayerDescriptor::Activation(ActivationDescriptor {
            function: ActivationFunction::ReLU,
            a: 0.0,
            b: 0.0,
        });
        let x = [f32t(&[4])];
        assert_eq!(reason(b.is_layer_supported(&relu, &x, &x)), "supported");
        let half = [TensorInfo::new(&[4], DataType::Float16)];
        assert_eq!(
            reason(b.is_layer_supported(&relu, &half, &half)),
            "GpuCl: only Float32, got Float16"
        );
        assert_eq!(
            reason(b.is_layer_supported(&LayerDescriptor::Input("x".into()), &[], &x)),
            "GpuCl: Input layers are the host's (it feeds inputs, reads outputs and holds constants)"
        );
        let c = backplane_api::ConstTensor::from_f32(&[4], &[0.0; 4]);
        assert!(
            reason(b.is_layer_supported(&LayerDescriptor::Constant(c), &[], &x))
                .starts_with("GpuCl: Constant layers are the host's")
        );
        assert_eq!(
            reason(b.is_layer_supported(&LayerDescriptor::Where, &x, &x)),
            "GpuCl: Where is not supported (falls back)"
        );
        assert_eq!(
            reason(b.is_layer_supported(&relu, &x, &[f32t(&[5])])),
            "GpuCl: output shapes [[5]] differ from the expected [[4]]"
        );
        let ints = [TensorInfo::new(&[4], DataType::Signed32)];
        assert_eq!(
            reason(b.is_layer_supported(&LayerDescriptor::MemCopy, &ints, &ints)),
            "GpuCl: only Float32, got Signed32"
        );
        assert_eq!(
            reason(b.is_layer_supported(&LayerDescriptor::MemCopy, &x, &x)),
            "supported"
        );
        let bn = LayerDescriptor::BatchNormalization(backplane_api::BatchNormalizationDescriptor {
            epsilon: 1e-5,
            layout: backplane_api::DataLayout::Nchw,
        });
        let p = f32t(&[2]);
        let xs = [f32t(&[1, 2, 3, 3])];
        assert_eq!(
            reason(b.is_layer_supported(
                &bn,
                &[xs[0].clone(), p.clone(), p.clone(), p.clone(), p],
                &xs
            )),
            "GpuCl: batch normalisation parameter 1 is not constant (they are folded when the workload is made)"
        );
    }

    /// The host-memory entry is refused: GpuCl computes in device memory only.
    #[test]
    fn plain_execute_is_unsupported() {
        use backplane_api::{RSlice, RStr, TensorView, TensorViewMut, WorkloadDesc};
        let b = backend();
        let factory = b.create_workload_factory(None).unwrap();
        let relu = LayerDescriptor::Activation(ActivationDescriptor {
            function: ActivationFunction::ReLU,
            a: 0.0,
            b: 0.0,
        });
        let info = [f32t(&[1])];
        let desc = WorkloadDesc {
            name: RStr::from_str("relu"),
            layer: &relu,
            inputs: RSlice::from_slice(&info),
            outputs: RSlice::from_slice(&info),
            constants: RSlice::from_slice(&[backplane_api::ROption::RNone]),
        };
        let w = factory.create_workload(&desc).unwrap();
        let (x, mut y) = ([0u8; 4], [0u8; 4]);
        let e = w
            .execute(
                &[TensorView::new(&info[0], &x)],
                &mut [TensorViewMut::new(&info[0], &mut y)],
            )
            .unwrap_err();
        assert_eq!(e.code, backplane_api::ErrorCode::Unsupported);
    }
}
