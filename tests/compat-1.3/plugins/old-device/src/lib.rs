//! `OldDevice` (vendor `Compat`): a Backend API 1.3 plugin, built by a different compiler than
//! the host, standing for an accelerator with memory of its own (its capabilities declare
//! `DeviceMemory`, not `HostMemory`). It shows 1.3's device tensors reaching a plugin:
//!
//! - its memory manager is the "device": buffers are byte vectors it names itself (from 1,
//!   never `NO_BUFFER`), which the host reaches only through `copy_to_device` and
//!   `copy_to_host`. It offers no `import_host` (nor the capability `HostMemoryImport`), so
//!   every boundary is a copy; its work is done when `execute_device` returns, so `finish`
//!   has nothing to wait for;
//! - it runs `ElementwiseBinary` `Add` on Float32 tensors of one shape (no broadcasting) and
//!   a Float32 `Activation` `ReLU`, and `MemCopy` between two of its buffers (in process the
//!   host runs the MemCopies at its memory's edges itself; out of process the host sees the
//!   server's shared memory and hands such layers to the backend), all through
//!   `execute_device` (its `execute` refuses: its workloads never see host memory);
//! - a constant input reaches it once, in the workload's description; its slot carries
//!   `NO_BUFFER` at execution;
//! - it refuses everything else, saying why.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
};

use backplane_api::{
    ActivationDescriptor, ActivationFunction, Backend, BackendError, BackendResult,
    BinaryOperation, BufferId, Capabilities, DataType, DeviceTensor, ErrorCode, LayerDescriptor,
    MemoryManager, NO_BUFFER, Support, TensorInfo, TensorView, TensorViewMut, Workload,
    WorkloadDesc, WorkloadFactory, capabilities::names,
};

/// The id this plugin exports.
pub const ID: &str = "OldDevice";

/// The backend. The host makes an instance per loaded network and asks it for one memory
/// manager, which it hands back to `create_workload_factory`; the instance keeps it, as its
/// own type, for its workloads.
#[derive(Debug, Default)]
pub struct OldDevice {
    memory: Mutex<Option<Arc<DeviceMemory>>>,
}

/// The device's memory for one network.
#[derive(Debug, Default)]
pub struct DeviceMemory {
    buffers: Mutex<HashMap<BufferId, Vec<u8>>>,
    /// The last buffer id handed out (ids start at 1).
    last: AtomicU64,
}

impl DeviceMemory {
    fn buffers(&self) -> MutexGuard<'_, HashMap<BufferId, Vec<u8>>> {
        self.buffers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the first `len` bytes of buffer `id`.
    fn with<T>(
        &self,
        id: BufferId,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> T,
    ) -> BackendResult<T> {
        let mut buffers = self.buffers();
        let buffer = buffers.get_mut(&id).ok_or_else(|| {
            BackendError::invalid_argument(format!("{ID}: no buffer {id} in this memory"))
        })?;
        let size = buffer.len();
        match buffer.get_mut(..len) {
            Some(bytes) => Ok(f(bytes)),
            None => Err(BackendError::invalid_argument(format!(
                "{ID}: buffer {id} has {size} bytes, not {len}"
            ))),
        }
    }

    /// The first `n` Float32 values of buffer `id`.
    fn read(&self, id: BufferId, n: usize) -> BackendResult<Vec<f32>> {
        self.with(id, n * 4, |bytes| floats(bytes))
    }

    /// Writes `values` at the start of buffer `id`.
    fn write(&self, id: BufferId, values: &[f32]) -> BackendResult<()> {
        self.with(id, values.len() * 4, |bytes| {
            for (b, v) in bytes.chunks_exact_mut(4).zip(values) {
                b.copy_from_slice(&v.to_le_bytes());
            }
        })
    }
}

/// Little-endian bytes as Float32 values (any alignment).
fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

impl MemoryManager for DeviceMemory {
    fn acquire(&self) -> BackendResult<()> {
        Ok(())
    }

    fn release(&self) -> BackendResult<()> {
        self.buffers().clear();
        Ok(())
    }

    fn allocated_bytes(&self) -> u64 {
        self.buffers().values().map(|b| b.len() as u64).sum()
    }

    fn allocate_buffer(&self, bytes: u64) -> BackendResult<BufferId> {
        let out_of_memory = || {
            BackendError::new(
                ErrorCode::OutOfMemory,
                format!("{ID}: no {bytes} bytes free"),
            )
        };
        let len = usize::try_from(bytes).map_err(|_| out_of_memory())?;
        let mut buffer = Vec::new();
        buffer.try_reserve_exact(len).map_err(|_| out_of_memory())?;
        buffer.resize(len, 0);
        let id = self.last.fetch_add(1, Ordering::Relaxed) + 1;
        self.buffers().insert(id, buffer);
        Ok(id)
    }

    fn release_buffer(&self, buffer: BufferId) -> BackendResult<()> {
        match self.buffers().remove(&buffer) {
            Some(_) => Ok(()),
            None => Err(BackendError::invalid_argument(format!(
                "{ID}: no buffer {buffer} to release"
            ))),
        }
    }

    fn copy_to_device(&self, buffer: BufferId, data: &[u8]) -> BackendResult<()> {
        self.with(buffer, data.len(), |bytes| bytes.copy_from_slice(data))
    }

    fn copy_to_host(&self, buffer: BufferId, data: &mut [u8]) -> BackendResult<()> {
        self.with(buffer, data.len(), |bytes| data.copy_from_slice(bytes))
    }

    // `import_host` keeps its default (`Ok(None)`: every boundary is a copy).

    fn finish(&self) -> BackendResult<()> {
        // Nothing is queued: each workload has finished when `execute_device` returns.
        Ok(())
    }
}

/// What a workload computes.
#[derive(Debug, Clone, Copy)]
enum Op {
    Add,
    Relu(ActivationDescriptor),
    Copy,
}

/// The layer as this backend runs it, or why it does not.
fn plan(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<Op, String> {
    if let Some(t) = inputs
        .iter()
        .chain(outputs)
        .find(|t| t.data_type != DataType::Float32)
    {
        return Err(format!("{ID}: computes in Float32 only, got {t}"));
    }
    let one_shape = |ts: &[&TensorInfo]| ts.windows(2).all(|w| w[0].shape == w[1].shape);
    match layer {
        LayerDescriptor::ElementwiseBinary(BinaryOperation::Add) => match (inputs, outputs) {
            ([a, b], [c]) if one_shape(&[a, b, c]) => Ok(Op::Add),
            ([a, b], [c]) => Err(format!(
                "{ID}: runs Add on tensors of one shape only (no broadcasting), got {a} + {b} -> {c}"
            )),
            _ => Err(format!("{ID}: Add needs 2 inputs and 1 output")),
        },
        LayerDescriptor::Activation(d) if d.function == ActivationFunction::ReLU => {
            match (inputs, outputs) {
                ([x], [y]) if one_shape(&[x, y]) => Ok(Op::Relu(*d)),
                _ => Err(format!(
                    "{ID}: ReLU needs 1 input and 1 output of its shape"
                )),
            }
        }
        LayerDescriptor::Activation(d) => Err(format!(
            "{ID}: runs ReLU only among the activations, not {:?}",
            d.function
        )),
        LayerDescriptor::MemCopy => match (inputs, outputs) {
            ([x], [y]) if one_shape(&[x, y]) => Ok(Op::Copy),
            _ => Err(format!(
                "{ID}: MemCopy needs 1 input and 1 output of its shape"
            )),
        },
        other => Err(format!(
            "{ID}: runs only a Float32 Add, ReLU and MemCopy, not this {}",
            other.kind()
        )),
    }
}

impl Backend for OldDevice {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new().with_bool(names::DEVICE_MEMORY, true)
    }

    fn is_layer_supported(
        &self,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Support {
        match plan(layer, inputs, outputs) {
            Ok(_) => Support::Supported,
            Err(why) => Support::unsupported(why),
        }
    }

    fn create_memory_manager(&self) -> BackendResult<Option<Arc<dyn MemoryManager>>> {
        let memory = Arc::new(DeviceMemory::default());
        *self.memory.lock().unwrap_or_else(|e| e.into_inner()) = Some(memory.clone());
        Ok(Some(memory))
    }

    fn create_workload_factory(
        &self,
        memory: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        let mine = self
            .memory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match (memory, mine) {
            (Some(given), Some(mine))
                if std::ptr::addr_eq(Arc::as_ptr(&given), Arc::as_ptr(&mine)) =>
            {
                Ok(Box::new(Factory { memory: mine }))
            }
            _ => Err(BackendError::invalid_argument(format!(
                "{ID}: its workloads need the memory manager this instance made"
            ))),
        }
    }
}

/// Makes the workloads of one network, on its memory.
struct Factory {
    memory: Arc<DeviceMemory>,
}

impl WorkloadFactory for Factory {
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
        let op = plan(desc.layer, &desc.inputs, &desc.outputs)
            .map_err(|why| BackendError::unsupported(format!("layer {}: {why}", desc.name)))?;
        // A constant input's value comes only here (its slot carries NO_BUFFER at execution);
        // a real device would upload it once now.
        let constants = (0..desc.inputs.len())
            .map(|slot| {
                desc.constant(slot)
                    .map(|c: TensorView<'_>| floats(c.data.as_slice()))
            })
            .collect();
        Ok(Box::new(Compute {
            memory: self.memory.clone(),
            op,
            constants,
        }))
    }
}

/// One layer on the device's buffers.
struct Compute {
    memory: Arc<DeviceMemory>,
    op: Op,
    /// Per input slot, its value when it is constant.
    constants: Vec<Option<Vec<f32>>>,
}

impl Workload for Compute {
    fn execute(&self, _: &[TensorView<'_>], _: &mut [TensorViewMut<'_>]) -> BackendResult<()> {
        Err(BackendError::unsupported(format!(
            "{ID} computes in its own memory: execute_device only"
        )))
    }

    fn execute_device(
        &self,
        inputs: &[DeviceTensor<'_>],
        outputs: &[DeviceTensor<'_>],
    ) -> BackendResult<()> {
        let [out] = outputs else {
            return Err(BackendError::invalid_argument("expected 1 output"));
        };
        let n = out
            .info
            .num_elements()
            .ok_or_else(|| BackendError::invalid_argument("tensor too large"))?;
        // Input `slot`: from its buffer, or from the description when it is a constant.
        let read = |slot: usize, t: &DeviceTensor<'_>| -> BackendResult<Vec<f32>> {
            if t.buffer != NO_BUFFER {
                return self.memory.read(t.buffer, n);
            }
            match self.constants.get(slot) {
                Some(Some(values)) if values.len() == n => Ok(values.clone()),
                _ => Err(BackendError::invalid_argument(format!(
                    "{ID}: input {slot} has no buffer and is not a constant of {n} values"
                ))),
            }
        };
        let result = match (self.op, inputs) {
            (Op::Add, [a, b]) => {
                let (a, b) = (read(0, a)?, read(1, b)?);
                a.iter().zip(&b).map(|(x, y)| x + y).collect()
            }
            (Op::Relu(d), [x]) => {
                let mut values = read(0, x)?;
                d.apply_in_place(&mut values);
                values
            }
            (Op::Copy, [x]) => read(0, x)?,
            _ => return Err(BackendError::invalid_argument("wrong number of inputs")),
        };
        self.memory.write(out.buffer, &result)
    }
}

backplane_api::export_backend!(id: "OldDevice", vendor: "Compat", backend: OldDevice::default);
