//! The device a backend instance computes on: the OpenCL device ([`Gpu`]) with its compiled
//! program, shared by every backend instance of the process that chose the same device
//! ([`Shared`]), and the instance's own table of the buffers its memory managers made (by
//! [`BufferId`]).
//!
//! One [`Device`] per backend instance, shared (`Arc`) by its memory managers, workload
//! factories and workloads. The host makes an instance per loaded network and one when it
//! registers the plugin; they all find the same [`Shared`] in a process-wide cache (by platform
//! and device name) while one of them is alive: one context, one in-order queue and one
//! program. The registration instance lives as long as the runtime, so the program is built
//! once per runtime, on the first workload that needs it; later workloads, of any network,
//! only create kernel objects from it. When the last instance is dropped the context, queue and
//! program go with it.
//!
//! The queue is shared too, so a network's `finish` (and a blocking read or write) also waits
//! for work other networks queued before it on the same device. That is correct (each
//! network's commands still run in the order it queued them, and networks never share a
//! buffer), only not as concurrent as a queue per network would be.
//!
//! Buffer ids come from one process-wide counter that starts at 1, so no two managers (of any
//! instance) ever give the same id and no id is ever [`NO_BUFFER`] (0). The buffer table stays
//! per instance: a workload only finds the buffers of its own instance's managers, and a
//! manager only accepts the ids it gave (`memory.rs`).

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
};

use backplane_api::{BackendError, BackendResult, BufferId};
use opencl3::program::Program;

use crate::cl::{DeviceBuffer, Gpu, GpuKernel};

pub(crate) use backplane_api::NO_BUFFER;

/// The OpenCL C sources of every kernel, built together as one program.
const SOURCES: [&str; 5] = [
    include_str!("kernels/elementwise.cl"),
    include_str!("kernels/convolution.cl"),
    include_str!("kernels/matmul.cl"),
    include_str!("kernels/reduce.cl"),
    include_str!("kernels/movement.cl"),
];

/// The devices opened in this process: (platform name, device name, the device while any
/// backend instance holds it). Entries whose device is gone are removed when it drops.
static OPENED: Mutex<Vec<(String, String, Weak<Shared>)>> = Mutex::new(Vec::new());

/// The next buffer id, for every backend instance of the process (never [`NO_BUFFER`]).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// What every backend instance on one device shares: the opened device (context and in-order
/// queue) and the compiled program.
#[derive(Debug)]
pub(crate) struct Shared {
    gpu: Gpu,
    program: OnceLock<Result<Program, String>>,
    /// How many times the program was built (0 or 1).
    builds: AtomicUsize,
}

impl Shared {
    /// The kernel `name` of the program, building the program on first use.
    fn kernel(&self, name: &str) -> BackendResult<GpuKernel> {
        // Several threads may ask at once: one builds, the others wait for it.
        let program = self.program.get_or_init(|| {
            log::info!("GpuCl: building the OpenCL program for {}", self.gpu.name());
            self.builds.fetch_add(1, Ordering::Relaxed);
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

impl Drop for Shared {
    fn drop(&mut self) {
        // Never dropped under the `OPENED` lock: `Device::open` only clones (upgrades) while
        // it holds it. This entry's `Weak` is dead now, like any other dead one.
        let mut opened = OPENED.lock().unwrap_or_else(PoisonError::into_inner);
        opened.retain(|(_, _, shared)| shared.strong_count() > 0);
        if opened.is_empty() {
            // Nothing left on the heap once no instance is alive.
            *opened = Vec::new();
        }
        log::debug!("GpuCl: closed {}", self.gpu.name());
    }
}

/// A backend instance's device (see the module documentation).
#[derive(Debug)]
pub(crate) struct Device {
    shared: Arc<Shared>,
    buffers: Mutex<HashMap<BufferId, Arc<DeviceBuffer>>>,
}

impl Device {
    /// The first device whose name contains `selector`, or the default one (see
    /// [`Gpu::find`]): the one already open in this process if an instance holds it, else
    /// opened now. No buffers yet.
    ///
    /// # Errors
    /// What [`Gpu::find`] and [`Gpu::open`] say.
    pub(crate) fn open(selector: Option<&str>) -> Result<Self, String> {
        // Held while finding and opening, so two instances made at once open one context.
        // Lock order: `OPENED`, then `Gpu::find`'s discovery lock.
        let mut opened = OPENED.lock().unwrap_or_else(PoisonError::into_inner);
        let found = Gpu::find(selector)?;
        let alive = opened
            .iter()
            .filter(|(platform, name, _)| platform == found.platform() && name == found.name())
            .find_map(|(_, _, shared)| shared.upgrade());
        let shared = match alive {
            Some(shared) => {
                log::debug!("GpuCl: sharing the open {}", found.name());
                shared
            }
            None => {
                let key = (found.platform().to_owned(), found.name().to_owned());
                let shared = Arc::new(Shared {
                    gpu: Gpu::open(found)?,
                    program: OnceLock::new(),
                    builds: AtomicUsize::new(0),
                });
                opened.push((key.0, key.1, Arc::downgrade(&shared)));
                shared
            }
        };
        drop(opened);
        Ok(Self {
            shared,
            buffers: Mutex::new(HashMap::new()),
        })
    }

    /// The OpenCL device.
    pub(crate) fn gpu(&self) -> &Gpu {
        &self.shared.gpu
    }

    fn table(&self) -> MutexGuard<'_, HashMap<BufferId, Arc<DeviceBuffer>>> {
        // The table is only inserted into and removed from; a panic cannot leave it half done.
        self.buffers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `buffer` under a fresh id: unique in the process, never [`NO_BUFFER`].
    pub(crate) fn register(&self, buffer: DeviceBuffer) -> BufferId {
        let id = loop {
            // Starts at 1; only 2^64 registrations would wrap it to 0.
            let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
            if id != NO_BUFFER {
                break id;
            }
        };
        self.table().insert(id, Arc::new(buffer));
        id
    }

    /// The buffer named `id`.
    ///
    /// # Errors
    /// `InvalidArgument` for an id this backend instance did not give (or has released), and
    /// for [`NO_BUFFER`].
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

    /// The kernel `name` of the program, building the program on first use (once for every
    /// instance that shares this device).
    ///
    /// # Errors
    /// `Failed` with the compiler's log when the program does not build (on every call: a
    /// failed build is kept).
    pub(crate) fn kernel(&self, name: &str) -> BackendResult<GpuKernel> {
        self.shared.kernel(name)
    }

    /// The part shared with other instances on the same device.
    #[cfg(test)]
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

#[cfg(test)]
impl Shared {
    /// How many times the program was built.
    pub(crate) fn builds(&self) -> usize {
        self.builds.load(Ordering::Relaxed)
    }

    /// The compiled program, once built.
    pub(crate) fn program(&self) -> Option<&Program> {
        self.program.get().and_then(|p| p.as_ref().ok())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use backplane_api::{
        ActivationDescriptor, ActivationFunction, Backend, ErrorCode, LayerDescriptor, RSlice,
        RStr, WorkloadDesc,
    };

    use super::NO_BUFFER;
    use crate::{
        backend::GpuCl,
        workloads::test_support::{backend, f32t},
    };

    /// A ReLU workload made through `b`'s factory (it needs a kernel of the program).
    fn workload(b: &GpuCl) -> Box<dyn backplane_api::Workload> {
        let infos = [f32t(&[4])];
        let desc = WorkloadDesc {
            name: RStr::from_str("relu"),
            layer: &LayerDescriptor::Activation(ActivationDescriptor {
                function: ActivationFunction::ReLU,
                a: 0.0,
                b: 0.0,
            }),
            inputs: RSlice::from_slice(&infos),
            outputs: RSlice::from_slice(&infos),
            constants: RSlice::from_slice(&[backplane_api::ROption::RNone]),
        };
        b.create_workload_factory(None)
            .unwrap()
            .create_workload(&desc)
            .unwrap()
    }

    /// Instances made one after another (as the host makes one per network) share the opened
    /// device and its compiled program; their buffers stay their own.
    #[test]
    fn instances_share_the_program_not_the_buffers() {
        // The tests' backend stays alive for the whole run, like the host's registration
        // instance; these two come and go, like networks.
        let first = GpuCl::open(None).unwrap();
        let second = GpuCl::open(None).unwrap();
        let (d1, d2) = (first.device(), second.device());
        assert!(Arc::ptr_eq(d1.shared(), d2.shared()));
        assert!(Arc::ptr_eq(d1.shared(), backend().device().shared()));
        let (w1, w2) = (workload(&first), workload(&second));
        let shared = d1.shared();
        assert_eq!(shared.builds(), 1, "one build for every instance");
        assert!(std::ptr::eq(
            d1.shared().program().unwrap(),
            d2.shared().program().unwrap()
        ));

        // Each manager refuses the other's ids, and each instance's workloads only find the
        // buffers of its own managers.
        let (m1, m2) = (
            first.create_memory_manager().unwrap().unwrap(),
            second.create_memory_manager().unwrap().unwrap(),
        );
        let a = m1.allocate_buffer(16).unwrap();
        let b = m2.allocate_buffer(16).unwrap();
        assert!(a != b && a != NO_BUFFER && b != NO_BUFFER, "{a} {b}");
        let mut back = [0u8; 16];
        for (m, foreign) in [(&m1, b), (&m2, a)] {
            let e = m.copy_to_host(foreign, &mut back).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidArgument, "{e}");
            assert!(m.copy_to_device(foreign, &back).is_err());
            assert!(m.release_buffer(foreign).is_err());
        }
        let info = f32t(&[4]);
        let t = |buffer| backplane_api::DeviceTensor {
            info: &info,
            buffer,
        };
        let e = w2.execute_device(&[t(a)], &[t(b)]).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{e}");
        assert!(e.message.contains("unknown buffer id"), "{e}");
        // Their own buffers work, through the one queue.
        let bytes = |v: [f32; 4]| v.map(f32::to_le_bytes).concat();
        m1.copy_to_device(a, &bytes([-1.0, 2.0, -3.0, 4.0]))
            .unwrap();
        let a2 = m1.allocate_buffer(16).unwrap();
        w1.execute_device(&[t(a)], &[t(a2)]).unwrap();
        m1.finish().unwrap();
        m1.copy_to_host(a2, &mut back).unwrap();
        assert_eq!(back[..], bytes([0.0, 2.0, 0.0, 4.0]));
        m1.release().unwrap();
        m2.release().unwrap();
    }

    /// Networks on several threads at once, each with its own instance: one device, one
    /// program, one queue, and every result its own.
    #[test]
    fn instances_on_several_threads_share_one_queue() {
        let shared = Arc::clone(backend().device().shared());
        std::thread::scope(|scope| {
            for n in 0..4u8 {
                let shared = &shared;
                scope.spawn(move || {
                    let b = GpuCl::open(None).unwrap();
                    assert!(Arc::ptr_eq(b.device().shared(), shared));
                    let memory = b.create_memory_manager().unwrap().unwrap();
                    let w = workload(&b);
                    let info = f32t(&[4]);
                    let t = |buffer| backplane_api::DeviceTensor {
                        info: &info,
                        buffer,
                    };
                    let (x, y) = (
                        memory.allocate_buffer(16).unwrap(),
                        memory.allocate_buffer(16).unwrap(),
                    );
                    for i in 0..25u8 {
                        let v = f32::from(n) * 100.0 + f32::from(i) + 1.0;
                        let input = [v, -v, v + 0.5, -1.0].map(f32::to_le_bytes).concat();
                        memory.copy_to_device(x, &input).unwrap();
                        w.execute_device(&[t(x)], &[t(y)]).unwrap();
                        memory.finish().unwrap();
                        let mut back = [0u8; 16];
                        memory.copy_to_host(y, &mut back).unwrap();
                        let want = [v, 0.0, v + 0.5, 0.0].map(f32::to_le_bytes).concat();
                        assert_eq!(back[..], want, "thread {n}, run {i}");
                    }
                    memory.release().unwrap();
                });
            }
        });
        assert_eq!(shared.builds(), 1);
    }
}
