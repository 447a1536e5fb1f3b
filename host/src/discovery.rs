//! Scanning search directories for plugin candidates (DESIGN §4.3).
//!
//! Deterministic and loud: directories in the given order, entries in byte order of their
//! names, non-recursively; every entry gets a verdict in the report.

use std::{
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
};

use crate::report::{ReasonCode, Rejection};

/// The file-name rule as a regular expression (the unit tests check [`is_plugin_file_name`]
/// against it).
pub const FILE_NAME_PATTERN: &str = r"^[A-Za-z0-9]+_[A-Za-z0-9]+_backend\.so(\.[0-9]+)*$";

/// `true` iff `name` (an entry's own name, not its link target) is a plugin file name:
/// `<Vendor>_<Name>_backend.so[.N...]`, i.e. [`FILE_NAME_PATTERN`].
///
/// Written out rather than compiled from the pattern: compiling a regex costs ~0.2 ms per
/// process, more than scanning a directory of 64 plugins (see docs/PERFORMANCE.md). Vendor and
/// name cannot contain `_`, so one left-to-right pass decides.
pub fn is_plugin_file_name(name: &[u8]) -> bool {
    fn run(s: &[u8], class: fn(&u8) -> bool) -> Option<&[u8]> {
        let n = s.iter().take_while(|b| class(b)).count();
        (n > 0).then(|| &s[n..])
    }
    let parts = run(name, u8::is_ascii_alphanumeric)
        .and_then(|r| r.strip_prefix(b"_"))
        .and_then(|r| run(r, u8::is_ascii_alphanumeric))
        .and_then(|r| r.strip_prefix(b"_backend.so"));
    let Some(mut rest) = parts else { return false };
    while !rest.is_empty() {
        match rest
            .strip_prefix(b".")
            .and_then(|r| run(r, u8::is_ascii_digit))
        {
            Some(r) => rest = r,
            None => return false,
        }
    }
    true
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
///
/// A plain `read_dir` and one sort: walkdir's sorted listing measured ~4x slower on a
/// directory of 10,000 entries (see docs/PERFORMANCE.md).
///
/// Returns the entries and, for each directory that could not be listed, why.
pub fn scan(dirs: &[PathBuf]) -> (Vec<Entry>, Vec<(PathBuf, String)>) {
    let mut entries = Vec::new();
    let mut unreadable = Vec::new();
    let mut seen: Vec<(PathBuf, PathBuf)> = Vec::new();
    for dir in dirs {
        let listing = match std::fs::read_dir(dir) {
            Ok(l) => l,
            Err(err) => {
                log::warn!("cannot list {}: {err}", dir.display());
                unreadable.push((dir.clone(), format!("cannot be listed: {err}")));
                continue;
            }
        };
        let mut names: Vec<std::ffi::OsString> = listing
            .filter_map(|item| match item {
                Ok(e) => Some(e.file_name()),
                Err(err) => {
                    log::warn!("cannot list an entry of {}: {err}", dir.display());
                    None
                }
            })
            .collect();
        names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        let canonical_dir = std::fs::canonicalize(dir).ok();
        for name in names {
            entries.push(classify(
                dir.join(name),
                canonical_dir.as_deref(),
                &mut seen,
            ));
        }
    }
    (entries, unreadable)
}

fn classify(
    file: PathBuf,
    canonical_dir: Option<&Path>,
    seen: &mut Vec<(PathBuf, PathBuf)>,
) -> Entry {
    match resolve(&file, canonical_dir, seen) {
        Ok(canonical) => {
            seen.push((file.clone(), canonical.clone()));
            Entry {
                file,
                canonical: Some(canonical),
                verdict: Ok(()),
            }
        }
        Err((canonical, rejection)) => Entry {
            file,
            canonical,
            verdict: Err(rejection),
        },
    }
}

/// The canonical path of a candidate, or why `path` is not one. A plain file's canonical path
/// is its canonical directory joined with its name (one `lstat`); only links are resolved.
fn resolve(
    path: &Path,
    canonical_dir: Option<&Path>,
    seen: &[(PathBuf, PathBuf)],
) -> Result<PathBuf, (Option<PathBuf>, Rejection)> {
    let name = path.file_name().unwrap_or_default();
    if !is_plugin_file_name(name.as_bytes()) {
        let message = "name does not match <Vendor>_<Name>_backend.so[.N...]";
        return Err((None, Rejection::new(ReasonCode::NameMismatch, message)));
    }
    let cannot_stat = |e: std::io::Error| {
        (
            None,
            Rejection::new(ReasonCode::OpenFailed, format!("cannot stat: {e}")),
        )
    };
    let own = std::fs::symlink_metadata(path).map_err(cannot_stat)?;
    let (meta, canonical) = match canonical_dir {
        Some(dir) if !own.file_type().is_symlink() => (own, dir.join(name)),
        _ => {
            let unresolved = |e: std::io::Error| {
                let message = format!("symbolic link does not resolve: {e}");
                (None, Rejection::new(ReasonCode::DanglingLink, message))
            };
            let meta = std::fs::metadata(path).map_err(unresolved)?;
            (meta, std::fs::canonicalize(path).map_err(unresolved)?)
        }
    };
    if !meta.is_file() {
        let what = if meta.is_dir() {
            "resolves to a directory"
        } else {
            "resolves to a non-regular file"
        };
        return Err((Some(canonical), Rejection::new(ReasonCode::NotAFile, what)));
    }
    if let Some((first, _)) = seen.iter().find(|(_, c)| *c == canonical) {
        let message = format!("same file as {} (already a candidate)", first.display());
        return Err((
            Some(canonical),
            Rejection::new(ReasonCode::DuplicateFile, message),
        ));
    }
    Ok(canonical)
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
        assert!(!is_plugin_file_name(b""));
        assert_eq!(name_part(b"Arm_GpuAcc_backend.so.1"), Some("GpuAcc"));
    }

    /// The hand-written matcher agrees with the regular expression on generated names.
    #[test]
    fn matcher_agrees_with_the_pattern() {
        let re = regex::bytes::Regex::new(FILE_NAME_PATTERN).unwrap();
        let alphabet = b"Aa09_.%backendso\xff";
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut accepted = 0;
        for _ in 0..200_000 {
            let len = (next() % 24) as usize;
            let mut name: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            if next() % 3 == 0 {
                // Splice in the fixed part so that valid names are common too.
                let at = (next() as usize) % (name.len() + 1);
                name.splice(at..at, b"_backend.so".iter().copied());
            }
            let expected = re.is_match(&name);
            accepted += usize::from(expected);
            assert_eq!(
                is_plugin_file_name(&name),
                expected,
                "{:?}",
                String::from_utf8_lossy(&name)
            );
        }
        assert!(accepted > 100, "only {accepted} generated names were valid");
    }
}
