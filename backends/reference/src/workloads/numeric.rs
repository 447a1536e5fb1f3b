//! The plain numeric types of Backend API 1.5 as Rust types, for the workloads that compute on
//! every one of them (elementwise arithmetic, comparison, cast).
//!
//! - [`by_numeric_type!`] runs a body with `T` bound to the Rust type of a data type: `f32`,
//!   `f64`, `i8` … `i64`, `u8` … `u64` ([`by_integer_type!`] the integers only). The 16-bit floats are not in it: they are stored as
//!   bits (`u16`) and computed in `f32` ([`widen_half`], [`narrow_half`]), rounding to nearest
//!   even on store, as onnxruntime's CPU kernels do.
//! - [`Int`]: integer arithmetic as ONNX defines it: two's-complement wrap-around, division
//!   rounding toward zero (an error for a zero divisor), a non-negative exponent for `Pow`.

use backplane_api::{BackendError, BackendResult, BinaryOperation, DataType};
use half::{bf16, f16};

/// Runs `$body` with `$t` the Rust type of the plain integer type `$dt` (`Signed8` → `i8`, …,
/// `UnsignedInt64` → `u64`), or evaluates `$other` for any other type.
macro_rules! by_integer_type {
    ($dt:expr, |$t:ident| $body:expr, $other:expr) => {{
        use backplane_api::DataType as D;
        match $dt {
            D::Signed8 => {
                type $t = i8;
                $body
            }
            D::Signed16 => {
                type $t = i16;
                $body
            }
            D::Signed32 => {
                type $t = i32;
                $body
            }
            D::Signed64 => {
                type $t = i64;
                $body
            }
            D::UnsignedInt8 => {
                type $t = u8;
                $body
            }
            D::UnsignedInt16 => {
                type $t = u16;
                $body
            }
            D::UnsignedInt32 => {
                type $t = u32;
                $body
            }
            D::UnsignedInt64 => {
                type $t = u64;
                $body
            }
            _ => $other,
        }
    }};
}
pub(crate) use by_integer_type;

/// Runs `$body` with `$t` the Rust type of the plain numeric `$dt` (`Float32` → `f32`,
/// `Float64` → `f64`, or an integer type as [`by_integer_type!`]), or evaluates `$other` for
/// any other type (`Boolean`, the quantised types, the 16-bit floats).
macro_rules! by_numeric_type {
    ($dt:expr, |$t:ident| $body:expr, $other:expr) => {{
        use backplane_api::DataType as D;
        match $dt {
            D::Float32 => {
                type $t = f32;
                $body
            }
            D::Float64 => {
                type $t = f64;
                $body
            }
            d => $crate::workloads::numeric::by_integer_type!(d, |$t| $body, $other),
        }
    }};
}
pub(crate) use by_numeric_type;

/// `true` for `Float16` and `BFloat16`, the types stored as 16 bits and computed in `f32`.
pub(crate) fn is_half(dt: DataType) -> bool {
    matches!(dt, DataType::Float16 | DataType::BFloat16)
}

/// The values of 16-bit floats of type `dt` (`Float16` or `BFloat16`) as `f32` (exact).
pub(crate) fn widen_half(dt: DataType, bits: &[u16]) -> Vec<f32> {
    if dt == DataType::BFloat16 {
        bits.iter().map(|&b| bf16::from_bits(b).to_f32()).collect()
    } else {
        bits.iter().map(|&b| f16::from_bits(b).to_f32()).collect()
    }
}

/// `values` stored as 16-bit floats of type `dt`, rounded to nearest even.
pub(crate) fn narrow_half(dt: DataType, values: &[f32], out: &mut [u16]) {
    for (o, &v) in out.iter_mut().zip(values) {
        *o = half_bits(dt, f64::from(v));
    }
}

/// `v` as a 16-bit float of type `dt` (its bits), rounded once to nearest even.
pub(crate) fn half_bits(dt: DataType, v: f64) -> u16 {
    if dt == DataType::BFloat16 {
        bf16::from_f64(v).to_bits()
    } else {
        f16::from_f64(v).to_bits()
    }
}

/// ONNX integer arithmetic on one integer type.
pub(crate) trait Int: backplane_api::Element + Ord {
    /// `op(x, y)`: `Err` with the message for a division by zero or a negative exponent.
    fn apply(op: BinaryOperation, x: Self, y: Self) -> Result<Self, &'static str>;
}

macro_rules! int_arithmetic {
    ($($t:ty),*) => {$(
        impl Int for $t {
            fn apply(op: BinaryOperation, x: Self, y: Self) -> Result<Self, &'static str> {
                Ok(match op {
                    BinaryOperation::Add => x.wrapping_add(y),
                    BinaryOperation::Sub => x.wrapping_sub(y),
                    BinaryOperation::Mul => x.wrapping_mul(y),
                    // `MIN / -1` wraps (to `MIN`), as two's complement hardware gives it.
                    BinaryOperation::Div if y == 0 => return Err("integer division by zero"),
                    BinaryOperation::Div => x.wrapping_div(y),
                    BinaryOperation::Maximum => x.max(y),
                    BinaryOperation::Minimum => x.min(y),
                    BinaryOperation::Power => {
                        if i128::from(y) < 0 {
                            return Err("a negative integer exponent");
                        }
                        wrapping_pow(x, y)
                    }
                    BinaryOperation::SquaredDifference => {
                        let d = x.wrapping_sub(y);
                        d.wrapping_mul(d)
                    }
                    BinaryOperation::BitwiseAnd => x & y,
                    BinaryOperation::BitwiseOr => x | y,
                    BinaryOperation::BitwiseXor => x ^ y,
                    // A shift by the width or more (or by a negative amount) leaves no bit.
                    BinaryOperation::ShiftLeft => u32::try_from(y)
                        .ok()
                        .and_then(|s| x.checked_shl(s))
                        .unwrap_or(0),
                    BinaryOperation::ShiftRight => u32::try_from(y)
                        .ok()
                        .and_then(|s| x.checked_shr(s))
                        .unwrap_or(0),
                })
            }
        }

        impl WrappingPow for $t {
            fn one() -> Self {
                1
            }
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn halve(self) -> (Self, bool) {
                (self / 2, self % 2 == 1)
            }
            fn is_zero(self) -> bool {
                self == 0
            }
        }
    )*};
}

/// What [`wrapping_pow`] needs of an integer type.
trait WrappingPow: Copy {
    fn one() -> Self;
    fn mul(self, o: Self) -> Self;
    /// `(self / 2, self is odd)` for a non-negative `self`.
    fn halve(self) -> (Self, bool);
    fn is_zero(self) -> bool;
}

/// `x` to the non-negative power `e`, wrapping, by squaring (any exponent of the type, not only
/// those that fit `u32`).
fn wrapping_pow<T: WrappingPow>(mut x: T, mut e: T) -> T {
    let mut result = T::one();
    while !e.is_zero() {
        let (half, odd) = e.halve();
        if odd {
            result = result.mul(x);
        }
        x = x.mul(x);
        e = half;
    }
    result
}

int_arithmetic!(i8, i16, i32, i64, u8, u16, u32, u64);

/// ONNX float arithmetic on `f32` or `f64`: IEEE operations; `Max`/`Min` return the other
/// operand when one is NaN (Rust's `max`/`min`). `Err` for the operations defined on integers
/// only (the bitwise ones and the shifts).
pub(crate) fn float_op<T: num_traits::Float>(op: BinaryOperation) -> BackendResult<fn(T, T) -> T> {
    Ok(match op {
        BinaryOperation::Add => |x, y| x + y,
        BinaryOperation::Sub => |x, y| x - y,
        BinaryOperation::Mul => |x, y| x * y,
        BinaryOperation::Div => |x, y| x / y,
        BinaryOperation::Maximum => T::max,
        BinaryOperation::Minimum => T::min,
        BinaryOperation::Power => T::powf,
        BinaryOperation::SquaredDifference => |x, y| (x - y) * (x - y),
        BinaryOperation::BitwiseAnd
        | BinaryOperation::BitwiseOr
        | BinaryOperation::BitwiseXor
        | BinaryOperation::ShiftLeft
        | BinaryOperation::ShiftRight => {
            return Err(BackendError::unsupported(format!(
                "{op:?} is defined on integer tensors only"
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against arithmetic in i128 reduced modulo 2^bits, the definition of wrap-around.
    #[test]
    fn integer_arithmetic_wraps_as_twos_complement() {
        let wrap8 = |v: i128| v.rem_euclid(256) as u8 as i8;
        for x in [-128i8, -7, -1, 0, 1, 3, 127] {
            for y in [-128i8, -3, -1, 0, 2, 127] {
                let (a, b) = (i128::from(x), i128::from(y));
                assert_eq!(i8::apply(BinaryOperation::Add, x, y), Ok(wrap8(a + b)));
                assert_eq!(i8::apply(BinaryOperation::Sub, x, y), Ok(wrap8(a - b)));
                assert_eq!(i8::apply(BinaryOperation::Mul, x, y), Ok(wrap8(a * b)));
                let div = i8::apply(BinaryOperation::Div, x, y);
                if y == 0 {
                    assert_eq!(div, Err("integer division by zero"));
                } else {
                    // Rust's `/` on i128 rounds toward zero, as ONNX's integer Div.
                    assert_eq!(div, Ok(wrap8(a / b)));
                }
                let pow = i8::apply(BinaryOperation::Power, x, y);
                if y < 0 {
                    assert_eq!(pow, Err("a negative integer exponent"));
                } else {
                    let mut p: i128 = 1;
                    for _ in 0..y {
                        p = (p * a).rem_euclid(256);
                    }
                    assert_eq!(pow, Ok(wrap8(p)), "{x}^{y}");
                }
            }
        }
        assert_eq!(u64::apply(BinaryOperation::Sub, 0, 1), Ok(u64::MAX));
        // Odd numbers modulo 2^64 form a group of exponent 2^62, so 3^(2^64 - 1) is the
        // inverse of 3: an exponent beyond u32 is taken whole.
        let p = u64::apply(BinaryOperation::Power, 3, u64::MAX).unwrap();
        assert_eq!(p.wrapping_mul(3), 1);
        assert_eq!(i64::apply(BinaryOperation::Div, i64::MIN, -1), Ok(i64::MIN));
    }

    /// The bitwise operations against i128's, and shifts past the width.
    #[test]
    fn bitwise_operations_and_shifts() {
        for x in [-128i8, -7, -1, 0, 1, 3, 127] {
            for y in [-128i8, -3, -1, 0, 2, 127] {
                let (a, b) = (i128::from(x), i128::from(y));
                assert_eq!(
                    i8::apply(BinaryOperation::BitwiseAnd, x, y),
                    Ok((a & b) as i8)
                );
                assert_eq!(
                    i8::apply(BinaryOperation::BitwiseOr, x, y),
                    Ok((a | b) as i8)
                );
                assert_eq!(
                    i8::apply(BinaryOperation::BitwiseXor, x, y),
                    Ok((a ^ b) as i8)
                );
            }
        }
        for (x, s, left, right) in [
            (0b1001_0110u8, 0u8, 0b1001_0110u8, 0b1001_0110u8),
            (0b1001_0110, 1, 0b0010_1100, 0b0100_1011),
            (0b1001_0110, 7, 0, 1),
            (0b1001_0110, 8, 0, 0),
            (0xFF, 200, 0, 0),
        ] {
            assert_eq!(
                u8::apply(BinaryOperation::ShiftLeft, x, s),
                Ok(left),
                "{x} << {s}"
            );
            assert_eq!(
                u8::apply(BinaryOperation::ShiftRight, x, s),
                Ok(right),
                "{x} >> {s}"
            );
        }
        assert_eq!(u64::apply(BinaryOperation::ShiftLeft, 1, 63), Ok(1 << 63));
        assert_eq!(u64::apply(BinaryOperation::ShiftLeft, 1, 64), Ok(0));
    }

    #[test]
    fn halves_round_to_nearest_even() {
        // 1 + 2^-11 is halfway between two binary16 values: it rounds to the even one, 1.0.
        assert_eq!(half_bits(DataType::Float16, 1.0 + 2f64.powi(-11)), 0x3c00);
        assert_eq!(
            half_bits(DataType::Float16, 1.0 + 3.0 * 2f64.powi(-11)),
            0x3c02
        );
        // bfloat16 keeps the upper half of a binary32, rounded: 1 + 2^-8 ties to 1.0.
        assert_eq!(half_bits(DataType::BFloat16, 1.0 + 2f64.powi(-8)), 0x3f80);
        assert_eq!(
            widen_half(DataType::Float16, &[0x3c00, 0xc000]),
            [1.0, -2.0]
        );
        assert_eq!(
            widen_half(DataType::BFloat16, &[0x3f80, 0x4040]),
            [1.0, 3.0]
        );
        assert_eq!(
            half_bits(DataType::Float16, 65520.0),
            0x7c00,
            "overflow to infinity"
        );
    }
}
