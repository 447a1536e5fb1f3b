//! Reshape, Flatten and MemCopy (a device copy of the bytes), Transpose (`gather_strided`)
//! and Concat (`concat_part` per input) (`kernels/movement.cl`).

use std::sync::Arc;

use backplane_api::{BackendResult, LayerDescriptor, Workload, WorkloadDesc};

use super::{Builder, KArg, Src, count, int, invalid_layer, padded, strides};
use crate::device::Device;

/// `gather_strided`'s table for transposing a tensor of `shape` by `permutation`.
pub(crate) fn transpose_table(shape: &[u32], permutation: &[u32]) -> Result<Vec<usize>, String> {
    let mut seen = vec![false; shape.len()];
    if permutation.len() != shape.len()
        || permutation
            .iter()
            .any(|&p| (p as usize) >= shape.len() || std::mem::replace(&mut seen[p as usize], true))
    {
        return Err(format!(
            "{permutation:?} is not a permutation of {} dimensions",
            shape.len()
        ));
    }
    let st = strides(shape);
    let dims: Vec<usize> = permutation
        .iter()
        .map(|&p| shape[p as usize] as usize)
        .collect();
    let from: Vec<usize> = permutation.iter().map(|&p| st[p as usize]).collect();
    let mut t = padded(&dims, 1)?.to_vec();
    t.extend(padded(&from, 0)?);
    Ok(t)
}

/// The workload of a Reshape, Flatten, MemCopy, Transpose or Concat layer.
pub(crate) fn create(
    device: &Arc<Device>,
    desc: &WorkloadDesc<'_>,
) -> BackendResult<Box<dyn Workload>> {
    let out = &desc.outputs[0];
    let invalid = |e: String| invalid_layer(desc, e);
    let n = count(out).map_err(invalid)?;
    let mut b = Builder::new(device, desc);
    match desc.layer {
        LayerDescriptor::Reshape(_) | LayerDescriptor::Flatten(_) | LayerDescriptor::MemCopy => {
            let x = b.input(0)?;
            let bytes = out
                .num_bytes()
                .ok_or_else(|| invalid("too large".to_owned()))?;
            b.copy(x, Src::Output(0), bytes);
        }
        LayerDescriptor::Transpose(d) => {
            let t = transpose_table(&desc.inputs[0].shape, &d.permutation).map_err(invalid)?;
            let x = b.input(0)?;
            let p = b.upload_i32(&t)?;
            b.kernel(
                "gather_strided",
                vec![
                    KArg::Buf(x),
                    KArg::Buf(Src::Output(0)),
                    KArg::Buf(p),
                    KArg::Int(n),
                ],
                n as usize,
            )?;
        }
        LayerDescriptor::Concat(d) => {
            let axis = d.axis as usize;
            let shape = out.shape.as_slice();
            if axis >= shape.len() {
                return Err(invalid(format!(
                    "axis {axis} of a rank-{} output",
                    shape.len()
                )));
            }
            let len_out = shape[axis] as usize;
            let inner: usize = shape[axis + 1..].iter().map(|&v| v as usize).product();
            let mut offset = 0usize;
            for slot in 0..desc.inputs.len() {
                let info = &desc.inputs[slot];
                let len_in = info.shape.get(axis).copied().unwrap_or(0) as usize;
                let elements = count(info).map_err(invalid)?;
                let x = b.input(slot)?;
                b.kernel(
                    "concat_part",
                    vec![
                        KArg::Buf(x),
                        KArg::Buf(Src::Output(0)),
                        KArg::Int(elements),
                        KArg::Int(int("length", len_in).map_err(invalid)?),
                        KArg::Int(int("length", len_out).map_err(invalid)?),
                        KArg::Int(int("inner", inner).map_err(invalid)?),
                        KArg::Int(int("offset", offset).map_err(invalid)?),
                    ],
                    elements as usize,
                )?;
                offset += len_in;
            }
        }
        other => {
            return Err(invalid(format!("{} is not a data movement", other.kind())));
        }
    }
    Ok(b.build())
}

#[cfg(test)]
mod tests {
    use backplane_api::{
        ConcatDescriptor, FlattenDescriptor, ReshapeDescriptor, TransposeDescriptor,
    };

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, numel, run1, var};

    fn f64s(v: &[f32]) -> Vec<f64> {
        v.iter().map(|&x| f64::from(x)).collect()
    }

    #[test]
    fn reshape_flatten_memcopy_copy_the_bytes() {
        let x = Lcg(50).vec(2 * 3 * 5);
        let reshape = LayerDescriptor::Reshape(ReshapeDescriptor {
            target_shape: vec![6, 5].into(),
        });
        assert_close(
            &run1(&reshape, &[var(&[2, 3, 5], x.clone())], &[6, 5]),
            &f64s(&x),
            "reshape",
        );
        let flatten = LayerDescriptor::Flatten(FlattenDescriptor { axis: 2 });
        assert_close(
            &run1(&flatten, &[var(&[2, 3, 5], x.clone())], &[6, 5]),
            &f64s(&x),
            "flatten",
        );
        let copy = LayerDescriptor::MemCopy;
        assert_close(
            &run1(&copy, &[var(&[2, 3, 5], x.clone())], &[2, 3, 5]),
            &f64s(&x),
            "memcopy",
        );
    }

    #[test]
    fn transpose_any_permutation() {
        let shape = [2u32, 3, 5, 7];
        let x = Lcg(51).vec(numel(&shape));
        for perm in [[0u32, 2, 1, 3], [3, 2, 1, 0], [1, 3, 0, 2], [0, 1, 2, 3]] {
            let out: Vec<u32> = perm.iter().map(|&p| shape[p as usize]).collect();
            let layer = LayerDescriptor::Transpose(TransposeDescriptor {
                permutation: perm.to_vec().into(),
            });
            let got = run1(&layer, &[var(&shape, x.clone())], &out);
            let st = strides(&shape);
            let mut want = Vec::new();
            for flat in 0..x.len() {
                let mut r = flat;
                let mut off = 0;
                for d in (0..4).rev() {
                    off += (r % out[d] as usize) * st[perm[d] as usize];
                    r /= out[d] as usize;
                }
                want.push(f64::from(x[off]));
            }
            assert_close(&got, &want, &format!("{perm:?}"));
        }
    }

    #[test]
    fn concat_along_each_axis() {
        let mut g = Lcg(52);
        for axis in 0..3u32 {
            let shapes: Vec<Vec<u32>> = [2u32, 1, 3]
                .iter()
                .map(|&k| {
                    let mut s = vec![2u32, 3, 4];
                    s[axis as usize] = k;
                    s
                })
                .collect();
            let values: Vec<Vec<f32>> = shapes.iter().map(|s| g.vec(numel(s))).collect();
            let mut out = vec![2u32, 3, 4];
            out[axis as usize] = 6;
            let ins: Vec<_> = shapes
                .iter()
                .zip(&values)
                .map(|(s, v)| var(s, v.clone()))
                .collect();
            let layer = LayerDescriptor::Concat(ConcatDescriptor { axis });
            let got = run1(&layer, &ins, &out);
            let a = axis as usize;
            let outer: usize = out[..a].iter().map(|&d| d as usize).product();
            let inner: usize = out[a + 1..].iter().map(|&d| d as usize).product();
            let mut want = Vec::new();
            for o in 0..outer {
                for (s, v) in shapes.iter().zip(&values) {
                    let block = s[a] as usize * inner;
                    want.extend(f64s(&v[o * block..(o + 1) * block]));
                }
            }
            assert_close(&got, &want, &format!("axis {axis}"));
        }
    }
}
