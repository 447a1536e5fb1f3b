//! Device memory in a loaded network (Backend API 1.3's device tensors): where each tensor
//! lives, the buffers planned by lifetime in each device backend's memory, and the transfers
//! the host runs across memory boundaries.
//!
//! A backend that computes in its own memory gets a MemCopy layer at every edge to another
//! memory (the optimizer puts one there, with its [`Boundary`]). The host runs that layer
//! itself: `copy_to_device` into the device backend's buffer, `copy_to_host` out of it (into
//! the caller's buffer when only a network output reads the tensor), an import of the
//! caller's input buffer where the backend can. The device backend's workloads get its
//! buffers ([`DeviceTensor`](backplane_api::DeviceTensor)), never host memory; a constant
//! input is `NO_BUFFER`, its value given with the workload's description.

use backplane_api::{BufferId, ffi::MemoryManagerHandle};

use crate::{
    graph::optimizer::{Boundary, HOST, Strategy},
    memory::memory_plan::{self, TensorLife},
};

/// Why device memory could not be set up (the loaded network turns it into its
/// `ExecuteError`).
#[derive(Debug)]
pub(crate) enum DeviceError {
    /// A boundary names a backend the network does not use.
    UnknownBackend(String),
    /// A device backend without a memory manager that has the device-memory entries.
    NoMemoryManager(String),
    /// A device allocation failed.
    Allocation {
        backend: String,
        bytes: u64,
        message: String,
    },
}

/// A MemCopy layer the host runs itself: from which memory to which (a device backend's
/// index among the network's backends, `None` for host memory), and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Transfer {
    pub from: Option<usize>,
    pub to: Option<usize>,
    pub strategy: Strategy,
}

impl Transfer {
    /// The transfer of `boundary`, with the backends' ids resolved to indices by `index`.
    pub fn of(
        boundary: &Boundary,
        index: impl Fn(&str) -> Option<usize>,
    ) -> Result<Self, DeviceError> {
        let side = |id: &str| match id {
            HOST => Ok(None),
            id => index(id)
                .map(Some)
                .ok_or_else(|| DeviceError::UnknownBackend(id.to_owned())),
        };
        Ok(Self {
            from: side(&boundary.from)?,
            to: side(&boundary.to)?,
            strategy: boundary.strategy,
        })
    }
}

/// The buffers of a network's device tensors.
#[derive(Debug, Default)]
pub(crate) struct DeviceBuffers {
    /// Per tensor: the buffer holding it, for a tensor in a device backend's memory.
    pub of: Vec<Option<BufferId>>,
    /// Every buffer allocated, with its backend's index and size.
    pub allocated: Vec<(usize, BufferId, u64)>,
}

impl DeviceBuffers {
    /// Plans the tensors whose `home` is a device backend by lifetime, per backend (as host
    /// memory is planned, each backend's tensors alone), and allocates each planned buffer in
    /// that backend's memory (`memory(b)`). On an error the buffers allocated so far are
    /// released.
    pub fn allocate<'m>(
        lives: &[TensorLife],
        home: &[Option<usize>],
        ids: &[&str],
        memory: impl Fn(usize) -> Option<&'m MemoryManagerHandle>,
    ) -> Result<Self, DeviceError> {
        let mut buffers = DeviceBuffers {
            of: vec![None; lives.len()],
            allocated: Vec::new(),
        };
        let mut devices: Vec<usize> = home.iter().flatten().copied().collect();
        devices.sort_unstable();
        devices.dedup();
        for b in devices {
            let Some(m) = memory(b) else {
                buffers.release(&memory);
                return Err(DeviceError::NoMemoryManager(ids[b].to_owned()));
            };
            // This backend's tensors only, in definition order (the planner's steps are the
            // network's layers, so lifetimes keep their meaning).
            let mine: Vec<usize> = (0..lives.len()).filter(|&t| home[t] == Some(b)).collect();
            let plan = memory_plan::plan(&mine.iter().map(|&t| lives[t]).collect::<Vec<_>>());
            let mut ids_of_buffer = Vec::with_capacity(plan.buffer_sizes.len());
            for &bytes in &plan.buffer_sizes {
                // Every buffer is at least one byte: a device allocation of zero is an error
                // on some drivers.
                let bytes = bytes.max(1) as u64;
                match m.allocate_buffer(bytes) {
                    Ok(id) => {
                        buffers.allocated.push((b, id, bytes));
                        ids_of_buffer.push(id);
                    }
                    Err(e) => {
                        buffers.release(&memory);
                        return Err(DeviceError::Allocation {
                            backend: ids[b].to_owned(),
                            bytes,
                            message: e.to_string(),
                        });
                    }
                }
            }
            for (k, &t) in mine.iter().enumerate() {
                buffers.of[t] = Some(ids_of_buffer[plan.buffer_of[k]]);
            }
        }
        Ok(buffers)
    }

    /// Releases every buffer (errors are logged: the memory manager's `release` frees what
    /// is left).
    pub fn release<'m>(&mut self, memory: impl Fn(usize) -> Option<&'m MemoryManagerHandle>) {
        for (b, id, _) in self.allocated.drain(..) {
            if let Some(m) = memory(b)
                && let Err(e) = m.release_buffer(id)
            {
                log::warn!("releasing device buffer {id}: {e}");
            }
        }
    }

    /// Bytes allocated in device memory.
    pub fn bytes(&self) -> u64 {
        self.allocated.iter().map(|(_, _, n)| n).sum()
    }
}
