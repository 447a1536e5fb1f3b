//! The BatchMatMul kernel (Backend API 1.1, ONNX `MatMul`): one GEMM per broadcast batch of
//! matrices, `out[..., i, j] = sum over k of a[..., i, k] * b[..., k, j]` (plus a bias per
//! column when it heads a fused chain), with `transpose_a`/`transpose_b` read as strides.
//!
//! Batch dimensions broadcast as numpy does: a dimension of 1 (or a missing one) repeats.
//! Consecutive output matrices whose `a` matrices follow each other in memory and which share
//! one `b` matrix are one GEMM with more rows: `x [B, S, K] · W [K, N]` (the transformer's
//! projections and feed-forward layers) is a single `(B·S) × K × N` product, as a fully
//! connected layer would be.

use backplane_api::{BatchMatMulDescriptor, TensorInfo, shapes};

use crate::gemm::{
    Accum, MIN_PARALLEL_WORK, Operand, PACKED_MAX_ROWS, PackedB, for_each_part, gemm, worth,
};
use crate::prepared::Prepared;

/// One GEMM: `matrices` consecutive output matrices from the `a` matrices starting at
/// element `a` and the `b` matrix at element `b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Product {
    a: usize,
    b: usize,
    matrices: usize,
}

/// Everything about one BatchMatMul fixed when it is created.
#[derive(Debug, Clone)]
pub(crate) struct BmmGeometry {
    m: usize,
    k: usize,
    n: usize,
    transpose_a: bool,
    transpose_b: bool,
    /// The GEMMs, in output order.
    products: Vec<Product>,
    out_len: usize,
}

/// The element offset of the matrix of `shape` (rank 2 or more, `matrix` elements each) that
/// output batch number `flat` of `batch` reads under numpy broadcasting.
fn broadcast_offset(shape: &[u32], batch: &[u32], matrix: usize, flat: usize) -> usize {
    let own = &shape[..shape.len() - 2];
    let lead = batch.len() - own.len();
    let (mut rest, mut offset, mut stride) = (flat, 0, matrix);
    for (axis, &size) in batch.iter().enumerate().rev() {
        let size = size as usize;
        let i = rest % size;
        rest /= size;
        if let Some(axis) = axis.checked_sub(lead) {
            let own_size = own[axis] as usize;
            if own_size != 1 {
                offset += i * stride;
            }
            stride *= own_size;
        }
    }
    offset
}

impl BmmGeometry {
    /// The geometry of `d` over `a` and `b` into `out`, or why CpuFast cannot run it.
    pub(crate) fn new(
        d: &BatchMatMulDescriptor,
        a: &TensorInfo,
        b: &TensorInfo,
        out: &TensorInfo,
    ) -> Result<Self, String> {
        let expected = shapes::batch_matmul(d, &a.shape, &b.shape)?;
        if expected != out.shape.as_slice() {
            return Err(format!(
                "BatchMatMul output {:?} differs from the expected {expected:?}",
                out.shape.as_slice()
            ));
        }
        for t in [a, b, out] {
            if t.num_bytes().is_none() {
                return Err(format!("{t} is too large to address"));
            }
        }
        let out_len = out.num_elements().unwrap_or(0);
        let last = |s: &[u32], from_end: usize| s[s.len() - from_end] as usize;
        let (m, k) = if d.transpose_a {
            (last(&a.shape, 1), last(&a.shape, 2))
        } else {
            (last(&a.shape, 2), last(&a.shape, 1))
        };
        let n = last(&out.shape, 1);
        let mut products: Vec<Product> = Vec::new();
        if out_len > 0 {
            let batch = &out.shape[..out.shape.len() - 2];
            let count = out_len / (m * n);
            for flat in 0..count {
                let next = Product {
                    a: broadcast_offset(&a.shape, batch, m * k, flat),
                    b: broadcast_offset(&b.shape, batch, k * n, flat),
                    matrices: 1,
                };
                match products.last_mut() {
                    // The rows of consecutive untransposed `a` matrices are consecutive rows.
                    Some(p)
                        if !d.transpose_a
                            && p.b == next.b
                            && p.a + p.matrices * m * k == next.a =>
                    {
                        p.matrices += 1;
                    }
                    _ => products.push(next),
                }
            }
        }
        Ok(Self {
            m,
            k,
            n,
            transpose_a: d.transpose_a,
            transpose_b: d.transpose_b,
            products,
            out_len,
        })
    }

    /// Elements of the output.
    pub(crate) fn out_len(&self) -> usize {
        self.out_len
    }

    /// `[m, k, n]`: each product's rows, reduction and columns.
    pub(crate) fn dims(&self) -> [usize; 3] {
        [self.m, self.k, self.n]
    }

    /// Whether `a` and `b` are read transposed.
    pub(crate) fn transposed(&self) -> [bool; 2] {
        [self.transpose_a, self.transpose_b]
    }

    /// The element offsets of the `a` and `b` matrices of each output matrix, in order.
    pub(crate) fn operands(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let step = self.m * self.k;
        self.products
            .iter()
            .flat_map(move |p| (0..p.matrices).map(move |i| (p.a + i * step, p.b)))
    }

    /// The number of GEMMs one execution runs.
    #[cfg(test)]
    pub(crate) fn gemms(&self) -> usize {
        self.products.len()
    }

    /// `b` packed for [`run`](Self::run), when every product reads the same `b` (constant
    /// weights shared by the batch), `a` is not transposed, and the products have few rows.
    pub(crate) fn pack(&self, b: &Prepared) -> Option<PackedB> {
        self.packs(b.len())
            .then(|| PackedB::of_prepared(self.k, self.n, b, self.transpose_b))
    }

    /// [`pack`](Self::pack) of the `b` whose f32 bytes are `bytes` (a constant).
    pub(crate) fn pack_bytes(&self, bytes: &[u8]) -> Option<PackedB> {
        (bytes.len().is_multiple_of(4) && self.packs(bytes.len() / 4))
            .then(|| PackedB::of_bytes(self.k, self.n, bytes, self.transpose_b))
    }

    /// Whether a constant `b` of `len` elements is packed (see [`pack`](Self::pack)).
    fn packs(&self, len: usize) -> bool {
        let shared = self.products.iter().all(|p| p.b == 0) && len == self.k * self.n;
        let rows = self.products.iter().map(|p| p.matrices * self.m).max();
        shared && !self.transpose_a && rows.is_some_and(|r| r <= PACKED_MAX_ROWS)
    }

    /// `out = a · b (+ bias along the last dimension)` on up to `threads` threads: one GEMM's
    /// rows split between them, or, with several GEMMs, the GEMMs. `packed` is `b` as
    /// [`pack`](Self::pack) made it.
    pub(crate) fn run(
        &self,
        a: &[f32],
        b: &[f32],
        packed: Option<&PackedB>,
        bias: Option<&[f32]>,
        out: &mut [f32],
        threads: usize,
    ) {
        let matrix = self.m * self.n;
        if matrix == 0 {
            return;
        }
        for row in out.chunks_exact_mut(self.n) {
            match bias {
                Some(bias) => row.copy_from_slice(bias),
                None => row.fill(0.0),
            }
        }
        let work = self.out_len * self.k;
        if self.products.len() <= 1 || worth(work, MIN_PARALLEL_WORK, threads) == 1 {
            // One GEMM splits its rows; many small ones run in turn.
            let inner = if self.products.len() == 1 { threads } else { 1 };
            self.run_products(&self.products, a, b, packed, out, inner);
            return;
        }
        let groups = threads.min(self.products.len());
        let per_group = self.products.len().div_ceil(groups);
        // One job per group of products: the products and their output matrices.
        let mut jobs = Vec::with_capacity(groups);
        let mut rest = out;
        for group in self.products.chunks(per_group) {
            let len: usize = group.iter().map(|p| p.matrices * matrix).sum();
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut(len);
            rest = tail;
            jobs.push((group, mine));
        }
        // Each group's products run on its one thread: a split inside a part would share the
        // same helpers, which are busy with the other groups (no more threads would run).
        for_each_part(groups, jobs, |(group, mine)| {
            self.run_products(group, a, b, packed, mine, 1);
        });
    }

    /// `products`, in order, into `out` (their output matrices, consecutive).
    fn run_products(
        &self,
        products: &[Product],
        a: &[f32],
        b: &[f32],
        packed: Option<&PackedB>,
        out: &mut [f32],
        threads: usize,
    ) {
        let (m, k, n) = (self.m, self.k, self.n);
        let mut rest = out;
        for p in products {
            let rows = p.matrices * m;
            let (c, tail) = rest.split_at_mut(rows * n);
            rest = tail;
            let a_p = &a[p.a..][..rows * k];
            match packed {
                Some(b) => b.multiply_add(rows, a_p, c, n, threads),
                None => gemm(
                    rows,
                    k,
                    n,
                    Operand::new(a_p, self.transpose_a),
                    Operand::new(&b[p.b..][..k * n], self.transpose_b),
                    c,
                    n,
                    threads,
                    Accum::Add,
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::LayerDescriptor;

    use super::*;
    use crate::workloads::test_support::{
        Lcg, assert_close, f32t, make, numel, run_with_constants,
    };

    /// Relative tolerance against the f64 oracle (sums of up to a few hundred products).
    const REL_TOL: f64 = 1e-5;

    /// CpuRef's definition in f64 with naive loops: every output index decomposed, each input
    /// index found by numpy's rule (a batch dimension of 1 repeats), the sum over `k` in order.
    fn oracle(
        d: &BatchMatMulDescriptor,
        a_s: &[u32],
        a: &[f32],
        b_s: &[u32],
        b: &[f32],
    ) -> Vec<f64> {
        let out_s = shapes::batch_matmul(d, a_s, b_s).unwrap();
        let strides = |s: &[u32]| -> Vec<usize> {
            let mut st = vec![1; s.len()];
            for i in (0..s.len() - 1).rev() {
                st[i] = st[i + 1] * s[i + 1] as usize;
            }
            st
        };
        let (sa, sb) = (strides(a_s), strides(b_s));
        let r = out_s.len();
        let k = if d.transpose_a {
            a_s[a_s.len() - 2]
        } else {
            a_s[a_s.len() - 1]
        } as usize;
        (0..numel(&out_s))
            .map(|flat| {
                let mut idx = vec![0usize; r];
                let mut rest = flat;
                for i in (0..r).rev() {
                    idx[i] = rest % out_s[i] as usize;
                    rest /= out_s[i] as usize;
                }
                let (i, j) = (idx[r - 2], idx[r - 1]);
                let at = |shape: &[u32], st: &[usize], row: usize, col: usize| {
                    let lead = r - shape.len();
                    let batch: usize = (0..shape.len() - 2)
                        .filter(|&ax| shape[ax] != 1)
                        .map(|ax| idx[ax + lead] * st[ax])
                        .sum();
                    batch + row * st[shape.len() - 2] + col
                };
                (0..k)
                    .map(|kk| {
                        let x = if d.transpose_a {
                            a[at(a_s, &sa, kk, i)]
                        } else {
                            a[at(a_s, &sa, i, kk)]
                        };
                        let y = if d.transpose_b {
                            b[at(b_s, &sb, j, kk)]
                        } else {
                            b[at(b_s, &sb, kk, j)]
                        };
                        f64::from(x) * f64::from(y)
                    })
                    .sum()
            })
            .collect()
    }

    /// Broadcast batches on either side, every transpose, either input constant, the
    /// transformer's shapes, 2-D operands and empty dimensions.
    #[test]
    fn matches_the_definition_with_broadcasting_and_transposes() {
        let mut rng = Lcg(77);
        let cases: &[(&[u32], &[u32], bool, bool)] = &[
            (&[3, 4], &[4, 5], false, false),
            (&[2, 3, 4], &[4, 5], false, false),
            (&[2, 3, 4], &[3, 5], true, false),
            (&[2, 1, 3, 4], &[5, 4, 2], false, false),
            (&[4, 3], &[2, 5, 4], true, true),
            (&[1, 3, 4], &[6, 4, 2], false, false),
            (&[2, 3, 3, 4], &[2, 1, 4, 5], false, false),
            (&[2, 3, 4, 3], &[1, 3, 5, 4], true, true),
            (&[2, 2, 0, 4], &[4, 3], false, false),
            (&[2, 3, 0], &[0, 4], false, false),
            // Attention: Q · K^T per head, then the weights · V.
            (&[1, 12, 16, 32], &[1, 12, 16, 32], false, true),
            (&[1, 12, 16, 16], &[1, 12, 16, 32], false, false),
            // A projection: x [1, 16, 384] · W [384, 96].
            (&[1, 16, 384], &[384, 96], false, false),
        ];
        for &(a_s, b_s, transpose_a, transpose_b) in cases {
            let d = BatchMatMulDescriptor {
                transpose_a,
                transpose_b,
            };
            let (a, b) = (rng.vec(numel(a_s)), rng.vec(numel(b_s)));
            let out_s = shapes::batch_matmul(&d, a_s, b_s).unwrap();
            let want = oracle(&d, a_s, &a, b_s, &b);
            for constant in [(false, false), (false, true), (true, false)] {
                let got = run_with_constants(
                    &LayerDescriptor::BatchMatMul(d),
                    &[(a_s, &a, constant.0), (b_s, &b, constant.1)],
                    &out_s,
                );
                assert_close(
                    &got,
                    &want,
                    REL_TOL,
                    &format!("{a_s:?} x {b_s:?} t {transpose_a}/{transpose_b} c {constant:?}"),
                );
            }
        }
    }

    /// Shared `b` matrices with consecutive `a` matrices merge into one GEMM; the kernel
    /// split between threads (by rows or by GEMMs) gives the oracle's result.
    #[test]
    fn merged_gemms_and_threads() {
        let d = |transpose_a| BatchMatMulDescriptor {
            transpose_a,
            transpose_b: false,
        };
        let gemms = |d: BatchMatMulDescriptor, a: &[u32], b: &[u32]| {
            let out = shapes::batch_matmul(&d, a, b).unwrap();
            BmmGeometry::new(&d, &f32t(a), &f32t(b), &f32t(&out))
                .unwrap()
                .gemms()
        };
        assert_eq!(gemms(d(false), &[2, 16, 384], &[384, 96]), 1);
        assert_eq!(gemms(d(false), &[2, 3, 5, 4], &[2, 1, 4, 6]), 2);
        assert_eq!(gemms(d(false), &[1, 5, 4], &[3, 4, 6]), 3);
        assert_eq!(gemms(d(true), &[2, 4, 5], &[4, 6]), 2);
        let mut rng = Lcg(9);
        for (a_s, b_s) in [
            (&[4, 64, 128][..], &[128, 96][..]),
            (&[6, 64, 128][..], &[6, 128, 64][..]),
        ] {
            let out_s = shapes::batch_matmul(&d(false), a_s, b_s).unwrap();
            let (a, b) = (rng.vec(numel(a_s)), rng.vec(numel(b_s)));
            let columns = out_s[out_s.len() - 1] as usize;
            let bias = rng.vec(columns);
            let g = BmmGeometry::new(&d(false), &f32t(a_s), &f32t(b_s), &f32t(&out_s)).unwrap();
            let mut want = oracle(&d(false), a_s, &a, b_s, &b);
            for (i, w) in want.iter_mut().enumerate() {
                *w += f64::from(bias[i % columns]);
            }
            for threads in [1, 2, 3, 8] {
                let mut out = vec![f32::NAN; g.out_len()];
                g.run(&a, &b, None, Some(&bias), &mut out, threads);
                assert_close(
                    &out,
                    &want,
                    REL_TOL,
                    &format!("{a_s:?} x {b_s:?}, {threads} threads"),
                );
            }
        }
    }

    /// Shapes that do not multiply are refused with the shape rule's reason.
    #[test]
    fn mismatched_shapes_are_refused() {
        let layer = LayerDescriptor::BatchMatMul(BatchMatMulDescriptor::default());
        let Err(e) = make(&layer, &[f32t(&[2, 3]), f32t(&[4, 5])], &[f32t(&[2, 5])]) else {
            panic!("created a 2x3 · 4x5 product");
        };
        assert_eq!(
            e.message.as_str(),
            "layer test: CpuFast: BatchMatMul of [2, 3] and [4, 5]: inner dimensions 3 and 4 differ"
        );
        assert!(make(&layer, &[f32t(&[2, 3]), f32t(&[3, 5])], &[f32t(&[2, 6])]).is_err());
    }
}
