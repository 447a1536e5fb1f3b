//! `OldFull` (vendor `Old`): a plugin built against the frozen Backend API 1.0 that implements
//! every optional part of it, for the compatibility tests of newer hosts.
//!
//! - Layers: those of `bp_compat_common` (ElementwiseBinary, ReLU).
//! - `capabilities`: `HostMemory` and `OldFullCapability`.
//! - `create_memory_manager`: an arena that holds 1024 bytes while acquired.
//! - `create_backend_context`: refuses the first `before_unload_network` of each network,
//!   naming the options it was created with (so a test sees both the hook and the options).
//! - `optimize_subgraph`: substitutes `PreCompiled` `AddReLU` for an Add read only by a ReLU.
//! - `use_custom_allocator`: accepts.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicU64, Ordering},
};

use backplane_api::{
    Backend, BackendContext, BackendError, BackendOptions, BackendResult, BinaryOperation,
    Capabilities, CustomAllocator, LayerDescriptor, MemoryManager, NetworkId, OptimizationViews,
    PreCompiledDescriptor, SubgraphLayer, SubgraphView, Substitution, Support, TensorInfo,
    Workload, WorkloadDesc, WorkloadFactory, ActivationFunction, capabilities::names,
};

/// The id this plugin exports.
pub const ID: &str = "OldFull";

/// Bytes the arena holds while acquired.
pub const ARENA_BYTES: u64 = 1024;

/// The backend.
#[derive(Debug, Default)]
pub struct OldFull {
    allocator_offers: AtomicU64,
}

impl Backend for OldFull {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with_bool(names::HOST_MEMORY, true)
            .with_bool("OldFullCapability", true)
    }

    fn is_layer_supported(&self, layer: &LayerDescriptor, inputs: &[TensorInfo], outputs: &[TensorInfo]) -> Support {
        bp_compat_common::support(ID, layer, inputs, outputs)
    }

    fn create_memory_manager(&self) -> BackendResult<Option<Arc<dyn MemoryManager>>> {
        Ok(Some(Arc::new(Arena::default())))
    }

    fn create_workload_factory(&self, memory: Option<Arc<dyn MemoryManager>>) -> BackendResult<Box<dyn WorkloadFactory>> {
        match memory {
            Some(_) => Ok(Box::new(Factory)),
            None => Err(BackendError::invalid_argument("OldFull: expected its memory manager")),
        }
    }

    fn create_backend_context(&self, options: &BackendOptions) -> BackendResult<Option<Box<dyn BackendContext>>> {
        let options: Vec<String> = options
            .entries
            .iter()
            .map(|e| format!("{}={}", e.name, e.value))
            .collect();
        Ok(Some(Box::new(Context {
            options: options.join(","),
            refused: Mutex::new(Vec::new()),
        })))
    }

    fn optimize_subgraph(&self, subgraph: &SubgraphView<'_>) -> BackendResult<OptimizationViews> {
        let mut views = OptimizationViews::default();
        let mut fused = Vec::new();
        for add in subgraph.layers.iter() {
            if add.descriptor != LayerDescriptor::ElementwiseBinary(BinaryOperation::Add) {
                continue;
            }
            let Some(&t) = add.outputs.as_slice().first() else { continue };
            let readers: Vec<&SubgraphLayer> = subgraph
                .layers
                .iter()
                .filter(|l| l.inputs.contains(&t))
                .collect();
            let [relu] = readers.as_slice() else { continue };
            let is_relu = matches!(&relu.descriptor,
                LayerDescriptor::Activation(a) if a.function == ActivationFunction::ReLU);
            if !is_relu || subgraph.outputs.contains(&t) {
                continue;
            }
            fused.extend([add.id, relu.id]);
            views.substitutions.push(Substitution {
                replaced: vec![add.id, relu.id].into(),
                replacement: SubgraphLayer {
                    id: 0,
                    name: format!("{}+{}", add.name, relu.name).into(),
                    descriptor: LayerDescriptor::PreCompiled(PreCompiledDescriptor {
                        backend: ID.into(),
                        operation: bp_compat_common::ADD_RELU.into(),
                        payload: Default::default(),
                    }),
                    inputs: add.inputs.clone(),
                    outputs: relu.outputs.clone(),
                },
            });
        }
        views.untouched = subgraph
            .layers
            .iter()
            .map(|l| l.id)
            .filter(|id| !fused.contains(id))
            .collect();
        Ok(views)
    }

    fn use_custom_allocator(&self, _allocator: CustomAllocator) -> bool {
        self.allocator_offers.fetch_add(1, Ordering::Relaxed);
        true
    }
}

struct Factory;

impl WorkloadFactory for Factory {
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
        bp_compat_common::create_workload(ID, desc)
    }
}

#[derive(Default)]
struct Arena {
    held: AtomicU64,
}

impl MemoryManager for Arena {
    fn acquire(&self) -> BackendResult<()> {
        self.held.store(ARENA_BYTES, Ordering::Relaxed);
        Ok(())
    }
    fn release(&self) -> BackendResult<()> {
        self.held.store(0, Ordering::Relaxed);
        Ok(())
    }
    fn allocated_bytes(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }
}

struct Context {
    options: String,
    refused: Mutex<Vec<NetworkId>>,
}

impl BackendContext for Context {
    fn before_unload_network(&self, network: NetworkId) -> BackendResult<()> {
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        if refused.contains(&network) {
            return Ok(());
        }
        refused.push(network);
        Err(BackendError::failed(format!(
            "OldFull keeps network {network} loaded once (options: [{}])",
            self.options
        )))
    }
}

backplane_api::export_backend!(id: "OldFull", vendor: "Old", backend: OldFull::default);
