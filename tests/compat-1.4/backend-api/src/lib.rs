//! # backplane-api: the Backend API 1.4
//!
//! The contract between the backplane host and backend plugins, at version 1.4
//! ([`API_MAJOR`].[`API_MINOR`]; what each minor added is in the repository's
//! `docs/BACKEND-API-CHANGELOG.md`). A vendor implements the safe traits of this crate
//! ([`Backend`], [`WorkloadFactory`], [`Workload`], and optionally [`MemoryManager`] and
//! [`BackendContext`]), builds a `cdylib`, and exports it with one line. A plugin with its own
//! id that runs one layer, the Float32 ReLU (the repository's `docs/VENDOR-GUIDE.md` builds,
//! installs and checks this same plugin step by step; its test builds the guide's code):
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use backplane_api::{
//!     ActivationFunction, Backend, BackendError, BackendResult, DataType, LayerDescriptor,
//!     MemoryManager, Support, TensorInfo, TensorView, TensorViewMut, Workload, WorkloadDesc,
//!     WorkloadFactory,
//! };
//!
//! struct MyRelu;
//! struct Factory;
//! struct Relu;
//!
//! fn is_float32_relu(layer: &LayerDescriptor, inputs: &[TensorInfo], outputs: &[TensorInfo]) -> bool {
//!     let relu =
//!         matches!(layer, LayerDescriptor::Activation(a) if a.function == ActivationFunction::ReLU);
//!     relu && matches!((inputs, outputs), ([i], [o]) if i == o && i.data_type == DataType::Float32)
//! }
//!
//! impl Backend for MyRelu {
//!     fn is_layer_supported(&self, layer: &LayerDescriptor, inputs: &[TensorInfo], outputs: &[TensorInfo]) -> Support {
//!         if is_float32_relu(layer, inputs, outputs) {
//!             Support::Supported
//!         } else {
//!             Support::unsupported("MyRelu runs only ReLU on Float32 tensors")
//!         }
//!     }
//!     fn create_workload_factory(
//!         &self,
//!         _memory: Option<Arc<dyn MemoryManager>>,
//!     ) -> BackendResult<Box<dyn WorkloadFactory>> {
//!         Ok(Box::new(Factory))
//!     }
//! }
//!
//! impl WorkloadFactory for Factory {
//!     fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
//!         if is_float32_relu(desc.layer, &desc.inputs, &desc.outputs) {
//!             Ok(Box::new(Relu))
//!         } else {
//!             Err(BackendError::unsupported(format!("MyRelu cannot build {}", desc.name)))
//!         }
//!     }
//! }
//!
//! impl Workload for Relu {
//!     fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> BackendResult<()> {
//!         let ([input], [output]) = (inputs, outputs) else {
//!             return Err(BackendError::invalid_argument("ReLU has one input and one output"));
//!         };
//!         let (x, y) = (input.as_f32()?, output.as_f32_mut()?);
//!         for (y, x) in y.iter_mut().zip(x) {
//!             *y = if *x < 0.0 { 0.0 } else { *x };
//!         }
//!         Ok(())
//!     }
//! }
//!
//! backplane_api::export_backend!(id: "MyRelu", vendor: "Example", backend: || MyRelu);
//! ```
//!
//! What a larger plugin needs beyond this contract (a checked reader for its `PreCompiled`
//! payloads, a greedy fusion driver, the layer-support preamble and one routing function for
//! support and workload creation) is in the plugin kit, `backplane-backend-kit`, released with
//! this crate at the same minor version.
//!
//! No vendor writes `extern "C"` or `unsafe`: the macro generates the C symbols and this crate
//! the ABI-stable tables around the traits.
//!
//! ## The rules
//! 1. **Symbols.** A plugin exports `GetBackendId`, `GetVersion` and `BackendFactory` (and,
//!    through the macro, the optional `BackplaneInstallLogger`, `BackplanePluginInfo` and
//!    `BackplaneTakeFactoryError`). The host accepts any plugin that exports the three
//!    required ones correctly.
//! 2. **Versions.** A plugin built against `M.m` loads in a host at `MAJOR.MINOR` iff
//!    `M == MAJOR && m <= MINOR` ([`ApiVersion::accepts`]). Minor versions only append (vtable
//!    entries, enum variants, layer kinds); a newer host reads an entry an older plugin lacks
//!    as `None` and uses the 1.0 path, and never hands a plugin anything newer than the minor it
//!    was built against ([`additions`]).
//! 3. **Ids.** 1–64 ASCII letters and digits, not `Unknown` ([`validate_backend_id`]).
//! 4. **Who validates what.** The host validates everything a plugin returns (nulls, UTF-8,
//!    versions, substitutions). The plugin (this crate's thunks) validates that objects handed
//!    back to it are its own.
//! 5. **Errors and panics.** Every trait method returns [`BackendResult`] or a plain value.
//!    A panic in vendor code is caught inside the plugin and reported as
//!    [`ErrorCode::Panicked`]; the host marks that backend faulted and stops using it. Plugins
//!    must be built with `panic = "unwind"` (the default): with `panic = "abort"` a panic
//!    ends the process and nothing can protect the host.
//! 6. **Memory.** What one side allocates, that side frees: boundary types are abi_stable's
//!    (`RVec`, `RString`, …), which carry their own deallocator.
//!
//! ## Life cycle of a backend object
//! 1. The host opens the library (`RTLD_NOW | RTLD_LOCAL`), reads the id and version, hands a
//!    compatible plugin a [`ffi::LogSink`], and calls `BackendFactory`.
//! 2. The host queries [`Backend::capabilities`] and [`Backend::is_layer_supported`].
//! 3. For a network: [`Backend::create_memory_manager`], [`Backend::create_workload_factory`],
//!    [`Backend::create_backend_context`]; `before_load_network`; [`MemoryManager::acquire`];
//!    one workload per layer (Constant layers run once, now); `after_load_network`.
//!    A compiled network (1.4) restores a workload from the blob its factory prepared
//!    ([`WorkloadFactory::prepare_workload`], [`WorkloadFactory::restore_workload`]).
//! 4. Each inference: [`Workload::execute`] in order (a device-memory backend, 1.3:
//!    [`Workload::execute_device`] on its own buffers, then [`MemoryManager::finish`]),
//!    `after_enqueue`.
//! 5. Unload: `before_unload_network` (an `Err` keeps the network loaded),
//!    [`MemoryManager::release`], the objects are destroyed, `after_unload_network`.
//! 6. Every object holds the plugin's library; the library is never unmapped while the process
//!    runs.
//!
//! All `unsafe` code of this crate is in [`ffi`].

#![deny(unsafe_code)]

pub mod additions;
pub mod backend;
pub mod capabilities;
pub mod context;
pub mod device;
pub mod error;
#[allow(
    unsafe_code,
    reason = "the FFI layer: object headers, thunks and host-side handles"
)]
pub mod ffi;
pub mod id;
pub mod layers;
pub mod memory;
pub mod shapes;
pub mod subgraph;
pub mod tensor;
pub mod types;
pub mod version;
pub mod workload;

pub use abi_stable;
pub use abi_stable::std_types::{ROption, RSlice, RSliceMut, RStr, RString, RVec};
pub use backend::Backend;
pub use bytemuck;
pub use capabilities::{BackendOptions, Capabilities, NamedValue, NamedValues, Value};
pub use context::{BackendContext, NetworkId};
pub use device::{BufferId, DeviceTensor, HostRegion, NO_BUFFER};
pub use error::{BackendError, BackendResult, ErrorCode};
pub use ffi::{AllocatedBuffer, CustomAllocator, clean_vector_state};
pub use id::{
    InvalidId, MAX_BACKEND_ID_LEN, RESERVED_BACKEND_ID, validate_backend_id,
    validate_backend_id_bytes,
};
pub use layers::*;
pub use memory::MemoryManager;
pub use subgraph::{
    LayerId, OptimizationViews, SubgraphLayer, SubgraphTensor, SubgraphView, Substitution, TensorId,
};
pub use tensor::{ConstTensor, Element, TensorView, TensorViewMut};
pub use types::{DataLayout, DataType, PerAxisQuantization, Quantization, TensorInfo};
pub use version::{API_MAJOR, API_MINOR, ApiVersion};
pub use workload::{PreparedBlob, PreparedWorkload, Workload, WorkloadDesc, WorkloadFactory};

/// Exports a backend from a `cdylib`: generates `GetBackendId`, `GetVersion`, `BackendFactory`
/// and the optional `BackplaneInstallLogger`, `BackplanePluginInfo` and
/// `BackplaneTakeFactoryError`.
///
/// - `id`: the backend id (checked at compile time: 1–64 ASCII letters/digits, not `Unknown`).
/// - `vendor`: the vendor name used by `backplane install` for the file name.
/// - `backend`: a function (or closure) returning the backend, or
///   `Result<backend, BackendError>`; it runs on every `BackendFactory` call, under
///   `catch_unwind`.
///
/// The release version embedded is the plugin crate's `CARGO_PKG_VERSION`.
///
/// Use it once per `cdylib`. A crate that is also linked into a host as an `rlib` exports the
/// symbols from that binary too; two such crates in one binary would clash.
#[macro_export]
macro_rules! export_backend {
    (id: $id:literal, vendor: $vendor:literal, backend: $ctor:expr $(,)?) => {
        const _: () = $crate::ffi::assert_valid_id($id);

        /// Backend API symbol: the backend id, NUL-terminated, static.
        #[unsafe(no_mangle)]
        pub extern "C" fn GetBackendId() -> *const ::std::ffi::c_char {
            ::std::concat!($id, "\0").as_ptr().cast()
        }

        /// Backend API symbol: the Backend API version this plugin was built against.
        ///
        /// # Safety
        /// `major` and `minor` are each null or valid for writing one `u32`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn GetVersion(major: *mut u32, minor: *mut u32) {
            // SAFETY: the caller's contract is `__export_version`'s.
            unsafe { $crate::ffi::__export_version(major, minor) }
        }

        /// Backend API symbol: a new backend instance owned by the caller; null on failure.
        #[unsafe(no_mangle)]
        pub extern "C" fn BackendFactory() -> *mut ::std::ffi::c_void {
            $crate::ffi::__export_factory($ctor)
        }

        /// Optional symbol: why the last `BackendFactory` call on this thread returned null.
        #[unsafe(no_mangle)]
        pub extern "C" fn BackplaneTakeFactoryError()
        -> $crate::abi_stable::std_types::ROption<$crate::BackendError> {
            $crate::ffi::__export_take_factory_error()
        }

        /// Optional symbol: forward this plugin's log records to the host.
        #[unsafe(no_mangle)]
        pub extern "C" fn BackplaneInstallLogger(sink: $crate::ffi::LogSink) {
            $crate::ffi::__export_install_logger(sink)
        }

        /// Optional symbol: vendor and release metadata.
        #[unsafe(no_mangle)]
        pub extern "C" fn BackplanePluginInfo() -> *const $crate::ffi::PluginInfo {
            static INFO: $crate::ffi::PluginInfo = $crate::ffi::PluginInfo {
                struct_size: ::std::mem::size_of::<$crate::ffi::PluginInfo>() as u32,
                api: $crate::ApiVersion::CURRENT,
                vendor: ::std::concat!($vendor, "\0").as_ptr().cast(),
                release: ::std::concat!(::std::env!("CARGO_PKG_VERSION"), "\0")
                    .as_ptr()
                    .cast(),
            };
            &INFO
        }
    };
}
