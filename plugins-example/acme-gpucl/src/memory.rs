//! The GpuCl memory manager, one per network: the device buffers the host plans for that
//! network's tensors (Backend API 1.3, `backplane_api::device`).
//!
//! 1. [`allocate_buffer`](MemoryManager::allocate_buffer) makes a read-write OpenCL buffer and
//!    names it by a fresh id (unique in the process, never `NO_BUFFER`, 0) in the backend
//!    instance's table ([`Device`]), where that instance's workloads look it up; the manager
//!    remembers the ids it gave.
//! 2. [`copy_to_device`](MemoryManager::copy_to_device) and
//!    [`copy_to_host`](MemoryManager::copy_to_host) are blocking transfers: the host's memory
//!    may change once a write returns, and a read returns with the bytes in place (after the
//!    work queued before it: the queue is in order).
//! 3. [`import_host`](MemoryManager::import_host) wraps the caller's memory in a read-only
//!    `CL_MEM_USE_HOST_PTR` buffer; [`release_buffer`](MemoryManager::release_buffer) of an
//!    imported buffer waits for the queue first, so the device is done with that memory when
//!    it returns.
//! 4. [`finish`](MemoryManager::finish) waits for the queue. The queue is shared by every
//!    backend instance on the device (`device.rs`), so this also waits for what other networks
//!    queued before: correct, if less concurrent.
//! 5. [`release`](MemoryManager::release) (network unloaded) drops every buffer this manager
//!    made; [`allocated_bytes`](MemoryManager::allocated_bytes) sums those alive.
//!
//! An id this manager did not give (another manager's, of this or another backend instance;
//! one it released; `NO_BUFFER`) is `InvalidArgument`.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use backplane_api::{BackendError, BackendResult, BufferId, ErrorCode, HostRegion, MemoryManager};

use crate::{cl, device::Device};

/// A network's device memory (see the module documentation).
#[derive(Debug)]
pub struct GpuMemory {
    device: Arc<Device>,
    /// The ids this manager gave, with their sizes.
    owned: Mutex<HashMap<BufferId, u64>>,
}

impl GpuMemory {
    /// A manager of buffers on `device`.
    pub(crate) fn new(device: Arc<Device>) -> Self {
        Self {
            device,
            owned: Mutex::new(HashMap::new()),
        }
    }

    fn owned(&self) -> MutexGuard<'_, HashMap<BufferId, u64>> {
        // Only inserted into and removed from; a panic cannot leave it half done.
        self.owned.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Checks that `id` is one of this manager's buffers.
    fn check_owned(&self, id: BufferId) -> BackendResult<()> {
        if self.owned().contains_key(&id) {
            Ok(())
        } else {
            Err(BackendError::invalid_argument(format!(
                "GpuCl: unknown buffer id {id} (not allocated by this memory manager, or released)"
            )))
        }
    }
}

/// A transfer error: `Failed`, naming the operation.
fn transfer_error(what: &str, id: BufferId, e: String) -> BackendError {
    BackendError::failed(format!("GpuCl: {what} buffer {id}: {e}"))
}

impl MemoryManager for GpuMemory {
    fn acquire(&self) -> BackendResult<()> {
        Ok(())
    }

    fn release(&self) -> BackendResult<()> {
        let ids: Vec<BufferId> = self.owned().drain().map(|(id, _)| id).collect();
        let imported = ids
            .iter()
            .filter_map(|&id| self.device.forget(id))
            .any(|b| b.is_imported());
        if imported {
            self.device
                .gpu()
                .finish()
                .map_err(|e| BackendError::failed(format!("GpuCl: release: {e}")))?;
        }
        log::debug!("GpuCl: released {} buffer(s)", ids.len());
        Ok(())
    }

    fn allocated_bytes(&self) -> u64 {
        self.owned().values().sum()
    }

    fn allocate_buffer(&self, bytes: u64) -> BackendResult<BufferId> {
        let gpu = self.device.gpu();
        let oom = |why: String| {
            BackendError::new(
                ErrorCode::OutOfMemory,
                format!(
                    "GpuCl: cannot allocate a buffer of {bytes} bytes on {}: {why}",
                    gpu.name()
                ),
            )
        };
        if bytes > gpu.max_alloc() {
            return Err(oom(format!(
                "the device's largest buffer is {} bytes",
                gpu.max_alloc()
            )));
        }
        let size =
            usize::try_from(bytes).map_err(|_| oom("larger than the address space".into()))?;
        let buffer = gpu.create_buffer(size).map_err(|e| {
            if cl::is_out_of_memory(&e) {
                oom(cl::describe(&e))
            } else {
                BackendError::failed(format!(
                    "GpuCl: cannot allocate a buffer of {bytes} bytes: {}",
                    cl::describe(&e)
                ))
            }
        })?;
        let id = self.device.register(buffer);
        self.owned().insert(id, bytes);
        Ok(id)
    }

    fn release_buffer(&self, buffer: BufferId) -> BackendResult<()> {
        self.check_owned(buffer)?;
        self.owned().remove(&buffer);
        if let Some(b) = self.device.forget(buffer)
            && b.is_imported()
        {
            // The host's memory must be free of the device when this returns.
            self.device
                .gpu()
                .finish()
                .map_err(|e| transfer_error("release of imported", buffer, e))?;
        }
        Ok(())
    }

    fn copy_to_device(&self, buffer: BufferId, data: &[u8]) -> BackendResult<()> {
        self.check_owned(buffer)?;
        let b = self.device.buffer(buffer)?;
        if data.len() > b.bytes() {
            return Err(BackendError::invalid_argument(format!(
                "GpuCl: copy_to_device of {} bytes into buffer {buffer} of {} bytes",
                data.len(),
                b.bytes()
            )));
        }
        self.device
            .gpu()
            .write(&b, 0, data)
            .map_err(|e| transfer_error("copy_to_device into", buffer, e))
    }

    fn copy_to_host(&self, buffer: BufferId, data: &mut [u8]) -> BackendResult<()> {
        self.check_owned(buffer)?;
        let b = self.device.buffer(buffer)?;
        if data.len() > b.bytes() {
            return Err(BackendError::invalid_argument(format!(
                "GpuCl: copy_to_host of {} bytes from buffer {buffer} of {} bytes",
                data.len(),
                b.bytes()
            )));
        }
        self.device
            .gpu()
            .read(&b, data)
            .map_err(|e| transfer_error("copy_to_host from", buffer, e))
    }

    fn import_host(&self, region: HostRegion) -> BackendResult<Option<BufferId>> {
        if region.is_empty() {
            return Ok(None);
        }
        match self.device.gpu().import_host(region) {
            Ok(buffer) => {
                let id = self.device.register(buffer);
                self.owned().insert(id, region.len() as u64);
                Ok(Some(id))
            }
            Err(e) => {
                log::debug!(
                    "GpuCl: cannot import {} bytes of host memory ({}); the host copies",
                    region.len(),
                    cl::describe(&e)
                );
                Ok(None)
            }
        }
    }

    fn finish(&self) -> BackendResult<()> {
        self.device
            .gpu()
            .finish()
            .map_err(|e| BackendError::failed(format!("GpuCl: finish: {e}")))
    }
}

impl Drop for GpuMemory {
    fn drop(&mut self) {
        // A manager dropped without `release` still gives its buffers back.
        if !self.owned().is_empty()
            && let Err(e) = self.release()
        {
            log::warn!("GpuCl: dropping a memory manager: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{Backend, HostRegion};

    use crate::workloads::test_support::backend;

    #[test]
    fn buffers_round_trip_and_unknown_ids_are_refused() {
        let memory = backend().create_memory_manager().unwrap().unwrap();
        let id = memory.allocate_buffer(13).unwrap();
        assert_eq!(memory.allocated_bytes(), 13);
        let data: Vec<u8> = (0..13).collect();
        memory.copy_to_device(id, &data).unwrap();
        let mut back = vec![0u8; 13];
        memory.copy_to_host(id, &mut back).unwrap();
        assert_eq!(back, data);
        let mut big = vec![0u8; 14];
        let e = memory.copy_to_host(id, &mut big).unwrap_err();
        assert_eq!(e.code, backplane_api::ErrorCode::InvalidArgument, "{e}");
        for bad in [id + 1000, 0] {
            let e = memory.copy_to_host(bad, &mut back).unwrap_err();
            assert_eq!(e.code, backplane_api::ErrorCode::InvalidArgument, "{e}");
            assert!(e.message.contains("unknown buffer id"), "{e}");
            assert!(memory.copy_to_device(bad, &data).is_err());
            assert!(memory.release_buffer(bad).is_err());
        }
        // Another network's manager does not know this one's ids.
        let other = backend().create_memory_manager().unwrap().unwrap();
        assert_eq!(
            other.copy_to_host(id, &mut back).unwrap_err().code,
            backplane_api::ErrorCode::InvalidArgument
        );
        memory.release_buffer(id).unwrap();
        assert_eq!(memory.allocated_bytes(), 0);
        assert!(memory.copy_to_host(id, &mut back).is_err(), "released");
        memory.finish().unwrap();
    }

    #[test]
    fn import_host_round_trip() {
        let memory = backend().create_memory_manager().unwrap().unwrap();
        assert_eq!(memory.import_host(HostRegion::new(&[])).unwrap(), None);
        let data: Vec<u8> = (0..=255).collect();
        let id = memory
            .import_host(HostRegion::new(&data))
            .unwrap()
            .expect("pocl imports host memory");
        let mut back = vec![0u8; 256];
        memory.copy_to_host(id, &mut back).unwrap();
        assert_eq!(back, data);
        // Read-only: the host never writes through an imported buffer.
        assert!(memory.copy_to_device(id, &data).is_err());
        memory.release_buffer(id).unwrap();
        memory.release().unwrap();
    }

    #[test]
    fn absurd_allocations_are_out_of_memory() {
        let memory = backend().create_memory_manager().unwrap().unwrap();
        for bytes in [u64::MAX, 1 << 60] {
            let e = memory.allocate_buffer(bytes).unwrap_err();
            assert_eq!(e.code, backplane_api::ErrorCode::OutOfMemory, "{e}");
            assert!(e.message.contains(&format!("{bytes} bytes")), "{e}");
        }
        assert_eq!(memory.allocated_bytes(), 0);
        // A zero-byte buffer is fine.
        let id = memory.allocate_buffer(0).unwrap();
        memory.copy_to_device(id, &[]).unwrap();
        memory.release().unwrap();
    }
}
