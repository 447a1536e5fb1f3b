//! Every optional part of the Backend API through a real plugin (`TestGamma`): memory manager,
//! workload factory with it, backend context hooks, `optimize_subgraph` substitutions, and a
//! custom allocator. Log lines from the plugin prove what ran on its side.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use backplane_api::{
    ActivationDescriptor, ActivationFunction, BackendOptions, DataType, ErrorCode, LayerDescriptor,
    PreCompiledDescriptor, RSlice, RStr, SubgraphLayer, SubgraphTensor, SubgraphView, TensorInfo,
    TensorView, TensorViewMut, Value, WorkloadDesc,
    ffi::{BackendHandle, HostAllocator},
};

use crate::fixtures::{PluginDir, capture_logs, runtime_for};

fn gamma_runtime() -> (PluginDir, backplane::Runtime) {
    let dir = PluginDir::new();
    dir.add("valid-gamma", "Test_TestGamma_backend.so");
    let rt = runtime_for(dir.as_str());
    (dir, rt)
}

fn gamma(rt: &backplane::Runtime) -> BackendHandle {
    rt.registry()
        .create_instance("TestGamma")
        .expect("registered")
        .expect("instance")
}

fn scale_by_2() -> LayerDescriptor {
    LayerDescriptor::PreCompiled(PreCompiledDescriptor {
        backend: "TestGamma".into(),
        operation: "ScaleBy2".into(),
        payload: Default::default(),
    })
}

#[test]
fn memory_manager_and_factory() {
    let (_dir, rt) = gamma_runtime();
    let g = gamma(&rt);
    let mem = g
        .create_memory_manager()
        .unwrap()
        .expect("TestGamma has a memory manager");
    assert_eq!(mem.allocated_bytes().unwrap(), 0);
    mem.acquire().unwrap();
    assert_eq!(mem.allocated_bytes().unwrap(), 4096);
    mem.release().unwrap();
    assert_eq!(mem.allocated_bytes().unwrap(), 0);

    let t = TensorInfo::new(&[3], DataType::Float32);
    let layer = scale_by_2();
    let infos = [t.clone()];
    let consts = [backplane_api::ROption::RNone];
    let desc = WorkloadDesc {
        name: RStr::from_str("scale"),
        layer: &layer,
        inputs: RSlice::from_slice(&infos),
        outputs: RSlice::from_slice(&infos),
        constants: RSlice::from_slice(&consts),
    };
    let factory = g
        .create_workload_factory(Some(&mem), &Default::default())
        .unwrap();
    let w = factory.create_workload(&desc).unwrap();
    let input = [1.0f32, -2.0, 3.5];
    let mut out = [0f32; 3];
    w.execute(
        &[TensorView::new(
            &t,
            backplane_api::bytemuck::cast_slice(&input),
        )],
        &mut [TensorViewMut::new(
            &t,
            backplane_api::bytemuck::cast_slice_mut(&mut out),
        )],
    )
    .unwrap();
    assert_eq!(out, [2.0, -4.0, 7.0]);

    // A wrong tensor count is the backend's error, not a crash.
    let e = w.execute(&[], &mut []).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (ErrorCode::InvalidArgument, "ScaleBy2 takes 1 input, got 0")
    );

    // Without its memory manager the factory refuses, with the backend's message.
    let bare = g
        .create_workload_factory(None, &Default::default())
        .unwrap();
    let e = bare.create_workload(&desc).unwrap_err();
    assert_eq!(
        (e.code, e.method),
        (ErrorCode::InvalidArgument, "create_workload")
    );
    assert_eq!(e.message, "TestGamma needs its memory manager");
}

/// A memory manager made by another copy of the library (another vtable) is refused by the
/// plugin's own check, before it is used.
#[test]
fn foreign_memory_manager_is_refused() {
    let (_dir, rt) = gamma_runtime();
    let other_dir = PluginDir::new();
    other_dir.add("valid-gamma", "Other_TestGamma_backend.so");
    let other_rt = runtime_for(other_dir.as_str());
    let foreign = gamma(&other_rt).create_memory_manager().unwrap().unwrap();
    let e = gamma(&rt)
        .create_workload_factory(Some(&foreign), &Default::default())
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert_eq!(
        e.message,
        "create_workload_factory: the memory manager was not created by this backend"
    );
}

#[test]
fn context_hooks_in_order_and_a_refused_unload() {
    let logs = capture_logs();
    let (_dir, rt) = gamma_runtime();
    let options = BackendOptions::new().with("Tag", Value::Str("ctx7".into()));
    let ctx = gamma(&rt)
        .create_backend_context(&options)
        .unwrap()
        .expect("TestGamma has a context");
    ctx.before_load_network(7).unwrap();
    ctx.after_load_network(7).unwrap();
    ctx.after_enqueue(7).unwrap();
    ctx.before_unload_network(7).unwrap();
    ctx.after_unload_network(7).unwrap();
    let e = ctx.before_unload_network(13).unwrap_err();
    assert_eq!(
        (e.code, e.method, e.message.as_str()),
        (
            ErrorCode::Failed,
            "before_unload_network",
            "network 13 is busy"
        )
    );
    let ours: Vec<String> = logs
        .lines()
        .into_iter()
        .filter(|l| l.contains("TestGamma[ctx7]"))
        .collect();
    assert_eq!(
        ours,
        [
            "INFO TestGamma[ctx7] before_load_network 7",
            "INFO TestGamma[ctx7] after_load_network 7",
            "INFO TestGamma[ctx7] after_enqueue 7",
            "INFO TestGamma[ctx7] before_unload_network 7",
            "INFO TestGamma[ctx7] after_unload_network 7",
            "INFO TestGamma[ctx7] before_unload_network 13",
        ]
    );
}

#[test]
fn optimize_subgraph_substitutes_fails_and_leaves_untouched() {
    let (_dir, rt) = gamma_runtime();
    let t = TensorInfo::new(&[4], DataType::Float32);
    let relu = LayerDescriptor::Activation(ActivationDescriptor {
        function: ActivationFunction::ReLU,
        a: 0.0,
        b: 0.0,
    });
    let layer = |id, name: &str, descriptor: LayerDescriptor, i: &[u32], o: &[u32]| SubgraphLayer {
        id,
        name: name.into(),
        descriptor,
        inputs: i.iter().copied().collect(),
        outputs: o.iter().copied().collect(),
    };
    let view = SubgraphView {
        layers: vec![
            layer(1, "relu_a", relu.clone(), &[10], &[11]),
            layer(2, "relu_b", relu.clone(), &[11], &[12]),
            layer(3, "copy", LayerDescriptor::MemCopy, &[12], &[13]),
            layer(4, "relu_c", relu, &[13], &[14]),
        ]
        .into(),
        tensors: (10..15)
            .map(|id| SubgraphTensor {
                id,
                info: t.clone(),
                value: backplane_api::ROption::RNone,
            })
            .collect(),
        inputs: vec![10].into(),
        outputs: vec![14].into(),
    };
    let views = gamma(&rt)
        .optimize_subgraph(&view, &Default::default())
        .unwrap();
    assert_eq!(views.substitutions.len(), 1);
    let s = &views.substitutions[0];
    assert_eq!(s.replaced.as_slice(), [1, 2]);
    assert_eq!(s.replacement.name.as_str(), "relu_a+relu_b");
    assert_eq!(s.replacement.inputs.as_slice(), [10]);
    assert_eq!(s.replacement.outputs.as_slice(), [12]);
    match &s.replacement.descriptor {
        LayerDescriptor::PreCompiled(p) => {
            assert_eq!(
                (p.backend.as_str(), p.operation.as_str()),
                ("TestGamma", "ReluRelu")
            );
            assert_eq!(p.payload.as_slice(), [1, 2, 3]);
        }
        other => panic!("expected PreCompiled, got {other:?}"),
    }
    assert_eq!(views.failed.as_slice(), [3]);
    assert_eq!(views.untouched.as_slice(), [4]);

    // The default of a backend that does not optimise: everything untouched.
    let cpu = BackendHandle::from_builtin(
        backplane_ref::CpuRef::new(),
        "CpuRef",
        backplane_api::ffi::FaultState::new(),
    );
    let views = cpu.optimize_subgraph(&view, &Default::default()).unwrap();
    assert!(views.substitutions.is_empty() && views.failed.is_empty());
    assert_eq!(views.untouched.as_slice(), [1, 2, 3, 4]);
}

/// Counts what the plugin allocates through the application's allocator.
#[derive(Default)]
struct CountingAllocator {
    allocs: AtomicUsize,
    frees: AtomicUsize,
}

impl HostAllocator for CountingAllocator {
    fn allocate(&self, size: usize, align: usize) -> *mut u8 {
        self.allocs.fetch_add(1, Ordering::SeqCst);
        let layout = std::alloc::Layout::from_size_align(size, align).unwrap();
        // SAFETY: a non-zero size is guaranteed by `CustomAllocator::allocate`.
        unsafe { std::alloc::alloc(layout) }
    }
    fn free(&self, ptr: *mut u8, size: usize, align: usize) {
        self.frees.fetch_add(1, Ordering::SeqCst);
        let layout = std::alloc::Layout::from_size_align(size, align).unwrap();
        // SAFETY: `ptr` came from `allocate` above with the same layout.
        unsafe { std::alloc::dealloc(ptr, layout) }
    }
}

#[test]
fn custom_allocator_is_used_through_the_abi() {
    let logs = capture_logs();
    let (_dir, rt) = gamma_runtime();
    let alloc = Arc::new(CountingAllocator::default());
    assert!(gamma(&rt).use_custom_allocator(alloc.clone()).unwrap());
    assert_eq!(
        (
            alloc.allocs.load(Ordering::SeqCst),
            alloc.frees.load(Ordering::SeqCst)
        ),
        (1, 1)
    );
    assert!(logs.contains("INFO TestGamma allocated 64 bytes through the custom allocator"));
    // A backend that declines says so.
    let dir = PluginDir::new();
    dir.add("valid-beta", "Test_TestBeta_backend.so");
    let beta_rt = runtime_for(dir.as_str());
    let beta = beta_rt
        .registry()
        .create_instance("TestBeta")
        .unwrap()
        .unwrap();
    assert!(!beta.use_custom_allocator(alloc).unwrap());
}
