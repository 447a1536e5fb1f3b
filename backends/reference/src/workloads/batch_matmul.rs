//! BatchMatMul (Backend API 1.1): matrix products over numpy-broadcast batch dimensions, ONNX
//! `MatMul` (and its transposed forms). Each output element is the sum over `k` of
//! `a[..., i, k] * b[..., k, j]`, accumulated in the tensors' type (Float32 or Float64) in
//! increasing `k`, starting from 0.

use backplane_api::{
    BackendResult, BatchMatMulDescriptor, LayerDescriptor, TensorView, TensorViewMut, Workload,
    WorkloadDesc, shapes,
};

use super::{ExpectedShapes, checked_num_elements, expect_counts, invalid_layer};

/// Creates the workload of a `BatchMatMul` layer.
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::BatchMatMul(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a BatchMatMul layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 2, 1)?;
    let (a, b, out) = (&desc.inputs[0], &desc.inputs[1], &desc.outputs[0]);
    let expected =
        shapes::batch_matmul(d, &a.shape, &b.shape).map_err(|e| invalid_layer(desc, e))?;
    if expected != out.shape.as_slice() {
        return Err(invalid_layer(
            desc,
            format_args!("BatchMatMul of {a} and {b} into {out}"),
        ));
    }
    for t in [a, b, out] {
        checked_num_elements(desc, t)?;
    }
    let dim = |s: &[u32], from_end: usize| s[s.len() - from_end] as usize;
    let (m, k) = if d.transpose_a {
        (dim(&a.shape, 1), dim(&a.shape, 2))
    } else {
        (dim(&a.shape, 2), dim(&a.shape, 1))
    };
    let n = dim(&out.shape, 1);
    // Per output matrix, the offsets of its `a` and `b` matrices (broadcast batch indices).
    let batch = &out.shape[..out.shape.len() - 2];
    // An empty output has no matrix to compute (and no batch index to walk).
    let empty = out.shape.contains(&0);
    let offsets = |shape: &[u32], matrix: usize| {
        if empty {
            Vec::new()
        } else {
            matrix_offsets(batch, shape, matrix)
        }
    };
    Ok(Box::new(BatchMatMulWorkload {
        d: *d,
        m,
        k,
        n,
        a_offsets: offsets(&a.shape, m * k),
        b_offsets: offsets(&b.shape, k * n),
        shapes: ExpectedShapes::of(desc),
    }))
}

/// For each matrix of an output whose batch dimensions are `batch` (row-major), the offset
/// of the matrix of an operand of `shape` (its batch dimensions numpy-broadcast to `batch`)
/// whose matrices hold `matrix` elements. `batch` must not be empty of elements.
pub(crate) fn matrix_offsets(batch: &[u32], shape: &[u32], matrix: usize) -> Vec<usize> {
    let own = &shape[..shape.len() - 2];
    let lead = batch.len() - own.len();
    let count: usize = batch.iter().map(|&d| d as usize).product();
    (0..count)
        .map(|flat| {
            // Walk the output batch index from its last dimension.
            let (mut rest, mut offset, mut stride) = (flat, 0, matrix);
            for (axis, &size) in batch.iter().enumerate().rev() {
                let size = size as usize;
                let i = rest % size.max(1);
                rest /= size.max(1);
                if axis >= lead {
                    let own_size = own[axis - lead] as usize;
                    if own_size != 1 {
                        offset += i * stride;
                    }
                    stride *= own_size;
                }
            }
            offset
        })
        .collect()
}

/// The products of one layer.
#[derive(Debug)]
pub struct BatchMatMulWorkload {
    d: BatchMatMulDescriptor,
    m: usize,
    k: usize,
    n: usize,
    a_offsets: Vec<usize>,
    b_offsets: Vec<usize>,
    shapes: ExpectedShapes,
}

impl BatchMatMulWorkload {
    /// The products in `T` (`f32` or `f64`).
    fn run<T>(&self, a: &[T], b: &[T], out: &mut [T])
    where
        T: Copy + num_traits::Zero + std::ops::Mul<Output = T> + std::ops::AddAssign,
    {
        let (m, k, n) = (self.m, self.k, self.n);
        if m * n == 0 {
            return;
        }
        for ((out, &ao), &bo) in out
            .chunks_exact_mut(m * n)
            .zip(&self.a_offsets)
            .zip(&self.b_offsets)
        {
            let a = &a[ao..ao + m * k];
            let b = &b[bo..bo + k * n];
            out.fill(T::zero());
            for i in 0..m {
                let row = &mut out[i * n..(i + 1) * n];
                for kk in 0..k {
                    let x = if self.d.transpose_a {
                        a[kk * m + i]
                    } else {
                        a[i * k + kk]
                    };
                    if self.d.transpose_b {
                        for (j, o) in row.iter_mut().enumerate() {
                            *o += x * b[j * k + kk];
                        }
                    } else {
                        for (o, &y) in row.iter_mut().zip(&b[kk * n..(kk + 1) * n]) {
                            *o += x * y;
                        }
                    }
                }
            }
        }
    }
}

impl Workload for BatchMatMulWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        if inputs[0].info.data_type == backplane_api::DataType::Float64 {
            let (a, b) = (inputs[0].as_slice::<f64>()?, inputs[1].as_slice::<f64>()?);
            self.run(a, b, outputs[0].as_mut_slice::<f64>()?);
        } else {
            let (a, b) = (inputs[0].as_f32()?, inputs[1].as_f32()?);
            self.run(a, b, outputs[0].as_f32_mut()?);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, run};

    /// The oracle, in f64, from the definition: every output index decomposed, each input
    /// index found by numpy's broadcasting rule (a dimension of 1 repeats).
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
            for i in (0..s.len().saturating_sub(1)).rev() {
                st[i] = st[i + 1] * s[i + 1] as usize;
            }
            st
        };
        let (sa, sb) = (strides(a_s), strides(b_s));
        let total: usize = out_s.iter().map(|&v| v as usize).product();
        let r = out_s.len();
        let k = if d.transpose_a {
            a_s[a_s.len() - 2]
        } else {
            a_s[a_s.len() - 1]
        } as usize;
        (0..total)
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
                    let mut off = 0;
                    for ax in 0..shape.len() - 2 {
                        if shape[ax] != 1 {
                            off += idx[ax + lead] * st[ax];
                        }
                    }
                    off + row * st[shape.len() - 2] + col
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

    #[test]
    fn matches_the_definition_with_broadcasting_and_transposes() {
        let mut rng = Lcg(77);
        let cases: [(&[u32], &[u32], bool, bool); 6] = [
            (&[3, 4], &[4, 5], false, false),
            (&[2, 3, 4], &[4, 5], false, false),
            (&[2, 1, 3, 4], &[5, 4, 2], false, false),
            (&[4, 3], &[2, 5, 4], true, true),
            (&[1, 3, 4], &[6, 4, 2], false, false),
            (&[2, 2, 0, 4], &[4, 3], false, false),
        ];
        for (a_s, b_s, ta, tb) in cases {
            let d = BatchMatMulDescriptor {
                transpose_a: ta,
                transpose_b: tb,
            };
            let numel = |s: &[u32]| s.iter().map(|&v| v as usize).product::<usize>();
            let a = rng.vec(numel(a_s));
            let b = rng.vec(numel(b_s));
            let out_s = shapes::batch_matmul(&d, a_s, b_s).unwrap();
            let got = run(
                &LayerDescriptor::BatchMatMul(d),
                &[(a_s, &a), (b_s, &b)],
                &out_s,
            );
            assert_close(
                &got,
                &oracle(&d, a_s, &a, b_s, &b),
                1e-5,
                &format!("{a_s:?} x {b_s:?}"),
            );
        }
    }
}
