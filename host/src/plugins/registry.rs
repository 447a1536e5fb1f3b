//! The per-runtime backend registry: built-ins first (by an explicit call), then dynamic
//! backends in discovery order. Never process-global.

use std::{
    fmt,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use backplane_api::{
    ApiVersion, BackendOptions, Capabilities,
    additions::{self, Entry},
    capabilities::names,
    ffi::{BackendHandle, CallError, FaultState, HostAllocator},
};

use crate::{
    remote::RemoteBackend,
    report::{BackendReport, Rejection, SourceKind, capabilities_json},
    sys::loader::PluginFactory,
};

/// `KEY=VALUE, …` of `options`, for messages.
pub fn describe_options(options: &BackendOptions) -> String {
    let items: Vec<String> = options
        .entries
        .iter()
        .map(|e| format!("{}={}", e.name, e.value))
        .collect();
    items.join(", ")
}

/// Where a registered backend came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendSource {
    /// Compiled into the host.
    Builtin,
    /// Loaded from a shared object.
    Dynamic {
        /// The directory entry it was found as.
        file: PathBuf,
        /// The resolved file.
        canonical: PathBuf,
    },
}

type BuiltinConstructor = Arc<dyn Fn(Arc<FaultState>) -> BackendHandle + Send + Sync>;

#[derive(Clone)]
enum Constructor {
    Builtin(BuiltinConstructor),
    Dynamic(PluginFactory),
    /// Runs in a child process; its instances are made there, per network.
    Remote(Arc<RemoteBackend>),
}

/// One registered backend.
pub struct RegisteredBackend {
    id: String,
    source: BackendSource,
    version: ApiVersion,
    capabilities: Capabilities,
    fault: Arc<FaultState>,
    constructor: Constructor,
    /// The instance made at registration, used for queries (layer support, …).
    probe: BackendHandle,
    /// The application's allocator, once the backend accepted it: offered to every new
    /// instance too.
    allocator: Mutex<Option<Arc<dyn HostAllocator>>>,
    /// Set once the runtime has warned that this (Backend API 1.0) backend's options reach
    /// only its backend context.
    options_warned: AtomicBool,
}

impl fmt::Debug for RegisteredBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredBackend")
            .field("id", &self.id)
            .field("source", &self.source)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl RegisteredBackend {
    /// The backend id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// Where it came from.
    pub fn source(&self) -> &BackendSource {
        &self.source
    }
    /// The Backend API version it was built against.
    pub fn version(&self) -> ApiVersion {
        self.version
    }
    /// Its capabilities, as read at registration.
    pub fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }
    /// The instance made at registration (for queries such as layer support).
    pub fn instance(&self) -> &BackendHandle {
        &self.probe
    }
    /// `true` when the backend computes in memory of its own (Backend API 1.3's device
    /// tensors): it declares `DeviceMemory` (and not `HostMemory`) and was built against a
    /// minor that has the device-memory entries. A 1.2 or older plugin's `DeviceMemory` is
    /// ignored: it runs in host memory.
    ///
    /// A device backend run out of process is not one for the host: its server copies
    /// between the shared tensor memory and the device around each workload, so the host
    /// sees host memory (`false` here).
    pub fn is_device(&self) -> bool {
        self.remote().is_none() && self.computes_in_device_memory()
    }
    /// `true` when the backend computes in memory of its own, in this process or in its
    /// server's ([`is_device`](Self::is_device) without the out-of-process exception): its
    /// workloads take constants only from their descriptions.
    pub fn computes_in_device_memory(&self) -> bool {
        additions::has_entry(self.version, Entry::DeviceMemory)
            && self.capabilities.is_enabled(names::DEVICE_MEMORY)
            && !self.capabilities.is_enabled(names::HOST_MEMORY)
    }
    /// `true` for a device backend ([`is_device`](Self::is_device)) that can use a caller's
    /// host buffer without a copy (`HostMemoryImport`).
    pub fn imports_host_memory(&self) -> bool {
        self.is_device() && self.capabilities.is_enabled(names::HOST_MEMORY_IMPORT)
    }
    /// The backend's own release: the host's version for a built-in, the release a plugin's
    /// export macro embedded (its crate's version); `None` when the plugin embeds none, or
    /// for a plugin that runs out of process (the host does not open its file).
    pub fn release(&self) -> Option<String> {
        match (&self.constructor, &self.source) {
            (Constructor::Dynamic(f), _) => f.metadata().map(|m| m.release),
            (_, BackendSource::Builtin) => Some(env!("CARGO_PKG_VERSION").to_owned()),
            _ => None,
        }
    }
    /// The server of a backend that runs out of process.
    pub fn remote(&self) -> Option<&Arc<RemoteBackend>> {
        match &self.constructor {
            Constructor::Remote(r) => Some(r),
            _ => None,
        }
    }
    /// `true` once the backend has panicked; it is then not used again by this runtime.
    pub fn is_faulted(&self) -> bool {
        self.fault.is_faulted()
    }
    /// Why it faulted.
    pub fn fault_reason(&self) -> Option<String> {
        self.fault.reason()
    }

    /// Called when a network is optimised with `options` for this backend: a backend that does
    /// not take options at workload-factory creation and in `optimize_subgraph` (a Backend API
    /// 1.0 plugin, called through its 1.0 entries) gets one warning per runtime saying so.
    pub fn note_options(&self, options: &BackendOptions) {
        if options.entries.is_empty() || self.probe.takes_options() {
            return;
        }
        if !self.options_warned.swap(true, Ordering::Relaxed) {
            log::warn!(
                "backend {} implements Backend API {}: its options ({}) were ignored by \
                 optimize_subgraph and workload-factory creation (they need 1.1) and reach only \
                 its backend context",
                self.id,
                self.version,
                describe_options(options)
            );
        }
    }

    /// Whether this backend runs `layer` with these tensors: `Err` carries its reason, or the
    /// failed call's error (the one support query the optimizer and its checks use).
    pub fn supports(
        &self,
        layer: &backplane_api::LayerDescriptor,
        inputs: &[backplane_api::TensorInfo],
        outputs: &[backplane_api::TensorInfo],
    ) -> Result<(), String> {
        match self.probe.is_layer_supported(layer, inputs, outputs) {
            Ok(backplane_api::Support::Supported) => Ok(()),
            Ok(backplane_api::Support::Unsupported(reason)) => Err(reason.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Offers the application's `allocator` to the backend (Arm NN's custom allocator map).
    /// When it accepts (`Ok(true)`), every instance made later is offered it too.
    ///
    /// # Errors
    /// The call's error (a panic faults the backend).
    pub fn use_custom_allocator(
        &self,
        allocator: Arc<dyn HostAllocator>,
    ) -> Result<bool, CallError> {
        let accepted = self.probe.use_custom_allocator(allocator.clone())?;
        *self.allocator.lock().unwrap_or_else(|e| e.into_inner()) = accepted.then_some(allocator);
        Ok(accepted)
    }

    /// A new instance of the backend (a new `BackendFactory` call for a plugin), offered the
    /// application's allocator if the backend accepted one.
    pub fn create_instance(&self) -> Result<BackendHandle, Rejection> {
        let instance = self.new_instance()?;
        let allocator = self
            .allocator
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(a) = allocator {
            match instance.use_custom_allocator(a) {
                Ok(true) => {}
                Ok(false) => log::warn!(
                    "backend {}: a new instance declined the allocator its first one accepted",
                    self.id
                ),
                Err(e) => return Err(setup_failed(&e)),
            }
        }
        Ok(instance)
    }

    fn new_instance(&self) -> Result<BackendHandle, Rejection> {
        if self.fault.is_faulted() {
            return Err(Rejection::new(
                crate::report::ReasonCode::Panicked,
                format!(
                    "backend {} is faulted: {}",
                    self.id,
                    self.fault.reason().unwrap_or_default()
                ),
            ));
        }
        match &self.constructor {
            Constructor::Builtin(f) => Ok(f(self.fault.clone())),
            Constructor::Dynamic(p) => p.create(self.fault.clone()),
            Constructor::Remote(r) => Err(Rejection::new(
                crate::report::ReasonCode::FactoryFailed,
                format!(
                    "backend {} runs out of process (pid {}): its instances are made there, \
                     by the runtime's load",
                    self.id,
                    r.pid()
                ),
            )),
        }
    }

    /// This backend's line in the discovery report.
    pub fn report(&self) -> BackendReport {
        let (source, file) = match &self.source {
            BackendSource::Builtin => (SourceKind::Builtin, None),
            BackendSource::Dynamic { file, .. } => (SourceKind::Dynamic, Some(file.clone())),
        };
        BackendReport {
            id: self.id.clone(),
            source,
            file,
            version: self.version.to_string(),
            capabilities: capabilities_json(&self.capabilities),
            faulted: self.is_faulted(),
            fault: self.fault_reason(),
            out_of_process_pid: self.remote().map(|r| r.pid()),
        }
    }
}

/// Why a new instance is unusable when a call made while setting it up failed: `panicked` for
/// a panic, `factory_failed` otherwise.
fn setup_failed(e: &CallError) -> Rejection {
    let reason = if e.code == backplane_api::ErrorCode::Panicked {
        crate::report::ReasonCode::Panicked
    } else {
        crate::report::ReasonCode::FactoryFailed
    };
    Rejection::new(reason, e.to_string())
}

/// The backends of one runtime, in registration order.
#[derive(Debug, Default)]
pub struct BackendRegistry {
    entries: Vec<RegisteredBackend>,
}

impl BackendRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registered ids, in registration order.
    pub fn ids(&self) -> Vec<&str> {
        self.entries.iter().map(|e| e.id.as_str()).collect()
    }

    /// Whether `id` is registered.
    pub fn is_registered(&self, id: &str) -> bool {
        self.get(id).is_some()
    }

    /// The backend registered as `id`.
    pub fn get(&self, id: &str) -> Option<&RegisteredBackend> {
        self.entries.iter().find(|e| e.id == id)
    }

    /// Every registered backend, in registration order.
    pub fn backends(&self) -> &[RegisteredBackend] {
        &self.entries
    }

    /// Where `id` came from.
    pub fn source(&self, id: &str) -> Option<&BackendSource> {
        self.get(id).map(|e| &e.source)
    }

    /// The Backend API version `id` was built against.
    pub fn version(&self, id: &str) -> Option<ApiVersion> {
        self.get(id).map(|e| e.version)
    }

    /// The capabilities of `id`.
    pub fn capabilities(&self, id: &str) -> Option<&Capabilities> {
        self.get(id).map(|e| &e.capabilities)
    }

    /// A new instance of `id`.
    pub fn create_instance(&self, id: &str) -> Option<Result<BackendHandle, Rejection>> {
        self.get(id).map(RegisteredBackend::create_instance)
    }

    /// The source file of the backend already registered as `id`, for a duplicate-id message.
    pub(crate) fn describe_holder(&self, id: &str) -> Option<String> {
        self.get(id).map(|e| match &e.source {
            BackendSource::Builtin => "the built-in backend".to_owned(),
            BackendSource::Dynamic { file, .. } => file.display().to_string(),
        })
    }

    /// Registers a backend compiled into the host. `make` builds an instance (use
    /// [`BackendHandle::from_builtin`]). Fails if the id is taken or the backend misbehaves.
    pub fn register_builtin(
        &mut self,
        id: &str,
        make: impl Fn(Arc<FaultState>) -> BackendHandle + Send + Sync + 'static,
    ) -> Result<(), Rejection> {
        self.register(
            id,
            BackendSource::Builtin,
            ApiVersion::CURRENT,
            Constructor::Builtin(Arc::new(make)),
        )
    }

    /// Registers a validated plugin (the runtime's discovery calls this).
    pub(crate) fn register_dynamic(
        &mut self,
        factory: PluginFactory,
        version: ApiVersion,
        file: &Path,
        canonical: &Path,
    ) -> Result<(), Rejection> {
        let id = factory.id().to_owned();
        let source = BackendSource::Dynamic {
            file: file.to_path_buf(),
            canonical: canonical.to_path_buf(),
        };
        self.register(&id, source, version, Constructor::Dynamic(factory))
    }

    /// Registers a backend whose server runs in a child process (the runtime's discovery
    /// calls this, for plugins and built-ins chosen to run out of process).
    pub(crate) fn register_remote(
        &mut self,
        remote: RemoteBackend,
        source: BackendSource,
    ) -> Result<(), Rejection> {
        let id = remote.id().to_owned();
        let version = remote.version();
        self.register(&id, source, version, Constructor::Remote(Arc::new(remote)))
    }

    fn register(
        &mut self,
        id: &str,
        source: BackendSource,
        version: ApiVersion,
        constructor: Constructor,
    ) -> Result<(), Rejection> {
        use crate::report::ReasonCode;
        if let Some(holder) = self.describe_holder(id) {
            return Err(Rejection::new(
                ReasonCode::DuplicateId,
                format!("backend id {id} is already registered from {holder}"),
            ));
        }
        let fault = match &constructor {
            Constructor::Remote(r) => r.fault_state().clone(),
            _ => FaultState::new(),
        };
        let probe = match &constructor {
            Constructor::Builtin(f) => f(fault.clone()),
            Constructor::Dynamic(p) => p.create(fault.clone())?,
            Constructor::Remote(r) => r.query_handle(),
        };
        let capabilities = probe.capabilities().map_err(|e| setup_failed(&e))?;
        log::info!("registered backend {id} ({source:?}, Backend API {version})");
        self.entries.push(RegisteredBackend {
            id: id.to_owned(),
            source,
            version,
            capabilities,
            fault,
            constructor,
            probe,
            allocator: Mutex::new(None),
            options_warned: AtomicBool::new(false),
        });
        Ok(())
    }
}
