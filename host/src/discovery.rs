//! Scanning search directories for plugin candidates (DESIGN §4.3).
//!
//! Deterministic and loud: directories in the given order, entries in byte order of their
//! names, non-recursively; every entry gets a verdict in the report.

use std::{
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
    sync::LazyLock,
};

use regex::bytes::Regex;

use crate::report::{ReasonCode, Rejection};

static FILE_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[A-Za-z0-9]+_[A-Za-z0-9]+_backend\.so(\.[0-9]+)*$").expect("valid pattern")
});

/// `true` iff `name` (an entry's own name, not its link target) is a plugin file name:
/// `<Vendor>_<Name>_backend.so[.N...]`.
pub fn is_plugin_file_name(name: &[u8]) -> bool {
    FILE_NAME.is_match(name)
}

/// The `<Name>` part of a plugin file name.
pub fn name_part(name: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(name).ok()?;
    s.split('_').nth(1)
}

/// A directory entry and what the scan decided before loading.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The entry's path (as listed).
    pub file: PathBuf,
    /// The resolved path, when it resolves to something.
    pub canonical: Option<PathBuf>,
    /// `Ok` for a candidate to load; otherwise why not.
    pub verdict: Result<(), Rejection>,
}

/// Lists `dirs` in order; each directory's entries in byte order of their names. Identical
/// files (by canonical path) are candidates once; later sightings are `duplicate_file`.
pub fn scan(dirs: &[PathBuf]) -> Vec<Entry> {
    let mut entries = Vec::new();
    let mut seen: Vec<(PathBuf, PathBuf)> = Vec::new();
    for dir in dirs {
        let walker = walkdir::WalkDir::new(dir)
            .min_depth(1)
            .max_depth(1)
            .follow_links(false)
            .sort_by(|a, b| a.file_name().as_bytes().cmp(b.file_name().as_bytes()));
        for item in walker {
            match item {
                Ok(e) => entries.push(classify(e.path(), &mut seen)),
                Err(err) => log::warn!("cannot list an entry of {}: {err}", dir.display()),
            }
        }
    }
    entries
}

fn classify(path: &Path, seen: &mut Vec<(PathBuf, PathBuf)>) -> Entry {
    let reject = |canonical: Option<PathBuf>, reason, message: String| Entry {
        file: path.to_path_buf(),
        canonical,
        verdict: Err(Rejection::new(reason, message)),
    };
    let name = path.file_name().map(|n| n.as_bytes()).unwrap_or_default();
    if !is_plugin_file_name(name) {
        return reject(
            None,
            ReasonCode::NameMismatch,
            "name does not match <Vendor>_<Name>_backend.so[.N...]".into(),
        );
    }
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if is_link => {
            return reject(
                None,
                ReasonCode::DanglingLink,
                format!("symbolic link does not resolve: {e}"),
            );
        }
        Err(e) => return reject(None, ReasonCode::OpenFailed, format!("cannot stat: {e}")),
    };
    let canonical = match std::fs::canonicalize(path) {
        Ok(c) => c,
        Err(e) => {
            return reject(
                None,
                ReasonCode::DanglingLink,
                format!("cannot resolve: {e}"),
            );
        }
    };
    if !meta.is_file() {
        let what = if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file"
        };
        return reject(
            Some(canonical),
            ReasonCode::NotAFile,
            format!("resolves to {what}"),
        );
    }
    if let Some((first, _)) = seen.iter().find(|(_, c)| *c == canonical) {
        let message = format!("same file as {} (already a candidate)", first.display());
        return reject(Some(canonical), ReasonCode::DuplicateFile, message);
    }
    seen.push((path.to_path_buf(), canonical.clone()));
    Entry {
        file: path.to_path_buf(),
        canonical: Some(canonical),
        verdict: Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file-name table of DESIGN §4.3.
    #[test]
    fn file_name_table() {
        let valid = [
            "Arm_GpuAcc_backend.so",
            "Arm_GpuAcc_backend.so.1",
            "Arm_GpuAcc_backend.so.1.2",
            "Arm_GpuAcc_backend.so.1.2.3",
            "Arm_GpuAcc_backend.so.10.1.27",
            "Arm123_GpuAcc_backend.so",
            "Arm_GpuAcc456_backend.so",
        ];
        let invalid = [
            "Arm_GpuAcc_backend.so.10.1.33.",
            "Arm_GpuAcc_backend.so.3.4..5",
            "Arm_GpuAcc_backend.so.1,1.1",
            "Arm%Co_GpuAcc_backend.so",
            "Arm_Gpu.Acc_backend.so",
            "GpuAcc_backend.so",
            "_GpuAcc_backend.so",
            "Arm__backend.so",
            "Arm_GpuAcc.so",
            "__backend.so",
            "__.so",
            "Arm_GpuAcc_backend",
            "Arm_GpuAcc_backend_v1.2.so",
        ];
        for n in valid {
            assert!(is_plugin_file_name(n.as_bytes()), "{n} should be valid");
        }
        for n in invalid {
            assert!(!is_plugin_file_name(n.as_bytes()), "{n} should be invalid");
        }
        assert!(!is_plugin_file_name(b"Arm_Gpu\xffAcc_backend.so"));
        assert_eq!(name_part(b"Arm_GpuAcc_backend.so.1"), Some("GpuAcc"));
    }
}
