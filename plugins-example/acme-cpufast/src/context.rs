//! The CpuFast backend context: counts, per network, how often it was loaded, unloaded and
//! run, and logs load and unload (with the counts) at `info`, each inference at `debug`.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use backplane_api::{BackendContext, BackendResult, NetworkId};

/// The counters of one network.
#[derive(Debug, Default)]
pub struct NetworkCounts {
    /// Completed loads.
    pub loads: AtomicU64,
    /// Completed unloads.
    pub unloads: AtomicU64,
    /// Inferences run.
    pub enqueues: AtomicU64,
}

impl NetworkCounts {
    fn summary(&self) -> String {
        format!(
            "loads {}, unloads {}, inferences {}",
            self.loads.load(Ordering::Relaxed),
            self.unloads.load(Ordering::Relaxed),
            self.enqueues.load(Ordering::Relaxed)
        )
    }
}

/// Observes the networks that use CpuFast.
#[derive(Debug, Default)]
pub struct CpuFastContext {
    networks: Mutex<BTreeMap<NetworkId, Arc<NetworkCounts>>>,
}

impl CpuFastContext {
    /// A context with no network seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The counters of `network` (created at zero on first use).
    pub fn counts(&self, network: NetworkId) -> Arc<NetworkCounts> {
        // The map is only inserted into; a panic elsewhere cannot leave it inconsistent.
        let mut map = self.networks.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(map.entry(network).or_default())
    }
}

impl BackendContext for CpuFastContext {
    fn before_load_network(&self, network: NetworkId) -> BackendResult<()> {
        log::debug!("CpuFast: loading network {network}");
        Ok(())
    }

    fn after_load_network(&self, network: NetworkId) -> BackendResult<()> {
        let c = self.counts(network);
        c.loads.fetch_add(1, Ordering::Relaxed);
        log::info!("CpuFast: network {network} loaded ({})", c.summary());
        Ok(())
    }

    fn after_unload_network(&self, network: NetworkId) -> BackendResult<()> {
        let c = self.counts(network);
        c.unloads.fetch_add(1, Ordering::Relaxed);
        log::info!("CpuFast: network {network} unloaded ({})", c.summary());
        Ok(())
    }

    fn after_enqueue(&self, network: NetworkId) -> BackendResult<()> {
        let c = self.counts(network);
        let n = c.enqueues.fetch_add(1, Ordering::Relaxed) + 1;
        log::debug!("CpuFast: network {network} inference {n} done");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_network() {
        let ctx = CpuFastContext::new();
        for id in [1, 2] {
            ctx.before_load_network(id).unwrap();
            ctx.after_load_network(id).unwrap();
        }
        for _ in 0..3 {
            ctx.after_enqueue(1).unwrap();
        }
        ctx.before_unload_network(1).unwrap();
        ctx.after_unload_network(1).unwrap();
        assert_eq!(ctx.counts(1).summary(), "loads 1, unloads 1, inferences 3");
        assert_eq!(ctx.counts(2).summary(), "loads 1, unloads 0, inferences 0");
    }
}
