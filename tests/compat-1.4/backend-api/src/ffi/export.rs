//! Plugin side: the generic adapter that turns vendor trait objects into ABI objects, with a
//! `catch_unwind` around every call into vendor code.

use std::{
    any::Any,
    cell::RefCell,
    ffi::c_void,
    panic::{AssertUnwindSafe, catch_unwind},
    sync::Arc,
};

use abi_stable::{
    prefix_type::WithMetadata,
    staticref,
    std_types::{ROption, RResult, RSlice, RSliceMut},
};

use super::{
    BackendContextHeader, BackendContextVTable, BackendContextVTable_Ref, BackendHeader,
    BackendVTable, BackendVTable_Ref, LogSink, MemoryManagerHeader, MemoryManagerVTable,
    MemoryManagerVTable_Ref, RawAllocator, WorkloadFactoryHeader, WorkloadFactoryVTable,
    WorkloadFactoryVTable_Ref, WorkloadHeader, WorkloadVTable, WorkloadVTable_Ref,
};
use crate::{
    Backend, BackendContext, BackendError, BackendOptions, BackendResult, BufferId, Capabilities,
    CustomAllocator, DeviceTensor, ErrorCode, HostRegion, LayerDescriptor, MemoryManager,
    OptimizationViews, PreparedBlob, PreparedWorkload, SubgraphView, Support, TensorInfo,
    TensorView, TensorViewMut, Workload, WorkloadDesc, WorkloadFactory,
};

/// A heap block whose first field is the header the host sees.
#[repr(C)]
struct Object<H, T> {
    header: H,
    inner: T,
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}

/// Runs vendor code, turning a panic into [`ErrorCode::Panicked`].
fn guarded<T>(f: impl FnOnce() -> BackendResult<T>) -> RResult<T, BackendError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => RResult::ROk(v),
        Ok(Err(e)) => RResult::RErr(e),
        Err(payload) => RResult::RErr(BackendError::new(
            ErrorCode::Panicked,
            // The payload only: the host names the method (`CallError`).
            panic_message(payload.as_ref()),
        )),
    }
}

/// Drops an object, swallowing (and logging) a panic from the vendor's `Drop`.
///
/// # Safety
/// `this` must be a pointer made by `Box::into_raw` of an `Object<H, T>` not yet destroyed.
unsafe fn destroy<H, T>(this: *mut H, kind: &str) {
    if this.is_null() {
        return;
    }
    // SAFETY: per the contract above; the host calls destroy exactly once per object.
    let boxed = unsafe { Box::from_raw(this.cast::<Object<H, T>>()) };
    if let Err(p) = catch_unwind(AssertUnwindSafe(move || drop(boxed))) {
        log::error!("dropping a {kind} panicked: {}", panic_message(p.as_ref()));
    }
}

/// # Safety
/// `this` must point at a live `Object<H, T>`.
unsafe fn inner<'a, H, T>(this: *const H) -> &'a T {
    // SAFETY: per the contract above; objects are only reached through their own vtable.
    unsafe { &(*this.cast::<Object<H, T>>()).inner }
}

fn into_raw<H, T>(header: H, inner: T) -> *mut H {
    Box::into_raw(Box::new(Object { header, inner })).cast()
}

/// Holder of the static vtables (`staticref!` must sit in an impl).
///
/// The `*_VTABLE` references below are `static`s, not `const`s: a const may be materialised
/// once per codegen unit, and `backend_create_workload_factory` identifies its own memory
/// managers by the vtable's address (a test caught exactly that).
struct VTables;

// ---------------------------------------------------------------------------------- backend

type BackendBox = Box<dyn Backend>;

unsafe extern "C" fn backend_destroy(this: *mut BackendHeader) {
    // SAFETY: `this` came from `into_raw_backend`.
    unsafe { destroy::<BackendHeader, BackendBox>(this, "backend") }
}

unsafe extern "C" fn backend_capabilities(
    this: *const BackendHeader,
) -> RResult<Capabilities, BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let b = unsafe { inner::<_, BackendBox>(this) };
    guarded(|| Ok(b.capabilities()))
}

unsafe extern "C" fn backend_is_layer_supported(
    this: *const BackendHeader,
    layer: &LayerDescriptor,
    inputs: RSlice<'_, TensorInfo>,
    outputs: RSlice<'_, TensorInfo>,
) -> RResult<Support, BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let b = unsafe { inner::<_, BackendBox>(this) };
    guarded(|| Ok(b.is_layer_supported(layer, inputs.as_slice(), outputs.as_slice())))
}

type MemoryManagerArc = Arc<dyn MemoryManager>;

unsafe extern "C" fn backend_create_memory_manager(
    this: *const BackendHeader,
) -> RResult<*mut MemoryManagerHeader, BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let b = unsafe { inner::<_, BackendBox>(this) };
    guarded(|| {
        Ok(match b.create_memory_manager()? {
            Some(m) => into_raw(
                MemoryManagerHeader {
                    vtable: MEMORY_MANAGER_VTABLE,
                },
                m,
            ),
            None => std::ptr::null_mut(),
        })
    })
}

/// The vendor's memory manager behind `memory`: `None` for null, an error when the header is
/// not one this plugin made.
///
/// # Safety
/// `memory` must be null or point at a memory manager header (host contract).
unsafe fn own_memory_manager(
    memory: *const MemoryManagerHeader,
) -> Result<Option<MemoryManagerArc>, BackendError> {
    if memory.is_null() {
        return Ok(None);
    }
    // SAFETY: a non-null `memory` points at a header (contract above); we only read the
    // vtable pointer, then trust the block's layout only if the vtable is ours.
    let vtable = unsafe { (*memory).vtable };
    if !std::ptr::eq(vtable.0.to_raw_ptr(), MEMORY_MANAGER_VTABLE.0.to_raw_ptr()) {
        return Err(BackendError::invalid_argument(
            "create_workload_factory: the memory manager was not created by this backend",
        ));
    }
    // SAFETY: the vtable is this plugin's, so the block is an `Object<_, MemoryManagerArc>`.
    Ok(Some(
        unsafe { inner::<_, MemoryManagerArc>(memory) }.clone(),
    ))
}

fn factory_object(f: WorkloadFactoryBox) -> *mut WorkloadFactoryHeader {
    into_raw(
        WorkloadFactoryHeader {
            vtable: WORKLOAD_FACTORY_VTABLE,
        },
        f,
    )
}

unsafe extern "C" fn backend_create_workload_factory(
    this: *const BackendHeader,
    memory: *const MemoryManagerHeader,
) -> RResult<*mut WorkloadFactoryHeader, BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let b = unsafe { inner::<_, BackendBox>(this) };
    // SAFETY: the host passes null or a memory manager header.
    let memory = match unsafe { own_memory_manager(memory) } {
        Ok(m) => m,
        Err(e) => return RResult::RErr(e),
    };
    guarded(|| Ok(factory_object(b.create_workload_factory(memory)?)))
}

unsafe extern "C" fn backend_create_workload_factory_with_options(
    this: *const BackendHeader,
    memory: *const MemoryManagerHeader,
    options: &BackendOptions,
) -> RResult<*mut WorkloadFactoryHeader, BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let b = unsafe { inner::<_, BackendBox>(this) };
    // SAFETY: the host passes null or a memory manager header.
    let memory = match unsafe { own_memory_manager(memory) } {
        Ok(m) => m,
        Err(e) => return RResult::RErr(e),
    };
    guarded(|| {
        Ok(factory_object(
            b.create_workload_factory_with_options(memory, options)?,
        ))
    })
}

unsafe extern "C" fn backend_create_backend_context(
    this: *const BackendHeader,
    options: &BackendOptions,
) -> RResult<*mut BackendContextHeader, BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let b = unsafe { inner::<_, BackendBox>(this) };
    guarded(|| {
        Ok(match b.create_backend_context(options)? {
            Some(c) => into_raw(
                BackendContextHeader {
                    vtable: BACKEND_CONTEXT_VTABLE,
                },
                c,
            ),
            None => std::ptr::null_mut(),
        })
    })
}

unsafe extern "C" fn backend_optimize_subgraph(
    this: *const BackendHeader,
    subgraph: &SubgraphView<'_>,
) -> RResult<OptimizationViews, BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let b = unsafe { inner::<_, BackendBox>(this) };
    guarded(|| b.optimize_subgraph(subgraph))
}

unsafe extern "C" fn backend_optimize_subgraph_with_options(
    this: *const BackendHeader,
    subgraph: &SubgraphView<'_>,
    options: &BackendOptions,
) -> RResult<OptimizationViews, BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let b = unsafe { inner::<_, BackendBox>(this) };
    guarded(|| b.optimize_subgraph_with_options(subgraph, options))
}

unsafe extern "C" fn backend_use_custom_allocator(
    this: *const BackendHeader,
    allocator: RawAllocator,
) -> RResult<bool, BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let b = unsafe { inner::<_, BackendBox>(this) };
    guarded(|| Ok(b.use_custom_allocator(CustomAllocator::new(allocator))))
}

impl VTables {
    staticref! {
        const BACKEND_VT: WithMetadata<BackendVTable> = WithMetadata::new(BackendVTable {
            destroy: backend_destroy,
            capabilities: backend_capabilities,
            is_layer_supported: backend_is_layer_supported,
            create_memory_manager: backend_create_memory_manager,
            create_workload_factory: backend_create_workload_factory,
            create_backend_context: backend_create_backend_context,
            optimize_subgraph: backend_optimize_subgraph,
            use_custom_allocator: backend_use_custom_allocator,
            create_workload_factory_with_options: backend_create_workload_factory_with_options,
            optimize_subgraph_with_options: backend_optimize_subgraph_with_options,
        })
    }
}
static BACKEND_VTABLE: BackendVTable_Ref = BackendVTable_Ref(VTables::BACKEND_VT.as_prefix());

/// Boxes a vendor backend into the ABI object `BackendFactory` returns.
pub fn into_raw_backend(backend: impl Backend) -> *mut c_void {
    into_raw(
        BackendHeader {
            vtable: BACKEND_VTABLE,
        },
        Box::new(backend) as BackendBox,
    )
    .cast()
}

// ---------------------------------------------------------------------------- memory manager

unsafe extern "C" fn memory_destroy(this: *mut MemoryManagerHeader) {
    // SAFETY: `this` was made by `backend_create_memory_manager`.
    unsafe { destroy::<MemoryManagerHeader, MemoryManagerArc>(this, "memory manager") }
}

unsafe extern "C" fn memory_acquire(this: *const MemoryManagerHeader) -> RResult<(), BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let m = unsafe { inner::<_, MemoryManagerArc>(this) };
    guarded(|| m.acquire())
}

unsafe extern "C" fn memory_release(this: *const MemoryManagerHeader) -> RResult<(), BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let m = unsafe { inner::<_, MemoryManagerArc>(this) };
    guarded(|| m.release())
}

unsafe extern "C" fn memory_allocated_bytes(
    this: *const MemoryManagerHeader,
) -> RResult<u64, BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let m = unsafe { inner::<_, MemoryManagerArc>(this) };
    guarded(|| Ok(m.allocated_bytes()))
}

unsafe extern "C" fn memory_allocate_buffer(
    this: *const MemoryManagerHeader,
    bytes: u64,
) -> RResult<BufferId, BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let m = unsafe { inner::<_, MemoryManagerArc>(this) };
    guarded(|| m.allocate_buffer(bytes))
}

unsafe extern "C" fn memory_release_buffer(
    this: *const MemoryManagerHeader,
    buffer: BufferId,
) -> RResult<(), BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let m = unsafe { inner::<_, MemoryManagerArc>(this) };
    guarded(|| m.release_buffer(buffer))
}

unsafe extern "C" fn memory_copy_to_device(
    this: *const MemoryManagerHeader,
    buffer: BufferId,
    data: RSlice<'_, u8>,
) -> RResult<(), BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let m = unsafe { inner::<_, MemoryManagerArc>(this) };
    guarded(|| m.copy_to_device(buffer, data.as_slice()))
}

unsafe extern "C" fn memory_copy_to_host(
    this: *const MemoryManagerHeader,
    buffer: BufferId,
    mut data: RSliceMut<'_, u8>,
) -> RResult<(), BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let m = unsafe { inner::<_, MemoryManagerArc>(this) };
    guarded(|| m.copy_to_host(buffer, data.as_mut_slice()))
}

unsafe extern "C" fn memory_import_host(
    this: *const MemoryManagerHeader,
    region: HostRegion,
) -> RResult<ROption<BufferId>, BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let m = unsafe { inner::<_, MemoryManagerArc>(this) };
    guarded(|| m.import_host(region).map(ROption::from))
}

unsafe extern "C" fn memory_finish(this: *const MemoryManagerHeader) -> RResult<(), BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let m = unsafe { inner::<_, MemoryManagerArc>(this) };
    guarded(|| m.finish())
}

impl VTables {
    staticref! {
        const MEMORY_MANAGER_VT: WithMetadata<MemoryManagerVTable> =
            WithMetadata::new(MemoryManagerVTable {
                destroy: memory_destroy,
                acquire: memory_acquire,
                release: memory_release,
                allocated_bytes: memory_allocated_bytes,
                allocate_buffer: memory_allocate_buffer,
                release_buffer: memory_release_buffer,
                copy_to_device: memory_copy_to_device,
                copy_to_host: memory_copy_to_host,
                import_host: memory_import_host,
                finish: memory_finish,
            })
    }
}
static MEMORY_MANAGER_VTABLE: MemoryManagerVTable_Ref =
    MemoryManagerVTable_Ref(VTables::MEMORY_MANAGER_VT.as_prefix());

// --------------------------------------------------------------------------- workload factory

type WorkloadFactoryBox = Box<dyn WorkloadFactory>;
type WorkloadBox = Box<dyn Workload>;

unsafe extern "C" fn factory_destroy(this: *mut WorkloadFactoryHeader) {
    // SAFETY: `this` was made by `backend_create_workload_factory`.
    unsafe { destroy::<WorkloadFactoryHeader, WorkloadFactoryBox>(this, "workload factory") }
}

unsafe extern "C" fn factory_create_workload(
    this: *const WorkloadFactoryHeader,
    desc: &WorkloadDesc<'_>,
) -> RResult<*mut WorkloadHeader, BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let f = unsafe { inner::<_, WorkloadFactoryBox>(this) };
    guarded(|| {
        let w = f.create_workload(desc)?;
        Ok(into_raw(
            WorkloadHeader {
                vtable: WORKLOAD_VTABLE,
            },
            w,
        ))
    })
}

unsafe extern "C" fn factory_prepare_workload(
    this: *const WorkloadFactoryHeader,
    desc: &WorkloadDesc<'_>,
) -> RResult<ROption<PreparedWorkload>, BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let f = unsafe { inner::<_, WorkloadFactoryBox>(this) };
    guarded(|| Ok(f.prepare_workload(desc)?.into()))
}

unsafe extern "C" fn factory_restore_workload(
    this: *const WorkloadFactoryHeader,
    desc: &WorkloadDesc<'_>,
    blob: PreparedBlob<'_>,
) -> RResult<*mut WorkloadHeader, BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let f = unsafe { inner::<_, WorkloadFactoryBox>(this) };
    guarded(|| {
        let w = f.restore_workload(desc, blob)?;
        Ok(into_raw(
            WorkloadHeader {
                vtable: WORKLOAD_VTABLE,
            },
            w,
        ))
    })
}

impl VTables {
    staticref! {
        const WORKLOAD_FACTORY_VT: WithMetadata<WorkloadFactoryVTable> =
            WithMetadata::new(WorkloadFactoryVTable {
                destroy: factory_destroy,
                create_workload: factory_create_workload,
                prepare_workload: factory_prepare_workload,
                restore_workload: factory_restore_workload,
            })
    }
}
static WORKLOAD_FACTORY_VTABLE: WorkloadFactoryVTable_Ref =
    WorkloadFactoryVTable_Ref(VTables::WORKLOAD_FACTORY_VT.as_prefix());

unsafe extern "C" fn workload_destroy(this: *mut WorkloadHeader) {
    // SAFETY: `this` was made by `factory_create_workload`.
    unsafe { destroy::<WorkloadHeader, WorkloadBox>(this, "workload") }
}

unsafe extern "C" fn workload_execute(
    this: *const WorkloadHeader,
    inputs: RSlice<'_, TensorView<'_>>,
    mut outputs: RSliceMut<'_, TensorViewMut<'_>>,
) -> RResult<(), BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let w = unsafe { inner::<_, WorkloadBox>(this) };
    guarded(|| w.execute(inputs.as_slice(), outputs.as_mut_slice()))
}

unsafe extern "C" fn workload_execute_device(
    this: *const WorkloadHeader,
    inputs: RSlice<'_, DeviceTensor<'_>>,
    outputs: RSlice<'_, DeviceTensor<'_>>,
) -> RResult<(), BackendError> {
    // SAFETY: the host passes the object this vtable belongs to.
    let w = unsafe { inner::<_, WorkloadBox>(this) };
    guarded(|| w.execute_device(inputs.as_slice(), outputs.as_slice()))
}

impl VTables {
    staticref! {
        const WORKLOAD_VT: WithMetadata<WorkloadVTable> = WithMetadata::new(WorkloadVTable {
            destroy: workload_destroy,
            execute: workload_execute,
            execute_device: workload_execute_device,
        })
    }
}
static WORKLOAD_VTABLE: WorkloadVTable_Ref = WorkloadVTable_Ref(VTables::WORKLOAD_VT.as_prefix());

// ---------------------------------------------------------------------------- backend context

type ContextBox = Box<dyn BackendContext>;

unsafe extern "C" fn context_destroy(this: *mut BackendContextHeader) {
    // SAFETY: `this` was made by `backend_create_backend_context`.
    unsafe { destroy::<BackendContextHeader, ContextBox>(this, "backend context") }
}

macro_rules! context_hook {
    ($name:ident, $method:ident) => {
        unsafe extern "C" fn $name(
            this: *const BackendContextHeader,
            network: u64,
        ) -> RResult<(), BackendError> {
            // SAFETY: the host passes the object this vtable belongs to.
            let c = unsafe { inner::<_, ContextBox>(this) };
            guarded(|| c.$method(network))
        }
    };
}
context_hook!(context_before_load, before_load_network);
context_hook!(context_after_load, after_load_network);
context_hook!(context_before_unload, before_unload_network);
context_hook!(context_after_unload, after_unload_network);
context_hook!(context_after_enqueue, after_enqueue);

impl VTables {
    staticref! {
        const BACKEND_CONTEXT_VT: WithMetadata<BackendContextVTable> =
            WithMetadata::new(BackendContextVTable {
                destroy: context_destroy,
                before_load_network: context_before_load,
                after_load_network: context_after_load,
                before_unload_network: context_before_unload,
                after_unload_network: context_after_unload,
                after_enqueue: context_after_enqueue,
            })
    }
}
static BACKEND_CONTEXT_VTABLE: BackendContextVTable_Ref =
    BackendContextVTable_Ref(VTables::BACKEND_CONTEXT_VT.as_prefix());

// ------------------------------------------------------------------------ exported symbols

/// What a backend constructor given to [`export_backend!`](crate::export_backend) may return:
/// the backend, or a `Result` whose error the host reports as `factory_failed`.
pub trait FactoryOutput {
    /// The backend or why there is none.
    fn into_backend_result(self) -> BackendResult<Box<dyn Backend>>;
}

impl<B: Backend> FactoryOutput for B {
    fn into_backend_result(self) -> BackendResult<Box<dyn Backend>> {
        Ok(Box::new(self))
    }
}

impl<B: Backend> FactoryOutput for Result<B, BackendError> {
    fn into_backend_result(self) -> BackendResult<Box<dyn Backend>> {
        self.map(|b| Box::new(b) as Box<dyn Backend>)
    }
}

thread_local! {
    static FACTORY_ERROR: RefCell<Option<BackendError>> = const { RefCell::new(None) };
}

/// Body of the generated `BackendFactory`: runs the constructor under `catch_unwind`; on a
/// panic or an error returns null and keeps the reason for `BackplaneTakeFactoryError`.
pub fn __export_factory<O: FactoryOutput>(ctor: impl FnOnce() -> O) -> *mut c_void {
    match guarded(|| ctor().into_backend_result()) {
        RResult::ROk(b) => into_raw(
            BackendHeader {
                vtable: BACKEND_VTABLE,
            },
            b,
        )
        .cast(),
        RResult::RErr(e) => {
            FACTORY_ERROR.with(|slot| *slot.borrow_mut() = Some(e));
            std::ptr::null_mut()
        }
    }
}

/// Body of the generated `BackplaneTakeFactoryError`.
pub fn __export_take_factory_error() -> ROption<BackendError> {
    FACTORY_ERROR.with(|slot| slot.borrow_mut().take()).into()
}

/// Body of the generated `GetVersion`: writes this crate's version through the pointers that
/// are not null.
///
/// # Safety
/// `major` and `minor` are each null or valid for writing one `u32` (aligned, not aliased by a
/// live reference): `GetVersion`'s contract with the host.
pub unsafe fn __export_version(major: *mut u32, minor: *mut u32) {
    if !major.is_null() {
        // SAFETY: not null, and valid for a write by this function's contract.
        unsafe { major.write(crate::API_MAJOR) }
    }
    if !minor.is_null() {
        // SAFETY: as above.
        unsafe { minor.write(crate::API_MINOR) }
    }
}

/// Body of the generated `BackplaneInstallLogger`.
pub fn __export_install_logger(sink: LogSink) {
    // Nothing may unwind out of the C entry point.
    let _ = catch_unwind(AssertUnwindSafe(|| super::logging::install(sink)));
}

/// Compile-time check of the id given to [`export_backend!`](crate::export_backend): it must
/// be 1–64 ASCII letters and digits and not `Unknown`.
pub const fn assert_valid_id(id: &str) {
    let b = id.as_bytes();
    assert!(
        !b.is_empty() && b.len() <= crate::MAX_BACKEND_ID_LEN,
        "backend id must be 1-64 bytes"
    );
    let mut i = 0;
    while i < b.len() {
        assert!(
            b[i].is_ascii_alphanumeric(),
            "backend id must be ASCII letters and digits"
        );
        i += 1;
    }
    let r = crate::RESERVED_BACKEND_ID.as_bytes();
    let mut same = b.len() == r.len();
    let mut j = 0;
    while same && j < b.len() {
        same = b[j] == r[j];
        j += 1;
    }
    assert!(!same, "backend id \"Unknown\" is reserved");
}
