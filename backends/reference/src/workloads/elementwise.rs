//! ElementwiseBinary with numpy broadcasting.

use backplane_api::{
    BackendError, BackendResult, BinaryOperation, TensorInfo, TensorView, TensorViewMut, Workload,
};
use ndarray::{ArrayViewD, ArrayViewMutD, IxDyn, Zip};

use super::expect_counts;

fn dims(shape: &[u32]) -> IxDyn {
    IxDyn(&shape.iter().map(|&d| d as usize).collect::<Vec<_>>())
}

/// `out = op(a, b)` with broadcasting.
#[derive(Debug)]
pub struct ElementwiseWorkload {
    op: BinaryOperation,
    a: IxDyn,
    b: IxDyn,
    out: IxDyn,
}

impl ElementwiseWorkload {
    /// A workload for shapes checked by layer support.
    pub fn new(op: BinaryOperation, a: &TensorInfo, b: &TensorInfo, out: &TensorInfo) -> Self {
        Self {
            op,
            a: dims(&a.shape),
            b: dims(&b.shape),
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

fn shape_error(e: ndarray::ShapeError) -> BackendError {
    BackendError::invalid_argument(format!("tensor does not match its shape: {e}"))
}

impl Workload for ElementwiseWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        expect_counts(inputs.len(), outputs.len(), 2, 1)?;
        let a = ArrayViewD::from_shape(self.a.clone(), inputs[0].as_f32()?).map_err(shape_error)?;
        let b = ArrayViewD::from_shape(self.b.clone(), inputs[1].as_f32()?).map_err(shape_error)?;
        let out = ArrayViewMutD::from_shape(self.out.clone(), outputs[0].as_f32_mut()?)
            .map_err(shape_error)?;
        let not_broadcastable =
            || BackendError::invalid_argument("inputs do not broadcast to the output");
        let a = a
            .broadcast(self.out.clone())
            .ok_or_else(not_broadcastable)?;
        let b = b
            .broadcast(self.out.clone())
            .ok_or_else(not_broadcastable)?;
        let f = apply(self.op);
        Zip::from(out)
            .and(&a)
            .and(&b)
            .for_each(|o, &x, &y| *o = f(x, y));
        Ok(())
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
}
