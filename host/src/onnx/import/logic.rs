//! `And`, `Or`, `Xor` and `Not` on bool values: folded on constants; on tensors, exact
//! rewrites into Backend API 1.1 layers over `UnsignedInt8` 0/1 values (the operands cast
//! from Boolean): `And` is their `Minimum`, `Or` their `Maximum`, `Xor` `NotEqual`, `Not`
//! `Equal` to 0; results cast back to Boolean where the layer does not give it.

use backplane_api::{BinaryOperation, ComparisonOperation, DataType, LayerDescriptor};

use super::{Importer, NResult, Node, Value, invalid};
use crate::{graph::network::TensorRef, onnx::fold::Const};

/// A logical operator.
#[derive(Debug, Clone, Copy)]
pub(super) enum Logic {
    And,
    Or,
    Xor,
}

impl Importer {
    /// A Boolean tensor as an `UnsignedInt8` tensor of 0 and 1.
    fn as_bits(&mut self, n: &Node<'_>, t: TensorRef, slot: &str) -> NResult<TensorRef> {
        let d = LayerDescriptor::Cast(DataType::UnsignedInt8);
        self.layer(n, Some(slot), d, &[t])
    }

    /// `op` of two Boolean tensors (broadcast), its last layer named after `n` with `last`:
    /// the rewrite the module doc describes, for `And`/`Or`/`Xor` nodes and for other
    /// compositions that combine conditions (`Mod`).
    pub(super) fn logic_of(
        &mut self,
        n: &Node<'_>,
        op: Logic,
        a: TensorRef,
        b: TensorRef,
        last: Option<&str>,
    ) -> NResult<TensorRef> {
        let a = self.as_bits(n, a, "a")?;
        let b = self.as_bits(n, b, "b")?;
        match op {
            Logic::Xor => {
                let d = LayerDescriptor::Comparison(ComparisonOperation::NotEqual);
                self.layer(n, last, d, &[a, b])
            }
            Logic::And | Logic::Or => {
                let f = if matches!(op, Logic::And) {
                    BinaryOperation::Minimum
                } else {
                    BinaryOperation::Maximum
                };
                let d = LayerDescriptor::ElementwiseBinary(f);
                let bits = self.layer(n, Some("bits"), d, &[a, b])?;
                let d = LayerDescriptor::Cast(DataType::Boolean);
                self.layer(n, last, d, &[bits])
            }
        }
    }

    pub(super) fn logic(&mut self, n: &Node<'_>, op: Logic) -> NResult<Vec<Value>> {
        let (an, av) = self.req(n, 0)?;
        let (bn, bv) = self.req(n, 1)?;
        if let (Value::I64(a), Value::I64(b)) = (&av, &bv) {
            let c = Const::binary(a, b, |x, y| {
                let (x, y) = (x != 0, y != 0);
                Ok(i64::from(match op {
                    Logic::And => x && y,
                    Logic::Or => x || y,
                    Logic::Xor => x != y,
                }))
            })
            .map_err(invalid)?;
            return Ok(vec![self.store_i64(c)?]);
        }
        let a = self.tensor(&an, &av)?;
        let b = self.tensor(&bn, &bv)?;
        Ok(vec![Value::Tensor(self.logic_of(n, op, a, b, None)?)])
    }

    pub(super) fn not(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        if let Value::I64(c) = &xv {
            let v = c.try_map(|x| Ok(i64::from(x == 0))).map_err(invalid)?;
            return Ok(vec![self.store_i64(v)?]);
        }
        let x = self.tensor(&xn, &xv)?;
        let x = self.as_bits(n, x, "x")?;
        let zero = Const::scalar(0);
        let zero = self.integer_tensor_as(
            &format!("{}\u{0}zero", n.name),
            &zero,
            DataType::UnsignedInt8,
        )?;
        let d = LayerDescriptor::Comparison(ComparisonOperation::Equal);
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[x, zero])?)])
    }
}
