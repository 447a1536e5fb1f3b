//! What the unit tests share: a deterministic generator, building workloads through the
//! factory (layer support included), running them on a NaN-filled output (an element left
//! unwritten fails every comparison) and comparing with a relative tolerance. Each test keeps
//! its own oracle, written from the operator's definition with naive loops.

use std::{cell::Cell, fmt::Display, sync::Arc};

use backplane_api::{
    BackendResult, DataType, LayerDescriptor, ROption, RSlice, RStr, TensorInfo, TensorView,
    TensorViewMut, Workload, WorkloadDesc, WorkloadFactory, bytemuck,
};

use crate::{memory::Arena, workload_factory::CpuFastWorkloadFactory};

/// A deterministic generator (the kit's seeded LCG, seeded by its field).
pub(crate) use backplane_backend_kit::testing::Lcg;

/// A Float32 tensor of `shape`.
pub(crate) fn f32t(shape: &[u32]) -> TensorInfo {
    TensorInfo::new(shape, DataType::Float32)
}

/// The number of elements of `shape`.
pub(crate) fn numel(shape: &[u32]) -> usize {
    shape.iter().map(|&d| d as usize).product()
}

/// `shape` as `u32`s.
pub(crate) fn u32s(shape: &[usize]) -> Vec<u32> {
    shape.iter().map(|&d| d as u32).collect()
}

thread_local! {
    /// The threads of the workloads the tests build on this thread ([`with_threads`]).
    static THREADS: Cell<usize> = const { Cell::new(1) };
}

/// Runs `f` with the workloads it builds using `threads` threads (one otherwise).
pub(crate) fn with_threads<T>(threads: usize, f: impl FnOnce() -> T) -> T {
    let before = THREADS.replace(threads);
    let result = f();
    THREADS.set(before);
    result
}

/// The factory the tests use: its own arena, one thread unless [`with_threads`] says more.
fn factory() -> CpuFastWorkloadFactory {
    CpuFastWorkloadFactory::new(Arc::new(Arena::new()), THREADS.get())
}

/// The workload of `layer` over `inputs` (the constant ones with their bytes) and `outputs`.
pub(crate) fn make_with(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    constants: &[Option<&[u8]>],
    outputs: &[TensorInfo],
) -> BackendResult<Box<dyn Workload>> {
    let constants: Vec<ROption<RSlice<'_, u8>>> = constants
        .iter()
        .map(|c| c.map(RSlice::from_slice).into())
        .collect();
    factory().create_workload(&WorkloadDesc {
        name: RStr::from("test"),
        layer,
        inputs: RSlice::from_slice(inputs),
        outputs: RSlice::from_slice(outputs),
        constants: RSlice::from_slice(&constants),
    })
}

/// The workload of `layer`, no input constant.
pub(crate) fn make(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> BackendResult<Box<dyn Workload>> {
    make_with(layer, inputs, &vec![None; inputs.len()], outputs)
}

/// Builds `layer` for `(shape, data, constant)` inputs and an output of `out_shape`, runs it
/// once on a NaN-filled output and returns that.
pub(crate) fn run_with_constants(
    layer: &LayerDescriptor,
    inputs: &[(&[u32], &[f32], bool)],
    out_shape: &[u32],
) -> Vec<f32> {
    let infos: Vec<TensorInfo> = inputs
        .iter()
        .map(|&(s, _, c)| if c { f32t(s).constant() } else { f32t(s) })
        .collect();
    let constants: Vec<Option<&[u8]>> = inputs
        .iter()
        .map(|&(_, d, c)| c.then(|| bytemuck::cast_slice(d)))
        .collect();
    let out_info = f32t(out_shape);
    let workload = make_with(layer, &infos, &constants, std::slice::from_ref(&out_info)).unwrap();
    let views: Vec<TensorView<'_>> = infos
        .iter()
        .zip(inputs)
        .map(|(info, &(_, d, _))| TensorView::new(info, bytemuck::cast_slice(d)))
        .collect();
    let mut out = vec![f32::NAN; numel(out_shape)];
    workload
        .execute(
            &views,
            &mut [TensorViewMut::new(
                &out_info,
                bytemuck::cast_slice_mut(&mut out),
            )],
        )
        .unwrap();
    out
}

/// [`run_with_constants`] with no input constant.
pub(crate) fn run(
    layer: &LayerDescriptor,
    inputs: &[(&[u32], &[f32])],
    out_shape: &[u32],
) -> Vec<f32> {
    let inputs: Vec<(&[u32], &[f32], bool)> = inputs.iter().map(|&(s, d)| (s, d, false)).collect();
    run_with_constants(layer, &inputs, out_shape)
}

/// Asserts that each element of `got` is within `tol · (1 + scale[i])` of `want[i]`: for a sum
/// of products, `scale` is the sum of their magnitudes (the sum's condition), so the bound
/// holds for any order of summation (a GEMM's blocking differs by instruction set).
#[track_caller]
pub(crate) fn assert_close_to_scale(
    got: &[f32],
    want: &[f64],
    scale: &[f64],
    tol: f64,
    what: &str,
) {
    assert_eq!(
        (got.len(), scale.len()),
        (want.len(), want.len()),
        "{what}: length"
    );
    for (i, ((&g, &w), &s)) in got.iter().zip(want).zip(scale).enumerate() {
        assert!(
            (f64::from(g) - w).abs() <= tol * (1.0 + s),
            "{what}: element {i}: got {g}, want {w} (Σ|terms| {s})"
        );
    }
}

/// Asserts that `got` has `want`'s length and each element is within `rel_tol * (1 + |want|)`
/// of it (NaN never is); `what` names the case.
#[track_caller]
pub(crate) fn assert_close<T: Into<f64> + Copy + Display>(
    got: &[f32],
    want: &[T],
    rel_tol: f64,
    what: &str,
) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let wf: f64 = w.into();
        assert!(
            (f64::from(g) - wf).abs() <= rel_tol * (1.0 + wf.abs()),
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}
