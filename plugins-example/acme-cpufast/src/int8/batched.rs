//! Quantised `BatchMatMul` of two activations (onnxruntime's `QLinearMatMul` when `b` is not
//! a constant: attention's `Q · Kᵀ` and `softmax · V`), batch dimensions broadcast as numpy
//! does and either operand read transposed: `acc = Σ_k (a - a_zp)(b - b_zp)` exactly in `i32`,
//! then `saturate(round_half_even(acc as f32 · m) + y_zp)` with `m = (a_scale · b_scale) /
//! y_scale` in f32 — the products' formula ([`requant_one`]), byte for byte with CpuRef.
//!
//! These products are small (a head's `15 × 40 × 15`), so each output matrix is a plain loop:
//! its `b` matrix taken once as `i32` columns (`b - b_zp`, `[n][k]`), each row of `a` as `i32`
//! (`a - a_zp`), one dot product per element (the compiler vectorises it). Output matrices
//! are split between threads.

use backplane_api::{
    BackendError, BackendResult, BatchMatMulDescriptor, TensorInfo, TensorView, TensorViewMut,
    Workload,
};

use super::{QTensor, kernels::requant_one};
use crate::{
    gemm::{MIN_PARALLEL_WORK, for_each_part, worth},
    workloads::{Signature, batch_matmul::BmmGeometry},
};

/// Whether a quantised BatchMatMul is one this module runs: `b` not a constant.
pub(crate) fn is_batched(inputs: &[TensorInfo]) -> bool {
    inputs.get(1).is_some_and(|b| !b.is_constant)
}

/// The operands' parameters and the geometry, or why CpuFast cannot run the layer.
fn plan(
    d: &BatchMatMulDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<([QTensor; 3], BmmGeometry), String> {
    let ([a, b], [y]) = (inputs, outputs) else {
        return Err("a BatchMatMul has two inputs and one output".to_owned());
    };
    let q = [
        QTensor::activation(a)?,
        QTensor::activation(b)?,
        QTensor::activation(y)?,
    ];
    Ok((q, BmmGeometry::new(d, a, b, y)?))
}

/// Why CpuFast cannot run the quantised BatchMatMul `d` of two activations, or `Ok`.
pub(crate) fn check(
    d: &BatchMatMulDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
    plan(d, inputs, outputs).map(drop)
}

/// A quantised product of two activations.
#[derive(Debug)]
struct BatchedWorkload {
    geometry: BmmGeometry,
    /// `(a_offset, b_offset)` of each output matrix.
    operands: Vec<(usize, usize)>,
    /// `[a, b]`: XORed into a stored byte to read it as `u8` (0x80 for `i8`).
    flips: [u8; 2],
    /// `[a, b]`: the zero points as the `u8` reading sees them.
    zps: [i32; 2],
    mult: f32,
    y_zp: i32,
    y_range: (i32, i32),
    lens: [usize; 2],
    signature: Signature,
    threads: usize,
}

/// Creates the workload of a quantised BatchMatMul [`check`] accepted.
pub(crate) fn create(
    d: &BatchMatMulDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
    signature: Signature,
    threads: usize,
) -> Result<Box<dyn Workload>, String> {
    let ([qa, qb, qy], geometry) = plan(d, inputs, outputs)?;
    let ((fa, za), (fb, zb)) = (qa.as_u8(), qb.as_u8());
    let len = |t: &TensorInfo| t.num_elements().unwrap_or(0);
    Ok(Box::new(BatchedWorkload {
        operands: geometry.operands().collect(),
        geometry,
        flips: [fa, fb],
        zps: [za, zb],
        mult: (qa.scales[0] * qb.scales[0]) / qy.scales[0],
        y_zp: qy.zp,
        y_range: qy.range(),
        lens: [len(&inputs[0]), len(&inputs[1])],
        signature,
        threads,
    }))
}

impl BatchedWorkload {
    /// Output matrix `y` from the matrices of `a` and `b` at the given offsets; `cols` and
    /// `row` are scratch.
    fn matrix(
        &self,
        [a, b]: [&[u8]; 2],
        (ao, bo): (usize, usize),
        cols: &mut Vec<i32>,
        row: &mut Vec<i32>,
        y: &mut [u8],
    ) {
        let [m, k, n] = self.geometry.dims();
        let [ta, tb] = self.geometry.transposed();
        let ([fa, fb], [za, zb]) = (self.flips, self.zps);
        cols.clear();
        for j in 0..n {
            cols.extend((0..k).map(|kk| {
                let at = if tb { j * k + kk } else { kk * n + j };
                i32::from(b[bo + at] ^ fb) - zb
            }));
        }
        for (i, out) in y.chunks_exact_mut(n).enumerate().take(m) {
            row.clear();
            row.extend((0..k).map(|kk| {
                let at = if ta { kk * m + i } else { i * k + kk };
                i32::from(a[ao + at] ^ fa) - za
            }));
            for (o, col) in out.iter_mut().zip(cols.chunks_exact(k.max(1))) {
                let acc = row
                    .iter()
                    .zip(col)
                    .fold(0i32, |s, (&x, &w)| s.wrapping_add(x * w));
                *o = requant_one(acc, 0, self.mult, self.y_zp, self.y_range.0, self.y_range.1);
            }
        }
    }
}

impl Workload for BatchedWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let (a, b) = (inputs[0].data.as_slice(), inputs[1].data.as_slice());
        let y = outputs[0].data.as_mut_slice();
        if a.len() != self.lens[0] || b.len() != self.lens[1] || y.len() != self.geometry.out_len()
        {
            return Err(BackendError::invalid_argument(
                "buffer sizes differ from the tensors'",
            ));
        }
        let [m, k, n] = self.geometry.dims();
        let matrix = m * n;
        if matrix == 0 {
            return Ok(());
        }
        let count = self.operands.len();
        let parts = worth(count * matrix * k, MIN_PARALLEL_WORK, self.threads).min(count);
        let per = count.div_ceil(parts.max(1));
        for_each_part(
            parts.max(1),
            y.chunks_mut(per * matrix).enumerate(),
            |(part, y)| {
                let (mut cols, mut row) = (Vec::new(), Vec::new());
                let first = part * per;
                for (&ops, y) in self.operands[first..]
                    .iter()
                    .zip(y.chunks_exact_mut(matrix))
                {
                    self.matrix([a, b], ops, &mut cols, &mut row, y);
                }
            },
        );
        Ok(())
    }
}
