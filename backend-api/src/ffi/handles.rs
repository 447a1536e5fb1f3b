//! Host side: owned, safe handles on plugin objects.
//!
//! Every handle holds the plugin's library (a [`LibraryKeepAlive`]) and destroys its object
//! through the plugin's own vtable before releasing it. Nothing a plugin returns is trusted:
//! null pointers, non-UTF-8 strings and panics become [`CallError`]s. A backend that panicked
//! is marked faulted in its [`FaultState`]; later calls on any of its objects fail at once.

use std::{
    any::Any,
    fmt,
    ptr::NonNull,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use abi_stable::std_types::{RResult, RSlice, RSliceMut, RString};

use super::{
    BackendContextHeader, BackendHeader, HostAllocator, MemoryManagerHeader, RawAllocator,
    WorkloadFactoryHeader, WorkloadHeader, allocator::HostAllocatorBox,
};
use crate::{
    ApiVersion, BackendError, BackendOptions, BufferId, Capabilities, DeviceTensor, ErrorCode,
    HostRegion, LayerDescriptor, NO_BUFFER, OptimizationViews, PreparedBlob, PreparedWorkload,
    SubgraphView, Support, TensorInfo, TensorView, TensorViewMut, WorkloadDesc,
    additions::{self, Entry},
};

/// Whatever keeps a plugin's library mapped (the host passes its `Arc<Library>`).
pub type LibraryKeepAlive = Arc<dyn Any + Send + Sync>;

/// Whether a backend has faulted (panicked) and why; shared by all objects of one registered
/// backend.
#[derive(Debug, Default)]
pub struct FaultState {
    faulted: AtomicBool,
    reason: Mutex<Option<String>>,
}

impl FaultState {
    /// A fresh, healthy state.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// `true` once the backend has panicked.
    pub fn is_faulted(&self) -> bool {
        self.faulted.load(Ordering::Acquire)
    }

    /// Why the backend faulted (the first panic's message).
    pub fn reason(&self) -> Option<String> {
        self.reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Marks the backend faulted; the first reason is kept.
    pub fn mark(&self, reason: &str) {
        let mut r = self.reason.lock().unwrap_or_else(|e| e.into_inner());
        if r.is_none() {
            *r = Some(reason.to_owned());
        }
        self.faulted.store(true, Ordering::Release);
    }
}

/// A failed call into a backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError {
    /// The backend's id.
    pub backend: String,
    /// The method called (`create_workload`, `execute`, …).
    pub method: &'static str,
    /// The kind of failure; [`ErrorCode::Panicked`] for a caught panic.
    pub code: ErrorCode,
    /// The backend's message, or the host's when the backend misbehaved.
    pub message: String,
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "backend {}: {} {}: {}",
            self.backend, self.method, self.code, self.message
        )
    }
}

impl std::error::Error for CallError {}

/// Converts a plugin-made string, checking its UTF-8 (a hostile plugin could hand back
/// anything). The bytes are read as bytes: no `&str` is formed over unchecked data.
fn checked_string(s: &RString) -> String {
    String::from_utf8_lossy(s.clone().into_bytes().as_slice()).into_owned()
}

/// What every object of one backend instance shares: who it is and what keeps it alive.
#[derive(Clone)]
struct Origin {
    backend: Arc<str>,
    /// The Backend API version the plugin was built against: nothing newer is handed to it.
    version: ApiVersion,
    fault: Arc<FaultState>,
    /// Declared last: released after the object is destroyed.
    #[allow(dead_code, reason = "held, never read: keeps the plugin's code mapped")]
    library: Option<LibraryKeepAlive>,
}

impl Origin {
    fn error(
        &self,
        method: &'static str,
        code: ErrorCode,
        message: impl Into<String>,
    ) -> CallError {
        CallError {
            backend: self.backend.to_string(),
            method,
            code,
            message: message.into(),
        }
    }

    fn check(&self, method: &'static str) -> Result<(), CallError> {
        if self.fault.is_faulted() {
            let why = self.fault.reason().unwrap_or_default();
            return Err(self.error(
                method,
                ErrorCode::Failed,
                format!("backend is faulted ({why})"),
            ));
        }
        Ok(())
    }

    fn finish<T>(&self, method: &'static str, r: RResult<T, BackendError>) -> Result<T, CallError> {
        match r {
            RResult::ROk(v) => Ok(v),
            RResult::RErr(e) => {
                let err = self.error(method, e.code, checked_string(&e.message));
                if e.code == ErrorCode::Panicked {
                    log::error!("{err}; backend marked faulted");
                    self.fault
                        .mark(&format!("{} {}: {}", err.method, err.code, err.message));
                }
                Err(err)
            }
        }
    }

    /// `Err` (code `Unsupported`) when `layer` uses anything newer than the plugin's version
    /// ([`additions::gate`]): such a descriptor is never passed to it.
    fn gate(&self, method: &'static str, layer: &LayerDescriptor) -> Result<(), CallError> {
        additions::gate(self.version, &self.backend, layer)
            .map_err(|why| self.error(method, ErrorCode::Unsupported, why))?;
        // A constant carries a tensor info of its own.
        match layer {
            LayerDescriptor::Constant(c) => self.gate_tensors(method, [&c.info]),
            _ => Ok(()),
        }
    }

    /// As [`Origin::gate`], for the form of `layer` over `inputs` ([`additions::gate_form`]).
    fn gate_form(
        &self,
        method: &'static str,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
    ) -> Result<(), CallError> {
        additions::gate_form(self.version, &self.backend, layer, inputs)
            .map_err(|why| self.error(method, ErrorCode::Unsupported, why))
    }

    /// As [`Origin::gate`], for the tensors a call would hand over
    /// ([`additions::gate_tensors`]).
    fn gate_tensors<'t>(
        &self,
        method: &'static str,
        tensors: impl IntoIterator<Item = &'t TensorInfo>,
    ) -> Result<(), CallError> {
        additions::gate_tensors(self.version, &self.backend, tensors)
            .map_err(|why| self.error(method, ErrorCode::Unsupported, why))
    }

    /// The refusal of a device-memory call on a plugin without the 1.3 entries.
    fn no_device_memory(&self, method: &'static str) -> CallError {
        self.absent(method, Entry::DeviceMemory, "device memory")
    }

    /// `Unsupported`: the plugin's minor predates `entry` (`what`, for the message).
    fn absent(&self, method: &'static str, entry: Entry, what: &str) -> CallError {
        self.error(
            method,
            ErrorCode::Unsupported,
            format!(
                "{} implements Backend API {}; {what} needs {}",
                self.backend,
                self.version,
                additions::introduced_in(additions::Addition::Entry(entry))
            ),
        )
    }

    fn non_null<H>(&self, method: &'static str, p: *mut H) -> Result<NonNull<H>, CallError> {
        NonNull::new(p)
            .ok_or_else(|| self.error(method, ErrorCode::Failed, "returned a null object"))
    }
}

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident, $header:ident, $kind:literal) => {
        $(#[$doc])*
        pub struct $name {
            ptr: NonNull<$header>,
            origin: Origin,
        }

        // SAFETY: the Backend API requires every plugin object to be `Send + Sync` (the vendor
        // traits have those bounds), so the raw pointer may move and be shared across threads.
        unsafe impl Send for $name {}
        // SAFETY: as above.
        unsafe impl Sync for $name {}

        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: `ptr` is a live object made by this plugin, destroyed exactly once
                // (here), through its own vtable, while `origin.library` keeps the code mapped.
                unsafe { (self.ptr.as_ref().vtable.destroy())(self.ptr.as_ptr()) }
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({} @ {:p})", $kind, self.origin.backend, self.ptr)
            }
        }

        impl $name {
            /// The id of the backend that made this object.
            pub fn backend_id(&self) -> &str {
                &self.origin.backend
            }
        }
    };
}

handle!(
    /// An owned backend instance.
    BackendHandle, BackendHeader, "Backend"
);
handle!(
    /// An owned memory manager.
    MemoryManagerHandle, MemoryManagerHeader, "MemoryManager"
);
handle!(
    /// An owned workload factory.
    WorkloadFactoryHandle, WorkloadFactoryHeader, "WorkloadFactory"
);
handle!(
    /// An owned workload.
    WorkloadHandle, WorkloadHeader, "Workload"
);
handle!(
    /// An owned backend context.
    BackendContextHandle, BackendContextHeader, "BackendContext"
);

impl BackendHandle {
    /// Wraps the pointer a plugin's `BackendFactory` returned; `None` for null.
    ///
    /// # Safety
    /// `ptr` must come from `BackendFactory` of a plugin whose Backend API version the host
    /// checked and passes as `version`, and `library` must keep that plugin mapped (it is `None` only for backends
    /// compiled into the host).
    pub unsafe fn from_raw(
        ptr: *mut std::ffi::c_void,
        backend_id: &str,
        version: ApiVersion,
        library: Option<LibraryKeepAlive>,
        fault: Arc<FaultState>,
    ) -> Option<Self> {
        let ptr = NonNull::new(ptr.cast::<BackendHeader>())?;
        let origin = Origin {
            backend: backend_id.into(),
            version,
            fault,
            library,
        };
        Some(Self { ptr, origin })
    }

    /// A handle on a backend compiled into the host (the same ABI path as a plugin's).
    pub fn from_builtin(
        backend: impl crate::Backend,
        backend_id: &str,
        fault: Arc<FaultState>,
    ) -> Self {
        Self::from_host_object(backend, backend_id, ApiVersion::CURRENT, fault)
    }

    /// A handle on a backend object the host made itself, gated as a plugin built against
    /// `version`: a built-in, or the host's proxy of a backend that runs in another process
    /// (which then sees only what a plugin of its version may see).
    pub fn from_host_object(
        backend: impl crate::Backend,
        backend_id: &str,
        version: ApiVersion,
        fault: Arc<FaultState>,
    ) -> Self {
        let raw = super::into_raw_backend(backend);
        // SAFETY: `raw` is a fresh backend object built by this very crate, and its code is
        // part of the host, so no library needs to be kept.
        unsafe { Self::from_raw(raw, backend_id, version, None, fault) }
            .expect("Box::into_raw is never null")
    }

    /// The fault state shared by this backend's objects.
    pub fn fault_state(&self) -> &Arc<FaultState> {
        &self.origin.fault
    }

    /// The Backend API version the backend was built against.
    pub fn api_version(&self) -> ApiVersion {
        self.origin.version
    }

    /// `true` when the backend takes backend options at workload-factory creation and in
    /// `optimize_subgraph` (Backend API 1.1 and its vtable has the entries); a 1.0 plugin is
    /// called through its 1.0 entries, without options.
    pub fn takes_options(&self) -> bool {
        let vt = &self.header().vtable;
        additions::has_entry(self.origin.version, Entry::CreateWorkloadFactoryWithOptions)
            && vt.create_workload_factory_with_options().is_some()
            && additions::has_entry(self.origin.version, Entry::OptimizeSubgraphWithOptions)
            && vt.optimize_subgraph_with_options().is_some()
    }

    fn header(&self) -> &BackendHeader {
        // SAFETY: `ptr` is live while `self` is.
        unsafe { self.ptr.as_ref() }
    }

    /// See [`Backend::capabilities`](crate::Backend::capabilities).
    pub fn capabilities(&self) -> Result<Capabilities, CallError> {
        const M: &str = "capabilities";
        self.origin.check(M)?;
        // SAFETY: calling the object's own vtable entry with the object.
        let r = unsafe { (self.header().vtable.capabilities())(self.ptr.as_ptr()) };
        let mut caps = self.origin.finish(M, r)?;
        for e in caps.entries.iter_mut() {
            e.name = checked_string(&e.name).into();
        }
        Ok(caps)
    }

    /// See [`Backend::is_layer_supported`](crate::Backend::is_layer_supported).
    pub fn is_layer_supported(
        &self,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Result<Support, CallError> {
        const M: &str = "is_layer_supported";
        self.origin.check(M)?;
        if let Err(e) = self
            .origin
            .gate(M, layer)
            .and_then(|()| self.origin.gate_form(M, layer, inputs))
            .and_then(|()| self.origin.gate_tensors(M, inputs.iter().chain(outputs)))
        {
            // The host's own refusal: the plugin is not asked.
            return Ok(Support::Unsupported(e.message.into()));
        }
        // SAFETY: as in `capabilities`; the arguments outlive the call.
        let r = unsafe {
            (self.header().vtable.is_layer_supported())(
                self.ptr.as_ptr(),
                layer,
                RSlice::from_slice(inputs),
                RSlice::from_slice(outputs),
            )
        };
        Ok(match self.origin.finish(M, r)? {
            Support::Supported => Support::Supported,
            Support::Unsupported(reason) => Support::Unsupported(checked_string(&reason).into()),
        })
    }

    /// See [`Backend::create_memory_manager`](crate::Backend::create_memory_manager).
    pub fn create_memory_manager(&self) -> Result<Option<MemoryManagerHandle>, CallError> {
        const M: &str = "create_memory_manager";
        self.origin.check(M)?;
        // SAFETY: as in `capabilities`.
        let r = unsafe { (self.header().vtable.create_memory_manager())(self.ptr.as_ptr()) };
        let p = self.origin.finish(M, r)?;
        Ok(NonNull::new(p).map(|ptr| MemoryManagerHandle {
            ptr,
            origin: self.origin.clone(),
        }))
    }

    /// A workload factory: through the 1.1 entry with `options` when the backend
    /// [`takes_options`](Self::takes_options), else through the 1.0 entry, without them. See
    /// [`Backend::create_workload_factory_with_options`](crate::Backend::create_workload_factory_with_options).
    /// `memory` must be a memory manager of this same backend instance.
    pub fn create_workload_factory(
        &self,
        memory: Option<&MemoryManagerHandle>,
        options: &BackendOptions,
    ) -> Result<WorkloadFactoryHandle, CallError> {
        const M: &str = "create_workload_factory";
        self.origin.check(M)?;
        let mem = memory.map_or(std::ptr::null(), |m| m.ptr.as_ptr().cast_const());
        let this = self.ptr.as_ptr();
        let vt = &self.header().vtable;
        let r = match vt.create_workload_factory_with_options() {
            // SAFETY: as in `capabilities`; `mem` is null or a live object (the plugin checks
            // that it is its own before using it); the entry exists in this plugin's table.
            Some(f) if self.takes_options() => unsafe { f(this, mem, options) },
            // SAFETY: as above, through the 1.0 entry.
            _ => unsafe { (vt.create_workload_factory())(this, mem) },
        };
        let ptr = self.origin.non_null(M, self.origin.finish(M, r)?)?;
        Ok(WorkloadFactoryHandle {
            ptr,
            origin: self.origin.clone(),
        })
    }

    /// See [`Backend::create_backend_context`](crate::Backend::create_backend_context).
    pub fn create_backend_context(
        &self,
        options: &BackendOptions,
    ) -> Result<Option<BackendContextHandle>, CallError> {
        const M: &str = "create_backend_context";
        self.origin.check(M)?;
        // SAFETY: as in `capabilities`.
        let r =
            unsafe { (self.header().vtable.create_backend_context())(self.ptr.as_ptr(), options) };
        let p = self.origin.finish(M, r)?;
        Ok(NonNull::new(p).map(|ptr| BackendContextHandle {
            ptr,
            origin: self.origin.clone(),
        }))
    }

    /// See [`Backend::optimize_subgraph_with_options`](crate::Backend::optimize_subgraph_with_options)
    /// (the 1.0 `optimize_subgraph`, without `options`, for a backend that does not
    /// [`take_options`](Self::takes_options)). A subgraph with a layer newer than the backend
    /// is refused without calling it. The host must still validate what comes back.
    pub fn optimize_subgraph(
        &self,
        subgraph: &SubgraphView<'_>,
        options: &BackendOptions,
    ) -> Result<OptimizationViews, CallError> {
        const M: &str = "optimize_subgraph";
        self.origin.check(M)?;
        for layer in subgraph.layers.iter() {
            self.origin.gate(M, &layer.descriptor)?;
        }
        self.origin
            .gate_tensors(M, subgraph.tensors.iter().map(|t| &t.info))?;
        let this = self.ptr.as_ptr();
        let vt = &self.header().vtable;
        let r = match vt.optimize_subgraph_with_options() {
            // SAFETY: as in `capabilities`; the entry exists in this plugin's table.
            Some(f) if self.takes_options() => unsafe { f(this, subgraph, options) },
            // SAFETY: as in `capabilities`, through the 1.0 entry.
            _ => unsafe { (vt.optimize_subgraph())(this, subgraph) },
        };
        self.origin.finish(M, r)
    }

    /// Offers `allocator` to the backend; `true` if it will use it. The allocator is kept
    /// alive for the rest of the process: the plugin's `CustomAllocator` is `Copy` and may be
    /// kept anywhere (one small leaked box per offer, like the libraries that are never
    /// unmapped).
    pub fn use_custom_allocator(
        &self,
        allocator: Arc<dyn HostAllocator>,
    ) -> Result<bool, CallError> {
        const M: &str = "use_custom_allocator";
        self.origin.check(M)?;
        let boxed: &'static HostAllocatorBox =
            Box::leak(Box::new(HostAllocatorBox::new(allocator)));
        let raw: RawAllocator = boxed.raw();
        // SAFETY: as in `capabilities`; `raw` points into a box that is never freed.
        let r = unsafe { (self.header().vtable.use_custom_allocator())(self.ptr.as_ptr(), raw) };
        self.origin.finish(M, r)
    }
}

impl MemoryManagerHandle {
    fn call(
        &self,
        method: &'static str,
        f: impl FnOnce(
            &super::MemoryManagerVTable_Ref,
        )
            -> unsafe extern "C" fn(*const MemoryManagerHeader) -> RResult<(), BackendError>,
    ) -> Result<(), CallError> {
        self.origin.check(method)?;
        // SAFETY: `ptr` is live; the entry belongs to its own vtable.
        let r = unsafe { f(&self.ptr.as_ref().vtable)(self.ptr.as_ptr()) };
        self.origin.finish(method, r)
    }

    /// See [`MemoryManager::acquire`](crate::MemoryManager::acquire).
    pub fn acquire(&self) -> Result<(), CallError> {
        self.call("acquire", |vt| vt.acquire())
    }

    /// See [`MemoryManager::release`](crate::MemoryManager::release).
    pub fn release(&self) -> Result<(), CallError> {
        self.call("release", |vt| vt.release())
    }

    /// See [`MemoryManager::allocated_bytes`](crate::MemoryManager::allocated_bytes).
    pub fn allocated_bytes(&self) -> Result<u64, CallError> {
        const M: &str = "allocated_bytes";
        self.origin.check(M)?;
        // SAFETY: `ptr` is live; the entry belongs to its own vtable.
        let r = unsafe { (self.ptr.as_ref().vtable.allocated_bytes())(self.ptr.as_ptr()) };
        self.origin.finish(M, r)
    }

    /// `true` when the plugin was built against Backend API 1.3 or later and its vtable has
    /// every device-memory entry ([`crate::device`]). The host calls the entries below only
    /// then; called anyway, they fail with `Unsupported`.
    pub fn has_device_memory(&self) -> bool {
        // SAFETY: `ptr` is live while `self` is.
        let vt = unsafe { &self.ptr.as_ref().vtable };
        additions::has_entry(self.origin.version, Entry::DeviceMemory)
            && vt.allocate_buffer().is_some()
            && vt.release_buffer().is_some()
            && vt.copy_to_device().is_some()
            && vt.copy_to_host().is_some()
            && vt.import_host().is_some()
            && vt.finish().is_some()
    }

    fn no_device_memory(&self, method: &'static str) -> CallError {
        self.origin.no_device_memory(method)
    }

    /// A call of device-memory entry `method`: refused (`Unsupported`) for a plugin without
    /// the entries, else `call` (which reads the entry from the vtable and calls it; `None`
    /// when it is absent) and the plugin's answer checked like any other.
    fn device_call<T>(
        &self,
        method: &'static str,
        call: impl FnOnce() -> Option<RResult<T, BackendError>>,
    ) -> Result<T, CallError> {
        self.origin.check(method)?;
        if !self.has_device_memory() {
            return Err(self.no_device_memory(method));
        }
        let r = call().ok_or_else(|| self.no_device_memory(method))?;
        self.origin.finish(method, r)
    }

    /// See [`MemoryManager::allocate_buffer`](crate::MemoryManager::allocate_buffer).
    pub fn allocate_buffer(&self, bytes: u64) -> Result<BufferId, CallError> {
        const M: &str = "allocate_buffer";
        // SAFETY: `ptr` is live; the entry belongs to its own vtable, read as `None` when the
        // plugin's vtable is shorter (`device_call` has checked the plugin's version).
        let call = || unsafe {
            let f = self.ptr.as_ref().vtable.allocate_buffer();
            f.map(|f| f(self.ptr.as_ptr(), bytes))
        };
        match self.device_call(M, call)? {
            NO_BUFFER => {
                Err(self
                    .origin
                    .error(M, ErrorCode::Failed, "returned the reserved buffer id 0"))
            }
            id => Ok(id),
        }
    }

    /// See [`MemoryManager::release_buffer`](crate::MemoryManager::release_buffer).
    pub fn release_buffer(&self, buffer: BufferId) -> Result<(), CallError> {
        // SAFETY: as in `allocate_buffer`.
        self.device_call("release_buffer", || unsafe {
            let f = self.ptr.as_ref().vtable.release_buffer();
            f.map(|f| f(self.ptr.as_ptr(), buffer))
        })
    }

    /// See [`MemoryManager::copy_to_device`](crate::MemoryManager::copy_to_device).
    pub fn copy_to_device(&self, buffer: BufferId, data: &[u8]) -> Result<(), CallError> {
        // SAFETY: as in `allocate_buffer`; `data` outlives the call.
        self.device_call("copy_to_device", || unsafe {
            let f = self.ptr.as_ref().vtable.copy_to_device();
            f.map(|f| f(self.ptr.as_ptr(), buffer, RSlice::from_slice(data)))
        })
    }

    /// See [`MemoryManager::copy_to_host`](crate::MemoryManager::copy_to_host).
    pub fn copy_to_host(&self, buffer: BufferId, data: &mut [u8]) -> Result<(), CallError> {
        // SAFETY: as in `allocate_buffer`; `data` outlives the call.
        self.device_call("copy_to_host", || unsafe {
            let f = self.ptr.as_ref().vtable.copy_to_host();
            f.map(|f| f(self.ptr.as_ptr(), buffer, RSliceMut::from_mut_slice(data)))
        })
    }

    /// See [`MemoryManager::import_host`](crate::MemoryManager::import_host): runs `f` with
    /// the id of a buffer of the backend that uses `data` without a copy, or with `None` when
    /// the backend declines (the caller copies instead). When `f` returns or unwinds, the
    /// backend's queued work is waited for (`finish`) and the buffer released, even if the
    /// backend has faulted meanwhile, so that the backend never reads `data` after this
    /// returns. (A closure rather than a guard: a guard could be leaked, and the memory with
    /// it.)
    pub fn with_import<R>(
        &self,
        data: &[u8],
        f: impl FnOnce(Option<BufferId>) -> R,
    ) -> Result<R, CallError> {
        const M: &str = "import_host";
        // SAFETY: as in `allocate_buffer`. The backend may keep using the region after the
        // call: the `Imported` guard below fences and releases it before `data`'s borrow ends,
        // on every path out of this function (it is not reachable from outside, so it cannot
        // be leaked).
        let call = || unsafe {
            let f = self.ptr.as_ref().vtable.import_host();
            f.map(|f| f(self.ptr.as_ptr(), HostRegion::new(data)))
        };
        match self.device_call(M, call)?.into_option() {
            None => Ok(f(None)),
            Some(id) => {
                let guard = Imported { memory: self, id };
                if id == NO_BUFFER {
                    drop(guard);
                    return Err(self.origin.error(
                        M,
                        ErrorCode::Failed,
                        "returned the reserved buffer id 0",
                    ));
                }
                let r = f(Some(id));
                drop(guard);
                Ok(r)
            }
        }
    }

    /// `finish` and `release_buffer` for an imported buffer: called even when the backend
    /// has faulted (a panic is still caught in the plugin), because the host's memory must
    /// not be read after the import ends.
    fn end_import(&self, id: BufferId) {
        // SAFETY: `ptr` is live; the entries belong to its own vtable and are present (the
        // import succeeded, so `has_device_memory` held).
        let (finished, released) = unsafe {
            let vt = &self.ptr.as_ref().vtable;
            (
                vt.finish().map(|f| f(self.ptr.as_ptr())),
                vt.release_buffer().map(|f| f(self.ptr.as_ptr(), id)),
            )
        };
        for (what, r) in [("finish", finished), ("release_buffer", released)] {
            if let Some(Err(e)) = r.map(|r| self.origin.finish(what, r)) {
                log::error!("ending the import of host memory (buffer {id}): {e}");
            }
        }
    }

    /// See [`MemoryManager::finish`](crate::MemoryManager::finish).
    pub fn finish(&self) -> Result<(), CallError> {
        // SAFETY: as in `allocate_buffer`.
        self.device_call("finish", || unsafe {
            let f = self.ptr.as_ref().vtable.finish();
            f.map(|f| f(self.ptr.as_ptr()))
        })
    }
}

/// Ends an import on every path out of [`MemoryManagerHandle::with_import`].
struct Imported<'a> {
    memory: &'a MemoryManagerHandle,
    id: BufferId,
}

impl Drop for Imported<'_> {
    fn drop(&mut self) {
        self.memory.end_import(self.id);
    }
}

impl WorkloadFactoryHandle {
    /// The checks before any entry that takes a description: not faulted, nothing newer than
    /// the plugin's minor in the layer or its tensors.
    fn admit(&self, method: &'static str, desc: &WorkloadDesc<'_>) -> Result<(), CallError> {
        self.origin.check(method)?;
        self.origin.gate(method, desc.layer)?;
        self.origin
            .gate_form(method, desc.layer, desc.inputs.as_slice())?;
        self.origin
            .gate_tensors(method, desc.inputs.iter().chain(desc.outputs.iter()))
    }

    /// The plugin's answer to an entry that returns a new workload.
    fn workload(
        &self,
        method: &'static str,
        r: RResult<*mut WorkloadHeader, BackendError>,
    ) -> Result<WorkloadHandle, CallError> {
        let ptr = self
            .origin
            .non_null(method, self.origin.finish(method, r)?)?;
        Ok(WorkloadHandle {
            ptr,
            origin: self.origin.clone(),
        })
    }

    /// See [`WorkloadFactory::create_workload`](crate::WorkloadFactory::create_workload).
    pub fn create_workload(&self, desc: &WorkloadDesc<'_>) -> Result<WorkloadHandle, CallError> {
        const M: &str = "create_workload";
        self.admit(M, desc)?;
        // SAFETY: `ptr` is live; the entry belongs to its own vtable; `desc` outlives the call.
        let r = unsafe { (self.ptr.as_ref().vtable.create_workload())(self.ptr.as_ptr(), desc) };
        self.workload(M, r)
    }

    /// `true` when the plugin has Backend API 1.4's prepared-workload entries.
    pub fn prepares_workloads(&self) -> bool {
        additions::has_entry(self.origin.version, Entry::PreparedWorkloads)
    }

    /// See [`WorkloadFactory::prepare_workload`](crate::WorkloadFactory::prepare_workload).
    /// `None` for a plugin built against Backend API 1.3 or older (it prepares nothing).
    pub fn prepare_workload(
        &self,
        desc: &WorkloadDesc<'_>,
    ) -> Result<Option<PreparedWorkload>, CallError> {
        const M: &str = "prepare_workload";
        self.admit(M, desc)?;
        if !self.prepares_workloads() {
            return Ok(None);
        }
        // SAFETY: `ptr` is live; the entry belongs to its own vtable and is present when the
        // accessor returns it (checked by version above; an older vtable reads as `None`);
        // `desc` outlives the call.
        let r = unsafe {
            let f = self.ptr.as_ref().vtable.prepare_workload();
            f.map(|f| f(self.ptr.as_ptr(), desc))
        };
        match r {
            Some(r) => Ok(self.origin.finish(M, r)?.into_option()),
            None => Ok(None),
        }
    }

    /// See [`WorkloadFactory::restore_workload`](crate::WorkloadFactory::restore_workload).
    /// `Unsupported` for a plugin built against Backend API 1.3 or older.
    pub fn restore_workload(
        &self,
        desc: &WorkloadDesc<'_>,
        blob: PreparedBlob<'_>,
    ) -> Result<WorkloadHandle, CallError> {
        const M: &str = "restore_workload";
        self.admit(M, desc)?;
        let absent = || {
            self.origin
                .absent(M, Entry::PreparedWorkloads, "restoring a prepared workload")
        };
        if !self.prepares_workloads() {
            return Err(absent());
        }
        // SAFETY: as in `prepare_workload`; `blob`'s bytes outlive the call.
        let r = unsafe {
            let f = self.ptr.as_ref().vtable.restore_workload();
            f.map(|f| f(self.ptr.as_ptr(), desc, blob))
        };
        self.workload(M, r.ok_or_else(absent)?)
    }
}

impl WorkloadHandle {
    /// See [`Workload::execute`](crate::Workload::execute).
    pub fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> Result<(), CallError> {
        const M: &str = "execute";
        self.origin.check(M)?;
        // SAFETY: `ptr` is live; the entry belongs to its own vtable; the views outlive the call.
        let r = unsafe {
            (self.ptr.as_ref().vtable.execute())(
                self.ptr.as_ptr(),
                RSlice::from_slice(inputs),
                RSliceMut::from_mut_slice(outputs),
            )
        };
        // The next workload (often CpuRef's SSE code) must not pay for AVX state the plugin
        // left behind.
        super::clean_vector_state();
        self.origin.finish(M, r)
    }

    /// See [`Workload::execute_device`](crate::Workload::execute_device). `Unsupported` for
    /// a plugin built against Backend API 1.2 or older.
    pub fn execute_device(
        &self,
        inputs: &[DeviceTensor<'_>],
        outputs: &[DeviceTensor<'_>],
    ) -> Result<(), CallError> {
        const M: &str = "execute_device";
        self.origin.check(M)?;
        let absent = || self.origin.no_device_memory(M);
        if !additions::has_entry(self.origin.version, Entry::DeviceMemory) {
            return Err(absent());
        }
        // SAFETY: `ptr` is live; the entry belongs to its own vtable and is present when the
        // accessor returns it (an older plugin's vtable reads as `None`); the views outlive
        // the call.
        let r = unsafe {
            let f = self.ptr.as_ref().vtable.execute_device();
            f.map(|f| {
                f(
                    self.ptr.as_ptr(),
                    RSlice::from_slice(inputs),
                    RSlice::from_slice(outputs),
                )
            })
        };
        self.origin.finish(M, r.ok_or_else(absent)?)
    }
}

impl BackendContextHandle {
    fn hook(
        &self,
        method: &'static str,
        network: u64,
        f: impl FnOnce(&super::BackendContextVTable_Ref) -> super::ContextHookFn,
    ) -> Result<(), CallError> {
        self.origin.check(method)?;
        // SAFETY: `ptr` is live; the entry belongs to its own vtable.
        let r = unsafe { f(&self.ptr.as_ref().vtable)(self.ptr.as_ptr(), network) };
        self.origin.finish(method, r)
    }

    /// See [`BackendContext::before_load_network`](crate::BackendContext::before_load_network).
    pub fn before_load_network(&self, network: u64) -> Result<(), CallError> {
        self.hook("before_load_network", network, |vt| {
            vt.before_load_network()
        })
    }
    /// See [`BackendContext::after_load_network`](crate::BackendContext::after_load_network).
    pub fn after_load_network(&self, network: u64) -> Result<(), CallError> {
        self.hook("after_load_network", network, |vt| vt.after_load_network())
    }
    /// See [`BackendContext::before_unload_network`](crate::BackendContext::before_unload_network).
    pub fn before_unload_network(&self, network: u64) -> Result<(), CallError> {
        self.hook("before_unload_network", network, |vt| {
            vt.before_unload_network()
        })
    }
    /// See [`BackendContext::after_unload_network`](crate::BackendContext::after_unload_network).
    pub fn after_unload_network(&self, network: u64) -> Result<(), CallError> {
        self.hook("after_unload_network", network, |vt| {
            vt.after_unload_network()
        })
    }
    /// See [`BackendContext::after_enqueue`](crate::BackendContext::after_enqueue).
    pub fn after_enqueue(&self, network: u64) -> Result<(), CallError> {
        self.hook("after_enqueue", network, |vt| vt.after_enqueue())
    }
}
