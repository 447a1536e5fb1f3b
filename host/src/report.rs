//! The discovery report (DESIGN §5): every path and every directory entry with its verdict.

use std::{borrow::Cow, collections::BTreeMap, fmt, path::PathBuf};

use backplane_api::{Capabilities, Value};
use serde::Serialize;

/// Why a directory entry was not registered. The `snake_case` names are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
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
        for c in &self.candidates {
            let status = match c.status {
                CandidateStatus::Registered => "registered",
                CandidateStatus::Rejected => "rejected",
                CandidateStatus::Ignored => "ignored",
            };
            let reason = c.reason.map_or(String::new(), |r| format!(" [{r}]"));
            let _ = writeln!(
                s,
                "  {status:<10} {}{reason}: {}",
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
