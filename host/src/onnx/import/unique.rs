//! `Unique`: Backend API 1.5's layer of the same name, imported in steps as `NonZero` is (its
//! results' extent is the count the layer writes): once a run gives the count, the four
//! outputs are sliced from the layer's rows (first positions, inverse indices, counts) and
//! the distinct items gathered from the input at their first positions.

use std::sync::Arc;

use backplane_api::{
    GatherDescriptor, LayerDescriptor, ReshapeDescriptor, SliceDescriptor, UniqueDescriptor,
};

use super::{
    Importer, NResult, Node, NodeError, Value,
    attributes::{attr_int, normalize_axis},
    invalid,
    queue::{Continuation, Pending},
    unsupported,
};

impl Importer {
    /// `Unique` (opset 11): the layer, then a step that reads its count.
    pub(super) fn unique_node(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let shape = self.shape(&xv)?;
        let (flatten, axis) = match attr_int(n, "axis")? {
            None => (true, 0),
            Some(a) => (false, normalize_axis(a, shape.len())?),
        };
        let sorted = attr_int(n, "sorted")?.unwrap_or(1) != 0;
        let x = self.tensor(&xn, &xv)?;
        let d = UniqueDescriptor {
            flatten,
            axis: u32::try_from(axis).map_err(|_| invalid("axis"))?,
            sorted,
        };
        let padded = self.layer(n, Some("unique"), LayerDescriptor::Unique(d), &[x])?;
        let items = self
            .builder
            .tensor_info(padded)
            .map(|i| i.shape[1])
            .ok_or_else(|| invalid("Unique's layer output has no shape"))?;
        let count = self.count_of(n, padded)?;
        let base = n
            .proto
            .output
            .iter()
            .find(|o| !o.is_empty())
            .cloned()
            .unwrap_or_else(|| n.name.clone());
        let names = [
            format!("{base}\0unique"),
            format!("{base}\0count"),
            format!("{base}\0items"),
        ];
        self.values.insert(names[0].clone(), Value::Tensor(padded));
        self.values.insert(names[1].clone(), Value::Tensor(count));
        let items_value = if flatten {
            let flat = self.layer(
                n,
                Some("flat"),
                LayerDescriptor::Reshape(ReshapeDescriptor {
                    target_shape: vec![items].into(),
                }),
                &[x],
            )?;
            Value::Tensor(flat)
        } else {
            Value::Tensor(x)
        };
        self.values.insert(names[2].clone(), items_value);
        let [padded, count, items_name] = names;
        Ok(vec![Pending {
            proto: Arc::new(n.proto.clone()),
            name: n.name.clone(),
            state: Some(Arc::new(Continuation::Unique {
                padded,
                count,
                items: items_name,
                axis: if flatten { 0 } else { d.axis },
                n: items,
            })),
        }])
    }

    /// `Unique`'s outputs once its count is known: `Y` (the items gathered at the first
    /// positions), `indices`, `inverse_indices` and `counts`.
    pub(super) fn unique_result(
        &mut self,
        n: &Node<'_>,
        (padded, count, items): (&str, &str, &str),
        axis: u32,
        len: u32,
    ) -> NResult<Vec<Pending>> {
        let k = match self.req_value(count)? {
            Value::I64(c) if c.data.len() == 1 => c.data[0],
            Value::Tensor(_) => {
                return Err(NodeError::NeedsValue {
                    message: "Unique's count is known only at run time (a session runs it)"
                        .to_owned(),
                    names: vec![count.to_owned()],
                });
            }
            _ => return Err(invalid("Unique's count is not one integer")),
        };
        let k = u32::try_from(k)
            .ok()
            .filter(|&k| k > 0 && k <= len)
            .ok_or_else(|| invalid(format!("Unique's count {k} of {len} items")))?;
        let (Value::Tensor(p), Value::Tensor(x)) =
            (self.req_value(padded)?, self.req_value(items)?)
        else {
            return Err(unsupported(
                "Unique's layer output or input is not a tensor",
            ));
        };
        let row = |im: &mut Self, r: u32, width: u32, what: &str| {
            let slice = im.layer(
                n,
                Some(what),
                LayerDescriptor::Slice(SliceDescriptor {
                    begin: vec![r, 0].into(),
                    step: vec![1, 1].into(),
                    size: vec![1, width].into(),
                }),
                &[p],
            )?;
            im.layer(
                n,
                Some(&format!("{what}/1d")),
                LayerDescriptor::Reshape(ReshapeDescriptor {
                    target_shape: vec![width].into(),
                }),
                &[slice],
            )
        };
        let first = row(self, 1, k, "indices")?;
        let inverse = row(self, 2, len, "inverse_indices")?;
        let counts = row(self, 3, k, "counts")?;
        let y = self.layer(
            n,
            None,
            LayerDescriptor::Gather(GatherDescriptor { axis }),
            &[x, first],
        )?;
        for (out, t) in n.proto.output.iter().zip([y, first, inverse, counts]) {
            if !out.is_empty() {
                self.values.insert(out.clone(), Value::Tensor(t));
            }
        }
        Ok(Vec::new())
    }
}
