//! `ReduceMean` (axes an attribute before opset 18, an input from 18) as a `Mean` layer.

use backplane_api::{LayerDescriptor, MeanDescriptor};

use super::{
    Importer, NResult, Node, Value,
    attributes::{attr_flag, attr_ints, distinct_axes},
};

impl Importer {
    pub(super) fn reduce_mean(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let r = self.shape(&xv)?.len();
        let keep_dims = attr_flag(n, "keepdims", true)?;
        let axes = if self.opset < 18 {
            attr_ints(n, "axes")?
        } else {
            self.const_ints(n, 1, "axes")?.map(|a| a.data.clone())
        };
        let axes = match axes {
            Some(a) if !a.is_empty() => distinct_axes(&a, r)?,
            _ if self.opset >= 18 && attr_flag(n, "noop_with_empty_axes", false)? => {
                return Ok(vec![xv]);
            }
            _ => (0..r).collect(),
        };
        let x = self.tensor(&xn, &xv)?;
        let d = LayerDescriptor::Mean(MeanDescriptor {
            axes: axes.iter().map(|&a| a as u32).collect(),
            keep_dims,
        });
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)])
    }
}
