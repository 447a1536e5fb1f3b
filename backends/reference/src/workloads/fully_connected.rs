//! FullyConnected: `y = x · W + b` for `x` `[N, K]`, weights `[K, M]` (or `[M, K]` when
//! `transpose_weights` is set) and an optional bias `[M]`, in Float32 or Float64.

use backplane_api::{
    BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::{ExpectedShapes, expect_counts, float_workload, invalid_layer};

/// A fully connected layer.
#[derive(Debug)]
pub struct FullyConnectedWorkload {
    /// Rows of `x`.
    batch: usize,
    /// Input features.
    k: usize,
    /// Output features.
    m: usize,
    transpose_weights: bool,
    /// Shapes of `[x, weights, bias?]` and of the output, checked at execution.
    shapes: ExpectedShapes,
}

/// Creates the workload of a `FullyConnected` layer.
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::FullyConnected(d) = desc.layer else {
        return Err(invalid_layer(
            desc,
            format_args!("{} is not FullyConnected", desc.layer.kind()),
        ));
    };
    expect_counts(
        desc.inputs.len(),
        desc.outputs.len(),
        if d.bias_enabled { 3 } else { 2 },
        1,
    )?;
    let (x, w, y) = (
        &desc.inputs[0].shape,
        &desc.inputs[1].shape,
        &desc.outputs[0].shape,
    );
    let (&[n, k], &[w0, w1], &[yn, m]) = (x.as_slice(), w.as_slice(), y.as_slice()) else {
        return Err(invalid_layer(
            desc,
            format_args!("input, weights and output must have rank 2, got {x:?}, {w:?} and {y:?}"),
        ));
    };
    let expected_w = if d.transpose_weights { [m, k] } else { [k, m] };
    if [w0, w1] != expected_w || yn != n {
        return Err(invalid_layer(
            desc,
            format_args!("inconsistent shapes {x:?}, {w:?} and {y:?}"),
        ));
    }
    Ok(Box::new(FullyConnectedWorkload {
        batch: n as usize,
        k: k as usize,
        m: m as usize,
        transpose_weights: d.transpose_weights,
        shapes: ExpectedShapes::of(desc),
    }))
}

/// Partial sums of [`dot`]: independent chains of additions the compiler vectorises.
const LANES: usize = 16;

/// The element types a fully connected layer computes in: `f32` and `f64` (each output
/// accumulated in that type).
trait Real: backplane_api::Element + num_traits::Float + std::ops::AddAssign {}

impl<T: backplane_api::Element + num_traits::Float + std::ops::AddAssign> Real for T {}

/// `sum_i a[i] * b[i]` in `T`: lane `l` sums the products of the indices `i` with
/// `i % LANES == l` below the last multiple of [`LANES`], in increasing `i`; then the lanes
/// are added in order, then the remaining products.
fn dot<T: Real>(a: &[T], b: &[T]) -> T {
    let (a_blocks, b_blocks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let rest = (a_blocks.remainder().iter())
        .zip(b_blocks.remainder())
        .fold(T::zero(), |s, (&x, &y)| s + x * y);
    let mut lanes = [T::zero(); LANES];
    for (a_block, b_block) in a_blocks.zip(b_blocks) {
        for ((lane, &x), &y) in lanes.iter_mut().zip(a_block).zip(b_block) {
            *lane += x * y;
        }
    }
    lanes.iter().fold(T::zero(), |s, &l| s + l) + rest
}

impl FullyConnectedWorkload {
    /// The layer in `T` (`f32` or `f64`, the tensors' type).
    fn run<T: Real>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let x = inputs[0].as_slice::<T>()?;
        let w = inputs[1].as_slice::<T>()?;
        let bias = inputs.get(2).map(TensorView::as_slice::<T>).transpose()?;
        let out = outputs[0].as_mut_slice::<T>()?;
        let (k, m) = (self.k, self.m);
        if m == 0 {
            return Ok(());
        }
        for (n, y_row) in out.chunks_exact_mut(m).enumerate().take(self.batch) {
            let x_row = &x[n * k..][..k];
            if self.transpose_weights {
                // W is [M, K]: each output is a dot product of contiguous rows.
                for (j, y) in y_row.iter_mut().enumerate() {
                    let w_row = &w[j * k..][..k];
                    *y = bias.map_or(T::zero(), |b| b[j]) + dot(x_row, w_row);
                }
            } else {
                // W is [K, M]: accumulate rows of W scaled by x[n, i].
                match bias {
                    Some(b) => y_row.copy_from_slice(b),
                    None => y_row.fill(T::zero()),
                }
                for (i, &xv) in x_row.iter().enumerate() {
                    for (y, &wv) in y_row.iter_mut().zip(&w[i * m..][..m]) {
                        *y += xv * wv;
                    }
                }
            }
        }
        Ok(())
    }
}

float_workload!(FullyConnectedWorkload);

#[cfg(test)]
mod tests {
    use backplane_api::FullyConnectedDescriptor;

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, execute, f32t, make, run};

    /// Relative tolerance of the comparisons with the oracle.
    const REL_TOL: f32 = 1e-5;

    /// ONNX `Gemm` with `transB` = `transpose`, in f64: `y[n, j] = sum_i x[n, i] * W(i, j) + b[j]`.
    fn oracle(
        n: usize,
        k: usize,
        m: usize,
        x: &[f32],
        w: &[f32],
        transpose: bool,
        b: Option<&[f32]>,
    ) -> Vec<f32> {
        let mut y = vec![0f32; n * m];
        for r in 0..n {
            for j in 0..m {
                let mut s = b.map_or(0.0, |b| f64::from(b[j]));
                for i in 0..k {
                    let wv = if transpose {
                        w[j * k + i]
                    } else {
                        w[i * m + j]
                    };
                    s += f64::from(x[r * k + i]) * f64::from(wv);
                }
                y[r * m + j] = s as f32;
            }
        }
        y
    }

    fn check(n: usize, k: usize, m: usize, transpose: bool, bias: bool, seed: u64) {
        let mut rng = Lcg(seed);
        let (x, w, b) = (rng.vec(n * k), rng.vec(k * m), rng.vec(m));
        let want = oracle(n, k, m, &x, &w, transpose, bias.then_some(b.as_slice()));
        let layer = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
            bias_enabled: bias,
            transpose_weights: transpose,
        });
        let (n, k, m) = (n as u32, k as u32, m as u32);
        let w_shape = if transpose { [m, k] } else { [k, m] };
        let x_shape = [n, k];
        let mut ins: Vec<(&[u32], &[f32])> = vec![(&x_shape, &x), (&w_shape, &w)];
        let b_shape = [m];
        if bias {
            ins.push((&b_shape, &b));
        }
        assert_close(
            &run(&layer, &ins, &[n, m]),
            &want,
            REL_TOL,
            "fully connected",
        );
    }

    /// Weights `[K, M]`, with and without bias.
    #[test]
    fn plain_weights_with_and_without_bias() {
        check(3, 7, 5, false, false, 1);
        check(3, 7, 5, false, true, 2);
        check(1, 1, 1, false, true, 3);
        check(4, 33, 2, false, true, 4);
    }

    /// Weights `[M, K]` (`transpose_weights`), with and without bias.
    #[test]
    fn transposed_weights_with_and_without_bias() {
        check(3, 7, 5, true, false, 5);
        check(3, 7, 5, true, true, 6);
        check(2, 40, 9, true, true, 7);
        // Several blocks of lanes and a remainder; exactly one block.
        check(2, 3 * LANES + 5, 4, true, true, 8);
        check(1, LANES, 3, true, false, 9);
    }

    /// A hand-computed product pins the weight orientation.
    #[test]
    fn hand_computed() {
        let x = [1.0, 2.0];
        // [K=2, M=3]
        let w = [1.0, 0.0, -1.0, 10.0, 20.0, 30.0];
        let plain = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
            bias_enabled: true,
            transpose_weights: false,
        });
        let got = run(
            &plain,
            &[(&[1, 2], &x), (&[2, 3], &w), (&[3], &[0.5, 0.5, 0.5])],
            &[1, 3],
        );
        assert_eq!(got, [21.5, 40.5, 59.5]);
        // The same weights as [M=3, K=2].
        let wt = [1.0, 10.0, 0.0, 20.0, -1.0, 30.0];
        let transposed = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
            bias_enabled: false,
            transpose_weights: true,
        });
        assert_eq!(
            run(&transposed, &[(&[1, 2], &x), (&[3, 2], &wt)], &[1, 3]),
            [21.0, 40.0, 59.0]
        );
    }

    /// Float64 in its own precision: values an f32 cannot hold (1e8 + k) times small integers,
    /// whose sums are exact in f64, both weight orientations.
    #[test]
    fn float64_in_its_own_precision() {
        use crate::workloads::test_support::{Bytes, try_run_typed, typed};
        let x: Vec<f64> = (0..6).map(|k| 1e8 + f64::from(k)).collect(); // [2, 3]
        let w: Vec<f64> = vec![1.0, -2.0, 3.0, 0.0, 5.0, 1.0]; // [K=3, M=2]
        let b: Vec<f64> = vec![0.5, -0.25];
        let want: Vec<f64> = (0..2)
            .flat_map(|r| {
                let (x, w, b) = (&x, &w, &b);
                (0..2).map(move |j| b[j] + (0..3).map(|i| x[r * 3 + i] * w[i * 2 + j]).sum::<f64>())
            })
            .collect();
        let wt: Vec<f64> = (0..2)
            .flat_map(|j| (0..3).map(move |i| (j, i)))
            .map(|(j, i)| w[i * 2 + j])
            .collect();
        for (transpose, weights, shape) in [(false, &w, [3, 2]), (true, &wt, [2, 3])] {
            let layer = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
                bias_enabled: true,
                transpose_weights: transpose,
            });
            let t = |s: &[u32]| typed(s, backplane_api::DataType::Float64);
            let got = try_run_typed(
                &layer,
                &[
                    (t(&[2, 3]), Bytes::of(&x)),
                    (t(&shape), Bytes::of(weights)),
                    (t(&[2]), Bytes::of(&b)),
                ],
                &t(&[2, 2]),
            )
            .unwrap()
            .to_vec::<f64>();
            assert_eq!(got, want, "transpose {transpose}");
        }
        // 9e8 + 13.5: f32 values are 64 apart there, so an f32 computation could not give it.
        assert_eq!(want[0], 9e8 + 13.5);
    }

    /// Wrong tensor counts or shapes at execution are errors, not panics.
    #[test]
    fn rejects_mismatched_tensors() {
        let layer = LayerDescriptor::FullyConnected(FullyConnectedDescriptor::default());
        let (x_info, w_info, y_info) = (f32t(&[2, 3]), f32t(&[3, 2]), f32t(&[2, 2]));
        let workload = make(
            &layer,
            &[x_info.clone(), w_info.clone()],
            std::slice::from_ref(&y_info),
        )
        .unwrap();
        let (x, w) = ([0f32; 6], [0f32; 6]);
        let mut y = [0f32; 4];
        let x_view = (&x_info, &x[..]);
        assert!(execute(&*workload, &[x_view], &y_info, &mut y).is_err());
        let other = f32t(&[2, 3]);
        let swapped = (&other, &w[..]);
        let w_wrong = f32t(&[6, 1]);
        let w_view = (&w_wrong, &w[..]);
        assert!(execute(&*workload, &[swapped, w_view], &y_info, &mut y).is_err());
        let w_view = (&w_info, &w[..]);
        assert!(execute(&*workload, &[x_view, w_view], &y_info, &mut y).is_ok());
        assert!(make(&layer, &[x_info, f32t(&[2, 2])], &[y_info]).is_err());
    }
}
