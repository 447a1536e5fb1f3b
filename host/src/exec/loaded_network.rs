//! Loaded networks: per backend a memory manager, a workload factory and a context; one
//! workload per layer; intermediate memory planned by lifetime; the context hooks in Arm NN's
//! order.
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

use smallvec::SmallVec;
use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use backplane_api::{
    BufferId, DeviceTensor, LayerDescriptor, LayerKind, NO_BUFFER, PreparedBlob, RSlice,
    TensorInfo,
    ffi::{
        BackendContextHandle, BackendHandle, CallError, MemoryManagerHandle, WorkloadFactoryHandle,
        WorkloadHandle,
    },
};

use super::device::{DeviceBuffers, DeviceError, Transfer};
use crate::{
    graph::network::Layer,
    graph::optimizer::{Boundary, OptimizedNetwork, Strategy},
    memory::arena::{self, Arena},
    memory::memory_plan::{self, MemoryPlan, TensorLife},
    plugins::registry::BackendRegistry,
    remote::{
        RemoteBackend,
        protocol::{Hook, MemoryOp, Request, Slot, WireStep},
    },
    sys::shm::SharedMemory,
};

/// Identifies a loaded network within its runtime.
pub type NetworkId = u64;

/// Why a network could not be loaded, run or unloaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecuteError {
    /// No loaded network has this id.
    #[error("no loaded network {0}")]
    UnknownNetwork(NetworkId),
    /// A backend the network was optimised for is not registered in this runtime.
    #[error("backend {0} is not registered in this runtime")]
    UnknownBackend(String),
    /// A backend could not be instantiated.
    #[error("backend {backend}: {message}")]
    Instance {
        /// The backend.
        backend: String,
        /// Why.
        message: String,
    },
    /// A call into a backend failed while handling `layer` (or the network as a whole).
    #[error("layer {layer}: {error}")]
    Backend {
        /// The layer (or `"<network>"` for hooks and memory managers).
        layer: String,
        /// The backend's error.
        error: CallError,
    },
    /// The inputs or outputs handed to `enqueue` do not match the network.
    #[error("{0}")]
    Binding(String),
    /// A device backend could not allocate a buffer of its memory (the load is rolled back).
    #[error(
        "network {network}: backend {backend} could not allocate {bytes} bytes of device memory: \
         {message}"
    )]
    DeviceMemory {
        /// The network.
        network: NetworkId,
        /// The device backend.
        backend: String,
        /// The size asked for.
        bytes: u64,
        /// The backend's error.
        message: String,
    },
    /// A context refused to unload the network; it stays loaded.
    #[error("network {network} stays loaded: backend {backend} refused to unload it: {reason}")]
    UnloadRefused {
        /// The network.
        network: NetworkId,
        /// The backend whose context refused.
        backend: String,
        /// Its reason.
        reason: String,
    },
}

/// What a backend's memory manager holds, per backend of a network: `Ok(None)` for a backend
/// without one, `Err` when the query failed.
pub type BackendMemory = Vec<(String, Result<Option<u64>, CallError>)>;

/// A tensor handed to or returned from `enqueue`.
#[derive(Debug)]
pub struct InputTensor<'a> {
    /// The network input's name.
    pub name: &'a str,
    /// Its shape and type, which must match the network's.
    pub info: &'a TensorInfo,
    /// Its bytes (densely packed, row-major, little-endian).
    pub data: &'a [u8],
}

/// A buffer `enqueue` writes one network output into.
#[derive(Debug)]
pub struct OutputTensor<'a> {
    /// The network output's name.
    pub name: &'a str,
    /// Its shape and type, which must match the network's.
    pub info: &'a TensorInfo,
    /// Where the bytes go.
    pub data: &'a mut [u8],
}

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

impl TensorSlot {
    fn place(&self) -> arena::Place<'_> {
        arena::Place {
            offset: self.offset,
            bytes: self.bytes,
            info: &self.info,
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

/// The rest of a run, given the device buffers that stand for imported network inputs.
type RunWithImports<'a> = dyn FnMut(&[(usize, BufferId)]) -> Result<(), ExecuteError> + 'a;

/// A network input a device backend may use in the caller's buffer during one run.
struct Import<'a> {
    /// The MemCopy's tensor the imported buffer stands for.
    tensor: usize,
    /// The device backend (index among the network's).
    backend: usize,
    data: &'a [u8],
    layer: &'a str,
}

/// How far a load got before it failed.
#[derive(Default)]
struct Progress {
    /// Backends whose context (if any) was told `before_load_network`.
    loading: usize,
    /// Backends whose memory manager (if any) acquired its memory.
    acquired: usize,
}

/// Undoes a failed load (its workloads are already destroyed): memory that was acquired is
/// released, and contexts that were told `before_load_network` are told
/// `after_unload_network`, so that a backend keeps no state for a network that never loaded.
/// Faulted backends are not called; errors here are logged (the load's own error is the one
/// reported).
fn roll_back(id: NetworkId, acquired: &[BackendInUse], loading: &[BackendInUse]) {
    let healthy = |b: &&BackendInUse| !b.is_faulted();
    for b in acquired.iter().filter(healthy) {
        if let Some(Err(e)) = b.memory(MemoryOp::Release) {
            log::warn!("network {id}: undoing a failed load: {e}");
        }
    }
    for b in loading.iter().filter(healthy) {
        if let Some(Err(e)) = b.hook(Hook::AfterUnload) {
            log::warn!("network {id}: undoing a failed load: {e}");
        }
    }
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

/// The time one unit of a network took over the runs timed since profiling was turned on
/// ([`LoadedNetwork::set_profiling`]; onnxruntime's `enable_profiling`, Arm NN's profiler).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerProfile {
    /// The layer's name (a fused layer's own name); for a segment of an out-of-process
    /// backend, which is timed as one round trip, its first and last layers.
    pub layer: String,
    /// The layer's kind (a segment's first layer's).
    pub kind: LayerKind,
    /// The backend that ran it.
    pub backend: String,
    /// For a fused layer, the layers it stands for (their names in the network as imported:
    /// the model's node names), its debug handle ([`crate::graph::optimizer::Assignment::origins`]);
    /// empty otherwise.
    pub origins: Vec<String>,
    /// Runs timed.
    pub runs: u64,
    /// Their total time, from the call into the backend to its return (arena views
    /// included).
    pub total: Duration,
}

impl std::fmt::Debug for LoadedNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedNetwork")
            .field("id", &self.id)
            .field("layers", &self.steps.len())
            .finish_non_exhaustive()
    }
}

fn backend_error(layer: &str) -> impl FnOnce(CallError) -> ExecuteError + '_ {
    move |error| ExecuteError::Backend {
        layer: layer.to_owned(),
        error,
    }
}

/// The error of a network's device memory.
fn device_error(network: NetworkId, e: DeviceError) -> ExecuteError {
    match e {
        DeviceError::UnknownBackend(b) => ExecuteError::UnknownBackend(b),
        DeviceError::NoMemoryManager(backend) => ExecuteError::Instance {
            message: format!(
                "backend {backend} declares DeviceMemory but made no memory manager with the \
                 device-memory entries"
            ),
            backend,
        },
        DeviceError::Allocation {
            backend,
            bytes,
            message,
        } => ExecuteError::DeviceMemory {
            network,
            backend,
            bytes,
            message,
        },
    }
}

/// The error of a layer whose tensors do not fit the arena (a broken plan: a host bug).
fn arena_error(layer: &str) -> ExecuteError {
    ExecuteError::Binding(format!(
        "layer {layer}: its tensors do not fit the network's memory plan"
    ))
}

/// Whether `data` is aligned for the elements of `info` (so a workload can read or write it
/// in place).
fn aligned(data: &[u8], info: &TensorInfo) -> bool {
    let size = info.data_type.size_in_bytes().max(1);
    (data.as_ptr() as usize).is_multiple_of(size)
}

/// Runs one in-process workload: inputs found in `external` (the caller's input buffers, by
/// tensor; empty or short when there are none) are read from there and the others from the
/// arena; the output goes to `out` (the caller's buffer) when given, else to the arena.
fn execute_local(
    arena: &mut [u8],
    tensors: &[TensorSlot],
    external: &[Option<&[u8]>],
    step: &Step,
    workload: &WorkloadHandle,
    out: Option<&mut [u8]>,
) -> Result<(), ExecuteError> {
    let inputs: SmallVec<[arena::Source<'_>; 4]> = step
        .inputs
        .iter()
        .map(|&t| match external.get(t).copied().flatten() {
            Some(data) => arena::Source::Caller(data, &tensors[t].info),
            None => arena::Source::Arena(tensors[t].place()),
        })
        .collect();
    let slot = &tensors[step.output];
    let output = match out {
        Some(data) => arena::Sink::Caller(data, &slot.info),
        None => arena::Sink::Arena(slot.place()),
    };
    arena::execute(arena, &inputs, output, workload)
        .ok_or_else(|| arena_error(&step.layer))?
        .map_err(backend_error(&step.label))
}

impl LoadedNetwork {
    /// Loads `optimized` with the backends of `registry`.
    pub(crate) fn load(
        id: NetworkId,
        optimized: &OptimizedNetwork,
        registry: &BackendRegistry,
        pool: Option<Arc<arena::Pool>>,
    ) -> Result<Self, ExecuteError> {
        let mut backends: Vec<BackendInUse> = Vec::new();
        let net = "<network>";
        for backend in optimized.backends_used() {
            let entry = registry
                .get(backend)
                .ok_or_else(|| ExecuteError::UnknownBackend(backend.to_owned()))?;
            let options = optimized.backend_options(backend);
            let engine = match entry.remote() {
                Some(server) => {
                    if entry.is_faulted() {
                        return Err(ExecuteError::Instance {
                            backend: backend.to_owned(),
                            message: format!(
                                "backend {backend} is faulted: {}",
                                entry.fault_reason().unwrap_or_default()
                            ),
                        });
                    }
                    let (memory, context) = server
                        .create_network(id, options)
                        .map_err(backend_error(net))?;
                    Engine::Remote {
                        server: server.clone(),
                        memory,
                        context,
                    }
                }
                None => {
                    let instance = entry
                        .create_instance()
                        .map_err(|r| ExecuteError::Instance {
                            backend: backend.to_owned(),
                            message: r.to_string(),
                        })?;
                    let memory = instance
                        .create_memory_manager()
                        .map_err(backend_error(net))?;
                    let factory = instance
                        .create_workload_factory(memory.as_ref(), options)
                        .map_err(backend_error(net))?;
                    let context = instance
                        .create_backend_context(options)
                        .map_err(backend_error(net))?;
                    Engine::Local {
                        context,
                        memory,
                        _factory: factory,
                        instance,
                    }
                }
            };
            // Never out of process: there its server moves its tensors (`serve`).
            let device = entry.is_device();
            backends.push(BackendInUse {
                id: backend.to_owned(),
                network: id,
                engine,
                device,
            });
        }
        let mut progress = Progress::default();
        match Self::build(id, optimized, &backends, pool, &mut progress) {
            Ok(built) => Ok(Self {
                id,
                backends,
                ..built
            }),
            Err(e) => {
                roll_back(
                    id,
                    &backends[..progress.acquired],
                    &backends[..progress.loading],
                );
                Err(e)
            }
        }
    }

    /// Everything of a load after the backends are set up: context hooks, memory, the plan,
    /// the workloads. `progress` says how far it got, for [`roll_back`].
    fn build(
        id: NetworkId,
        optimized: &OptimizedNetwork,
        backends: &[BackendInUse],
        pool: Option<Arc<arena::Pool>>,
        progress: &mut Progress,
    ) -> Result<Self, ExecuteError> {
        let network = optimized.network();
        let layers = network.layers();
        let net = "<network>";
        // Arm NN's order: before_load on every context, workloads, after_load. Memory is
        // acquired before the first execution, which is the Constant layers' at load.
        for b in backends {
            if let Some(r) = b.hook(Hook::BeforeLoad) {
                r.map_err(backend_error(net))?;
            }
            progress.loading += 1;
        }
        for b in backends {
            if let Some(r) = b.memory(MemoryOp::Acquire) {
                r.map_err(backend_error(net))?;
            }
            progress.acquired += 1;
        }
        // Tensor lifetimes and the memory plan.
        let mut last_use: Vec<usize> = (0..layers.len()).collect();
        // Inputs are copied in before the first step and outputs copied out after the last,
        // whatever their layers' positions: those tensors get buffers of their own.
        // In process, Constant layers' values live in a block of their own (computed once at
        // load), and the arena holds only what a run writes: it can come from a pool.
        let in_process = backends.iter().all(|b| b.remote().is_none());
        let in_block =
            |l: &crate::graph::network::Layer| in_process && l.kind() == LayerKind::Constant;
        let mut bound = vec![false; layers.len()];
        for (i, l) in layers.iter().enumerate() {
            bound[i] |= matches!(l.kind(), LayerKind::Input | LayerKind::Constant);
            for t in &l.inputs {
                last_use[t.layer] = last_use[t.layer].max(i);
                bound[t.layer] |= l.kind() == LayerKind::Output;
            }
        }
        let lives: Vec<TensorLife> = layers
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let bytes = match l.outputs.first() {
                    None => 0,
                    Some(info) => info.num_bytes().ok_or_else(|| {
                        ExecuteError::Binding(format!(
                            "network {id}: layer {}: its output {:?} {:?} has more bytes than \
                             this machine can address",
                            l.name,
                            info.shape.as_slice(),
                            info.data_type
                        ))
                    })?,
                };
                Ok(TensorLife {
                    bytes,
                    defined: i,
                    last_use: last_use[i],
                    pinned: bound[i],
                })
            })
            .collect::<Result<_, ExecuteError>>()?;
        let naive_bytes = lives.iter().fold(0usize, |n, t| n.saturating_add(t.bytes));
        // Where each tensor lives (Backend API 1.3's device tensors): a MemCopy across a
        // memory boundary writes into the memory it goes to, a device backend's compute
        // layers into that backend's memory, everything else into host memory.
        let index = |id: &str| backends.iter().position(|b| b.id == id);
        let mut transfers: Vec<Option<Transfer>> = vec![None; layers.len()];
        let mut home: Vec<Option<usize>> = vec![None; layers.len()];
        let mut boundaries = Vec::new();
        for (i, (l, a)) in layers.iter().zip(optimized.assignments()).enumerate() {
            if let Some(boundary) = &a.boundary {
                let t = Transfer::of(boundary, index).map_err(|e| device_error(id, e))?;
                home[i] = t.to;
                transfers[i] = Some(t);
                boundaries.push((l.name.clone(), boundary.clone()));
            } else if !matches!(
                l.kind(),
                LayerKind::Input | LayerKind::Output | LayerKind::Constant
            ) && let Some(b) = index(&a.backend)
                && backends[b].device
            {
                home[i] = Some(b);
            }
        }
        let memory_name = |h: Option<usize>| h.map_or("host", |b| backends[b].id.as_str());
        for (i, l) in layers.iter().enumerate() {
            let reads_in = transfers[i].map_or(home[i], |t| t.from);
            // A device workload's constants come with its description (`NO_BUFFER`).
            let given = |t: &&crate::graph::network::TensorRef| {
                transfers[i].is_none()
                    && reads_in.is_some()
                    && layers[t.layer].kind() == LayerKind::Constant
            };
            if let Some(t) = l
                .inputs
                .iter()
                .find(|t| home[t.layer] != reads_in && !given(t))
            {
                return Err(ExecuteError::Binding(format!(
                    "network {id}: layer {} reads {} in {} memory but runs in {} memory, and no \
                     MemCopy is between them",
                    l.name,
                    layers[t.layer].name,
                    memory_name(home[t.layer]),
                    memory_name(reads_in)
                )));
            }
        }
        // Device tensors are planned in their backend's memory and take no host memory.
        let device_lives = lives.clone();
        let lives: Vec<TensorLife> = lives
            .into_iter()
            .zip(&home)
            .map(|(t, h)| match h {
                Some(_) => TensorLife {
                    bytes: 0,
                    pinned: false,
                    ..t
                },
                None => t,
            })
            .collect();
        // In process, a Constant whose descriptor holds its value at an alignment its type
        // allows is read in place from the descriptor, which the networks made from one
        // model share (a session's plans): no copy at all. The others are copied once, at
        // load, into the constants block.
        let in_place: Vec<(usize, Layer)> = layers
            .iter()
            .zip(&lives)
            .enumerate()
            .filter_map(|(i, (l, t))| {
                match (&*l.descriptor, l.constant_bytes(), l.outputs.first()) {
                    (LayerDescriptor::Constant(c), Some(data), Some(info))
                        if in_block(l)
                            && data.len() == t.bytes
                            && c.info.shape == info.shape
                            && c.info.data_type == info.data_type
                            && aligned(data, info) =>
                    {
                        Some((i, l.clone()))
                    }
                    _ => None,
                }
            })
            .collect();
        let mut read_in_place = vec![false; layers.len()];
        for (i, _) in &in_place {
            read_in_place[*i] = true;
        }
        let constant_tensors: Vec<usize> = (0..layers.len())
            .filter(|&i| in_block(&layers[i]) && !read_in_place[i])
            .collect();
        let (constant_offsets, constant_bytes) = arena::layout(
            &constant_tensors
                .iter()
                .map(|&i| lives[i].bytes)
                .collect::<Vec<_>>(),
        )
        .ok_or_else(|| {
            ExecuteError::Binding(format!(
                "network {id}: its constants need more bytes than this machine can address"
            ))
        })?;
        let lives: Vec<TensorLife> = lives
            .into_iter()
            .zip(layers)
            .map(|(t, l)| match in_block(l) {
                true => TensorLife {
                    bytes: 0,
                    pinned: false,
                    ..t
                },
                false => t,
            })
            .collect();
        let plan = memory_plan::plan(&lives);
        let (offsets, arena_bytes) = arena::layout(&plan.buffer_sizes).ok_or_else(|| {
            ExecuteError::Binding(format!(
                "network {id}: its tensors need more bytes than this machine can address"
            ))
        })?;
        let heap = |bytes: usize, what: &str| {
            Arena::heap(bytes).map_err(|e| {
                ExecuteError::Binding(format!(
                    "network {id}: {bytes} bytes of {what} could not be allocated: {e}"
                ))
            })
        };
        let mut constants = heap(constant_bytes, "constant memory")?;
        let mut scratch = if in_process {
            // The arena is taken per run; its memory is reserved now, so that a size the
            // machine cannot give fails the load.
            let pool = pool.unwrap_or_default();
            pool.reserve(arena_bytes).map_err(|e| {
                ExecuteError::Binding(format!(
                    "network {id}: {arena_bytes} bytes of tensor memory could not be allocated: {e}"
                ))
            })?;
            Scratch::Pooled {
                pool,
                bytes: arena_bytes,
                serial: Mutex::new(()),
            }
        } else {
            let shared = SharedMemory::create(arena_bytes).map_err(|e| {
                ExecuteError::Binding(format!(
                    "network {id}: shared memory for an out-of-process backend: {e}"
                ))
            })?;
            for server in backends.iter().filter_map(BackendInUse::remote) {
                server.map_arena(id, &shared).map_err(backend_error(net))?;
            }
            Scratch::Own(Mutex::new(Arena::Shared(shared)))
        };
        let ids: Vec<&str> = backends.iter().map(|b| b.id.as_str()).collect();
        // Freed by the memory managers' `release` if the load fails after this.
        let buffers =
            DeviceBuffers::allocate(&device_lives, &home, &ids, |b| backends[b].device_memory())
                .map_err(|e| device_error(id, e))?;
        let mut in_constants = vec![None; layers.len()];
        for (&i, &offset) in constant_tensors.iter().zip(&constant_offsets) {
            in_constants[i] = Some(offset);
        }
        let tensors: Vec<TensorSlot> = layers
            .iter()
            .zip(&plan.buffer_of)
            .zip(&in_constants)
            .map(|((l, &buffer), constant)| {
                let info = l.outputs.first().cloned().unwrap_or_else(|| {
                    l.inputs
                        .first()
                        .map(|t| network.tensor_info(*t).clone())
                        .expect("an Output layer has an input")
                });
                TensorSlot {
                    bytes: info.num_bytes().unwrap_or(0),
                    info,
                    offset: constant.unwrap_or(offsets[buffer]),
                    constant: constant.is_some(),
                }
            })
            .collect();

        let mut steps = Vec::with_capacity(layers.len());
        for (i, (l, a)) in layers.iter().zip(optimized.assignments()).enumerate() {
            let inputs: Vec<usize> = l.inputs.iter().map(|t| t.layer).collect();
            let mut remote = None;
            let mut backend = None;
            let workload = match l.kind() {
                LayerKind::Input | LayerKind::Output => None,
                // The host runs it itself.
                _ if transfers[i].is_some() => {
                    backend = index(&a.backend);
                    None
                }
                _ => {
                    let b = backends
                        .iter()
                        .position(|b| b.id == a.backend)
                        .expect("every used backend was set up");
                    backend = Some(b);
                    let parts = network.workload_inputs(l);
                    match &backends[b].engine {
                        Engine::Remote { server, .. } => {
                            let request = Request::CreateWorkload {
                                network: id,
                                workload: i as u32,
                                name: l.name.clone(),
                                layer: l.full_descriptor(),
                                inputs: parts.infos.clone(),
                                outputs: l.outputs.clone(),
                                constants: parts
                                    .values
                                    .iter()
                                    .map(|c| c.map(<[u8]>::to_vec))
                                    .collect(),
                            };
                            server
                                .create_workload(&request)
                                .map_err(backend_error(&optimized.debug_name(i)))?;
                            remote = Some(b);
                            None
                        }
                        // A Constant held outside its descriptor (mapped from a compiled
                        // network) needs no workload: the host reads or copies its bytes.
                        Engine::Local { .. } if l.shared.is_some() => None,
                        Engine::Local { _factory, .. } => {
                            let desc = parts.desc();
                            let made = match optimized.prepared(i) {
                                Some(blob) => _factory.restore_workload(
                                    &desc,
                                    PreparedBlob {
                                        version: blob.version,
                                        bytes: RSlice::from_slice(blob.bytes.bytes()),
                                    },
                                ),
                                None => _factory.create_workload(&desc),
                            };
                            Some(made.map_err(backend_error(&optimized.debug_name(i)))?)
                        }
                    }
                }
            };
            let step = Step {
                layer: l.name.clone(),
                label: optimized.debug_name(i),
                origins: a.origins.clone(),
                kind: l.kind(),
                backend,
                workload,
                remote,
                inputs,
                output: i,
                transfer: transfers[i],
            };
            // Constants in this process are computed once, now: into the constants block, or
            // into the network's own arena (a mapped one copied there); those read in place
            // need nothing.
            if let (LayerKind::Constant, false, None) = (step.kind, read_in_place[i], remote)
                && (step.workload.is_some() || l.shared.is_some())
            {
                let block = match (tensors[i].constant, &mut scratch) {
                    (true, _) => constants.bytes_mut(),
                    (false, Scratch::Own(arena)) => arena
                        .get_mut()
                        .unwrap_or_else(|e| e.into_inner())
                        .bytes_mut(),
                    (false, Scratch::Pooled { .. }) => {
                        return Err(arena_error(&step.layer));
                    }
                };
                match (&step.workload, l.constant_bytes()) {
                    (Some(w), _) => execute_local(block, &tensors, &[], &step, w, None)?,
                    (None, Some(value)) => {
                        let slot = &tensors[i];
                        if value.len() != slot.bytes {
                            return Err(ExecuteError::Binding(format!(
                                "constant {}: {} bytes for a tensor of {}",
                                l.name,
                                value.len(),
                                slot.bytes
                            )));
                        }
                        block[slot.offset..slot.offset + slot.bytes].copy_from_slice(value);
                    }
                    (None, None) => {}
                }
            }
            steps.push(step);
        }
        let units = Self::segments(id, &steps, &tensors, backends)?;
        // An output whose tensor one in-process workload writes and nothing else reads can be
        // written straight into the caller's buffer.
        let mut readers = vec![0usize; steps.len()];
        for s in &steps {
            for &t in &s.inputs {
                readers[t] += 1;
            }
        }
        let written_once = steps
            .iter()
            .map(|s| {
                s.kind == LayerKind::Output
                    && s.inputs.first().is_some_and(|&t| {
                        readers[t] == 1
                            && steps[t].output == t
                            && (steps[t].workload.is_some()
                                || steps[t].transfer.is_some_and(|x| x.to.is_none()))
                            && steps[t].remote.is_none()
                            && !matches!(steps[t].kind, LayerKind::Input | LayerKind::Constant)
                    })
            })
            .collect();
        let io = |kind| {
            layers
                .iter()
                .enumerate()
                .filter(move |(_, l)| l.kind() == kind)
                .map(|(i, l)| (l.name.clone(), i))
                .collect::<Vec<_>>()
        };
        let (inputs, outputs) = (io(LayerKind::Input), io(LayerKind::Output));
        for b in backends {
            if let Some(r) = b.hook(Hook::AfterLoad) {
                r.map_err(backend_error(net))?;
            }
        }
        Ok(Self {
            id,
            steps,
            units,
            tensors,
            inputs,
            outputs,
            written_once,
            scratch,
            constants,
            constant_tensors,
            in_place,
            profile: Mutex::new(None),
            profile_epoch: AtomicU64::new(0),
            backends: Vec::new(),
            plan,
            naive_bytes,
            buffers,
            boundaries,
            copies: AtomicU64::new(0),
            imports: AtomicU64::new(0),
        })
    }

    /// Groups the steps into what `enqueue` runs: in-process workloads one by one, and each
    /// run of consecutive layers of one out-of-process backend as one segment. Sends every
    /// backend its segments, then runs its Constant layers (one segment each) once, now.
    fn segments(
        id: NetworkId,
        steps: &[Step],
        tensors: &[TensorSlot],
        backends: &[BackendInUse],
    ) -> Result<Vec<Unit>, ExecuteError> {
        let slot = |t: usize| Slot {
            offset: tensors[t].offset as u64,
            bytes: tensors[t].bytes as u64,
            info: tensors[t].info.clone(),
        };
        let wire = |i: usize, s: &Step| WireStep {
            workload: i as u32,
            inputs: s.inputs.iter().map(|&t| slot(t)).collect(),
            output: slot(s.output),
        };
        let mut segments: Vec<Vec<Vec<WireStep>>> = backends.iter().map(|_| Vec::new()).collect();
        let mut constants = Vec::new();
        let mut units: Vec<Unit> = Vec::new();
        for (i, s) in steps.iter().enumerate() {
            match (s.kind, s.remote) {
                (LayerKind::Input | LayerKind::Output, _) => {}
                (LayerKind::Constant, Some(b)) => {
                    constants.push((b, segments[b].len() as u32, i));
                    segments[b].push(vec![wire(i, s)]);
                }
                (LayerKind::Constant, None) => {}
                (_, None) => units.push(Unit::Local(i)),
                (_, Some(b)) => match units.last_mut() {
                    Some(Unit::Remote {
                        backend,
                        segment,
                        steps,
                        ..
                    }) if *backend == b => {
                        segments[b][*segment as usize].push(wire(i, s));
                        steps.push(i);
                    }
                    _ => {
                        units.push(Unit::Remote {
                            backend: b,
                            segment: segments[b].len() as u32,
                            steps: vec![i],
                            after_enqueue: false,
                        });
                        segments[b].push(vec![wire(i, s)]);
                    }
                },
            }
        }
        // Each backend's last segment carries its after_enqueue.
        for (b, backend) in backends.iter().enumerate() {
            if !backend.has_context() {
                continue;
            }
            if let Some(Unit::Remote { after_enqueue, .. }) = units
                .iter_mut()
                .rev()
                .find(|u| matches!(u, Unit::Remote { backend, .. } if *backend == b))
            {
                *after_enqueue = true;
            }
        }
        for (b, backend) in backends.iter().enumerate() {
            if let Some(server) = backend.remote() {
                server
                    .set_segments(id, std::mem::take(&mut segments[b]))
                    .map_err(backend_error("<network>"))?;
            }
        }
        for (b, segment, step) in constants {
            let server = backends[b].remote().expect("a remote step's backend");
            server
                .run(id, segment, false)
                .map_err(|(_, e)| backend_error(&steps[step].label)(e))?;
        }
        Ok(units)
    }

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

    fn check<'t>(
        &self,
        what: &str,
        name: &str,
        info: &TensorInfo,
        len: usize,
        list: &'t [(String, usize)],
    ) -> Result<&'t (String, usize), ExecuteError> {
        let entry = list.iter().find(|(n, _)| n == name).ok_or_else(|| {
            let known: Vec<&str> = list.iter().map(|(n, _)| n.as_str()).collect();
            ExecuteError::Binding(format!(
                "no network {what} named {name:?} (the network has {known:?})"
            ))
        })?;
        let expected = &self.tensors[entry.1].info;
        if expected.shape != info.shape || expected.data_type != info.data_type {
            return Err(ExecuteError::Binding(format!(
                "{what} {name}: expected {expected}, got {info}"
            )));
        }
        if info.num_bytes() != Some(len) {
            return Err(ExecuteError::Binding(format!(
                "{what} {name}: {info} needs {:?} bytes, got {len}",
                info.num_bytes()
            )));
        }
        Ok(entry)
    }

    /// Runs the network once. Checks every binding first: nothing runs on a mismatch.
    pub fn enqueue(
        &self,
        inputs: &[InputTensor<'_>],
        outputs: &mut [OutputTensor<'_>],
    ) -> Result<(), ExecuteError> {
        let mut bound_in = Vec::with_capacity(inputs.len());
        for t in inputs {
            bound_in.push(
                self.check("input", t.name, t.info, t.data.len(), &self.inputs)?
                    .1,
            );
        }
        let mut bound_out = Vec::with_capacity(outputs.len());
        for t in outputs.iter() {
            bound_out.push(
                self.check("output", t.name, t.info, t.data.len(), &self.outputs)?
                    .1,
            );
        }
        for (what, list, bound) in [
            ("input", &self.inputs, &bound_in),
            ("output", &self.outputs, &bound_out),
        ] {
            for (name, i) in list {
                match bound.iter().filter(|b| **b == *i).count() {
                    1 => {}
                    0 => {
                        return Err(ExecuteError::Binding(format!(
                            "network {what} {name} is not bound"
                        )));
                    }
                    _ => {
                        return Err(ExecuteError::Binding(format!(
                            "network {what} {name} is bound twice"
                        )));
                    }
                }
            }
        }
        // Without out-of-process backends (which read the shared arena), the caller's buffers
        // are used in place where their alignment allows: workloads read the network's inputs
        // from them and the last layer of an output writes straight into its buffer.
        let direct = self.units.iter().all(|u| matches!(u, Unit::Local(_)));
        let mut external_in: Vec<Option<&[u8]>> = vec![None; self.tensors.len()];
        let mut external_out: Vec<Option<usize>> = vec![None; self.tensors.len()];
        let (_serial, mut held) = match &self.scratch {
            Scratch::Own(arena) => (
                None,
                Held::Own(arena.lock().unwrap_or_else(|e| e.into_inner())),
            ),
            Scratch::Pooled {
                pool,
                bytes,
                serial,
            } => {
                let serial = serial.lock().unwrap_or_else(|e| e.into_inner());
                let arena = pool.take(*bytes).map_err(|e| {
                    ExecuteError::Binding(format!(
                        "network {}: {bytes} bytes of tensor memory could not be allocated: {e}",
                        self.id
                    ))
                })?;
                (Some(serial), Held::Pooled(pool, Some(arena)))
            }
        };
        let arena = held.arena();
        for &i in &self.constant_tensors {
            let slot = &self.tensors[i];
            external_in[i] = Some(&self.constants.bytes()[slot.offset..slot.offset + slot.bytes]);
        }
        for (i, layer) in &self.in_place {
            external_in[*i] = layer.constant_bytes();
        }
        for (t, &i) in inputs.iter().zip(&bound_in) {
            if direct && aligned(t.data, &self.tensors[i].info) {
                external_in[i] = Some(t.data);
                continue;
            }
            let slot = &self.tensors[i];
            arena.bytes_mut()[slot.offset..slot.offset + slot.bytes].copy_from_slice(t.data);
        }
        for (k, (t, &i)) in outputs.iter().zip(&bound_out).enumerate() {
            let source = self.steps[i].inputs[0];
            if direct && self.written_once[i] && aligned(t.data, &self.tensors[source].info) {
                external_out[source] = Some(k);
            }
        }
        // Network inputs a device backend uses in the caller's buffer (`Strategy::Import`):
        // imported for the whole run, and fenced and released when it is over, however it
        // ends (`MemoryManagerHandle::with_import`).
        let pending: Vec<Import<'_>> = self
            .steps
            .iter()
            .filter_map(|step| {
                let t = step.transfer?;
                let input = step.inputs[0];
                let usable =
                    t.strategy == Strategy::Import && self.steps[input].kind == LayerKind::Input;
                Some(Import {
                    tensor: step.output,
                    backend: t.to.filter(|_| usable)?,
                    data: external_in[input]?,
                    layer: &step.layer,
                })
            })
            .collect();
        let mut hooked = vec![false; self.backends.len()];
        let epoch = self.profile_epoch.load(Ordering::Acquire);
        let mut times = self
            .profile
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
            .then(|| Vec::with_capacity(self.units.len()));
        {
            let mut run_units = |in_place_of: &[(usize, BufferId)]| -> Result<(), ExecuteError> {
                self.run_units(
                    arena.bytes_mut(),
                    &external_in,
                    &external_out,
                    outputs,
                    in_place_of,
                    &mut times,
                    &mut hooked,
                )
            };
            self.with_imports(&pending, &mut Vec::new(), &mut run_units)?;
        }
        for (t, &i) in outputs.iter_mut().zip(&bound_out) {
            let source = self.steps[i].inputs[0];
            if external_out[source].is_some() {
                continue;
            }
            let slot = &self.tensors[source];
            let bytes = match external_in[source] {
                Some(data) => data,
                None => &arena.bytes()[slot.offset..slot.offset + slot.bytes],
            };
            t.data.copy_from_slice(bytes);
        }
        drop(held);
        for (b, done) in self.backends.iter().zip(hooked) {
            if done {
                continue;
            }
            if let Some(r) = b.hook(Hook::AfterEnqueue) {
                r.map_err(backend_error("<network>"))?;
            }
        }
        // The run succeeded: its times count, unless profiling was restarted meanwhile.
        if let Some(times) = times
            && let Some((started, profile)) = self
                .profile
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_mut()
            && *started == epoch
        {
            for ((runs, total), t) in profile.iter_mut().zip(times) {
                *runs += 1;
                *total += t;
            }
        }
        Ok(())
    }

    /// Runs the units of one run in order (the body of [`LoadedNetwork::enqueue`]), then
    /// waits for every device backend's queued work (the fence). `in_place_of`: the device
    /// buffers that stand for imported network inputs.
    #[allow(
        clippy::too_many_arguments,
        reason = "the state of one run, split off enqueue so that imports can wrap it"
    )]
    fn run_units(
        &self,
        arena: &mut [u8],
        external_in: &[Option<&[u8]>],
        external_out: &[Option<usize>],
        outputs: &mut [OutputTensor<'_>],
        in_place_of: &[(usize, BufferId)],
        times: &mut Option<Vec<Duration>>,
        hooked: &mut [bool],
    ) -> Result<(), ExecuteError> {
        for unit in &self.units {
            let start = times.is_some().then(Instant::now);
            match unit {
                Unit::Local(i) => {
                    let step = &self.steps[*i];
                    let out = external_out[step.output].map(|k| &mut *outputs[k].data);
                    if let Some(t) = step.transfer {
                        // An imported input needs no copy.
                        if !in_place_of.iter().any(|(x, _)| *x == step.output) {
                            self.transfer(step, t, arena, external_in, out)?;
                            self.copies.fetch_add(1, Ordering::Relaxed);
                        }
                    } else if let Some(b) = step.backend.filter(|&b| self.backends[b].device) {
                        let w = step
                            .workload
                            .as_ref()
                            .expect("a device step has a workload");
                        let buffer = |t: usize| {
                            if self.steps[t].kind == LayerKind::Constant {
                                return Ok(NO_BUFFER);
                            }
                            in_place_of
                                .iter()
                                .find(|(x, _)| *x == t)
                                .map(|(_, id)| *id)
                                .or(self.buffers.of[t])
                                .ok_or_else(|| arena_error(&step.layer))
                        };
                        let device = |t: usize| -> Result<DeviceTensor<'_>, ExecuteError> {
                            Ok(DeviceTensor {
                                info: &self.tensors[t].info,
                                buffer: buffer(t)?,
                            })
                        };
                        let ins = step.inputs.iter().map(|&t| device(t)).collect::<Result<
                            SmallVec<[_; 4]>,
                            _,
                        >>(
                        )?;
                        w.execute_device(&ins, &[device(step.output)?])
                            .map_err(backend_error(&step.label))?;
                        // While profiling, each device workload is fenced, so that its time
                        // is its own and not the next copy's (the work is queued otherwise).
                        if times.is_some()
                            && let Some(m) = self.backends[b].device_memory()
                        {
                            m.finish().map_err(backend_error(&step.label))?;
                        }
                    } else {
                        let w = step.workload.as_ref().expect("a local step has a workload");
                        execute_local(arena, &self.tensors, external_in, step, w, out)?;
                    }
                }
                Unit::Remote {
                    backend,
                    segment,
                    steps,
                    after_enqueue,
                } => {
                    let server = self.backends[*backend]
                        .remote()
                        .expect("a remote unit's backend");
                    // No reference into the shared arena is held across the call.
                    server
                        .run(self.id, *segment, *after_enqueue)
                        .map_err(|(position, e)| {
                            let layer = match position.and_then(|p| steps.get(p as usize)) {
                                Some(&s) => self.steps[s].layer.clone(),
                                None => self.segment_name(steps),
                            };
                            ExecuteError::Backend { layer, error: e }
                        })?;
                    hooked[*backend] |= *after_enqueue;
                }
            }
            if let (Some(times), Some(start)) = (times.as_mut(), start) {
                times.push(start.elapsed());
            }
        }
        // The fence: every device backend's queued work is done before the run returns.
        for b in self.backends.iter().filter(|b| b.device) {
            if let Some(m) = b.device_memory() {
                m.finish().map_err(backend_error("<network>"))?;
            }
        }
        Ok(())
    }

    /// Imports `pending` one after the other (each import wraps the rest), then runs `f` with
    /// the buffers that stand for them. A backend that declines an import leaves that input
    /// to its copy; one that fails it (or names its buffer with the reserved id) fails the
    /// run.
    fn with_imports(
        &self,
        pending: &[Import<'_>],
        done: &mut Vec<(usize, BufferId)>,
        f: &mut RunWithImports<'_>,
    ) -> Result<(), ExecuteError> {
        let Some((first, rest)) = pending.split_first() else {
            return f(done);
        };
        let Some(m) = self.backends[first.backend].device_memory() else {
            return self.with_imports(rest, done, f);
        };
        m.with_import(first.data, |id| {
            if let Some(id) = id {
                done.push((first.tensor, id));
                self.imports.fetch_add(1, Ordering::Relaxed);
            }
            self.with_imports(rest, done, f)
        })
        .map_err(backend_error(first.layer))?
    }

    /// Runs a MemCopy across a memory boundary by copying: from host memory (the caller's
    /// buffer or the arena) into a device buffer, from a device buffer into host memory (`out`,
    /// the caller's buffer, when given), or between two device backends through host memory.
    fn transfer(
        &self,
        step: &Step,
        t: Transfer,
        arena: &mut [u8],
        external_in: &[Option<&[u8]>],
        out: Option<&mut [u8]>,
    ) -> Result<(), ExecuteError> {
        let (src, dst) = (step.inputs[0], step.output);
        let memory = |b: usize| {
            self.backends[b]
                .device_memory()
                .ok_or_else(|| arena_error(&step.layer))
        };
        let buffer = |x: usize| self.buffers.of[x].ok_or_else(|| arena_error(&step.layer));
        let host = |x: usize| {
            self.tensors[x]
                .place()
                .range()
                .ok_or_else(|| arena_error(&step.layer))
        };
        let failed = backend_error(&step.label);
        match (t.from, t.to) {
            (None, Some(to)) => {
                let data = match external_in[src] {
                    Some(data) => data,
                    None => arena
                        .get(host(src)?)
                        .ok_or_else(|| arena_error(&step.layer))?,
                };
                memory(to)?
                    .copy_to_device(buffer(dst)?, data)
                    .map_err(failed)
            }
            (Some(from), None) => {
                let data = match out {
                    Some(data) => data,
                    None => arena
                        .get_mut(host(dst)?)
                        .ok_or_else(|| arena_error(&step.layer))?,
                };
                memory(from)?
                    .copy_to_host(buffer(src)?, data)
                    .map_err(failed)
            }
            (Some(from), Some(to)) => {
                let mut staging = vec![0u8; self.tensors[src].bytes];
                memory(from)?
                    .copy_to_host(buffer(src)?, &mut staging)
                    .map_err(backend_error(&step.label))?;
                memory(to)?
                    .copy_to_device(buffer(dst)?, &staging)
                    .map_err(failed)
            }
            (None, None) => Err(arena_error(&step.layer)),
        }
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

    /// Turns per-layer timing on (its counts start from zero) or off. While it is on, every
    /// successful [`LoadedNetwork::enqueue`] adds each unit's time to [`LoadedNetwork::profile`];
    /// a run that fails adds nothing. Timing costs two clock reads per layer, and on a device
    /// backend a fence (`finish`) after each of its workloads, which otherwise only queue
    /// work.
    pub fn set_profiling(&self, on: bool) {
        let mut profile = self.profile.lock().unwrap_or_else(|e| e.into_inner());
        let epoch = self.profile_epoch.fetch_add(1, Ordering::AcqRel) + 1;
        *profile = on.then(|| (epoch, vec![(0, Duration::ZERO); self.units.len()]));
    }

    /// Per unit, in the order they run, the time taken since profiling was turned on; `None`
    /// while it is off. A unit is one layer in this process, or one segment of an
    /// out-of-process backend (timed as one round trip). Constant layers run at load and do
    /// not appear.
    pub fn profile(&self) -> Option<Vec<LayerProfile>> {
        let profile = self.profile.lock().unwrap_or_else(|e| e.into_inner());
        let (_, profile) = profile.as_ref()?;
        Some(
            self.units
                .iter()
                .zip(profile)
                .map(|(unit, &(runs, total))| {
                    let (layer, first, backend, origins) = match unit {
                        Unit::Local(i) => {
                            let step = &self.steps[*i];
                            (step.layer.clone(), step, step.backend, step.origins.clone())
                        }
                        Unit::Remote { backend, steps, .. } => (
                            self.segment_name(steps),
                            &self.steps[steps[0]],
                            Some(*backend),
                            match steps.as_slice() {
                                [one] => self.steps[*one].origins.clone(),
                                _ => Vec::new(),
                            },
                        ),
                    };
                    LayerProfile {
                        layer,
                        kind: first.kind,
                        backend: backend.map_or_else(String::new, |b| self.backends[b].id.clone()),
                        origins,
                        runs,
                        total,
                    }
                })
                .collect(),
        )
    }

    /// A segment's layers for a message: the one layer, or the first and last.
    fn segment_name(&self, steps: &[usize]) -> String {
        match steps {
            [one] => self.steps[*one].layer.clone(),
            [first, .., last] => format!(
                "{} .. {} ({} layers run out of process)",
                self.steps[*first].layer,
                self.steps[*last].layer,
                steps.len()
            ),
            [] => "<segment>".to_owned(),
        }
    }

    /// Asks every context whether the network may be unloaded; the first refusal is returned.
    /// A faulted backend is not asked (it is not called again). A context that panics has not
    /// refused: the backend is now faulted, the unload goes on, and its error comes back as
    /// `Ok(Some(error))` to be reported once the network is gone.
    pub(crate) fn before_unload(&self) -> Result<Option<ExecuteError>, ExecuteError> {
        for b in self.backends.iter().filter(|b| b.is_faulted()) {
            log::warn!(
                "network {}: backend {} is faulted and is not called while unloading",
                self.id,
                b.id
            );
        }
        let mut panicked = None;
        for b in self.healthy() {
            match b.hook(Hook::BeforeUnload) {
                // A panic, or a backend that faulted meanwhile on another thread (or whose
                // server died): not a refusal.
                Some(Err(e)) if e.code == backplane_api::ErrorCode::Panicked || b.is_faulted() => {
                    panicked.get_or_insert(ExecuteError::Backend {
                        layer: "<network>".into(),
                        error: e,
                    });
                }
                Some(Err(e)) => {
                    if let Some(p) = panicked {
                        log::error!("network {}: {p}", self.id);
                    }
                    return Err(ExecuteError::UnloadRefused {
                        network: self.id,
                        backend: b.id.clone(),
                        reason: e.message,
                    });
                }
                _ => {}
            }
        }
        Ok(panicked)
    }

    /// The backends in use that have not faulted.
    fn healthy(&self) -> impl Iterator<Item = &BackendInUse> {
        self.backends.iter().filter(|b| !b.is_faulted())
    }

    /// Bytes each backend's memory manager holds now (`Ok(None)` for a backend without one,
    /// `Err` when the query failed).
    pub fn backend_memory(&self) -> BackendMemory {
        self.backends
            .iter()
            .map(|b| (b.id.clone(), b.memory(MemoryOp::AllocatedBytes).transpose()))
            .collect()
    }

    /// Releases memory, destroys the workloads, and calls `after_unload_network`.
    pub(crate) fn unload(mut self) -> Result<(), ExecuteError> {
        let mut first_error = None;
        let backends = &self.backends;
        self.buffers.release(|b| backends[b].device_memory());
        for b in self.healthy() {
            if let Some(Err(e)) = b.memory(MemoryOp::Release) {
                first_error.get_or_insert(ExecuteError::Backend {
                    layer: "<network>".into(),
                    error: e,
                });
            }
        }
        self.steps.clear();
        for server in self.backends.iter().filter_map(BackendInUse::remote) {
            server.drop_network(self.id, true);
        }
        for b in self.healthy() {
            if let Some(Err(e)) = b.hook(Hook::AfterUnload) {
                first_error.get_or_insert(ExecuteError::Backend {
                    layer: "<network>".into(),
                    error: e,
                });
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
