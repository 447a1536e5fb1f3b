//! Loading: per backend an instance, memory manager, workload factory and context (or the
//! network's objects in a child process); then the context hooks, memory acquired, tensors
//! placed (host, device or constants block), the memory plan, the workloads, the constants
//! computed once, and the out-of-process segments. A load that fails is rolled back.

use std::sync::{Arc, Mutex, atomic::AtomicU64};

use backplane_api::{LayerDescriptor, LayerKind, PreparedBlob, RSlice, ffi::WorkloadHandle};

use super::{
    BackendInUse, Engine, LoadedNetwork, Scratch, Step, TensorSlot, Unit,
    bind::aligned,
    device::{DeviceBuffers, Transfer},
    error::{ExecuteError, NetworkId, arena_error, backend_error, device_error},
    run::execute_local,
};
use crate::{
    graph::network::Layer,
    graph::optimizer::{Boundary, OptimizedNetwork},
    memory::arena::{self, Arena},
    memory::budget::MemoryBudget,
    memory::memory_plan::{self, TensorLife},
    plugins::registry::BackendRegistry,
    remote::protocol::{Hook, MemoryOp, Request, Slot, WireStep},
    sys::shm::SharedMemory,
};

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

impl LoadedNetwork {
    /// Loads `optimized` with the backends of `registry`.
    pub(crate) fn load(
        id: NetworkId,
        optimized: &OptimizedNetwork,
        registry: &BackendRegistry,
        pool: Option<Arc<arena::Pool>>,
        budget: &MemoryBudget,
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
        match Self::build(id, optimized, &backends, pool, budget, &mut progress) {
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
        budget: &MemoryBudget,
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
        let in_process = backends.iter().all(|b| b.remote().is_none());
        let in_block = |l: &Layer| in_process && l.kind() == LayerKind::Constant;
        let lives = lifetimes(id, layers)?;
        let naive_bytes = lives.iter().fold(0usize, |n, t| n.saturating_add(t.bytes));
        let (transfers, home, boundaries) = homes(id, optimized, backends)?;
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
        let in_place = constants_in_place(layers, &lives, in_block);
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
        // Charged before anything of the model's sizes is allocated: the constants block, the
        // tensors' arena, and the outputs a run hands back.
        let output_bytes = layers
            .iter()
            .filter(|l| l.kind() == LayerKind::Output)
            .filter_map(|l| l.inputs.first())
            .map(|t| network.tensor_info(*t).num_bytes().unwrap_or(0))
            .fold(0usize, usize::saturating_add);
        let need = constant_bytes
            .saturating_add(arena_bytes)
            .saturating_add(output_bytes);
        budget
            .charge(need as u64, || {
                // The largest tensor the network declares (the first of equals).
                let largest = layers
                    .iter()
                    .filter_map(|l| Some((l, l.outputs.first()?)))
                    .map(|(l, o)| (l, o, o.num_bytes().unwrap_or(usize::MAX)))
                    .rev()
                    .max_by_key(|(_, _, bytes)| *bytes)
                    .map(|(l, o, bytes)| {
                        format!(
                            "; the largest tensor: layer {}'s output {:?} {}, {bytes} bytes",
                            l.name,
                            o.shape.as_slice(),
                            o.data_type
                        )
                    })
                    .unwrap_or_default();
                format!(
                    "network {id} (constants {constant_bytes} bytes, tensors {arena_bytes} bytes, \
                     outputs {output_bytes} bytes{largest})"
                )
            })
            .map_err(ExecuteError::OverBudget)?;
        let heap = |bytes: usize, what: &str| {
            Arena::heap(bytes).map_err(|e| {
                ExecuteError::Binding(format!(
                    "network {id}: {bytes} bytes of {what} could not be allocated: {e}"
                ))
            })
        };
        let mut constants = heap(constant_bytes, "constant memory")?;
        let mut scratch = scratch(id, in_process, arena_bytes, pool, backends)?;
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
            let (backend, workload, remote) =
                make_workload(id, optimized, backends, i, &transfers, read_in_place[i])?;
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
                compute_constant(l, &step, &tensors, &mut constants, &mut scratch)?;
            }
            steps.push(step);
        }
        let units = Self::segments(id, &steps, &tensors, backends)?;
        let written_once = written_once(&steps);
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
}

/// Each tensor's size, the step that defines it, its last reader, and whether it must keep a
/// buffer of its own (a network input, output or constant).
fn lifetimes(id: NetworkId, layers: &[Layer]) -> Result<Vec<TensorLife>, ExecuteError> {
    let mut last_use: Vec<usize> = (0..layers.len()).collect();
    // Inputs are copied in before the first step and outputs copied out after the last,
    // whatever their layers' positions: those tensors get buffers of their own.
    // In process, Constant layers' values live in a block of their own (computed once at
    // load), and the arena holds only what a run writes: it can come from a pool.
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
    Ok(lives)
}

/// The transfers, memory homes and boundaries of a network's tensors.
type Homes = (
    Vec<Option<Transfer>>,
    Vec<Option<usize>>,
    Vec<(String, Boundary)>,
);

/// Where each tensor lives: per layer, the transfer a MemCopy across a memory boundary makes,
/// and the device backend (index among `backends`) whose memory holds its tensor (`None`:
/// host memory); with the boundaries crossed. A layer that reads a tensor from another memory
/// than its own without a MemCopy between them is an error.
fn homes(
    id: NetworkId,
    optimized: &OptimizedNetwork,
    backends: &[BackendInUse],
) -> Result<Homes, ExecuteError> {
    let layers = optimized.network().layers();
    let index = |id: &str| backends.iter().position(|b| b.id == id);
    // Where each tensor lives (Backend API 1.3's device tensors): a MemCopy across a
    // memory boundary writes into the memory it goes to, a device backend's compute
    // layers into that backend's memory, everything else into host memory.
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
    Ok((transfers, home, boundaries))
}

/// In process, a Constant whose descriptor holds its value at an alignment its type allows is
/// read in place from the descriptor, which the networks made from one model share (a
/// session's plans): no copy at all. The others are copied once, at load, into the constants
/// block.
fn constants_in_place(
    layers: &[Layer],
    lives: &[TensorLife],
    in_block: impl Fn(&Layer) -> bool,
) -> Vec<(usize, Layer)> {
    layers
        .iter()
        .zip(lives)
        .enumerate()
        .filter_map(
            |(i, (l, t))| match (&*l.descriptor, l.constant_bytes(), l.outputs.first()) {
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
            },
        )
        .collect()
}

/// Where a network's intermediate tensors live: in process, `arena_bytes` reserved in `pool`
/// (a new one when none is given) and taken per run; out of process, shared memory of its own
/// that every server of the network maps.
fn scratch(
    id: NetworkId,
    in_process: bool,
    arena_bytes: usize,
    pool: Option<Arc<arena::Pool>>,
    backends: &[BackendInUse],
) -> Result<Scratch, ExecuteError> {
    let net = "<network>";
    Ok(if in_process {
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
    })
}

/// Per step: an Output layer whose tensor one in-process workload writes and nothing else
/// reads, which that workload can write straight into the caller's buffer.
fn written_once(steps: &[Step]) -> Vec<bool> {
    let mut readers = vec![0usize; steps.len()];
    for s in steps {
        for &t in &s.inputs {
            readers[t] += 1;
        }
    }
    steps
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
        .collect()
}

/// A layer's backend, its in-process workload, and its out-of-process backend.
type MadeWorkload = (Option<usize>, Option<WorkloadHandle>, Option<usize>);

/// The backend of layer `i` (index among `backends`; none for Input and Output), its
/// workload when it runs in this process, and its backend again when it runs out of process
/// (its workload is made there). A MemCopy across a memory boundary, a Constant mapped from a
/// compiled network and one read in place from its descriptor (`in_place`) have no workload:
/// the host runs or reads them (a workload would only copy the value once more: 64 MB of
/// ddddocr's weights at every plan).
fn make_workload(
    id: NetworkId,
    optimized: &OptimizedNetwork,
    backends: &[BackendInUse],
    i: usize,
    transfers: &[Option<Transfer>],
    in_place: bool,
) -> Result<MadeWorkload, ExecuteError> {
    let network = optimized.network();
    let (l, a) = (&network.layers()[i], &optimized.assignments()[i]);
    let index = |id: &str| backends.iter().position(|b| b.id == id);
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
                        constants: parts.values.iter().map(|c| c.map(<[u8]>::to_vec)).collect(),
                    };
                    server
                        .create_workload(&request)
                        .map_err(backend_error(&optimized.debug_name(i)))?;
                    remote = Some(b);
                    None
                }
                // A Constant held outside its descriptor (mapped from a compiled
                // network) needs no workload: the host reads or copies its bytes; nor does
                // one read in place from its descriptor.
                Engine::Local { .. }
                    if l.shared.is_some() || (in_place && l.kind() == LayerKind::Constant) =>
                {
                    None
                }
                Engine::Local { _factory, .. } => {
                    let desc = parts.desc();
                    let made = match optimized.prepared(i) {
                        Some(blob) => match _factory.restore_workload(
                            &desc,
                            PreparedBlob {
                                version: blob.version,
                                bytes: RSlice::from_slice(blob.bytes.bytes()),
                            },
                        ) {
                            // A blob the backend refuses (damaged, forged, made from other
                            // constants) costs its preparation, not the load: the workload
                            // is made from the layer as if nothing had been prepared. A
                            // panic faulted the backend: no second call.
                            Err(e) if e.code != backplane_api::ErrorCode::Panicked => {
                                log::warn!(
                                    "network {id}: layer {}: {} refused its prepared workload \
                                     ({}); creating it from the layer instead",
                                    optimized.debug_name(i),
                                    a.backend,
                                    e.message
                                );
                                _factory.create_workload(&desc)
                            }
                            restored => restored,
                        },
                        None => _factory.create_workload(&desc),
                    };
                    Some(made.map_err(backend_error(&optimized.debug_name(i)))?)
                }
            }
        }
    };
    Ok((backend, workload, remote))
}

/// Computes a Constant layer's value once, at load: by its workload, or from its bytes (a
/// constant mapped from a compiled network), into the constants block or the network's own
/// arena.
fn compute_constant(
    l: &Layer,
    step: &Step,
    tensors: &[TensorSlot],
    constants: &mut Arena,
    scratch: &mut Scratch,
) -> Result<(), ExecuteError> {
    let i = step.output;
    let block = match (tensors[i].constant, scratch) {
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
        (Some(w), _) => execute_local(block, tensors, &[], step, w, None)?,
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
    Ok(())
}
