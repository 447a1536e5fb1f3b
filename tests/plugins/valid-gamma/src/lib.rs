//! Test plugin `TestGamma` (vendor `Test`): exercises every optional part of Backend API 1.0
//! across the ABI.
//!
//! - A memory manager that counts and logs `acquire`/`release` and reports 4096 bytes while
//!   acquired.
//! - `Activation(Elu)`: supported, but its workload panics in `execute` ("elu exploded").
//! - A workload factory that accepts only its own memory manager and builds: `PreCompiled`
//!   "ScaleBy2" (doubles its Float32 input), `PreCompiled` "ReluRelu" (its fusion, see below),
//!   and `Activation(ReLU)`; it refuses everything else.
//! - Layer support: those, plus `Activation(Sigmoid)`, which it claims but then returns as
//!   failed from `optimize_subgraph` (so the host re-assigns it).
//! - A backend context whose hooks record each call in a log line, and whose
//!   `before_unload_network` refuses network id 13 ("network 13 is busy").
//! - `optimize_subgraph`: every pair `Activation(ReLU) -> Activation(ReLU)` becomes one
//!   `PreCompiled` substitution (operation "ReluRelu"); `MemCopy` and `Activation(Sigmoid)`
//!   layers are returned as failed; everything else is untouched.
//! - `use_custom_allocator`: accepts, allocates one 64-byte buffer through it at once (and
//!   frees it), and answers `true`.
//!
//! Failure mode: none. The host must register it as `TestGamma`.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use backplane_api::{
    ActivationFunction, Backend, BackendContext, BackendError, BackendOptions, BackendResult,
    Capabilities, CustomAllocator, LayerDescriptor, MemoryManager, NetworkId, OptimizationViews,
    PreCompiledDescriptor, SubgraphLayer, SubgraphView, Substitution, Support, TensorInfo,
    TensorView, TensorViewMut, Value, Workload, WorkloadDesc, WorkloadFactory,
};

/// The id this plugin exports.
pub const ID: &str = "TestGamma";

/// The backend.
#[derive(Debug, Default)]
pub struct TestGamma;

/// Counts `acquire` and `release` calls.
#[derive(Debug, Default)]
pub struct CountingMemory {
    acquired: AtomicU64,
    released: AtomicU64,
}

impl MemoryManager for CountingMemory {
    fn acquire(&self) -> BackendResult<()> {
        log::info!("{ID} memory acquire");
        self.acquired.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn release(&self) -> BackendResult<()> {
        log::info!("{ID} memory release");
        self.released.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn allocated_bytes(&self) -> u64 {
        let live = self.acquired.load(Ordering::SeqCst) > self.released.load(Ordering::SeqCst);
        if live { 4096 } else { 0 }
    }
}

/// Builds `ScaleBy2` workloads.
#[derive(Debug)]
pub struct GammaFactory {
    has_memory: bool,
}

/// Doubles a Float32 tensor.
#[derive(Debug)]
pub struct ScaleBy2;

/// Logs every hook call.
#[derive(Debug)]
pub struct GammaContext {
    tag: String,
}

fn is_relu(l: &SubgraphLayer) -> bool {
    matches!(&l.descriptor, LayerDescriptor::Activation(a) if a.function == ActivationFunction::ReLU)
}

impl Backend for TestGamma {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with("Threads", Value::Int(1))
            .with_bool("TestGammaCapability", true)
    }

    fn is_layer_supported(
        &self,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Support {
        let same_f32 = inputs.len() == 1
            && outputs.len() == 1
            && inputs[0] == outputs[0]
            && inputs[0].data_type == backplane_api::DataType::Float32;
        match layer {
            _ if !same_f32 => Support::unsupported(format!(
                "{ID} needs one Float32 input and an output of its shape"
            )),
            LayerDescriptor::PreCompiled(p)
                if ["ScaleBy2", "ReluRelu"].contains(&p.operation.as_str()) =>
            {
                Support::Supported
            }
            LayerDescriptor::Activation(a)
                if matches!(
                    a.function,
                    ActivationFunction::ReLU
                        | ActivationFunction::Sigmoid
                        | ActivationFunction::Elu
                ) =>
            {
                Support::Supported
            }
            other => Support::unsupported(format!(
                "{ID} runs only ReLU, Sigmoid and its own layers, not {}",
                other.kind()
            )),
        }
    }

    fn create_memory_manager(&self) -> BackendResult<Option<Arc<dyn MemoryManager>>> {
        Ok(Some(Arc::new(CountingMemory::default())))
    }

    fn create_workload_factory(
        &self,
        memory: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        Ok(Box::new(GammaFactory {
            has_memory: memory.is_some(),
        }))
    }

    fn create_backend_context(
        &self,
        options: &BackendOptions,
    ) -> BackendResult<Option<Box<dyn BackendContext>>> {
        let tag = match options.get("Tag") {
            Some(Value::Str(s)) => s.to_string(),
            _ => "untagged".to_owned(),
        };
        Ok(Some(Box::new(GammaContext { tag })))
    }

    fn optimize_subgraph(&self, subgraph: &SubgraphView<'_>) -> BackendResult<OptimizationViews> {
        let mut views = OptimizationViews::default();
        let mut used = Vec::new();
        for first in subgraph.layers.iter().filter(|l| is_relu(l)) {
            let Some(&mid) = first.outputs.first() else {
                continue;
            };
            let second = subgraph
                .layers
                .iter()
                .find(|l| is_relu(l) && l.inputs.as_slice() == [mid]);
            if let Some(second) =
                second.filter(|s| !used.contains(&s.id) && !used.contains(&first.id))
            {
                used.extend([first.id, second.id]);
                views.substitutions.push(Substitution {
                    replaced: vec![first.id, second.id].into(),
                    replacement: SubgraphLayer {
                        id: 0,
                        name: format!("{}+{}", first.name, second.name).into(),
                        descriptor: LayerDescriptor::PreCompiled(PreCompiledDescriptor {
                            backend: ID.into(),
                            operation: "ReluRelu".into(),
                            payload: vec![1, 2, 3].into(),
                        }),
                        inputs: first.inputs.clone(),
                        outputs: second.outputs.clone(),
                    },
                });
            }
        }
        for l in subgraph.layers.iter().filter(|l| !used.contains(&l.id)) {
            let sigmoid = matches!(&l.descriptor, LayerDescriptor::Activation(a) if a.function == ActivationFunction::Sigmoid);
            if sigmoid || matches!(l.descriptor, LayerDescriptor::MemCopy) {
                views.failed.push(l.id);
            } else {
                views.untouched.push(l.id);
            }
        }
        Ok(views)
    }

    fn use_custom_allocator(&self, allocator: CustomAllocator) -> bool {
        match allocator.allocate(64, 16) {
            Some(mut buffer) => {
                buffer[0] = 0xAB;
                log::info!(
                    "{ID} allocated {} bytes through the custom allocator",
                    buffer.len()
                );
                true
            }
            None => false,
        }
    }
}

impl WorkloadFactory for GammaFactory {
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
        if !self.has_memory {
            return Err(BackendError::invalid_argument(format!(
                "{ID} needs its memory manager"
            )));
        }
        match desc.layer {
            LayerDescriptor::PreCompiled(p) if p.operation.as_str() == "ScaleBy2" => {
                Ok(Box::new(ScaleBy2))
            }
            LayerDescriptor::PreCompiled(p) if p.operation.as_str() == "ReluRelu" => {
                Ok(Box::new(Relu))
            }
            LayerDescriptor::Activation(a) if a.function == ActivationFunction::ReLU => {
                Ok(Box::new(Relu))
            }
            LayerDescriptor::Activation(a) if a.function == ActivationFunction::Elu => {
                Ok(Box::new(Exploding))
            }
            other => Err(BackendError::unsupported(format!(
                "{ID} cannot build {} ({})",
                other.kind(),
                desc.name
            ))),
        }
    }
}

impl Workload for ScaleBy2 {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let [input] = inputs else {
            return Err(BackendError::invalid_argument(format!(
                "ScaleBy2 takes 1 input, got {}",
                inputs.len()
            )));
        };
        let [output] = outputs else {
            return Err(BackendError::invalid_argument("ScaleBy2 writes 1 output"));
        };
        let (src, dst) = (input.as_f32()?, output.as_f32_mut()?);
        if src.len() != dst.len() {
            return Err(BackendError::invalid_argument(
                "ScaleBy2: input and output sizes differ",
            ));
        }
        for (d, s) in dst.iter_mut().zip(src) {
            *d = 2.0 * s;
        }
        Ok(())
    }
}

/// `max(0, x)`; also the fused ReLU -> ReLU (the same function).
#[derive(Debug)]
pub struct Relu;

impl Workload for Relu {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let ([input], [output]) = (inputs, outputs) else {
            return Err(BackendError::invalid_argument(
                "ReLU takes 1 input and writes 1 output",
            ));
        };
        let (src, dst) = (input.as_f32()?, output.as_f32_mut()?);
        if src.len() != dst.len() {
            return Err(BackendError::invalid_argument(
                "ReLU: input and output sizes differ",
            ));
        }
        for (d, s) in dst.iter_mut().zip(src) {
            *d = if *s < 0.0 { 0.0 } else { *s };
        }
        Ok(())
    }
}

/// A workload whose `execute` panics (the export layer turns it into an error).
#[derive(Debug)]
pub struct Exploding;

impl Workload for Exploding {
    fn execute(&self, _: &[TensorView<'_>], _: &mut [TensorViewMut<'_>]) -> BackendResult<()> {
        panic!("elu exploded")
    }
}

impl BackendContext for GammaContext {
    fn before_load_network(&self, network: NetworkId) -> BackendResult<()> {
        log::info!("{ID}[{}] before_load_network {network}", self.tag);
        Ok(())
    }
    fn after_load_network(&self, network: NetworkId) -> BackendResult<()> {
        log::info!("{ID}[{}] after_load_network {network}", self.tag);
        Ok(())
    }
    fn before_unload_network(&self, network: NetworkId) -> BackendResult<()> {
        log::info!("{ID}[{}] before_unload_network {network}", self.tag);
        if network == 13 {
            return Err(BackendError::failed("network 13 is busy"));
        }
        Ok(())
    }
    fn after_unload_network(&self, network: NetworkId) -> BackendResult<()> {
        log::info!("{ID}[{}] after_unload_network {network}", self.tag);
        Ok(())
    }
    fn after_enqueue(&self, network: NetworkId) -> BackendResult<()> {
        log::info!("{ID}[{}] after_enqueue {network}", self.tag);
        Ok(())
    }
}

backplane_api::export_backend!(id: "TestGamma", vendor: "Test", backend: TestGamma::default);
