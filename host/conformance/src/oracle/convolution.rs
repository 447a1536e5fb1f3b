//! The layers that slide a window over an NCHW input: `Convolution2d`, `DepthwiseConvolution2d`,
//! `TransposeConvolution2d` and `Pooling2d` (dilated too), and the window arithmetic they share.

use backplane_api::{
    Convolution2dDescriptor, DataLayout, OutputRounding, Pooling2dDescriptor, PoolingType,
    TransposeConvolution2dDescriptor,
};

use super::{Tensor, dims4, indices, input};

/// The number of positions of a sliding window along one axis (ONNX `Conv` and pooling):
/// `(padded - extent) / stride + 1` with the division rounded down, or up in ceil mode, where
/// `extent = dilation * (kernel - 1) + 1`; in ceil mode a last window that would start past
/// the input and its leading padding is dropped.
pub fn window_count(
    input: usize,
    (pad_begin, pad_end): (usize, usize),
    kernel: usize,
    stride: usize,
    dilation: usize,
    ceil: bool,
) -> Result<usize, String> {
    let padded = input + pad_begin + pad_end;
    let extent = dilation * (kernel - 1) + 1;
    if padded < extent || stride == 0 {
        return Err(format!(
            "a window of {extent} and stride {stride} over {padded}"
        ));
    }
    let steps = if ceil {
        (padded - extent).div_ceil(stride)
    } else {
        (padded - extent) / stride
    };
    let mut count = steps + 1;
    if ceil && (count - 1) * stride >= input + pad_begin {
        count -= 1;
    }
    Ok(count)
}

/// `o * stride - pad + j * dilation`: the input coordinate of window cell `j` of output `o`,
/// `None` when it falls outside `0..size`.
fn source(
    o: usize,
    stride: usize,
    pad: usize,
    j: usize,
    dilation: usize,
    size: usize,
) -> Option<usize> {
    let at = (o * stride + j * dilation).checked_sub(pad)?;
    (at < size).then_some(at)
}

/// `Convolution2d` and `DepthwiseConvolution2d` (NCHW), ONNX `Conv`:
/// `y[n, m, oy, ox] = bias[m] + sum over c in m's group, ky, kx of
/// x[n, c, oy * sy - top + ky * dy, ox * sx - left + kx * dx] * w[m, c - group start, ky, kx]`,
/// cells outside the input being 0 (padding). Weights are `[M, C / groups, kh, kw]`; the
/// depthwise form has `groups = C` (so output channel `m` reads input channel
/// `m / multiplier`).
pub fn convolution2d(
    inputs: &[Tensor],
    d: &Convolution2dDescriptor,
    depthwise: bool,
) -> Result<Tensor, String> {
    if d.layout != DataLayout::Nchw {
        return Err("the oracle's convolution is NCHW".into());
    }
    let (x, w) = (input(inputs, 0)?, input(inputs, 1)?);
    let [n, c, h, wd] = dims4(x, "input")?;
    let [m, c_per_group, kh, kw] = dims4(w, "weights")?;
    let groups = if depthwise { c } else { d.groups as usize };
    let m_per_group = m / groups;
    let (sy, sx) = (d.stride_y as usize, d.stride_x as usize);
    let (dy, dx) = (d.dilation_y as usize, d.dilation_x as usize);
    let p = d.padding;
    let (top, left) = (p.top as usize, p.left as usize);
    let oh = window_count(h, (top, p.bottom as usize), kh, sy, dy, false)?;
    let ow = window_count(wd, (left, p.right as usize), kw, sx, dx, false)?;
    let mut y = Tensor::zeros(&[n, m, oh, ow]);
    for b in 0..n {
        for oc in 0..m {
            let group = oc / m_per_group;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = if d.bias_enabled {
                        input(inputs, 2)?.at(&[oc])
                    } else {
                        0.0
                    };
                    for icg in 0..c_per_group {
                        let ic = group * c_per_group + icg;
                        for ky in 0..kh {
                            let Some(iy) = source(oy, sy, top, ky, dy, h) else {
                                continue;
                            };
                            for kx in 0..kw {
                                let Some(ix) = source(ox, sx, left, kx, dx, wd) else {
                                    continue;
                                };
                                acc += x.at(&[b, ic, iy, ix]) * w.at(&[oc, icg, ky, kx]);
                            }
                        }
                    }
                    y.set(&[b, oc, oy, ox], acc);
                }
            }
        }
    }
    Ok(y)
}

/// `TransposeConvolution2d` (NCHW, ONNX `ConvTranspose`), weights
/// `[C, M / groups, kh, kw]`: input pixel `x[n, c, iy, ix]` adds `x * w[c, m', ky, kx]` to
/// output pixel `y[n, g * M / groups + m', iy * sy - top + ky * dy, ix * sx - left + kx * dx]`
/// (`g` the group of `c`) when that pixel lies in the output, whose size per axis is
/// `(in - 1) * stride - (begin + end padding) + dilation * (k - 1) + output_padding + 1`.
pub fn transpose_convolution2d(
    inputs: &[Tensor],
    d: &TransposeConvolution2dDescriptor,
) -> Result<Tensor, String> {
    let (x, w) = (input(inputs, 0)?, input(inputs, 1)?);
    let [n, c, h, wd] = dims4(x, "input")?;
    let [_, m_per_group, kh, kw] = dims4(w, "weights")?;
    let groups = d.groups as usize;
    let c_per_group = c / groups;
    let m = m_per_group * groups;
    let (sy, sx) = (d.stride_y as i64, d.stride_x as i64);
    let (dy, dx) = (d.dilation_y as i64, d.dilation_x as i64);
    let p = d.padding;
    let size = |input: usize, stride: i64, pads: i64, dil: i64, k: usize, extra: u32| {
        (input as i64 - 1) * stride - pads + dil * (k as i64 - 1) + i64::from(extra) + 1
    };
    let oh = size(
        h,
        sy,
        i64::from(p.top + p.bottom),
        dy,
        kh,
        d.output_padding_y,
    );
    let ow = size(
        wd,
        sx,
        i64::from(p.left + p.right),
        dx,
        kw,
        d.output_padding_x,
    );
    if oh < 0 || ow < 0 {
        return Err("negative output size".into());
    }
    let (oh, ow) = (oh as usize, ow as usize);
    let mut y = Tensor::zeros(&[n, m, oh, ow]);
    if d.bias_enabled {
        let bias = input(inputs, 2)?;
        for i in indices(&y.shape.clone()) {
            y.set(&i, bias.at(&[i[1]]));
        }
    }
    for b in 0..n {
        for ic in 0..c {
            let group = ic / c_per_group;
            for iy in 0..h {
                for ix in 0..wd {
                    let v = x.at(&[b, ic, iy, ix]);
                    for mg in 0..m_per_group {
                        let oc = group * m_per_group + mg;
                        for ky in 0..kh {
                            let oy = iy as i64 * sy - i64::from(p.top) + ky as i64 * dy;
                            if !(0..oh as i64).contains(&oy) {
                                continue;
                            }
                            for kx in 0..kw {
                                let ox = ix as i64 * sx - i64::from(p.left) + kx as i64 * dx;
                                if !(0..ow as i64).contains(&ox) {
                                    continue;
                                }
                                let at = [b, oc, oy as usize, ox as usize];
                                let sum = y.at(&at) + v * w.at(&[ic, mg, ky, kx]);
                                y.set(&at, sum);
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(y)
}

/// `Pooling2d` (NCHW), and `DilatedPooling2d` with window cells `(dy, dx)` apart (1 for plain
/// pooling): output `(oy, ox)`'s window holds the cells `oy * sy - top + j * dy` (and the
/// same across) for `j` below the window size. A maximum is over the cells inside the input;
/// an average divides the sum of those by their count, or, with `count_include_pad`, by the
/// count of the window's cells inside the padded input (rows `-top .. h + bottom`), as ONNX
/// `AveragePool` does in ceil mode.
pub fn pooling2d(
    x: &Tensor,
    d: &Pooling2dDescriptor,
    dy: usize,
    dx: usize,
) -> Result<Tensor, String> {
    if d.layout != DataLayout::Nchw {
        return Err("the oracle's pooling is NCHW".into());
    }
    let [n, c, h, w] = dims4(x, "input")?;
    let (kh, kw) = (d.pool_height as usize, d.pool_width as usize);
    let (sy, sx) = (d.stride_y as usize, d.stride_x as usize);
    let p = d.padding;
    let (top, bottom, left, right) = (
        p.top as usize,
        p.bottom as usize,
        p.left as usize,
        p.right as usize,
    );
    let ceil = d.rounding == OutputRounding::Ceiling;
    let oh = window_count(h, (top, bottom), kh, sy, dy, ceil)?;
    let ow = window_count(w, (left, right), kw, sx, dx, ceil)?;
    let mut y = Tensor::zeros(&[n, c, oh, ow]);
    for b in 0..n {
        for ch in 0..c {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut inside = Vec::new();
                    let mut in_padded = 0usize;
                    for j in 0..kh {
                        // The row in padded coordinates (0 is the first padding row).
                        let py = oy * sy + j * dy;
                        for i in 0..kw {
                            let px = ox * sx + i * dx;
                            if py < top + h + bottom && px < left + w + right {
                                in_padded += 1;
                            }
                            if let (Some(iy), Some(ix)) = (
                                source(oy, sy, top, j, dy, h),
                                source(ox, sx, left, i, dx, w),
                            ) {
                                inside.push(x.at(&[b, ch, iy, ix]));
                            }
                        }
                    }
                    let value = match d.pool_type {
                        PoolingType::Max => inside.iter().fold(f64::NEG_INFINITY, |m, &v| {
                            if v > m || v.is_nan() { v } else { m }
                        }),
                        PoolingType::Average => {
                            let divisor = if d.count_include_pad {
                                in_padded
                            } else {
                                inside.len()
                            };
                            inside.iter().sum::<f64>() / divisor as f64
                        }
                    };
                    y.set(&[b, ch, oy, ox], value);
                }
            }
        }
    }
    Ok(y)
}

/// `DeformableConvolution2d` (ONNX `DeformConv`) from its definition: for output `(b, o, i,
/// j)`, the bias plus every input channel of `o`'s group and every tap, the weight times the
/// mask times the input interpolated at the tap's place moved by the offset (the four
/// neighbours' bilinear weights, those outside the plane dropped).
pub fn deformable_convolution2d(
    inputs: &[Tensor],
    d: &backplane_api::DeformableConvolution2dDescriptor,
) -> Result<Tensor, String> {
    let conv = &d.convolution;
    let (x, w, off) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
    let bias = conv.bias_enabled.then(|| input(inputs, 3)).transpose()?;
    let mask = d
        .mask_enabled
        .then(|| input(inputs, inputs.len() - 1))
        .transpose()?;
    let (&[n, ch, h, wd], &[m, cg, kh, kw], &[_, _, oh, ow]) =
        (x.shape.as_slice(), w.shape.as_slice(), off.shape.as_slice())
    else {
        return Err("DeformConv needs 4-D x, weights and offset".into());
    };
    let groups = conv.groups.max(1) as usize;
    let og = d.offset_groups as usize;
    let at = |t: &Tensor, idx: [usize; 4]| {
        let s = &t.shape;
        t.data[((idx[0] * s[1] + idx[1]) * s[2] + idx[2]) * s[3] + idx[3]]
    };
    let value = |b: usize, c: usize, y: f64, xx: f64| -> f64 {
        let (y0, x0) = (y.floor(), xx.floor());
        let mut v = 0.0;
        for (py, wy) in [(y0, 1.0 - (y - y0)), (y0 + 1.0, y - y0)] {
            for (px, wx) in [(x0, 1.0 - (xx - x0)), (x0 + 1.0, xx - x0)] {
                if py >= 0.0 && px >= 0.0 && py < h as f64 && px < wd as f64 {
                    v += wy * wx * at(x, [b, c, py as usize, px as usize]);
                }
            }
        }
        v
    };
    let mut out = Tensor::zeros(&[n, m, oh, ow]);
    for b in 0..n {
        for o in 0..m {
            let g = o / (m / groups);
            for i in 0..oh {
                for j in 0..ow {
                    let mut sum = bias.map_or(0.0, |t| t.data[o]);
                    for ic in 0..cg {
                        let c = g * cg + ic;
                        let group = c / (ch / og);
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let tap = (group * kh + ky) * kw + kx;
                                let y = (i * conv.stride_y as usize) as f64
                                    - f64::from(conv.padding.top)
                                    + (ky * conv.dilation_y as usize) as f64
                                    + at(off, [b, 2 * tap, i, j]);
                                let xx = (j * conv.stride_x as usize) as f64
                                    - f64::from(conv.padding.left)
                                    + (kx * conv.dilation_x as usize) as f64
                                    + at(off, [b, 2 * tap + 1, i, j]);
                                let scale = mask.map_or(1.0, |mk| at(mk, [b, tap, i, j]));
                                sum += at(w, [o, ic, ky, kx]) * scale * value(b, c, y, xx);
                            }
                        }
                    }
                    out.data[((b * m + o) * oh + i) * ow + j] = sum;
                }
            }
        }
    }
    Ok(out)
}
