//! ElementwiseBinary with numpy broadcasting, on Float32 or Signed32.

use backplane_api::{
    BackendError, BackendResult, BinaryOperation, DataType, TensorInfo, TensorView, TensorViewMut,
    Workload,
};
use ndarray::{IxDyn, Zip};

use super::broadcast_to::{broadcast, dims, input_view, output_view};
use super::expect_counts;

/// `out = op(a, b)` with broadcasting.
#[derive(Debug)]
pub struct ElementwiseWorkload {
    op: BinaryOperation,
    a: Vec<u32>,
    b: Vec<u32>,
    out: IxDyn,
}

impl ElementwiseWorkload {
    /// A workload for shapes checked by layer support.
    pub fn new(op: BinaryOperation, a: &TensorInfo, b: &TensorInfo, out: &TensorInfo) -> Self {
        Self {
            op,
            a: a.shape.to_vec(),
            b: b.shape.to_vec(),
            out: dims(&out.shape),
        }
    }
}

fn apply(op: BinaryOperation) -> fn(f32, f32) -> f32 {
    match op {
        BinaryOperation::Add => |x, y| x + y,
        BinaryOperation::Sub => |x, y| x - y,
        BinaryOperation::Mul => |x, y| x * y,
        BinaryOperation::Div => |x, y| x / y,
        BinaryOperation::Maximum => f32::max,
        BinaryOperation::Minimum => f32::min,
        BinaryOperation::Power => f32::powf,
        BinaryOperation::SquaredDifference => |x, y| (x - y) * (x - y),
    }
}

/// The Signed32 form of `op`: wrapping two's-complement arithmetic (as onnxruntime's), division
/// rounding toward zero (ONNX `Div` on integers), a non-negative exponent for `Power`. `Err`
/// with the message for a division by zero or a negative exponent.
fn apply_i32(op: BinaryOperation) -> fn(i32, i32) -> Result<i32, &'static str> {
    match op {
        BinaryOperation::Add => |x, y| Ok(x.wrapping_add(y)),
        BinaryOperation::Sub => |x, y| Ok(x.wrapping_sub(y)),
        BinaryOperation::Mul => |x, y| Ok(x.wrapping_mul(y)),
        BinaryOperation::Div => |x, y| x.checked_div(y).ok_or("integer division by zero"),
        BinaryOperation::Maximum => |x, y| Ok(x.max(y)),
        BinaryOperation::Minimum => |x, y| Ok(x.min(y)),
        BinaryOperation::Power => |x, y| {
            u32::try_from(y)
                .map(|e| x.wrapping_pow(e))
                .map_err(|_| "a negative integer exponent")
        },
        BinaryOperation::SquaredDifference => |x, y| {
            let d = x.wrapping_sub(y);
            Ok(d.wrapping_mul(d))
        },
    }
}

impl ElementwiseWorkload {
    /// `out = f(a, b)` over the broadcast shapes, for elements of type `T`.
    fn run<T: backplane_api::Element, E: Into<String>>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
        f: impl Fn(T, T) -> Result<T, E>,
    ) -> BackendResult<()> {
        let a = input_view(inputs[0].as_slice::<T>()?, &self.a)?;
        let b = input_view(inputs[1].as_slice::<T>()?, &self.b)?;
        let out = output_view(outputs[0].as_mut_slice::<T>()?, &self.out)?;
        let mut failure = None;
        Zip::from(out)
            .and(&broadcast(&a, &self.out)?)
            .and(&broadcast(&b, &self.out)?)
            .for_each(|o, &x, &y| match f(x, y) {
                Ok(v) => *o = v,
                Err(e) => {
                    failure.get_or_insert_with(|| e.into());
                }
            });
        match failure {
            Some(e) => Err(BackendError::invalid_argument(e)),
            None => Ok(()),
        }
    }
}

impl Workload for ElementwiseWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        expect_counts(inputs.len(), outputs.len(), 2, 1)?;
        match inputs[0].info.data_type {
            DataType::Signed32 => self.run::<i32, _>(inputs, outputs, apply_i32(self.op)),
            _ => {
                let f = apply(self.op);
                self.run::<f32, &str>(inputs, outputs, |x, y| Ok(f(x, y)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::test_support::{execute, f32t};

    /// Checked against a naive loop over the broadcast index.
    #[test]
    fn sub_broadcast_matches_naive_loop() {
        let (ia, ib, io) = (f32t(&[2, 3]), f32t(&[1, 3]), f32t(&[2, 3]));
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [10.0f32, 20.0, 30.0];
        let mut out = [0f32; 6];
        let w = ElementwiseWorkload::new(BinaryOperation::Sub, &ia, &ib, &io);
        execute(&w, &[(&ia, &a), (&ib, &b)], &io, &mut out).unwrap();
        let naive: Vec<f32> = (0..6).map(|i| a[i] - b[i % 3]).collect();
        assert_eq!(out.to_vec(), naive);
    }

    /// The two operations of Backend API 1.1, against a naive loop in f64 (`[2, 2] op [2]`).
    #[test]
    fn power_and_squared_difference_match_naive_loop() {
        let (ia, ib, io) = (f32t(&[2, 2]), f32t(&[2]), f32t(&[2, 2]));
        let a = [2.0f32, 3.0, 0.5, 4.0];
        let b = [3.0f32, -0.5];
        for (op, f) in [
            (BinaryOperation::Power, f64::powf as fn(f64, f64) -> f64),
            (BinaryOperation::SquaredDifference, |x: f64, y: f64| {
                (x - y) * (x - y)
            }),
        ] {
            let mut out = [0f32; 4];
            let w = ElementwiseWorkload::new(op, &ia, &ib, &io);
            execute(&w, &[(&ia, &a), (&ib, &b)], &io, &mut out).unwrap();
            for i in 0..4 {
                let want = f(f64::from(a[i]), f64::from(b[i % 2]));
                assert!(
                    (f64::from(out[i]) - want).abs() <= 1e-6 * (1.0 + want.abs()),
                    "{op:?} {i}"
                );
            }
        }
        // Exact points: 2^3 = 8, 3^-0.5, 0.5^3 = 0.125, 4^-0.5 = 0.5; (2-3)^2 = 1, (4+0.5)^2.
        let mut out = [0f32; 4];
        let w = ElementwiseWorkload::new(BinaryOperation::Power, &ia, &ib, &io);
        execute(&w, &[(&ia, &a), (&ib, &b)], &io, &mut out).unwrap();
        assert_eq!((out[0], out[2], out[3]), (8.0, 0.125, 0.5));
        let w = ElementwiseWorkload::new(BinaryOperation::SquaredDifference, &ia, &ib, &io);
        execute(&w, &[(&ia, &a), (&ib, &b)], &io, &mut out).unwrap();
        assert_eq!(out, [1.0, 12.25, 6.25, 20.25]);
    }

    /// Signed32: every operation against i64 arithmetic on a broadcast pair; division
    /// rounds toward zero; a zero divisor and a negative exponent fail the execution.
    #[test]
    fn signed32_operations_match_i64_arithmetic() {
        use crate::workloads::test_support::{Bytes, try_run_typed, typed};
        let a = [7i32, -7, 3, i32::MAX];
        let b = [2i32, -3];
        for op in BinaryOperation::ALL {
            let got = try_run_typed(
                &backplane_api::LayerDescriptor::ElementwiseBinary(op),
                &[
                    (typed(&[2, 2], DataType::Signed32), Bytes::of(&a)),
                    (typed(&[2], DataType::Signed32), Bytes::of(&b)),
                ],
                &typed(&[2, 2], DataType::Signed32),
            );
            let want: Vec<Option<i64>> = (0..4)
                .map(|i| {
                    let (x, y) = (i64::from(a[i]), i64::from(b[i % 2]));
                    match op {
                        BinaryOperation::Add => Some(x + y),
                        BinaryOperation::Sub => Some(x - y),
                        BinaryOperation::Mul => Some(x * y),
                        BinaryOperation::Div => Some(x / y),
                        BinaryOperation::Maximum => Some(x.max(y)),
                        BinaryOperation::Minimum => Some(x.min(y)),
                        BinaryOperation::Power => u32::try_from(y).ok().map(|e| x.wrapping_pow(e)),
                        BinaryOperation::SquaredDifference => Some((x - y) * (x - y)),
                    }
                    // Wrapped to 32 bits, as the workload does.
                    .map(|v| i64::from(v as i32))
                })
                .collect();
            if want.contains(&None) {
                assert!(got.is_err(), "{op:?}");
                continue;
            }
            let got: Vec<i64> = got
                .unwrap()
                .to_vec::<i32>()
                .into_iter()
                .map(i64::from)
                .collect();
            let want: Vec<i64> = want.into_iter().flatten().collect();
            assert_eq!(got, want, "{op:?}");
        }
    }
}
