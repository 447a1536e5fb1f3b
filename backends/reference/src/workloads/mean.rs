//! Mean over a set of axes (ONNX `ReduceMean` with explicit axes), keeping the reduced axes as
//! size 1 or dropping them. GlobalAveragePool is a Mean over `[2, 3]` with `keep_dims`. An
//! empty axis list reduces nothing: the output is the input.
//!
//! Float32 or Float64; sums are accumulated in f64 and divided by the number of reduced
//! elements.

use backplane_api::{
    BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::{ExpectedShapes, expect_counts, float_workload, invalid_layer};

/// A mean over some axes.
#[derive(Debug)]
pub struct MeanWorkload {
    /// Input dimensions (`[1]` for a scalar).
    dims: Vec<usize>,
    /// Per input axis, the stride of its index in the output (0 for a reduced axis).
    out_strides: Vec<usize>,
    /// Elements of the output.
    out_len: usize,
    /// Elements averaged into each output.
    count: usize,
    shapes: ExpectedShapes,
}

/// Creates the workload of a `Mean` layer.
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Mean(d) = desc.layer else {
        return Err(invalid_layer(
            desc,
            format_args!("{} is not Mean", desc.layer.kind()),
        ));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    let (x, y) = (&desc.inputs[0].shape, &desc.outputs[0].shape);
    let mut reduced = vec![false; x.len()];
    for &a in d.axes.iter() {
        match reduced.get_mut(a as usize) {
            Some(r) if !*r => *r = true,
            _ => {
                return Err(invalid_layer(
                    desc,
                    format_args!(
                        "axes {:?} are not distinct axes of {x:?}",
                        d.axes.as_slice()
                    ),
                ));
            }
        }
    }
    let expected: Vec<u32> = x
        .iter()
        .zip(&reduced)
        .filter_map(|(&dim, &r)| match (r, d.keep_dims) {
            (false, _) => Some(dim),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    if y.as_slice() != expected.as_slice() {
        return Err(invalid_layer(
            desc,
            format_args!(
                "the mean of {x:?} over {:?} is not {y:?}",
                d.axes.as_slice()
            ),
        ));
    }
    let (mut dims, mut reduced): (Vec<usize>, Vec<bool>) =
        (x.iter().map(|&v| v as usize).collect(), reduced);
    if dims.is_empty() {
        dims.push(1);
        reduced.push(false);
    }
    // Output strides over the kept axes, row-major; reduced axes do not move the output.
    let mut out_strides = vec![0; dims.len()];
    let mut stride = 1;
    for i in (0..dims.len()).rev() {
        if !reduced[i] {
            out_strides[i] = stride;
            stride *= dims[i];
        }
    }
    let count = dims
        .iter()
        .zip(&reduced)
        .filter(|(_, r)| **r)
        .map(|(d, _)| d)
        .product();
    Ok(Box::new(MeanWorkload {
        dims,
        out_strides,
        out_len: stride,
        count,
        shapes: ExpectedShapes::of(desc),
    }))
}

impl MeanWorkload {
    /// The mean of `T` (`f32` or `f64`, the tensors' type) values, summed in f64.
    fn run<T>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()>
    where
        T: backplane_api::Element + num_traits::Float + Into<f64>,
    {
        let x = inputs[0].as_slice::<T>()?;
        let out = outputs[0].as_mut_slice::<T>()?;
        let mut acc = vec![0f64; self.out_len];
        let rank = self.dims.len();
        let last = self.dims[rank - 1];
        let last_reduced = self.out_strides[rank - 1] == 0;
        // Walk the input row by row (all axes but the last), with an odometer over the outer
        // index and the matching output offset.
        let mut index = vec![0usize; rank - 1];
        let mut base = 0usize;
        if last > 0 {
            for row in x.chunks_exact(last) {
                if last_reduced {
                    acc[base] += row.iter().map(|&v| v.into()).sum::<f64>();
                } else {
                    for (a, &v) in acc[base..][..last].iter_mut().zip(row) {
                        *a += v.into();
                    }
                }
                for axis in (0..rank - 1).rev() {
                    index[axis] += 1;
                    base += self.out_strides[axis];
                    if index[axis] < self.dims[axis] {
                        break;
                    }
                    base -= self.out_strides[axis] * self.dims[axis];
                    index[axis] = 0;
                }
            }
        }
        let count = self.count as f64;
        for (o, a) in out.iter_mut().zip(&acc) {
            *o = T::from(a / count).unwrap_or_else(T::nan);
        }
        Ok(())
    }
}

float_workload!(MeanWorkload);

#[cfg(test)]
mod tests {
    use backplane_api::MeanDescriptor;

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, execute, f32t, make, run, u32s};

    fn mean(axes: &[u32], keep_dims: bool) -> LayerDescriptor {
        LayerDescriptor::Mean(MeanDescriptor {
            axes: axes.to_vec().into(),
            keep_dims,
        })
    }

    /// Relative tolerance of the comparisons with the oracle.
    const REL_TOL: f32 = 1e-5;

    /// The ONNX definition: for each output multi-index (reduced axes pinned to 0), average
    /// every input element whose kept coordinates match. Returns the keep-dims shape and the
    /// values in row-major order of that shape.
    fn oracle(x: &[f32], shape: &[usize], axes: &[usize]) -> (Vec<usize>, Vec<f32>) {
        let out_shape: Vec<usize> = (0..shape.len())
            .map(|i| if axes.contains(&i) { 1 } else { shape[i] })
            .collect();
        let unravel = |mut flat: usize, dims: &[usize]| {
            let mut idx = vec![0; dims.len()];
            for i in (0..dims.len()).rev() {
                idx[i] = flat % dims[i];
                flat /= dims[i];
            }
            idx
        };
        let out_len: usize = out_shape.iter().product();
        let values = (0..out_len)
            .map(|o| {
                let oi = unravel(o, &out_shape);
                let (mut sum, mut count) = (0f64, 0usize);
                for (flat, &v) in x.iter().enumerate() {
                    let xi = unravel(flat, shape);
                    if (0..shape.len()).all(|a| axes.contains(&a) || xi[a] == oi[a]) {
                        sum += f64::from(v);
                        count += 1;
                    }
                }
                (sum / count as f64) as f32
            })
            .collect();
        (out_shape, values)
    }

    /// Runs `axes` over random data of `shape` with and without `keep_dims` against the oracle.
    fn check(shape: &[usize], axes: &[usize], seed: u64) {
        let x = Lcg(seed).vec(shape.iter().product());
        let (keep_shape, want) = oracle(&x, shape, axes);
        let s = u32s(shape);
        let a = u32s(axes);
        let kept = u32s(&keep_shape);
        assert_close(
            &run(&mean(&a, true), &[(&s, &x)], &kept),
            &want,
            REL_TOL,
            "keep_dims",
        );
        let dropped: Vec<u32> = (0..shape.len())
            .filter(|i| !axes.contains(i))
            .map(|i| s[i])
            .collect();
        assert_close(
            &run(&mean(&a, false), &[(&s, &x)], &dropped),
            &want,
            REL_TOL,
            "without keep_dims",
        );
    }

    /// GlobalAveragePool: a mean over H and W of NCHW, with and without keep_dims.
    #[test]
    fn global_average_pool() {
        check(&[2, 3, 4, 5], &[2, 3], 1);
        check(&[1, 8, 7, 7], &[2, 3], 2);
    }

    /// Various axis sets, including axes given out of order, the last axis alone, non-adjacent
    /// axes and every axis (a scalar output without keep_dims).
    #[test]
    fn various_axes() {
        check(&[2, 3, 4, 5], &[1], 3);
        check(&[2, 3, 4, 5], &[3], 4);
        check(&[2, 3, 4, 5], &[0, 2], 5);
        check(&[2, 3, 4, 5], &[3, 1], 6);
        check(&[2, 3, 4, 5], &[0, 1, 2, 3], 7);
        check(&[6, 5], &[0], 8);
        check(&[7], &[0], 9);
        check(&[2, 1, 3], &[1], 10);
    }

    /// An empty axis list is the identity; so is a scalar with no axes.
    #[test]
    fn no_axes_is_identity() {
        let x = Lcg(11).vec(24);
        assert_eq!(run(&mean(&[], false), &[(&[2, 3, 4], &x)], &[2, 3, 4]), x);
        assert_eq!(run(&mean(&[], true), &[(&[], &[2.5])], &[]), [2.5]);
    }

    /// A hand-computed mean over axis 1 of a 2x3 matrix.
    #[test]
    fn hand_computed() {
        let x = [1.0, 2.0, 6.0, -1.0, 0.0, 4.0];
        assert_eq!(
            run(&mean(&[1], true), &[(&[2, 3], &x)], &[2, 1]),
            [3.0, 1.0]
        );
        assert_eq!(
            run(&mean(&[0], false), &[(&[2, 3], &x)], &[3]),
            [0.0, 1.0, 5.0]
        );
    }

    /// Wrong tensor counts or shapes at execution are errors, not panics.
    #[test]
    fn rejects_mismatched_tensors() {
        let layer = mean(&[1], false);
        let (x_info, y_info) = (f32t(&[2, 3]), f32t(&[2]));
        let workload = make(
            &layer,
            std::slice::from_ref(&x_info),
            std::slice::from_ref(&y_info),
        )
        .unwrap();
        let x = [0f32; 6];
        let mut y = [0f32; 2];
        assert!(execute(&*workload, &[], &y_info, &mut y).is_err());
        let other = f32t(&[3, 2]);
        assert!(execute(&*workload, &[(&other, &x)], &y_info, &mut y).is_err());
        assert!(execute(&*workload, &[(&x_info, &x)], &y_info, &mut y).is_ok());
        assert!(make(&layer, std::slice::from_ref(&x_info), &[f32t(&[2, 1])]).is_err());
        assert!(
            make(
                &mean(&[2], false),
                std::slice::from_ref(&x_info),
                &[f32t(&[2, 3])]
            )
            .is_err()
        );
    }
}
