//! The device a backend instance computes on: the OpenCL device ([`Gpu`]), the table of every
//! buffer the backend's memory managers made (by [`BufferId`]), and the compiled program that
//! every workload's kernels come from.
//!
//! One [`Device`] per backend instance, shared (`Arc`) by its memory managers, workload
//! factories and workloads. The program is built once, on the first workload that needs it, and
//! kept: later workloads only create kernel objects from it.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard, OnceLock, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

use backplane_api::{BackendError, BackendResult, BufferId};
use opencl3::program::Program;

use crate::cl::{DeviceBuffer, Gpu, GpuKernel};

/// The OpenCL C sources of every kernel, built together as one program.
const SOURCES: [&str; 5] = [
    include_str!("kernels/elementwise.cl"),
    include_str!("kernels/convolution.cl"),
    include_str!("kernels/matmul.cl"),
    include_str!("kernels/reduce.cl"),
    include_str!("kernels/movement.cl"),
];

/// The opened device and what lives on it (see the module documentation).
#[derive(Debug)]
pub(crate) struct Device {
    gpu: Gpu,
    buffers: Mutex<HashMap<BufferId, Arc<DeviceBuffer>>>,
    next_id: AtomicU64,
    program: OnceLock<Result<Program, String>>,
}

impl Device {
    /// The device `gpu`, with no buffers yet.
    pub(crate) fn new(gpu: Gpu) -> Self {
        Self {
            gpu,
            buffers: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            program: OnceLock::new(),
        }
    }

    /// The OpenCL device.
    pub(crate) fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    fn table(&self) -> MutexGuard<'_, HashMap<BufferId, Arc<DeviceBuffer>>> {
        // The table is only inserted into and removed from; a panic cannot leave it half done.
        self.buffers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `buffer` under a fresh id.
    pub(crate) fn register(&self, buffer: DeviceBuffer) -> BufferId {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.table().insert(id, Arc::new(buffer));
        id
    }

    /// The buffer named `id`.
    ///
    /// # Errors
    /// `InvalidArgument` for an id this backend did not give (or has released).
    pub(crate) fn buffer(&self, id: BufferId) -> BackendResult<Arc<DeviceBuffer>> {
        self.table()
            .get(&id)
            .cloned()
            .ok_or_else(|| BackendError::invalid_argument(format!("GpuCl: unknown buffer id {id}")))
    }

    /// Removes `id` from the table; the memory is freed once the last workload that holds
    /// it lets go and the queued commands that use it are done (OpenCL's reference counts).
    pub(crate) fn forget(&self, id: BufferId) -> Option<Arc<DeviceBuffer>> {
        self.table().remove(&id)
    }

    /// The kernel `name` of the backend's program, building the program on first use.
    ///
    /// # Errors
    /// `Failed` with the compiler's log when the program does not build (on every call: a
    /// failed build is kept).
    pub(crate) fn kernel(&self, name: &str) -> BackendResult<GpuKernel> {
        let program = self.program.get_or_init(|| {
            log::info!("GpuCl: building the OpenCL program for {}", self.gpu.name());
            let built = self.gpu.build_program(&SOURCES);
            if let Err(e) = &built {
                log::warn!("GpuCl: the OpenCL program does not build: {e}");
            }
            built
        });
        let program = program.as_ref().map_err(|e| {
            BackendError::failed(format!(
                "GpuCl: the OpenCL program does not build on {}: {e}",
                self.gpu.name()
            ))
        })?;
        self.gpu
            .kernel(program, name)
            .map_err(|e| BackendError::failed(format!("GpuCl: {e}")))
    }
}
