//! The operating system's side of the host: every `unsafe` block of the crate lives here.
//!
//! - [`loader`]: `dlopen`/`dlsym` of a plugin file, the calls through its C symbols (id,
//!   version, factory, metadata), the privilege check and `close_range`.
//! - [`shm`]: the shared memory (`memfd` + `mmap`) that an out-of-process backend's tensors
//!   live in.
//!
//! Imports: `report`.

#[allow(
    unsafe_code,
    reason = "dlopen, dlsym and calls through a plugin's C symbols"
)]
pub mod loader;
#[allow(unsafe_code, reason = "mapping a memfd shared with a child process")]
pub mod shm;
