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
//!    matches the plugin pattern ([`plugins::discovery`]).
//! 2. Links are resolved; dangling links, non-files and already-seen files are skipped.
//! 3. Trust: permissions (and optional SHA-256 pins) are checked ([`plugins::trust`]).
//! 4. The file is opened with `RTLD_NOW | RTLD_LOCAL`; the three symbols, the id and the
//!    version are checked, and a compatible plugin is handed the host's log sink (`sys::loader`).
//! 5. The registry refuses a duplicate id, calls `BackendFactory` once and reads the
//!    capabilities (`plugins::registry`); the backend is registered.
//! 6. Every object made by the plugin holds its library; dropping the runtime deregisters
//!    the backend; the library is never unmapped.
//!
//! `unsafe` is confined to `sys`.
//!
//! The `backplane` command is its own package (`backplane-cli`, `host/cli`), and so is the
//! conformance kit (`backplane-conformance`, `host/conformance`): both use this crate's public
//! API only, and an application that links this crate links neither.
//!
//! A backend can also run in a child process (`remote`, `--out-of-process ID`): a crash or
//! a hang there fails the call and faults the backend, never the host.
//!
//! ## Layers
//! The crate's folders are its layers. A module imports only from the layers below its own
//! (and from its own folder); each folder's `mod.rs` says what it holds and ends with the
//! line `Imports: …` naming what it may use, which a test (`host/tests/layers.rs`) checks
//! against every `crate::` path in the sources, together with the absence of import circles
//! between files. From the bottom:
//!
//! | layer | what |
//! |---|---|
//! | [`report`], [`npy`], [`seeded`], `child` | leaves: the discovery report and reason codes; `.npy` files; seeded data; child processes |
//! | `sys` | every `unsafe`: `dlopen`/`dlsym` and plugin calls, shared memory |
//! | `memory` | tensor arenas, the lifetime-based memory plan and the memory budget of a load |
//! | `remote` | the wire protocol and the host's side of an out-of-process backend |
//! | [`plugins`] | paths, discovery, trust, isolation, loading, the registry; `inspect`, `install` |
//! | [`graph`] | networks, rewrites, substitutions, the optimizer |
//! | `exec`, [`onnx`], [`serve`] | loaded networks; the ONNX importer; the child's side of an out-of-process backend |
//! | [`runtime`] | creation options, the registry and report, networks loaded and run |
//! | [`compiled`] | compiled network files (`.bpn`): written, mapped, checked and bound to a runtime |
//! | [`session`] | a model file, imported, optimised and loaded in one object |

#![deny(unsafe_code)]

pub(crate) mod child;
pub mod compiled;
mod doc_snippets;
pub(crate) mod exec;
pub mod graph;
pub(crate) mod memory;
pub mod npy;
pub mod onnx;
pub mod plugins;
pub(crate) mod remote;
pub mod report;
pub mod runtime;
pub mod seeded;
pub mod serve;
pub mod session;
pub(crate) mod sys;

pub use backplane_api as api;
pub use exec::{ExecuteError, InputTensor, LayerProfile, LoadedNetwork, NetworkId, OutputTensor};
pub use graph::{
    network::{Network, NetworkBuilder, NetworkError, TensorRef},
    optimizer::{Boundary, OptimizeError, OptimizedNetwork, OptimizerOptions, Strategy},
};
pub use memory::budget::{MemoryBudget, OverBudget, parse_bytes, physical_memory};
pub use plugins::{
    load::register_builtin_backends,
    registry::{BackendRegistry, BackendSource, RegisteredBackend},
    trust::TrustPolicy,
};
pub use remote::OutOfProcess;
pub use report::{
    BackendReport, CandidateReport, CandidateStatus, DiscoveryReport, PathReport, PathStatus,
    ReasonCode, Rejection, SourceKind,
};
pub use runtime::{
    CreationOptions, NetworkTransfers, Runtime, SEAL_KEY_VAR, ScratchMemory, SealKeySource,
};
pub use session::{
    CacheLimits, CacheStats, OwnedTensor, Plan, Session, SessionError, SessionOptions, input_bytes,
    output_values,
};
