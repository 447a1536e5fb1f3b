//! Shared fixtures: where the built plugins are, and plugin directories to fill.

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    sync::{Mutex, OnceLock},
};

use backplane::{
    CandidateReport, CandidateStatus, CreationOptions, ExecuteError, InputTensor, Network,
    NetworkBuilder, NetworkId, OutputTensor, ReasonCode, Runtime, plugins::paths::PathSource,
};
use backplane_api::{
    ActivationDescriptor, ActivationFunction, DataType, LayerDescriptor, TensorInfo,
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
    let p = target_dir().join("libbackplane_ref_plugin.so");
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

/// The built example device-memory plugin, Acme GpuCl (`plugins-example/acme-gpucl`).
pub fn gpucl_plugin() -> PathBuf {
    let p = target_dir().join("libacme_gpucl.so");
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
pub fn candidate(rt: &Runtime, name: &str) -> CandidateReport {
    let report = rt.report();
    report
        .candidates
        .iter()
        .find(|c| c.file.file_name().and_then(|n| n.to_str()) == Some(name))
        .cloned()
        .unwrap_or_else(|| panic!("no candidate {name} in {:#?}", report.candidates))
}

/// The built plugin of the fault matrix that faults as `example` says
/// (`tests/plugins/faults/examples/<example>.rs`).
pub fn fault_plugin(example: &str) -> PathBuf {
    let p = target_dir()
        .join("examples")
        .join(format!("lib{example}.so"));
    assert!(
        p.is_file(),
        "{} is missing: build the workspace first (scripts/test.sh)",
        p.display()
    );
    p
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

/// Asserts entry `name` was ignored (not an error) with `reason` and a message containing
/// `message`.
pub fn assert_ignored(rt: &Runtime, name: &str, reason: ReasonCode, message: &str) {
    let c = candidate(rt, name);
    assert_eq!(c.status, CandidateStatus::Ignored, "{c:#?}");
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

/// A Float32 tensor of `shape`.
pub fn f32t(shape: &[u32]) -> TensorInfo {
    TensorInfo::new(shape, DataType::Float32)
}

/// `v` as little-endian bytes.
pub fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Little-endian bytes as floats.
pub fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// An activation layer with parameters 0.
pub fn activation(f: ActivationFunction) -> LayerDescriptor {
    LayerDescriptor::Activation(ActivationDescriptor {
        function: f,
        a: 0.0,
        b: 0.0,
    })
}

/// `x` (of `shape`) -> each named activation in turn -> `y`.
pub fn chain(shape: &[u32], layers: &[(&str, ActivationFunction)]) -> Network {
    let mut n = NetworkBuilder::new();
    let mut t = n.add_input("x", f32t(shape)).unwrap();
    for (name, f) in layers {
        t = n.add_layer(name, activation(*f), &[t]).unwrap();
    }
    n.add_output("y", t).unwrap();
    n.build().unwrap()
}

/// Runs network `id` (input `x`, output `y`) once on `x`.
pub fn enqueue_single(
    rt: &Runtime,
    id: NetworkId,
    input: &TensorInfo,
    x: &[f32],
    out_info: &TensorInfo,
) -> Result<Vec<f32>, ExecuteError> {
    let xb = bytes(x);
    let mut out = vec![0u8; out_info.num_bytes().unwrap()];
    rt.enqueue(
        id,
        &[InputTensor {
            name: "x",
            info: input,
            data: &xb,
        }],
        &mut [OutputTensor {
            name: "y",
            info: out_info,
            data: &mut out,
        }],
    )?;
    Ok(floats(&out))
}

/// [`enqueue_single`], which must succeed.
pub fn run_single(
    rt: &Runtime,
    id: NetworkId,
    input: &TensorInfo,
    x: &[f32],
    out_info: &TensorInfo,
) -> Vec<f32> {
    enqueue_single(rt, id, input, x, out_info).unwrap()
}

/// `n` pseudo-random values in [-1, 1) from `seed` (a linear congruential generator).
pub fn lcg(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

/// Conv2d (2 -> 4 channels, 3x3, stride 2, padding 1, bias) then ReLU on a [1, 2, 6, 6]
/// input: the network, its input and output infos, the weights and the bias.
pub fn small_cnn() -> (Network, TensorInfo, TensorInfo, Vec<f32>, Vec<f32>) {
    use backplane_api::{ConstTensor, Convolution2dDescriptor, Padding2d};
    let input = f32t(&[1, 2, 6, 6]);
    let (wt, bias) = (lcg(4 * 2 * 3 * 3, 11), lcg(4, 12));
    let mut n = NetworkBuilder::new();
    let x = n.add_input("x", input.clone()).unwrap();
    let w = n
        .add_constant("w", ConstTensor::from_f32(&[4, 2, 3, 3], &wt))
        .unwrap();
    let b = n
        .add_constant("b", ConstTensor::from_f32(&[4], &bias))
        .unwrap();
    let conv = LayerDescriptor::Convolution2d(Convolution2dDescriptor {
        padding: Padding2d {
            left: 1,
            right: 1,
            top: 1,
            bottom: 1,
        },
        stride_x: 2,
        stride_y: 2,
        bias_enabled: true,
        ..Default::default()
    });
    let c = n.add_layer("conv", conv, &[x, w, b]).unwrap();
    let r = n
        .add_layer(
            "relu",
            activation(backplane_api::ActivationFunction::ReLU),
            &[c],
        )
        .unwrap();
    n.add_output("y", r).unwrap();
    let output = n.tensor_info(r).unwrap().clone();
    (n.build().unwrap(), input, output, wt, bias)
}

/// Options running `ids` out of process with the built `backplane` as the server.
pub fn out_of_process(ids: &[&str], call_timeout: std::time::Duration) -> CreationOptions {
    let mut oop = backplane::OutOfProcess::with_program(
        backplane_bin(),
        ids.iter().map(|s| (*s).to_owned()).collect(),
    );
    oop.call_timeout = call_timeout;
    CreationOptions {
        out_of_process: Some(oop),
        ..CreationOptions::default()
    }
}

/// Runs the `backplane` CLI with neither `DYNAMIC_BACKEND_PATHS` nor `RUST_BACKTRACE` from
/// the test's environment: success, stdout, stderr.
pub fn cli(args: &[&str]) -> (bool, String, String) {
    cli_with(args, &[])
}

/// [`cli`] with these environment variables set.
pub fn cli_with(args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> (bool, String, String) {
    let out = std::process::Command::new(backplane_bin())
        .args(args)
        .env_remove("DYNAMIC_BACKEND_PATHS")
        .env_remove("RUST_BACKTRACE")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
