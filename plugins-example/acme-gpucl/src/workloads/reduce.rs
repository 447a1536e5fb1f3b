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
