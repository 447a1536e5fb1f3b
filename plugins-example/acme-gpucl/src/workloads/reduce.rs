//! Mean, Reduce, Softmax and LayerNormalization (`kernels/reduce.cl`): one work item per
//! output element (Mean, Reduce) or per row (Softmax, LayerNormalization), which reads its
//! elements in order.

use std::sync::Arc;

use backplane_api::{
    BackendResult, LayerDescriptor, ReduceOperation, Workload, WorkloadDesc, shapes,
};

use super::{Builder, KArg, Src, count, int, invalid_layer, padded, strides};
use crate::device::Device;

/// `reduce`'s parameter table for reducing a tensor of `shape` over `axes`.
pub(crate) fn table(shape: &[u32], axes: &[u32]) -> Result<Vec<usize>, String> {
    shapes::reduced(shape, axes, false)?;
    let st = strides(shape);
    let (mut kept, mut kept_st, mut red, mut red_st) = (vec![], vec![], vec![], vec![]);
    for (d, &dim) in shape.iter().enumerate() {
        if axes.contains(&(d as u32)) {
            red.push(dim as usize);
            red_st.push(st[d]);
        } else {
            kept.push(dim as usize);
            kept_st.push(st[d]);
        }
    }
    let total: usize = red.iter().product();
    let mut p = vec![total];
    p.extend(padded(&kept, 1)?);
    p.extend(padded(&kept_st, 0)?);
    p.extend(padded(&red, 1)?);
    p.extend(padded(&red_st, 0)?);
    Ok(p)
}

/// `(outer, len, inner)` of `shape` around `axis`.
fn split(shape: &[u32], axis: usize) -> (usize, usize, usize) {
    let prod = |s: &[u32]| s.iter().map(|&d| d as usize).product::<usize>();
    (
        prod(&shape[..axis]),
        shape[axis] as usize,
        prod(&shape[axis + 1..]),
    )
}

/// The workload of a Mean, Reduce, Softmax or LayerNormalization layer.
pub(crate) fn create(
    device: &Arc<Device>,
    desc: &WorkloadDesc<'_>,
) -> BackendResult<Box<dyn Workload>> {
    let x_info = &desc.inputs[0];
    let shape = x_info.shape.as_slice();
    let mut b = Builder::new(device, desc);
    let x = b.input(0)?;
    let y = KArg::Buf(Src::Output(0));
    let invalid = |e: String| invalid_layer(desc, e);
    match desc.layer {
        LayerDescriptor::Mean(_) | LayerDescriptor::Reduce(_) => {
            let (axes, op) = match desc.layer {
                LayerDescriptor::Mean(d) => (d.axes.as_slice(), ReduceOperation::Mean),
                LayerDescriptor::Reduce(d) => (d.axes.as_slice(), d.operation),
                _ => unreachable!("matched above"),
            };
            let t = table(shape, axes).map_err(invalid)?;
            let n = count(&desc.outputs[0]).map_err(invalid)?;
            let p = b.upload_i32(&t)?;
            b.kernel(
                "reduce",
                vec![
                    KArg::Buf(x),
                    y,
                    KArg::Buf(p),
                    KArg::Int(n),
                    KArg::Int(op as i32),
                ],
                n as usize,
            )?;
        }
        LayerDescriptor::Softmax(d) => {
            let axis = shapes::normalize_axis(i64::from(d.axis), shape.len()).map_err(invalid)?;
            let (outer, len, inner) = split(shape, axis);
            let rows = outer * inner;
            let ints = [
                int("rows", rows),
                int("axis length", len),
                int("inner", inner),
            ];
            let [rows_i, len_i, inner_i] = ints.map(|r| r.map_err(invalid));
            b.kernel(
                "softmax",
                vec![
                    KArg::Buf(x),
                    y,
                    KArg::Int(rows_i?),
                    KArg::Int(len_i?),
                    KArg::Int(inner_i?),
                    KArg::Float(d.beta),
                ],
                rows,
            )?;
        }
        LayerDescriptor::LayerNormalization(d) => {
            let axis = d.axis as usize;
            if axis >= shape.len() {
                return Err(invalid(format!(
                    "axis {axis} of a rank-{} input",
                    shape.len()
                )));
            }
            let len: usize = shape[axis..].iter().map(|&v| v as usize).product();
            let rows: usize = shape[..axis].iter().map(|&v| v as usize).product();
            let scale = b.input(1)?;
            let bias = if d.bias_enabled { b.input(2)? } else { scale };
            b.kernel(
                "layer_norm",
                vec![
                    KArg::Buf(x),
                    KArg::Buf(scale),
                    KArg::Buf(bias),
                    y,
                    KArg::Int(int("rows", rows).map_err(invalid)?),
                    KArg::Int(int("row length", len).map_err(invalid)?),
                    KArg::Float(d.epsilon),
                    KArg::Int(i32::from(d.bias_enabled)),
                ],
                rows,
            )?;
        }
        other => {
            return Err(invalid(format!("{} is not a reduction", other.kind())));
        }
    }
    Ok(b.build())
}

#[cfg(test)]
mod tests {
    use backplane_api::{
        LayerNormalizationDescriptor, MeanDescriptor, ReduceDescriptor, SoftmaxDescriptor,
    };

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, cst, numel, run1, var};

    /// The reduction of `x` (of `shape`) over `axes`, by a naive walk.
    fn oracle(x: &[f32], shape: &[u32], axes: &[u32], op: ReduceOperation) -> Vec<f64> {
        let out = shapes::reduced(shape, axes, false).unwrap();
        let mut acc: Vec<Vec<f64>> = vec![Vec::new(); numel(&out).max(1)];
        for (flat, &v) in x.iter().enumerate() {
            let mut r = flat;
            let mut idx = vec![0; shape.len()];
            for d in (0..shape.len()).rev() {
                idx[d] = r % shape[d] as usize;
                r /= shape[d] as usize;
            }
            let mut o = 0;
            for d in 0..shape.len() {
                if !axes.contains(&(d as u32)) {
                    o = o * shape[d] as usize + idx[d];
                }
            }
            acc[o].push(f64::from(v));
        }
        acc.iter()
            .map(|vs| match op {
                ReduceOperation::Sum => vs.iter().sum(),
                ReduceOperation::Mean => vs.iter().sum::<f64>() / vs.len() as f64,
                ReduceOperation::Max => vs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                ReduceOperation::Min => vs.iter().copied().fold(f64::INFINITY, f64::min),
                ReduceOperation::Prod => vs.iter().product(),
            })
            .collect()
    }

    #[test]
    fn mean_and_reduce_over_axes() {
        let shape = [2u32, 3, 5, 7];
        let x: Vec<f32> = Lcg(40).vec(numel(&shape)).iter().map(|v| v + 0.5).collect();
        for axes in [&[2u32, 3][..], &[1], &[0, 2], &[0, 1, 2, 3], &[]] {
            for keep_dims in [false, true] {
                let out = shapes::reduced(&shape, axes, keep_dims).unwrap();
                let mean = LayerDescriptor::Mean(MeanDescriptor {
                    axes: axes.to_vec().into(),
                    keep_dims,
                });
                let got = run1(&mean, &[var(&shape, x.clone())], &out);
                assert_close(
                    &got,
                    &oracle(&x, &shape, axes, ReduceOperation::Mean),
                    &format!("mean {axes:?}"),
                );
                for operation in ReduceOperation::ALL {
                    let layer = LayerDescriptor::Reduce(ReduceDescriptor {
                        operation,
                        axes: axes.to_vec().into(),
                        keep_dims,
                    });
                    let got = run1(&layer, &[var(&shape, x.clone())], &out);
                    assert_close(
                        &got,
                        &oracle(&x, &shape, axes, operation),
                        &format!("{operation:?} {axes:?}"),
                    );
                }
            }
        }
    }

    #[test]
    fn softmax_along_any_axis() {
        let shape = [3u32, 5, 17];
        let x: Vec<f32> = Lcg(41)
            .vec(numel(&shape))
            .iter()
            .map(|v| v * 10.0)
            .collect();
        for (axis, beta) in [(-1, 1.0), (1, 1.0), (0, 0.5), (2, -2.0)] {
            let layer = LayerDescriptor::Softmax(SoftmaxDescriptor { beta, axis });
            let got = run1(&layer, &[var(&shape, x.clone())], &shape);
            let a = shapes::normalize_axis(i64::from(axis), 3).unwrap();
            let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
            let inner: usize = dims[a + 1..].iter().product();
            let mut want = vec![0.0; x.len()];
            for (i, w) in want.iter_mut().enumerate() {
                let (o, r) = (i / (dims[a] * inner), i % inner);
                let row: Vec<f64> = (0..dims[a])
                    .map(|k| f64::from(beta) * f64::from(x[(o * dims[a] + k) * inner + r]))
                    .collect();
                let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
                *w = (f64::from(beta) * f64::from(x[i]) - m).exp() / s;
            }
            assert_close(&got, &want, &format!("axis {axis} beta {beta}"));
        }
    }

    #[test]
    fn layer_normalization() {
        let shape = [2u32, 7, 33];
        let mut g = Lcg(42);
        let x = g.vec(numel(&shape));
        for (axis, bias_enabled, constant) in
            [(2u32, true, true), (1, false, true), (2, true, false)]
        {
            let len: usize = shape[axis as usize..].iter().map(|&d| d as usize).product();
            let (scale, bias) = (g.vec(len), g.vec(len));
            let pshape = &shape[axis as usize..];
            let p = |v: &Vec<f32>| {
                if constant {
                    cst(pshape, v.clone())
                } else {
                    var(pshape, v.clone())
                }
            };
            let layer = LayerDescriptor::LayerNormalization(LayerNormalizationDescriptor {
                axis,
                epsilon: 1e-5,
                bias_enabled,
            });
            let mut ins = vec![var(&shape, x.clone()), p(&scale)];
            if bias_enabled {
                ins.push(p(&bias));
            }
            let got = run1(&layer, &ins, &shape);
            let mut want = Vec::new();
            for row in x.chunks(len) {
                let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / len as f64;
                let var = row
                    .iter()
                    .map(|&v| (f64::from(v) - mean).powi(2))
                    .sum::<f64>()
                    / len as f64;
                for (k, &v) in row.iter().enumerate() {
                    let y = (f64::from(v) - mean) / (var + 1e-5).sqrt() * f64::from(scale[k]);
                    want.push(if bias_enabled {
                        y + f64::from(bias[k])
                    } else {
                        y
                    });
                }
            }
            assert_close(&got, &want, &format!("axis {axis}"));
        }
    }
}
