//! The ABI: C symbols, object headers and prefix vtables. All `unsafe` of this crate lives in
//! this module.
//!
//! # Object model
//! Every object a plugin creates (backend, memory manager, workload factory, workload, backend
//! context) is a heap block whose first field is a header holding a pointer to a
//! `#[sabi(kind(Prefix))]` vtable. The host sees only `*mut <Kind>Header`; the plugin's thunks
//! cast it back to the concrete block. The last entry of Backend API 1.0 in each vtable is
//! marked `#[sabi(last_prefix_field)]`, so a 1.x host reads entries a 1.0 plugin lacks as
//! `None` (see [`ABI_1_0_LAYOUT`] for the frozen layout).
//!
//! # Guarding
//! Every thunk runs the vendor's code inside `catch_unwind`, inside the plugin, and returns
//! `RResult<_, BackendError>`; a panic becomes [`ErrorCode::Panicked`](crate::ErrorCode).

#![allow(
    non_camel_case_types,
    reason = "abi_stable names prefix references `<VTable>_Ref`"
)]

pub(crate) mod allocator;
pub(crate) mod cpu;
pub(crate) mod export;
pub(crate) mod handles;
pub(crate) mod logging;

use std::ffi::{CStr, c_char, c_void};

use abi_stable::{
    StableAbi,
    std_types::{ROption, RResult, RSlice, RSliceMut},
};

pub use allocator::{AllocatedBuffer, CustomAllocator, HostAllocator, RawAllocator};
pub use cpu::clean_vector_state;
#[doc(hidden)]
pub use export::{
    __export_factory, __export_install_logger, __export_take_factory_error, __export_version,
    assert_valid_id,
};
pub use export::{FactoryOutput, into_raw_backend};
pub use handles::{
    BackendContextHandle, BackendHandle, CallError, FaultState, LibraryKeepAlive,
    MemoryManagerHandle, WorkloadFactoryHandle, WorkloadHandle,
};
pub use logging::{LogSink, host_log_sink};

use crate::{
    ApiVersion, BackendError, BackendOptions, BufferId, Capabilities, DeviceTensor, HostRegion,
    LayerDescriptor, OptimizationViews, PreparedBlob, PreparedWorkload, SubgraphView, Support,
    TensorInfo, TensorView, TensorViewMut, WorkloadDesc,
};

/// `GetBackendId`: required.
pub const SYMBOL_GET_BACKEND_ID: &CStr = c"GetBackendId";
/// `GetVersion`: required.
pub const SYMBOL_GET_VERSION: &CStr = c"GetVersion";
/// `BackendFactory`: required.
pub const SYMBOL_BACKEND_FACTORY: &CStr = c"BackendFactory";
/// Optional: the host hands the plugin a [`LogSink`] right after opening it.
pub const SYMBOL_INSTALL_LOGGER: &CStr = c"BackplaneInstallLogger";
/// Optional: vendor and release metadata ([`PluginInfo`]).
pub const SYMBOL_PLUGIN_INFO: &CStr = c"BackplanePluginInfo";
/// Optional: after `BackendFactory` returned null, why (a panic or a vendor error).
pub const SYMBOL_TAKE_FACTORY_ERROR: &CStr = c"BackplaneTakeFactoryError";

/// Signature of `GetBackendId`.
pub type GetBackendIdFn = unsafe extern "C" fn() -> *const c_char;
/// Signature of `GetVersion`.
pub type GetVersionFn = unsafe extern "C" fn(major: *mut u32, minor: *mut u32);
/// Signature of `BackendFactory`.
pub type BackendFactoryFn = unsafe extern "C" fn() -> *mut c_void;
/// Signature of `BackplaneInstallLogger`.
pub type InstallLoggerFn = unsafe extern "C" fn(sink: LogSink);
/// Signature of `BackplanePluginInfo`.
pub type PluginInfoFn = unsafe extern "C" fn() -> *const PluginInfo;
/// Signature of `BackplaneTakeFactoryError`.
pub type TakeFactoryErrorFn = unsafe extern "C" fn() -> ROption<BackendError>;

/// Metadata the export macro embeds: who made the plugin and which release it is.
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct PluginInfo {
    /// `size_of::<PluginInfo>()` in the plugin, so later fields can be appended.
    pub struct_size: u32,
    /// The Backend API the plugin was built against.
    pub api: ApiVersion,
    /// NUL-terminated vendor name (`Acme`).
    pub vendor: *const c_char,
    /// NUL-terminated release version of the plugin crate (`1.2.3`).
    pub release: *const c_char,
}

// SAFETY: the pointers point at `'static` NUL-terminated string literals that are never written.
unsafe impl Sync for PluginInfo {}

/// Header of a backend object.
#[repr(C)]
#[derive(StableAbi)]
pub struct BackendHeader {
    /// The backend's vtable.
    pub vtable: BackendVTable_Ref,
}

/// The backend's functions (Backend API 1.0, then the entries 1.1 appended).
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = BackendVTable_Ref)))]
#[sabi(missing_field(option))]
pub struct BackendVTable {
    /// Destroys the backend object.
    pub destroy: unsafe extern "C" fn(this: *mut BackendHeader),
    /// See [`Backend::capabilities`](crate::Backend::capabilities).
    pub capabilities:
        unsafe extern "C" fn(this: *const BackendHeader) -> RResult<Capabilities, BackendError>,
    /// See [`Backend::is_layer_supported`](crate::Backend::is_layer_supported).
    pub is_layer_supported: unsafe extern "C" fn(
        this: *const BackendHeader,
        layer: &LayerDescriptor,
        inputs: RSlice<'_, TensorInfo>,
        outputs: RSlice<'_, TensorInfo>,
    ) -> RResult<Support, BackendError>,
    /// See [`Backend::create_memory_manager`](crate::Backend::create_memory_manager); null = none.
    pub create_memory_manager:
        unsafe extern "C" fn(
            this: *const BackendHeader,
        ) -> RResult<*mut MemoryManagerHeader, BackendError>,
    /// See [`Backend::create_workload_factory`](crate::Backend::create_workload_factory);
    /// `memory` is null or a memory manager this backend created.
    pub create_workload_factory:
        unsafe extern "C" fn(
            this: *const BackendHeader,
            memory: *const MemoryManagerHeader,
        ) -> RResult<*mut WorkloadFactoryHeader, BackendError>,
    /// See [`Backend::create_backend_context`](crate::Backend::create_backend_context); null = none.
    pub create_backend_context:
        unsafe extern "C" fn(
            this: *const BackendHeader,
            options: &BackendOptions,
        ) -> RResult<*mut BackendContextHeader, BackendError>,
    /// See [`Backend::optimize_subgraph`](crate::Backend::optimize_subgraph).
    pub optimize_subgraph: unsafe extern "C" fn(
        this: *const BackendHeader,
        subgraph: &SubgraphView<'_>,
    ) -> RResult<OptimizationViews, BackendError>,
    /// See [`Backend::use_custom_allocator`](crate::Backend::use_custom_allocator).
    #[sabi(last_prefix_field)]
    pub use_custom_allocator: unsafe extern "C" fn(
        this: *const BackendHeader,
        allocator: RawAllocator,
    ) -> RResult<bool, BackendError>,
    /// 1.1: see
    /// [`Backend::create_workload_factory_with_options`](crate::Backend::create_workload_factory_with_options);
    /// `memory` is null or a memory manager this backend created. Absent (read as `None`) in
    /// a 1.0 plugin.
    pub create_workload_factory_with_options:
        unsafe extern "C" fn(
            this: *const BackendHeader,
            memory: *const MemoryManagerHeader,
            options: &BackendOptions,
        ) -> RResult<*mut WorkloadFactoryHeader, BackendError>,
    /// 1.1: see
    /// [`Backend::optimize_subgraph_with_options`](crate::Backend::optimize_subgraph_with_options).
    /// Absent (read as `None`) in a 1.0 plugin.
    pub optimize_subgraph_with_options:
        unsafe extern "C" fn(
            this: *const BackendHeader,
            subgraph: &SubgraphView<'_>,
            options: &BackendOptions,
        ) -> RResult<OptimizationViews, BackendError>,
}

/// Header of a memory manager object.
#[repr(C)]
#[derive(StableAbi)]
pub struct MemoryManagerHeader {
    /// The memory manager's vtable.
    pub vtable: MemoryManagerVTable_Ref,
}

/// The memory manager's functions (Backend API 1.0, then the device-memory entries 1.3
/// appended).
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = MemoryManagerVTable_Ref)))]
#[sabi(missing_field(option))]
pub struct MemoryManagerVTable {
    /// Destroys the object.
    pub destroy: unsafe extern "C" fn(this: *mut MemoryManagerHeader),
    /// See [`MemoryManager::acquire`](crate::MemoryManager::acquire).
    pub acquire:
        unsafe extern "C" fn(this: *const MemoryManagerHeader) -> RResult<(), BackendError>,
    /// See [`MemoryManager::release`](crate::MemoryManager::release).
    pub release:
        unsafe extern "C" fn(this: *const MemoryManagerHeader) -> RResult<(), BackendError>,
    /// See [`MemoryManager::allocated_bytes`](crate::MemoryManager::allocated_bytes).
    #[sabi(last_prefix_field)]
    pub allocated_bytes:
        unsafe extern "C" fn(this: *const MemoryManagerHeader) -> RResult<u64, BackendError>,
    /// 1.3: see [`MemoryManager::allocate_buffer`](crate::MemoryManager::allocate_buffer).
    /// Absent (read as `None`) before 1.3, like the other device-memory entries.
    pub allocate_buffer: unsafe extern "C" fn(
        this: *const MemoryManagerHeader,
        bytes: u64,
    ) -> RResult<BufferId, BackendError>,
    /// 1.3: see [`MemoryManager::release_buffer`](crate::MemoryManager::release_buffer).
    pub release_buffer: unsafe extern "C" fn(
        this: *const MemoryManagerHeader,
        buffer: BufferId,
    ) -> RResult<(), BackendError>,
    /// 1.3: see [`MemoryManager::copy_to_device`](crate::MemoryManager::copy_to_device).
    pub copy_to_device: unsafe extern "C" fn(
        this: *const MemoryManagerHeader,
        buffer: BufferId,
        data: RSlice<'_, u8>,
    ) -> RResult<(), BackendError>,
    /// 1.3: see [`MemoryManager::copy_to_host`](crate::MemoryManager::copy_to_host).
    pub copy_to_host: unsafe extern "C" fn(
        this: *const MemoryManagerHeader,
        buffer: BufferId,
        data: RSliceMut<'_, u8>,
    ) -> RResult<(), BackendError>,
    /// 1.3: see [`MemoryManager::import_host`](crate::MemoryManager::import_host).
    pub import_host: unsafe extern "C" fn(
        this: *const MemoryManagerHeader,
        region: HostRegion,
    ) -> RResult<ROption<BufferId>, BackendError>,
    /// 1.3: see [`MemoryManager::finish`](crate::MemoryManager::finish).
    pub finish: unsafe extern "C" fn(this: *const MemoryManagerHeader) -> RResult<(), BackendError>,
}

/// Header of a workload factory object.
#[repr(C)]
#[derive(StableAbi)]
pub struct WorkloadFactoryHeader {
    /// The factory's vtable.
    pub vtable: WorkloadFactoryVTable_Ref,
}

/// The workload factory's functions (Backend API 1.0, then 1.4's prepared workloads).
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = WorkloadFactoryVTable_Ref)))]
#[sabi(missing_field(option))]
pub struct WorkloadFactoryVTable {
    /// Destroys the object.
    pub destroy: unsafe extern "C" fn(this: *mut WorkloadFactoryHeader),
    /// See [`WorkloadFactory::create_workload`](crate::WorkloadFactory::create_workload).
    #[sabi(last_prefix_field)]
    pub create_workload: unsafe extern "C" fn(
        this: *const WorkloadFactoryHeader,
        desc: &WorkloadDesc<'_>,
    ) -> RResult<*mut WorkloadHeader, BackendError>,
    /// 1.4: see [`WorkloadFactory::prepare_workload`](crate::WorkloadFactory::prepare_workload).
    /// Absent (read as `None`) before 1.4.
    pub prepare_workload: unsafe extern "C" fn(
        this: *const WorkloadFactoryHeader,
        desc: &WorkloadDesc<'_>,
    )
        -> RResult<ROption<PreparedWorkload>, BackendError>,
    /// 1.4: see [`WorkloadFactory::restore_workload`](crate::WorkloadFactory::restore_workload).
    pub restore_workload: unsafe extern "C" fn(
        this: *const WorkloadFactoryHeader,
        desc: &WorkloadDesc<'_>,
        blob: PreparedBlob<'_>,
    ) -> RResult<*mut WorkloadHeader, BackendError>,
}

/// Header of a workload object.
#[repr(C)]
#[derive(StableAbi)]
pub struct WorkloadHeader {
    /// The workload's vtable.
    pub vtable: WorkloadVTable_Ref,
}

/// The workload's functions (Backend API 1.0, then 1.3's `execute_device`).
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = WorkloadVTable_Ref)))]
#[sabi(missing_field(option))]
pub struct WorkloadVTable {
    /// Destroys the object.
    pub destroy: unsafe extern "C" fn(this: *mut WorkloadHeader),
    /// See [`Workload::execute`](crate::Workload::execute).
    #[sabi(last_prefix_field)]
    pub execute: unsafe extern "C" fn(
        this: *const WorkloadHeader,
        inputs: RSlice<'_, TensorView<'_>>,
        outputs: RSliceMut<'_, TensorViewMut<'_>>,
    ) -> RResult<(), BackendError>,
    /// 1.3: see [`Workload::execute_device`](crate::Workload::execute_device). Absent (read
    /// as `None`) before 1.3.
    pub execute_device: unsafe extern "C" fn(
        this: *const WorkloadHeader,
        inputs: RSlice<'_, DeviceTensor<'_>>,
        outputs: RSlice<'_, DeviceTensor<'_>>,
    ) -> RResult<(), BackendError>,
}

/// Header of a backend context object.
#[repr(C)]
#[derive(StableAbi)]
pub struct BackendContextHeader {
    /// The context's vtable.
    pub vtable: BackendContextVTable_Ref,
}

/// Signature shared by the context hooks.
pub type ContextHookFn = unsafe extern "C" fn(
    this: *const BackendContextHeader,
    network: u64,
) -> RResult<(), BackendError>;

/// The backend context's functions (Backend API 1.0).
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = BackendContextVTable_Ref)))]
#[sabi(missing_field(option))]
pub struct BackendContextVTable {
    /// Destroys the object.
    pub destroy: unsafe extern "C" fn(this: *mut BackendContextHeader),
    /// See [`BackendContext::before_load_network`](crate::BackendContext::before_load_network).
    pub before_load_network: unsafe extern "C" fn(
        this: *const BackendContextHeader,
        network: u64,
    ) -> RResult<(), BackendError>,
    /// See [`BackendContext::after_load_network`](crate::BackendContext::after_load_network).
    pub after_load_network: unsafe extern "C" fn(
        this: *const BackendContextHeader,
        network: u64,
    ) -> RResult<(), BackendError>,
    /// See [`BackendContext::before_unload_network`](crate::BackendContext::before_unload_network).
    pub before_unload_network: unsafe extern "C" fn(
        this: *const BackendContextHeader,
        network: u64,
    ) -> RResult<(), BackendError>,
    /// See [`BackendContext::after_unload_network`](crate::BackendContext::after_unload_network).
    pub after_unload_network: unsafe extern "C" fn(
        this: *const BackendContextHeader,
        network: u64,
    ) -> RResult<(), BackendError>,
    /// See [`BackendContext::after_enqueue`](crate::BackendContext::after_enqueue).
    #[sabi(last_prefix_field)]
    pub after_enqueue: unsafe extern "C" fn(
        this: *const BackendContextHeader,
        network: u64,
    ) -> RResult<(), BackendError>,
}

/// Size and field offsets of one vtable as a minor version left it, frozen so that a change
/// fails the tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrozenLayout {
    /// The vtable's name.
    pub name: &'static str,
    /// `size_of` the vtable struct.
    pub size: usize,
    /// `(field, offset)` in declaration order.
    pub fields: &'static [(&'static str, usize)],
}

const P: usize = std::mem::size_of::<usize>();

/// The Backend API 1.0 vtable layouts. Minor versions may only append fields: every entry here
/// must stay at its offset forever (see the `frozen_layout` test).
pub const ABI_1_0_LAYOUT: &[FrozenLayout] = &[
    FrozenLayout {
        name: "BackendVTable",
        size: 8 * P,
        fields: &[
            ("destroy", 0),
            ("capabilities", P),
            ("is_layer_supported", 2 * P),
            ("create_memory_manager", 3 * P),
            ("create_workload_factory", 4 * P),
            ("create_backend_context", 5 * P),
            ("optimize_subgraph", 6 * P),
            ("use_custom_allocator", 7 * P),
        ],
    },
    FrozenLayout {
        name: "MemoryManagerVTable",
        size: 4 * P,
        fields: &[
            ("destroy", 0),
            ("acquire", P),
            ("release", 2 * P),
            ("allocated_bytes", 3 * P),
        ],
    },
    FrozenLayout {
        name: "WorkloadFactoryVTable",
        size: 2 * P,
        fields: &[("destroy", 0), ("create_workload", P)],
    },
    FrozenLayout {
        name: "WorkloadVTable",
        size: 2 * P,
        fields: &[("destroy", 0), ("execute", P)],
    },
    FrozenLayout {
        name: "BackendContextVTable",
        size: 6 * P,
        fields: &[
            ("destroy", 0),
            ("before_load_network", P),
            ("after_load_network", 2 * P),
            ("before_unload_network", 3 * P),
            ("after_unload_network", 4 * P),
            ("after_enqueue", 5 * P),
        ],
    },
];

/// The vtable layouts of Backend API 1.1: the 1.0 layouts of [`ABI_1_0_LAYOUT`] with the
/// entries 1.1 appended to the backend's vtable (the other vtables are unchanged).
pub const ABI_1_1_LAYOUT: &[FrozenLayout] = &[
    FrozenLayout {
        name: "BackendVTable",
        size: 10 * P,
        fields: &[
            ("destroy", 0),
            ("capabilities", P),
            ("is_layer_supported", 2 * P),
            ("create_memory_manager", 3 * P),
            ("create_workload_factory", 4 * P),
            ("create_backend_context", 5 * P),
            ("optimize_subgraph", 6 * P),
            ("use_custom_allocator", 7 * P),
            ("create_workload_factory_with_options", 8 * P),
            ("optimize_subgraph_with_options", 9 * P),
        ],
    },
    ABI_1_0_LAYOUT[1],
    ABI_1_0_LAYOUT[2],
    ABI_1_0_LAYOUT[3],
    ABI_1_0_LAYOUT[4],
];

/// The vtable layouts of Backend API 1.2: 1.1's ([`ABI_1_1_LAYOUT`]); 1.2 appended layer
/// kinds, not entries.
pub const ABI_1_2_LAYOUT: &[FrozenLayout] = ABI_1_1_LAYOUT;

/// The vtable layouts of Backend API 1.3: 1.2's with the device-memory entries appended to
/// the memory manager's and the workload's vtables.
pub const ABI_1_3_LAYOUT: &[FrozenLayout] = &[
    ABI_1_1_LAYOUT[0],
    MEMORY_MANAGER_1_3,
    ABI_1_0_LAYOUT[2],
    FrozenLayout {
        name: "WorkloadVTable",
        size: 3 * P,
        fields: &[("destroy", 0), ("execute", P), ("execute_device", 2 * P)],
    },
    ABI_1_0_LAYOUT[4],
];

/// The vtable layouts of Backend API 1.4: 1.3's with the prepared-workload entries appended
/// to the workload factory's vtable.
pub const ABI_1_4_LAYOUT: &[FrozenLayout] = &[
    ABI_1_3_LAYOUT[0],
    ABI_1_3_LAYOUT[1],
    FrozenLayout {
        name: "WorkloadFactoryVTable",
        size: 4 * P,
        fields: &[
            ("destroy", 0),
            ("create_workload", P),
            ("prepare_workload", 2 * P),
            ("restore_workload", 3 * P),
        ],
    },
    ABI_1_3_LAYOUT[3],
    ABI_1_3_LAYOUT[4],
];

/// 1.3's memory manager vtable (1.0's with the device-memory entries).
const MEMORY_MANAGER_1_3: FrozenLayout = FrozenLayout {
    name: "MemoryManagerVTable",
    size: 10 * P,
    fields: &[
        ("destroy", 0),
        ("acquire", P),
        ("release", 2 * P),
        ("allocated_bytes", 3 * P),
        ("allocate_buffer", 4 * P),
        ("release_buffer", 5 * P),
        ("copy_to_device", 6 * P),
        ("copy_to_host", 7 * P),
        ("import_host", 8 * P),
        ("finish", 9 * P),
    ],
};

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    macro_rules! measured {
        ($ty:ident: $($field:ident),+) => {
            FrozenLayout {
                name: stringify!($ty),
                size: size_of::<$ty>(),
                fields: &[$((stringify!($field), offset_of!($ty, $field))),+],
            }
        };
    }

    fn measured() -> [FrozenLayout; 5] {
        [
            measured!(BackendVTable: destroy, capabilities, is_layer_supported,
                create_memory_manager, create_workload_factory, create_backend_context,
                optimize_subgraph, use_custom_allocator, create_workload_factory_with_options,
                optimize_subgraph_with_options),
            measured!(MemoryManagerVTable: destroy, acquire, release, allocated_bytes,
                allocate_buffer, release_buffer, copy_to_device, copy_to_host, import_host,
                finish),
            measured!(WorkloadFactoryVTable: destroy, create_workload, prepare_workload,
                restore_workload),
            measured!(WorkloadVTable: destroy, execute, execute_device),
            measured!(BackendContextVTable: destroy, before_load_network, after_load_network,
                before_unload_network, after_unload_network, after_enqueue),
        ]
    }

    /// The 1.0 layout must never change: every 1.0 entry stays at its offset, and what a later
    /// minor appended starts where the 1.0 table ended. A failure here means an incompatible
    /// ABI change.
    #[test]
    fn frozen_layout() {
        for (now, frozen) in measured().iter().zip(ABI_1_0_LAYOUT) {
            assert_eq!(now.name, frozen.name);
            assert_eq!(
                &now.fields[..frozen.fields.len()],
                frozen.fields,
                "{}",
                now.name
            );
            let appended_from = now
                .fields
                .get(frozen.fields.len())
                .map_or(now.size, |f| f.1);
            assert_eq!(appended_from, frozen.size, "{}: 1.0 prefix size", now.name);
        }
    }

    /// Every entry of `frozen` stays at its offset in `now`, and what a later minor appended
    /// starts where `frozen` ended.
    fn assert_prefix(now: &[FrozenLayout], frozen: &[FrozenLayout], minor: &str) {
        assert_eq!(now.len(), frozen.len());
        for (now, frozen) in now.iter().zip(frozen) {
            assert_eq!(now.name, frozen.name);
            assert_eq!(
                &now.fields[..frozen.fields.len()],
                frozen.fields,
                "{}",
                now.name
            );
            let appended_from = now
                .fields
                .get(frozen.fields.len())
                .map_or(now.size, |f| f.1);
            assert_eq!(appended_from, frozen.size, "{}: {minor} prefix", now.name);
        }
    }

    /// The 1.1 (and 1.2) layouts stay a prefix of today's.
    #[test]
    fn frozen_layout_1_1() {
        assert_prefix(&measured(), ABI_1_1_LAYOUT, "1.1");
        assert_prefix(&measured(), ABI_1_2_LAYOUT, "1.2");
    }

    /// The 1.3 layout stays a prefix of today's.
    #[test]
    fn frozen_layout_1_3() {
        assert_prefix(&measured(), ABI_1_3_LAYOUT, "1.3");
    }

    /// The 1.4 layout, exactly (a later minor relaxes this to a prefix check, as for 1.3).
    #[test]
    fn frozen_layout_1_4() {
        assert_eq!(measured().as_slice(), ABI_1_4_LAYOUT);
        assert_prefix(&measured(), ABI_1_0_LAYOUT, "1.0");
    }

    /// Types 1.1 appended variants to keep their size and the 1.0 discriminants; the new
    /// variants come after the last 1.0 one.
    #[test]
    fn frozen_values_1_1() {
        use crate::*;
        let sizes = [
            ("LayerDescriptor", size_of::<LayerDescriptor>(), 152),
            ("SubgraphLayer", size_of::<SubgraphLayer>(), 256),
            ("SubgraphView", size_of::<SubgraphView<'_>>(), 128),
            ("SubgraphTensor", size_of::<SubgraphTensor<'_>>(), 144),
            ("Substitution", size_of::<Substitution>(), 288),
            ("OptimizationViews", size_of::<OptimizationViews>(), 96),
            ("Support", size_of::<Support>(), 40),
            ("NamedValues", size_of::<NamedValues>(), 32),
            ("Value", size_of::<Value>(), 40),
            ("LayerKind", size_of::<LayerKind>(), 1),
            ("BinaryOperation", size_of::<BinaryOperation>(), 1),
            ("UnaryOperation", size_of::<UnaryOperation>(), 1),
            ("ActivationFunction", size_of::<ActivationFunction>(), 1),
        ];
        for (name, got, want) in sizes {
            assert_eq!(got, want, "size of {name}");
        }
        assert_eq!(LayerKind::PreCompiled as u8, 18);
        assert_eq!(LayerKind::ElementwiseUnary as u8, 19);
        assert_eq!(LayerKind::Normalization as u8, 20);
        assert_eq!(LayerKind::BatchMatMul as u8, 21);
        assert_eq!(LayerKind::Slice as u8, 22);
        assert_eq!(LayerKind::Resize as u8, 23);
        assert_eq!(LayerKind::TransposeConvolution2d as u8, 24);
        assert_eq!(LayerKind::Gather as u8, 25);
        assert_eq!(LayerKind::Reduce as u8, 26);
        assert_eq!(LayerKind::ArgMinMax as u8, 27);
        assert_eq!(LayerKind::LayerNormalization as u8, 28);
        assert_eq!(LayerKind::InstanceNormalization as u8, 29);
        assert_eq!(LayerKind::Cast as u8, 30);
        assert_eq!(LayerKind::Comparison as u8, 31);
        assert_eq!(LayerKind::Where as u8, 32);
        assert_eq!(LayerKind::BroadcastTo as u8, 33);
        assert_eq!(LayerKind::DilatedPooling2d as u8, 34);
        assert_eq!(ActivationFunction::Elu as u8, 6);
        assert_eq!(ActivationFunction::Gelu as u8, 7);
        assert_eq!(BinaryOperation::Minimum as u8, 5);
        assert_eq!(BinaryOperation::Power as u8, 6);
        assert_eq!(BinaryOperation::SquaredDifference as u8, 7);
        // The descriptor's tag is its first byte, equal to the kind's discriminant.
        let tag = |d: &LayerDescriptor| {
            // SAFETY: a `repr(u8)` enum starts with its `u8` tag.
            unsafe { *(d as *const LayerDescriptor).cast::<u8>() }
        };
        assert_eq!(tag(&LayerDescriptor::MemCopy), LayerKind::MemCopy as u8);
        assert_eq!(
            tag(&LayerDescriptor::ElementwiseUnary(UnaryOperation::Erf)),
            LayerKind::ElementwiseUnary as u8
        );
    }

    /// 1.2 appended three layer kinds and their descriptors after 1.1's last, added no vtable
    /// entry (the vtables are 1.1's, checked by `frozen_layout_1_1`) and kept every size.
    #[test]
    fn frozen_values_1_2() {
        use crate::*;
        assert_eq!(LayerKind::Quantize as u8, 35);
        assert_eq!(LayerKind::Dequantize as u8, 36);
        assert_eq!(LayerKind::Requantize as u8, 37);
        assert_eq!(size_of::<LayerDescriptor>(), 152);
        assert_eq!(size_of::<TensorInfo>(), 112);
        assert_eq!(size_of::<Quantization>(), 56);
        assert_eq!(DataType::QAsymmU8 as u8, 2);
        assert_eq!(DataType::QAsymmS8 as u8, 3);
        assert_eq!(DataType::QSymmS8 as u8, 4);
        let tag = |d: &LayerDescriptor| {
            // SAFETY: a `repr(u8)` enum starts with its `u8` tag.
            unsafe { *(d as *const LayerDescriptor).cast::<u8>() }
        };
        assert_eq!(tag(&LayerDescriptor::Dequantize), 36);
        assert_eq!(tag(&LayerDescriptor::Requantize(DataType::QAsymmS8)), 37);
    }

    /// 1.5 appended nine data types after `Boolean` and the layer kind `NonZero` after
    /// `Requantize`: the earlier discriminants and every size stay as they were.
    #[test]
    fn frozen_values_1_5() {
        use crate::*;
        let expected = [
            (DataType::Float32, 0),
            (DataType::Float16, 1),
            (DataType::QAsymmU8, 2),
            (DataType::QAsymmS8, 3),
            (DataType::QSymmS8, 4),
            (DataType::Signed32, 5),
            (DataType::Boolean, 6),
            (DataType::Signed64, 7),
            (DataType::Float64, 8),
            (DataType::UnsignedInt8, 9),
            (DataType::Signed8, 10),
            (DataType::Signed16, 11),
            (DataType::UnsignedInt16, 12),
            (DataType::UnsignedInt32, 13),
            (DataType::UnsignedInt64, 14),
            (DataType::BFloat16, 15),
        ];
        for (i, (dt, tag)) in expected.into_iter().enumerate() {
            assert_eq!(dt as u8, tag, "{dt}");
            assert_eq!(DataType::ALL[i], dt);
        }
        assert_eq!(DataType::V1_0, &DataType::ALL[..7]);
        assert_eq!(LayerKind::NonZero as u8, 38);
        assert_eq!(LayerKind::ScatterElements as u8, 39);
        assert_eq!(LayerKind::ScatterNd as u8, 40);
        assert_eq!(LayerKind::NonMaxSuppression as u8, 41);
        assert_eq!(LayerKind::RoiAlign as u8, 42);
        assert_eq!(LayerKind::BitCast as u8, 43);
        assert_eq!(LayerKind::Determinant as u8, 44);
        assert_eq!(LayerKind::Unique as u8, 45);
        assert_eq!(LayerKind::DeformableConvolution2d as u8, 46);
        assert_eq!(LayerKind::Lstm as u8, 47);
        assert_eq!(LayerKind::ALL.len(), 48);
        let tag = |d: &LayerDescriptor| {
            // SAFETY: a `repr(u8)` enum starts with its `u8` tag.
            unsafe { *(d as *const LayerDescriptor).cast::<u8>() }
        };
        assert_eq!(tag(&LayerDescriptor::NonZero), 38);
        assert_eq!(tag(&LayerDescriptor::ScatterNd(ScatterReduction::Add)), 40);
        assert_eq!(
            tag(&LayerDescriptor::NonMaxSuppression(
                NonMaxSuppressionDescriptor {
                    center_point_box: false,
                    max_output_boxes_per_class: 1,
                    iou_threshold: 0.5,
                    score_threshold: 0.0,
                }
            )),
            41
        );
        assert_eq!(tag(&LayerDescriptor::Determinant), 44);
        assert_eq!(
            tag(&LayerDescriptor::Lstm(LstmDescriptor {
                hidden_size: 1,
                direction: RecurrentDirection::Reverse,
            })),
            47
        );
        // 1.5 appended operations after 1.4's last ones.
        assert_eq!(BinaryOperation::BitwiseAnd as u8, 8);
        assert_eq!(BinaryOperation::ShiftRight as u8, 12);
        assert_eq!(UnaryOperation::Floor as u8, 11);
        assert_eq!(UnaryOperation::Tan as u8, 12);
        assert_eq!(UnaryOperation::Round as u8, 21);
        assert_eq!(size_of::<DataType>(), 1);
        assert_eq!(size_of::<TensorInfo>(), 112);
        assert_eq!(size_of::<LayerDescriptor>(), 152);
    }

    /// The boundary value types' sizes are part of the ABI too.
    #[test]
    fn frozen_value_sizes() {
        use crate::*;
        let sizes = [
            ("ApiVersion", size_of::<ApiVersion>(), 8),
            ("TensorInfo", size_of::<TensorInfo>(), 112),
            ("BackendError", size_of::<BackendError>(), 40),
            ("TensorView", size_of::<TensorView<'_>>(), 24),
            ("TensorViewMut", size_of::<TensorViewMut<'_>>(), 24),
            ("WorkloadDesc", size_of::<WorkloadDesc<'_>>(), 72),
            ("RawAllocator", size_of::<RawAllocator>(), 24),
            ("LogSink", size_of::<LogSink>(), 16),
            ("PluginInfo", size_of::<PluginInfo>(), 32),
            ("DeviceTensor", size_of::<DeviceTensor<'_>>(), 16),
            ("HostRegion", size_of::<HostRegion>(), 16),
            ("PreparedWorkload", size_of::<PreparedWorkload>(), 40),
            ("PreparedBlob", size_of::<PreparedBlob<'_>>(), 24),
        ];
        for (name, got, want) in sizes {
            assert_eq!(got, want, "size of {name}");
        }
    }
}
