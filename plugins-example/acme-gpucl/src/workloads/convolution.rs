//! Convolution2d and DepthwiseConvolution2d (NCHW; groups, strides, dilations, padding, bias),
//! one work item per output element (`conv2d` in `kernels/convolution.cl`), with an optional
//! fused activation. A depthwise convolution is the grouped one with one group per input
//! channel: its weights `[C * multiplier, 1, kh, kw]` are exactly those of that grouping.

use std::sync::Arc;

use backplane_api::{ActivationDescriptor, BackendResult, LayerDescriptor, Workload, WorkloadDesc};

use backplane_backend_kit::geometry::Geometry2d;

use super::{Builder, KArg, Src, count, elementwise::activation_args, invalid_layer};
use crate::device::Device;

/// `conv2d`'s parameter table for a convolution of geometry `g`: N C H W M OH OW KH KW sy sx
/// dy dx pt pl groups.
fn table(g: &Geometry2d) -> [usize; 16] {
    [
        g.batch,
        g.channels,
        g.height,
        g.width,
        g.out_channels,
        g.out_height,
        g.out_width,
        g.kernel_h,
        g.kernel_w,
        g.stride_y,
        g.stride_x,
        g.dilation_y,
        g.dilation_x,
        g.pad_top,
        g.pad_left,
        g.groups,
    ]
}

/// Adds the `conv2d` launch: `x` by `w` (+ `bias`), then `activation`, into output 0.
pub(crate) fn add_launch(
    b: &mut Builder<'_>,
    geometry: &Geometry2d,
    [x, w]: [Src; 2],
    bias: Option<Src>,
    activation: Option<&ActivationDescriptor>,
) -> BackendResult<()> {
    let desc = b.desc();
    let n = count(&desc.outputs[0]).map_err(|e| invalid_layer(desc, e))?;
    let p = b.upload_i32(&table(geometry))?;
    let [act, a, c] = activation_args(activation);
    b.kernel(
        "conv2d",
        vec![
            KArg::Buf(x),
            KArg::Buf(w),
            // Not read without a bias; any buffer fills the parameter.
            KArg::Buf(bias.unwrap_or(w)),
            KArg::Buf(Src::Output(0)),
            KArg::Buf(p),
            KArg::Int(n),
            KArg::Int(i32::from(bias.is_some())),
            act,
            a,
            c,
        ],
        n as usize,
    )
}

/// The workload of a Convolution2d or DepthwiseConvolution2d layer.
pub(crate) fn create(
    device: &Arc<Device>,
    desc: &WorkloadDesc<'_>,
) -> BackendResult<Box<dyn Workload>> {
    let (LayerDescriptor::Convolution2d(d) | LayerDescriptor::DepthwiseConvolution2d(d)) =
        desc.layer
    else {
        return Err(invalid_layer(desc, "not a convolution"));
    };
    let depthwise = matches!(desc.layer, LayerDescriptor::DepthwiseConvolution2d(_));
    let geometry = Geometry2d::convolution(
        d,
        depthwise,
        &desc.inputs[0],
        &desc.inputs[1],
        &desc.outputs[0],
    )
    .map_err(|e| invalid_layer(desc, e))?;
    let mut b = Builder::new(device, desc);
    let x = b.input(0)?;
    let w = b.input(1)?;
    let bias = if d.bias_enabled {
        Some(b.input(2)?)
    } else {
        None
    };
    add_launch(&mut b, &geometry, [x, w], bias, None)?;
    Ok(b.build())
}

/// The workload of a fused convolution chain (a GpuCl `PreCompiled` layer, already checked
/// against its tensors): a batch normalisation is folded into the weights and bias here,
/// `w' = w · k`, `b' = (b - mean) · k + bn_bias` with `k = scale / sqrt(variance + epsilon)`
/// per output channel; the activation runs in the kernel.
pub(crate) fn create_fused(
    device: &Arc<Device>,
    desc: &WorkloadDesc<'_>,
    op: &crate::fused_op::FusedOp,
) -> BackendResult<Box<dyn Workload>> {
    use super::elementwise::constant_f32;
    let slot = |s: u32| s as usize;
    let w_info = &desc.inputs[slot(op.weights)];
    let geometry = Geometry2d::convolution(
        &op.conv,
        op.depthwise,
        &desc.inputs[0],
        w_info,
        &desc.outputs[0],
    )
    .map_err(|e| invalid_layer(desc, e))?;
    let mut b = Builder::new(device, desc);
    let x = b.input(0)?;
    let (w, bias) = match &op.batch_norm {
        None => {
            let w = b.input(slot(op.weights))?;
            let bias = op.bias.map(|s| b.input(slot(s))).transpose()?;
            (w, bias)
        }
        Some(bn) => {
            let mut weights = constant_f32(desc, slot(op.weights))?;
            let channels = w_info.shape[0] as usize;
            let mut bias = match op.bias {
                Some(s) => constant_f32(desc, slot(s))?,
                None => vec![0.0; channels],
            };
            let [scale, shift, mean, var] = bn.slots.map(|s| constant_f32(desc, slot(s)));
            let (scale, shift, mean, var) = (scale?, shift?, mean?, var?);
            let per_channel = weights.len() / channels.max(1);
            for m in 0..channels {
                let k = scale[m] / (var[m] + bn.epsilon).sqrt();
                for v in &mut weights[m * per_channel..(m + 1) * per_channel] {
                    *v *= k;
                }
                bias[m] = (bias[m] - mean[m]) * k + shift[m];
            }
            (b.upload_f32(&weights)?, Some(b.upload_f32(&bias)?))
        }
    };
    add_launch(&mut b, &geometry, [x, w], bias, op.activation.as_ref())?;
    Ok(b.build())
}

#[cfg(test)]
mod tests {
    use backplane_api::{Convolution2dDescriptor, Padding2d};

    use super::*;
    use crate::workloads::test_support::{
        ConstSlots, Lcg, assert_close, assert_same_bits, cst, numel, run_with, run1, var,
    };

    /// Naive NCHW convolution in f64, straight from the definition.
    #[allow(
        clippy::too_many_arguments,
        reason = "the oracle takes the whole geometry"
    )]
    fn oracle(
        d: &Convolution2dDescriptor,
        groups: usize,
        x: &[f32],
        [n, c, h, w]: [usize; 4],
        wt: &[f32],
        [m, _, kh, kw]: [usize; 4],
        bias: Option<&[f32]>,
        [oh, ow]: [usize; 2],
    ) -> Vec<f64> {
        let (cpg, mpg) = (c / groups, m / groups);
        let mut out = Vec::new();
        for b in 0..n {
            for o in 0..m {
                let g = o / mpg;
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut s = bias.map_or(0.0, |bb| f64::from(bb[o]));
                        for ci in 0..cpg {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let iy = (oy * d.stride_y as usize + ky * d.dilation_y as usize)
                                        as i64
                                        - i64::from(d.padding.top);
                                    let ix = (ox * d.stride_x as usize + kx * d.dilation_x as usize)
                                        as i64
                                        - i64::from(d.padding.left);
                                    if iy < 0 || ix < 0 || iy >= h as i64 || ix >= w as i64 {
                                        continue;
                                    }
                                    let xv = x[((b * c + g * cpg + ci) * h + iy as usize) * w
                                        + ix as usize];
                                    let wv = wt[((o * cpg + ci) * kh + ky) * kw + kx];
                                    s += f64::from(xv) * f64::from(wv);
                                }
                            }
                        }
                        out.push(s);
                    }
                }
            }
        }
        out
    }

    fn conv(depthwise: bool, d: Convolution2dDescriptor, x: [u32; 4], w: [u32; 4], seed: u64) {
        let mut g = Lcg(seed);
        let (xv, wv, bv) = (g.vec(numel(&x)), g.vec(numel(&w)), g.vec(w[0] as usize));
        let layer = if depthwise {
            LayerDescriptor::DepthwiseConvolution2d(d.clone())
        } else {
            LayerDescriptor::Convolution2d(d.clone())
        };
        let mut ins = vec![var(&x, xv.clone()), cst(&w, wv.clone())];
        if d.bias_enabled {
            ins.push(cst(&[w[0]], bv.clone()));
        }
        let infos: Vec<_> = ins.iter().map(|i| i.info.clone()).collect();
        let out = backplane_api::shapes::output_shapes(&layer, &infos)
            .unwrap()
            .swap_remove(0);
        let got = run1(&layer, &ins, &out);
        let u = |s: [u32; 4]| s.map(|v| v as usize);
        let groups = if depthwise {
            x[1] as usize
        } else {
            d.groups as usize
        };
        let want = oracle(
            &d,
            groups,
            &xv,
            u(x),
            &wv,
            u(w),
            d.bias_enabled.then_some(&bv[..]),
            [out[2] as usize, out[3] as usize],
        );
        assert_close(&got, &want, &format!("{layer:?} x {x:?} w {w:?}"));
    }

    #[test]
    fn convolutions_with_groups_strides_dilation_padding() {
        let pad = |left, right, top, bottom| Padding2d {
            left,
            right,
            top,
            bottom,
        };
        let d = |padding, sy, sx, dy, dx, groups, bias_enabled| Convolution2dDescriptor {
            padding,
            stride_y: sy,
            stride_x: sx,
            dilation_y: dy,
            dilation_x: dx,
            groups,
            bias_enabled,
            ..Default::default()
        };
        conv(
            false,
            d(pad(0, 0, 0, 0), 1, 1, 1, 1, 1, false),
            [1, 3, 7, 9],
            [5, 3, 3, 3],
            20,
        );
        conv(
            false,
            d(pad(1, 2, 2, 1), 2, 3, 1, 1, 1, true),
            [2, 3, 11, 13],
            [4, 3, 3, 2],
            21,
        );
        conv(
            false,
            d(pad(1, 1, 1, 1), 1, 1, 2, 3, 1, true),
            [1, 2, 9, 10],
            [3, 2, 3, 3],
            22,
        );
        conv(
            false,
            d(pad(1, 0, 0, 1), 1, 2, 1, 1, 3, true),
            [1, 6, 8, 7],
            [9, 2, 3, 3],
            23,
        );
        conv(
            false,
            d(pad(0, 0, 0, 0), 1, 1, 1, 1, 1, true),
            [3, 17, 5, 5],
            [7, 17, 1, 1],
            24,
        );
        // Depthwise, multiplier 1 and 2, with stride, padding and dilation.
        conv(
            true,
            d(pad(1, 1, 1, 1), 2, 2, 1, 1, 1, true),
            [1, 5, 9, 11],
            [5, 1, 3, 3],
            25,
        );
        conv(
            true,
            d(pad(2, 2, 2, 2), 1, 1, 2, 2, 1, false),
            [2, 3, 7, 6],
            [6, 1, 3, 3],
            26,
        );
    }

    /// A 1.3 host gives the weight and bias slots the buffer `NO_BUFFER`; an older one gave
    /// buffers holding them, or left them out: the same result every way.
    #[test]
    fn weights_and_bias_without_buffers() {
        let d = Convolution2dDescriptor {
            padding: Padding2d {
                left: 1,
                right: 1,
                top: 1,
                bottom: 1,
            },
            stride_y: 1,
            stride_x: 2,
            dilation_y: 1,
            dilation_x: 1,
            groups: 1,
            bias_enabled: true,
            ..Default::default()
        };
        let (x, w) = ([1u32, 3, 6, 7], [4u32, 3, 3, 3]);
        let mut g = Lcg(27);
        let (xv, wv, bv) = (g.vec(numel(&x)), g.vec(numel(&w)), g.vec(4));
        let layer = LayerDescriptor::Convolution2d(d.clone());
        let ins = [
            var(&x, xv.clone()),
            cst(&w, wv.clone()),
            cst(&[4], bv.clone()),
        ];
        let out = [1u32, 4, 6, 4];
        let got = |slots| {
            run_with(&layer, &ins, &[&out], slots)
                .unwrap_or_else(|e| panic!("{slots:?}: {e}"))
                .swap_remove(0)
        };
        let no_buffer = got(ConstSlots::NoBuffer);
        let u = |s: [u32; 4]| s.map(|v| v as usize);
        let want = oracle(&d, 1, &xv, u(x), &wv, u(w), Some(&bv), [6, 4]);
        assert_close(&no_buffer, &want, "NO_BUFFER in the weight and bias slots");
        assert_same_bits(&no_buffer, &got(ConstSlots::Omitted), "constants left out");
        assert_same_bits(&no_buffer, &got(ConstSlots::Buffer), "constants in buffers");
    }
}
