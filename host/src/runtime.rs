//! The runtime: options, discovery, and the registry and report it keeps.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
};

use backplane_api::ApiVersion;

use crate::{
    discovery::{self, name_mismatch, name_part},
    isolation::Isolation,
    loaded_network::{ExecuteError, InputTensor, LoadedNetwork, NetworkId, OutputTensor},
    loader,
    network::Network,
    optimizer::{self, OptimizeError, OptimizedNetwork, OptimizerOptions},
    paths::{self, PathSource},
    registry::BackendRegistry,
    remote::{OutOfProcess, RemoteBackend, Target},
    report::{
        CandidateReport, CandidateStatus, DiscoveryReport, PathReport, ReasonCode, Rejection,
    },
    trust::{DirectoryChecks, TrustPolicy},
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
    /// Load each candidate in a child process first (see [`crate::isolation`]); a file that
    /// crashes or hangs there is rejected as `crashed`. Default: off.
    pub isolation: Option<Isolation>,
    /// Backends that run in a child process each (see [`crate::remote`]): a crash or hang
    /// there fails the call and faults the backend, never the application. Default: none.
    pub out_of_process: Option<OutOfProcess>,
}

impl Default for CreationOptions {
    fn default() -> Self {
        Self {
            dynamic_backends_path: None,
            register_builtins: true,
            trust: TrustPolicy::default(),
            isolation: None,
            out_of_process: None,
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

/// Registers every backend compiled into the host (CpuRef) into `registry`.
pub fn register_builtin_backends(registry: &mut BackendRegistry) {
    use backplane_api::ffi::BackendHandle;
    let id = backplane_ref::CPU_REF_ID;
    if let Err(e) = registry.register_builtin(id, move |fault| {
        BackendHandle::from_builtin(backplane_ref::CpuRef::new(), id, fault)
    }) {
        log::error!("built-in backend {id} not registered: {e}");
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
    networks: Mutex<HashMap<NetworkId, Arc<LoadedNetwork>>>,
    next_network: AtomicU64,
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
                    register_remote_builtin(oop, backplane_ref::CPU_REF_ID, &mut registry);
                }
                _ => register_builtin_backends(&mut registry),
            }
        }
        let (mut paths, dirs) = paths::parse_path_list(list);
        if source == PathSource::Option && dirs.is_empty() && !list.is_empty() {
            log::warn!("dynamic_backends_path {list:?} is invalid: no dynamic backend is loaded");
        }
        let scan = discovery::scan(&dirs);
        for (dir, why) in scan.unreadable() {
            if let Some(p) = paths.iter_mut().find(|p| Path::new(&p.path) == dir) {
                p.status = crate::report::PathStatus::Invalid;
                p.reason = Some(why.clone());
            }
        }
        let candidate_rows = discover(&scan, &options, &mut registry);
        Self {
            registry,
            paths,
            scan,
            candidate_rows,
            path_source: source,
            networks: Mutex::default(),
            next_network: AtomicU64::new(1),
        }
    }

    /// The registered backends.
    pub fn registry(&self) -> &BackendRegistry {
        &self.registry
    }

    /// What discovery saw, with every registered backend as it is now (a backend that has
    /// faulted since says so). Built on each call: the rows of entries whose names do not
    /// match come from the scan's arena here, not at creation.
    pub fn report(&self) -> DiscoveryReport {
        let mut rows = self.candidate_rows.iter();
        let candidates = self
            .scan
            .entries()
            .iter()
            .map(|entry| match self.scan.candidate(entry) {
                Some(_) => rows.next().expect("one row per candidate").clone(),
                None => {
                    let mut row = CandidateReport::registered(self.scan.file(entry), None);
                    set_verdict(&mut row, CandidateStatus::Ignored, name_mismatch());
                    row
                }
            })
            .collect();
        DiscoveryReport {
            api_version: ApiVersion::CURRENT.to_string(),
            paths: self.paths.clone(),
            candidates,
            backends: self
                .registry
                .backends()
                .iter()
                .map(|b| b.report())
                .collect(),
        }
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
    /// out-of-process backend crashed ([`crate::remote`]).
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

    /// Loads an optimised network: backends, workloads, memory plan, context hooks.
    pub fn load_network(&self, optimized: &OptimizedNetwork) -> Result<NetworkId, ExecuteError> {
        let id = self.next_network.fetch_add(1, Ordering::Relaxed);
        let loaded = LoadedNetwork::load(id, optimized, &self.registry)?;
        self.networks().insert(id, Arc::new(loaded));
        Ok(id)
    }

    fn loaded_network(&self, id: NetworkId) -> Option<Arc<LoadedNetwork>> {
        self.networks().get(&id).cloned()
    }

    /// The planned peak of network `id`'s intermediate memory and the naive sum, in bytes.
    pub fn network_memory(&self, id: NetworkId) -> Option<(usize, usize)> {
        self.loaded_network(id).map(|n| n.memory())
    }

    /// Bytes each backend's memory manager of network `id` holds now.
    pub fn backend_memory(&self, id: NetworkId) -> Option<crate::loaded_network::BackendMemory> {
        self.loaded_network(id).map(|n| n.backend_memory())
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
    pub fn profile(&self, id: NetworkId) -> Option<Vec<crate::loaded_network::LayerProfile>> {
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

/// Registers built-in backend `id` served by a child process; a server that does not start
/// leaves it unregistered, with an error logged.
fn register_remote_builtin(oop: &OutOfProcess, id: &str, registry: &mut BackendRegistry) {
    let registered = RemoteBackend::start(oop, &Target::Builtin(id.to_owned()))
        .map_err(|(r, _, _)| r)
        .and_then(|remote| registry.register_remote(remote, crate::BackendSource::Builtin));
    if let Err(e) = registered {
        log::error!("built-in backend {id} not registered out of process: {e}");
    }
}

/// Whether the candidate `file` (as listed) runs out of process: its name's `<Name>` part
/// is one of the chosen ids.
fn runs_out_of_process(options: &CreationOptions, file: &Path) -> bool {
    let name = file
        .file_name()
        .map(std::os::unix::ffi::OsStrExt::as_bytes)
        .unwrap_or_default();
    match (&options.out_of_process, name_part(name)) {
        (Some(oop), Some(part)) => oop.wants(part),
        _ => false,
    }
}

/// Starts a server for a candidate that runs out of process and registers what it serves;
/// the id and version are noted in `report` as [`load_plugin`] does.
fn load_remote(
    oop: &OutOfProcess,
    canonical: &Path,
    registry: &mut BackendRegistry,
    report: &mut CandidateReport,
) -> Result<(), Rejection> {
    let remote =
        RemoteBackend::start(oop, &Target::File(canonical.to_owned())).map_err(|(r, id, v)| {
            report.backend_id = id;
            report.version = v.map(|v| v.to_string());
            r
        })?;
    report.backend_id = Some(remote.id().to_owned());
    report.version = Some(remote.version().to_string());
    let source = crate::BackendSource::Dynamic {
        file: report.file.clone(),
        canonical: canonical.to_owned(),
    };
    registry.register_remote(remote, source)
}

/// Loads every candidate of `scan` and registers the valid ones; returns the report row of
/// each of `scan.candidates()`. Every entry is logged with its verdict: the ignored names
/// first, then each candidate in discovery order.
fn discover(
    scan: &discovery::Scan,
    options: &CreationOptions,
    registry: &mut BackendRegistry,
) -> Vec<CandidateReport> {
    // The checks that need no loading (each directory's permissions read once), then (with
    // isolation) the probes, which are independent child processes and run side by side;
    // then the loads, in order.
    let files: Vec<PathBuf> = scan
        .candidates()
        .iter()
        .map(|c| scan.file(c.entry()))
        .collect();
    let mut directories = DirectoryChecks::default();
    let checked: Vec<Result<PathBuf, Rejection>> = scan
        .candidates()
        .iter()
        .zip(&files)
        .map(
            |(candidate, file)| match (&candidate.verdict, &candidate.canonical) {
                (Err(rejection), _) => Err(rejection.clone()),
                (Ok(mode), Some(canonical)) => {
                    let entry_dir = file.parent().unwrap_or(Path::new("/"));
                    options
                        .trust
                        .check_scanned(entry_dir, canonical, *mode, &mut directories)
                        .map(|()| canonical.clone())
                }
                (Ok(_), None) => unreachable!("a candidate always has a canonical path"),
            },
        )
        .collect();
    // A file that runs out of process is not probed: its server is its isolation.
    let remote: Vec<bool> = files
        .iter()
        .map(|f| runs_out_of_process(options, f))
        .collect();
    let checked = match &options.isolation {
        Some(isolation) => probe_all(isolation, checked, &remote),
        None => checked,
    };
    if log::log_enabled!(log::Level::Info) {
        // Not errors: files that are not named as plugins. Only a reader of the log pays for
        // their sort.
        for entry in scan
            .entries()
            .iter()
            .filter(|e| scan.candidate(e).is_none())
        {
            log::info!(
                "{}: ignored ({})",
                scan.file(entry).display(),
                name_mismatch()
            );
        }
    }
    let mut rows = Vec::with_capacity(files.len());
    for (((candidate, file), checked), remote) in
        scan.candidates().iter().zip(files).zip(checked).zip(remote)
    {
        let mut report = CandidateReport::registered(file, candidate.canonical.clone());
        let outcome = checked.and_then(|canonical| match &options.out_of_process {
            Some(oop) if remote => load_remote(oop, &canonical, registry, &mut report),
            _ => load_plugin(&canonical, registry, &mut report),
        });
        match outcome {
            Ok(()) => log::info!(
                "{}: registered backend {}",
                report.file.display(),
                report.backend_id.as_deref().unwrap_or_default()
            ),
            // Not an error: another name of a file already a candidate (the version links
            // `install` makes).
            Err(r) if r.reason == ReasonCode::DuplicateFile => {
                log::info!("{}: ignored ({r})", report.file.display());
                set_verdict(&mut report, CandidateStatus::Ignored, r);
            }
            Err(r) => {
                log::warn!("{}: rejected ({r})", report.file.display());
                set_verdict(&mut report, CandidateStatus::Rejected, r);
            }
        }
        rows.push(report);
    }
    rows
}

/// Marks a report row as not registered, and why.
fn set_verdict(report: &mut CandidateReport, status: CandidateStatus, why: Rejection) {
    report.status = status;
    report.reason = Some(why.reason);
    report.message = why.message;
}

/// Probes every file that passed the checks so far, on as many threads as the machine has
/// cores; a file whose probe fails keeps the probe's rejection.
fn probe_all(
    isolation: &Isolation,
    checked: Vec<Result<PathBuf, Rejection>>,
    skip: &[bool],
) -> Vec<Result<PathBuf, Rejection>> {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Result<PathBuf, Rejection>>>> =
        checked.into_iter().map(|c| Mutex::new(Some(c))).collect();
    std::thread::scope(|s| {
        for _ in 0..threads.min(slots.len()) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(slot) = slots.get(i) else { break };
                    let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(Ok(file)) = slot.as_ref()
                        && !skip[i]
                        && let Err(r) = isolation.check(file)
                    {
                        *slot = Some(Err(r));
                    }
                }
            });
        }
    });
    slots
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .expect("every slot is filled")
        })
        .collect()
}

/// The in-process load of one plugin file: the loader's checks (symbols, id, version), then
/// registration (the factory, the capabilities, the duplicate-id check), with the id and
/// version noted in `report`. Discovery runs it after the trust and isolation checks; the
/// isolation probe runs exactly this in its child.
pub(crate) fn load_plugin(
    canonical: &Path,
    registry: &mut BackendRegistry,
    report: &mut CandidateReport,
) -> Result<(), Rejection> {
    let opened = loader::probe(canonical, ApiVersion::CURRENT).map_err(|f| {
        report.backend_id = f.id.clone();
        report.version = f.version.map(|v| v.to_string());
        f.rejection
    })?;
    let id = opened.factory.id().to_owned();
    report.backend_id = Some(id.clone());
    report.version = Some(opened.version.to_string());
    let file = report.file.clone();
    let name = file
        .file_name()
        .map(std::os::unix::ffi::OsStrExt::as_bytes)
        .unwrap_or_default();
    if let Some(part) = name_part(name).filter(|p| *p != id) {
        log::info!(
            "{}: backend id {id} differs from the file name's <Name> part {part}",
            file.display()
        );
    }
    registry.register_dynamic(opened.factory, opened.version, &file, canonical)
}
