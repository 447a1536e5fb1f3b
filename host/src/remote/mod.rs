//! Out-of-process backends (`--out-of-process ID`, [`crate::CreationOptions::out_of_process`]).
//!
//! A backend chosen to run out of process is loaded in a child process, the `backplane` binary
//! in its hidden `serve` mode ([`crate::serve`]), and never in the host. The host talks to it over a
//! Unix socket, one request and one answer at a time ([`protocol`]):
//!
//! 1. **Start.** The child gets the socket as stdin, a cleaned environment (`RUST_LOG` and
//!    `LD_LIBRARY_PATH` only), closes every other descriptor it inherited, and dies with its
//!    parent (`PR_SET_PDEATHSIG`). It loads the file with the same checks as discovery (the
//!    host has run the trust checks on it) and answers `Hello` with the id, the version and
//!    the capabilities, or with the rejection discovery would have made.
//! 2. **Queries.** The registry holds a proxy ([`RemoteBackend::query_handle`]): support
//!    queries and `optimize_subgraph` go to the child, one round trip each.
//! 3. **Load.** Per network the child makes an instance, its memory manager, workload factory
//!    and context; the hooks and memory calls are forwarded one by one. The network's tensor
//!    arena is a `memfd` both processes map ([`crate::memory::arena`]); each workload is created in the
//!    child from its descriptor and constants.
//! 4. **Run.** The layers the backend runs form segments: runs of consecutive steps. One
//!    inference costs one round trip per segment: the child runs the segment's workloads on
//!    the shared arena, and the last segment also calls `after_enqueue`.
//! 5. **Faults.** A child that dies (a signal, `exit`) or does not answer within the call's
//!    deadline (then it is killed) fails that call with an error naming the backend, the call
//!    and the signal, status or deadline, with the end of the child's stderr. The backend is
//!    marked faulted, the child reaped; nothing else in the host is touched. A panic in the
//!    child comes back as `panicked`, as in process.
//!
//! Not forwarded: an application's custom allocator (it lives in the host's memory); the
//! proxy declines it.
//!
//! The folder holds the wire protocol ([`protocol`]) and the host's side ([`client`]); the
//! child's side is [`crate::serve`], which sits above the plugin loader it uses.
//!
//! Imports: `memory`, `sys`, `child`, `report`.

pub mod client;
pub mod protocol;

pub use client::{OutOfProcess, RemoteBackend};
pub use protocol::Target;
