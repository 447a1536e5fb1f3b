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
