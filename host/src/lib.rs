//! # backplane: the inference host
//!
//! Discovers backend plugins (`<Vendor>_<Name>_backend.so[.N...]`) in the directories of
//! `DYNAMIC_BACKEND_PATHS` (or [`CreationOptions::dynamic_backends_path`]), validates each
//! against the Backend API version, and registers it in a per-[`Runtime`] registry after the
//! built-in CpuRef. Every directory entry gets a verdict in the [`DiscoveryReport`].
//!
//! ```no_run
//! use backplane::{CreationOptions, Runtime};
//!
//! let runtime = Runtime::new(CreationOptions::default());
//! for backend in runtime.registry().backends() {
//!     println!("{} from {:?}", backend.id(), backend.source());
//! }
//! println!("{}", runtime.report().to_json());
//! ```
//!
//! ## Life cycle of a plugin
//! 1. Discovery lists each search directory in byte order and keeps entries whose own name
//!    matches the plugin pattern ([`discovery`]).
//! 2. Links are resolved; dangling links, non-files and already-seen files are skipped.
//! 3. Trust: permissions (and optional SHA-256 pins) are checked ([`trust`]).
//! 4. The file is opened with `RTLD_NOW | RTLD_LOCAL`; the three symbols, the id and the
//!    version are checked, and a compatible plugin is handed the host's log sink ([`loader`]).
//! 5. The registry refuses a duplicate id, calls `BackendFactory` once and reads the
//!    capabilities ([`registry`]); the backend is registered.
//! 6. Every object made by the plugin holds its library; dropping the runtime deregisters
//!    the backend; the library is never unmapped.
//!
//! `unsafe` is confined to [`loader`].
//!
//! A backend can also run in a child process ([`remote`], `--out-of-process ID`): a crash or
//! a hang there fails the call and faults the backend, never the host.

#![deny(unsafe_code)]

pub mod arena;
pub mod conformance;
pub mod discovery;
mod doc_snippets;
pub mod inspect;
pub mod install;
pub mod isolation;
pub mod loaded_network;
#[allow(
    unsafe_code,
    reason = "dlopen, dlsym and calls through a plugin's C symbols"
)]
pub mod loader;
pub mod memory_plan;
pub mod network;
pub mod npy;
pub mod onnx;
pub mod optimizer;
pub mod paths;
pub mod registry;
pub mod remote;
pub mod report;
pub mod rewrite;
pub mod runtime;
pub mod session;
pub mod substitution;
pub mod trust;

pub use backplane_api as api;
pub use loaded_network::{
    ExecuteError, InputTensor, LayerProfile, LoadedNetwork, NetworkId, OutputTensor,
};
pub use network::{Network, NetworkBuilder, NetworkError, TensorRef};
pub use optimizer::{OptimizeError, OptimizedNetwork, OptimizerOptions};
pub use registry::{BackendRegistry, BackendSource, RegisteredBackend};
pub use remote::OutOfProcess;
pub use report::{
    BackendReport, CandidateReport, CandidateStatus, DiscoveryReport, PathReport, PathStatus,
    ReasonCode, Rejection, SourceKind,
};
pub use runtime::{CreationOptions, Runtime, register_builtin_backends};
pub use session::{Session, SessionError, SessionOptions, input_bytes, output_values};
pub use trust::TrustPolicy;
