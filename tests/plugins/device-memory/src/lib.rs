//! Test plugin `TestDevice` (vendor `Test`): a Backend API 1.3 backend that computes in memory
//! of its own, so that the host's device-tensor path (planning, transfers, the fence, errors
//! and roll-back) is tested without a GPU.
//!
//! - Capabilities: `DeviceMemory` (not `HostMemory`, not `HostMemoryImport`: it cannot read a
//!   caller's memory, so every boundary is a copy).
//! - Its "device" is a table of byte vectors per network (the memory manager's); the host can
//!   reach them only through `copy_to_device`/`copy_to_host`. Each buffer is filled with 0xA5
//!   when allocated, so a tensor the host forgot to copy shows as garbage.
//! - Layers: `Activation(ReLU)`, `ElementwiseBinary(Add)` of two Float32 tensors of one shape,
//!   and `MemCopy` (a copy between two of its buffers: the host runs the MemCopies at its
//!   memory's edges itself, but out of process the host sees shared memory and gives it
//!   MemCopy layers); everything else is refused. Workloads run only through `execute_device`
//!   (their `execute` refuses), and only on buffers of their own network's memory manager.
//! - Constant inputs are read from the workload's description (their slots carry `NO_BUFFER`
//!   at execution, as Backend API 1.3 has it).
//! - `finish` counts its calls; work is not queued, so it waits for nothing.
//! - The backend option `Fail=<entry>` (entry: `allocate_buffer`, `copy_to_device`,
//!   `copy_to_host`, `execute_device`, `finish`) makes that entry fail with
//!   `"<entry> refused by TestDevice"` (`allocate_buffer`: `OutOfMemory`);
//!   `Fail=panic:<entry>` makes it panic with `"<entry> exploded in TestDevice"`. The memory manager
//!   logs `TestDevice buffers live: N` when it is released.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use backplane_api::{
    ActivationFunction, Backend, BackendError, BackendOptions, BackendResult, BinaryOperation,
    BufferId, Capabilities, DataType, DeviceTensor, ErrorCode, LayerDescriptor, MemoryManager,
    NO_BUFFER, Support, TensorInfo, TensorView, TensorViewMut, Value, Workload, WorkloadDesc,
    WorkloadFactory, capabilities::names,
};

/// The id this plugin exports.
pub const ID: &str = "TestDevice";

/// The backend.
#[derive(Debug, Default)]
pub struct TestDevice {
    /// The memory manager made for the network being loaded (each network gets a new
    /// instance, so one at a time).
    memory: Mutex<Option<Arc<DeviceMemory>>>,
}

/// One network's device memory.
#[derive(Debug, Default)]
pub struct DeviceMemory {
    buffers: Mutex<HashMap<BufferId, Vec<u8>>>,
    next: AtomicU64,
    fail: Mutex<Option<String>>,
    finished: AtomicU64,
}

impl DeviceMemory {
    fn refuse(&self, entry: &str) -> BackendResult<()> {
        let fail = self.fail.lock().unwrap().clone();
        match fail.as_deref() {
            Some(e) if e.strip_prefix("panic:") == Some(entry) => {
                panic!("{entry} exploded in {ID}")
            }
            Some(e) if e == entry => {
                let code = match entry {
                    "allocate_buffer" => ErrorCode::OutOfMemory,
                    _ => ErrorCode::Failed,
                };
                Err(BackendError::new(code, format!("{entry} refused by {ID}")))
            }
            _ => Ok(()),
        }
    }

    fn with<T>(
        &self,
        buffer: BufferId,
        f: impl FnOnce(&mut Vec<u8>) -> BackendResult<T>,
    ) -> BackendResult<T> {
        let mut buffers = self.buffers.lock().unwrap();
        let b = buffers.get_mut(&buffer).ok_or_else(|| {
            BackendError::invalid_argument(format!("{ID}: no buffer {buffer} in this memory"))
        })?;
        f(b)
    }
}

impl MemoryManager for DeviceMemory {
    fn acquire(&self) -> BackendResult<()> {
        Ok(())
    }

    fn release(&self) -> BackendResult<()> {
        let mut buffers = self.buffers.lock().unwrap();
        log::info!("{ID} buffers live: {}", buffers.len());
        buffers.clear();
        Ok(())
    }

    fn allocated_bytes(&self) -> u64 {
        let buffers = self.buffers.lock().unwrap();
        buffers.values().map(|b| b.len() as u64).sum()
    }

    fn allocate_buffer(&self, bytes: u64) -> BackendResult<BufferId> {
        self.refuse("allocate_buffer")?;
        let len = usize::try_from(bytes)
            .ok()
            .filter(|&n| n <= 1 << 30)
            .ok_or_else(|| {
                BackendError::new(
                    ErrorCode::OutOfMemory,
                    format!("{ID}: {bytes} bytes is more than this device has"),
                )
            })?;
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.buffers.lock().unwrap().insert(id, vec![0xA5; len]);
        Ok(id)
    }

    fn release_buffer(&self, buffer: BufferId) -> BackendResult<()> {
        self.buffers
            .lock()
            .unwrap()
            .remove(&buffer)
            .map(|_| ())
            .ok_or_else(|| BackendError::invalid_argument(format!("{ID}: no buffer {buffer}")))
    }

    fn copy_to_device(&self, buffer: BufferId, data: &[u8]) -> BackendResult<()> {
        self.refuse("copy_to_device")?;
        self.with(buffer, |b| match b.get_mut(..data.len()) {
            Some(dst) => {
                dst.copy_from_slice(data);
                Ok(())
            }
            None => Err(BackendError::invalid_argument(format!(
                "{ID}: {} bytes do not fit buffer {buffer} of {}",
                data.len(),
                b.len()
            ))),
        })
    }

    fn copy_to_host(&self, buffer: BufferId, data: &mut [u8]) -> BackendResult<()> {
        self.refuse("copy_to_host")?;
        self.with(buffer, |b| match b.get(..data.len()) {
            Some(src) => {
                data.copy_from_slice(src);
                Ok(())
            }
            None => Err(BackendError::invalid_argument(format!(
                "{ID}: buffer {buffer} of {} has no {} bytes",
                b.len(),
                data.len()
            ))),
        })
    }

    fn finish(&self) -> BackendResult<()> {
        self.refuse("finish")?;
        self.finished.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl Backend for TestDevice {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new().with_bool(names::DEVICE_MEMORY, true)
    }

    fn is_layer_supported(
        &self,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Support {
        if inputs
            .iter()
            .chain(outputs)
            .any(|t| t.data_type != DataType::Float32)
        {
            return Support::unsupported(format!("{ID} computes in Float32 only"));
        }
        match layer {
            LayerDescriptor::MemCopy => Support::Supported,
            LayerDescriptor::Activation(a) if a.function == ActivationFunction::ReLU => {
                Support::Supported
            }
            LayerDescriptor::ElementwiseBinary(BinaryOperation::Add)
                if inputs.len() == 2 && inputs[0].shape == inputs[1].shape =>
            {
                Support::Supported
            }
            _ => Support::unsupported(format!("{ID} runs ReLU and same-shape Add only")),
        }
    }

    fn create_memory_manager(&self) -> BackendResult<Option<Arc<dyn MemoryManager>>> {
        let memory = Arc::new(DeviceMemory::default());
        *self.memory.lock().unwrap() = Some(memory.clone());
        Ok(Some(memory))
    }

    fn create_workload_factory(
        &self,
        memory: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        self.create_workload_factory_with_options(memory, &BackendOptions::new())
    }

    fn create_workload_factory_with_options(
        &self,
        memory: Option<Arc<dyn MemoryManager>>,
        options: &BackendOptions,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        if memory.is_none() {
            return Err(BackendError::invalid_argument(format!(
                "{ID} needs its memory manager"
            )));
        }
        let mine = self.memory.lock().unwrap().clone().ok_or_else(|| {
            BackendError::invalid_argument(format!("{ID}: no memory manager was made"))
        })?;
        if let Some(Value::Str(entry)) = options.get("Fail") {
            *mine.fail.lock().unwrap() = Some(entry.to_string());
        }
        Ok(Box::new(Factory { memory: mine }))
    }
}

/// Makes the workloads of one network, on its memory.
#[derive(Debug)]
pub struct Factory {
    memory: Arc<DeviceMemory>,
}

impl WorkloadFactory for Factory {
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
        let op = match desc.layer {
            LayerDescriptor::Activation(a) if a.function == ActivationFunction::ReLU => Op::Relu,
            LayerDescriptor::ElementwiseBinary(BinaryOperation::Add) => Op::Add,
            LayerDescriptor::MemCopy => Op::Copy,
            other => {
                return Err(BackendError::unsupported(format!(
                    "{ID} cannot run {}",
                    other.kind()
                )));
            }
        };
        // Constant inputs come only here; their slots carry NO_BUFFER at execution.
        let constants = (0..desc.inputs.len())
            .map(|slot| {
                desc.constant(slot)
                    .map(|c| floats(c.data.as_slice(), c.info.num_elements().unwrap_or(0)))
                    .transpose()
            })
            .collect::<BackendResult<Vec<_>>>()?;
        Ok(Box::new(Compute {
            memory: self.memory.clone(),
            op,
            constants,
        }))
    }
}

/// What a workload computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Relu,
    Add,
    Copy,
}

/// ReLU, Add or a copy on device buffers.
#[derive(Debug)]
pub struct Compute {
    memory: Arc<DeviceMemory>,
    op: Op,
    /// Per input slot, its value when it is constant.
    constants: Vec<Option<Vec<f32>>>,
}

fn floats(bytes: &[u8], n: usize) -> BackendResult<Vec<f32>> {
    let bytes = bytes.get(..n * 4).ok_or_else(|| {
        BackendError::invalid_argument(format!("{ID}: a buffer is shorter than its tensor"))
    })?;
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
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
        self.memory.refuse("execute_device")?;
        let [out] = outputs else {
            return Err(BackendError::invalid_argument("one output expected"));
        };
        let n = out
            .info
            .num_elements()
            .ok_or_else(|| BackendError::invalid_argument("tensor too large"))?;
        let read = |slot: usize, t: &DeviceTensor<'_>| match self.constants.get(slot) {
            Some(Some(values)) if t.buffer == NO_BUFFER => Ok(values.clone()),
            _ if t.buffer == NO_BUFFER => Err(BackendError::invalid_argument(format!(
                "{ID}: input {slot} has no buffer and is not constant"
            ))),
            _ => self.memory.with(t.buffer, |b| floats(b, n)),
        };
        let result: Vec<f32> = match (self.op, inputs) {
            (Op::Copy, [x]) => read(0, x)?,
            (Op::Relu, [x]) => read(0, x)?.into_iter().map(|v| v.max(0.0)).collect(),
            (Op::Add, [a, b]) => {
                let (a, b) = (read(0, a)?, read(1, b)?);
                a.iter().zip(&b).map(|(x, y)| x + y).collect()
            }
            _ => return Err(BackendError::invalid_argument("wrong number of inputs")),
        };
        self.memory.with(out.buffer, |b| {
            let dst = b.get_mut(..n * 4).ok_or_else(|| {
                BackendError::invalid_argument(format!("{ID}: the output buffer is too short"))
            })?;
            for (d, v) in dst.chunks_exact_mut(4).zip(&result) {
                d.copy_from_slice(&v.to_le_bytes());
            }
            Ok(())
        })
    }
}

backplane_api::export_backend!(id: "TestDevice", vendor: "Test", backend: TestDevice::default);
