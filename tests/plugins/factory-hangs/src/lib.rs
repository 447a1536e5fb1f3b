//! Test plugin `HangFactory` (vendor `Test`): the backend constructor never returns.
//!
//! Loaded in the host's own process it would hang discovery forever, so tests load it only
//! with isolation (`CreationOptions::isolation`, CLI `--isolate`): the probe child is killed
//! when its time is up and the host rejects the file with reason `crashed`, registers
//! nothing, and goes on.

use bp_test_never_built::NeverBuilt;

/// Sleeps forever.
fn hang() -> NeverBuilt {
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

backplane_api::export_backend!(id: "HangFactory", vendor: "Test", backend: hang);
