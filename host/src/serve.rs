//! The child's side: `backplane serve` loads one backend (a plugin file, or a built-in) in its
//! own process and answers the host's requests on its socket (stdin) until the host closes it.
//!
//! Imports: `plugins`, `remote`, `memory`, `sys`, `report`.

use std::{
    collections::HashMap,
    io,
    os::{fd::AsFd, unix::net::UnixStream},
};

use smallvec::SmallVec;

use backplane_api::{
    BackendOptions, BufferId, DeviceTensor, NO_BUFFER, ROption, RSlice, RStr, WorkloadDesc,
    ffi::{
        BackendContextHandle, BackendHandle, CallError, MemoryManagerHandle, WorkloadFactoryHandle,
        WorkloadHandle,
    },
};

use crate::{
    memory::arena,
    plugins::load,
    plugins::registry::{BackendRegistry, RegisteredBackend},
    remote::protocol::{self, Answer, Hello, Refused, Request, WireError, WireStep},
    report::CandidateReport,
    sys::shm::SharedMemory,
};

pub use crate::remote::protocol::Target;

/// Everything the server holds for one network. Fields drop in order: workloads before the
/// factory, the factory before the instance.
struct Network {
    segments: Vec<Vec<WireStep>>,
    /// Per workload, which input slots came with a constant value in its description (a
    /// device backend's workload gets `NO_BUFFER` there).
    constant_slots: HashMap<u32, Vec<bool>>,
    /// A device backend's (Backend API 1.3) buffers, one per arena slot `(offset, bytes)` a
    /// workload reads or writes, made on first use; `None` for a host-memory backend.
    device: Option<DeviceSlots>,
    workloads: HashMap<u32, WorkloadHandle>,
    arena: Option<SharedMemory>,
    context: Option<BackendContextHandle>,
    memory: Option<MemoryManagerHandle>,
    factory: WorkloadFactoryHandle,
    _instance: BackendHandle,
}

/// How the server runs a device backend: the host sees only the shared arena, so around each
/// workload the server copies its inputs into the backend's buffers (unless a workload of the
/// same segment wrote them there; an input that came with a constant value in the workload's
/// description is `NO_BUFFER`) and its output back into the arena; a segment ends with
/// `finish`.
#[derive(Default)]
struct DeviceSlots {
    buffers: HashMap<(u64, u64), BufferId>,
    /// Slots whose device buffer holds what the arena holds, written during this segment.
    fresh: Vec<(u64, u64)>,
}

impl DeviceSlots {
    fn buffer(&mut self, m: &MemoryManagerHandle, slot: (u64, u64)) -> Result<BufferId, Answer> {
        if let Some(&b) = self.buffers.get(&slot) {
            return Ok(b);
        }
        let b = m.allocate_buffer(slot.1.max(1)).map_err(failed)?;
        self.buffers.insert(slot, b);
        Ok(b)
    }

    /// `slot` was just written: on the device and in the arena alike. Slots that overlap it
    /// in the arena are not fresh any more.
    fn written(&mut self, slot: (u64, u64)) {
        let end = slot.0 + slot.1;
        self.fresh
            .retain(|&(o, n)| (o + n <= slot.0 || o >= end) && (o, n) != slot);
        self.fresh.push(slot);
    }
}

fn failed(e: CallError) -> Answer {
    Answer::Failed(WireError {
        method: e.method.to_owned(),
        code: e.code,
        message: e.message,
        step: None,
    })
}

fn host_error(method: &str, message: impl Into<String>) -> Answer {
    Answer::Failed(WireError {
        method: method.to_owned(),
        code: backplane_api::ErrorCode::InvalidArgument,
        message: message.into(),
        step: None,
    })
}

/// Serves `target` on stdin's socket; returns the exit status. `parent` is the host's pid:
/// the server dies with it (and exits at once if it is already gone).
pub fn serve(target: &Target, parent: u32) -> i32 {
    if let Err(e) = crate::sys::loader::close_inherited_descriptors() {
        log::error!("out-of-process server: closing inherited descriptors: {e}");
        return 2;
    }
    // Dies with its parent; if the parent is gone already, the signal will never come.
    if rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .is_err()
        || rustix::process::getppid().map(|p| p.as_raw_pid() as u32) != Some(parent)
    {
        return 2;
    }
    let stream = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => UnixStream::from(fd),
        Err(e) => {
            log::error!("out-of-process server: stdin: {e}");
            return 2;
        }
    };
    let mut registry = BackendRegistry::new();
    let hello = load(target, &mut registry);
    let id = hello.as_ref().ok().map(|h| h.id.clone());
    match Server::new(registry, id).run(stream, hello) {
        Ok(()) => 0,
        Err(e) => {
            log::error!("out-of-process server: {e}");
            2
        }
    }
}

/// Loads the backend as discovery would (for a file: the loader's checks, the factory, the
/// capabilities).
fn load(target: &Target, registry: &mut BackendRegistry) -> Result<Hello, Refused> {
    match target {
        Target::File(file) => {
            let mut report = CandidateReport::registered(file.clone(), Some(file.clone()));
            load::load_plugin(file, registry, &mut report).map_err(|r| Refused {
                reason: r.reason,
                message: r.message.into_owned(),
                id: report.backend_id.clone(),
                version: report.version.as_deref().and_then(parse_version),
            })?;
        }
        Target::Builtin(id) => {
            load::register_builtin_backends(registry);
            if !registry.is_registered(id) {
                return Err(Refused {
                    reason: crate::report::ReasonCode::FactoryFailed,
                    message: format!("no built-in backend {id}"),
                    id: None,
                    version: None,
                });
            }
        }
    }
    let b = match target {
        Target::Builtin(id) => registry.get(id).expect("checked above"),
        Target::File(_) => &registry.backends()[0],
    };
    Ok(Hello {
        id: b.id().to_owned(),
        version: b.version(),
        capabilities: b.capabilities().clone(),
    })
}

fn parse_version(s: &str) -> Option<backplane_api::ApiVersion> {
    let (major, minor) = s.split_once('.')?;
    Some(backplane_api::ApiVersion::new(
        major.parse().ok()?,
        minor.parse().ok()?,
    ))
}

struct Server {
    registry: BackendRegistry,
    /// The served backend's id, once loaded.
    id: Option<String>,
    networks: HashMap<u64, Network>,
    fds: Vec<std::os::fd::OwnedFd>,
}

impl Server {
    fn new(registry: BackendRegistry, id: Option<String>) -> Self {
        Self {
            registry,
            id,
            networks: HashMap::new(),
            fds: Vec::new(),
        }
    }

    fn backend(&self) -> Option<&RegisteredBackend> {
        self.registry.get(self.id.as_deref()?)
    }

    fn run(mut self, mut stream: UnixStream, hello: Result<Hello, Refused>) -> io::Result<()> {
        let mut hello = Some(hello);
        // Requests may be as large as the constants they carry, and come when the host
        // wants: no deadline.
        let limits = protocol::Limits {
            max: protocol::MAX_FRAME,
            deadline: None,
        };
        while let Some(request) = protocol::receive::<Request>(&mut stream, &mut self.fds, limits)?
        {
            let answer = match request {
                Request::Hello => Answer::Hello(hello.take().unwrap_or_else(|| {
                    Err(Refused {
                        reason: crate::report::ReasonCode::FactoryFailed,
                        message: "Hello asked twice".into(),
                        id: None,
                        version: None,
                    })
                })),
                other => match self.backend() {
                    Some(_) => self.handle(other),
                    None => host_error("call", "no backend is loaded"),
                },
            };
            protocol::send(&mut stream, &answer, None)?;
            // A descriptor not taken by its request is not kept.
            self.fds.clear();
            protocol::spin_until_readable(&stream, protocol::SERVER_SPIN);
        }
        Ok(())
    }

    fn network(&mut self, id: u64) -> Result<&mut Network, Answer> {
        self.networks
            .get_mut(&id)
            .ok_or_else(|| host_error("call", format!("no network {id} in the server")))
    }

    fn handle(&mut self, request: Request) -> Answer {
        let backend = self.backend().expect("checked by the caller");
        match request {
            Request::Hello => unreachable!("answered by the caller"),
            Request::IsLayerSupported {
                layer,
                inputs,
                outputs,
            } => match backend
                .instance()
                .is_layer_supported(&layer, &inputs, &outputs)
            {
                Ok(s) => Answer::Support(s),
                Err(e) => failed(e),
            },
            Request::OptimizeSubgraph { subgraph, options } => {
                match backend
                    .instance()
                    .optimize_subgraph(&subgraph.view(), &options)
                {
                    Ok(v) => Answer::Views(v),
                    Err(e) => failed(e),
                }
            }
            Request::CreateNetwork { network, options } => {
                match create_network(backend, &options) {
                    Ok(n) => {
                        let answer = Answer::Created {
                            memory: n.memory.is_some(),
                            context: n.context.is_some(),
                        };
                        self.networks.insert(network, n);
                        answer
                    }
                    Err(e) => e,
                }
            }
            Request::Hook { network, hook } => match self.network(network) {
                Ok(n) => match n.context.as_ref().map(|c| hook.call(c, network)) {
                    Some(Err(e)) => failed(e),
                    _ => Answer::Done,
                },
                Err(a) => a,
            },
            Request::Memory { network, op } => match self.network(network) {
                Ok(n) => match n.memory.as_ref().map(|m| op.call(m)) {
                    Some(Err(e)) => failed(e),
                    Some(Ok(bytes)) => Answer::Bytes(bytes),
                    None => Answer::Bytes(0),
                },
                Err(a) => a,
            },
            Request::MapArena { network, bytes } => {
                let fd = self.fds.pop();
                match (self.network(network), fd) {
                    (Ok(n), Some(fd)) => match SharedMemory::from_fd(fd, bytes as usize) {
                        Ok(m) => {
                            n.arena = Some(m);
                            Answer::Done
                        }
                        Err(e) => host_error("call", format!("mapping the tensor arena: {e}")),
                    },
                    (Ok(_), None) => host_error("call", "MapArena came without a descriptor"),
                    (Err(a), _) => a,
                }
            }
            Request::CreateWorkload {
                network,
                workload,
                name,
                layer,
                inputs,
                outputs,
                constants,
            } => {
                let n = match self.network(network) {
                    Ok(n) => n,
                    Err(a) => return a,
                };
                let constants: Vec<ROption<RSlice<'_, u8>>> = constants
                    .iter()
                    .map(|c| c.as_deref().map(RSlice::from_slice).into())
                    .collect();
                let desc = WorkloadDesc {
                    name: RStr::from_str(&name),
                    layer: &layer,
                    inputs: RSlice::from_slice(&inputs),
                    outputs: RSlice::from_slice(&outputs),
                    constants: RSlice::from_slice(&constants),
                };
                match n.factory.create_workload(&desc) {
                    Ok(w) => {
                        n.workloads.insert(workload, w);
                        n.constant_slots
                            .insert(workload, constants.iter().map(|c| c.is_some()).collect());
                        Answer::Done
                    }
                    Err(e) => failed(e),
                }
            }
            Request::SetSegments { network, segments } => match self.network(network) {
                Ok(n) => {
                    n.segments = segments;
                    Answer::Done
                }
                Err(a) => a,
            },
            Request::Run {
                network,
                segment,
                after_enqueue,
            } => match self.network(network) {
                Ok(n) => match run_segment(n, segment) {
                    Err(a) => a,
                    Ok(()) if after_enqueue => {
                        match n.context.as_ref().map(|c| c.after_enqueue(network)) {
                            Some(Err(e)) => failed(e),
                            _ => Answer::Done,
                        }
                    }
                    Ok(()) => Answer::Done,
                },
                Err(a) => a,
            },
            Request::DropNetwork {
                network,
                workloads_only: true,
            } => {
                if let Some(n) = self.networks.get_mut(&network) {
                    n.segments.clear();
                    n.workloads.clear();
                    n.constant_slots.clear();
                }
                Answer::Done
            }
            Request::DropNetwork { network, .. } => {
                self.networks.remove(&network);
                Answer::Done
            }
        }
    }
}

fn create_network(
    backend: &RegisteredBackend,
    options: &BackendOptions,
) -> Result<Network, Answer> {
    let instance = backend
        .create_instance()
        .map_err(|r| host_error("create_workload_factory", r.to_string()))?;
    let memory = instance.create_memory_manager().map_err(failed)?;
    let factory = instance
        .create_workload_factory(memory.as_ref(), options)
        .map_err(failed)?;
    let context = instance.create_backend_context(options).map_err(failed)?;
    Ok(Network {
        segments: Vec::new(),
        constant_slots: HashMap::new(),
        device: backend.is_device().then(DeviceSlots::default),
        workloads: HashMap::new(),
        arena: None,
        context,
        memory,
        factory,
        _instance: instance,
    })
}

/// Marks a failure with the position of the segment's step that failed.
fn at_step(position: usize) -> impl Fn(Answer) -> Answer {
    move |e| match e {
        Answer::Failed(mut w) => {
            w.step = Some(position as u32);
            Answer::Failed(w)
        }
        other => other,
    }
}

/// The workload of `step`, made by `CreateWorkload`.
fn workload_of<'w>(
    workloads: &'w HashMap<u32, WorkloadHandle>,
    step: &WireStep,
) -> Result<&'w WorkloadHandle, Answer> {
    workloads
        .get(&step.workload)
        .ok_or_else(|| host_error("execute", format!("no workload {}", step.workload)))
}

/// Runs one segment of a device backend: each workload on its buffers, the arena's bytes copied
/// in and the output copied back out (see [`DeviceSlots`]).
fn run_device_segment(
    steps: &[WireStep],
    workloads: &HashMap<u32, WorkloadHandle>,
    constant_slots: &HashMap<u32, Vec<bool>>,
    device: &mut DeviceSlots,
    memory: &MemoryManagerHandle,
    arena: &mut [u8],
) -> Result<(), Answer> {
    device.fresh.clear();
    for (position, step) in steps.iter().enumerate() {
        let at = at_step(position);
        let workload = workload_of(workloads, step).map_err(&at)?;
        let range = |s: &protocol::Slot| s.place().range().filter(|r| r.end <= arena.len());
        let outside = || at(host_error("execute", "tensor slots outside the arena"));
        let mut inputs: SmallVec<[DeviceTensor<'_>; 4]> = SmallVec::new();
        let constants = constant_slots.get(&step.workload);
        for (k, s) in step.inputs.iter().enumerate() {
            // A constant came with the workload's description (Backend API 1.3).
            if constants.and_then(|c| c.get(k)).copied().unwrap_or(false) {
                inputs.push(DeviceTensor {
                    info: &s.info,
                    buffer: NO_BUFFER,
                });
                continue;
            }
            let key = (s.offset, s.bytes);
            let b = device.buffer(memory, key).map_err(&at)?;
            if !device.fresh.contains(&key) {
                let r = range(s).ok_or_else(outside)?;
                memory
                    .copy_to_device(b, &arena[r])
                    .map_err(|e| at(failed(e)))?;
                device.fresh.push(key);
            }
            inputs.push(DeviceTensor {
                info: &s.info,
                buffer: b,
            });
        }
        let key = (step.output.offset, step.output.bytes);
        let out = device.buffer(memory, key).map_err(&at)?;
        workload
            .execute_device(
                &inputs,
                &[DeviceTensor {
                    info: &step.output.info,
                    buffer: out,
                }],
            )
            .map_err(|e| at(failed(e)))?;
        let r = range(&step.output).ok_or_else(outside)?;
        memory
            .copy_to_host(out, &mut arena[r])
            .map_err(|e| at(failed(e)))?;
        device.written(key);
    }
    memory.finish().map_err(failed)
}

/// Runs the workloads of one segment on the shared arena.
fn run_segment(n: &mut Network, segment: u32) -> Result<(), Answer> {
    let steps = n
        .segments
        .get(segment as usize)
        .ok_or_else(|| host_error("execute", format!("no segment {segment}")))?;
    let arena = n
        .arena
        .as_mut()
        .ok_or_else(|| host_error("execute", "no tensor arena is mapped"))?
        .as_mut_slice();
    if let Some(device) = &mut n.device {
        let memory = n
            .memory
            .as_ref()
            .ok_or_else(|| host_error("execute", "a device backend without a memory manager"))?;
        return run_device_segment(
            steps,
            &n.workloads,
            &n.constant_slots,
            device,
            memory,
            arena,
        );
    }
    for (position, step) in steps.iter().enumerate() {
        let at = at_step(position);
        let workload = workload_of(&n.workloads, step).map_err(&at)?;
        let inputs: SmallVec<[arena::Source<'_>; 4]> = step
            .inputs
            .iter()
            .map(|s| arena::Source::Arena(s.place()))
            .collect();
        arena::execute(
            arena,
            &inputs,
            arena::Sink::Arena(step.output.place()),
            workload,
        )
        .ok_or_else(|| {
            at(host_error(
                "execute",
                "tensor slots outside the arena or overlapping",
            ))
        })?
        .map_err(|e| at(failed(e)))?;
    }
    Ok(())
}
