//! `Softmax` as a `Softmax` layer along one axis; before opset 13, ONNX's coercion to 2-D
//! is a `Flatten`, the softmax and a `Reshape` back unless one axis suffices.

use backplane_api::{FlattenDescriptor, LayerDescriptor, ReshapeDescriptor, SoftmaxDescriptor};

use super::{
    Importer, NResult, Node, Value,
    attributes::{attr_int, normalize_axis},
};

impl Importer {
    pub(super) fn softmax(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        self.softmax_named(n, None)
    }

    /// The softmax of `n`'s input, its last layer named after the node with the suffix
    /// `last` (`LogSoftmax` adds its `Log` after it).
    pub(super) fn softmax_named(
        &mut self,
        n: &Node<'_>,
        last: Option<&str>,
    ) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let xs = self.shape(&xv)?;
        let r = xs.len();
        let x = self.tensor(&xn, &xv)?;
        let softmax = |axis: usize| {
            LayerDescriptor::Softmax(SoftmaxDescriptor {
                beta: 1.0,
                axis: axis as i32,
            })
        };
        if self.opset >= 13 {
            let axis = normalize_axis(attr_int(n, "axis")?.unwrap_or(-1), r)?;
            return Ok(vec![Value::Tensor(self.layer(
                n,
                last,
                softmax(axis),
                &[x],
            )?)]);
        }
        // Before opset 13: the input is coerced to 2-D [prod(..axis), prod(axis..)].
        let axis = normalize_axis(attr_int(n, "axis")?.unwrap_or(1), r)?;
        let wide: Vec<usize> = (axis..r).filter(|&i| xs[i] != 1).collect();
        if wide.len() <= 1 {
            // At most one dimension from `axis` on is not 1: a softmax along it is the same.
            let along = wide.first().copied().unwrap_or(r - 1);
            return Ok(vec![Value::Tensor(self.layer(
                n,
                last,
                softmax(along),
                &[x],
            )?)]);
        }
        let flat = LayerDescriptor::Flatten(FlattenDescriptor { axis: axis as u32 });
        let f = self.layer(n, Some("flatten"), flat, &[x])?;
        let s = self.layer(n, Some("softmax"), softmax(1), &[f])?;
        let back = LayerDescriptor::Reshape(ReshapeDescriptor {
            target_shape: xs.into(),
        });
        Ok(vec![Value::Tensor(self.layer(n, last, back, &[s])?)])
    }
}
