//! Unique (Backend API 1.5): the distinct elements (or slices along an axis) of a tensor of
//! any plain type, in the counted layout `UniqueDescriptor` defines (first positions, the
//! inverse map and the counts, after the count). Floats compare by value (-0 equals +0; a NaN
//! equals nothing and sorts last), integers and booleans exactly (as `i128`).

use std::cmp::Ordering;

use backplane_api::{
    BackendResult, DataType, LayerDescriptor, TensorView, TensorViewMut, UniqueDescriptor,
    Workload, WorkloadDesc,
};

use super::{
    ExpectedShapes, expect_counts, expect_rule_output, invalid_layer,
    numeric::{is_half, widen_half},
    raw_mut,
};

/// Creates the workload of a `Unique` layer (one input, one output).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Unique(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a Unique layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    expect_rule_output(desc)?;
    Ok(Box::new(UniqueWorkload {
        d: *d,
        dims: desc.inputs[0].shape.iter().map(|&v| v as usize).collect(),
        data_type: desc.inputs[0].data_type,
        shapes: ExpectedShapes::of(desc),
    }))
}

/// Finds distinct items.
#[derive(Debug)]
pub struct UniqueWorkload {
    d: UniqueDescriptor,
    dims: Vec<usize>,
    data_type: DataType,
    shapes: ExpectedShapes,
}

/// One element, comparable.
#[derive(Debug, Clone, Copy)]
enum Key {
    Float(f64),
    Int(i128),
}

impl Key {
    fn equal(self, other: Key) -> bool {
        match (self, other) {
            (Key::Float(a), Key::Float(b)) => a == b,
            (Key::Int(a), Key::Int(b)) => a == b,
            _ => false,
        }
    }

    /// Ascending; a NaN after every number (and equal to another NaN only for sorting).
    fn order(self, other: Key) -> Ordering {
        match (self, other) {
            (Key::Float(a), Key::Float(b)) => match (a.is_nan(), b.is_nan()) {
                (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
                (a, b) => a.cmp(&b),
            },
            (Key::Int(a), Key::Int(b)) => a.cmp(&b),
            _ => Ordering::Equal,
        }
    }
}

/// The elements of `bytes` (of type `dt`, little-endian) as keys.
fn keys(bytes: &[u8], dt: DataType) -> Vec<Key> {
    let size = dt.size_in_bytes();
    let chunks = bytes.chunks_exact(size);
    if is_half(dt) {
        let bits: Vec<u16> = chunks.map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
        return widen_half(dt, &bits)
            .into_iter()
            .map(|v| Key::Float(f64::from(v)))
            .collect();
    }
    chunks
        .map(|c| match dt {
            DataType::Float32 => {
                Key::Float(f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            }
            DataType::Float64 => Key::Float(f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))),
            DataType::Boolean => Key::Int(i128::from(c[0] != 0)),
            dt if dt.is_signed_integer() => {
                // Sign-extended from its width.
                let mut wide = [if c[size - 1] & 0x80 != 0 { 0xff } else { 0 }; 16];
                wide[..size].copy_from_slice(c);
                Key::Int(i128::from_le_bytes(wide))
            }
            _ => {
                let mut wide = [0u8; 16];
                wide[..size].copy_from_slice(c);
                Key::Int(i128::from_le_bytes(wide))
            }
        })
        .collect()
}

impl Workload for UniqueWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let all = keys(inputs[0].data.as_slice(), self.data_type);
        // Items as lists of keys: each element, or each slice along the axis.
        let (n, items): (usize, Vec<Vec<Key>>) = if self.d.flatten {
            (all.len(), all.iter().map(|&k| vec![k]).collect())
        } else {
            let axis = self.d.axis as usize;
            let n = self.dims[axis];
            let inner: usize = self.dims[axis + 1..].iter().product();
            let outer: usize = self.dims[..axis].iter().product();
            let items = (0..n)
                .map(|i| {
                    (0..outer)
                        .flat_map(|o| all[(o * n + i) * inner..][..inner].iter().copied())
                        .collect()
                })
                .collect();
            (n, items)
        };
        let same = |a: &[Key], b: &[Key]| a.iter().zip(b).all(|(x, y)| x.equal(*y));
        // Distinct items by first occurrence.
        let mut first: Vec<usize> = Vec::new();
        let mut of_item = vec![0usize; n];
        for (i, item) in items.iter().enumerate() {
            match first.iter().position(|&f| same(&items[f], item)) {
                Some(u) => of_item[i] = u,
                None => {
                    of_item[i] = first.len();
                    first.push(i);
                }
            }
        }
        // The output order, and where each first-occurrence index lands in it.
        let mut order: Vec<usize> = (0..first.len()).collect();
        if self.d.sorted {
            order.sort_by(|&a, &b| {
                let (x, y) = (&items[first[a]], &items[first[b]]);
                x.iter()
                    .zip(y)
                    .map(|(p, q)| p.order(*q))
                    .find(|o| o.is_ne())
                    .unwrap_or(Ordering::Equal)
            });
        }
        let mut rank = vec![0usize; first.len()];
        for (pos, &u) in order.iter().enumerate() {
            rank[u] = pos;
        }
        let out = raw_mut::<i64>(&mut outputs[0])?;
        out.fill(0);
        let k = first.len();
        // Positions and counts are below u32::MAX (the shape's limit): exact in i64.
        out[0] = k as i64;
        for (pos, &u) in order.iter().enumerate() {
            out[n + pos] = first[u] as i64;
        }
        for (i, &u) in of_item.iter().enumerate() {
            out[2 * n + i] = rank[u] as i64;
            out[3 * n + rank[u]] += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{DataType, LayerDescriptor, TensorInfo, UniqueDescriptor};

    use crate::workloads::test_support::{Bytes, try_run_typed};

    fn run(d: UniqueDescriptor, info: TensorInfo, x: Bytes, n: u32) -> Vec<i64> {
        try_run_typed(
            &LayerDescriptor::Unique(d),
            &[(info, x)],
            &TensorInfo::new(&[4, n], DataType::Signed64),
        )
        .unwrap()
        .to_vec::<i64>()
    }

    /// ONNX's example: [2, 1, 1, 3, 4, 3] sorted gives [1, 2, 3, 4], first indices
    /// [1, 0, 3, 4], inverse [1, 0, 0, 2, 3, 2], counts [2, 1, 2, 1]; unsorted [2, 1, 3, 4],
    /// [0, 1, 3, 4], [0, 1, 1, 2, 3, 2], [1, 2, 2, 1].
    #[test]
    fn onnx_example_sorted_and_not() {
        let x = || Bytes::of(&[2.0f32, 1.0, 1.0, 3.0, 4.0, 3.0]);
        let info = TensorInfo::new(&[6], DataType::Float32);
        let d = UniqueDescriptor {
            flatten: true,
            axis: 0,
            sorted: true,
        };
        #[rustfmt::skip]
        assert_eq!(run(d, info.clone(), x(), 6), [
            4, 0, 0, 0, 0, 0,
            1, 0, 3, 4, 0, 0,
            1, 0, 0, 2, 3, 2,
            2, 1, 2, 1, 0, 0,
        ]);
        let d = UniqueDescriptor { sorted: false, ..d };
        #[rustfmt::skip]
        assert_eq!(run(d, info, x(), 6), [
            4, 0, 0, 0, 0, 0,
            0, 1, 3, 4, 0, 0,
            0, 1, 1, 2, 3, 2,
            1, 2, 2, 1, 0, 0,
        ]);
    }

    /// Columns of [[1, 0, 1], [2, 5, 2]] (axis 1): column 0 equals column 2; sorted, column 1
    /// ([0, 5]) comes first. Negative int64 values compare exactly.
    #[test]
    fn slices_along_an_axis() {
        let d = UniqueDescriptor {
            flatten: false,
            axis: 1,
            sorted: true,
        };
        let x = Bytes::of(&[1i64, 0, 1, 2, 5, 2]);
        #[rustfmt::skip]
        assert_eq!(run(d, TensorInfo::new(&[2, 3], DataType::Signed64), x, 3), [
            2, 0, 0,
            1, 0, 0,
            1, 0, 1,
            1, 2, 0,
        ]);
        let big = Bytes::of(&[i64::MIN, i64::MAX, i64::MIN + 1, i64::MIN]);
        let d = UniqueDescriptor { flatten: true, ..d };
        #[rustfmt::skip]
        assert_eq!(run(d, TensorInfo::new(&[4], DataType::Signed64), big, 4), [
            3, 0, 0, 0,
            0, 2, 1, 0,
            0, 2, 1, 0,
            2, 1, 1, 0,
        ]);
    }
}
