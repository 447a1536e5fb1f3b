//! The [`WorkloadFactory`] and [`Workload`] traits.

use abi_stable::{
    StableAbi,
    std_types::{ROption, RSlice, RStr, RVec},
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

/// Backend API 1.4: one workload prepared ahead of time ([`WorkloadFactory::prepare_workload`]),
/// in a format of the backend's own: packed or transformed weights, a compiled program.
/// A compiled network file stores it; the host never reads it.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct PreparedWorkload {
    /// The blob's format version: the backend's
    /// [`PREPARED_WORKLOAD_VERSION`](crate::capabilities::names::PREPARED_WORKLOAD_VERSION)
    /// capability when it was made.
    pub version: u32,
    /// The blob.
    pub bytes: RVec<u8>,
}

/// Backend API 1.4: a blob [`WorkloadFactory::prepare_workload`] made, handed back to
/// [`WorkloadFactory::restore_workload`]. `bytes` is a section of a compiled network file
/// (64-byte aligned when the file is mapped, at least 16 when it was read as bytes), valid for
/// the call only: the workload keeps what it needs.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy)]
pub struct PreparedBlob<'a> {
    /// The format version it was made with (the host restores only a blob of the version the
    /// backend declares now).
    pub version: u32,
    /// The blob's bytes, as the backend made them (the host checked their checksum).
    pub bytes: RSlice<'a, u8>,
}

/// Creates workloads for the layers assigned to one backend.
///
/// Ahead-of-time compilation (Backend API 1.4, ExecuTorch's `preprocess`/`init`): `backplane
/// compile` asks the factory to [`prepare`](Self::prepare_workload) each workload it would
/// create and stores the blobs in the compiled network file; loading that file
/// [`restores`](Self::restore_workload) each workload from its blob instead of creating it,
/// with the same description. Both are optional: a backend that prepares nothing is stored
/// as its layers, and its workloads are created at load as usual.
pub trait WorkloadFactory: Send + Sync + 'static {
    /// Builds the workload of one layer.
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>>;

    /// 1.4: the blob from which [`restore_workload`](Self::restore_workload) can make this
    /// workload faster than [`create_workload`](Self::create_workload) (the work
    /// `create_workload` does once done ahead of time), or `None` when there is nothing to
    /// gain. The blob must be self-contained apart from the description, and its `version`
    /// the backend's
    /// [`PREPARED_WORKLOAD_VERSION`](crate::capabilities::names::PREPARED_WORKLOAD_VERSION).
    /// The default prepares nothing.
    fn prepare_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Option<PreparedWorkload>> {
        let _ = desc;
        Ok(None)
    }

    /// 1.4: the workload of `desc` made from `blob`, a blob this backend prepared for the same
    /// description (constants included). The blob comes from a file: check it as untrusted
    /// input (lengths, counts, version) and refuse it with an error rather than panic. The
    /// default refuses.
    fn restore_workload(
        &self,
        desc: &WorkloadDesc<'_>,
        blob: PreparedBlob<'_>,
    ) -> BackendResult<Box<dyn Workload>> {
        let _ = (desc, blob);
        Err(BackendError::unsupported(
            "restore_workload: this backend prepares no workloads",
        ))
    }
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
