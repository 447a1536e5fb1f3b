//! Softmax along one axis (ONNX opset 13: each 1-D slice along `axis` is normalised on its
//! own), of `beta * x`, with the slice maximum subtracted before exponentiating; in Float32
//! or Float64 (the sums in f64).

use backplane_api::{
    BackendResult, DataType, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
    shapes::normalize_axis,
};
use num_traits::{AsPrimitive, Float};

use super::{ExpectedShapes, expect_counts, inner_size, invalid_layer};

/// Creates the workload of a `Softmax` layer (one input, one output of the same shape).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Softmax(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a Softmax layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    let shape = desc.inputs[0].shape.as_slice();
    if desc.outputs[0].shape.as_slice() != shape {
        return Err(invalid_layer(
            desc,
            format_args!("softmax of {} into {}", desc.inputs[0], desc.outputs[0]),
        ));
    }
    let axis =
        normalize_axis(i64::from(d.axis), shape.len()).map_err(|e| invalid_layer(desc, e))?;
    let inner = inner_size(desc, &desc.inputs[0], axis)?;
    Ok(Box::new(SoftmaxWorkload {
        beta: d.beta,
        len: shape[axis] as usize,
        inner,
        shapes: ExpectedShapes::of(desc),
    }))
}

/// Softmax of `beta * x` along one axis; the tensor is viewed as `[outer, len, inner]`,
/// `outer` being the product of the dimensions before the axis.
#[derive(Debug)]
pub struct SoftmaxWorkload {
    beta: f32,
    shapes: ExpectedShapes,
    /// The axis' size.
    len: usize,
    /// Product of the dimensions after the axis (the stride of the axis).
    inner: usize,
}

impl SoftmaxWorkload {
    /// The innermost axis: each contiguous row of `len` is one softmax.
    fn rows<T: Real>(&self, src: &[T], dst: &mut [T])
    where
        f64: AsPrimitive<T>,
    {
        let beta: T = f64::from(self.beta).as_();
        for (x, y) in src
            .chunks_exact(self.len)
            .zip(dst.chunks_exact_mut(self.len))
        {
            let max = x.iter().fold(T::neg_infinity(), |m, &v| m.max(beta * v));
            let mut sum = 0f64;
            for (o, &v) in y.iter_mut().zip(x) {
                *o = (beta * v - max).exp();
                sum += o.as_();
            }
            let scale: T = (1.0 / sum).as_();
            y.iter_mut().for_each(|o| *o *= scale);
        }
    }

    /// An outer axis: `inner` softmaxes at once per block, walking contiguous rows of `inner`.
    fn blocks<T: Real>(&self, src: &[T], dst: &mut [T])
    where
        f64: AsPrimitive<T>,
    {
        let (beta, inner): (T, usize) = (f64::from(self.beta).as_(), self.inner);
        let block = self.len * inner;
        let mut max = vec![T::zero(); inner];
        let mut sum = vec![0f64; inner];
        for (x, y) in src.chunks_exact(block).zip(dst.chunks_exact_mut(block)) {
            max.fill(T::neg_infinity());
            for row in x.chunks_exact(inner) {
                for (m, &v) in max.iter_mut().zip(row) {
                    *m = m.max(beta * v);
                }
            }
            sum.fill(0.0);
            for (xr, yr) in x.chunks_exact(inner).zip(y.chunks_exact_mut(inner)) {
                for (((o, &v), &m), s) in yr.iter_mut().zip(xr).zip(&max).zip(sum.iter_mut()) {
                    *o = (beta * v - m).exp();
                    *s += o.as_();
                }
            }
            // Reuse `max` for the reciprocals.
            for (m, &s) in max.iter_mut().zip(&sum) {
                *m = (1.0 / s).as_();
            }
            for yr in y.chunks_exact_mut(inner) {
                for (o, &r) in yr.iter_mut().zip(&max) {
                    *o *= r;
                }
            }
        }
    }
}

impl Workload for SoftmaxWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        if inputs[0].info.data_type == DataType::Float64 {
            self.run::<f64>(&inputs[0], &mut outputs[0])
        } else {
            self.run::<f32>(&inputs[0], &mut outputs[0])
        }
    }
}

impl SoftmaxWorkload {
    /// The softmax in `T` (`f32` or `f64`, the tensors' type), its sums in `f64`.
    fn run<T: Real>(
        &self,
        input: &TensorView<'_>,
        output: &mut TensorViewMut<'_>,
    ) -> BackendResult<()>
    where
        f64: AsPrimitive<T>,
    {
        let src = input.as_slice::<T>()?;
        let dst = output.as_mut_slice::<T>()?;
        if dst.is_empty() {
            return Ok(());
        }
        if self.inner == 1 {
            self.rows(src, dst);
        } else {
            self.blocks(src, dst);
        }
        Ok(())
    }
}

/// The element types a softmax computes in: `f32` and `f64`.
trait Real: backplane_api::Element + Float + AsPrimitive<f64> + std::ops::MulAssign {}

impl<T: backplane_api::Element + Float + AsPrimitive<f64> + std::ops::MulAssign> Real for T {}

#[cfg(test)]
mod tests {
    use backplane_api::SoftmaxDescriptor;

    use super::*;
    use crate::workloads::test_support::{
        Lcg, assert_close, assert_invalid_argument, desc, execute, f32t, try_run,
    };

    /// Runs the softmax of `beta * x` along `axis` through the factory on `x` of `shape`.
    fn run(beta: f32, axis: i32, shape: &[u32], x: &[f32]) -> BackendResult<Vec<f32>> {
        let layer = LayerDescriptor::Softmax(SoftmaxDescriptor { beta, axis });
        try_run(&layer, &[(shape, x)], shape)
    }

    /// Row-major multi-index of flat index `i`.
    fn unravel(mut i: usize, shape: &[u32]) -> Vec<usize> {
        let mut idx = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            idx[d] = i % shape[d] as usize;
            i /= shape[d] as usize;
        }
        idx
    }

    /// Flat index of a row-major multi-index.
    fn ravel(idx: &[usize], shape: &[u32]) -> usize {
        idx.iter()
            .zip(shape)
            .fold(0, |acc, (&i, &d)| acc * d as usize + i)
    }

    /// The definition, in f64: for every element, the exponentials of its whole slice along
    /// `axis` (found by varying that coordinate), with the slice maximum subtracted.
    fn oracle(beta: f32, axis: usize, shape: &[u32], x: &[f32]) -> Vec<f64> {
        let beta = f64::from(beta);
        (0..x.len())
            .map(|i| {
                let idx = unravel(i, shape);
                let slice: Vec<f64> = (0..shape[axis] as usize)
                    .map(|k| {
                        let mut j = idx.clone();
                        j[axis] = k;
                        beta * f64::from(x[ravel(&j, shape)])
                    })
                    .collect();
                let m = slice.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let denom: f64 = slice.iter().map(|v| (v - m).exp()).sum();
                (beta * f64::from(x[i]) - m).exp() / denom
            })
            .collect()
    }

    /// Relative tolerance of the comparisons with the f64 oracle.
    const REL_TOL: f64 = 1e-6;

    /// Every slice along `axis` sums to 1.
    fn assert_slices_sum_to_one(got: &[f32], axis: usize, shape: &[u32], what: &str) {
        for i in 0..got.len() {
            let idx = unravel(i, shape);
            if idx[axis] != 0 {
                continue;
            }
            let s: f64 = (0..shape[axis] as usize)
                .map(|k| {
                    let mut j = idx.clone();
                    j[axis] = k;
                    f64::from(got[ravel(&j, shape)])
                })
                .sum();
            assert!(
                (s - 1.0).abs() <= 1e-6,
                "{what}: slice at {idx:?} sums to {s}"
            );
        }
    }

    /// Axis 0, 1, -1 (and -2, -3) of 3-D tensors, beta 1 and others, against the oracle.
    #[test]
    fn matches_oracle_on_every_axis() {
        let shapes: [&[u32]; 3] = [&[3, 4, 5], &[2, 7, 1], &[1, 3, 16]];
        let mut seed = 1;
        for shape in shapes {
            for axis in [0, 1, 2, -1, -2, -3] {
                for beta in [1.0f32, 0.5, 2.5, -1.0, 0.0] {
                    seed += 1;
                    let n = shape.iter().product::<u32>() as usize;
                    let x = Lcg(seed).vec_in(n, -6.0, 6.0);
                    let got = run(beta, axis, shape, &x).unwrap();
                    let a = normalize_axis(i64::from(axis), 3).unwrap();
                    let what = format!("shape {shape:?} axis {axis} beta {beta}");
                    assert_close(&got, &oracle(beta, a, shape, &x), REL_TOL, &what);
                    assert_slices_sum_to_one(&got, a, shape, &what);
                }
            }
        }
    }

    /// Rank 1, 2 and 4, including a scalar-sized axis.
    #[test]
    fn other_ranks() {
        let cases: [(&[u32], i32); 5] = [
            (&[10], 0),
            (&[4, 6], 0),
            (&[4, 6], -1),
            (&[2, 3, 4, 5], 1),
            (&[2, 1, 3], 1),
        ];
        for (k, (shape, axis)) in cases.into_iter().enumerate() {
            let n = shape.iter().product::<u32>() as usize;
            let x = Lcg(100 + k as u64).vec_in(n, -3.0, 3.0);
            let got = run(1.3, axis, shape, &x).unwrap();
            let a = normalize_axis(i64::from(axis), shape.len()).unwrap();
            assert_close(
                &got,
                &oracle(1.3, a, shape, &x),
                REL_TOL,
                &format!("{shape:?} axis {axis}"),
            );
        }
    }

    /// Huge inputs do not overflow (the maximum is subtracted), and small hand-written cases.
    #[test]
    fn stable_and_hand_written() {
        let got = run(1.0, -1, &[2, 2], &[1000.0, 1000.0, -1000.0, -1001.0]).unwrap();
        let e = (-1.0f64).exp();
        assert_close(
            &got,
            &[0.5, 0.5, 1.0 / (1.0 + e), e / (1.0 + e)],
            REL_TOL,
            "large",
        );
        let got = run(1.0, 0, &[2, 2], &[1000.0, 3.0, 1000.0, 3.0]).unwrap();
        assert_close(&got, &[0.5, 0.5, 0.5, 0.5], REL_TOL, "large, axis 0");
        let got = run(1.0, 0, &[4], &[0.25; 4]).unwrap();
        assert_close(&got, &[0.25; 4], REL_TOL, "uniform");
        // softmax(2 * [0, ln 3 / 2]) = [1/4, 3/4]
        let got = run(2.0, 0, &[2], &[0.0, 3f32.ln() / 2.0]).unwrap();
        assert_close(&got, &[0.25, 0.75], REL_TOL, "beta 2");
        let got = run(-1.0, 0, &[2], &[0.0, 3f32.ln()]).unwrap();
        assert_close(&got, &[0.75, 0.25], REL_TOL, "beta -1");
        // A negative beta turns very negative inputs into huge exponents.
        let got = run(-1.0, -1, &[2], &[-1000.0, -1001.0]).unwrap();
        assert_close(
            &got,
            &[e / (1.0 + e), 1.0 / (1.0 + e)],
            REL_TOL,
            "beta -1, large, last axis",
        );
        let got = run(-1.0, 0, &[2, 2], &[-1000.0, -1.0, -1001.0, -1.0]).unwrap();
        assert_close(
            &got,
            &[e / (1.0 + e), 0.5, 1.0 / (1.0 + e), 0.5],
            REL_TOL,
            "beta -1, large, axis 0",
        );
        for axis in [0, 1, 2] {
            assert_eq!(run(1.0, axis, &[2, 0, 3], &[]).unwrap(), Vec::<f32>::new());
        }
        let big = Lcg(7).vec_in(3 * 9, 1e4, 3e4);
        let got = run(1.0, 1, &[3, 9], &big).unwrap();
        assert!(got.iter().all(|v| v.is_finite()));
        assert_slices_sum_to_one(&got, 1, &[3, 9], "big");
    }

    /// Out-of-range axes are refused at creation; bad tensors at execution are errors.
    #[test]
    fn bad_configurations_are_errors() {
        assert!(run(1.0, 3, &[2, 2, 2], &[0.0; 8]).is_err());
        assert!(run(1.0, -4, &[2, 2, 2], &[0.0; 8]).is_err());
        let layer = LayerDescriptor::Softmax(SoftmaxDescriptor { beta: 1.0, axis: 1 });
        let ins = [f32t(&[2, 3])];
        let w = create(&desc(&layer, &ins, &ins)).unwrap();
        let x = [0f32; 6];
        let mut out = [0f32; 6];
        let short = [(&ins[0], &x[..5])];
        assert_invalid_argument(execute(&*w, &short, &ins[0], &mut out));
        let other = f32t(&[3, 2]);
        let t = [(&other, &x[..])];
        assert_invalid_argument(execute(&*w, &t, &ins[0], &mut out));
        let two = [(&ins[0], &x[..]); 2];
        assert_invalid_argument(execute(&*w, &two, &ins[0], &mut out));
    }

    /// Float64 along the last and an outer axis: each slice sums to one within 1e-15, and
    /// logits 1e-10 apart (equal in f32) give probabilities that differ.
    #[test]
    fn float64_in_its_own_precision() {
        use crate::workloads::test_support::{Bytes, try_run_typed};
        use backplane_api::{DataType, SoftmaxDescriptor, TensorInfo};
        let x = [0.0f64, 1e-10, 2.0, 0.5, -1.0, 3.0];
        for axis in [1, 0] {
            let d = LayerDescriptor::Softmax(SoftmaxDescriptor { beta: 1.0, axis });
            let t = TensorInfo::new(&[2, 3], DataType::Float64);
            let y = try_run_typed(&d, &[(t.clone(), Bytes::of(&x))], &t)
                .unwrap()
                .to_vec::<f64>();
            let want: Vec<f64> = if axis == 1 {
                x.chunks(3)
                    .flat_map(|r| {
                        let s: f64 = r.iter().map(|v| v.exp()).sum();
                        r.iter().map(move |v| v.exp() / s).collect::<Vec<_>>()
                    })
                    .collect()
            } else {
                (0..6)
                    .map(|i| x[i].exp() / (x[i % 3].exp() + x[i % 3 + 3].exp()))
                    .collect()
            };
            for (g, w) in y.iter().zip(&want) {
                assert!((g - w).abs() < 1e-15, "axis {axis}: {y:?} vs {want:?}");
            }
        }
        let d = LayerDescriptor::Softmax(SoftmaxDescriptor { beta: 1.0, axis: 1 });
        let t = TensorInfo::new(&[1, 2], DataType::Float64);
        let y = try_run_typed(&d, &[(t.clone(), Bytes::of(&[0.0f64, 1e-10]))], &t)
            .unwrap()
            .to_vec::<f64>();
        assert!(y[1] > y[0], "{y:?}");
    }
}
