//! The [`MemoryManager`] trait.

use crate::{
    BackendError, BackendResult,
    device::{BufferId, HostRegion},
};

fn host_memory_only(what: &str) -> BackendError {
    BackendError::unsupported(format!(
        "{what}: this backend computes in host memory (it does not declare DeviceMemory)"
    ))
}

/// A backend's memory manager (for example an arena for its intermediate buffers).
///
/// The entries after [`allocated_bytes`](Self::allocated_bytes) are Backend API 1.3's device
/// memory ([`crate::device`]): only a backend that declares
/// [`DeviceMemory`](crate::capabilities::names::DEVICE_MEMORY) implements them, and the host
/// calls them only on such a backend. Their defaults refuse.
pub trait MemoryManager: Send + Sync + 'static {
    /// Allocates what the backend needs; called before the first execution.
    fn acquire(&self) -> BackendResult<()>;

    /// Frees it again; called when the network is unloaded.
    fn release(&self) -> BackendResult<()>;

    /// Bytes currently held, for reports.
    fn allocated_bytes(&self) -> u64 {
        0
    }

    /// 1.3: a buffer of at least `bytes` bytes in the backend's memory. An allocation the
    /// device cannot give is an error ([`ErrorCode::OutOfMemory`](crate::ErrorCode) when that
    /// is the reason); the host then rolls the load back.
    fn allocate_buffer(&self, bytes: u64) -> BackendResult<BufferId> {
        let _ = bytes;
        Err(host_memory_only("allocate_buffer"))
    }

    /// 1.3: frees a buffer made by [`allocate_buffer`](Self::allocate_buffer) or
    /// [`import_host`](Self::import_host). For an imported one, the host's memory is no longer
    /// read after this returns, **even when it returns an error**: wait for the device first
    /// (the host has called `finish` just before, but a backend must not rely on that having
    /// succeeded).
    fn release_buffer(&self, buffer: BufferId) -> BackendResult<()> {
        let _ = buffer;
        Err(host_memory_only("release_buffer"))
    }

    /// 1.3: writes `data` at the start of `buffer` (the host's transfer into this backend's
    /// memory). The backend may queue the copy, but `data` may change once this returns.
    fn copy_to_device(&self, buffer: BufferId, data: &[u8]) -> BackendResult<()> {
        let _ = (buffer, data);
        Err(host_memory_only("copy_to_device"))
    }

    /// 1.3: reads the first `data.len()` bytes of `buffer` into `data`, after the work queued
    /// before it; the bytes are in place when this returns.
    fn copy_to_host(&self, buffer: BufferId, data: &mut [u8]) -> BackendResult<()> {
        let _ = (buffer, data);
        Err(host_memory_only("copy_to_host"))
    }

    /// 1.3, optional: a buffer that uses the caller's host memory `region` without copying it
    /// (read only). `Ok(None)`: not possible for this region (alignment, size, device); the
    /// host copies instead. The region stays valid and unchanged until the host releases the
    /// buffer.
    fn import_host(&self, region: HostRegion) -> BackendResult<Option<BufferId>> {
        let _ = region;
        Ok(None)
    }

    /// 1.3: waits until the work queued on this backend has finished (the fence). The host
    /// calls it at the end of every run.
    fn finish(&self) -> BackendResult<()> {
        Ok(())
    }
}
