//! Test plugin `AbortFactory` (vendor `Test`): the backend constructor aborts the process.
//!
//! Nothing in a process can survive this: `catch_unwind` does not see an abort. Loaded in the
//! host's own process it would end the host, so tests load it only with isolation
//! (`CreationOptions::isolation`, CLI `--isolate`): the probe child dies of SIGABRT and the host
//! rejects the file with reason `crashed`, registers nothing, and goes on.

use bp_test_never_built::NeverBuilt;

/// Aborts the process (after a line on stderr, which the isolation probe quotes).
fn abort() -> NeverBuilt {
    eprintln!("AbortFactory: aborting");
    std::process::abort()
}

backplane_api::export_backend!(id: "AbortFactory", vendor: "Test", backend: abort);
