//! Execution: a loaded network (per backend a memory manager, workload factory and context;
//! the tensor arena; the workloads in order) and its runs, profiles and unloading.
//!
//! One type, [`LoadedNetwork`], defined here with its parts; its life cycle is one file per
//! stage, each adding to its `impl`:
//! 1. [`load`](self::load): backends set up, context hooks, memory planned by lifetime,
//!    workloads made (or restored from a compiled network's blobs), constants computed.
//! 2. [`bind`](self::bind): the caller's input and output buffers checked and bound, in place
//!    where alignment allows; device imports.
//! 3. [`run`](self::run): the workloads in order (in process, in device memory, or a segment
//!    per round trip out of process), then the device fence.
//! 4. [`profile`](self::profile): per-layer times of the runs.
//! 5. [`unload`](self::unload): the contexts asked, memory released, workloads destroyed.
//!
//! **Out of process.** The layers of a backend that runs in a child process
//! ([`crate::remote`]) are created there, and run there a segment (a run of consecutive
//! layers) per round trip; the network's tensors then live in shared memory that the child
//! maps too.
//!
//! **Threads.** A loaded network may be enqueued from several threads; its runs are
//! serialised (one set of intermediate buffers per network). Different networks run
//! concurrently. Input and Output layers are bound by the runtime, so they have no workload:
//! with every backend in this process, workloads read the caller's input buffers in place,
//! and the one workload that writes a tensor only an Output reads writes it into the caller's
//! buffer (when each buffer is aligned for its elements); other bindings are copied in and
//! out of the network's memory.
//!
//! Imports: `graph`, `plugins`, `remote`, `memory`, `sys`, `report`.

mod bind;
pub(crate) mod device;
mod error;
mod load;
mod profile;
mod run;
mod unload;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use backplane_api::{
    LayerKind, TensorInfo,
    ffi::{
        BackendContextHandle, BackendHandle, CallError, MemoryManagerHandle, WorkloadFactoryHandle,
        WorkloadHandle,
    },
};

use self::device::{DeviceBuffers, Transfer};
pub use self::{
    bind::{InputTensor, OutputTensor},
    error::{ExecuteError, NetworkId},
    profile::LayerProfile,
};
use crate::{
    graph::network::Layer,
    graph::optimizer::Boundary,
    memory::arena::{self, Arena},
    memory::memory_plan::MemoryPlan,
    remote::{
        RemoteBackend,
        protocol::{Hook, MemoryOp},
    },
};

/// Where a backend of the network runs.
#[allow(
    clippy::large_enum_variant,
    reason = "one per backend of a loaded network, made once at load and never moved after"
)]
enum Engine {
    /// In this process: its objects. Fields drop in order (the context before the instance).
    Local {
        context: Option<BackendContextHandle>,
        memory: Option<MemoryManagerHandle>,
        /// Kept for the life of the network (workloads may refer to it).
        _factory: WorkloadFactoryHandle,
        instance: BackendHandle,
    },
    /// In a child process: its objects are there, made for this network.
    Remote {
        server: Arc<RemoteBackend>,
        memory: bool,
        context: bool,
    },
}

struct BackendInUse {
    /// The backend's id (named when its context refuses an unload).
    id: String,
    network: NetworkId,
    engine: Engine,
    /// It computes in memory of its own (Backend API 1.3): its workloads run on its buffers.
    device: bool,
}

impl BackendInUse {
    fn is_faulted(&self) -> bool {
        match &self.engine {
            Engine::Local { instance, .. } => instance.fault_state().is_faulted(),
            Engine::Remote { server, .. } => server.fault_state().is_faulted(),
        }
    }

    fn has_context(&self) -> bool {
        match &self.engine {
            Engine::Local { context, .. } => context.is_some(),
            Engine::Remote { context, .. } => *context,
        }
    }

    /// The memory manager of a device backend.
    fn device_memory(&self) -> Option<&MemoryManagerHandle> {
        match &self.engine {
            Engine::Local { memory, .. } if self.device => memory.as_ref(),
            _ => None,
        }
    }

    fn remote(&self) -> Option<&Arc<RemoteBackend>> {
        match &self.engine {
            Engine::Remote { server, .. } => Some(server),
            Engine::Local { .. } => None,
        }
    }

    /// A context hook; `None` for a backend without a context.
    fn hook(&self, hook: Hook) -> Option<Result<(), CallError>> {
        let id = self.network;
        match &self.engine {
            Engine::Local { context, .. } => context.as_ref().map(|c| hook.call(c, id)),
            Engine::Remote {
                server, context, ..
            } => context.then(|| server.hook(id, hook)),
        }
    }

    /// A memory-manager call (the bytes held, for `AllocatedBytes`); `None` for a backend
    /// without a memory manager.
    fn memory(&self, op: MemoryOp) -> Option<Result<u64, CallError>> {
        match &self.engine {
            Engine::Local { memory, .. } => memory.as_ref().map(|m| op.call(m)),
            Engine::Remote { server, memory, .. } => {
                memory.then(|| server.memory(self.network, op))
            }
        }
    }
}

impl Drop for BackendInUse {
    /// An out-of-process backend drops what it holds for the network.
    fn drop(&mut self) {
        if let Engine::Remote { server, .. } = &self.engine {
            server.drop_network(self.network, false);
        }
    }
}

/// A tensor's info, where it lives in the arena, and its size (computed once, at load).
struct TensorSlot {
    info: TensorInfo,
    /// Its offset in the arena, or in the constants block when `constant`.
    offset: usize,
    bytes: usize,
    /// A Constant layer's value, held in the network's constants block.
    constant: bool,
}

impl TensorSlot {
    fn place(&self) -> arena::Place<'_> {
        arena::Place {
            offset: self.offset,
            bytes: self.bytes,
            info: &self.info,
        }
    }
}

/// Where a network's intermediate tensors live while it runs.
enum Scratch {
    /// An arena of its own, made at load: a network with an out-of-process backend, whose
    /// server maps it.
    Own(Mutex<Arena>),
    /// An arena of `bytes` taken from `pool` for each run and given back after it (in-process
    /// networks; a session's plans share one pool). `serial` keeps this network's runs one at
    /// a time, as its own arena's lock did.
    Pooled {
        pool: Arc<arena::Pool>,
        bytes: usize,
        serial: Mutex<()>,
    },
}

/// The arena a run uses: its own, locked, or one taken from a pool and given back on drop.
enum Held<'a> {
    Own(std::sync::MutexGuard<'a, Arena>),
    Pooled(&'a arena::Pool, Option<Arena>),
}

impl Held<'_> {
    fn arena(&mut self) -> &mut Arena {
        match self {
            Held::Own(guard) => guard,
            Held::Pooled(_, arena) => arena.as_mut().expect("held until dropped"),
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Held::Pooled(pool, arena) = self
            && let Some(arena) = arena.take()
        {
            pool.give(arena);
        }
    }
}

struct Step {
    layer: String,
    /// The layer's name in errors: with the layers a fused layer replaced (its debug handle).
    label: String,
    /// The layers a fused layer replaced (names in the network as imported); empty otherwise.
    origins: Vec<String>,
    kind: LayerKind,
    /// The backend that runs it (index in the network's backends; none for Input and Output).
    backend: Option<usize>,
    /// The workload, for a layer run in this process.
    workload: Option<WorkloadHandle>,
    /// The backend (index in the network's backends) when it runs out of process.
    remote: Option<usize>,
    inputs: Vec<usize>,
    output: usize,
    /// A MemCopy across a memory boundary, which the host runs itself (no workload).
    transfer: Option<Transfer>,
}

/// What `enqueue` runs, in order.
enum Unit {
    /// One workload in this process (a step index).
    Local(usize),
    /// One segment of an out-of-process backend: one round trip.
    Remote {
        backend: usize,
        segment: u32,
        /// Its steps, in order (to name the layer that failed).
        steps: Vec<usize>,
        /// The backend's last segment of an inference: its `after_enqueue` runs with it.
        after_enqueue: bool,
    },
}

/// A network ready to run.
pub struct LoadedNetwork {
    id: NetworkId,
    steps: Vec<Step>,
    units: Vec<Unit>,
    /// Per tensor (= per layer): where it lives.
    tensors: Vec<TensorSlot>,
    inputs: Vec<(String, usize)>,
    outputs: Vec<(String, usize)>,
    /// Per step: an Output layer whose tensor one in-process workload writes and nothing else
    /// reads (that workload may write into the caller's buffer).
    written_once: Vec<bool>,
    scratch: Scratch,
    /// In-process networks: the Constant layers' values, computed at load, each at its
    /// tensor's offset (`TensorSlot::constant`); empty otherwise (they are in the arena).
    constants: Arena,
    /// Tensors held in `constants`.
    constant_tensors: Vec<usize>,
    /// Constant tensors read in place from their layer (its descriptor or a mapped file).
    in_place: Vec<(usize, Layer)>,
    backends: Vec<BackendInUse>,
    plan: MemoryPlan,
    naive_bytes: usize,
    /// The buffers of the tensors in device memory.
    buffers: DeviceBuffers,
    /// The memory boundaries the network crosses: the MemCopy layer and its boundary.
    boundaries: Vec<(String, Boundary)>,
    /// Transfers run so far: copies (`copy_to_device`/`copy_to_host`) and imports.
    copies: AtomicU64,
    imports: AtomicU64,
    /// While profiling is on: the number of the `set_profiling` call that started the
    /// counts, and per unit the runs timed and their total time.
    profile: Mutex<Option<(u64, Vec<UnitTime>)>>,
    /// Calls of `set_profiling` so far (a run started before one adds nothing after it).
    profile_epoch: AtomicU64,
}

/// Runs timed and their total time, for one unit.
type UnitTime = (u64, Duration);

impl std::fmt::Debug for LoadedNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedNetwork")
            .field("id", &self.id)
            .field("layers", &self.steps.len())
            .finish_non_exhaustive()
    }
}

/// What a backend's memory manager holds, per backend of a network: `Ok(None)` for a backend
/// without one, `Err` when the query failed.
pub type BackendMemory = Vec<(String, Result<Option<u64>, CallError>)>;

impl LoadedNetwork {
    /// The planned peak of intermediate memory, and the naive sum of every tensor's size.
    pub fn memory(&self) -> (usize, usize) {
        (
            self.plan
                .peak_bytes()
                .saturating_add(self.constants.bytes().len()),
            self.naive_bytes,
        )
    }

    /// Bytes this network holds of its own: its constants block, or its whole arena when it
    /// has one (an out-of-process backend's network); a pooled arena is the pool's.
    pub fn own_bytes(&self) -> usize {
        let arena = match &self.scratch {
            Scratch::Own(a) => a.lock().unwrap_or_else(|e| e.into_inner()).bytes().len(),
            Scratch::Pooled { .. } => 0,
        };
        arena.saturating_add(self.constants.bytes().len())
    }

    /// The memory boundaries the network crosses (Backend API 1.3's device tensors): each
    /// MemCopy layer the host runs itself, and its boundary.
    pub fn boundaries(&self) -> &[(String, Boundary)] {
        &self.boundaries
    }

    /// Transfers run across memory boundaries since the network was loaded: `(copies,
    /// imports)`.
    pub fn transfers(&self) -> (u64, u64) {
        (
            self.copies.load(Ordering::Relaxed),
            self.imports.load(Ordering::Relaxed),
        )
    }

    /// Bytes of device memory the network's tensors take, over all device backends.
    pub fn device_bytes(&self) -> u64 {
        self.buffers.bytes()
    }

    /// Bytes each backend's memory manager holds now (`Ok(None)` for a backend without one,
    /// `Err` when the query failed).
    pub fn backend_memory(&self) -> BackendMemory {
        self.backends
            .iter()
            .map(|b| (b.id.clone(), b.memory(MemoryOp::AllocatedBytes).transpose()))
            .collect()
    }

    /// The backends in use that have not faulted.
    fn healthy(&self) -> impl Iterator<Item = &BackendInUse> {
        self.backends.iter().filter(|b| !b.is_faulted())
    }
}
