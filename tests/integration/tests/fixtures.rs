//! Shared fixtures: where the built plugins are, and plugin directories to fill.

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    sync::{Mutex, OnceLock},
};

use backplane::{
    CandidateReport, CandidateStatus, CreationOptions, ReasonCode, Runtime, paths::PathSource,
};

/// `target/<profile>`, found from this test binary (`target/<profile>/deps/root-…`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

/// The built cdylib of test plugin `tests/plugins/<name>`.
pub fn plugin(name: &str) -> PathBuf {
    let p = target_dir().join(format!("libbp_test_{}.so", name.replace('-', "_")));
    assert!(
        p.is_file(),
        "{} is missing: build the plugins first (scripts/test.sh)",
        p.display()
    );
    p
}

/// The built CpuRef cdylib.
pub fn cpu_ref_plugin() -> PathBuf {
    let p = target_dir().join("libbackplane_ref.so");
    assert!(
        p.is_file(),
        "{} is missing: build the workspace first (scripts/test.sh)",
        p.display()
    );
    p
}

/// The built example vendor plugin, Acme CpuFast (`plugins-example/acme-cpufast`).
pub fn cpufast_plugin() -> PathBuf {
    let p = target_dir().join("libacme_cpufast.so");
    assert!(
        p.is_file(),
        "{} is missing: build the workspace first (scripts/test.sh)",
        p.display()
    );
    p
}

/// The `backplane` binary.
pub fn backplane_bin() -> PathBuf {
    let p = target_dir().join("backplane");
    assert!(
        p.is_file(),
        "{} is missing: build the workspace first (scripts/test.sh)",
        p.display()
    );
    p
}

/// A temporary directory of plugin files (mode 0755, so it passes the permission check).
pub struct PluginDir {
    dir: tempfile::TempDir,
}

impl PluginDir {
    /// An empty directory.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        Self { dir }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The path of entry `name`.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Copies test plugin `plugin` in as `name`.
    pub fn add(&self, plugin_name: &str, name: &str) -> PathBuf {
        self.copy(&plugin(plugin_name), name)
    }

    /// Copies any file in as `name`, mode 0755.
    pub fn copy(&self, from: &Path, name: &str) -> PathBuf {
        let to = self.file(name);
        std::fs::copy(from, &to).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
        to
    }

    /// Writes a file with `bytes` as `name`.
    pub fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let to = self.file(name);
        std::fs::write(&to, bytes).unwrap();
        to
    }

    /// Makes a symlink `name -> target`.
    pub fn link(&self, target: &str, name: &str) -> PathBuf {
        let to = self.file(name);
        std::os::unix::fs::symlink(target, &to).unwrap();
        to
    }

    /// The path as a `&str`.
    pub fn as_str(&self) -> &str {
        self.dir.path().to_str().expect("UTF-8 temp path")
    }
}

/// A runtime with no built-ins searching exactly `list` (the environment is not consulted).
pub fn runtime_for(list: &str) -> Runtime {
    Runtime::with_path_list(
        CreationOptions::default().without_builtins(),
        PathSource::Option,
        list,
    )
}

/// The report line of entry `name` (the last path component).
pub fn candidate<'a>(rt: &'a Runtime, name: &str) -> &'a CandidateReport {
    rt.report()
        .candidates
        .iter()
        .find(|c| c.file.file_name().and_then(|n| n.to_str()) == Some(name))
        .unwrap_or_else(|| panic!("no candidate {name} in {:#?}", rt.report().candidates))
}

/// Asserts entry `name` was rejected with `reason` and a message containing `message`.
pub fn assert_rejected(rt: &Runtime, name: &str, reason: ReasonCode, message: &str) {
    let c = candidate(rt, name);
    assert_eq!(c.status, CandidateStatus::Rejected, "{c:#?}");
    assert_eq!(c.reason, Some(reason), "{c:#?}");
    assert!(
        c.message.contains(message),
        "message {:?} does not contain {message:?}",
        c.message
    );
}

/// Asserts entry `name` was registered as backend `id`.
pub fn assert_registered(rt: &Runtime, name: &str, id: &str) {
    let c = candidate(rt, name);
    assert_eq!(c.status, CandidateStatus::Registered, "{c:#?}");
    assert_eq!(c.reason, None);
    assert_eq!(c.backend_id.as_deref(), Some(id));
    assert!(rt.registry().is_registered(id));
}

/// Every log record the test process's logger sees (installed once, shared by all tests).
pub struct Capture(Mutex<Vec<String>>);

impl Capture {
    /// A copy of the lines so far (`"LEVEL message"`).
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// Whether a line equal to `line` was logged.
    pub fn contains(&self, line: &str) -> bool {
        self.0.lock().unwrap().iter().any(|l| l == line)
    }
}

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        self.0
            .lock()
            .unwrap()
            .push(format!("{} {}", r.level(), r.args()));
    }
    fn flush(&self) {}
}

/// Installs the capturing logger (once) and returns it.
pub fn capture_logs() -> &'static Capture {
    static CAPTURE: OnceLock<&'static Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let cap: &'static Capture = Box::leak(Box::new(Capture(Mutex::new(vec![]))));
        let _ = log::set_logger(cap);
        log::set_max_level(log::LevelFilter::Trace);
        cap
    })
}
