//! What the workload tests share: a deterministic generator, building a workload through
//! [`CpuRefWorkloadFactory`] (layer support included), running it on an output that starts as
//! NaN (so an element left unwritten fails every comparison), and comparing with a relative
//! tolerance. Each test module keeps its own oracle, written from the operator's definition.

use std::fmt::Display;

use backplane_api::{
    BackendResult, DataType, ErrorCode, LayerDescriptor, ROption, RSlice, RStr, TensorInfo,
    TensorView, TensorViewMut, Workload, WorkloadDesc, WorkloadFactory, bytemuck,
};

use crate::workload_factory::CpuRefWorkloadFactory;

/// A deterministic pseudo-random generator (a 64-bit LCG; each value is made of the top 24
/// bits of the state), seeded by its field.
#[derive(Debug, Clone)]
pub(crate) struct Lcg(
    /// The state: the seed before the first value.
    pub(crate) u64,
);

impl Lcg {
    /// The next value in `[lo, hi)`.
    pub(crate) fn next_in(&mut self, lo: f32, hi: f32) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let u = (self.0 >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }

    /// The next `n` values in `[lo, hi)`.
    pub(crate) fn vec_in(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.next_in(lo, hi)).collect()
    }

    /// The next `n` values in `[-1, 1)`.
    pub(crate) fn vec(&mut self, n: usize) -> Vec<f32> {
        self.vec_in(n, -1.0, 1.0)
    }
}

/// A Float32 tensor of `shape`.
pub(crate) fn f32t(shape: &[u32]) -> TensorInfo {
    TensorInfo::new(shape, DataType::Float32)
}

/// The number of elements of `shape` (1 for a scalar).
pub(crate) fn numel(shape: &[u32]) -> usize {
    shape.iter().product::<u32>() as usize
}

/// `shape` as `u32` dimensions.
pub(crate) fn u32s(shape: &[usize]) -> Vec<u32> {
    shape.iter().map(|&d| d as u32).collect()
}

/// "No constant value" for up to this many inputs.
static NO_CONSTANTS: [ROption<RSlice<'static, u8>>; 8] = [ROption::RNone; 8];

/// The description of `layer` over `inputs` and `outputs`, none of the inputs constant (as
/// CpuRef reads every input at execution).
pub(crate) fn desc<'a>(
    layer: &'a LayerDescriptor,
    inputs: &'a [TensorInfo],
    outputs: &'a [TensorInfo],
) -> WorkloadDesc<'a> {
    WorkloadDesc {
        name: RStr::from("test"),
        layer,
        inputs: RSlice::from_slice(inputs),
        outputs: RSlice::from_slice(outputs),
        constants: RSlice::from_slice(&NO_CONSTANTS[..inputs.len()]),
    }
}

/// The workload of `layer` through the factory, layer support included.
pub(crate) fn make(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> BackendResult<Box<dyn Workload>> {
    CpuRefWorkloadFactory.create_workload(&desc(layer, inputs, outputs))
}

/// An output buffer for `info`, every element NaN.
pub(crate) fn nan_output(info: &TensorInfo) -> Vec<f32> {
    let n = info
        .num_elements()
        .expect("the output's element count overflows");
    vec![f32::NAN; n]
}

/// Executes `workload` on views of `inputs` (each a tensor and its data) and of the one
/// output `out_info`, written to `out`.
pub(crate) fn execute(
    workload: &dyn Workload,
    inputs: &[(&TensorInfo, &[f32])],
    out_info: &TensorInfo,
    out: &mut [f32],
) -> BackendResult<()> {
    let views: Vec<TensorView<'_>> = inputs
        .iter()
        .map(|&(info, data)| TensorView::new(info, bytemuck::cast_slice(data)))
        .collect();
    workload.execute(
        &views,
        &mut [TensorViewMut::new(out_info, bytemuck::cast_slice_mut(out))],
    )
}

/// Asserts that `result` is an [`ErrorCode::InvalidArgument`] error.
#[track_caller]
pub(crate) fn assert_invalid_argument(result: BackendResult<()>) {
    assert_eq!(result.unwrap_err().code, ErrorCode::InvalidArgument);
}

/// Builds the workload of `layer` through the factory for the given `(shape, data)` inputs and
/// an output of `out_shape`, and runs it once on a NaN-filled output, which it returns.
pub(crate) fn try_run(
    layer: &LayerDescriptor,
    inputs: &[(&[u32], &[f32])],
    out_shape: &[u32],
) -> BackendResult<Vec<f32>> {
    let infos: Vec<TensorInfo> = inputs.iter().map(|(s, _)| f32t(s)).collect();
    let out_info = f32t(out_shape);
    let workload = make(layer, &infos, std::slice::from_ref(&out_info))?;
    let views: Vec<(&TensorInfo, &[f32])> = infos
        .iter()
        .zip(inputs)
        .map(|(info, &(_, data))| (info, data))
        .collect();
    let mut out = nan_output(&out_info);
    execute(&*workload, &views, &out_info, &mut out)?;
    Ok(out)
}

/// [`try_run`] for a layer that must be supported and run.
pub(crate) fn run(
    layer: &LayerDescriptor,
    inputs: &[(&[u32], &[f32])],
    out_shape: &[u32],
) -> Vec<f32> {
    try_run(layer, inputs, out_shape).unwrap()
}

/// The type of the expected values of [`assert_close`], which compares in its precision.
pub(crate) trait Expected: Copy + Display {
    /// Whether `got` is within `rel_tol * (1 + |want|)` of `want`.
    fn is_close(got: f32, want: Self, rel_tol: Self) -> bool;
}

impl Expected for f32 {
    fn is_close(got: f32, want: f32, rel_tol: f32) -> bool {
        (got - want).abs() <= rel_tol * (1.0 + want.abs())
    }
}

impl Expected for f64 {
    fn is_close(got: f32, want: f64, rel_tol: f64) -> bool {
        (f64::from(got) - want).abs() <= rel_tol * (1.0 + want.abs())
    }
}

/// Asserts that `got` has the length of `want` and that every element is within
/// `rel_tol * (1 + |want|)` of it (NaN never is); `what` names the case in a failure.
pub(crate) fn assert_close<T: Expected>(got: &[f32], want: &[T], rel_tol: T, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            T::is_close(g, w, rel_tol),
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

/// `x`, NCHW with dimensions `[n, c, h, w]`, in NHWC order.
pub(crate) fn to_nhwc(x: &[f32], [n, c, h, w]: [usize; 4]) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for ni in 0..n {
        for yi in 0..h {
            for xi in 0..w {
                for ci in 0..c {
                    out.push(x[((ni * c + ci) * h + yi) * w + xi]);
                }
            }
        }
    }
    out
}

/// A tensor of `shape` and data type `data_type`.
pub(crate) fn typed(shape: &[u32], data_type: DataType) -> TensorInfo {
    TensorInfo::new(shape, data_type)
}

/// A tensor's bytes in a buffer aligned for 8-byte elements.
#[derive(Debug, Clone)]
pub(crate) struct Bytes {
    words: Vec<u64>,
    len: usize,
}

impl Bytes {
    /// The elements' bytes.
    pub(crate) fn of<T: backplane_api::Element>(values: &[T]) -> Self {
        let bytes: &[u8] = bytemuck::cast_slice(values);
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Self {
            words,
            len: bytes.len(),
        }
    }

    /// The bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }

    /// The elements as `T`.
    pub(crate) fn to_vec<T: backplane_api::Element>(&self) -> Vec<T> {
        bytemuck::cast_slice(self.bytes()).to_vec()
    }
}

/// Builds the workload of `layer` through the factory for typed `inputs` and one output
/// `out`, and runs it once on an output whose bytes all start as 0xA5; returns the output.
pub(crate) fn try_run_typed(
    layer: &LayerDescriptor,
    inputs: &[(TensorInfo, Bytes)],
    out: &TensorInfo,
) -> BackendResult<Bytes> {
    let infos: Vec<TensorInfo> = inputs.iter().map(|(i, _)| i.clone()).collect();
    let workload = make(layer, &infos, std::slice::from_ref(out))?;
    let views: Vec<TensorView<'_>> = inputs
        .iter()
        .map(|(info, data)| TensorView::new(info, data.bytes()))
        .collect();
    let n = out.num_bytes().expect("the output's size overflows");
    let mut result = Bytes {
        words: vec![0xA5A5_A5A5_A5A5_A5A5; n.div_ceil(8)],
        len: n,
    };
    let bytes = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut result.words)[..n];
    workload.execute(&views, &mut [TensorViewMut::new(out, bytes)])?;
    Ok(result)
}
