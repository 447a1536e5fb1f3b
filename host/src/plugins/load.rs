//! Loading plugins and registering backends: the built-ins, each discovered candidate after
//! its trust checks (in process, after an optional isolation probe, or out of process), and
//! the one in-process load ([`load_plugin`]) that discovery and the isolation probe share.

use std::{
    path::{Path, PathBuf},
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use backplane_api::ApiVersion;

use super::{
    discovery::{self, name_mismatch, name_part},
    isolation::Isolation,
    registry::{BackendRegistry, BackendSource},
    trust::{DirectoryChecks, TrustPolicy},
};
use crate::{
    remote::{OutOfProcess, RemoteBackend, Target},
    report::{CandidateReport, CandidateStatus, ReasonCode, Rejection},
    sys::loader,
};

/// How discovery treats each candidate: the parts of the runtime's creation options it needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoadPolicy<'a> {
    /// The trust checks every candidate passes first.
    pub trust: &'a TrustPolicy,
    /// Probe each candidate in a child process before loading it in the host.
    pub isolation: Option<&'a Isolation>,
    /// The backends that run in a child process.
    pub out_of_process: Option<&'a OutOfProcess>,
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

/// Registers built-in backend `id` served by a child process; a server that does not start
/// leaves it unregistered, with an error logged.
pub(crate) fn register_remote_builtin(
    oop: &OutOfProcess,
    id: &str,
    registry: &mut BackendRegistry,
) {
    let registered = RemoteBackend::start(oop, &Target::Builtin(id.to_owned()))
        .map_err(|(r, _, _)| r)
        .and_then(|remote| registry.register_remote(remote, BackendSource::Builtin));
    if let Err(e) = registered {
        log::error!("built-in backend {id} not registered out of process: {e}");
    }
}

/// Whether the candidate `file` (as listed) runs out of process: its name's `<Name>` part
/// is one of the chosen ids.
fn runs_out_of_process(policy: &LoadPolicy<'_>, file: &Path) -> bool {
    let name = file
        .file_name()
        .map(std::os::unix::ffi::OsStrExt::as_bytes)
        .unwrap_or_default();
    match (policy.out_of_process, name_part(name)) {
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
    let source = BackendSource::Dynamic {
        file: report.file.clone(),
        canonical: canonical.to_owned(),
    };
    registry.register_remote(remote, source)
}

/// Loads every candidate of `scan` and registers the valid ones; returns the report row of
/// each of `scan.candidates()`. Every entry is logged with its verdict: the ignored names
/// first, then each candidate in discovery order.
pub(crate) fn discover(
    scan: &discovery::Scan,
    policy: &LoadPolicy<'_>,
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
                    policy
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
        .map(|f| runs_out_of_process(policy, f))
        .collect();
    let checked = match policy.isolation {
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
        let outcome = checked.and_then(|canonical| match policy.out_of_process {
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
pub(crate) fn set_verdict(report: &mut CandidateReport, status: CandidateStatus, why: Rejection) {
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
