//! What the quantised workload tests share: a seeded xorshift generator, quantised tensor
//! infos, and running a workload on byte buffers. Each test keeps its own oracle, written
//! from the definitions in the module doc of `quantized` without calling the kernels'
//! helpers.

use backplane_api::{
    BackendResult, DataType, LayerDescriptor, PerAxisQuantization, Quantization, ROption,
    TensorInfo, bytemuck,
};

use crate::workloads::test_support::{Bytes, try_run_typed};

/// A xorshift64 generator, seeded by its field (never 0).
#[derive(Debug, Clone)]
pub(crate) struct XorShift(pub(crate) u64);

impl XorShift {
    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A value in `lo..=hi`.
    pub(crate) fn int(&mut self, lo: i32, hi: i32) -> i32 {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as i32
    }

    /// `n` bytes of a quantised type (`signed` for the i8 types), uniform over its range.
    pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }

    /// A value in `[lo, hi)`.
    pub(crate) fn float(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }
}

/// A per-tensor quantised tensor.
pub(crate) fn qt(shape: &[u32], data_type: DataType, scale: f32, offset: i32) -> TensorInfo {
    TensorInfo::new(shape, data_type).with_quantization(Quantization::per_tensor(scale, offset))
}

/// A per-axis quantised tensor.
pub(crate) fn qt_axis(
    shape: &[u32],
    data_type: DataType,
    axis: u32,
    scales: &[f32],
    offset: i32,
) -> TensorInfo {
    TensorInfo::new(shape, data_type).with_quantization(Quantization {
        scale: 0.0,
        offset,
        per_axis: ROption::RSome(PerAxisQuantization {
            axis,
            scales: scales.to_vec().into(),
        }),
    })
}

/// A byte's value in a quantised type: signed for the i8 types.
pub(crate) fn value(data_type: DataType, b: u8) -> i32 {
    match data_type {
        DataType::QAsymmU8 => i32::from(b),
        _ => i32::from(b as i8),
    }
}

/// The byte storing `v` (already in range) in a quantised type.
pub(crate) fn byte(data_type: DataType, v: i32) -> u8 {
    match data_type {
        DataType::QAsymmU8 => u8::try_from(v).expect("in range"),
        _ => i8::try_from(v).expect("in range") as u8,
    }
}

/// `i32` values as bytes.
pub(crate) fn i32_bytes(values: &[i32]) -> Vec<u8> {
    bytemuck::cast_slice(values).to_vec()
}

/// Builds `layer`'s workload through the factory (layer support included) and runs it on
/// `inputs` (each an info and its bytes), returning the output's bytes.
pub(crate) fn run_bytes(
    layer: &LayerDescriptor,
    inputs: &[(TensorInfo, Vec<u8>)],
    out: &TensorInfo,
) -> BackendResult<Vec<u8>> {
    let typed: Vec<(TensorInfo, Bytes)> = inputs
        .iter()
        .map(|(i, b)| (i.clone(), Bytes::of(b.as_slice())))
        .collect();
    Ok(try_run_typed(layer, &typed, out)?.bytes().to_vec())
}

/// Round half to even written with f64 and an explicit tie test (not `round_ties_even`).
pub(crate) fn rne(v: f32) -> i64 {
    let v = f64::from(v);
    let f = v.floor();
    let d = v - f;
    let f = f as i64;
    if d > 0.5 || (d == 0.5 && f % 2 != 0) {
        f + 1
    } else {
        f
    }
}

/// `saturate(rne(v) + offset)` for a type whose range is `lo..=hi`.
pub(crate) fn sat(v: f32, offset: i32, lo: i32, hi: i32) -> i32 {
    rne(v)
        .saturating_add(i64::from(offset))
        .clamp(i64::from(lo), i64::from(hi)) as i32
}

/// The range of a quantised type.
pub(crate) fn range(data_type: DataType) -> (i32, i32) {
    match data_type {
        DataType::QAsymmU8 => (0, 255),
        _ => (-128, 127),
    }
}

/// Asserts that `got` is `saturate(round_half_even(v) + offset)` for the exact real `v`
/// (the result divided by the output scale, computed in f64): exactly, unless `v` lies within
/// 1e-3 of a rounding tie, where f32 and f64 may round apart and one step is allowed.
#[track_caller]
pub(crate) fn assert_rounded(got: i32, v: f64, offset: i32, (lo, hi): (i32, i32), what: &str) {
    let f = v.floor();
    let d = v - f;
    let r = if d > 0.5 || (d == 0.5 && (f as i64) % 2 != 0) {
        f + 1.0
    } else {
        f
    };
    let want = (r + f64::from(offset)).clamp(f64::from(lo), f64::from(hi)) as i32;
    if (d - 0.5).abs() > 1e-3 {
        assert_eq!(got, want, "{what}: real {v}");
    } else {
        assert!(
            (got - want).abs() <= 1,
            "{what}: got {got}, want {want} (near a tie, {v})"
        );
    }
}
