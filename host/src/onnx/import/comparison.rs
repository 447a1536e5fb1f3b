//! `Equal`, `Greater`, `GreaterOrEqual`, `Less`, `LessOrEqual` and `Where`: folded when every
//! operand is an integer constant (shape arithmetic, as torch exports `expand`), else Backend
//! API 1.1's `Comparison` (Boolean output) and `Where` layers. Boolean values that the
//! importer folds are integers 0 and 1; a `Where` condition that is not Boolean is cast.

use backplane_api::{ComparisonOperation, DataType, LayerDescriptor};

use super::{Importer, NResult, Node, Value, invalid};
use crate::onnx::fold::Const;

impl Importer {
    pub(super) fn comparison(
        &mut self,
        n: &Node<'_>,
        op: ComparisonOperation,
    ) -> NResult<Vec<Value>> {
        let (an, av) = self.req(n, 0)?;
        let (bn, bv) = self.req(n, 1)?;
        if let (Value::I64(a), Value::I64(b)) = (&av, &bv) {
            let c = Const::binary(a, b, |x, y| Ok(i64::from(op.compare(x, y)))).map_err(invalid)?;
            return Ok(vec![self.store_i64(c)?]);
        }
        let a = self.tensor(&an, &av)?;
        let b = self.tensor(&bn, &bv)?;
        let d = LayerDescriptor::Comparison(op);
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[a, b])?)])
    }

    pub(super) fn where_op(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (cn, cv) = self.req(n, 0)?;
        let (an, av) = self.req(n, 1)?;
        let (bn, bv) = self.req(n, 2)?;
        match (&cv, &av, &bv) {
            (Value::I64(c), Value::I64(a), Value::I64(b)) => {
                let shape = backplane_api::shapes::broadcast(&c.shape, &a.shape)
                    .and_then(|s| backplane_api::shapes::broadcast(&s, &b.shape))
                    .map_err(invalid)?;
                let (c, a, b) = (
                    c.broadcast_to(&shape).map_err(invalid)?,
                    a.broadcast_to(&shape).map_err(invalid)?,
                    b.broadcast_to(&shape).map_err(invalid)?,
                );
                let data = c
                    .data
                    .iter()
                    .zip(a.data.iter().zip(&b.data))
                    .map(|(&c, (&a, &b))| if c != 0 { a } else { b })
                    .collect();
                let out = Const::new(shape, data).map_err(invalid)?;
                Ok(vec![self.store_i64(out)?])
            }
            _ => {
                let mut cond = self.tensor(&cn, &cv)?;
                if self.data_type(&cv)? != DataType::Boolean {
                    let d = LayerDescriptor::Cast(DataType::Boolean);
                    cond = self.layer(n, Some("condition"), d, &[cond])?;
                }
                let a = self.tensor(&an, &av)?;
                let b = self.tensor(&bn, &bv)?;
                Ok(vec![Value::Tensor(self.layer(
                    n,
                    None,
                    LayerDescriptor::Where,
                    &[cond, a, b],
                )?)])
            }
        }
    }
}
