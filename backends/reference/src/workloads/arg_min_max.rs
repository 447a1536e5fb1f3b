//! ArgMinMax (Backend API 1.1): along one axis of a tensor of any numeric type (Float32 and
//! Float64, the 16-bit floats widened, the integers), the index of the smallest
//! or largest element as Signed32 (ONNX `ArgMin`/`ArgMax`): the first among equals, or the
//! last with `select_last_index`. A NaN wins over every number for both functions (numpy's
//! rule): the first NaN (the last with `select_last_index`) is the answer.

use backplane_api::{
    ArgMinMaxFunction, BackendError, BackendResult, DataType, LayerDescriptor, TensorView,
    TensorViewMut, Workload, WorkloadDesc, shapes,
};

use super::numeric::{by_integer_type, is_half, widen_half};
use super::{ExpectedShapes, checked_num_elements, expect_counts, invalid_layer};

/// Creates the workload of an `ArgMinMax` layer (one numeric input, one Signed32 output).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::ArgMinMax(d) = desc.layer else {
        return Err(invalid_layer(desc, "not an ArgMinMax layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    let x = &desc.inputs[0];
    let expected =
        shapes::reduced(&x.shape, &[d.axis], d.keep_dims).map_err(|e| invalid_layer(desc, e))?;
    if expected != desc.outputs[0].shape.as_slice() || x.shape[d.axis as usize] == 0 {
        return Err(invalid_layer(
            desc,
            format_args!("ArgMinMax of {x} into {}", desc.outputs[0]),
        ));
    }
    checked_num_elements(desc, x)?;
    let axis = d.axis as usize;
    Ok(Box::new(ArgMinMaxWorkload {
        shapes: ExpectedShapes::of(desc),
        max: d.function == ArgMinMaxFunction::Max,
        last: d.select_last_index,
        size: x.shape[axis] as usize,
        inner: x.shape[axis + 1..].iter().map(|&v| v as usize).product(),
    }))
}

/// Finds one index per output element.
#[derive(Debug)]
pub struct ArgMinMaxWorkload {
    shapes: ExpectedShapes,
    max: bool,
    last: bool,
    /// The searched axis's size.
    size: usize,
    /// Product of the dimensions after the axis.
    inner: usize,
}

impl ArgMinMaxWorkload {
    /// The index of the best element of each slice of `src` (NaN, where `is_nan` says so,
    /// wins), into `dst`.
    fn run<T: Copy + PartialOrd>(
        &self,
        src: &[T],
        dst: &mut [i32],
        is_nan: impl Fn(T) -> bool,
    ) -> BackendResult<()> {
        if self.inner == 0 {
            return Ok(());
        }
        // `better(candidate, best)`: the candidate replaces the best so far.
        let better = |c: T, b: T| -> bool {
            if is_nan(b) {
                return self.last && is_nan(c);
            }
            if is_nan(c) {
                return true;
            }
            match (self.max, self.last) {
                (true, false) => c > b,
                (true, true) => c >= b,
                (false, false) => c < b,
                (false, true) => c <= b,
            }
        };
        for (o, d) in dst.iter_mut().enumerate() {
            let (outer, inner) = (o / self.inner, o % self.inner);
            let base = outer * self.size * self.inner + inner;
            let mut best = 0usize;
            for k in 1..self.size {
                if better(src[base + k * self.inner], src[base + best * self.inner]) {
                    best = k;
                }
            }
            // The axis's size fits in u32 and `best` is below it; i32 may not hold it.
            *d = i32::try_from(best).map_err(|_| {
                backplane_api::BackendError::invalid_argument(format!(
                    "index {best} exceeds Signed32"
                ))
            })?;
        }
        Ok(())
    }
}

impl Workload for ArgMinMaxWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let dst = outputs[0].as_mut_slice::<i32>()?;
        let dt = inputs[0].info.data_type;
        match dt {
            DataType::Float32 => self.run(inputs[0].as_f32()?, dst, f32::is_nan),
            DataType::Float64 => self.run(inputs[0].as_slice::<f64>()?, dst, f64::is_nan),
            // Widening is exact: the order is the 16-bit values'.
            dt if is_half(dt) => {
                let wide = widen_half(dt, inputs[0].as_slice::<u16>()?);
                self.run(&wide, dst, f32::is_nan)
            }
            dt => by_integer_type!(
                dt,
                |T| self.run(inputs[0].as_slice::<T>()?, dst, |_| false),
                Err(BackendError::unsupported(format!(
                    "CpuRef finds no ArgMinMax of {dt} data"
                )))
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{ArgMinMaxDescriptor, DataType};

    use super::*;
    use crate::workloads::test_support::{Bytes, Lcg, try_run_typed, typed};

    fn arg(
        function: ArgMinMaxFunction,
        axis: u32,
        last: bool,
        shape: &[u32],
        x: &[f32],
    ) -> Vec<i32> {
        let layer = LayerDescriptor::ArgMinMax(ArgMinMaxDescriptor {
            function,
            axis,
            keep_dims: true,
            select_last_index: last,
        });
        let out = shapes::reduced(shape, &[axis], true).unwrap();
        try_run_typed(
            &layer,
            &[(typed(shape, DataType::Float32), Bytes::of(x))],
            &typed(&out, DataType::Signed32),
        )
        .unwrap()
        .to_vec()
    }

    #[test]
    fn every_axis_matches_a_scan_of_the_definition() {
        let shape = [2u32, 3, 4];
        // Few distinct values, so ties are common.
        let x: Vec<f32> = {
            let mut rng = Lcg(8);
            (0..24).map(|_| (rng.next_in(0.0, 4.0)).floor()).collect()
        };
        for axis in 0..3u32 {
            for function in [ArgMinMaxFunction::Min, ArgMinMaxFunction::Max] {
                for last in [false, true] {
                    let a = axis as usize;
                    let s = [2usize, 3, 4];
                    let inner: usize = s[a + 1..].iter().product();
                    let outer: usize = s[..a].iter().product();
                    let mut want = Vec::new();
                    for o in 0..outer {
                        for i in 0..inner {
                            let vals: Vec<f32> =
                                (0..s[a]).map(|k| x[(o * s[a] + k) * inner + i]).collect();
                            let target = if function == ArgMinMaxFunction::Max {
                                vals.iter().copied().fold(f32::MIN, f32::max)
                            } else {
                                vals.iter().copied().fold(f32::MAX, f32::min)
                            };
                            let hits: Vec<usize> =
                                (0..vals.len()).filter(|&k| vals[k] == target).collect();
                            want.push(if last { *hits.last().unwrap() } else { hits[0] } as i32);
                        }
                    }
                    assert_eq!(
                        arg(function, axis, last, &shape, &x),
                        want,
                        "{function:?} axis {axis} last {last}"
                    );
                }
            }
        }
    }

    #[test]
    fn nan_wins() {
        let x = [1.0, f32::NAN, 5.0, f32::NAN];
        assert_eq!(arg(ArgMinMaxFunction::Max, 0, false, &[4], &x), [1]);
        assert_eq!(arg(ArgMinMaxFunction::Min, 0, false, &[4], &x), [1]);
        assert_eq!(arg(ArgMinMaxFunction::Max, 0, true, &[4], &x), [3]);
    }

    /// Integers (the extremes of the type included) and Float64 find the same indices as
    /// their order says.
    #[test]
    fn integer_and_double_inputs() {
        let layer = |function, last| {
            LayerDescriptor::ArgMinMax(ArgMinMaxDescriptor {
                function,
                axis: 0,
                keep_dims: true,
                select_last_index: last,
            })
        };
        let run_on = |dt: DataType, x: Bytes, function, last| {
            try_run_typed(
                &layer(function, last),
                &[(typed(&[4], dt), x)],
                &typed(&[1], DataType::Signed32),
            )
            .unwrap()
            .to_vec::<i32>()[0]
        };
        let x = [3i64, i64::MAX, -7, i64::MAX];
        assert_eq!(
            run_on(
                DataType::Signed64,
                Bytes::of(&x),
                ArgMinMaxFunction::Max,
                false
            ),
            1
        );
        assert_eq!(
            run_on(
                DataType::Signed64,
                Bytes::of(&x),
                ArgMinMaxFunction::Max,
                true
            ),
            3
        );
        assert_eq!(
            run_on(
                DataType::Signed64,
                Bytes::of(&x),
                ArgMinMaxFunction::Min,
                false
            ),
            2
        );
        let u = [200u8, 7, 255, 0];
        assert_eq!(
            run_on(
                DataType::UnsignedInt8,
                Bytes::of(&u),
                ArgMinMaxFunction::Max,
                false
            ),
            2
        );
        let d = [1.0f64, 1.0 + 1e-12, f64::NAN, 5.0];
        assert_eq!(
            run_on(
                DataType::Float64,
                Bytes::of(&d),
                ArgMinMaxFunction::Max,
                false
            ),
            2
        );
        let d = [1.0f64, 1.0 + 1e-12, 0.5, 5.0];
        assert_eq!(
            run_on(
                DataType::Float64,
                Bytes::of(&d),
                ArgMinMaxFunction::Min,
                false
            ),
            2
        );
        assert_eq!(
            run_on(
                DataType::Float64,
                Bytes::of(&[1.0f64, 1.0 + 1e-12, 0.5, 0.9]),
                ArgMinMaxFunction::Max,
                false
            ),
            1
        );
    }
}
