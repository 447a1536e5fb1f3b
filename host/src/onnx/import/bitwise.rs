//! The bitwise operators on integer tensors (Backend API 1.5's `ElementwiseBinary`
//! operations): `BitwiseAnd`, `BitwiseOr`, `BitwiseXor` and `BitShift` are layers of their
//! own; `BitwiseNot` is an exact rewrite, the `BitwiseXor` with all ones (every integer
//! type's all-ones value is all `0xFF` bytes). Constants fold where the result does not depend
//! on the type's width (and, or, xor).

use backplane_api::{BinaryOperation, ConstTensor, LayerDescriptor, TensorInfo};

use super::{Importer, NResult, Node, Value, attributes::attr_string, invalid, unsupported};

impl Importer {
    /// `BitShift`: `direction` `LEFT` or `RIGHT`, on unsigned integer tensors.
    pub(super) fn bit_shift(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let op = match attr_string(n, "direction")?.as_deref() {
            Some("LEFT") => BinaryOperation::ShiftLeft,
            Some("RIGHT") => BinaryOperation::ShiftRight,
            Some(other) => {
                return Err(invalid(format!(
                    "direction must be LEFT or RIGHT, got {other:?}"
                )));
            }
            None => return Err(invalid("direction is required")),
        };
        self.binary(n, op)
    }

    /// `BitwiseNot`: `x ^ !0`, on any integer tensor.
    pub(super) fn bitwise_not(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        if let Value::I64(c) = &xv {
            // Exact in every integer type: the low bits of the complement are the complement
            // of the low bits.
            let v = c.try_map(|x| Ok(!x)).map_err(invalid)?;
            return Ok(vec![self.store_i64(v)?]);
        }
        let dt = self.data_type(&xv)?;
        if !dt.is_integer() {
            return Err(unsupported(format!("BitwiseNot of a {dt} tensor")));
        }
        let x = self.tensor(&xn, &xv)?;
        let ones = ConstTensor {
            info: TensorInfo::new(&[], dt).constant(),
            data: vec![0xFF; dt.size_in_bytes()].into(),
        };
        let name = self.unique(&format!("{}/ones", n.name));
        let ones = self.builder.add_constant(&name, ones)?;
        let d = LayerDescriptor::ElementwiseBinary(BinaryOperation::BitwiseXor);
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[x, ones])?)])
    }
}
