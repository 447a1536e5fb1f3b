//! Profiling: per unit (a layer in this process, or a segment out of process) the runs timed
//! and their total time since profiling was turned on.

use std::{sync::atomic::Ordering, time::Duration};

use backplane_api::LayerKind;

use super::{LoadedNetwork, Unit};

/// The time one unit of a network took over the runs timed since profiling was turned on
/// ([`LoadedNetwork::set_profiling`]; onnxruntime's `enable_profiling`, Arm NN's profiler).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerProfile {
    /// The layer's name (a fused layer's own name); for a segment of an out-of-process
    /// backend, which is timed as one round trip, its first and last layers.
    pub layer: String,
    /// The layer's kind (a segment's first layer's).
    pub kind: LayerKind,
    /// The backend that ran it.
    pub backend: String,
    /// For a fused layer, the layers it stands for (their names in the network as imported:
    /// the model's node names), its debug handle ([`crate::graph::optimizer::Assignment::origins`]);
    /// empty otherwise.
    pub origins: Vec<String>,
    /// Runs timed.
    pub runs: u64,
    /// Their total time, from the call into the backend to its return (arena views
    /// included).
    pub total: Duration,
}

impl LoadedNetwork {
    /// Turns per-layer timing on (its counts start from zero) or off. While it is on, every
    /// successful [`LoadedNetwork::enqueue`] adds each unit's time to [`LoadedNetwork::profile`];
    /// a run that fails adds nothing. Timing costs two clock reads per layer, and on a device
    /// backend a fence (`finish`) after each of its workloads, which otherwise only queue
    /// work.
    pub fn set_profiling(&self, on: bool) {
        let mut profile = self.profile.lock().unwrap_or_else(|e| e.into_inner());
        let epoch = self.profile_epoch.fetch_add(1, Ordering::AcqRel) + 1;
        *profile = on.then(|| (epoch, vec![(0, Duration::ZERO); self.units.len()]));
    }

    /// Per unit, in the order they run, the time taken since profiling was turned on; `None`
    /// while it is off. A unit is one layer in this process, or one segment of an
    /// out-of-process backend (timed as one round trip). Constant layers run at load and do
    /// not appear.
    pub fn profile(&self) -> Option<Vec<LayerProfile>> {
        let profile = self.profile.lock().unwrap_or_else(|e| e.into_inner());
        let (_, profile) = profile.as_ref()?;
        Some(
            self.units
                .iter()
                .zip(profile)
                .map(|(unit, &(runs, total))| {
                    let (layer, first, backend, origins) = match unit {
                        Unit::Local(i) => {
                            let step = &self.steps[*i];
                            (step.layer.clone(), step, step.backend, step.origins.clone())
                        }
                        Unit::Remote { backend, steps, .. } => (
                            self.segment_name(steps),
                            &self.steps[steps[0]],
                            Some(*backend),
                            match steps.as_slice() {
                                [one] => self.steps[*one].origins.clone(),
                                _ => Vec::new(),
                            },
                        ),
                    };
                    LayerProfile {
                        layer,
                        kind: first.kind,
                        backend: backend.map_or_else(String::new, |b| self.backends[b].id.clone()),
                        origins,
                        runs,
                        total,
                    }
                })
                .collect(),
        )
    }

    /// A segment's layers for a message: the one layer, or the first and last.
    pub(super) fn segment_name(&self, steps: &[usize]) -> String {
        match steps {
            [one] => self.steps[*one].layer.clone(),
            [first, .., last] => format!(
                "{} .. {} ({} layers run out of process)",
                self.steps[*first].layer,
                self.steps[*last].layer,
                steps.len()
            ),
            [] => "<segment>".to_owned(),
        }
    }
    /// At the start of a run: the profiling epoch, and an empty list of unit times when
    /// profiling is on.
    pub(super) fn start_timing(&self) -> (u64, Option<Vec<Duration>>) {
        let epoch = self.profile_epoch.load(Ordering::Acquire);
        let times = self
            .profile
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
            .then(|| Vec::with_capacity(self.units.len()));
        (epoch, times)
    }

    /// After a successful run: its unit times count, unless profiling was restarted (or
    /// turned off) since the run started.
    pub(super) fn record_times(&self, epoch: u64, times: Option<Vec<Duration>>) {
        if let Some(times) = times
            && let Some((started, profile)) = self
                .profile
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_mut()
            && *started == epoch
        {
            for ((runs, total), t) in profile.iter_mut().zip(times) {
                *runs += 1;
                *total += t;
            }
        }
    }
}
