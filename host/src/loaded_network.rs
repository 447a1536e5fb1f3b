//! Loaded networks: per backend a memory manager, a workload factory and a context; one
//! workload per layer; intermediate memory planned by lifetime; the context hooks in Arm NN's
//! order.
//!
//! **Threads.** A loaded network may be enqueued from several threads; its runs are
//! serialised (one set of intermediate buffers per network). Different networks run
//! concurrently. Input and Output layers are bound by the runtime (the caller's bytes are
//! copied in and out), so they have no workload.

use smallvec::SmallVec;
use std::sync::Mutex;

use backplane_api::{
    ConstTensor, LayerDescriptor, LayerKind, ROption, RSlice, RStr, TensorInfo, TensorView,
    TensorViewMut, WorkloadDesc,
    ffi::{
        BackendContextHandle, BackendHandle, CallError, MemoryManagerHandle, WorkloadFactoryHandle,
        WorkloadHandle,
    },
};

use crate::{
    memory_plan::{self, MemoryPlan, TensorLife},
    optimizer::OptimizedNetwork,
    registry::BackendRegistry,
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

struct BackendInUse {
    /// The backend's id (named when its context refuses an unload).
    id: String,
    context: Option<BackendContextHandle>,
    memory: Option<MemoryManagerHandle>,
    /// Kept for the life of the network (workloads may refer to it).
    _factory: WorkloadFactoryHandle,
    _instance: BackendHandle,
}

/// A tensor's info, its buffer in the plan, and its size (computed once, at load).
struct TensorSlot {
    info: TensorInfo,
    buffer: usize,
    bytes: usize,
}

struct Step {
    layer: String,
    kind: LayerKind,
    workload: Option<WorkloadHandle>,
    inputs: Vec<usize>,
    output: usize,
}

/// Byte storage aligned for every element type (8 bytes).
#[derive(Clone, Default)]
struct Buffer(Vec<u64>);

impl Buffer {
    fn new(bytes: usize) -> Self {
        Self(vec![0; bytes.div_ceil(8)])
    }
    fn bytes(&self, len: usize) -> &[u8] {
        &backplane_api::bytemuck::cast_slice(&self.0)[..len]
    }
    fn bytes_mut(&mut self, len: usize) -> &mut [u8] {
        &mut backplane_api::bytemuck::cast_slice_mut(&mut self.0)[..len]
    }
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
    let healthy = |b: &&BackendInUse| !b._instance.fault_state().is_faulted();
    for b in acquired.iter().filter(healthy) {
        if let Some(Err(e)) = b.memory.as_ref().map(MemoryManagerHandle::release) {
            log::warn!("network {id}: undoing a failed load: {e}");
        }
    }
    for b in loading.iter().filter(healthy) {
        if let Some(Err(e)) = b.context.as_ref().map(|c| c.after_unload_network(id)) {
            log::warn!("network {id}: undoing a failed load: {e}");
        }
    }
}

/// A network ready to run.
pub struct LoadedNetwork {
    id: NetworkId,
    steps: Vec<Step>,
    /// Per tensor (= per layer): where it lives.
    tensors: Vec<TensorSlot>,
    inputs: Vec<(String, usize)>,
    outputs: Vec<(String, usize)>,
    buffers: Mutex<Vec<Buffer>>,
    backends: Vec<BackendInUse>,
    plan: MemoryPlan,
    naive_bytes: usize,
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

impl LoadedNetwork {
    /// Loads `optimized` with the backends of `registry`.
    pub(crate) fn load(
        id: NetworkId,
        optimized: &OptimizedNetwork,
        registry: &BackendRegistry,
    ) -> Result<Self, ExecuteError> {
        let mut backends: Vec<BackendInUse> = Vec::new();
        for backend in optimized.backends_used() {
            let entry = registry
                .get(backend)
                .ok_or_else(|| ExecuteError::UnknownBackend(backend.to_owned()))?;
            let instance = entry
                .create_instance()
                .map_err(|r| ExecuteError::Instance {
                    backend: backend.to_owned(),
                    message: r.to_string(),
                })?;
            let net = "<network>";
            let memory = instance
                .create_memory_manager()
                .map_err(backend_error(net))?;
            let options = optimized.backend_options(backend);
            let factory = instance
                .create_workload_factory(memory.as_ref(), options)
                .map_err(backend_error(net))?;
            let context = instance
                .create_backend_context(options)
                .map_err(backend_error(net))?;
            backends.push(BackendInUse {
                id: backend.to_owned(),
                context,
                memory,
                _factory: factory,
                _instance: instance,
            });
        }
        let mut progress = Progress::default();
        match Self::build(id, optimized, &backends, &mut progress) {
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
        progress: &mut Progress,
    ) -> Result<Self, ExecuteError> {
        let network = optimized.network();
        let layers = network.layers();
        // Arm NN's order: before_load on every context, workloads, after_load. Memory is
        // acquired before the first execution, which is the Constant layers' at load.
        for b in backends {
            if let Some(c) = &b.context {
                c.before_load_network(id)
                    .map_err(backend_error("<network>"))?;
            }
            progress.loading += 1;
        }
        for b in backends {
            if let Some(m) = &b.memory {
                m.acquire().map_err(backend_error("<network>"))?;
            }
            progress.acquired += 1;
        }
        // Tensor lifetimes and the memory plan.
        let mut last_use: Vec<usize> = (0..layers.len()).collect();
        // Inputs are copied in before the first step and outputs copied out after the last,
        // whatever their layers' positions: those tensors get buffers of their own.
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
            .map(|(i, l)| TensorLife {
                bytes: l
                    .outputs
                    .first()
                    .and_then(TensorInfo::num_bytes)
                    .unwrap_or(0),
                defined: i,
                last_use: last_use[i],
                pinned: bound[i],
            })
            .collect();
        let plan = memory_plan::plan(&lives);
        let naive_bytes = lives.iter().map(|t| t.bytes).sum();
        let mut buffers: Vec<Buffer> = plan.buffer_sizes.iter().map(|&n| Buffer::new(n)).collect();
        let tensors: Vec<TensorSlot> = layers
            .iter()
            .zip(&plan.buffer_of)
            .map(|(l, &buffer)| {
                let info = l.outputs.first().cloned().unwrap_or_else(|| {
                    l.inputs
                        .first()
                        .map(|t| network.tensor_info(*t).clone())
                        .expect("an Output layer has an input")
                });
                TensorSlot {
                    bytes: info.num_bytes().unwrap_or(0),
                    info,
                    buffer,
                }
            })
            .collect();

        let mut steps = Vec::with_capacity(layers.len());
        for (i, (l, a)) in layers.iter().zip(optimized.assignments()).enumerate() {
            let inputs: Vec<usize> = l.inputs.iter().map(|t| t.layer).collect();
            let workload = match l.kind() {
                LayerKind::Input | LayerKind::Output => None,
                _ => {
                    let b = backends
                        .iter()
                        .position(|b| b.id == a.backend)
                        .expect("every used backend was set up");
                    let infos: Vec<TensorInfo> =
                        inputs.iter().map(|&t| tensors[t].info.clone()).collect();
                    let consts: Vec<Option<&ConstTensor>> = l
                        .inputs
                        .iter()
                        .map(|t| match &layers[t.layer].descriptor {
                            LayerDescriptor::Constant(c) => Some(c),
                            _ => None,
                        })
                        .collect();
                    let constants: Vec<ROption<RSlice<'_, u8>>> = consts
                        .iter()
                        .map(|c| c.map(|c| RSlice::from_slice(c.data.as_slice())).into())
                        .collect();
                    let desc = WorkloadDesc {
                        name: RStr::from_str(&l.name),
                        layer: &l.descriptor,
                        inputs: RSlice::from_slice(&infos),
                        outputs: RSlice::from_slice(&l.outputs),
                        constants: RSlice::from_slice(&constants),
                    };
                    Some(
                        backends[b]
                            ._factory
                            .create_workload(&desc)
                            .map_err(backend_error(&l.name))?,
                    )
                }
            };
            // Constants are computed once, now.
            if let (LayerKind::Constant, Some(w)) = (l.kind(), &workload) {
                let slot = &tensors[i];
                let mut out = [TensorViewMut::new(
                    &slot.info,
                    buffers[slot.buffer].bytes_mut(slot.bytes),
                )];
                w.execute(&[], &mut out).map_err(backend_error(&l.name))?;
            }
            steps.push(Step {
                layer: l.name.clone(),
                kind: l.kind(),
                workload,
                inputs,
                output: i,
            });
        }
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
            if let Some(c) = &b.context {
                c.after_load_network(id)
                    .map_err(backend_error("<network>"))?;
            }
        }
        Ok(Self {
            id,
            steps,
            tensors,
            inputs,
            outputs,
            buffers: Mutex::new(buffers),
            backends: Vec::new(),
            plan,
            naive_bytes,
        })
    }

    /// The planned peak of intermediate memory, and the naive sum of every tensor's size.
    pub fn memory(&self) -> (usize, usize) {
        (self.plan.peak_bytes(), self.naive_bytes)
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
        let mut buffers = self.buffers.lock().unwrap_or_else(|e| e.into_inner());
        for (t, &i) in inputs.iter().zip(&bound_in) {
            let slot = &self.tensors[i];
            buffers[slot.buffer]
                .bytes_mut(slot.bytes)
                .copy_from_slice(t.data);
        }
        for step in &self.steps {
            let Some(w) = &step.workload else { continue };
            if step.kind == LayerKind::Constant {
                continue;
            }
            let out = &self.tensors[step.output];
            let mut out_storage = std::mem::take(&mut buffers[out.buffer]);
            let result = {
                // Up to 4 inputs without a heap allocation (the common case).
                let views: SmallVec<[TensorView<'_>; 4]> = step
                    .inputs
                    .iter()
                    .map(|&t| {
                        let slot = &self.tensors[t];
                        TensorView::new(&slot.info, buffers[slot.buffer].bytes(slot.bytes))
                    })
                    .collect();
                let mut outs = [TensorViewMut::new(
                    &out.info,
                    out_storage.bytes_mut(out.bytes),
                )];
                w.execute(&views, &mut outs)
            };
            buffers[out.buffer] = out_storage;
            result.map_err(backend_error(&step.layer))?;
        }
        for (t, &i) in outputs.iter_mut().zip(&bound_out) {
            let slot = &self.tensors[self.steps[i].inputs[0]];
            t.data
                .copy_from_slice(buffers[slot.buffer].bytes(slot.bytes));
        }
        drop(buffers);
        for b in &self.backends {
            if let Some(c) = &b.context {
                c.after_enqueue(self.id)
                    .map_err(backend_error("<network>"))?;
            }
        }
        Ok(())
    }

    /// Asks every context whether the network may be unloaded; the first refusal is returned.
    /// A faulted backend is not asked (it is not called again). A context that panics has not
    /// refused: the backend is now faulted, the unload goes on, and its error comes back as
    /// `Ok(Some(error))` to be reported once the network is gone.
    pub(crate) fn before_unload(&self) -> Result<Option<ExecuteError>, ExecuteError> {
        let mut panicked = None;
        for b in self.healthy() {
            match b.context.as_ref().map(|c| c.before_unload_network(self.id)) {
                // A panic, or a backend that faulted meanwhile on another thread: not a refusal.
                Some(Err(e))
                    if e.code == backplane_api::ErrorCode::Panicked
                        || b._instance.fault_state().is_faulted() =>
                {
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
        self.backends.iter().filter(|b| {
            let faulted = b._instance.fault_state().is_faulted();
            if faulted {
                log::warn!(
                    "network {}: backend {} is faulted and is not called",
                    self.id,
                    b.id
                );
            }
            !faulted
        })
    }

    /// Bytes each backend's memory manager holds now (`Ok(None)` for a backend without one,
    /// `Err` when the query failed).
    pub fn backend_memory(&self) -> BackendMemory {
        self.backends
            .iter()
            .map(|b| {
                let bytes = b
                    .memory
                    .as_ref()
                    .map(MemoryManagerHandle::allocated_bytes)
                    .transpose();
                (b.id.clone(), bytes)
            })
            .collect()
    }

    /// Releases memory, destroys the workloads, and calls `after_unload_network`.
    pub(crate) fn unload(mut self) -> Result<(), ExecuteError> {
        let mut first_error = None;
        for b in self.healthy() {
            if let Some(Err(e)) = b.memory.as_ref().map(MemoryManagerHandle::release) {
                first_error.get_or_insert(ExecuteError::Backend {
                    layer: "<network>".into(),
                    error: e,
                });
            }
        }
        self.steps.clear();
        for b in self.healthy() {
            if let Some(Err(e)) = b.context.as_ref().map(|c| c.after_unload_network(self.id)) {
                first_error.get_or_insert(ExecuteError::Backend {
                    layer: "<network>".into(),
                    error: e,
                });
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
