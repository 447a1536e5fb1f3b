//! Unloading: every context asked first (a refusal keeps the network loaded), then device
//! buffers and memory released, workloads destroyed, `after_unload_network` called.

use super::{BackendInUse, LoadedNetwork, error::ExecuteError};
use crate::remote::protocol::{Hook, MemoryOp};

impl LoadedNetwork {
    /// Asks every context whether the network may be unloaded; the first refusal is returned.
    /// A faulted backend is not asked (it is not called again). A context that panics has not
    /// refused: the backend is now faulted, the unload goes on, and its error comes back as
    /// `Ok(Some(error))` to be reported once the network is gone.
    pub(crate) fn before_unload(&self) -> Result<Option<ExecuteError>, ExecuteError> {
        for b in self.backends.iter().filter(|b| b.is_faulted()) {
            log::warn!(
                "network {}: backend {} is faulted and is not called while unloading",
                self.id,
                b.id
            );
        }
        let mut panicked = None;
        for b in self.healthy() {
            match b.hook(Hook::BeforeUnload) {
                // A panic, or a backend that faulted meanwhile on another thread (or whose
                // server died): not a refusal.
                Some(Err(e)) if e.code == backplane_api::ErrorCode::Panicked || b.is_faulted() => {
                    panicked.get_or_insert(ExecuteError::Backend {
                        layer: "<network>".into(),
                        error: e,
                    });
                }
                Some(Err(e)) => {
                    if let Some(p) = panicked {
                        log::error!("network {}: {p}", self.id);
                    }
                    return Err(ExecuteError::UnloadRefused {
                        network: self.id,
                        backend: b.id.clone(),
                        reason: e.message,
                    });
                }
                _ => {}
            }
        }
        Ok(panicked)
    }

    /// Releases memory, destroys the workloads, and calls `after_unload_network`.
    pub(crate) fn unload(mut self) -> Result<(), ExecuteError> {
        let mut first_error = None;
        let backends = &self.backends;
        self.buffers.release(|b| backends[b].device_memory());
        for b in self.healthy() {
            if let Some(Err(e)) = b.memory(MemoryOp::Release) {
                first_error.get_or_insert(ExecuteError::Backend {
                    layer: "<network>".into(),
                    error: e,
                });
            }
        }
        self.steps.clear();
        for server in self.backends.iter().filter_map(BackendInUse::remote) {
            server.drop_network(self.id, true);
        }
        for b in self.healthy() {
            if let Some(Err(e)) = b.hook(Hook::AfterUnload) {
                first_error.get_or_insert(ExecuteError::Backend {
                    layer: "<network>".into(),
                    error: e,
                });
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
