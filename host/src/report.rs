//! The discovery report (DESIGN §5): every path and every directory entry with its verdict.
//!
//! Imports: nothing.

use std::{
    borrow::Cow,
    collections::BTreeMap,
    fmt,
    path::{Path, PathBuf},
};

use backplane_api::{Capabilities, Value};
use serde::Serialize;

/// Why a directory entry was not registered. The `snake_case` names are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    /// The name does not match `<Vendor>_<Name>_backend.so[.N...]`.
    NameMismatch,
    /// A symlink that resolves to nothing (or loops).
    DanglingLink,
    /// Not a regular file after resolving links.
    NotAFile,
    /// The same file (by canonical path) was already a candidate.
    DuplicateFile,
    /// The file or its directory is writable by users other than the owner and root.
    InsecurePermissions,
    /// A SHA-256 pin list is set and the file's digest is not on it.
    Untrusted,
    /// The dynamic loader could not open it (not a shared object, missing dependency, …).
    OpenFailed,
    /// A required symbol is missing.
    MissingSymbol,
    /// `GetBackendId` returned an invalid id.
    InvalidId,
    /// Built against an incompatible Backend API version.
    IncompatibleVersion,
    /// A backend with the same id is already registered.
    DuplicateId,
    /// `BackendFactory` returned null or an error.
    FactoryFailed,
    /// Plugin code panicked (caught inside the plugin).
    Panicked,
    /// The plugin crashed or hung in an isolated probe.
    Crashed,
}

impl ReasonCode {
    /// The stable code, as in the JSON report.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::NameMismatch => "name_mismatch",
            ReasonCode::DanglingLink => "dangling_link",
            ReasonCode::NotAFile => "not_a_file",
            ReasonCode::DuplicateFile => "duplicate_file",
            ReasonCode::InsecurePermissions => "insecure_permissions",
            ReasonCode::Untrusted => "untrusted",
            ReasonCode::OpenFailed => "open_failed",
            ReasonCode::MissingSymbol => "missing_symbol",
            ReasonCode::InvalidId => "invalid_id",
            ReasonCode::IncompatibleVersion => "incompatible_version",
            ReasonCode::DuplicateId => "duplicate_id",
            ReasonCode::FactoryFailed => "factory_failed",
            ReasonCode::Panicked => "panicked",
            ReasonCode::Crashed => "crashed",
        }
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reason code with its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The stable code.
    pub reason: ReasonCode,
    /// What exactly went wrong, for a person.
    pub message: Cow<'static, str>,
}

impl Rejection {
    /// Builds a rejection.
    pub fn new(reason: ReasonCode, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason, self.message)
    }
}

impl std::error::Error for Rejection {}

/// Whether a search path is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PathStatus {
    /// Scanned.
    Ok,
    /// Skipped (see the reason).
    Invalid,
}

/// One search path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathReport {
    /// The path as given.
    pub path: String,
    /// Scanned or skipped.
    pub status: PathStatus,
    /// Why it was skipped.
    pub reason: Option<String>,
}

/// The verdict on a directory entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CandidateStatus {
    /// Loaded and registered.
    Registered,
    /// A plugin candidate that was refused.
    Rejected,
    /// Not a plugin candidate (its name does not match).
    Ignored,
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CandidateReport {
    /// The entry's path (as listed, not resolved).
    pub file: PathBuf,
    /// The resolved path, when it resolves.
    pub canonical: Option<PathBuf>,
    /// The verdict.
    pub status: CandidateStatus,
    /// The reason code when not registered.
    pub reason: Option<ReasonCode>,
    /// What happened, for a person.
    pub message: Cow<'static, str>,
    /// The backend id, once read.
    pub backend_id: Option<String>,
    /// The Backend API version (`M.m`), once read.
    pub version: Option<String>,
}

impl CandidateReport {
    /// The report of a candidate not yet judged: registered until a check rejects it.
    pub(crate) fn registered(file: PathBuf, canonical: Option<PathBuf>) -> Self {
        Self {
            file,
            canonical,
            status: CandidateStatus::Registered,
            reason: None,
            message: "registered".into(),
            backend_id: None,
            version: None,
        }
    }
}

/// Where a registered backend came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// Compiled into the host.
    Builtin,
    /// Loaded from a shared object.
    Dynamic,
}

/// One registered backend.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackendReport {
    /// The backend id.
    pub id: String,
    /// Built in or dynamic.
    pub source: SourceKind,
    /// The file it was loaded from (as listed), for a dynamic backend.
    pub file: Option<PathBuf>,
    /// The Backend API version it was built against.
    pub version: String,
    /// Its capabilities.
    pub capabilities: BTreeMap<String, serde_json::Value>,
    /// `true` once the backend has panicked: this runtime does not call it again.
    pub faulted: bool,
    /// Why it faulted (the method and the panic message), when it has.
    pub fault: Option<String>,
    /// The process id of its server, when it runs out of process (`--out-of-process`).
    pub out_of_process_pid: Option<u32>,
}

/// Converts capabilities to JSON values (the first entry of a name wins).
pub fn capabilities_json(caps: &Capabilities) -> BTreeMap<String, serde_json::Value> {
    let mut map = BTreeMap::new();
    for e in caps.entries.iter() {
        let v = match &e.value {
            Value::Bool(b) => serde_json::Value::from(*b),
            Value::Int(i) => serde_json::Value::from(*i),
            Value::Float(x) => serde_json::Value::from(*x),
            Value::Str(s) => serde_json::Value::from(s.as_str()),
        };
        map.entry(e.name.to_string()).or_insert(v);
    }
    map
}

/// Everything discovery saw (DESIGN §5).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiscoveryReport {
    /// The host's Backend API version.
    pub api_version: String,
    /// The search paths, in order.
    pub paths: Vec<PathReport>,
    /// Every directory entry, in discovery order.
    pub candidates: Vec<CandidateReport>,
    /// Every registered backend, in registration order.
    pub backends: Vec<BackendReport>,
}

impl DiscoveryReport {
    /// The report as one JSON object.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the report serialises")
    }

    /// The report as a readable table.
    pub fn to_table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "Backend API {}", self.api_version);
        let _ = writeln!(s, "\nSearch paths:");
        if self.paths.is_empty() {
            let _ = writeln!(s, "  (none: dynamic backends off)");
        }
        for p in &self.paths {
            match &p.reason {
                None => {
                    let _ = writeln!(s, "  ok       {}", p.path);
                }
                Some(r) => {
                    let _ = writeln!(s, "  invalid  {} ({r})", p.path);
                }
            }
        }
        let _ = writeln!(s, "\nCandidates:");
        if self.candidates.is_empty() {
            let _ = writeln!(s, "  (none)");
        }
        // Another name of a file already a candidate goes on that file's row.
        let also = |target: &CandidateReport| -> Vec<String> {
            self.candidates
                .iter()
                .filter(|d| {
                    d.reason == Some(ReasonCode::DuplicateFile)
                        && d.canonical.is_some()
                        && d.canonical == target.canonical
                })
                .map(|d| other_name(&target.file, &d.file))
                .collect()
        };
        for c in &self.candidates {
            if c.reason == Some(ReasonCode::DuplicateFile)
                && self.candidates.iter().any(|t| {
                    t.reason != Some(ReasonCode::DuplicateFile) && t.canonical == c.canonical
                })
            {
                continue;
            }
            let also = also(c);
            let also = if also.is_empty() || c.reason == Some(ReasonCode::DuplicateFile) {
                String::new()
            } else {
                format!(" (also: {})", also.join(", "))
            };
            let status = match c.status {
                CandidateStatus::Registered => "registered",
                CandidateStatus::Rejected => "rejected",
                CandidateStatus::Ignored => "ignored",
            };
            let reason = c.reason.map_or(String::new(), |r| format!(" [{r}]"));
            let _ = writeln!(
                s,
                "  {status:<10} {}{also}{reason}: {}",
                c.file.display(),
                c.message
            );
        }
        let _ = writeln!(s, "\nBackends:");
        let _ = writeln!(
            s,
            "  {:<16} {:<8} {:<7} FILE / CAPABILITIES",
            "ID", "SOURCE", "API"
        );
        for b in &self.backends {
            let source = match b.source {
                SourceKind::Builtin => "builtin",
                SourceKind::Dynamic => "dynamic",
            };
            let file = b
                .file
                .as_ref()
                .map_or("-".to_owned(), |f| f.display().to_string());
            let caps: Vec<String> = b
                .capabilities
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let _ = writeln!(s, "  {:<16} {:<8} {:<7} {file}", b.id, source, b.version);
            if let Some(why) = &b.fault {
                let _ = writeln!(s, "  {:<16} {:<8} {:<7} FAULTED: {why}", "", "", "");
            }
            if !caps.is_empty() {
                let _ = writeln!(s, "  {:<16} {:<8} {:<7} {}", "", "", "", caps.join(", "));
            }
        }
        s
    }
}

/// How the table names `other`, another name of `target`: its `.so…` suffix when both names
/// share the stem before `.so` in one directory (`.so.1`), else its whole path.
fn other_name(target: &Path, other: &Path) -> String {
    let split = |p: &Path| {
        let name = p.file_name()?.to_str()?;
        let at = name.find(".so")?;
        Some((
            p.parent()?.to_path_buf(),
            name[..at].to_owned(),
            name[at..].to_owned(),
        ))
    };
    match (split(target), split(other)) {
        (Some((dir_t, stem_t, _)), Some((dir_o, stem_o, tail)))
            if dir_t == dir_o && stem_t == stem_o =>
        {
            tail
        }
        _ => other.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(file: &str, real: &str, reason: Option<ReasonCode>) -> CandidateReport {
        let mut c = CandidateReport::registered(file.into(), Some(real.into()));
        if let Some(r) = reason {
            c.status = CandidateStatus::Ignored;
            c.reason = Some(r);
            c.message = "same file as the first".into();
        }
        c
    }

    /// The links `install` makes share their target's row; a link in another directory is
    /// named whole; the JSON keeps one row per entry.
    #[test]
    fn other_names_of_a_file_share_its_row() {
        let dup = Some(ReasonCode::DuplicateFile);
        let report = DiscoveryReport {
            api_version: "1.1".into(),
            paths: vec![],
            candidates: vec![
                candidate("/p/Acme_X_backend.so", "/p/Acme_X_backend.so.0.1", None),
                candidate("/p/Acme_X_backend.so.0", "/p/Acme_X_backend.so.0.1", dup),
                candidate("/p/Acme_X_backend.so.0.1", "/p/Acme_X_backend.so.0.1", dup),
                candidate("/q/Other_X_backend.so", "/p/Acme_X_backend.so.0.1", dup),
            ],
            backends: vec![],
        };
        let table = report.to_table();
        let rows: Vec<&str> = table
            .lines()
            .skip_while(|l| *l != "Candidates:")
            .skip(1)
            .take_while(|l| !l.is_empty())
            .collect();
        assert_eq!(
            rows,
            vec![
                "  registered /p/Acme_X_backend.so (also: .so.0, .so.0.1, \
                 /q/Other_X_backend.so): registered"
            ]
        );
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        let statuses: Vec<&str> = json["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["status"].as_str().unwrap())
            .collect();
        assert_eq!(
            statuses,
            vec!["registered", "ignored", "ignored", "ignored"]
        );
    }
}
