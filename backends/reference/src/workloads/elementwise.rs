//! ElementwiseBinary with numpy broadcasting, on every plain numeric type (Backend API 1.5):
//! IEEE arithmetic on the floats (the 16-bit ones computed in `f32`, rounded once), ONNX's
//! wrap-around arithmetic on the integers ([`Int`]).

use super::broadcast_to::zip_broadcast;
use super::expect_counts;
use super::numeric::{Int, by_integer_type, float_op, is_half, narrow_half, widen_half};
use backplane_api::{
    BackendError, BackendResult, BinaryOperation, DataType, TensorInfo, TensorView, TensorViewMut,
    Workload,
};

/// `out = op(a, b)` with broadcasting.
#[derive(Debug)]
pub struct ElementwiseWorkload {
    op: BinaryOperation,
    a: Vec<u32>,
    b: Vec<u32>,
    out: Vec<u32>,
}

impl ElementwiseWorkload {
    /// A workload for shapes checked by layer support.
    pub fn new(op: BinaryOperation, a: &TensorInfo, b: &TensorInfo, out: &TensorInfo) -> Self {
        Self {
            op,
            a: a.shape.to_vec(),
            b: b.shape.to_vec(),
            out: out.shape.to_vec(),
        }
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
        checked_zip(
            (inputs[0].as_slice::<T>()?, &self.a),
            (inputs[1].as_slice::<T>()?, &self.b),
            (outputs[0].as_mut_slice::<T>()?, &self.out),
            f,
        )
    }
}

impl ElementwiseWorkload {
    /// Float16 or BFloat16: both operands widened to `f32` (exactly), `op` in `f32`, the result
    /// rounded once to the output's type.
    fn run_half(
        &self,
        dt: DataType,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let a = widen_half(dt, inputs[0].as_slice::<u16>()?);
        let b = widen_half(dt, inputs[1].as_slice::<u16>()?);
        let f = float_op::<f32>(self.op)?;
        let mut out = vec![0.0f32; self.out.iter().map(|&d| d as usize).product()];
        zip_broadcast(
            (&a, &self.a),
            (&b, &self.b),
            (&mut out, &self.out),
            |o, x, y| *o = f(x, y),
        )?;
        narrow_half(dt, &out, outputs[0].as_mut_slice::<u16>()?);
        Ok(())
    }
}

/// `out = f(a, b)` over the broadcast shapes; the first error `f` gives fails the whole.
fn checked_zip<T: Copy, E: Into<String>>(
    a: (&[T], &[u32]),
    b: (&[T], &[u32]),
    out: (&mut [T], &[u32]),
    f: impl Fn(T, T) -> Result<T, E>,
) -> BackendResult<()> {
    let mut failure = None;
    zip_broadcast(a, b, out, |o, x, y| match f(x, y) {
        Ok(v) => *o = v,
        Err(e) => {
            failure.get_or_insert_with(|| e.into());
        }
    })?;
    match failure {
        Some(e) => Err(BackendError::invalid_argument(e)),
        None => Ok(()),
    }
}

impl Workload for ElementwiseWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        expect_counts(inputs.len(), outputs.len(), 2, 1)?;
        let dt = inputs[0].info.data_type;
        let op = self.op;
        match dt {
            DataType::Float32 => {
                let f = float_op::<f32>(op)?;
                self.run::<f32, &str>(inputs, outputs, |x, y| Ok(f(x, y)))
            }
            DataType::Float64 => {
                let f = float_op::<f64>(op)?;
                self.run::<f64, &str>(inputs, outputs, |x, y| Ok(f(x, y)))
            }
            dt if is_half(dt) => self.run_half(dt, inputs, outputs),
            dt => by_integer_type!(
                dt,
                |T| self.run::<T, _>(inputs, outputs, |x, y| T::apply(op, x, y)),
                Err(BackendError::unsupported(format!(
                    "CpuRef computes no elementwise arithmetic on {dt}"
                )))
            ),
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
                        BinaryOperation::BitwiseAnd => Some(x & y),
                        BinaryOperation::BitwiseOr => Some(x | y),
                        BinaryOperation::BitwiseXor => Some(x ^ y),
                        // Shifts are defined on unsigned types: refused here.
                        BinaryOperation::ShiftLeft | BinaryOperation::ShiftRight => None,
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

    /// Backend API 1.5's types, each expected value worked out by hand: wrap-around on the
    /// integers, IEEE on the floats, one rounding for Float16.
    #[test]
    fn the_1_5_types() {
        use crate::workloads::test_support::{Bytes, try_run_typed, typed};
        use backplane_api::LayerDescriptor;
        let run = |op, dt, a: Bytes, b: Bytes, n: u32| {
            try_run_typed(
                &LayerDescriptor::ElementwiseBinary(op),
                &[(typed(&[n], dt), a), (typed(&[n], dt), b)],
                &typed(&[n], dt),
            )
        };
        use BinaryOperation::*;
        use DataType::*;
        let got = run(
            Mul,
            Signed64,
            Bytes::of(&[i64::MAX, -3, 1 << 40]),
            Bytes::of(&[2i64, 7, 1 << 30]),
            3,
        );
        // 2^63 - 1 times 2 is 2^64 - 2, which wraps to -2; 2^70 wraps to 0.
        assert_eq!(got.unwrap().to_vec::<i64>(), [-2, -21, 0]);
        let got = run(
            Sub,
            UnsignedInt8,
            Bytes::of(&[3u8, 200]),
            Bytes::of(&[5u8, 100]),
            2,
        );
        assert_eq!(got.unwrap().to_vec::<u8>(), [254, 100]);
        let got = run(
            Div,
            Signed16,
            Bytes::of(&[-7i16, i16::MIN]),
            Bytes::of(&[2i16, -1]),
            2,
        );
        assert_eq!(got.unwrap().to_vec::<i16>(), [-3, i16::MIN]);
        assert!(
            run(
                Div,
                UnsignedInt32,
                Bytes::of(&[1u32]),
                Bytes::of(&[0u32]),
                1
            )
            .is_err()
        );
        let got = run(
            Power,
            UnsignedInt64,
            Bytes::of(&[2u64, 3]),
            Bytes::of(&[64u64, 4]),
            2,
        );
        assert_eq!(got.unwrap().to_vec::<u64>(), [0, 81]);
        let got = run(
            Add,
            Float64,
            Bytes::of(&[0.1f64, 1e308]),
            Bytes::of(&[0.2f64, 1e308]),
            2,
        );
        assert_eq!(got.unwrap().to_vec::<f64>(), [0.1 + 0.2, f64::INFINITY]);
        // Float16: 1.0 + 2^-11 is a tie between 1.0 and 1.0 + 2^-10: it rounds to even, 1.0
        // (0x3c00); 2.0 + 3.0 = 5.0 (0x4500) exactly. 2^-11 is 0x1000 in binary16.
        let got = run(
            Add,
            Float16,
            Bytes::of(&[0x3c00u16, 0x4000]),
            Bytes::of(&[0x1000u16, 0x4200]),
            2,
        );
        assert_eq!(got.unwrap().to_vec::<u16>(), [0x3c00, 0x4500]);
        let got = run(
            Mul,
            BFloat16,
            Bytes::of(&[0x4000u16]),
            Bytes::of(&[0x4040u16]),
            1,
        );
        assert_eq!(got.unwrap().to_vec::<u16>(), [0x40c0]);
    }
}
