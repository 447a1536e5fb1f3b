//! The discovery report (DESIGN §5): every path and every directory entry with its verdict.
//!
//! Imports: nothing.

use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap, HashSet},
    fmt, io,
    os::unix::ffi::OsStrExt,
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

/// The message of every `name_mismatch` row.
pub const NAME_MISMATCH_MESSAGE: &str = "name does not match <Vendor>_<Name>_backend.so[.N...]";

impl CandidateReport {
    /// The row of an entry whose name does not match the rule: `ignored`, `name_mismatch`.
    pub(crate) fn name_mismatch(file: PathBuf) -> Self {
        Self {
            file,
            canonical: None,
            status: CandidateStatus::Ignored,
            reason: Some(ReasonCode::NameMismatch),
            message: Cow::Borrowed(NAME_MISMATCH_MESSAGE),
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

    /// Streams the report to `out` as [`write_json`] does: the bytes of
    /// `serde_json::to_writer_pretty(out, self)`.
    ///
    /// # Errors
    /// As `serde_json::to_writer_pretty`: a path that is not UTF-8, or `out` failing; what
    /// was written before the error is the start of its bytes (see [`write_json`]).
    pub fn write_json(&self, out: impl io::Write) -> serde_json::Result<()> {
        // Destructured so that a new field cannot be left out of the streamed JSON unnoticed.
        let DiscoveryReport {
            api_version,
            paths,
            candidates,
            backends,
        } = self;
        write_json(
            out,
            api_version,
            paths,
            candidates.iter().map(CandidateRow::Report),
            backends,
        )
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
        // Another name of a file already a candidate goes on that file's row: the other
        // names by canonical path, and the canonical paths of rows that are not such a
        // name, gathered once (not searched for each row: 10,000 rows).
        let is_dup = |c: &CandidateReport| c.reason == Some(ReasonCode::DuplicateFile);
        let mut dups: HashMap<&Path, Vec<&CandidateReport>> = HashMap::new();
        let mut targets: HashSet<Option<&Path>> = HashSet::new();
        for c in &self.candidates {
            match (is_dup(c), c.canonical.as_deref()) {
                (true, Some(canonical)) => dups.entry(canonical).or_default().push(c),
                (true, None) => {}
                (false, canonical) => {
                    targets.insert(canonical);
                }
            }
        }
        for c in &self.candidates {
            if is_dup(c) && targets.contains(&c.canonical.as_deref()) {
                continue;
            }
            let also: Vec<String> = c
                .canonical
                .as_deref()
                .and_then(|canonical| dups.get(canonical))
                .map_or(Vec::new(), |names| {
                    names.iter().map(|d| other_name(&c.file, &d.file)).collect()
                });
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

/// One row of the `candidates` list as [`write_json`] takes it.
#[derive(Debug, Clone, Copy)]
pub enum CandidateRow<'a> {
    /// A row built in full.
    Report(&'a CandidateReport),
    /// The row of an entry whose name does not match the rule (`ignored`, `name_mismatch`),
    /// by the directory it was listed in and its own name (no `/` in it): its `file` is
    /// `dir.join(name)`. The row is written straight from these, never built.
    NameMismatch {
        /// The directory as listed.
        dir: &'a Path,
        /// The entry's own name.
        name: &'a [u8],
    },
}

/// Bytes gathered before each write to the output.
const JSON_CHUNK: usize = 64 * 1024;

/// Streams a discovery report to `out` as pretty JSON: the same bytes as
/// `serde_json::to_writer_pretty` of the [`DiscoveryReport`] with these fields (the
/// `name_mismatch` rows as [`CandidateReport`]s with `file` set, `canonical` null, status
/// `ignored`, reason `name_mismatch` and [`NAME_MISMATCH_MESSAGE`]), at a fraction of the cost.
///
/// A crowded directory's report is megabytes, nearly all of it `name_mismatch` rows
/// (docs/PERFORMANCE.md): those are written from a template (made by serde_json once per
/// call) with only the path filled in. The rest is written field by field in serde_json's
/// pretty layout; a string that needs an escape (a control character, `"` or `\`) is
/// escaped by serde_json, and a capability value is written by serde_json. Output goes out
/// in chunks of 64 KiB. `host/tests/report_json.rs` holds the bytes to serde_json's.
///
/// # Errors
/// As `serde_json::to_writer_pretty`, at the same point: a path that is not UTF-8
/// ("path contains invalid UTF-8 characters"), or `out` failing. What was written before
/// the error is the start of serde_json's output, in whole blocks: the block in progress is
/// dropped, as a buffered writer's would be (a small report writes nothing).
pub fn write_json<'a, W: io::Write>(
    out: W,
    api_version: &str,
    paths: &[PathReport],
    candidates: impl IntoIterator<Item = CandidateRow<'a>>,
    backends: &[BackendReport],
) -> serde_json::Result<()> {
    let mut json = JsonOut {
        out,
        buf: Vec::with_capacity(JSON_CHUNK + 4096),
    };
    let written = write_report(
        &mut json,
        api_version,
        paths,
        candidates.into_iter(),
        backends,
    );
    // After an error the block in progress is dropped: the report cannot be whole, and a
    // small one is then not written at all.
    written?;
    json.out.write_all(&json.buf).map_err(serde_json::Error::io)
}

/// The report's fields in `DiscoveryReport`'s order.
fn write_report<'a, W: io::Write>(
    json: &mut JsonOut<W>,
    api_version: &str,
    paths: &[PathReport],
    candidates: impl Iterator<Item = CandidateRow<'a>>,
    backends: &[BackendReport],
) -> serde_json::Result<()> {
    let buf = &mut json.buf;
    buf.extend_from_slice(b"{\n  \"api_version\": ");
    push_str(buf, api_version);
    buf.extend_from_slice(b",\n  \"paths\": [");
    for (i, path) in paths.iter().enumerate() {
        let PathReport {
            path,
            status,
            reason,
        } = path;
        buf.extend_from_slice(if i == 0 { b"\n" } else { b",\n" });
        buf.extend_from_slice(b"    {\n      \"path\": ");
        push_str(buf, path);
        buf.extend_from_slice(b",\n      \"status\": ");
        push_str(
            buf,
            match status {
                PathStatus::Ok => "ok",
                PathStatus::Invalid => "invalid",
            },
        );
        buf.extend_from_slice(b",\n      \"reason\": ");
        push_opt_str(buf, reason.as_deref());
        buf.extend_from_slice(b"\n    }");
    }
    buf.extend_from_slice(if paths.is_empty() { b"]" } else { b"\n  ]" });
    buf.extend_from_slice(b",\n  \"candidates\": [");
    let mut ignored: Option<IgnoredRow> = None;
    let mut first = true;
    for row in candidates {
        let buf = &mut json.buf;
        buf.extend_from_slice(if first { b"\n    " } else { b",\n    " });
        first = false;
        match row {
            CandidateRow::Report(report) => push_candidate(buf, report)?,
            CandidateRow::NameMismatch { dir, name } => {
                let template = match &mut ignored {
                    Some(t) => t,
                    None => ignored.insert(IgnoredRow::new()?),
                };
                template.write(buf, dir, name)?;
            }
        }
        json.write_if_full()?;
    }
    let buf = &mut json.buf;
    buf.extend_from_slice(if first { b"]" } else { b"\n  ]" });
    buf.extend_from_slice(b",\n  \"backends\": [");
    for (i, backend) in backends.iter().enumerate() {
        buf.extend_from_slice(if i == 0 { b"\n    " } else { b",\n    " });
        push_backend(buf, backend)?;
    }
    buf.extend_from_slice(if backends.is_empty() { b"]" } else { b"\n  ]" });
    buf.extend_from_slice(b"\n}");
    Ok(())
}

/// A candidate row at its depth in the report (the object at 4 spaces).
fn push_candidate(buf: &mut Vec<u8>, row: &CandidateReport) -> serde_json::Result<()> {
    let CandidateReport {
        file,
        canonical,
        status,
        reason,
        message,
        backend_id,
        version,
    } = row;
    buf.extend_from_slice(b"{\n      \"file\": ");
    push_path(buf, file)?;
    buf.extend_from_slice(b",\n      \"canonical\": ");
    match canonical {
        Some(path) => push_path(buf, path)?,
        None => buf.extend_from_slice(b"null"),
    }
    buf.extend_from_slice(b",\n      \"status\": ");
    push_str(
        buf,
        match status {
            CandidateStatus::Registered => "registered",
            CandidateStatus::Rejected => "rejected",
            CandidateStatus::Ignored => "ignored",
        },
    );
    buf.extend_from_slice(b",\n      \"reason\": ");
    push_opt_str(buf, reason.map(ReasonCode::as_str));
    buf.extend_from_slice(b",\n      \"message\": ");
    push_str(buf, message);
    buf.extend_from_slice(b",\n      \"backend_id\": ");
    push_opt_str(buf, backend_id.as_deref());
    buf.extend_from_slice(b",\n      \"version\": ");
    push_opt_str(buf, version.as_deref());
    buf.extend_from_slice(b"\n    }");
    Ok(())
}

/// A backend row at its depth in the report (the object at 4 spaces).
fn push_backend(buf: &mut Vec<u8>, row: &BackendReport) -> serde_json::Result<()> {
    let BackendReport {
        id,
        source,
        file,
        version,
        capabilities,
        faulted,
        fault,
        out_of_process_pid,
    } = row;
    buf.extend_from_slice(b"{\n      \"id\": ");
    push_str(buf, id);
    buf.extend_from_slice(b",\n      \"source\": ");
    push_str(
        buf,
        match source {
            SourceKind::Builtin => "builtin",
            SourceKind::Dynamic => "dynamic",
        },
    );
    buf.extend_from_slice(b",\n      \"file\": ");
    match file {
        Some(path) => push_path(buf, path)?,
        None => buf.extend_from_slice(b"null"),
    }
    buf.extend_from_slice(b",\n      \"version\": ");
    push_str(buf, version);
    buf.extend_from_slice(b",\n      \"capabilities\": {");
    for (i, (name, value)) in capabilities.iter().enumerate() {
        buf.extend_from_slice(if i == 0 {
            b"\n        "
        } else {
            b",\n        "
        });
        push_str(buf, name);
        buf.extend_from_slice(b": ");
        match value {
            // Not made by `capabilities_json`, but a report can hold them.
            serde_json::Value::Array(_) | serde_json::Value::Object(_) => {
                let mut pretty = Vec::new();
                serde_json::to_writer_pretty(&mut pretty, value)?;
                push_indented(buf, &pretty, 8);
            }
            scalar => serde_json::to_writer(&mut *buf, scalar)?,
        }
    }
    buf.extend_from_slice(if capabilities.is_empty() {
        b"}"
    } else {
        b"\n      }"
    });
    buf.extend_from_slice(b",\n      \"faulted\": ");
    buf.extend_from_slice(if *faulted { b"true" } else { b"false" });
    buf.extend_from_slice(b",\n      \"fault\": ");
    push_opt_str(buf, fault.as_deref());
    buf.extend_from_slice(b",\n      \"out_of_process_pid\": ");
    match out_of_process_pid {
        Some(pid) => serde_json::to_writer(&mut *buf, pid)?,
        None => buf.extend_from_slice(b"null"),
    }
    buf.extend_from_slice(b"\n    }");
    Ok(())
}

/// `s` as a JSON string: copied when it needs no escape, else escaped by serde_json.
fn push_str(buf: &mut Vec<u8>, s: &str) {
    if needs_escape(s.as_bytes()) {
        serde_json::to_writer(&mut *buf, s).expect("a string serialises into a Vec");
    } else {
        buf.push(b'"');
        buf.extend_from_slice(s.as_bytes());
        buf.push(b'"');
    }
}

/// `s` as a JSON string, or `null`.
fn push_opt_str(buf: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => push_str(buf, s),
        None => buf.extend_from_slice(b"null"),
    }
}

/// A path as a JSON string; as serde's `Path`, an error when it is not UTF-8.
fn push_path(buf: &mut Vec<u8>, path: &Path) -> serde_json::Result<()> {
    match path.to_str() {
        Some(s) => {
            push_str(buf, s);
            Ok(())
        }
        None => Err(not_utf8()),
    }
}

/// serde's error for a path that is not UTF-8.
fn not_utf8() -> serde_json::Error {
    <serde_json::Error as serde::ser::Error>::custom("path contains invalid UTF-8 characters")
}

/// The output and the bytes not yet written to it.
struct JsonOut<W> {
    out: W,
    buf: Vec<u8>,
}

impl<W: io::Write> JsonOut<W> {
    /// Writes the gathered bytes once there are enough of them.
    fn write_if_full(&mut self) -> serde_json::Result<()> {
        if self.buf.len() >= JSON_CHUNK {
            self.out
                .write_all(&self.buf)
                .map_err(serde_json::Error::io)?;
            self.buf.clear();
        }
        Ok(())
    }
}

/// Appends `json` (serde_json's pretty output) to `buf` with `indent` more spaces after each
/// line break. JSON strings hold no raw line break (serde_json writes `\n`), so every one is
/// the pretty printer's.
fn push_indented(buf: &mut Vec<u8>, json: &[u8], indent: usize) {
    let mut lines = json.split(|&b| b == b'\n');
    if let Some(line) = lines.next() {
        buf.extend_from_slice(line);
    }
    for line in lines {
        buf.push(b'\n');
        buf.resize(buf.len() + indent, b' ');
        buf.extend_from_slice(line);
    }
}

/// A `name_mismatch` row as serde_json writes it in the `candidates` list, cut around its
/// `file` value; and what the rows of the last directory share.
struct IgnoredRow {
    /// Up to `"file": `.
    head: Vec<u8>,
    /// `"` and, from just after the `file` value, the rest of the row.
    closing: Vec<u8>,
    /// The last directory (its address and length: the rows of one directory come one
    /// after another, each with the same `&Path`) and its bytes.
    dir_at: Option<(usize, usize)>,
    dir: Vec<u8>,
    /// For that directory: its path prefix `dir/` (no `/` added when it ends in one) when it
    /// is UTF-8, and when the prefix needs no escape, `head`, `"` and the prefix together.
    prefix: Option<Vec<u8>>,
    opening: Option<Vec<u8>>,
}

impl IgnoredRow {
    fn new() -> serde_json::Result<Self> {
        let pretty = serde_json::to_vec_pretty(&CandidateReport::name_mismatch("".into()))?;
        let mut row = Vec::new();
        push_indented(&mut row, &pretty, 4);
        let key = b"\"file\": ";
        let at = row
            .windows(key.len() + 2)
            .position(|w| w[..key.len()] == *key && w[key.len()..] == *b"\"\"")
            .expect("the template row has an empty file")
            + key.len();
        Ok(Self {
            closing: row[at + 1..].to_vec(),
            head: {
                row.truncate(at);
                row
            },
            dir_at: None,
            dir: Vec::new(),
            prefix: None,
            opening: None,
        })
    }

    /// Appends the row of `dir.join(name)`.
    fn write(&mut self, buf: &mut Vec<u8>, dir: &Path, name: &[u8]) -> serde_json::Result<()> {
        let dir = dir.as_os_str().as_bytes();
        let at = (dir.as_ptr() as usize, dir.len());
        if self.dir_at != Some(at) && (self.dir_at.is_none() || self.dir != dir) {
            self.dir = dir.to_vec();
            self.prefix = std::str::from_utf8(dir).ok().map(|_| {
                let mut prefix = dir.to_vec();
                if !prefix.ends_with(b"/") {
                    prefix.push(b'/');
                }
                prefix
            });
            self.opening = self
                .prefix
                .as_ref()
                .filter(|prefix| !needs_escape(prefix))
                .map(|prefix| [&self.head[..], b"\"", prefix].concat());
        }
        self.dir_at = Some(at);
        match &self.opening {
            Some(opening) if plain_ascii(name) => {
                buf.extend_from_slice(opening);
                buf.extend_from_slice(name);
            }
            _ => {
                buf.extend_from_slice(&self.head);
                let (Some(prefix), Ok(name)) = (&self.prefix, std::str::from_utf8(name)) else {
                    return Err(not_utf8());
                };
                let mut path = String::from_utf8(prefix.clone()).expect("checked as UTF-8");
                path.push_str(name);
                push_str(buf, &path);
                // `closing` opens with the `"` that `push_str` wrote.
                buf.pop();
            }
        }
        buf.extend_from_slice(&self.closing);
        Ok(())
    }
}

/// `true` when a JSON string of `bytes` needs an escape: a control character, `"` or `\`
/// (serde_json's table). Checks every byte without stopping early, so that it vectorises.
fn needs_escape(bytes: &[u8]) -> bool {
    bytes.iter().fold(false, |any, &b| {
        any | (b < 0x20) | (b == b'"') | (b == b'\\')
    })
}

/// `true` when `bytes` is ASCII that a JSON string holds as it is (no escape): no control
/// character, `"`, `\` or byte above 0x7f. Eight bytes at a time (the row of each of a
/// crowded directory's names checks its name with it).
fn plain_ascii(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Whether a byte of `x` is below `n` (n <= 0x80); exact as a yes or no.
    let has_less = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGH != 0;
    let has_byte = |x: u64, b: u8| has_less(x ^ (ONES * u64::from(b)), 1);
    let plain =
        |x: u64| x & HIGH == 0 && !has_less(x, 0x20) && !has_byte(x, b'"') && !has_byte(x, b'\\');
    let mut words = bytes.chunks_exact(8);
    let mut all = true;
    for word in &mut words {
        all &= plain(u64::from_le_bytes(word.try_into().expect("8 bytes")));
    }
    let rest = words.remainder();
    let mut last = [b'a'; 8];
    last[..rest.len()].copy_from_slice(rest);
    all & plain(u64::from_le_bytes(last))
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

    /// The word-at-a-time check agrees with the byte-by-byte rule: every byte value at every
    /// position of names of 1 to 20 bytes.
    #[test]
    fn plain_ascii_is_the_byte_rule() {
        let rule = |bytes: &[u8]| {
            bytes
                .iter()
                .all(|&b| (0x20..0x80).contains(&b) && b != b'"' && b != b'\\')
        };
        for len in 1..=20 {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut name = vec![b'x'; len];
                    name[at] = b;
                    assert_eq!(plain_ascii(&name), rule(&name), "{name:?}");
                }
            }
        }
        assert!(plain_ascii(b""));
    }

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
