//! The fault matrix (tests/plugins/faults): for every entry point of the backend, memory
//! manager, workload factory, workload and context tables, one plugin that panics in it and
//! (where the method can return one) one that returns an error from it, plus one that panics
//! in each destructor. Each goes through the same life: discovery, an allocator offer,
//! optimisation with the plugin preferred over CpuRef, load, a memory query, two inferences,
//! unload. The fault must surface at the call that hits it, as `panicked` or the backend's
//! error, naming the method and the backend; a backend that panicked is faulted, shown so in
//! the report and not called again; a CpuRef network loaded before keeps running, and a later
//! optimisation falls back to CpuRef.

use std::sync::Arc;

use backplane::{
    CreationOptions, ExecuteError, NetworkId, OptimizerOptions, ReasonCode, Runtime,
    api::ffi::{CallError, HostAllocator},
    plugins::paths::PathSource,
};
use backplane_api::{ActivationFunction::ReLU, ErrorCode};

use crate::fixtures::{
    PluginDir, assert_registered, assert_rejected, capture_logs, chain, enqueue_single, f32t,
    fault_plugin,
};

/// How the plugin's method fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Panic,
    Error,
}

/// Where in the life of a network a method is first called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Registration (`capabilities`): the file is rejected.
    Register,
    /// `Runtime::use_custom_allocator`.
    Offer,
    /// `Runtime::optimize`: the refusal is in the explanation, not an error.
    Optimize,
    /// `Runtime::load_network`.
    Load,
    /// `Runtime::backend_memory`.
    Memory,
    /// `Runtime::enqueue`.
    Enqueue,
    /// `Runtime::unload_network`.
    Unload,
    /// A destructor: caught and logged inside the plugin, nothing fails.
    Drop,
}

/// Every entry point: the `Faulty` method's name (as the example files spell it), the name
/// the host reports, the stage that first calls it, and whether it can return an error.
const METHODS: [(&str, &str, Stage, bool); 22] = [
    ("Capabilities", "capabilities", Stage::Register, false),
    (
        "UseCustomAllocator",
        "use_custom_allocator",
        Stage::Offer,
        false,
    ),
    (
        "IsLayerSupported",
        "is_layer_supported",
        Stage::Optimize,
        false,
    ),
    (
        "OptimizeSubgraph",
        "optimize_subgraph",
        Stage::Optimize,
        true,
    ),
    (
        "CreateMemoryManager",
        "create_memory_manager",
        Stage::Load,
        true,
    ),
    (
        "CreateWorkloadFactory",
        "create_workload_factory",
        Stage::Load,
        true,
    ),
    (
        "CreateBackendContext",
        "create_backend_context",
        Stage::Load,
        true,
    ),
    (
        "BeforeLoadNetwork",
        "before_load_network",
        Stage::Load,
        true,
    ),
    ("Acquire", "acquire", Stage::Load, true),
    ("CreateWorkload", "create_workload", Stage::Load, true),
    ("AfterLoadNetwork", "after_load_network", Stage::Load, true),
    ("AllocatedBytes", "allocated_bytes", Stage::Memory, false),
    ("Execute", "execute", Stage::Enqueue, true),
    ("AfterEnqueue", "after_enqueue", Stage::Enqueue, true),
    (
        "BeforeUnloadNetwork",
        "before_unload_network",
        Stage::Unload,
        true,
    ),
    ("Release", "release", Stage::Unload, true),
    (
        "AfterUnloadNetwork",
        "after_unload_network",
        Stage::Unload,
        true,
    ),
    ("DropBackend", "backend", Stage::Drop, false),
    ("DropMemoryManager", "memory manager", Stage::Drop, false),
    (
        "DropWorkloadFactory",
        "workload factory",
        Stage::Drop,
        false,
    ),
    ("DropWorkload", "workload", Stage::Drop, false),
    ("DropBackendContext", "backend context", Stage::Drop, false),
];

/// One plugin of the matrix.
#[derive(Debug, Clone, Copy)]
struct Case {
    mode: Mode,
    /// `CamelCase` method, as in the plugin's id.
    camel: &'static str,
    /// The method as the host names it (for a destructor: the object's kind).
    method: &'static str,
    stage: Stage,
}

impl Case {
    fn id(&self) -> String {
        format!("{:?}{}", self.mode, self.camel)
    }

    fn example(&self) -> String {
        let mut snake = String::new();
        for c in self.camel.chars() {
            if c.is_ascii_uppercase() && !snake.is_empty() {
                snake.push('_');
            }
            snake.push(c.to_ascii_lowercase());
        }
        format!(
            "fault_{}_{snake}",
            format!("{:?}", self.mode).to_lowercase()
        )
    }

    /// The message the plugin fails with.
    fn message(&self) -> String {
        match self.mode {
            Mode::Panic => format!("{} exploded", self.method),
            Mode::Error => format!("{} refused", self.method),
        }
    }

    fn code(&self) -> ErrorCode {
        match self.mode {
            Mode::Panic => ErrorCode::Panicked,
            Mode::Error => ErrorCode::Failed,
        }
    }

    /// Checks a call error: this method, this backend, this failure.
    fn check(&self, e: &CallError) {
        assert_eq!(
            (e.backend.as_str(), e.method, e.code),
            (self.id().as_str(), self.method, self.code()),
            "{e}"
        );
        assert!(e.message.contains(&self.message()), "{e}");
    }

    /// Checks an error from the runtime: a backend error about the network as a whole.
    fn check_execute(&self, e: &ExecuteError) {
        match e {
            ExecuteError::Backend { error, .. } => self.check(error),
            other => panic!("{self:?}: expected a backend error, got {other:?}"),
        }
    }
}

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (camel, method, stage, fallible) in METHODS {
        v.push(Case {
            mode: Mode::Panic,
            camel,
            method,
            stage,
        });
        if fallible {
            v.push(Case {
                mode: Mode::Error,
                camel,
                method,
                stage,
            });
        }
    }
    v
}

/// An application allocator that has no memory to give (a backend may still decline it).
struct NoMemory;

impl HostAllocator for NoMemory {
    fn allocate(&self, _: usize, _: usize) -> *mut u8 {
        std::ptr::null_mut()
    }
    fn free(&self, _: *mut u8, _: usize, _: usize) {}
}

const INPUT: [f32; 4] = [-1.0, 2.0, -3.0, 4.0];
const RELU: [f32; 4] = [0.0, 2.0, 0.0, 4.0];

/// A loaded `x -> ReLU -> y`: its id, the backend of the ReLU, and the optimiser's
/// explanation.
struct Loaded {
    net: NetworkId,
    on: String,
    explain: String,
}

/// Optimises `x -> ReLU -> y` for `prefs` and loads it.
fn load_relu(rt: &Runtime, prefs: &[&str]) -> Result<Loaded, ExecuteError> {
    let opt = rt
        .optimize(
            &chain(&[4], &[("relu", ReLU)]),
            prefs,
            &OptimizerOptions::default(),
        )
        .expect("CpuRef runs every layer");
    Ok(Loaded {
        on: opt
            .network()
            .layers()
            .iter()
            .zip(opt.assignments())
            .find(|(l, _)| l.name == "relu")
            .map(|(_, a)| a.backend.clone())
            .expect("a layer relu"),
        explain: opt.explain(),
        net: rt.load_network(&opt)?,
    })
}

fn run(rt: &Runtime, id: NetworkId) -> Result<Vec<f32>, ExecuteError> {
    let t = f32t(&[4]);
    enqueue_single(rt, id, &t, &INPUT, &t)
}

/// This plugin's calls, in order, as its log lines tell (`"<Id>: <method>"`).
fn calls(id: &str) -> Vec<String> {
    let prefix = format!("INFO {id}: ");
    capture_logs()
        .lines()
        .iter()
        .filter_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
        .collect()
}

/// One case's life; returns the stage at which the fault surfaced. With `out_of_process` the
/// plugin runs in its server: its log lines stay in that process (so the checks that read
/// them are skipped), and the allocator offer is declined by the host without asking it.
fn live(case: &Case, out_of_process: bool) -> Stage {
    capture_logs();
    let id = case.id();
    let file = format!("Test_{id}_backend.so");
    let dir = PluginDir::new();
    dir.copy(&fault_plugin(&case.example()), &file);
    let options = if out_of_process {
        crate::fixtures::out_of_process(&[&id], std::time::Duration::from_secs(60))
    } else {
        CreationOptions::default()
    };
    let rt = Runtime::with_path_list(options, PathSource::Option, dir.as_str());
    let life = Life {
        case,
        rt: &rt,
        out_of_process,
    };
    if case.stage == Stage::Register {
        assert_rejected(
            &rt,
            &file,
            ReasonCode::Panicked,
            &format!("capabilities panicked: {}", case.message()),
        );
        assert_eq!(rt.registry().ids(), ["CpuRef"]);
        return Stage::Register;
    }
    assert_registered(&rt, &file, &id);
    let prefs = [id.as_str(), "CpuRef"];
    // A network on CpuRef alone, loaded before anything faults, must keep running.
    let bystander = load_relu(&rt, &["CpuRef"]).unwrap().net;

    let offered = rt.use_custom_allocator(&id, Arc::new(NoMemory));
    if case.stage == Stage::Offer && !out_of_process {
        case.check_execute(&offered.unwrap_err());
        return life.after_fault(bystander, Stage::Offer);
    }
    assert_eq!(offered, Ok(false), "Faulty declines allocators");

    let Loaded { net, on, explain } = match load_relu(&rt, &prefs) {
        Ok(loaded) => loaded,
        Err(e) => {
            assert_eq!(case.stage, Stage::Load, "{case:?}: {e}");
            case.check_execute(&e);
            if !out_of_process {
                check_rolled_back(case);
            }
            return life.after_fault(bystander, Stage::Load);
        }
    };
    if case.stage == Stage::Optimize {
        // Either way the explanation says what failed, and the network runs.
        let failure = format!(
            "backend {id}: {} {}: {}",
            case.method,
            case.code(),
            case.message()
        );
        assert!(
            explain.contains(&failure),
            "{case:?}: no {failure:?} in\n{explain}"
        );
        let expected_on = match case.mode {
            // A panic faults the backend: its layers go to the next preferred backend.
            Mode::Panic => "CpuRef",
            // An error leaves the subgraph untouched, still on the plugin.
            Mode::Error => id.as_str(),
        };
        assert_eq!(on, expected_on, "{case:?}\n{explain}");
        assert_eq!(run(&rt, net).unwrap(), RELU);
        rt.unload_network(net).unwrap();
        return life.after_fault(bystander, Stage::Optimize);
    }
    assert_eq!(on, id, "{case:?}");

    let memory = rt.backend_memory(net).unwrap();
    let (_, bytes) = memory.iter().find(|(b, _)| *b == id).unwrap();
    if case.stage == Stage::Memory {
        case.check(bytes.as_ref().unwrap_err());
        rt.unload_network(net).unwrap();
        return life.after_fault(bystander, Stage::Memory);
    }
    assert_eq!(bytes, &Ok(Some(0)));

    for _ in 0..2 {
        if let Err(e) = run(&rt, net) {
            assert_eq!(case.stage, Stage::Enqueue, "{case:?}: {e}");
            case.check_execute(&e);
            // The network can still be unloaded (a faulted backend's hooks are skipped).
            rt.unload_network(net).unwrap();
            return life.after_fault(bystander, Stage::Enqueue);
        }
    }

    match rt.unload_network(net) {
        Ok(()) => {}
        Err(ExecuteError::UnloadRefused {
            network,
            backend,
            reason,
        }) => {
            assert_eq!(
                (case.mode, case.method),
                (Mode::Error, "before_unload_network")
            );
            assert_eq!((network, backend.as_str()), (net, id.as_str()));
            assert!(reason.contains(&case.message()), "{reason}");
            // Still loaded, still running.
            assert_eq!(run(&rt, net).unwrap(), RELU);
            return life.after_fault(bystander, Stage::Unload);
        }
        Err(e) => {
            assert_eq!(case.stage, Stage::Unload, "{case:?}: {e}");
            case.check_execute(&e);
            // Gone all the same.
            assert_eq!(run(&rt, net), Err(ExecuteError::UnknownNetwork(net)));
            return life.after_fault(bystander, Stage::Unload);
        }
    }
    if !(out_of_process && case.stage == Stage::Offer) {
        assert_eq!(case.stage, Stage::Drop, "{case:?}: nothing failed");
    }
    life.after_fault(bystander, Stage::Drop)
}

/// After a failed load, what the plugin had set up was undone: memory it acquired is
/// released, and a context told `before_load_network` is told `after_unload_network`. (A
/// panicked backend is not called again, so this is checked for errors.)
fn check_rolled_back(case: &Case) {
    if case.mode == Mode::Panic {
        return;
    }
    let calls = calls(&case.id());
    let at = calls
        .iter()
        .rposition(|c| c == case.method)
        .unwrap_or_else(|| panic!("{case:?}: the failing call is not logged: {calls:?}"));
    let before: Vec<&str> = calls[..at].iter().map(String::as_str).collect();
    let after: Vec<&str> = calls[at + 1..].iter().map(String::as_str).collect();
    let acquired = before.contains(&"acquire");
    let told = before.contains(&"before_load_network");
    assert_eq!(after.contains(&"release"), acquired, "{case:?}: {calls:?}");
    assert_eq!(
        after.contains(&"after_unload_network"),
        told,
        "{case:?}: {calls:?}"
    );
}

/// One case's runtime.
struct Life<'a> {
    case: &'a Case,
    rt: &'a Runtime,
    out_of_process: bool,
}

impl Life<'_> {
    /// What must hold after the fault: a panicked backend is faulted, says so in the report, is
    /// not called again, and a new optimisation falls back to CpuRef; the bystander runs.
    fn after_fault(&self, bystander: NetworkId, stage: Stage) -> Stage {
        let (case, rt) = (self.case, self.rt);
        let id = case.id();
        let entry = rt.registry().get(&id).unwrap();
        let report = rt.report();
        let line = report.backends.iter().find(|b| b.id == id).unwrap();
        let panicked = case.mode == Mode::Panic && stage != Stage::Drop;
        assert_eq!(entry.is_faulted(), panicked, "{case:?}");
        assert_eq!(line.faulted, panicked, "{case:?}");
        if panicked {
            let why = line.fault.as_deref().unwrap();
            assert_eq!(
                why,
                format!("{} panicked: {}", case.method, case.message()),
                "{case:?}"
            );
            assert!(
                report.to_json().contains(&format!("\"fault\": \"{why}\"")),
                "{}",
                report.to_json()
            );
            let calls_before = calls(&id).len();
            // Refused by the host's handle, without entering the plugin.
            let refused = entry.instance().capabilities().unwrap_err();
            assert!(refused.message.contains("backend is faulted"), "{refused}");
            let Loaded { net, on, .. } = load_relu(rt, &[id.as_str(), "CpuRef"]).unwrap();
            assert_eq!(on, "CpuRef", "{case:?}");
            assert_eq!(run(rt, net).unwrap(), RELU);
            rt.unload_network(net).unwrap();
            if !self.out_of_process {
                assert_eq!(calls(&id).len(), calls_before, "{case:?}: called again");
            }
        } else {
            assert_eq!(line.fault, None);
        }
        assert_eq!(run(rt, bystander).unwrap(), RELU, "{case:?}");
        rt.unload_network(bystander).unwrap();
        stage
    }
}

/// Every plugin of the matrix, in turn: the fault surfaces at the stage that calls the method.
#[test]
fn every_entry_point_fault_is_reported_and_contained() {
    let cases = cases();
    assert_eq!(cases.len(), 35);
    for case in &cases {
        assert_eq!(live(case, false), case.stage, "{case:?}");
    }
    // Destructors: the panics were caught inside the plugin and logged through the host.
    let lines = capture_logs().lines();
    for (camel, kind, stage, _) in METHODS {
        if stage == Stage::Drop {
            let expected = format!("ERROR dropping a {kind} panicked: drop {kind} exploded");
            assert!(
                lines.contains(&expected),
                "{camel}: no {expected:?} in the log"
            );
        }
    }
}

/// The same matrix with each plugin out of process: every fault surfaces at the same stage, as
/// the same error, but the allocator offer, which the host declines for an out-of-process
/// backend without asking it (its allocator lives in the host's memory): nothing fails there.
#[test]
fn every_entry_point_fault_is_contained_out_of_process() {
    let cases = cases();
    std::thread::scope(|s| {
        for chunk in cases.chunks(cases.len().div_ceil(4)) {
            s.spawn(move || {
                for case in chunk {
                    let expected = match case.stage {
                        Stage::Offer => Stage::Drop,
                        other => other,
                    };
                    assert_eq!(live(case, true), expected, "{case:?}");
                }
            });
        }
    });
}
