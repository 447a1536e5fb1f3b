//! The direct depthwise kernel: one input channel per group, `multiplier` output channels
//! per input channel (output channel `o` reads input channel `o / multiplier`). Each weight
//! is one strided multiply-add over the output rows it reaches, no im2col.

use super::convolution::{ConvGeometry, inside};

/// `out_n += depthwise(x_n, w)` for one image: `x_n` is `[C, H, W]`, `out_n` `[M, OH, OW]`
/// (already holding the bias), `w` `[M, 1, KH, KW]`.
pub(crate) fn accumulate(g: &ConvGeometry, x_n: &[f32], w: &[f32], out_n: &mut [f32]) {
    let (in_plane, out_plane) = (g.height * g.width, g.out_plane());
    let (multiplier, taps) = (g.group_out(), g.kernel_h * g.kernel_w);
    for (o, out_p) in out_n.chunks_exact_mut(out_plane).enumerate() {
        let x_c = &x_n[(o / multiplier) * in_plane..][..in_plane];
        let w_o = &w[o * taps..][..taps];
        for ky in 0..g.kernel_h {
            let dy = (ky * g.dilation_y) as i64 - g.pad_top as i64;
            let rows = inside(g.out_height, g.height, g.stride_y, dy);
            for kx in 0..g.kernel_w {
                let dx = (kx * g.dilation_x) as i64 - g.pad_left as i64;
                let cols = inside(g.out_width, g.width, g.stride_x, dx);
                if cols.is_empty() {
                    continue;
                }
                let first_x = (cols.start as i64 * g.stride_x as i64 + dx) as usize;
                let wv = w_o[ky * g.kernel_w + kx];
                for oy in rows.clone() {
                    let iy = (oy as i64 * g.stride_y as i64 + dy) as usize;
                    let x_row = &x_c[iy * g.width + first_x..(iy + 1) * g.width];
                    let out_row = &mut out_p[oy * g.out_width..][cols.clone()];
                    if g.stride_x == 1 {
                        for (o_v, &x_v) in out_row.iter_mut().zip(x_row) {
                            *o_v += wv * x_v;
                        }
                    } else {
                        for (o_v, &x_v) in out_row.iter_mut().zip(x_row.iter().step_by(g.stride_x))
                        {
                            *o_v += wv * x_v;
                        }
                    }
                }
            }
        }
    }
}
