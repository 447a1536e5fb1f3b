//! The layers that compute each output element from the elements at the same (broadcast)
//! index: `ElementwiseBinary`, `ElementwiseUnary`, `Activation`, `Comparison`, `Where` and `Cast`.

use backplane_api::{
    ActivationDescriptor, ActivationFunction, BinaryOperation, ComparisonOperation, DataType,
    UnaryOperation,
};

use super::{Tensor, broadcast_shape, indices};

/// `ElementwiseBinary` with numpy broadcasting: `y = a op b`, with Float32's meaning (the
/// suite's cases are Float32; Signed32's truncating division is not defined here). A maximum or
/// minimum with a NaN is NaN. The bitwise operations take the values as 64-bit two's
/// complement integers; the shifts as unsigned ones, without the tensor type's width (the
/// suite's shift cases stay below it): a shift by 64 or more leaves 0.
pub fn elementwise_binary(a: &Tensor, b: &Tensor, op: BinaryOperation) -> Result<Tensor, String> {
    let f = |a: f64, b: f64| match op {
        BinaryOperation::Add => a + b,
        BinaryOperation::Sub => a - b,
        BinaryOperation::Mul => a * b,
        BinaryOperation::Div => a / b,
        BinaryOperation::Maximum => {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else if a > b {
                a
            } else {
                b
            }
        }
        BinaryOperation::Minimum => {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else if a < b {
                a
            } else {
                b
            }
        }
        BinaryOperation::Power => a.powf(b),
        BinaryOperation::SquaredDifference => (a - b) * (a - b),
        BinaryOperation::BitwiseAnd => ((a as i64) & (b as i64)) as f64,
        BinaryOperation::BitwiseOr => ((a as i64) | (b as i64)) as f64,
        BinaryOperation::BitwiseXor => ((a as i64) ^ (b as i64)) as f64,
        BinaryOperation::ShiftLeft => (a as u64).checked_shl(b as u32).unwrap_or(0) as f64,
        BinaryOperation::ShiftRight => (a as u64).checked_shr(b as u32).unwrap_or(0) as f64,
    };
    map2(a, b, f)
}

/// `y[i] = f(a[i], b[i])` over the numpy broadcast of `a` and `b`.
fn map2(a: &Tensor, b: &Tensor, f: impl Fn(f64, f64) -> f64) -> Result<Tensor, String> {
    let shape = broadcast_shape(&a.shape, &b.shape)?;
    let data = indices(&shape)
        .iter()
        .map(|i| f(a.at_broadcast(i), b.at_broadcast(i)))
        .collect();
    Ok(Tensor::new(&shape, data))
}

/// The Gauss error function, `2 / sqrt(pi) * integral from 0 to x of e^(-t^2) dt`: for
/// `|x| < 2` its Taylor series `2 / sqrt(pi) * sum over n of (-1)^n x^(2n+1) / (n! (2n+1))`,
/// summed until the terms stop mattering (the largest is below 3, so cancellation costs about
/// 1e-15); beyond, `1 - erfc(|x|)` with Laplace's continued fraction
/// `erfc(x) = e^(-x^2) / sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...))))`, 200
/// levels deep, evaluated from the bottom up.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    let a = x.abs();
    let value = if a < 2.0 {
        let mut sum = 0.0;
        let mut power = a; // a^(2n+1) / n!
        let mut n = 0.0;
        loop {
            let term = power / (2.0 * n + 1.0);
            sum += if (n as u64).is_multiple_of(2) {
                term
            } else {
                -term
            };
            if term <= 1e-17 * sum.abs() || n > 100.0 {
                break;
            }
            n += 1.0;
            power *= a * a / n;
        }
        2.0 / std::f64::consts::PI.sqrt() * sum
    } else {
        let mut fraction = a;
        for k in (1..=200).rev() {
            fraction = a + f64::from(k) / 2.0 / fraction;
        }
        1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / fraction
    };
    value.copysign(x)
}

/// `Activation`: each function as [`ActivationFunction`] defines it.
pub fn activation(x: &Tensor, d: &ActivationDescriptor) -> Tensor {
    let (a, b) = (f64::from(d.a), f64::from(d.b));
    let f = |v: f64| match d.function {
        ActivationFunction::ReLU => {
            if v > 0.0 {
                v
            } else {
                0.0
            }
        }
        // min(a, max(b, x))
        ActivationFunction::BoundedReLU => {
            let lower = if v > b { v } else { b };
            if lower < a { lower } else { a }
        }
        ActivationFunction::Sigmoid => 1.0 / (1.0 + (-v).exp()),
        ActivationFunction::TanH => a * (b * v).tanh(),
        ActivationFunction::LeakyReLU => {
            if v > 0.0 {
                v
            } else {
                a * v
            }
        }
        // x * relu6(x + 3) / 6
        ActivationFunction::HardSwish => {
            let relu6 = (v + 3.0).clamp(0.0, 6.0);
            v * relu6 / 6.0
        }
        ActivationFunction::Elu => {
            if v > 0.0 {
                v
            } else {
                a * (v.exp() - 1.0)
            }
        }
        // a = 0: x * Phi(x); a = 1: the tanh approximation.
        ActivationFunction::Gelu if d.a == 0.0 => v / 2.0 * (1.0 + erf(v / 2f64.sqrt())),
        ActivationFunction::Gelu => {
            let inner = (2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v);
            v / 2.0 * (1.0 + inner.tanh())
        }
    };
    let propagate_nan = |v: f64| if v.is_nan() { v } else { f(v) };
    Tensor::new(&x.shape, x.data.iter().map(|&v| propagate_nan(v)).collect())
}

/// `ElementwiseUnary`: each function as [`UnaryOperation`] names it.
pub fn elementwise_unary(x: &Tensor, op: UnaryOperation) -> Tensor {
    let f = |v: f64| match op {
        UnaryOperation::Abs => v.abs(),
        UnaryOperation::Neg => -v,
        UnaryOperation::Exp => v.exp(),
        UnaryOperation::Log => v.ln(),
        UnaryOperation::Sqrt => v.sqrt(),
        UnaryOperation::Rsqrt => 1.0 / v.sqrt(),
        UnaryOperation::Reciprocal => 1.0 / v,
        UnaryOperation::Sin => v.sin(),
        UnaryOperation::Cos => v.cos(),
        UnaryOperation::Erf => erf(v),
        UnaryOperation::Ceil => v.ceil(),
        UnaryOperation::Floor => v.floor(),
        // The inverse and hyperbolic functions from their definitions by exp, ln and atan2.
        UnaryOperation::Tan => v.sin() / v.cos(),
        UnaryOperation::Asin => v.atan2((1.0 - v * v).sqrt()),
        UnaryOperation::Acos => (1.0 - v * v).sqrt().atan2(v),
        UnaryOperation::Atan => v.atan2(1.0),
        UnaryOperation::Sinh => (v.exp() - (-v).exp()) / 2.0,
        UnaryOperation::Cosh => (v.exp() + (-v).exp()) / 2.0,
        UnaryOperation::Asinh => (v + (v * v + 1.0).sqrt()).ln(),
        UnaryOperation::Acosh => (v + (v * v - 1.0).sqrt()).ln(),
        UnaryOperation::Atanh => ((1.0 + v) / (1.0 - v)).ln() / 2.0,
        UnaryOperation::Round => {
            // Halves to even.
            let f = v.floor();
            let d = v - f;
            if d < 0.5 || (d == 0.5 && f % 2.0 == 0.0) {
                f
            } else {
                f + 1.0
            }
        }
    };
    Tensor::new(&x.shape, x.data.iter().map(|&v| f(v)).collect())
}

/// `Comparison` with numpy broadcasting: 1 where `a op b`, else 0 (NaN compares unequal to
/// everything).
pub fn comparison(a: &Tensor, b: &Tensor, op: ComparisonOperation) -> Result<Tensor, String> {
    map2(a, b, |a, b| {
        let holds = match op {
            ComparisonOperation::Equal => a == b,
            ComparisonOperation::Greater => a > b,
            ComparisonOperation::GreaterOrEqual => a >= b,
            ComparisonOperation::Less => a < b,
            ComparisonOperation::LessOrEqual => a <= b,
            ComparisonOperation::NotEqual => a != b,
        };
        f64::from(u8::from(holds))
    })
}

/// `Where`: `condition ? a : b`, all three broadcast as numpy does.
pub fn select(condition: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor, String> {
    let shape = broadcast_shape(&condition.shape, &broadcast_shape(&a.shape, &b.shape)?)?;
    let data = indices(&shape)
        .iter()
        .map(|i| {
            if condition.at_broadcast(i) != 0.0 {
                a.at_broadcast(i)
            } else {
                b.at_broadcast(i)
            }
        })
        .collect();
    Ok(Tensor::new(&shape, data))
}

/// `Cast` to `to`: to Signed32, toward zero and saturated, NaN giving 0; to Boolean, 1 for
/// anything but zero (NaN too); to Float32, the value (rounded to `f32` by [`compare`](super::compare)).
/// Booleans are already 0 or 1.
pub fn cast(x: &Tensor, to: DataType) -> Result<Tensor, String> {
    let f = |v: f64| -> Result<f64, String> {
        Ok(match to {
            DataType::Float32 => v,
            DataType::Signed32 if v.is_nan() => 0.0,
            DataType::Signed32 => v.trunc().clamp(f64::from(i32::MIN), f64::from(i32::MAX)),
            DataType::Boolean => f64::from(u8::from(v != 0.0)),
            other => return Err(format!("the oracle casts to no {other}")),
        })
    };
    let data = x.data.iter().map(|&v| f(v)).collect::<Result<_, _>>()?;
    Ok(Tensor::new(&x.shape, data))
}

/// `BitCast` from `from` to `to`: each value written as `from`'s little-endian bytes, the
/// bytes read as `to`'s (the types the oracle reads: Float32, Signed32, UnsignedInt32,
/// Signed64, Boolean).
pub fn bit_cast(x: &Tensor, from: DataType, to: DataType) -> Result<Tensor, String> {
    let mut bytes = Vec::with_capacity(x.data.len() * from.size_in_bytes());
    for &v in &x.data {
        match from {
            DataType::Float32 => bytes.extend((v as f32).to_le_bytes()),
            DataType::Signed32 => bytes.extend((v as i32).to_le_bytes()),
            DataType::UnsignedInt32 => bytes.extend((v as u32).to_le_bytes()),
            DataType::Signed64 => bytes.extend((v as i64).to_le_bytes()),
            DataType::Boolean => bytes.push(u8::from(v != 0.0)),
            other => return Err(format!("the oracle bit-casts no {other}")),
        }
    }
    let shape: Vec<u32> = x.shape.iter().map(|&d| d as u32).collect();
    Tensor::from_bytes(&backplane_api::TensorInfo::new(&shape, to), &bytes)
}
