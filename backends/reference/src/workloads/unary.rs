//! ElementwiseUnary (Backend API 1.1): one function of one tensor, element by element, with
//! the meaning of ONNX's operator of the same name. NaN propagates; `Log` of a negative number
//! and `Sqrt`/`Rsqrt` of one are NaN, `Log(0)` is -inf and `Reciprocal(0)` is +inf, as in
//! IEEE arithmetic.

use backplane_api::{
    BackendResult, LayerDescriptor, TensorView, TensorViewMut, UnaryOperation, Workload,
    WorkloadDesc,
};

use super::{ExpectedShapes, expect_counts, invalid_layer};

/// The function `op` computes, in f32 (`Erf` from `libm`, as std has none).
pub fn function(op: UnaryOperation) -> fn(f32) -> f32 {
    match op {
        UnaryOperation::Abs => f32::abs,
        UnaryOperation::Neg => |x| -x,
        UnaryOperation::Exp => f32::exp,
        UnaryOperation::Log => f32::ln,
        UnaryOperation::Sqrt => f32::sqrt,
        UnaryOperation::Rsqrt => |x| 1.0 / x.sqrt(),
        UnaryOperation::Reciprocal => |x| 1.0 / x,
        UnaryOperation::Sin => f32::sin,
        UnaryOperation::Cos => f32::cos,
        UnaryOperation::Erf => libm::erff,
        UnaryOperation::Ceil => f32::ceil,
        UnaryOperation::Floor => f32::floor,
    }
}

/// Creates the workload of an `ElementwiseUnary` layer (one input, one output of its shape).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::ElementwiseUnary(op) = desc.layer else {
        return Err(invalid_layer(desc, "not an ElementwiseUnary layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    if desc.inputs[0].shape != desc.outputs[0].shape {
        return Err(invalid_layer(
            desc,
            format_args!("{op:?} of {} into {}", desc.inputs[0], desc.outputs[0]),
        ));
    }
    Ok(Box::new(UnaryWorkload {
        f: function(*op),
        shapes: ExpectedShapes::of(desc),
    }))
}

/// Applies one unary function element by element.
#[derive(Debug)]
pub struct UnaryWorkload {
    f: fn(f32) -> f32,
    shapes: ExpectedShapes,
}

impl Workload for UnaryWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let src = inputs[0].as_f32()?;
        let dst = outputs[0].as_f32_mut()?;
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = (self.f)(s);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, run};

    /// The oracle: each function in f64 from its definition (erf by its Maclaurin series, which
    /// converges fast on the inputs used here, |x| ≤ 2).
    fn oracle(op: UnaryOperation, x: f64) -> f64 {
        match op {
            UnaryOperation::Abs => x.abs(),
            UnaryOperation::Neg => -x,
            UnaryOperation::Exp => x.exp(),
            UnaryOperation::Log => x.ln(),
            UnaryOperation::Sqrt => x.sqrt(),
            UnaryOperation::Rsqrt => x.sqrt().recip(),
            UnaryOperation::Reciprocal => x.recip(),
            UnaryOperation::Sin => x.sin(),
            UnaryOperation::Cos => x.cos(),
            UnaryOperation::Erf => {
                // erf x = 2/√π Σ (-1)^n x^(2n+1) / (n! (2n+1))
                let (mut term, mut sum) = (x, 0.0);
                for n in 0..60 {
                    sum += term / f64::from(2 * n + 1);
                    term *= -x * x / f64::from(n + 1);
                }
                sum * 2.0 / std::f64::consts::PI.sqrt()
            }
            UnaryOperation::Ceil => x.ceil(),
            UnaryOperation::Floor => x.floor(),
        }
    }

    #[test]
    fn every_operation_matches_its_f64_definition() {
        let shape = [2u32, 3, 5];
        let mut rng = Lcg(12);
        for op in UnaryOperation::ALL {
            // Positive inputs where the function needs them.
            let (lo, hi) = match op {
                UnaryOperation::Log
                | UnaryOperation::Sqrt
                | UnaryOperation::Rsqrt
                | UnaryOperation::Reciprocal => (0.1, 2.0),
                _ => (-2.0, 2.0),
            };
            let x = rng.vec_in(30, lo, hi);
            let got = run(
                &LayerDescriptor::ElementwiseUnary(op),
                &[(&shape, &x)],
                &shape,
            );
            let want: Vec<f64> = x.iter().map(|&v| oracle(op, f64::from(v))).collect();
            assert_close(&got, &want, 1e-6, &format!("{op:?}"));
        }
    }

    #[test]
    fn known_points_and_ieee_edges() {
        let one = [1u32];
        let at = |op, x: f32| {
            run(
                &LayerDescriptor::ElementwiseUnary(op),
                &[(&one, &[x])],
                &one,
            )[0]
        };
        assert_eq!(at(UnaryOperation::Erf, 0.0), 0.0);
        assert!((at(UnaryOperation::Erf, 1.0) - 0.842_700_8).abs() < 1e-6);
        assert_eq!(at(UnaryOperation::Erf, 10.0), 1.0);
        assert_eq!(at(UnaryOperation::Ceil, -1.5), -1.0);
        assert_eq!(at(UnaryOperation::Floor, -1.5), -2.0);
        assert_eq!(at(UnaryOperation::Log, 0.0), f32::NEG_INFINITY);
        assert_eq!(at(UnaryOperation::Reciprocal, 0.0), f32::INFINITY);
        assert!(at(UnaryOperation::Sqrt, -1.0).is_nan());
        assert!(at(UnaryOperation::Abs, f32::NAN).is_nan());
    }

    #[test]
    fn shape_mismatch_is_refused() {
        let layer = LayerDescriptor::ElementwiseUnary(UnaryOperation::Abs);
        let err = crate::workloads::test_support::try_run(&layer, &[(&[2], &[1.0, 2.0])], &[3])
            .unwrap_err();
        assert_eq!(err.code, backplane_api::ErrorCode::Unsupported);
    }
}
