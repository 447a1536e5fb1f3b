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

#[cfg(test)]
mod tests {
    use backplane_api::{BatchMatMulDescriptor, FullyConnectedDescriptor};

    use super::*;
    use crate::workloads::test_support::{
        ConstSlots, Lcg, assert_close, assert_same_bits, cst, numel, run_with, run1, var,
    };

    #[test]
    fn fully_connected_with_bias_and_transposed_weights() {
        let (b, k, n) = (3, 37, 19);
        let mut g = Lcg(10);
        let x = g.vec(b * k);
        let w = g.vec(k * n);
        let bias = g.vec(n);
        for transpose in [false, true] {
            for bias_enabled in [false, true] {
                let layer = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
                    bias_enabled,
                    transpose_weights: transpose,
                });
                let wshape = if transpose {
                    [n as u32, k as u32]
                } else {
                    [k as u32, n as u32]
                };
                let mut ins = vec![
                    var(&[b as u32, k as u32], x.clone()),
                    cst(&wshape, w.clone()),
                ];
                if bias_enabled {
                    ins.push(cst(&[n as u32], bias.clone()));
                }
                let got = run1(&layer, &ins, &[b as u32, n as u32]);
                let mut want = Vec::new();
                for r in 0..b {
                    for j in 0..n {
                        let mut s = if bias_enabled {
                            f64::from(bias[j])
                        } else {
                            0.0
                        };
                        for q in 0..k {
                            let wv = if transpose {
                                w[j * k + q]
                            } else {
                                w[q * n + j]
                            };
                            s += f64::from(x[r * k + q]) * f64::from(wv);
                        }
                        want.push(s);
                    }
                }
                assert_close(
                    &got,
                    &want,
                    &format!("transpose {transpose}, bias {bias_enabled}"),
                );
            }
        }
    }

    /// Broadcast batches, transposes of either side, a constant or a computed `b`.
    #[test]
    fn batch_matmul_broadcasts_and_transposes() {
        let cases: [(&[u32], &[u32], bool, bool); 5] = [
            (&[2, 5, 7], &[7, 3], false, false),
            (&[1, 4, 9, 6], &[3, 1, 6, 5], false, false),
            (&[2, 6, 5], &[2, 3, 6], true, true),
            (&[5, 7], &[2, 3, 11, 7], false, true),
            (&[3, 2, 8, 17], &[3, 2, 8, 13], true, false),
        ];
        let mut g = Lcg(11);
        for (sa, sb, ta, tb) in cases {
            let d = BatchMatMulDescriptor {
                transpose_a: ta,
                transpose_b: tb,
            };
            let out = backplane_api::shapes::batch_matmul(&d, sa, sb).unwrap();
            let (a, b) = (g.vec(numel(sa)), g.vec(numel(sb)));
            let (ra, rb, ro) = (sa.len(), sb.len(), out.len());
            let (m, n) = (out[ro - 2] as usize, out[ro - 1] as usize);
            let k = if ta { sa[ra - 2] } else { sa[ra - 1] } as usize;
            let mut want = Vec::new();
            let batch = &out[..ro - 2];
            for flat in 0..numel(batch) {
                let mut idx = vec![0; batch.len()];
                let mut r = flat;
                for dd in (0..batch.len()).rev() {
                    idx[dd] = r % batch[dd] as usize;
                    r /= batch[dd] as usize;
                }
                let base = |s: &[u32]| {
                    let bs = &s[..s.len() - 2];
                    let lead = batch.len() - bs.len();
                    let mut off = 0;
                    for (q, &dim) in bs.iter().enumerate() {
                        off = off * dim as usize + if dim == 1 { 0 } else { idx[lead + q] };
                    }
                    off * s[s.len() - 2] as usize * s[s.len() - 1] as usize
                };
                let (oa, ob) = (base(sa), base(sb));
                for i in 0..m {
                    for j in 0..n {
                        let mut s = 0.0;
                        for q in 0..k {
                            let av = if ta {
                                a[oa + q * m + i]
                            } else {
                                a[oa + i * k + q]
                            };
                            let bv = if tb {
                                b[ob + j * k + q]
                            } else {
                                b[ob + q * n + j]
                            };
                            s += f64::from(av) * f64::from(bv);
                        }
                        want.push(s);
                    }
                }
            }
            let _ = rb;
            let layer = LayerDescriptor::BatchMatMul(d);
            let got = run1(&layer, &[var(sa, a.clone()), var(sb, b.clone())], &out);
            assert_close(&got, &want, &format!("{sa:?} x {sb:?} ta {ta} tb {tb}"));
            let got = run1(&layer, &[var(sa, a.clone()), cst(sb, b.clone())], &out);
            assert_close(&got, &want, &format!("{sa:?} x const {sb:?}"));
        }
    }

    /// A 1.3 host gives the weight and bias slots the buffer `NO_BUFFER`; an older one gave
    /// buffers holding them, or left them out: the same result every way.
    #[test]
    fn fully_connected_weights_and_bias_without_buffers() {
        let (b, k, n) = (2usize, 13usize, 5usize);
        let mut g = Lcg(12);
        let (x, w, bias) = (g.vec(b * k), g.vec(k * n), g.vec(n));
        let layer = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
            bias_enabled: true,
            transpose_weights: false,
        });
        let ins = [
            var(&[b as u32, k as u32], x.clone()),
            cst(&[k as u32, n as u32], w.clone()),
            cst(&[n as u32], bias.clone()),
        ];
        let out = [b as u32, n as u32];
        let got = |slots| {
            run_with(&layer, &ins, &[&out], slots)
                .unwrap_or_else(|e| panic!("{slots:?}: {e}"))
                .swap_remove(0)
        };
        let no_buffer = got(ConstSlots::NoBuffer);
        let want: Vec<f64> = (0..b * n)
            .map(|i| {
                let (r, j) = (i / n, i % n);
                (0..k).fold(f64::from(bias[j]), |s, q| {
                    s + f64::from(x[r * k + q]) * f64::from(w[q * n + j])
                })
            })
            .collect();
        assert_close(&no_buffer, &want, "NO_BUFFER in the weight and bias slots");
        assert_same_bits(&no_buffer, &got(ConstSlots::Omitted), "constants left out");
        assert_same_bits(&no_buffer, &got(ConstSlots::Buffer), "constants in buffers");
    }
}
