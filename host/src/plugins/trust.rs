//! Trust checks before a file is opened (DESIGN §4.4).

use std::{
    io::Read,
    os::unix::fs::{MetadataExt, PermissionsExt},
    path::{Path, PathBuf},
};

use sha2::{Digest, Sha256};

use crate::report::{ReasonCode, Rejection};

/// What a candidate must satisfy before it is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustPolicy {
    /// Refuse a file (or its directory) writable by users other than its owner and root.
    pub check_permissions: bool,
    /// When set, only files whose SHA-256 digest is listed load.
    pub pinned_sha256: Option<Vec<[u8; 32]>>,
}

impl Default for TrustPolicy {
    fn default() -> Self {
        Self {
            check_permissions: true,
            pinned_sha256: None,
        }
    }
}

/// Parses a hex SHA-256 digest (64 hex digits).
pub fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Hex form of a digest.
pub fn to_hex(digest: &[u8; 32]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 digest of a file.
pub fn sha256_file(path: &Path) -> std::io::Result<[u8; 32]> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().into())
}

/// A file's permission bits and owner, as one `stat` found them (`st_mode`, `st_uid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMode {
    /// `st_mode`: the file type and permission bits.
    pub mode: u32,
    /// `st_uid`: the owner.
    pub uid: u32,
}

impl FileMode {
    /// The mode and owner of `path` (links followed).
    fn of(path: &Path) -> std::io::Result<Self> {
        let m = std::fs::metadata(path)?;
        Ok(Self {
            mode: m.permissions().mode(),
            uid: m.uid(),
        })
    }

    /// Why `path` (with this mode) is writable by users other than its owner and root
    /// (group- or world-writable mode bits), if it is. A sticky world-writable directory
    /// (`/tmp`) counts: anyone may add a file to it.
    fn writable_by_others(self, path: &Path) -> Option<Rejection> {
        (self.mode & 0o022 != 0).then(|| {
            let why = format!(
                "{} is writable by group or others (mode {:o}, owner uid {})",
                path.display(),
                self.mode & 0o7777,
                self.uid
            );
            Rejection::new(ReasonCode::InsecurePermissions, why)
        })
    }
}

/// The permission verdicts on directories, each directory `stat`ed once: one per scan, shared
/// by every candidate in it.
#[derive(Debug, Default)]
pub struct DirectoryChecks {
    checked: Vec<(PathBuf, Result<(), Rejection>)>,
}

impl DirectoryChecks {
    /// The verdict on directory `dir`, from the first time it was asked.
    fn check(&mut self, dir: &Path) -> Result<(), Rejection> {
        if let Some((_, verdict)) = self.checked.iter().find(|(d, _)| d == dir) {
            return verdict.clone();
        }
        let verdict = check_one(dir, FileMode::of(dir));
        self.checked.push((dir.to_path_buf(), verdict.clone()));
        verdict
    }
}

/// The verdict on one file or directory from its `stat`.
fn check_one(path: &Path, stat: std::io::Result<FileMode>) -> Result<(), Rejection> {
    match stat {
        Ok(mode) => mode.writable_by_others(path).map_or(Ok(()), Err),
        Err(e) => Err(Rejection::new(
            ReasonCode::OpenFailed,
            format!("cannot stat {}: {e}", path.display()),
        )),
    }
}

impl TrustPolicy {
    /// Checks a candidate: `entry` is the directory entry as listed, `canonical` the file it
    /// resolves to. The file, its directory and the directory holding the entry (which differs
    /// for a symlink) must not be writable by others.
    pub fn check(&self, entry: &Path, canonical: &Path) -> Result<(), Rejection> {
        let entry_dir = entry.parent().unwrap_or(Path::new("/"));
        let file = || FileMode::of(canonical);
        self.check_with(entry_dir, canonical, file, &mut DirectoryChecks::default())
    }

    /// [`TrustPolicy::check`] during a scan: `entry_dir` is the parent of the entry as
    /// listed, `file` the mode and owner the scan read for `canonical`, and `dirs` the
    /// directory verdicts so far in this scan (each directory is `stat`ed once).
    pub fn check_scanned(
        &self,
        entry_dir: &Path,
        canonical: &Path,
        file: FileMode,
        dirs: &mut DirectoryChecks,
    ) -> Result<(), Rejection> {
        self.check_with(entry_dir, canonical, || Ok(file), dirs)
    }

    fn check_with(
        &self,
        entry_dir: &Path,
        canonical: &Path,
        file: impl FnOnce() -> std::io::Result<FileMode>,
        dirs: &mut DirectoryChecks,
    ) -> Result<(), Rejection> {
        if self.check_permissions {
            let dir = canonical.parent().unwrap_or(Path::new("/"));
            check_one(canonical, file())?;
            dirs.check(dir)?;
            if entry_dir != dir {
                dirs.check(entry_dir)?;
            }
        }
        if let Some(pins) = &self.pinned_sha256 {
            let digest = sha256_file(canonical)
                .map_err(|e| Rejection::new(ReasonCode::OpenFailed, format!("cannot read: {e}")))?;
            if !pins.contains(&digest) {
                return Err(Rejection::new(
                    ReasonCode::Untrusted,
                    format!("SHA-256 {} is not in the pin list", to_hex(&digest)),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_and_pins() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("A_B_backend.so");
        std::fs::write(&f, b"not a library").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let policy = TrustPolicy::default();
        assert_eq!(policy.check(&f, &f), Ok(()));

        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(
            policy.check(&f, &f).unwrap_err().reason,
            ReasonCode::InsecurePermissions
        );
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(
            policy.check(&f, &f).unwrap_err().reason,
            ReasonCode::InsecurePermissions
        );
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(
            policy.check(&f, &f).unwrap_err().reason,
            ReasonCode::InsecurePermissions
        );
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();

        // A link in a world-writable directory to a safe file is refused too.
        let open_dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(open_dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let link = open_dir.path().join("A_B_backend.so");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        let e = policy.check(&link, &f).unwrap_err();
        assert_eq!(e.reason, ReasonCode::InsecurePermissions);
        assert!(
            e.message
                .starts_with(&open_dir.path().display().to_string()),
            "{}",
            e.message
        );

        let digest = sha256_file(&f).unwrap();
        assert_eq!(parse_sha256(&to_hex(&digest)), Some(digest));
        let pinned = TrustPolicy {
            pinned_sha256: Some(vec![digest]),
            ..TrustPolicy::default()
        };
        assert_eq!(pinned.check(&f, &f), Ok(()));
        let other = TrustPolicy {
            pinned_sha256: Some(vec![[0; 32]]),
            ..TrustPolicy::default()
        };
        let e = other.check(&f, &f).unwrap_err();
        assert_eq!(e.reason, ReasonCode::Untrusted);
        assert_eq!(
            e.message,
            format!("SHA-256 {} is not in the pin list", to_hex(&digest))
        );
        // Known vector: SHA-256 of "not a library".
        assert_eq!(parse_sha256("zz"), None);
    }
}
