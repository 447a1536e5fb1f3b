//! `backplane install FILE --dir DIR`: installs a built cdylib under the conventional name
//! `<Vendor>_<Name>_backend.so.<M.m.p>` with the `.so`, `.so.M` and `.so.M.m` symlinks.

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};

use backplane_api::ApiVersion;

use crate::{
    plugins::discovery::is_plugin_file_name,
    plugins::inspect,
    plugins::isolation::Isolation,
    report::{ReasonCode, Rejection},
    sys::loader,
};

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
    /// Reading the file's facts in a child process ([`install_isolated`]) killed, hung or ended
    /// that child: the file is not installed.
    #[error("{file} was not installed: {message}")]
    Crashed {
        /// The file.
        file: PathBuf,
        /// What happened to the child, with the end of its stderr.
        message: String,
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

/// What installing needs to know about the plugin.
struct Facts {
    /// Its backend id.
    id: String,
    /// The embedded vendor, if any.
    vendor: Option<String>,
    /// The embedded release, if any.
    release: Option<String>,
}

/// Installs `file` into `dir`, loading it in this process (its constructors run here; see
/// [`install_isolated`]). `vendor` and `release` override the embedded metadata.
pub fn install(
    file: &Path,
    dir: &Path,
    vendor: Option<&str>,
    release: Option<&str>,
) -> Result<Installed, InstallError> {
    let opened =
        loader::probe(file, ApiVersion::CURRENT).map_err(|f| InstallError::NotAPlugin {
            file: file.to_path_buf(),
            rejection: f.rejection,
        })?;
    let meta = opened.metadata();
    let facts = Facts {
        id: opened.factory.id().to_owned(),
        vendor: meta.as_ref().map(|m| m.vendor.clone()),
        release: meta.map(|m| m.release),
    };
    place(file, dir, facts, vendor, release)
}

/// [`install`], but the file is loaded only in a child process
/// ([`inspect::inspect_isolated`]), never in this one: a file that crashes, hangs or ends the
/// process while it loads is refused and nothing is written.
///
/// # Errors
/// [`InstallError::Crashed`] when the child did not finish; otherwise those of [`install`].
pub fn install_isolated(
    file: &Path,
    dir: &Path,
    vendor: Option<&str>,
    release: Option<&str>,
    isolation: &Isolation,
) -> Result<Installed, InstallError> {
    let report =
        inspect::inspect_in_child(file, isolation).map_err(|message| InstallError::Crashed {
            file: file.to_path_buf(),
            message,
        })?;
    let (Some(id), true) = (report.backend_id, report.compatible) else {
        // Not loadable: the loader's rejection, as `install` gives it.
        let (code, message) = report
            .error
            .unwrap_or_else(|| ("open_failed".into(), "not loadable by this host".into()));
        let reason = serde_json::from_value(serde_json::Value::String(code))
            .unwrap_or(ReasonCode::OpenFailed);
        return Err(InstallError::NotAPlugin {
            file: file.to_path_buf(),
            rejection: Rejection::new(reason, message),
        });
    };
    let facts = Facts {
        id,
        vendor: report.vendor,
        release: report.release,
    };
    place(file, dir, facts, vendor, release)
}

/// Names the file from `facts` (`vendor` and `release` override the embedded ones), then
/// copies it into `dir` and makes the links.
fn place(
    file: &Path,
    dir: &Path,
    facts: Facts,
    vendor: Option<&str>,
    release: Option<&str>,
) -> Result<Installed, InstallError> {
    let vendor = vendor
        .map(str::to_owned)
        .or(facts.vendor)
        .ok_or_else(|| InstallError::NoVendor(file.to_path_buf()))?;
    let release = release
        .map(str::to_owned)
        .or(facts.release)
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
    let id = facts.id;
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
