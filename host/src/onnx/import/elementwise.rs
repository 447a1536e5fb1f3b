//! Element-wise operators. Binary `Add`, `Sub`, `Mul`, `Div`, `Pow` and the variadic
//! `Sum`, `Max`, `Min`, `Mean` are `ElementwiseBinary` layers, or folded when every operand
//! is constant; `Abs`, `Neg`, `Exp`, `Log`, `Sqrt`, `Reciprocal`, `Sin`, `Cos`, `Erf`,
//! `Ceil` and `Floor` are Backend API 1.1's `ElementwiseUnary`.

use backplane_api::{BinaryOperation, DataType, LayerDescriptor, UnaryOperation};

use super::{
    Importer, NResult, Node, Value,
    attributes::{attr_int, normalize_axis},
    invalid, unsupported,
};
use crate::onnx::fold::Const;

impl Importer {
    /// A variadic node (Max, Min, Sum: 1 or more inputs, numpy broadcasting): folded left to
    /// right, one `ElementwiseBinary` layer per input after the first (ONNX Runtime adds in
    /// the same order). Two inputs make one layer named after the node.
    pub(super) fn fold(&mut self, n: &Node<'_>, op: BinaryOperation) -> NResult<Value> {
        let count = n.proto.input.len();
        if count == 0 {
            return Err(invalid("expects at least 1 input"));
        }
        if count == 2 {
            let (an, av) = self.req(n, 0)?;
            let (bn, bv) = self.req(n, 1)?;
            return self.binary_pair(n, op, (an, av), (bn, bv), None);
        }
        let mut acc = self.req(n, 0)?.1;
        for i in 1..count {
            let (bn, bv) = self.req(n, i)?;
            let an = format!("{}/{}", n.name, i - 1);
            let suffix = i.to_string();
            acc = self.binary_pair(n, op, (an, acc), (bn, bv), Some(&suffix))?;
        }
        Ok(acc)
    }

    /// `Mean`: the inputs added left to right ([`Self::fold`]), then divided by their count.
    pub(super) fn mean(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let sum = self.fold(n, BinaryOperation::Add)?;
        let count = n.proto.input.len();
        if count == 1 {
            return Ok(vec![sum]);
        }
        let divisor = self.store_f32(Const::new(vec![], vec![count as f32]).map_err(invalid)?)?;
        let sum_name = format!("{}/sum", n.name);
        let divisor_name = format!("{}/count", n.name);
        Ok(vec![self.binary_pair(
            n,
            BinaryOperation::Div,
            (sum_name, sum),
            (divisor_name, divisor),
            Some("mean"),
        )?])
    }

    pub(super) fn binary(&mut self, n: &Node<'_>, op: BinaryOperation) -> NResult<Vec<Value>> {
        let count = n.proto.input.len();
        if count != 2 {
            return Err(invalid(format!("expects 2 inputs, got {count}")));
        }
        let (an, av) = self.req(n, 0)?;
        let (bn, bv) = self.req(n, 1)?;
        Ok(vec![self.binary_pair(n, op, (an, av), (bn, bv), None)?])
    }

    /// One binary operation of node `n` on two values: folded when both are constant, else
    /// an `ElementwiseBinary` layer named after the node (with `suffix`).
    fn binary_pair(
        &mut self,
        n: &Node<'_>,
        op: BinaryOperation,
        (an, av): (String, Value),
        (bn, mut bv): (String, Value),
        suffix: Option<&str>,
    ) -> NResult<Value> {
        // Before opset 7, `broadcast = 1` aligned B at `axis` instead of at the end.
        if self.opset < 7
            && attr_int(n, "broadcast")?.unwrap_or(0) != 0
            && let Some(axis) = attr_int(n, "axis")?
        {
            let ar = self.shape(&av)?.len();
            let bshape = self.shape(&bv)?;
            let axis = normalize_axis(axis, ar)?;
            let trailing = ar
                .checked_sub(axis + bshape.len())
                .ok_or_else(|| invalid("B does not fit A at axis"))?;
            if trailing > 0 {
                let mut s = bshape;
                s.extend(std::iter::repeat_n(1, trailing));
                bv = match &bv {
                    Value::F32(c) => self.store_f32(c.reshape(s).map_err(invalid)?)?,
                    Value::I64(c) => self.store_i64(c.reshape(s).map_err(invalid)?)?,
                    _ => {
                        return Err(unsupported(
                            "legacy broadcast along an axis with a non-constant B",
                        ));
                    }
                };
            }
        }
        match (&av, &bv) {
            (Value::F32(_), Value::F32(_)) if op.is_integer_only() => Err(invalid(format!(
                "{} of float tensors (it is defined on integers)",
                n.op()
            ))),
            (Value::F32(a), Value::F32(b)) => {
                let f = |x: f32, y: f32| -> Result<f32, String> {
                    Ok(match op {
                        BinaryOperation::Add => x + y,
                        BinaryOperation::Sub => x - y,
                        BinaryOperation::Mul => x * y,
                        BinaryOperation::Div => x / y,
                        BinaryOperation::Maximum => x.max(y),
                        BinaryOperation::Minimum => x.min(y),
                        BinaryOperation::Power => x.powf(y),
                        BinaryOperation::SquaredDifference => (x - y) * (x - y),
                        _ => return Err(format!("{op:?} of floats")),
                    })
                };
                let c = Const::binary(a, b, f).map_err(invalid)?;
                Ok(self.store_f32(c)?)
            }
            // Shifts depend on the width of the tensors' type, which a folded value does not
            // keep: they run as layers.
            (Value::I64(a), Value::I64(b))
                if !matches!(op, BinaryOperation::ShiftLeft | BinaryOperation::ShiftRight) =>
            {
                let f = |x: i64, y: i64| -> Result<i64, String> {
                    match op {
                        BinaryOperation::Add => x.checked_add(y),
                        BinaryOperation::Sub => x.checked_sub(y),
                        BinaryOperation::Mul => x.checked_mul(y),
                        BinaryOperation::Div => x.checked_div(y),
                        BinaryOperation::Maximum => Some(x.max(y)),
                        BinaryOperation::Minimum => Some(x.min(y)),
                        BinaryOperation::Power => u32::try_from(y).ok().and_then(|e| x.checked_pow(e)),
                        BinaryOperation::SquaredDifference => x
                            .checked_sub(y)
                            .and_then(|d| d.checked_mul(d)),
                        // Exact in every integer type: the bits of each are the low bits.
                        BinaryOperation::BitwiseAnd => Some(x & y),
                        BinaryOperation::BitwiseOr => Some(x | y),
                        BinaryOperation::BitwiseXor => Some(x ^ y),
                        BinaryOperation::ShiftLeft | BinaryOperation::ShiftRight => None,
                    }
                    .ok_or_else(|| {
                        format!("integer overflow, division by zero or negative exponent in {x} {op:?} {y}")
                    })
                };
                let c = Const::binary(a, b, f).map_err(invalid)?;
                Ok(self.store_i64(c)?)
            }
            (Value::I64(_), Value::F32(_)) | (Value::F32(_), Value::I64(_)) => {
                Err(invalid("the inputs have different element types"))
            }
            _ => {
                let mut a = self.tensor(&an, &av)?;
                let mut b = self.tensor(&bn, &bv)?;
                let (ta, tb) = (
                    self.data_type(&Value::Tensor(a))?,
                    self.data_type(&Value::Tensor(b))?,
                );
                let d = LayerDescriptor::ElementwiseBinary(op);
                if op != BinaryOperation::Power || ta == tb {
                    return Ok(Value::Tensor(self.layer(n, suffix, d, &[a, b])?));
                }
                // `Pow` alone takes a base and an exponent of different types: computed in
                // Float32, the result in the base's type (truncated toward zero for an integer
                // base, as onnxruntime's cast of `pow` does).
                let to_float = LayerDescriptor::Cast(DataType::Float32);
                if ta != DataType::Float32 {
                    a = self.layer(n, Some("base"), to_float.clone(), &[a])?;
                }
                if tb != DataType::Float32 {
                    b = self.layer(n, Some("exponent"), to_float, &[b])?;
                }
                if ta == DataType::Float32 {
                    return Ok(Value::Tensor(self.layer(n, suffix, d, &[a, b])?));
                }
                let p = self.layer(n, Some("float"), d, &[a, b])?;
                Ok(Value::Tensor(self.layer(
                    n,
                    suffix,
                    LayerDescriptor::Cast(ta),
                    &[p],
                )?))
            }
        }
    }

    /// An element-wise function of one tensor (Backend API 1.1's `ElementwiseUnary`).
    pub(super) fn unary(&mut self, n: &Node<'_>, op: UnaryOperation) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        // Shape arithmetic folds: integers exactly (two's complement, as the layer computes),
        // floats where the result is exact in f32 (sign, magnitude, rounding to integers,
        // square root and reciprocal are correctly rounded IEEE operations).
        match (&xv, op) {
            (Value::I64(c), UnaryOperation::Neg) => {
                let v = c.try_map(|v| Ok(v.wrapping_neg())).map_err(invalid)?;
                return Ok(vec![self.store_i64(v)?]);
            }
            (Value::I64(c), UnaryOperation::Abs) => {
                let v = c.try_map(|v| Ok(v.wrapping_abs())).map_err(invalid)?;
                return Ok(vec![self.store_i64(v)?]);
            }
            (Value::I64(_), UnaryOperation::Ceil | UnaryOperation::Floor) => return Ok(vec![xv]),
            (Value::F32(c), _) => {
                let f: Option<fn(f32) -> f32> = match op {
                    UnaryOperation::Neg => Some(|v| -v),
                    UnaryOperation::Abs => Some(f32::abs),
                    UnaryOperation::Ceil => Some(f32::ceil),
                    UnaryOperation::Floor => Some(f32::floor),
                    UnaryOperation::Sqrt => Some(f32::sqrt),
                    UnaryOperation::Reciprocal => Some(|v| 1.0 / v),
                    _ => None,
                };
                if let Some(f) = f {
                    let v = c.try_map(|v| Ok(f(v))).map_err(invalid)?;
                    return Ok(vec![self.store_f32(v)?]);
                }
            }
            _ => {}
        }
        let x = self.tensor(&xn, &xv)?;
        let d = LayerDescriptor::ElementwiseUnary(op);
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)])
    }
}
