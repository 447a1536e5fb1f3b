//! The runtime: options, discovery, and the registry and report it keeps.
//!
//! Imports: `exec`, `graph`, `plugins`, `remote`, `memory`, `sys`, `report`.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use backplane_api::ApiVersion;

use crate::memory::budget::MemoryBudget;
use crate::{
    exec::{
        BackendMemory, ExecuteError, InputTensor, LayerProfile, LoadedNetwork, NetworkId,
        OutputTensor,
    },
    graph::{
        network::Network,
        optimizer::{self, Boundary, OptimizeError, OptimizedNetwork, OptimizerOptions},
    },
    plugins::{
        discovery,
        isolation::Isolation,
        load::{self, LoadPolicy},
        paths::{self, PathSource},
        registry::BackendRegistry,
        trust::TrustPolicy,
    },
    remote::OutOfProcess,
    report::{
        self, BackendReport, CandidateReport, CandidateRow, DiscoveryReport, PathReport, PathStatus,
    },
    sys::loader,
};

/// How a [`Runtime`] is created.
#[derive(Debug, Clone)]
pub struct CreationOptions {
    /// Search path for dynamic backends: one directory (or a `:`-separated list, with the same
    /// rules as `DYNAMIC_BACKEND_PATHS`). When set it replaces the environment and the
    /// build-time default, even when it is invalid (then no dynamic backend loads).
    pub dynamic_backends_path: Option<PathBuf>,
    /// Register the built-in backends (CpuRef) first. Default: true.
    pub register_builtins: bool,
    /// Permission checks and SHA-256 pins.
    pub trust: TrustPolicy,
    /// Load each candidate in a child process first (see [`crate::plugins::isolation`]); a file that
    /// crashes or hangs there is rejected as `crashed`. Default: off.
    pub isolation: Option<Isolation>,
    /// Backends that run in a child process each (see `crate::remote`): a crash or hang
    /// there fails the call and faults the backend, never the application. Default: none.
    pub out_of_process: Option<OutOfProcess>,
    /// The key that seals the prepared workloads of the networks this runtime compiles, and
    /// that a compiled network's seals must hold under for its prepared workloads to be used
    /// (`crate::compiled`). Default: the user's ([`SealKeySource::User`]).
    pub seal_key: SealKeySource,
}

/// Where a runtime's seal key is (see [`CreationOptions::seal_key`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SealKeySource {
    /// The file `BACKPLANE_SEAL_KEY` names (ignored when the process runs with raised
    /// privileges), else `$XDG_CONFIG_HOME/backplane/seal.key`, else
    /// `$HOME/.config/backplane/seal.key`.
    #[default]
    User,
    /// This file.
    File(PathBuf),
    /// No key: compiling seals nothing, and no prepared workload of a compiled network is
    /// used (each is prepared again at load).
    Disabled,
}

/// The environment variable naming the seal key file ([`SealKeySource::User`]).
pub const SEAL_KEY_VAR: &str = "BACKPLANE_SEAL_KEY";

impl SealKeySource {
    /// The key file this source names now; `None` when disabled, or when the user's has no
    /// place (none of the variables is set).
    pub fn path(&self) -> Option<PathBuf> {
        match self {
            Self::File(p) => Some(p.clone()),
            Self::Disabled => None,
            Self::User => {
                let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
                if let Some(p) = var(SEAL_KEY_VAR) {
                    if !loader::process_is_privileged() {
                        return Some(PathBuf::from(p));
                    }
                    log::warn!("{SEAL_KEY_VAR} ignored: the process runs with raised privileges");
                }
                var("XDG_CONFIG_HOME")
                    .map(PathBuf::from)
                    .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".config")))
                    .map(|d| d.join("backplane").join("seal.key"))
            }
        }
    }
}

impl Default for CreationOptions {
    fn default() -> Self {
        Self {
            dynamic_backends_path: None,
            register_builtins: true,
            trust: TrustPolicy::default(),
            isolation: None,
            out_of_process: None,
            seal_key: SealKeySource::User,
        }
    }
}

impl CreationOptions {
    /// Sets the dynamic backend search path (builder style).
    pub fn with_dynamic_backends_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.dynamic_backends_path = Some(path.into());
        self
    }

    /// Registers no built-in backend (builder style).
    pub fn without_builtins(mut self) -> Self {
        self.register_builtins = false;
        self
    }
}

/// Memory that networks loaded with [`Runtime::load_network_in`] share for their
/// intermediate tensors: arenas taken for a run and given back after it, as many as runs go
/// on at once, each grown to the largest network that took it. A session's plans (one per set
/// of input shapes) share one, so a new plan runs on pages already mapped.
#[derive(Debug, Default, Clone)]
pub struct ScratchMemory(Arc<crate::memory::arena::Pool>);

impl ScratchMemory {
    /// Bytes of its arenas now.
    pub fn bytes(&self) -> usize {
        self.0.bytes()
    }
}

/// A runtime: its own registry of backends and the report of how it was filled.
///
/// Dropping it deregisters its backends; objects created by a plugin stay valid while they
/// live (each holds the plugin's library), and libraries stay mapped.
#[derive(Debug)]
pub struct Runtime {
    registry: BackendRegistry,
    /// The search paths with their status.
    paths: Vec<PathReport>,
    /// Every directory entry, names in one arena; the report's rows of entries whose names do
    /// not match are built from it when asked (see [`Runtime::report`]).
    scan: discovery::Scan,
    /// The report row of each of `scan.candidates()`, in the same order.
    candidate_rows: Vec<CandidateReport>,
    path_source: PathSource,
    /// The seal key's file, as [`CreationOptions::seal_key`] named it at creation.
    seal_key: Option<PathBuf>,
    networks: Mutex<HashMap<NetworkId, Arc<LoadedNetwork>>>,
    next_network: AtomicU64,
}

/// What [`Runtime::network_transfers`] reports of a loaded network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkTransfers {
    /// Each MemCopy layer the host runs itself, and the boundary it crosses.
    pub boundaries: Vec<(String, Boundary)>,
    /// Copies across a boundary since the network was loaded.
    pub copies: u64,
    /// Network inputs a device backend used in the caller's buffer, without a copy.
    pub imports: u64,
    /// Bytes of device memory the network's tensors take.
    pub device_bytes: u64,
}

impl Runtime {
    /// Creates a runtime: registers the built-ins (unless disabled), then discovers, validates
    /// and registers dynamic backends. Nothing a plugin does here aborts creation.
    pub fn new(options: CreationOptions) -> Self {
        let (source, list) = paths::select_source(
            options.dynamic_backends_path.as_deref(),
            std::env::var_os(paths::ENV_VAR),
            loader::process_is_privileged(),
            paths::BUILD_DEFAULT,
        );
        Self::with_path_list(options, source, &list)
    }

    /// Like [`Runtime::new`], with the search path list given (environment not consulted).
    pub fn with_path_list(options: CreationOptions, source: PathSource, list: &str) -> Self {
        let mut registry = BackendRegistry::new();
        if options.register_builtins {
            match &options.out_of_process {
                Some(oop) if oop.wants(backplane_ref::CPU_REF_ID) => {
                    load::register_remote_builtin(oop, backplane_ref::CPU_REF_ID, &mut registry);
                }
                _ => load::register_builtin_backends(&mut registry),
            }
        }
        let (mut paths, dirs) = paths::parse_path_list(list);
        if source == PathSource::Option && dirs.is_empty() && !list.is_empty() {
            log::warn!("dynamic_backends_path {list:?} is invalid: no dynamic backend is loaded");
        }
        let scan = discovery::scan(&dirs);
        for (dir, why) in scan.unreadable() {
            if let Some(p) = paths.iter_mut().find(|p| Path::new(&p.path) == dir) {
                p.status = PathStatus::Invalid;
                p.reason = Some(why.clone());
            }
        }
        let policy = LoadPolicy {
            trust: &options.trust,
            isolation: options.isolation.as_ref(),
            out_of_process: options.out_of_process.as_ref(),
        };
        let candidate_rows = load::discover(&scan, &policy, &mut registry);
        Self {
            registry,
            paths,
            scan,
            candidate_rows,
            path_source: source,
            seal_key: options.seal_key.path(),
            networks: Mutex::default(),
            next_network: AtomicU64::new(1),
        }
    }

    /// The file of the key that seals compiled networks' prepared workloads (see
    /// [`CreationOptions::seal_key`]); `None` when sealing is off.
    pub fn seal_key_path(&self) -> Option<&Path> {
        self.seal_key.as_deref()
    }

    /// The registered backends.
    pub fn registry(&self) -> &BackendRegistry {
        &self.registry
    }

    /// What discovery saw, with every registered backend as it is now (a backend that has
    /// faulted since says so). Built on each call: the rows of entries whose names do not
    /// match come from the scan's arena here, not at creation.
    pub fn report(&self) -> DiscoveryReport {
        let candidates = self
            .candidate_rows()
            .map(|row| match row {
                CandidateRow::Report(r) => r.clone(),
                CandidateRow::NameMismatch { dir, name } => {
                    CandidateReport::name_mismatch(discovery::join(dir, name))
                }
            })
            .collect();
        DiscoveryReport {
            api_version: ApiVersion::CURRENT.to_string(),
            paths: self.paths.clone(),
            candidates,
            backends: self.backend_rows(),
        }
    }

    /// Every directory entry's row, in discovery order: the candidates' rows as built at
    /// creation, the others by directory and name.
    fn candidate_rows(&self) -> impl Iterator<Item = CandidateRow<'_>> {
        let mut rows = self.candidate_rows.iter();
        self.scan
            .entries()
            .iter()
            .map(move |entry| match self.scan.candidate(entry) {
                Some(_) => CandidateRow::Report(rows.next().expect("one row per candidate")),
                None => CandidateRow::NameMismatch {
                    dir: self.scan.dir(entry),
                    name: self.scan.name(entry),
                },
            })
    }

    /// Every registered backend's row, as it is now.
    fn backend_rows(&self) -> Vec<BackendReport> {
        self.registry
            .backends()
            .iter()
            .map(|b| b.report())
            .collect()
    }

    /// Writes [`Runtime::report`] to `out` as pretty JSON, the bytes of
    /// `serde_json::to_writer_pretty(out, &self.report())`, without building the report: the
    /// rows of entries whose names do not match are written straight from the scan's names
    /// (see [`report::write_json`]). This is `backplane backends --json`.
    ///
    /// # Errors
    /// As `serde_json::to_writer_pretty`: a path that is not UTF-8, or `out` failing.
    pub fn write_report_json(&self, out: impl std::io::Write) -> serde_json::Result<()> {
        report::write_json(
            out,
            &ApiVersion::CURRENT.to_string(),
            &self.paths,
            self.candidate_rows(),
            &self.backend_rows(),
        )
    }

    /// The preferences used when none are given: every registered backend in registration
    /// order, CpuRef last (it supports every layer, so it catches what the others refuse).
    pub fn default_preferences(&self) -> Vec<String> {
        let ids = self.registry.ids();
        let cpu_ref = backplane_ref::CPU_REF_ID;
        let mut p: Vec<String> = ids
            .iter()
            .filter(|id| **id != cpu_ref)
            .map(|s| s.to_string())
            .collect();
        if ids.contains(&cpu_ref) {
            p.push(cpu_ref.into());
        }
        p
    }

    /// Where the search paths came from.
    pub fn path_source(&self) -> PathSource {
        self.path_source
    }

    /// Offers the application's allocator to backend `backend`; `Ok(true)` when it will use
    /// it (then every instance it makes for a network is offered it too).
    ///
    /// # Errors
    /// [`ExecuteError::UnknownBackend`], or the backend's error (method
    /// `use_custom_allocator`).
    pub fn use_custom_allocator(
        &self,
        backend: &str,
        allocator: Arc<dyn backplane_api::ffi::HostAllocator>,
    ) -> Result<bool, ExecuteError> {
        self.registry
            .get(backend)
            .ok_or_else(|| ExecuteError::UnknownBackend(backend.to_owned()))?
            .use_custom_allocator(allocator)
            .map_err(|error| ExecuteError::Backend {
                layer: "<runtime>".into(),
                error,
            })
    }

    /// Assigns every layer of `network` to the first of `preferences` that supports it (see
    /// [`optimizer::optimize`]).
    pub fn optimize(
        &self,
        network: &Network,
        preferences: &[&str],
        options: &OptimizerOptions,
    ) -> Result<OptimizedNetwork, OptimizeError> {
        optimizer::optimize(network, &self.registry, preferences, options)
    }

    /// Optimises `optimized`'s network again, with its preferences and options, now that
    /// some backend may have faulted: a faulted backend is skipped, so its layers go to the
    /// next preferred backend that supports them. This is how an application goes on after an
    /// out-of-process backend crashed (`crate::remote`).
    ///
    /// # Errors
    /// As [`Runtime::optimize`]; a network that was not made by `optimize` has no source and
    /// is an error naming that.
    pub fn reoptimize(
        &self,
        optimized: &OptimizedNetwork,
    ) -> Result<OptimizedNetwork, OptimizeError> {
        let source = optimized.source().ok_or(OptimizeError::NoSource)?;
        let preferences: Vec<&str> = source.preferences.iter().map(String::as_str).collect();
        self.optimize(&source.network, &preferences, &source.options)
    }

    fn networks(&self) -> std::sync::MutexGuard<'_, HashMap<NetworkId, Arc<LoadedNetwork>>> {
        self.networks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Loads an optimised network: backends, workloads, memory plan, context hooks. An
    /// in-process network takes its intermediate memory from a pool of its own.
    pub fn load_network(&self, optimized: &OptimizedNetwork) -> Result<NetworkId, ExecuteError> {
        self.load(optimized, None)
    }

    /// [`Runtime::load_network`], with the intermediate memory of an in-process network taken
    /// from `scratch` for each run and given back after it: networks that share a scratch
    /// (a session's plans) share their arenas.
    pub fn load_network_in(
        &self,
        optimized: &OptimizedNetwork,
        scratch: &ScratchMemory,
    ) -> Result<NetworkId, ExecuteError> {
        self.load(optimized, Some(scratch.0.clone()))
    }

    /// [`Runtime::load_network_in`] (or, without `scratch`, [`Runtime::load_network`]) within
    /// `budget`: the network's constants, planned tensors and outputs are charged to it
    /// before anything is allocated ([`ExecuteError::OverBudget`] naming the largest tensor
    /// when they do not fit). The others charge a budget of this machine's physical memory.
    ///
    /// # Errors
    /// As [`Runtime::load_network`]; [`ExecuteError::OverBudget`].
    pub fn load_network_within(
        &self,
        optimized: &OptimizedNetwork,
        scratch: Option<&ScratchMemory>,
        budget: &MemoryBudget,
    ) -> Result<NetworkId, ExecuteError> {
        self.load_with(optimized, scratch.map(|s| s.0.clone()), budget)
    }

    fn load(
        &self,
        optimized: &OptimizedNetwork,
        pool: Option<Arc<crate::memory::arena::Pool>>,
    ) -> Result<NetworkId, ExecuteError> {
        self.load_with(optimized, pool, &MemoryBudget::physical())
    }

    fn load_with(
        &self,
        optimized: &OptimizedNetwork,
        pool: Option<Arc<crate::memory::arena::Pool>>,
        budget: &MemoryBudget,
    ) -> Result<NetworkId, ExecuteError> {
        let id = self.next_network.fetch_add(1, Ordering::Relaxed);
        let loaded = LoadedNetwork::load(id, optimized, &self.registry, pool, budget)?;
        self.networks().insert(id, Arc::new(loaded));
        Ok(id)
    }

    /// Bytes network `id` holds of its own: its constants, or its whole arena when an
    /// out-of-process backend maps it (a shared scratch's arenas are the scratch's).
    pub fn network_own_bytes(&self, id: NetworkId) -> Option<usize> {
        self.loaded_network(id).map(|n| n.own_bytes())
    }

    /// Network `id`, if loaded.
    pub(crate) fn loaded_network(&self, id: NetworkId) -> Option<Arc<LoadedNetwork>> {
        self.networks().get(&id).cloned()
    }

    /// The planned peak of network `id`'s intermediate memory and the naive sum, in bytes.
    pub fn network_memory(&self, id: NetworkId) -> Option<(usize, usize)> {
        self.loaded_network(id).map(|n| n.memory())
    }

    /// Bytes each backend's memory manager of network `id` holds now.
    pub fn backend_memory(&self, id: NetworkId) -> Option<BackendMemory> {
        self.loaded_network(id).map(|n| n.backend_memory())
    }

    /// The memory boundaries network `id` crosses (each MemCopy layer the host runs itself
    /// and its boundary), the transfers run so far as `(copies, imports)`, and the bytes its
    /// tensors take in device memory. See [`LoadedNetwork::transfers`].
    pub fn network_transfers(&self, id: NetworkId) -> Option<NetworkTransfers> {
        self.loaded_network(id).map(|n| {
            let (copies, imports) = n.transfers();
            NetworkTransfers {
                boundaries: n.boundaries().to_vec(),
                copies,
                imports,
                device_bytes: n.device_bytes(),
            }
        })
    }

    /// Turns per-layer timing of network `id` on (from zero) or off; false when no such
    /// network is loaded. See [`LoadedNetwork::set_profiling`].
    pub fn set_profiling(&self, id: NetworkId, on: bool) -> bool {
        self.loaded_network(id)
            .map(|n| n.set_profiling(on))
            .is_some()
    }

    /// Per-layer times of network `id` since profiling was turned on (`None` when it is off
    /// or no such network is loaded). See [`LoadedNetwork::profile`].
    pub fn profile(&self, id: NetworkId) -> Option<Vec<LayerProfile>> {
        self.loaded_network(id).and_then(|n| n.profile())
    }

    /// Runs network `id` once. Inputs and outputs are checked first; on a mismatch nothing
    /// runs. Several threads may call this at once: runs of one network are serialised,
    /// different networks run concurrently.
    pub fn enqueue(
        &self,
        id: NetworkId,
        inputs: &[InputTensor<'_>],
        outputs: &mut [OutputTensor<'_>],
    ) -> Result<(), ExecuteError> {
        let network = self
            .loaded_network(id)
            .ok_or(ExecuteError::UnknownNetwork(id))?;
        network.enqueue(inputs, outputs)
    }

    /// Unloads network `id`: `before_unload_network` on every context (a refusal keeps it
    /// loaded and is returned), then memory is released, workloads destroyed, and
    /// `after_unload_network` called. Waits for runs in progress.
    ///
    /// # Errors
    /// [`ExecuteError::UnloadRefused`] when a context refused: the network stays loaded. Any
    /// other error (a panic in `before_unload_network`, an error from `release` or
    /// `after_unload_network`) is reported after the network is gone: the first one is
    /// returned.
    pub fn unload_network(&self, id: NetworkId) -> Result<(), ExecuteError> {
        // The plugin's hook runs without the runtime's lock, so a slow hook holds up no other
        // network.
        let network = self
            .loaded_network(id)
            .ok_or(ExecuteError::UnknownNetwork(id))?;
        let panicked = network.before_unload()?;
        drop(network);
        let network = self
            .networks()
            .remove(&id)
            .ok_or(ExecuteError::UnknownNetwork(id))?;
        let unloaded = finish_unload(network);
        panicked.map_or(unloaded, Err)
    }
}

/// Waits until no run holds `network`, then unloads it.
fn finish_unload(mut network: Arc<LoadedNetwork>) -> Result<(), ExecuteError> {
    loop {
        match Arc::try_unwrap(network) {
            Ok(n) => return n.unload(),
            Err(shared) => {
                network = shared;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let networks: Vec<_> = self.networks().drain().map(|(_, n)| n).collect();
        for n in networks {
            if let Err(e) = finish_unload(n) {
                log::warn!("unloading a network while dropping the runtime: {e}");
            }
        }
    }
}
