//! Opening plugin files and reading their exports (DESIGN §4.5). All of the host's `unsafe`
//! is in this module: `dlopen`, `dlsym`, calls through the plugin's three C symbols, the
//! uid checks, and for out-of-process backends ([`crate::remote`]) the shared tensor memory
//! ([`shm`]) and the closing of descriptors a server child inherited.
//!
//! Order of checks: open (`RTLD_NOW | RTLD_LOCAL`) → required symbols → id → version; the
//! registry then checks for a duplicate id, and [`PluginFactory::create`] checks the factory.
//! Libraries are never closed: a process-wide table keeps each opened library (see ABI-NOTES 5:
//! unloading Rust plugins is unsafe in practice).

use std::{
    collections::HashMap,
    ffi::c_char,
    path::Path,
    sync::{Arc, LazyLock, Mutex},
};

use backplane_api::{
    ApiVersion, ErrorCode, InvalidId,
    abi_stable::std_types::ROption,
    ffi::{
        BackendFactoryFn, BackendHandle, FaultState, GetBackendIdFn, GetVersionFn, InstallLoggerFn,
        PluginInfo, PluginInfoFn, SYMBOL_BACKEND_FACTORY, SYMBOL_GET_BACKEND_ID,
        SYMBOL_GET_VERSION, SYMBOL_INSTALL_LOGGER, SYMBOL_PLUGIN_INFO, SYMBOL_TAKE_FACTORY_ERROR,
        TakeFactoryErrorFn, host_log_sink,
    },
    validate_backend_id_bytes,
};
use libloading::{
    Library,
    os::unix::{Library as UnixLibrary, RTLD_LOCAL, RTLD_NOW},
};

use crate::report::{ReasonCode, Rejection};

/// Longest C string read from a plugin (an id, a vendor, a release).
const MAX_C_STRING: usize = 4096;

/// `true` when the process runs with raised privileges (real and effective ids differ), in
/// which case the environment's search paths are ignored.
pub fn process_is_privileged() -> bool {
    // SAFETY: getuid/geteuid/getgid/getegid have no preconditions and cannot fail.
    unsafe { libc::getuid() != libc::geteuid() || libc::getgid() != libc::getegid() }
}

/// The effective user id of this process (who owns the files it creates).
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Every library this process opened, by its `dlopen` handle, kept for the rest of the
/// process (never closed). The handle identifies the loaded object: opening the same file
/// again returns the same handle, so a runtime created and dropped in a loop keeps one entry
/// per library, not one per open.
static OPENED: LazyLock<Mutex<HashMap<usize, Arc<Library>>>> = LazyLock::new(Mutex::default);

/// Opens a library with `RTLD_NOW | RTLD_LOCAL`, never to be closed. Nothing in it is
/// called here (the log sink is handed over once its version is known to be compatible).
pub fn open(path: &Path) -> Result<Arc<Library>, Rejection> {
    // SAFETY: opening a library runs its initialisers. That is the point of loading a plugin;
    // the trust checks (permissions, pins) ran before. RTLD_NOW resolves every symbol now, so
    // a missing dependency fails here and not at a later call.
    let lib = unsafe { UnixLibrary::open(Some(path), RTLD_NOW | RTLD_LOCAL) }
        .map_err(|e| Rejection::new(ReasonCode::OpenFailed, e.to_string()))?;
    let handle = lib.into_raw();
    // SAFETY: `handle` is the one this `dlopen` returned, owned once by the rebuilt `Library`.
    let lib = unsafe { UnixLibrary::from_raw(handle) };
    let mut opened = OPENED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(kept) = opened.get(&(handle as usize)) {
        // Dropping `lib` calls `dlclose` once, balancing this `dlopen`; the kept handle's own
        // reference keeps the library loaded.
        drop(lib);
        return Ok(Arc::clone(kept));
    }
    let lib = Arc::new(Library::from(lib));
    opened.insert(handle as usize, Arc::clone(&lib));
    Ok(lib)
}

/// Which Backend API symbols a library exports, required ones first.
pub fn symbol_presence(lib: &Library) -> Vec<(&'static str, bool)> {
    [
        SYMBOL_GET_BACKEND_ID,
        SYMBOL_GET_VERSION,
        SYMBOL_BACKEND_FACTORY,
        SYMBOL_INSTALL_LOGGER,
        SYMBOL_PLUGIN_INFO,
        SYMBOL_TAKE_FACTORY_ERROR,
    ]
    .into_iter()
    .map(|s| {
        // SAFETY: only the address is looked up; nothing is called.
        let present = unsafe { lib.get::<*const u8>(s.to_bytes_with_nul()) }.is_ok();
        (s.to_str().expect("ASCII symbol names"), present)
    })
    .collect()
}

/// Reads a NUL-terminated string of at most `MAX_C_STRING` bytes; `None` for null or
/// unterminated within the bound.
///
/// # Safety
/// `p` must be null or point at readable memory up to its NUL or the bound.
unsafe fn read_c_bytes<'a>(p: *const c_char) -> Option<&'a [u8]> {
    if p.is_null() {
        return None;
    }
    let p = p.cast::<u8>();
    // SAFETY: per the contract, each byte up to the NUL (or the bound) is readable.
    let len = (0..MAX_C_STRING).find(|&i| unsafe { *p.add(i) } == 0)?;
    // SAFETY: the `len` bytes before the NUL were just read.
    Some(unsafe { std::slice::from_raw_parts(p, len) })
}

/// What can create instances of a loaded plugin's backend.
#[derive(Clone)]
pub struct PluginFactory {
    library: Arc<Library>,
    id: String,
    version: ApiVersion,
    factory: BackendFactoryFn,
    take_error: Option<TakeFactoryErrorFn>,
}

impl std::fmt::Debug for PluginFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PluginFactory({})", self.id)
    }
}

impl PluginFactory {
    /// Calls `BackendFactory`: a null result is `factory_failed` (or `panicked`, when the
    /// plugin's optional `BackplaneTakeFactoryError` says the constructor panicked).
    pub fn create(&self, fault: Arc<FaultState>) -> Result<BackendHandle, Rejection> {
        // SAFETY: `factory` is the plugin's `BackendFactory` (checked signature by contract,
        // version checked), and `library` keeps it mapped.
        let raw = unsafe { (self.factory)() };
        let keep: backplane_api::ffi::LibraryKeepAlive = self.library.clone();
        // SAFETY: `raw` came from this plugin's `BackendFactory`; `version` is the one its
        // `GetVersion` reported and the host accepted; `keep` holds the library.
        let handle =
            unsafe { BackendHandle::from_raw(raw, &self.id, self.version, Some(keep), fault) };
        if let Some(h) = handle {
            return Ok(h);
        }
        // SAFETY: `take_error`, when present, is the plugin's `BackplaneTakeFactoryError`.
        let why = self.take_error.map(|f| unsafe { f() });
        Err(match why {
            Some(ROption::RSome(e)) => {
                let message = String::from_utf8_lossy(e.message.as_str().as_bytes()).into_owned();
                if e.code == ErrorCode::Panicked {
                    Rejection::new(
                        ReasonCode::Panicked,
                        format!("BackendFactory panicked: {message}"),
                    )
                } else {
                    Rejection::new(ReasonCode::FactoryFailed, message)
                }
            }
            _ => Rejection::new(ReasonCode::FactoryFailed, "BackendFactory returned null"),
        })
    }

    /// The backend id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// Vendor and release metadata embedded by the export macro.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginMetadata {
    /// The vendor given to `export_backend!`.
    pub vendor: String,
    /// The plugin crate's version.
    pub release: String,
}

/// A library whose symbols, id and version passed.
#[derive(Debug, Clone)]
pub struct OpenedPlugin {
    /// Creates backend instances.
    pub factory: PluginFactory,
    /// The Backend API version the plugin was built against.
    pub version: ApiVersion,
}

/// How far a failed [`probe`] got: the id and version when they were read.
#[derive(Debug, Clone)]
pub struct ProbeFailure {
    /// Why the file is rejected.
    pub rejection: Rejection,
    /// The id, if it was read and valid.
    pub id: Option<String>,
    /// The version, if it was read.
    pub version: Option<ApiVersion>,
}

impl From<Rejection> for ProbeFailure {
    fn from(rejection: Rejection) -> Self {
        Self {
            rejection,
            id: None,
            version: None,
        }
    }
}

/// Opens `path` and checks symbols, id and version against `host`.
pub fn probe(path: &Path, host: ApiVersion) -> Result<OpenedPlugin, ProbeFailure> {
    let library = open(path)?;
    probe_library(library, host)
}

/// Checks an opened library's symbols, id and version against `host`.
pub fn probe_library(
    library: Arc<Library>,
    host: ApiVersion,
) -> Result<OpenedPlugin, ProbeFailure> {
    // One lookup per symbol (this runs for every candidate; see docs/PERFORMANCE.md).
    // SAFETY: each symbol, when present, has the Backend API's signature (the contract).
    let (get_id, get_version, factory) = unsafe {
        (
            library
                .get::<GetBackendIdFn>(SYMBOL_GET_BACKEND_ID.to_bytes_with_nul())
                .ok()
                .map(|s| *s),
            library
                .get::<GetVersionFn>(SYMBOL_GET_VERSION.to_bytes_with_nul())
                .ok()
                .map(|s| *s),
            library
                .get::<BackendFactoryFn>(SYMBOL_BACKEND_FACTORY.to_bytes_with_nul())
                .ok()
                .map(|s| *s),
        )
    };
    let (Some(get_id), Some(get_version), Some(factory)) = (get_id, get_version, factory) else {
        let missing: Vec<&str> = [
            (SYMBOL_GET_BACKEND_ID, get_id.is_some()),
            (SYMBOL_GET_VERSION, get_version.is_some()),
            (SYMBOL_BACKEND_FACTORY, factory.is_some()),
        ]
        .into_iter()
        .filter(|(_, present)| !present)
        .map(|(name, _)| name.to_str().expect("ASCII symbol names"))
        .collect();
        let message = format!("missing required symbol(s): {}", missing.join(", "));
        return Err(Rejection::new(ReasonCode::MissingSymbol, message).into());
    };
    // SAFETY: calling `GetBackendId` (no arguments); the result is bounds-checked below.
    let id_ptr = unsafe { get_id() };
    // SAFETY: the contract says a static NUL-terminated string; the read is bounded.
    let id = match unsafe { read_c_bytes(id_ptr) } {
        None if id_ptr.is_null() => Err(InvalidId::Null.to_string()),
        None => Err(format!(
            "backend id is not NUL-terminated within {MAX_C_STRING} bytes"
        )),
        Some(bytes) => validate_backend_id_bytes(bytes)
            .map(str::to_owned)
            .map_err(|e| e.to_string()),
    }
    .map_err(|m| Rejection::new(ReasonCode::InvalidId, m))?;
    let (mut major, mut minor) = (u32::MAX, u32::MAX);
    // SAFETY: `GetVersion` writes two `u32`s through the valid pointers we pass.
    unsafe { get_version(&mut major, &mut minor) };
    let version = ApiVersion::new(major, minor);
    if let Some(message) = host.incompatibility(&id, version) {
        return Err(ProbeFailure {
            rejection: Rejection::new(ReasonCode::IncompatibleVersion, message),
            id: Some(id),
            version: Some(version),
        });
    }
    // Compatible: from here on the plugin's optional symbols have this API's signatures.
    // SAFETY: the symbol, when present, has the signature of the Backend API's
    // `BackplaneInstallLogger`, and the plugin's version was checked just above.
    let install =
        unsafe { library.get::<InstallLoggerFn>(SYMBOL_INSTALL_LOGGER.to_bytes_with_nul()) };
    if let Ok(install) = install {
        // SAFETY: as above; the sink's functions live in the host, which outlives the plugin.
        unsafe { install(host_log_sink()) };
    }
    // SAFETY: optional symbol with the Backend API's signature.
    let take_error =
        unsafe { library.get::<TakeFactoryErrorFn>(SYMBOL_TAKE_FACTORY_ERROR.to_bytes_with_nul()) }
            .ok()
            .map(|s| *s);
    Ok(OpenedPlugin {
        factory: PluginFactory {
            library,
            id,
            version,
            factory,
            take_error,
        },
        version,
    })
}

/// The vendor and release metadata of an opened plugin, if it embeds them.
///
/// Its precondition, stated (issue 40): a library that exports `BackplanePluginInfo` exports
/// it with the Backend API's signature (`extern "C" fn() -> *const PluginInfo`), which has
/// not changed since 1.0 and is read before the plugin's version is known (`inspect` shows
/// the vendor of an incompatible file too). That is the trust every loaded library already
/// gets: `dlopen` ran its constructors, and `GetBackendId` is called on the same terms. What
/// the function returns is checked as untrusted: null, a `struct_size` smaller than this
/// API's `PluginInfo` (a plugin of an older layout: no metadata), strings longer than the
/// bounded read or not UTF-8 all give `None`.
pub fn metadata(library: &Library) -> Option<PluginMetadata> {
    // SAFETY: optional symbol with the Backend API's signature.
    let info_fn =
        unsafe { library.get::<PluginInfoFn>(SYMBOL_PLUGIN_INFO.to_bytes_with_nul()) }.ok()?;
    // SAFETY: calling it returns null or a pointer to a static `PluginInfo`.
    let info = unsafe { info_fn() };
    if info.is_null() {
        return None;
    }
    // SAFETY: `struct_size` is the first field of every version of `PluginInfo`.
    let size = unsafe { (*info).struct_size } as usize;
    if size < std::mem::size_of::<PluginInfo>() {
        return None;
    }
    // SAFETY: the struct is at least as large as ours, so every field we read exists; the
    // strings are bounded reads of static NUL-terminated literals.
    let (vendor, release) = unsafe {
        (
            read_c_bytes((*info).vendor)?,
            read_c_bytes((*info).release)?,
        )
    };
    Some(PluginMetadata {
        vendor: std::str::from_utf8(vendor).ok()?.to_owned(),
        release: std::str::from_utf8(release).ok()?.to_owned(),
    })
}

impl OpenedPlugin {
    /// The plugin's metadata, if it embeds any.
    pub fn metadata(&self) -> Option<PluginMetadata> {
        self.factory.metadata()
    }
}

impl PluginFactory {
    /// The metadata of the plugin that makes the instances, if it embeds any.
    pub fn metadata(&self) -> Option<PluginMetadata> {
        metadata(&self.library)
    }
}

/// Closes every descriptor of this process above stderr: an out-of-process server calls this
/// first, so that it holds none of its parent's files or sockets whatever the parent left
/// inheritable (a C or Python embedder may). Its own socket comes in as stdin.
///
/// # Errors
/// `close_range` failed.
pub fn close_inherited_descriptors() -> std::io::Result<()> {
    // SAFETY: closes descriptors 3 and up. The server calls this before it opens anything, so
    // no object of this process owns one of them, and none is used afterwards.
    let r = unsafe { libc::close_range(3, libc::c_uint::MAX, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_c_strings() {
        let s = c"CpuRef";
        // SAFETY: a valid C string literal.
        assert_eq!(unsafe { read_c_bytes(s.as_ptr()) }, Some(&b"CpuRef"[..]));
        // SAFETY: null is allowed.
        assert_eq!(unsafe { read_c_bytes(std::ptr::null()) }, None);
        let long = vec![b'a'; MAX_C_STRING + 8];
        // SAFETY: the buffer is readable past the bound, so the bounded read stops first.
        assert_eq!(unsafe { read_c_bytes(long.as_ptr().cast()) }, None);
    }
}
