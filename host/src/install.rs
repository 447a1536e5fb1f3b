//! `backplane install FILE --dir DIR`: installs a built cdylib under the conventional name
//! `<Vendor>_<Name>_backend.so.<M.m.p>` with the `.so`, `.so.M` and `.so.M.m` symlinks.

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};

use backplane_api::ApiVersion;

use crate::{discovery::is_plugin_file_name, loader, report::Rejection};

/// Why an install failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The file is not a loadable plugin for this host.
    #[error("{file} is not an installable plugin: {rejection}")]
    NotAPlugin {
        /// The file.
        file: PathBuf,
        /// Why.
        #[source]
        rejection: Rejection,
    },
    /// No vendor: neither embedded metadata nor `--vendor`.
    #[error("{0} embeds no vendor metadata (it was not built with export_backend!): pass --vendor")]
    NoVendor(PathBuf),
    /// No release: neither embedded metadata nor `--release`.
    #[error(
        "{0} embeds no release metadata (it was not built with export_backend!): pass --release"
    )]
    NoRelease(PathBuf),
    /// The vendor is not ASCII letters and digits.
    #[error("vendor {0:?} must be one or more ASCII letters and digits")]
    BadVendor(String),
    /// The release is not `M.m.p` with digits only.
    #[error("release {0:?} must be a version M.m.p of digits only: {1}")]
    BadRelease(String, String),
    /// A file-system operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On what.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// What was installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The installed file (`<Vendor>_<Name>_backend.so.<M.m.p>`).
    pub file: PathBuf,
    /// The symlinks made (`.so.M.m`, `.so.M`, `.so`), each pointing at `file`.
    pub links: Vec<PathBuf>,
    /// The backend id.
    pub backend_id: String,
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> InstallError + use<> {
    let path = path.to_path_buf();
    move |source| InstallError::Io { what, path, source }
}

/// Installs `file` into `dir`. `vendor` and `release` override the embedded metadata.
pub fn install(
    file: &Path,
    dir: &Path,
    vendor: Option<&str>,
    release: Option<&str>,
) -> Result<Installed, InstallError> {
    let not_plugin = |rejection| InstallError::NotAPlugin {
        file: file.to_path_buf(),
        rejection,
    };
    let opened = loader::probe(file, ApiVersion::CURRENT).map_err(|f| not_plugin(f.rejection))?;
    let meta = opened.metadata();
    let vendor = vendor
        .map(str::to_owned)
        .or_else(|| meta.as_ref().map(|m| m.vendor.clone()))
        .ok_or_else(|| InstallError::NoVendor(file.to_path_buf()))?;
    let release = release
        .map(str::to_owned)
        .or_else(|| meta.as_ref().map(|m| m.release.clone()))
        .ok_or_else(|| InstallError::NoRelease(file.to_path_buf()))?;
    if vendor.is_empty() || !vendor.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(InstallError::BadVendor(vendor));
    }
    let v = semver::Version::parse(&release)
        .map_err(|e| InstallError::BadRelease(release.clone(), e.to_string()))?;
    if !v.pre.is_empty() || !v.build.is_empty() {
        return Err(InstallError::BadRelease(
            release,
            "pre-release and build parts cannot be in a file name".into(),
        ));
    }
    let id = opened.factory.id().to_owned();
    let base = format!("{vendor}_{id}_backend.so");
    let full = format!("{base}.{}.{}.{}", v.major, v.minor, v.patch);
    debug_assert!(is_plugin_file_name(full.as_bytes()));

    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
        // Whatever the umask: the host refuses plugins in a group- or world-writable directory.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .map_err(io("cannot set permissions of", dir))?;
    }
    let target = dir.join(&full);
    let staging = dir.join(format!(".{full}.partial"));
    std::fs::copy(file, &staging).map_err(io("cannot copy to", &staging))?;
    std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o755))
        .map_err(io("cannot set permissions of", &staging))?;
    std::fs::rename(&staging, &target).map_err(io("cannot rename to", &target))?;

    let mut links = Vec::new();
    for name in [
        format!("{base}.{}.{}", v.major, v.minor),
        format!("{base}.{}", v.major),
        base.clone(),
    ] {
        let link = dir.join(name);
        match std::fs::remove_file(&link) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("cannot replace", &link)(e)),
        }
        std::os::unix::fs::symlink(&full, &link).map_err(io("cannot create symlink", &link))?;
        links.push(link);
    }
    log::info!("installed backend {id} as {}", target.display());
    Ok(Installed {
        file: target,
        links,
        backend_id: id,
    })
}
