//! Test plugin `ErrFactory` (vendor `Test`): the backend constructor returns
//! `Err(BackendError::failed("no device found"))`.
//!
//! `BackendFactory` returns null and `BackplaneTakeFactoryError` returns that error (code
//! `Failed`). The host must report `factory_failed` with the message `"no device found"` and
//! register nothing.

use backplane_api::{BackendError, BackendResult};
use bp_test_never_built::NeverBuilt;

/// The message of the constructor's error.
pub const MESSAGE: &str = "no device found";

/// Always fails with [`MESSAGE`].
fn try_new() -> BackendResult<NeverBuilt> {
    Err(BackendError::failed(MESSAGE))
}

backplane_api::export_backend!(id: "ErrFactory", vendor: "Test", backend: try_new);
