//! The runtime and registry through real plugins: queries, instances, built-ins, faults,
//! object lifetimes, log forwarding, and the option/environment precedence of DESIGN §4.1.

use backplane::{BackendSource, CreationOptions, ReasonCode, Runtime};
use backplane_api::{
    BinaryOperation, DataType, ErrorCode, LayerDescriptor, RSlice, RStr, Support, TensorInfo,
    TensorView, TensorViewMut, WorkloadDesc,
    ffi::{BackendHandle, WorkloadHandle},
};

use crate::fixtures::{PluginDir, assert_registered, assert_rejected, runtime_for};

/// Creates an Add workload for `[2] + [2]` on `backend`.
fn add_workload(backend: &BackendHandle) -> WorkloadHandle {
    let t = TensorInfo::new(&[2], DataType::Float32);
    let infos = [t.clone(), t.clone()];
    let layer = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
    assert_eq!(
        backend
            .is_layer_supported(&layer, &infos, std::slice::from_ref(&t))
            .unwrap(),
        Support::Supported
    );
    let factory = backend
        .create_workload_factory(None, &Default::default())
        .unwrap();
    let outs = [t];
    let consts = [backplane_api::ROption::RNone, backplane_api::ROption::RNone];
    let desc = WorkloadDesc {
        name: RStr::from_str("add"),
        layer: &layer,
        inputs: RSlice::from_slice(&infos),
        outputs: RSlice::from_slice(&outs),
        constants: RSlice::from_slice(&consts),
    };
    factory.create_workload(&desc).unwrap()
}

/// Runs `[5, 3] + [10, 8]` (Arm NN's sample backend test) on an Add workload.
fn run_add(w: &WorkloadHandle) -> Vec<f32> {
    let t = TensorInfo::new(&[2], DataType::Float32);
    // f32 vectors, so the byte views are aligned for f32.
    let (a, b) = ([5.0f32, 3.0], [10.0f32, 8.0]);
    let mut out = vec![0f32; 2];
    let inputs = [
        TensorView::new(&t, backplane_api::bytemuck::cast_slice(&a)),
        TensorView::new(&t, backplane_api::bytemuck::cast_slice(&b)),
    ];
    let mut outputs = [TensorViewMut::new(
        &t,
        backplane_api::bytemuck::cast_slice_mut(&mut out),
    )];
    w.execute(&inputs, &mut outputs).unwrap();
    out
}

#[test]
fn registry_answers_queries() {
    let dir = PluginDir::new();
    let file = dir.add("valid-alpha", "Test_TestAlpha_backend.so");
    let rt = Runtime::with_path_list(
        CreationOptions::default(),
        backplane::plugins::paths::PathSource::Option,
        dir.as_str(),
    );
    let reg = rt.registry();
    assert_eq!(reg.ids(), vec!["CpuRef", "TestAlpha"]);
    assert!(reg.is_registered("TestAlpha") && !reg.is_registered("Nope"));
    assert_eq!(reg.source("CpuRef"), Some(&BackendSource::Builtin));
    assert_eq!(
        reg.source("TestAlpha"),
        Some(&BackendSource::Dynamic {
            file: file.clone(),
            canonical: file.canonicalize().unwrap()
        })
    );
    assert_eq!(reg.version("TestAlpha").unwrap().to_string(), "1.5");
    let caps = reg.capabilities("TestAlpha").unwrap();
    assert!(caps.is_enabled("TestAlphaCapability"));
    assert!(!caps.is_enabled("NonConstWeights"));
    assert!(!caps.is_enabled("NeverHeardOfIt"));
    // Two instances are two distinct objects that both work.
    let a = reg.create_instance("TestAlpha").unwrap().unwrap();
    let b = reg.create_instance("TestAlpha").unwrap().unwrap();
    assert_eq!(run_add(&add_workload(&a)), vec![15.0, 11.0]);
    assert_eq!(run_add(&add_workload(&b)), vec![15.0, 11.0]);
    assert!(reg.create_instance("Nope").is_none());
}

#[test]
fn refusals_carry_reasons() {
    let dir = PluginDir::new();
    dir.add("valid-beta", "Test_TestBeta_backend.so");
    let rt = runtime_for(dir.as_str());
    let beta = rt.registry().get("TestBeta").unwrap().instance();
    let t = TensorInfo::new(&[1], DataType::Float32);
    let s = beta
        .is_layer_supported(
            &LayerDescriptor::MemCopy,
            std::slice::from_ref(&t),
            std::slice::from_ref(&t),
        )
        .unwrap();
    assert_eq!(s, Support::unsupported("TestBeta supports no layers"));
}

/// Objects created by a plugin stay valid after the runtime that loaded it is dropped.
#[test]
fn workload_outlives_runtime() {
    let dir = PluginDir::new();
    dir.add("valid-alpha", "Test_TestAlpha_backend.so");
    let rt = runtime_for(dir.as_str());
    let backend = rt.registry().create_instance("TestAlpha").unwrap().unwrap();
    let w = add_workload(&backend);
    drop(backend);
    drop(rt);
    assert_eq!(run_add(&w), vec![15.0, 11.0]);
}

/// CpuRef built as a plugin, loaded dynamically with no built-ins, runs Add; next to the
/// built-in it is a duplicate id.
#[test]
fn cpu_ref_as_a_plugin() {
    let dir = PluginDir::new();
    dir.copy(
        &crate::fixtures::cpu_ref_plugin(),
        "Backplane_CpuRef_backend.so",
    );
    let rt = runtime_for(dir.as_str());
    assert_registered(&rt, "Backplane_CpuRef_backend.so", "CpuRef");
    let cpu = rt.registry().create_instance("CpuRef").unwrap().unwrap();
    assert_eq!(run_add(&add_workload(&cpu)), vec![15.0, 11.0]);

    let with_builtin = Runtime::with_path_list(
        CreationOptions::default(),
        backplane::plugins::paths::PathSource::Option,
        dir.as_str(),
    );
    assert_rejected(
        &with_builtin,
        "Backplane_CpuRef_backend.so",
        ReasonCode::DuplicateId,
        "backend id CpuRef is already registered from the built-in backend",
    );
    let builtin = with_builtin
        .registry()
        .create_instance("CpuRef")
        .unwrap()
        .unwrap();
    assert_eq!(run_add(&add_workload(&builtin)), vec![15.0, 11.0]);
}

/// A backend whose methods panic: the call fails with `panicked`, naming the method; the
/// backend is marked faulted and not used again; the other backends keep working.
#[test]
fn panicking_methods_fault_only_that_backend() {
    let dir = PluginDir::new();
    dir.add("methods-panic", "Test_PanicMethods_backend.so");
    dir.add("valid-alpha", "Test_TestAlpha_backend.so");
    let rt = runtime_for(dir.as_str());
    assert_eq!(rt.registry().ids(), vec!["PanicMethods", "TestAlpha"]);
    let entry = rt.registry().get("PanicMethods").unwrap();
    let t = TensorInfo::new(&[1], DataType::Float32);
    let err = entry
        .instance()
        .is_layer_supported(
            &LayerDescriptor::MemCopy,
            std::slice::from_ref(&t),
            std::slice::from_ref(&t),
        )
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Panicked);
    assert_eq!(err.method, "is_layer_supported");
    assert_eq!(err.backend, "PanicMethods");
    assert!(
        err.message.contains("is_layer_supported exploded"),
        "{}",
        err.message
    );
    assert!(entry.is_faulted());
    // Not used again: even a method that would work is refused without calling the plugin.
    let again = entry.instance().capabilities().unwrap_err();
    assert_eq!(again.code, ErrorCode::Failed);
    assert!(again.message.contains("faulted"), "{}", again.message);
    assert_eq!(
        entry.create_instance().unwrap_err().reason,
        ReasonCode::Panicked
    );
    // The other backend is unaffected.
    let alpha = rt.registry().create_instance("TestAlpha").unwrap().unwrap();
    assert_eq!(run_add(&add_workload(&alpha)), vec![15.0, 11.0]);
}

#[test]
fn plugin_logs_reach_the_host_logger() {
    let logs = crate::fixtures::capture_logs();
    let dir = PluginDir::new();
    dir.add("valid-alpha", "Test_TestAlpha_backend.so");
    let _rt = runtime_for(dir.as_str());
    assert!(
        logs.contains("INFO TestAlpha backend created"),
        "{:#?}",
        logs.lines()
    );
}

/// Runs this test binary again as a child, with the environment set, for DESIGN §4.1.
fn child_report(env: Option<&str>, option: Option<&str>) -> serde_json::Value {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "runtime::child_prints_report",
        "--nocapture",
        "--test-threads=1",
    ]);
    cmd.env("BP_CHILD", "1");
    match env {
        Some(e) => cmd.env("DYNAMIC_BACKEND_PATHS", e),
        None => cmd.env_remove("DYNAMIC_BACKEND_PATHS"),
    };
    if let Some(o) = option {
        cmd.env("BP_CHILD_OPTION", o);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let json = text
        .split("BP_REPORT_BEGIN")
        .nth(1)
        .and_then(|s| s.split("BP_REPORT_END").next());
    serde_json::from_str(json.unwrap_or_else(|| panic!("no report in {text}"))).unwrap()
}

/// Not a test on its own: prints `Runtime::new`'s report when run as a child by the tests below.
#[test]
fn child_prints_report() {
    if std::env::var_os("BP_CHILD").is_none() {
        return;
    }
    let mut options = CreationOptions::default().without_builtins();
    options.dynamic_backends_path = std::env::var_os("BP_CHILD_OPTION").map(Into::into);
    let rt = Runtime::new(options);
    println!("BP_REPORT_BEGIN{}BP_REPORT_END", rt.report().to_json());
}

fn ids(report: &serde_json::Value) -> Vec<String> {
    report["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap().to_owned())
        .collect()
}

/// DESIGN §4.1: the option beats the environment; an invalid option loads nothing and does
/// not fall back; the environment is used when no option is set.
#[test]
fn option_overrides_environment() {
    let env_dir = PluginDir::new();
    env_dir.add("valid-alpha", "Test_TestAlpha_backend.so");
    let opt_dir = PluginDir::new();
    opt_dir.add("valid-beta", "Test_TestBeta_backend.so");
    assert_eq!(
        ids(&child_report(Some(env_dir.as_str()), None)),
        vec!["TestAlpha"]
    );
    assert_eq!(
        ids(&child_report(
            Some(env_dir.as_str()),
            Some(opt_dir.as_str())
        )),
        vec!["TestBeta"]
    );
    let invalid = format!("{}/missing", opt_dir.as_str());
    let r = child_report(Some(env_dir.as_str()), Some(&invalid));
    assert!(ids(&r).is_empty());
    assert_eq!(r["paths"][0]["status"], "invalid");
    // Environment list rules, end to end.
    let both = format!(
        ":{}::{}:{}",
        env_dir.as_str(),
        opt_dir.as_str(),
        env_dir.as_str()
    );
    assert_eq!(
        ids(&child_report(Some(&both), None)),
        vec!["TestAlpha", "TestBeta"]
    );
    assert!(ids(&child_report(None, None)).is_empty());
}
