//! Device tensors (Backend API 1.3): tensors that live in a backend's own memory.
//!
//! A backend that does not compute in host memory (a GPU, an NPU with its own memory) says so
//! with the capability [`DeviceMemory`](crate::capabilities::names::DEVICE_MEMORY) and then
//! provides, in its [`MemoryManager`](crate::MemoryManager):
//!
//! 1. [`allocate_buffer`](crate::MemoryManager::allocate_buffer) and
//!    [`release_buffer`](crate::MemoryManager::release_buffer): buffers of its memory, named
//!    by a [`BufferId`] it chooses. The host plans them by tensor lifetime, as it plans host
//!    memory: one buffer may hold several tensors one after another, so a buffer is asked for
//!    by size, the largest tensor it will hold.
//! 2. [`copy_to_device`](crate::MemoryManager::copy_to_device) and
//!    [`copy_to_host`](crate::MemoryManager::copy_to_host): the host's transfers across a
//!    memory boundary. `copy_to_host` returns with the bytes in place (after the work queued
//!    before it).
//! 3. Optionally [`import_host`](crate::MemoryManager::import_host): a caller's host buffer
//!    used as a device buffer without a copy (the capability
//!    [`HostMemoryImport`](crate::capabilities::names::HOST_MEMORY_IMPORT) tells the optimizer
//!    to plan for it). The host's memory stays valid and unchanged until it releases the
//!    imported buffer.
//! 4. [`finish`](crate::MemoryManager::finish): the fence. The host calls it at the end of
//!    every run, before it returns results, releases imported memory or tells the backend's
//!    context `after_enqueue`.
//!
//! Its workloads then run through [`Workload::execute_device`](crate::Workload::execute_device),
//! which hands them [`DeviceTensor`]s (a buffer of this backend and the tensor's info), never
//! host pointers. Constant inputs (weights, biases) reach `create_workload` as host bytes
//! ([`WorkloadDesc::constant`](crate::WorkloadDesc::constant)) and nowhere else: the backend
//! uploads what it needs once, and their slots in `execute_device` carry [`NO_BUFFER`]. The
//! host never hands a buffer of one backend to another: between two memories it inserts a
//! MemCopy and runs it itself, through these entries.
//!
//! A plugin built against 1.2 or older has none of these entries: whatever its capabilities
//! say, the host runs it in host memory.

use abi_stable::StableAbi;

use crate::TensorInfo;

/// A buffer in a backend's own memory, as the backend named it (never [`NO_BUFFER`]).
pub type BufferId = u64;

/// The buffer of a [`DeviceTensor`] that has none: a constant input, whose value the workload
/// was given at `create_workload` ([`WorkloadDesc::constant`](crate::WorkloadDesc::constant)).
/// A backend never names a buffer `0`; the host refuses one that does.
pub const NO_BUFFER: BufferId = 0;

/// A tensor in a backend's own memory, as its workloads see it.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy)]
pub struct DeviceTensor<'a> {
    /// Shape and element type.
    pub info: &'a TensorInfo,
    /// The buffer that holds it (from the backend's `allocate_buffer` or `import_host`); it
    /// holds at least `info.num_bytes()` bytes, the tensor at its start. [`NO_BUFFER`] for a
    /// constant input: its value came with the workload's description.
    pub buffer: BufferId,
}

/// A caller's host memory offered to [`import_host`](crate::MemoryManager::import_host).
///
/// The memory is valid for reading and unchanged from the call until the host releases the
/// buffer made from it ([`release_buffer`](crate::MemoryManager::release_buffer)); the backend
/// never writes it.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy)]
pub struct HostRegion {
    ptr: *const u8,
    len: usize,
}

impl HostRegion {
    /// The region of `data`. The host must keep `data` valid and unchanged until it releases
    /// the buffer the backend makes from it.
    pub fn new(data: &[u8]) -> Self {
        Self {
            ptr: data.as_ptr(),
            len: data.len(),
        }
    }

    /// The first byte's address (what a driver's "use host pointer" allocation takes).
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` for an empty region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
