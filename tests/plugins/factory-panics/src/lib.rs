//! Test plugin `PanicFactory` (vendor `Test`): the backend constructor panics with the message
//! `"constructor exploded"`.
//!
//! The export macro catches the panic inside the plugin: `BackendFactory` returns null and
//! `BackplaneTakeFactoryError` returns an error with code `Panicked` whose message contains
//! `"constructor exploded"`. The host must reject the file with reason `panicked` (not
//! `factory_failed`: the taken error says the factory panicked), carry the message, register
//! nothing, and keep running.

use bp_test_never_built::NeverBuilt;

/// Panics with `"constructor exploded"`.
fn explode() -> NeverBuilt {
    panic!("constructor exploded")
}

backplane_api::export_backend!(id: "PanicFactory", vendor: "Test", backend: explode);
