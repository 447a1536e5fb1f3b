//! The [`WorkloadFactory`] and [`Workload`] traits.

use abi_stable::{
    StableAbi,
    std_types::{ROption, RSlice, RStr},
};

use crate::{
    BackendError, BackendResult, LayerDescriptor, TensorInfo, TensorView, TensorViewMut,
    device::DeviceTensor,
};

/// Everything needed to create the workload of one layer (or of one substituted layer).
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy)]
pub struct WorkloadDesc<'a> {
    /// The layer's name in the network (for messages).
    pub name: RStr<'a>,
    /// Kind and parameters.
    pub layer: &'a LayerDescriptor,
    /// The input tensors, in slot order.
    pub inputs: RSlice<'a, TensorInfo>,
    /// The output tensors, in slot order.
    pub outputs: RSlice<'a, TensorInfo>,
    /// For each input, its value when it is constant (weights, biases), in slot order.
    pub constants: RSlice<'a, ROption<RSlice<'a, u8>>>,
}

impl<'a> WorkloadDesc<'a> {
    /// The constant value of input `slot` as a view, if it is constant.
    pub fn constant(&self, slot: usize) -> Option<TensorView<'a>> {
        let data = *self.constants.as_slice().get(slot)?;
        let info: &'a TensorInfo = self.inputs.as_slice().get(slot)?;
        data.into_option().map(|d| TensorView { info, data: d })
    }
}

/// Creates workloads for the layers assigned to one backend.
pub trait WorkloadFactory: Send + Sync + 'static {
    /// Builds the workload of one layer.
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>>;
}

/// The executable form of one layer.
///
/// `execute` takes `&self` and may be called from several threads at once; a workload that
/// needs scratch memory keeps it behind its own lock or allocates per call.
pub trait Workload: Send + Sync + 'static {
    /// Runs the layer: reads `inputs`, writes every byte of `outputs`.
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()>;

    /// 1.3: runs the layer on tensors in the backend's own memory ([`crate::device`]): reads
    /// `inputs`, writes every byte of `outputs`. The host calls it instead of
    /// [`execute`](Self::execute) for every workload of a backend that declares
    /// [`DeviceMemory`](crate::capabilities::names::DEVICE_MEMORY); the work may still be
    /// queued when it returns (the memory manager's `finish` waits for it).
    fn execute_device(
        &self,
        inputs: &[DeviceTensor<'_>],
        outputs: &[DeviceTensor<'_>],
    ) -> BackendResult<()> {
        let _ = (inputs, outputs);
        Err(BackendError::unsupported(
            "execute_device: this workload computes in host memory",
        ))
    }
}
