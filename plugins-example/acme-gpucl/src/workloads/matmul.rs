//! FullyConnected and BatchMatMul: one work item per output element, summing in order of `k`
//! (`matmul` in `kernels/matmul.cl`). Transposes (`transpose_weights`, `transpose_a`,
//! `transpose_b`) and numpy broadcasting of the batch dimensions are strides, so nothing is
//! copied.

use std::sync::Arc;

use backplane_api::{
    ActivationDescriptor, BackendResult, LayerDescriptor, TensorInfo, Workload, WorkloadDesc,
};

use super::{
    Builder, KArg, Src, broadcast_strides, count, elementwise::activation_args, invalid_layer,
    padded,
};
use crate::device::Device;

/// `matmul`'s parameter table for `a · b` into `out` (see `matmul.cl`).
pub(crate) fn table(
    a: &[u32],
    b: &[u32],
    out: &[u32],
    transpose_a: bool,
    transpose_b: bool,
) -> Result<Vec<usize>, String> {
    let (ra, rb, ro) = (a.len(), b.len(), out.len());
    if ra < 2 || rb < 2 || ro < 2 {
        return Err("matrix products need ranks of 2 or more".to_owned());
    }
    let (m, n) = (out[ro - 2] as usize, out[ro - 1] as usize);
    let k = if transpose_a { a[ra - 2] } else { a[ra - 1] } as usize;
    let (ac, bc) = (a[ra - 1] as usize, b[rb - 1] as usize);
    // a[r, k] at r * a_row + k * a_k; b[k, j] at k * b_k + j * b_col.
    let (a_row, a_k) = if transpose_a { (1, ac) } else { (ac, 1) };
    let (b_k, b_col) = if transpose_b { (1, bc) } else { (bc, 1) };
    let batch = &out[..ro - 2];
    let a_batch = broadcast_strides(&a[..ra - 2], batch);
    let b_batch = broadcast_strides(&b[..rb - 2], batch);
    // Batch strides in elements of whole matrices.
    let (a_mat, b_mat) = (
        a[ra - 2] as usize * a[ra - 1] as usize,
        b[rb - 2] as usize * b[rb - 1] as usize,
    );
    let dims: Vec<usize> = batch.iter().map(|&d| d as usize).collect();
    let mut p = vec![m, n, k, a_row, a_k, b_k, b_col];
    p.extend(padded(&dims, 1)?);
    p.extend(padded(
        &a_batch.iter().map(|s| s * a_mat).collect::<Vec<_>>(),
        0,
    )?);
    p.extend(padded(
        &b_batch.iter().map(|s| s * b_mat).collect::<Vec<_>>(),
        0,
    )?);
    Ok(p)
}

/// Adds the `matmul` launch: `a · b` (+ `bias` along the last dimension), then `activation`,
/// into output 0, with the parameter table `p`.
pub(crate) fn add_launch(
    b: &mut Builder<'_>,
    p: &[usize],
    [x, w]: [Src; 2],
    bias: Option<Src>,
    activation: Option<&ActivationDescriptor>,
) -> BackendResult<()> {
    let desc = b.desc();
    let n = count(&desc.outputs[0]).map_err(|e| invalid_layer(desc, e))?;
    let p = b.upload_i32(p)?;
    let [act, fa, fb] = activation_args(activation);
    b.kernel(
        "matmul",
        vec![
            KArg::Buf(x),
            KArg::Buf(w),
            KArg::Buf(bias.unwrap_or(w)),
            KArg::Buf(Src::Output(0)),
            KArg::Buf(p),
            KArg::Int(n),
            KArg::Int(i32::from(bias.is_some())),
            act,
            fa,
            fb,
        ],
        n as usize,
    )
}

/// The parameter table of a FullyConnected or BatchMatMul layer over these tensors.
pub(crate) fn layer_table(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    out: &TensorInfo,
) -> Result<Vec<usize>, String> {
    let (a, w) = (&inputs[0].shape, &inputs[1].shape);
    match layer {
        // x [B, K] · W [K, N] (or W [N, K] transposed).
        LayerDescriptor::FullyConnected(d) => table(a, w, &out.shape, false, d.transpose_weights),
        LayerDescriptor::BatchMatMul(d) => table(a, w, &out.shape, d.transpose_a, d.transpose_b),
        other => Err(format!("{} is not a matrix product", other.kind())),
    }
}

/// The workload of a FullyConnected or BatchMatMul layer.
pub(crate) fn create(
    device: &Arc<Device>,
    desc: &WorkloadDesc<'_>,
) -> BackendResult<Box<dyn Workload>> {
    let p = layer_table(desc.layer, &desc.inputs, &desc.outputs[0])
        .map_err(|e| invalid_layer(desc, e))?;
    let has_bias = matches!(desc.layer, LayerDescriptor::FullyConnected(d) if d.bias_enabled);
    let mut b = Builder::new(device, desc);
    let x = b.input(0)?;
    let w = b.input(1)?;
    let bias = if has_bias { Some(b.input(2)?) } else { None };
    add_launch(&mut b, &p, [x, w], bias, None)?;
    Ok(b.build())
}
