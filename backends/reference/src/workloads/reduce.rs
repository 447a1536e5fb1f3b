//! Reduce (Backend API 1.1): Sum, Max, Min, Mean or Prod over a set of axes (ONNX `ReduceSum`,
//! `ReduceMax`, `ReduceMin`, `ReduceMean`, `ReduceProd`), in the input's order: floats
//! (Float32, Float64) accumulated in f64, integers with two's-complement wrap-around (Mean
//! rounding toward zero), Boolean as 0 and 1 (Max is any, Min all). Max and Min propagate NaN;
//! over no elements they give -inf and +inf (an integer type's least and greatest values),
//! Sum 0, Prod 1 and Mean NaN.

use backplane_api::{
    BackendError, BackendResult, DataType, LayerDescriptor, ReduceOperation, TensorView,
    TensorViewMut, Workload, WorkloadDesc, shapes,
};

use super::numeric::by_integer_type;
use super::{ExpectedShapes, checked_num_elements, expect_counts, invalid_layer};

/// Creates the workload of a `Reduce` layer (one input, one output).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Reduce(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a Reduce layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    let x = &desc.inputs[0];
    let expected =
        shapes::reduced(&x.shape, &d.axes, d.keep_dims).map_err(|e| invalid_layer(desc, e))?;
    if expected != desc.outputs[0].shape.as_slice() {
        return Err(invalid_layer(
            desc,
            format_args!("Reduce of {x} into {}", desc.outputs[0]),
        ));
    }
    checked_num_elements(desc, x)?;
    let count: usize = (0..x.shape.len())
        .filter(|&a| d.axes.contains(&(a as u32)))
        .map(|a| x.shape[a] as usize)
        .product();
    Ok(Box::new(ReduceWorkload {
        operation: d.operation,
        shapes: ExpectedShapes::of(desc),
        dims: folded_dims(&x.shape, &d.axes),
        count,
        out_elements: expected.iter().map(|&d| d as usize).product(),
    }))
}

/// Per dimension of `shape` as the fold walks it, its size and the output offset one step of
/// it moves (0 when reduced): dimensions of one element dropped and neighbours both reduced or
/// both kept merged (the same elements in the same order, in fewer and longer rows: a global
/// max pool of `[n, c, h, 1]` folds rows of `h`, not `n·c·h` rows of one).
fn folded_dims(shape: &[u32], axes: &[u32]) -> Vec<(usize, usize)> {
    let mut merged: Vec<(usize, bool)> = Vec::new();
    for (a, &size) in shape.iter().enumerate() {
        let reduced = axes.contains(&(a as u32));
        match merged.last_mut() {
            _ if size == 1 => {}
            Some((last, was)) if *was == reduced => *last *= size as usize,
            _ => merged.push((size as usize, reduced)),
        }
    }
    let mut dims = vec![(0, 0); merged.len()];
    let mut stride = 1usize;
    for (d, &(size, reduced)) in dims.iter_mut().zip(&merged).rev() {
        *d = (size, if reduced { 0 } else { stride });
        if !reduced {
            stride *= size;
        }
    }
    dims
}

/// Reduces one tensor.
#[derive(Debug)]
pub struct ReduceWorkload {
    operation: ReduceOperation,
    shapes: ExpectedShapes,
    /// Per input dimension, its size and the output offset one step of it moves.
    dims: Vec<(usize, usize)>,
    /// Input elements per output element.
    count: usize,
    /// Output elements.
    out_elements: usize,
}

impl ReduceWorkload {
    /// `step` folded over the input in order into one accumulator per output element, each
    /// starting at `init`: the input row by row (its last dimension), an odometer over the
    /// other dimensions tracking the output offset; a row folds into one accumulator when its
    /// dimension is reduced, else element by element into a row of accumulators.
    ///
    /// `merge` combines two accumulators of an operation whose result does not depend on the
    /// order (Max, Min): a row folding into one accumulator then runs as eight interleaved
    /// chains merged at its end ([`fold_row`]).
    fn fold<T: Copy, A: Copy>(
        &self,
        src: &[T],
        init: A,
        step: impl Fn(A, T) -> A,
        merge: Option<fn(A, A) -> A>,
    ) -> Vec<A> {
        let mut acc = vec![init; self.out_elements];
        let Some((&(last, last_stride), outer)) = self.dims.split_last() else {
            // A scalar: one element into one accumulator.
            if let (Some(a), Some(&x)) = (acc.first_mut(), src.first()) {
                *a = step(*a, x);
            }
            return acc;
        };
        if src.is_empty() || last == 0 {
            return acc;
        }
        let mut index = vec![0usize; outer.len()];
        let mut at = 0usize;
        for row in src.chunks_exact(last) {
            if last_stride == 0 {
                acc[at] = fold_row(acc[at], row, &step, merge);
            } else {
                // A kept last dimension is the output's last too (step 1).
                debug_assert_eq!(last_stride, 1);
                for (a, &x) in acc[at..at + last].iter_mut().zip(row) {
                    *a = step(*a, x);
                }
            }
            for (i, &(size, stride)) in index.iter_mut().zip(outer).rev() {
                *i += 1;
                at += stride;
                if *i < size {
                    break;
                }
                at -= stride * size;
                *i = 0;
            }
        }
        acc
    }

    /// The reduction of float values (each widened to f64 as it is read), before `Mean`'s
    /// division.
    fn fold_float<T: Copy + Into<f64>>(&self, values: &[T]) -> Vec<f64> {
        match self.operation {
            ReduceOperation::Sum | ReduceOperation::Mean => {
                self.fold(values, 0.0, |a, x| a + x.into(), None)
            }
            ReduceOperation::Prod => self.fold(values, 1.0, |a, x| a * x.into(), None),
            ReduceOperation::Max => self.fold(
                values,
                f64::NEG_INFINITY,
                |a, x| nan_max(a, x.into()),
                Some(nan_max),
            ),
            ReduceOperation::Min => self.fold(
                values,
                f64::INFINITY,
                |a, x| nan_min(a, x.into()),
                Some(nan_min),
            ),
        }
    }

    /// The reduction of integers, accumulated in i128 with wrap-around and truncated to `T`:
    /// the low bits of a wrapped sum or product are those of the type's own wrapping
    /// arithmetic. `Mean` divides the exact sum (i128 does not wrap for any tensor that fits
    /// memory), rounding toward zero.
    fn run_int<T>(&self, src: &[T], dst: &mut [T])
    where
        T: Copy + num_traits::AsPrimitive<i128> + num_traits::Bounded,
        i128: num_traits::AsPrimitive<T>,
    {
        use num_traits::AsPrimitive;
        let acc = match self.operation {
            ReduceOperation::Sum | ReduceOperation::Mean => {
                self.fold(src, 0i128, |a, x| a.wrapping_add(x.as_()), None)
            }
            ReduceOperation::Prod => self.fold(src, 1i128, |a, x| a.wrapping_mul(x.as_()), None),
            ReduceOperation::Max => self.fold(
                src,
                T::min_value().as_(),
                |a, x| a.max(x.as_()),
                Some(i128::max),
            ),
            ReduceOperation::Min => self.fold(
                src,
                T::max_value().as_(),
                |a, x| a.min(x.as_()),
                Some(i128::min),
            ),
        };
        let count = i128::try_from(self.count).unwrap_or(i128::MAX).max(1);
        for (d, a) in dst.iter_mut().zip(acc) {
            let v = if self.operation == ReduceOperation::Mean {
                a / count
            } else {
                a
            };
            *d = v.as_();
        }
    }
}

/// `step` folded over `row` from `init`; with `merge`, as eight interleaved chains (element
/// `j` into chain `j % 8`, the last `len % 8` elements after them) merged in order.
fn fold_row<T: Copy, A: Copy>(
    init: A,
    row: &[T],
    step: &impl Fn(A, T) -> A,
    merge: Option<fn(A, A) -> A>,
) -> A {
    let Some(merge) = merge else {
        return row.iter().fold(init, |a, &x| step(a, x));
    };
    let mut chains = [init; 8];
    let blocks = row.chunks_exact(8);
    let tail = blocks.remainder();
    for block in blocks {
        for (c, &x) in chains.iter_mut().zip(block) {
            *c = step(*c, x);
        }
    }
    let merged = chains.into_iter().reduce(merge).unwrap_or(init);
    tail.iter().fold(merged, |a, &x| step(a, x))
}

/// The larger of two values, NaN if either is.
fn nan_max(a: f64, x: f64) -> f64 {
    if a.is_nan() || x.is_nan() {
        f64::NAN
    } else {
        a.max(x)
    }
}

/// The smaller of two values, NaN if either is.
fn nan_min(a: f64, x: f64) -> f64 {
    if a.is_nan() || x.is_nan() {
        f64::NAN
    } else {
        a.min(x)
    }
}

impl Workload for ReduceWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let dt = inputs[0].info.data_type;
        let mean = |a: f64| {
            if self.operation == ReduceOperation::Mean {
                a / self.count as f64
            } else {
                a
            }
        };
        match dt {
            DataType::Float32 => {
                let src = inputs[0].as_f32()?;
                let acc = self.fold_float(src);
                for (d, a) in outputs[0].as_f32_mut()?.iter_mut().zip(acc) {
                    *d = mean(a) as f32;
                }
            }
            DataType::Float64 => {
                let src = inputs[0].as_slice::<f64>()?;
                let acc = self.fold_float(src);
                for (d, a) in outputs[0].as_mut_slice::<f64>()?.iter_mut().zip(acc) {
                    *d = mean(a);
                }
            }
            // 0 and 1, as u8.
            DataType::Boolean => {
                let src = inputs[0].as_slice::<u8>()?;
                let ones: Vec<u8> = src.iter().map(|&b| u8::from(b != 0)).collect();
                self.run_int(&ones, outputs[0].as_mut_slice::<u8>()?);
            }
            dt => by_integer_type!(
                dt,
                |T| self.run_int(inputs[0].as_slice::<T>()?, outputs[0].as_mut_slice::<T>()?),
                return Err(BackendError::unsupported(format!(
                    "CpuRef reduces no {dt} data"
                )))
            ),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::ReduceDescriptor;

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, run};

    /// The oracle: for each output element, the reduction of every input element whose kept
    /// indices match, by the definition.
    fn oracle(op: ReduceOperation, x: &[f32], shape: &[usize], axes: &[usize]) -> Vec<f64> {
        let out_shape: Vec<usize> = (0..shape.len())
            .filter(|a| !axes.contains(a))
            .map(|a| shape[a])
            .collect();
        let n_out: usize = out_shape.iter().product();
        let unravel = |mut f: usize, s: &[usize]| {
            let mut idx = vec![0; s.len()];
            for a in (0..s.len()).rev() {
                idx[a] = f % s[a];
                f /= s[a];
            }
            idx
        };
        (0..n_out)
            .map(|o| {
                let oi = unravel(o, &out_shape);
                let vals: Vec<f64> = (0..x.len())
                    .filter(|&f| {
                        let ii = unravel(f, shape);
                        let kept: Vec<usize> = (0..shape.len())
                            .filter(|a| !axes.contains(a))
                            .map(|a| ii[a])
                            .collect();
                        kept == oi
                    })
                    .map(|f| f64::from(x[f]))
                    .collect();
                match op {
                    ReduceOperation::Sum => vals.iter().sum(),
                    ReduceOperation::Mean => vals.iter().sum::<f64>() / vals.len() as f64,
                    ReduceOperation::Prod => vals.iter().product(),
                    ReduceOperation::Max => vals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                    ReduceOperation::Min => vals.iter().copied().fold(f64::INFINITY, f64::min),
                }
            })
            .collect()
    }

    /// Every operation over each of `axis_sets` of `x` (of `shape`), with each of `keeps`,
    /// against the definition.
    fn check_against_the_definition(
        shape: &[u32],
        x: &[f32],
        axis_sets: &[Vec<u32>],
        keeps: &[bool],
    ) {
        let us: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        for op in ReduceOperation::ALL {
            for axes in axis_sets {
                for &keep_dims in keeps {
                    let layer = LayerDescriptor::Reduce(ReduceDescriptor {
                        operation: op,
                        axes: axes.clone().into(),
                        keep_dims,
                    });
                    let out = shapes::reduced(shape, axes, keep_dims).unwrap();
                    let got = run(&layer, &[(shape, x)], &out);
                    let ax: Vec<usize> = axes.iter().map(|&a| a as usize).collect();
                    let what = format!("{op:?} {axes:?} keep {keep_dims}");
                    assert_close(&got, &oracle(op, x, &us, &ax), 1e-6, &what);
                }
            }
        }
    }

    #[test]
    fn every_operation_over_axis_sets_matches_the_definition() {
        let x = Lcg(5).vec_in(24, 0.5, 1.5);
        let axis_sets = [
            vec![0u32],
            vec![1],
            vec![2],
            vec![0, 2],
            vec![2, 0, 1],
            vec![],
        ];
        check_against_the_definition(&[2, 3, 4], &x, &axis_sets, &[false, true]);
    }

    /// Dimensions of one element and runs of reduced or kept neighbours, against the
    /// definition: the same results as the unmerged walk.
    #[test]
    fn merged_dimensions_match_the_definition() {
        let x = Lcg(9).vec_in(48, -1.5, 1.5);
        let axis_sets = [
            vec![1u32],
            vec![2, 3],
            vec![0, 1],
            vec![3, 4],
            vec![0, 2, 5],
            vec![4],
        ];
        check_against_the_definition(&[2, 1, 3, 4, 1, 2], &x, &axis_sets, &[true]);
        // A global max pool's reduction: one row of `h` per channel.
        assert_eq!(
            folded_dims(&[12, 512, 508, 1], &[2, 3]),
            [(6144, 1), (508, 0)]
        );
        assert_eq!(folded_dims(&[1, 1], &[0]), []);
        assert_eq!(folded_dims(&[2, 3, 4], &[1]), [(2, 4), (3, 0), (4, 1)]);
    }

    #[test]
    fn nan_and_empty_reductions() {
        let layer = |operation| {
            LayerDescriptor::Reduce(ReduceDescriptor {
                operation,
                axes: vec![1].into(),
                keep_dims: false,
            })
        };
        let got = run(
            &layer(ReduceOperation::Max),
            &[(&[1, 3], &[1.0, f32::NAN, 2.0])],
            &[1],
        );
        assert!(got[0].is_nan());
        // Rows long enough for the interleaved chains: a NaN in a chain or in the tail wins,
        // the extreme found in either place.
        let mut long: Vec<f32> = (0..21).map(|i| (i * 7 % 19) as f32 - 9.0).collect();
        long.extend((0..21).map(|i| (i * 5 % 23) as f32 - 11.0));
        long[19] = 30.0;
        let rows = |op, x: &[f32]| run(&layer(op), &[(&[2, 21], x)], &[2]);
        assert_eq!(rows(ReduceOperation::Max, &long), [30.0, 11.0]);
        assert_eq!(rows(ReduceOperation::Min, &long), [-9.0, -11.0]);
        for at in [3, 20] {
            let mut x = long.clone();
            x[at] = f32::NAN;
            x[21 + at] = f32::NAN;
            for op in [ReduceOperation::Max, ReduceOperation::Min] {
                assert!(
                    rows(op, &x).iter().all(|v| v.is_nan()),
                    "{op:?} NaN at {at}"
                );
            }
        }
        let empty: [f32; 0] = [];
        let at = |op| run(&layer(op), &[(&[2, 0], &empty)], &[2]);
        assert_eq!(at(ReduceOperation::Sum), [0.0, 0.0]);
        assert_eq!(at(ReduceOperation::Prod), [1.0, 1.0]);
        assert_eq!(at(ReduceOperation::Max), [f32::NEG_INFINITY; 2]);
        assert_eq!(at(ReduceOperation::Min), [f32::INFINITY; 2]);
        assert!(at(ReduceOperation::Mean).iter().all(|v| v.is_nan()));
    }

    /// Integer reductions wrap as the type's own arithmetic (checked against i128 reduced
    /// modulo 2^8), Mean is the exact mean rounded toward zero; Boolean Max is any and Min all; Float64 keeps
    /// its precision.
    #[test]
    fn integer_boolean_and_double_reductions() {
        use crate::workloads::test_support::{Bytes, try_run_typed, typed};
        let layer = |operation| {
            LayerDescriptor::Reduce(ReduceDescriptor {
                operation,
                axes: vec![1].into(),
                keep_dims: false,
            })
        };
        let run_as = |op, dt: DataType, x: Bytes, out: DataType| {
            try_run_typed(&layer(op), &[(typed(&[2, 3], dt), x)], &typed(&[2], out)).unwrap()
        };
        let x = [100i8, 100, 100, -7, -2, 2];
        let wrap8 = |v: i128| v.rem_euclid(256) as u8 as i8;
        let sum = run_as(
            ReduceOperation::Sum,
            DataType::Signed8,
            Bytes::of(&x),
            DataType::Signed8,
        );
        assert_eq!(sum.to_vec::<i8>(), [wrap8(300), -7]);
        let prod = run_as(
            ReduceOperation::Prod,
            DataType::Signed8,
            Bytes::of(&x),
            DataType::Signed8,
        );
        assert_eq!(prod.to_vec::<i8>(), [wrap8(1_000_000), 28]);
        let mean = run_as(
            ReduceOperation::Mean,
            DataType::Signed8,
            Bytes::of(&x),
            DataType::Signed8,
        );
        // The mean of the exact sum, not of the wrapped one.
        assert_eq!(mean.to_vec::<i8>(), [100, -2]);
        let u = [7u64, u64::MAX, 3, 1, 2, 0];
        let max = run_as(
            ReduceOperation::Max,
            DataType::UnsignedInt64,
            Bytes::of(&u),
            DataType::UnsignedInt64,
        );
        assert_eq!(max.to_vec::<u64>(), [u64::MAX, 2]);
        let min = run_as(
            ReduceOperation::Min,
            DataType::UnsignedInt64,
            Bytes::of(&u),
            DataType::UnsignedInt64,
        );
        assert_eq!(min.to_vec::<u64>(), [3, 0]);
        let b = [1u8, 0, 1, 0, 0, 0];
        let any = run_as(
            ReduceOperation::Max,
            DataType::Boolean,
            Bytes::of(&b),
            DataType::Boolean,
        );
        assert_eq!(any.to_vec::<u8>(), [1, 0]);
        let all = run_as(
            ReduceOperation::Min,
            DataType::Boolean,
            Bytes::of(&b),
            DataType::Boolean,
        );
        assert_eq!(all.to_vec::<u8>(), [0, 0]);
        // 1 + 1e-12 is exact in f64 and lost in f32.
        let d = [1.0f64, 1e-12, 0.0, 2.0, 2.0, 2.0];
        let s = run_as(
            ReduceOperation::Sum,
            DataType::Float64,
            Bytes::of(&d),
            DataType::Float64,
        );
        assert_eq!(s.to_vec::<f64>(), [1.0 + 1e-12, 6.0]);
    }
}
