//! ElementwiseUnary (Backend API 1.1): one function of one tensor, element by element, with
//! the meaning of ONNX's operator of the same name. NaN propagates; `Log` of a negative number
//! and `Sqrt`/`Rsqrt` of one are NaN, `Log(0)` is -inf and `Reciprocal(0)` is +inf, as in
//! IEEE arithmetic.

use backplane_api::{
    BackendError, BackendResult, DataType, LayerDescriptor, TensorView, TensorViewMut,
    UnaryOperation, Workload, WorkloadDesc,
};

use super::{ExpectedShapes, expect_counts, invalid_layer};

/// What the unary functions need of a float type beyond `num_traits::Float`: `erf` (from
/// `libm`, as std has none) and rounding half to even.
pub trait UnaryFloat: num_traits::Float + backplane_api::Element {
    /// The Gauss error function.
    fn erf(self) -> Self;
    /// The nearest integer, halves to even.
    fn round_even(self) -> Self;
}

impl UnaryFloat for f32 {
    fn erf(self) -> Self {
        libm::erff(self)
    }
    fn round_even(self) -> Self {
        self.round_ties_even()
    }
}

impl UnaryFloat for f64 {
    fn erf(self) -> Self {
        libm::erf(self)
    }
    fn round_even(self) -> Self {
        self.round_ties_even()
    }
}

/// The function `op` computes, in `T` (`f32` or `f64`).
pub fn function<T: UnaryFloat>(op: UnaryOperation) -> fn(T) -> T {
    match op {
        UnaryOperation::Abs => T::abs,
        UnaryOperation::Neg => |x| -x,
        UnaryOperation::Exp => T::exp,
        UnaryOperation::Log => T::ln,
        UnaryOperation::Sqrt => T::sqrt,
        UnaryOperation::Rsqrt => |x| T::one() / x.sqrt(),
        UnaryOperation::Reciprocal => |x| T::one() / x,
        UnaryOperation::Sin => T::sin,
        UnaryOperation::Cos => T::cos,
        UnaryOperation::Erf => T::erf,
        UnaryOperation::Ceil => T::ceil,
        UnaryOperation::Floor => T::floor,
        UnaryOperation::Tan => T::tan,
        UnaryOperation::Asin => T::asin,
        UnaryOperation::Acos => T::acos,
        UnaryOperation::Atan => T::atan,
        UnaryOperation::Sinh => T::sinh,
        UnaryOperation::Cosh => T::cosh,
        UnaryOperation::Asinh => T::asinh,
        UnaryOperation::Acosh => T::acosh,
        UnaryOperation::Atanh => T::atanh,
        UnaryOperation::Round => T::round_even,
    }
}

/// Creates the workload of an `ElementwiseUnary` layer (one input, one output of its shape,
/// Float32 or Float64).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::ElementwiseUnary(op) = desc.layer else {
        return Err(invalid_layer(desc, "not an ElementwiseUnary layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    let (x, y) = (&desc.inputs[0], &desc.outputs[0]);
    if x.shape != y.shape || x.data_type != y.data_type {
        return Err(invalid_layer(desc, format_args!("{op:?} of {x} into {y}")));
    }
    let shapes = ExpectedShapes::of(desc);
    Ok(match x.data_type {
        DataType::Float32 => Box::new(UnaryWorkload {
            f: function::<f32>(*op),
            shapes,
        }),
        DataType::Float64 => Box::new(UnaryWorkload {
            f: function::<f64>(*op),
            shapes,
        }),
        other => {
            return Err(BackendError::unsupported(format!(
                "CpuRef computes {op:?} in Float32 and Float64, not {other}"
            )));
        }
    })
}

/// Applies one unary function element by element.
#[derive(Debug)]
pub struct UnaryWorkload<T> {
    f: fn(T) -> T,
    shapes: ExpectedShapes,
}

impl<T: UnaryFloat> Workload for UnaryWorkload<T> {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let src = inputs[0].as_slice::<T>()?;
        let dst = outputs[0].as_mut_slice::<T>()?;
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
            UnaryOperation::Tan => x.sin() / x.cos(),
            UnaryOperation::Asin => x.atan2((1.0 - x * x).sqrt()),
            UnaryOperation::Acos => (1.0 - x * x).sqrt().atan2(x),
            UnaryOperation::Atan => x.atan2(1.0),
            UnaryOperation::Sinh => (x.exp() - (-x).exp()) / 2.0,
            UnaryOperation::Cosh => (x.exp() + (-x).exp()) / 2.0,
            UnaryOperation::Asinh => (x + (x * x + 1.0).sqrt()).ln(),
            UnaryOperation::Acosh => (x + (x * x - 1.0).sqrt()).ln(),
            UnaryOperation::Atanh => ((1.0 + x) / (1.0 - x)).ln() / 2.0,
            UnaryOperation::Round => {
                let f = x.floor();
                match x - f {
                    d if d < 0.5 => f,
                    d if d > 0.5 => f + 1.0,
                    _ if f % 2.0 == 0.0 => f,
                    _ => f + 1.0,
                }
            }
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
                UnaryOperation::Asin | UnaryOperation::Acos | UnaryOperation::Atanh => {
                    (-0.95, 0.95)
                }
                UnaryOperation::Acosh => (1.05, 3.0),
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
        for (x, r) in [
            (0.5, 0.0),
            (1.5, 2.0),
            (2.5, 2.0),
            (-0.5, -0.0),
            (-1.5, -2.0),
        ] {
            assert_eq!(at(UnaryOperation::Round, x), r, "Round({x})");
        }
        assert!(at(UnaryOperation::Acosh, 0.5).is_nan());
        assert_eq!(at(UnaryOperation::Atanh, 1.0), f32::INFINITY);
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
