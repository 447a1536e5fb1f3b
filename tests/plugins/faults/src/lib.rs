//! The fault matrix's backend: `Faulty` works (it runs ReLU on Float32, has a memory manager,
//! a workload factory and a context, and answers `optimize_subgraph`), except in the one
//! entry point its [`Fault`] names, where it panics (`"<method> exploded"`) or returns an
//! error (`ErrorCode::Failed`, `"<method> refused"`).
//!
//! Every call is logged at `info` as `"<Id>: <method>"` (for example `"ErrorAcquire: release"`),
//! so that a test can check which entry points the host called, and in which order, through
//! the plugin's log forwarding.
//!
//! Each plugin of the matrix is one example of this package (`examples/<mode>_<method>.rs`),
//! built as a cdylib: one crate per fault, one line each, through [`fault_plugin!`].

use std::sync::Arc;

pub use backplane_api;
use backplane_api::{
    ActivationFunction, Backend, BackendContext, BackendError, BackendOptions, BackendResult,
    Capabilities, CustomAllocator, DataType, ErrorCode, LayerDescriptor, MemoryManager, NetworkId,
    OptimizationViews, SubgraphView, Support, TensorInfo, TensorView, TensorViewMut, Workload,
    WorkloadDesc, WorkloadFactory,
};

/// How the faulty entry point fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// It panics with `"<method> exploded"`.
    Panic,
    /// It returns `ErrorCode::Failed` with `"<method> refused"`.
    Error,
}

/// Every entry point of the Backend API 1.0 tables, and the five destructors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `Backend::capabilities`
    Capabilities,
    /// `Backend::is_layer_supported`
    IsLayerSupported,
    /// `Backend::create_memory_manager`
    CreateMemoryManager,
    /// `Backend::create_workload_factory`
    CreateWorkloadFactory,
    /// `Backend::create_backend_context`
    CreateBackendContext,
    /// `Backend::optimize_subgraph`
    OptimizeSubgraph,
    /// `Backend::use_custom_allocator`
    UseCustomAllocator,
    /// `MemoryManager::acquire`
    Acquire,
    /// `MemoryManager::release`
    Release,
    /// `MemoryManager::allocated_bytes`
    AllocatedBytes,
    /// `WorkloadFactory::create_workload`
    CreateWorkload,
    /// `Workload::execute`
    Execute,
    /// `BackendContext::before_load_network`
    BeforeLoadNetwork,
    /// `BackendContext::after_load_network`
    AfterLoadNetwork,
    /// `BackendContext::before_unload_network`
    BeforeUnloadNetwork,
    /// `BackendContext::after_unload_network`
    AfterUnloadNetwork,
    /// `BackendContext::after_enqueue`
    AfterEnqueue,
    /// `Drop` of the backend
    DropBackend,
    /// `Drop` of a memory manager
    DropMemoryManager,
    /// `Drop` of a workload factory
    DropWorkloadFactory,
    /// `Drop` of a workload
    DropWorkload,
    /// `Drop` of a context
    DropBackendContext,
}

impl Method {
    /// The method's name as the host reports it (`CallError::method`).
    pub const fn name(self) -> &'static str {
        match self {
            Method::Capabilities => "capabilities",
            Method::IsLayerSupported => "is_layer_supported",
            Method::CreateMemoryManager => "create_memory_manager",
            Method::CreateWorkloadFactory => "create_workload_factory",
            Method::CreateBackendContext => "create_backend_context",
            Method::OptimizeSubgraph => "optimize_subgraph",
            Method::UseCustomAllocator => "use_custom_allocator",
            Method::Acquire => "acquire",
            Method::Release => "release",
            Method::AllocatedBytes => "allocated_bytes",
            Method::CreateWorkload => "create_workload",
            Method::Execute => "execute",
            Method::BeforeLoadNetwork => "before_load_network",
            Method::AfterLoadNetwork => "after_load_network",
            Method::BeforeUnloadNetwork => "before_unload_network",
            Method::AfterUnloadNetwork => "after_unload_network",
            Method::AfterEnqueue => "after_enqueue",
            Method::DropBackend => "drop backend",
            Method::DropMemoryManager => "drop memory manager",
            Method::DropWorkloadFactory => "drop workload factory",
            Method::DropWorkload => "drop workload",
            Method::DropBackendContext => "drop backend context",
        }
    }
}

/// Where and how a `Faulty` backend fails, and its id (for its log lines).
#[derive(Debug, Clone, Copy)]
pub struct Fault {
    /// The backend id the plugin exports.
    pub id: &'static str,
    /// How.
    pub mode: Mode,
    /// Where.
    pub method: Method,
}

impl Fault {
    /// Logs the call; fails it if it is the faulty one.
    fn check(self, method: Method) -> BackendResult<()> {
        log::info!("{}: {}", self.id, method.name());
        if method != self.method {
            return Ok(());
        }
        match self.mode {
            Mode::Panic => panic!("{} exploded", method.name()),
            Mode::Error => Err(BackendError::new(
                ErrorCode::Failed,
                format!("{} refused", method.name()),
            )),
        }
    }

    /// For entry points that cannot return an error: logs the call, panics if it is the
    /// faulty one.
    fn panic_if(self, method: Method) {
        if let Err(e) = self.check(method) {
            unreachable!("{method:?} cannot return an error: {e:?}")
        }
    }
}

/// The backend.
#[derive(Debug)]
pub struct Faulty(pub Fault);

impl Drop for Faulty {
    fn drop(&mut self) {
        self.0.panic_if(Method::DropBackend);
    }
}

/// `Faulty`'s one layer: ReLU on Float32.
fn is_relu(layer: &LayerDescriptor) -> bool {
    matches!(layer, LayerDescriptor::Activation(a) if a.function == ActivationFunction::ReLU)
}

impl Backend for Faulty {
    fn capabilities(&self) -> Capabilities {
        self.0.panic_if(Method::Capabilities);
        Capabilities::new()
    }

    fn is_layer_supported(
        &self,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        _: &[TensorInfo],
    ) -> Support {
        self.0.panic_if(Method::IsLayerSupported);
        if is_relu(layer) && inputs.iter().all(|t| t.data_type == DataType::Float32) {
            Support::Supported
        } else {
            Support::unsupported("Faulty runs ReLU on Float32 only")
        }
    }

    fn create_memory_manager(&self) -> BackendResult<Option<Arc<dyn MemoryManager>>> {
        self.0.check(Method::CreateMemoryManager)?;
        Ok(Some(Arc::new(Memory(self.0))))
    }

    fn create_workload_factory(
        &self,
        _: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        self.0.check(Method::CreateWorkloadFactory)?;
        Ok(Box::new(Factory(self.0)))
    }

    fn create_backend_context(
        &self,
        _: &BackendOptions,
    ) -> BackendResult<Option<Box<dyn BackendContext>>> {
        self.0.check(Method::CreateBackendContext)?;
        Ok(Some(Box::new(Context(self.0))))
    }

    fn optimize_subgraph(&self, subgraph: &SubgraphView<'_>) -> BackendResult<OptimizationViews> {
        self.0.check(Method::OptimizeSubgraph)?;
        Ok(OptimizationViews::untouched(subgraph))
    }

    fn use_custom_allocator(&self, _: CustomAllocator) -> bool {
        self.0.panic_if(Method::UseCustomAllocator);
        false
    }
}

struct Memory(Fault);

impl Drop for Memory {
    fn drop(&mut self) {
        self.0.panic_if(Method::DropMemoryManager);
    }
}

impl MemoryManager for Memory {
    fn acquire(&self) -> BackendResult<()> {
        self.0.check(Method::Acquire)
    }
    fn release(&self) -> BackendResult<()> {
        self.0.check(Method::Release)
    }
    fn allocated_bytes(&self) -> u64 {
        self.0.panic_if(Method::AllocatedBytes);
        0
    }
}

struct Factory(Fault);

impl Drop for Factory {
    fn drop(&mut self) {
        self.0.panic_if(Method::DropWorkloadFactory);
    }
}

impl WorkloadFactory for Factory {
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
        self.0.check(Method::CreateWorkload)?;
        match desc.layer {
            LayerDescriptor::Activation(a) if is_relu(desc.layer) => Ok(Box::new(Relu(self.0, *a))),
            other => Err(BackendError::unsupported(format!(
                "Faulty has no workload for {}",
                other.kind()
            ))),
        }
    }
}

struct Relu(Fault, backplane_api::ActivationDescriptor);

impl Drop for Relu {
    fn drop(&mut self) {
        self.0.panic_if(Method::DropWorkload);
    }
}

impl Workload for Relu {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.0.check(Method::Execute)?;
        let (Some(input), Some(output)) = (inputs.first(), outputs.first_mut()) else {
            return Err(BackendError::invalid_argument(
                "ReLU takes one input and one output",
            ));
        };
        let out = output.as_f32_mut()?;
        out.copy_from_slice(input.as_f32()?);
        self.1.apply_in_place(out);
        Ok(())
    }
}

struct Context(Fault);

impl Drop for Context {
    fn drop(&mut self) {
        self.0.panic_if(Method::DropBackendContext);
    }
}

impl BackendContext for Context {
    fn before_load_network(&self, _: NetworkId) -> BackendResult<()> {
        self.0.check(Method::BeforeLoadNetwork)
    }
    fn after_load_network(&self, _: NetworkId) -> BackendResult<()> {
        self.0.check(Method::AfterLoadNetwork)
    }
    fn before_unload_network(&self, _: NetworkId) -> BackendResult<()> {
        self.0.check(Method::BeforeUnloadNetwork)
    }
    fn after_unload_network(&self, _: NetworkId) -> BackendResult<()> {
        self.0.check(Method::AfterUnloadNetwork)
    }
    fn after_enqueue(&self, _: NetworkId) -> BackendResult<()> {
        self.0.check(Method::AfterEnqueue)
    }
}

/// Exports a `Faulty` backend: `fault_plugin!("PanicAcquire", Panic, Acquire);`. The id is
/// the mode followed by the method, by convention.
#[macro_export]
macro_rules! fault_plugin {
    ($id:literal, $mode:ident, $method:ident) => {
        $crate::backplane_api::export_backend!(id: $id, vendor: "Test", backend: || {
            $crate::Faulty($crate::Fault {
                id: $id,
                mode: $crate::Mode::$mode,
                method: $crate::Method::$method,
            })
        });
    };
}
