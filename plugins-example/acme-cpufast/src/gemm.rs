//! The matrix multiply under Convolution2d and FullyConnected: `C += A · B`.
//!
//! `A` is `m × k` and `C` is `m × n`, both row-major and dense. `B` is `k × n` row-major, or
//! its transpose (`n × k`, for fully connected weights stored `[out, in]`), which is only a
//! stride change for the kernel.
//!
//! The kernel is `faer`'s matrix multiply: cache-blocked, with AVX-512 or AVX2/FMA
//! micro-kernels picked at run time, reached through a safe, shape-checked call, so this
//! crate needs no `unsafe`. With more than one thread, the rows of `C` are split between
//! scoped threads. A vendor with its own BLAS swaps it in here: this module is the only place
//! that multiplies matrices.

use faer::{Accum, MatMut, MatRef, Par, linalg::matmul::matmul};

/// How the right-hand matrix `B` is stored.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Rhs<'a> {
    /// `k × n`, row-major.
    RowMajor(&'a [f32]),
    /// `n × k`, row-major: `B` transposed.
    Transposed(&'a [f32]),
}

impl Rhs<'_> {
    fn len(&self) -> usize {
        match self {
            Rhs::RowMajor(b) | Rhs::Transposed(b) => b.len(),
        }
    }
}

/// Below this many multiply-adds a product runs on the calling thread.
const MIN_PARALLEL_WORK: usize = 1 << 18;

/// `c += a · b` for `a` `m × k`, `b` `k × n` (or its transpose) and `c` `m × n` with rows
/// `ldc` elements apart (`ldc >= n`; a block of columns of a wider matrix), on up to
/// `threads` threads.
///
/// # Panics
/// If a buffer's length does not match the dimensions: callers size their buffers from
/// geometry they validated when the workload was created, so this is a programming error.
#[allow(
    clippy::too_many_arguments,
    reason = "the BLAS signature: sizes, operands, stride"
)]
pub(crate) fn gemm(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    b: Rhs<'_>,
    c: &mut [f32],
    ldc: usize,
    threads: usize,
) {
    assert!(
        a.len() == m * k
            && b.len() == k * n
            && ldc >= n
            && (m == 0 || c.len() >= (m - 1) * ldc + n),
        "gemm {m}x{k}x{n} (ldc {ldc}): buffers of {}, {} and {} elements",
        a.len(),
        b.len(),
        c.len()
    );
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    let b = match b {
        Rhs::RowMajor(b) => MatRef::from_row_major_slice(b, k, n),
        Rhs::Transposed(b) => MatRef::from_row_major_slice(b, n, k).transpose(),
    };
    let rows = if threads <= 1 || m * k * n < MIN_PARALLEL_WORK {
        m
    } else {
        m.div_ceil(threads)
    };
    if rows >= m {
        multiply(k, n, a, b, c, ldc);
        return;
    }
    std::thread::scope(|s| {
        for (a_rows, c_rows) in a.chunks(rows * k).zip(c.chunks_mut(rows * ldc)) {
            s.spawn(move || multiply(k, n, a_rows, b, c_rows, ldc));
        }
    });
}

/// `c += a · b` for the rows of `a` and `c` given.
fn multiply(k: usize, n: usize, a: &[f32], b: MatRef<'_, f32>, c: &mut [f32], ldc: usize) {
    let m = a.len() / k;
    let a = MatRef::from_row_major_slice(a, m, k);
    // Row-major with a row stride, built as the transpose of a column-major view:
    // faer 0.24.4's `from_row_major_slice_with_stride_mut` swaps the strides (it builds a
    // column-major view, which reaches past the slice when there are more rows than columns).
    let c = MatMut::from_column_major_slice_with_stride_mut(&mut c[..(m - 1) * ldc + n], n, m, ldc)
        .transpose_mut();
    matmul(c, Accum::Add, a, b, 1.0, Par::Seq);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close};

    /// Relative tolerance against the f64 oracle (sums of up to 300 products of values in
    /// [-1, 1)).
    const REL_TOL: f64 = 1e-5;

    /// `C0 + A · B` by the definition, in f64.
    fn oracle(m: usize, k: usize, n: usize, a: &[f32], b: &[f32], c0: &[f32]) -> Vec<f64> {
        let mut c = Vec::with_capacity(m * n);
        for i in 0..m {
            for j in 0..n {
                let mut s = f64::from(c0[i * n + j]);
                for p in 0..k {
                    s += f64::from(a[i * k + p]) * f64::from(b[p * n + j]);
                }
                c.push(s);
            }
        }
        c
    }

    fn transpose(rows: usize, cols: usize, x: &[f32]) -> Vec<f32> {
        let mut t = vec![0.0; x.len()];
        for r in 0..rows {
            for c in 0..cols {
                t[c * rows + r] = x[r * cols + c];
            }
        }
        t
    }

    /// Odd sizes (rows not a multiple of 4, columns over one tile), both layouts of `B`,
    /// one and several threads, accumulating into a non-zero `C`.
    #[test]
    fn matches_the_definition() {
        let mut rng = Lcg(11);
        for &(m, k, n) in &[
            (1, 1, 1),
            (3, 5, 7),
            (4, 8, 4),
            (9, 17, 300),
            (70, 300, 33),
            (13, 64, 513),
        ] {
            let (a, b, c0) = (rng.vec(m * k), rng.vec(k * n), rng.vec(m * n));
            let want = oracle(m, k, n, &a, &b, &c0);
            for threads in [1, 3] {
                let mut c = c0.clone();
                gemm(m, k, n, &a, Rhs::RowMajor(&b), &mut c, n, threads);
                assert_close(
                    &c,
                    &want,
                    REL_TOL,
                    &format!("{m}x{k}x{n} row-major, {threads} threads"),
                );
                let bt = transpose(k, n, &b);
                let mut c = c0.clone();
                gemm(m, k, n, &a, Rhs::Transposed(&bt), &mut c, n, threads);
                assert_close(
                    &c,
                    &want,
                    REL_TOL,
                    &format!("{m}x{k}x{n} transposed, {threads} threads"),
                );
            }
        }
    }

    /// A block of columns of a wider `C` (`ldc > n`): the other columns are untouched.
    #[test]
    fn strided_output() {
        let mut rng = Lcg(5);
        let (m, k, n, ldc) = (37, 300, 30, 40);
        let (a, b) = (rng.vec(m * k), rng.vec(k * n));
        let wide = rng.vec(m * ldc);
        let c0: Vec<f32> = (0..m)
            .flat_map(|i| wide[i * ldc + 3..][..n].to_vec())
            .collect();
        let want = oracle(m, k, n, &a, &b, &c0);
        for threads in [1, 4] {
            let mut c = wide.clone();
            gemm(m, k, n, &a, Rhs::RowMajor(&b), &mut c[3..], ldc, threads);
            let got: Vec<f32> = (0..m)
                .flat_map(|i| c[i * ldc + 3..][..n].to_vec())
                .collect();
            assert_close(
                &got,
                &want,
                REL_TOL,
                &format!("ldc {ldc}, {threads} threads"),
            );
            for i in 0..m {
                for j in (0..ldc).filter(|j| !(3..3 + n).contains(j)) {
                    assert_eq!(c[i * ldc + j], wide[i * ldc + j], "({i}, {j}) was touched");
                }
            }
        }
    }

    /// Empty dimensions leave `C` as it was.
    #[test]
    fn empty_dimensions() {
        let mut c = vec![1.0; 6];
        gemm(2, 0, 3, &[], Rhs::RowMajor(&[]), &mut c, 3, 1);
        assert_eq!(c, [1.0; 6]);
        gemm(0, 4, 3, &[], Rhs::RowMajor(&[0.0; 12]), &mut [], 3, 2);
    }
}
