//! Plugins: from directories on disk to registered backends.
//!
//! In the order a runtime uses them:
//! 1. [`paths`]: where to look (`DYNAMIC_BACKEND_PATHS`, the option, the build default).
//! 2. [`discovery`]: the directories' entries in byte order, the file-name rule, links.
//! 3. [`trust`]: permissions and SHA-256 pins.
//! 4. [`isolation`]: an optional probe of each candidate in a child process ([`probe`] is
//!    the child's side).
//! 5. `load`: the in-process (or out-of-process) load of each candidate.
//! 6. `registry`: the registered backends, their factories, capabilities and faults.
//!
//! Beside them, the CLI's tools for one file: [`inspect`] and [`install`].
//!
//! Imports: `remote`, `sys`, `child`, `report`.

pub mod discovery;
pub mod inspect;
pub mod install;
pub mod isolation;
pub(crate) mod load;
pub mod paths;
pub mod probe;
pub(crate) mod registry;
pub mod trust;
