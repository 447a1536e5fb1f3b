//! Quantised `Convolution2d` and `DepthwiseConvolution2d` (ONNX `QLinearConv`, or a QDQ
//! `Conv`): groups, strides, dilation and explicit padding, NCHW or NHWC activations,
//! weights `[out, in / groups, kh, kw]` per tensor or per output channel (axis 0).
//!
//! Each output is `acc = bias[o] + sum((x - x_offset) * (w - w_offset))` over the taps inside
//! the input, exactly in `i32`; a padding tap reads the input's zero point, so it adds 0.
//! Then the [`Requantizer`] of channel `o`.
//!
//! A dynamically quantised `Convolution2d` (Backend API 1.5: a Float32 input and output, ONNX
//! `DynamicQuantizeLinear` + `ConvInteger`) quantises its input per call
//! ([`DynamicQuantization::of`]), starts each accumulator at the integer bias
//! `saturate_i32(floor(bias[o] / m[o]))` (0 without a bias; `m[o] = s * w_scale[o]` in f32)
//! and gives `y = (acc as f32) * m[o]`, as the layers doc defines it.

use backplane_api::{
    BackendResult, Convolution2dDescriptor, DataLayout, DataType, LayerDescriptor, TensorView,
    TensorViewMut, Workload, WorkloadDesc,
};

use super::{QParams, Requantizer, bias_values, check_buffers, dynamic::DynamicQuantization};
use crate::workloads::{ExpectedShapes, expect_counts, invalid_layer, nchw_dims};

/// How a convolution reads its input and writes its output.
#[derive(Debug)]
enum Mode {
    /// A quantised input and output.
    Static {
        x_q: QParams,
        requantizer: Requantizer,
    },
    /// A Float32 input quantised per call and a Float32 output.
    Dynamic,
}

/// A quantised 2-D convolution (plain, grouped or depthwise).
#[derive(Debug)]
pub struct QConvolutionWorkload {
    d: Convolution2dDescriptor,
    /// `[n, c, h, w]` of the input.
    x: [usize; 4],
    /// `[n, c, h, w]` of the output.
    y: [usize; 4],
    /// `[kh, kw]`.
    kernel: [usize; 2],
    groups: usize,
    w_q: QParams,
    mode: Mode,
    shapes: ExpectedShapes,
}

fn dims4(desc: &WorkloadDesc<'_>, t: &backplane_api::TensorInfo) -> BackendResult<[usize; 4]> {
    match t.shape.as_slice() {
        &[a, b, c, d] => Ok([a as usize, b as usize, c as usize, d as usize]),
        s => Err(invalid_layer(
            desc,
            format_args!("{t} must have rank 4, got {s:?}"),
        )),
    }
}

/// Creates the workload of a quantised `Convolution2d` or `DepthwiseConvolution2d` layer (a
/// dynamically quantised one when its input is Float32).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let (d, depthwise) = match desc.layer {
        LayerDescriptor::Convolution2d(d) => (d, false),
        LayerDescriptor::DepthwiseConvolution2d(d) => (d, true),
        other => {
            return Err(invalid_layer(
                desc,
                format_args!("{} is not a convolution", other.kind()),
            ));
        }
    };
    expect_counts(
        desc.inputs.len(),
        desc.outputs.len(),
        if d.bias_enabled { 3 } else { 2 },
        1,
    )?;
    let x = nchw_dims(d.layout, dims4(desc, &desc.inputs[0])?);
    let w = dims4(desc, &desc.inputs[1])?;
    let y = nchw_dims(d.layout, dims4(desc, &desc.outputs[0])?);
    let groups = if depthwise { x[1] } else { d.groups as usize };
    let consistent = groups > 0
        && x[1].is_multiple_of(groups)
        && y[1].is_multiple_of(groups)
        && w[0] == y[1]
        && w[1] * groups == x[1]
        && y[0] == x[0]
        && desc
            .inputs
            .get(2)
            .is_none_or(|b| b.shape.as_slice() == [y[1] as u32])
        && d.stride_x > 0
        && d.stride_y > 0
        && d.dilation_x > 0
        && d.dilation_y > 0;
    if !consistent {
        return Err(invalid_layer(desc, "inconsistent convolution tensors"));
    }
    let w_q = QParams::of(desc, &desc.inputs[1])?;
    if w_q.axis.is_some_and(|a| a != 0) {
        return Err(invalid_layer(
            desc,
            "weights must be quantized along axis 0",
        ));
    }
    let dynamic = desc.inputs[0].data_type == DataType::Float32;
    let mode = if dynamic && !depthwise {
        for (what, t) in [("output", &desc.outputs[0])]
            .into_iter()
            .chain(desc.inputs.get(2).map(|b| ("bias", b)))
        {
            if t.data_type != DataType::Float32 {
                return Err(invalid_layer(
                    desc,
                    format_args!(
                        "a dynamically quantized convolution needs a Float32 {what}, got {t}"
                    ),
                ));
            }
        }
        Mode::Dynamic
    } else {
        let x_q = QParams::per_tensor(desc, &desc.inputs[0])?;
        let y_q = QParams::per_tensor(desc, &desc.outputs[0])?;
        Mode::Static {
            requantizer: Requantizer::new(&x_q, &w_q, &y_q, y[1]),
            x_q,
        }
    };
    Ok(Box::new(QConvolutionWorkload {
        d: d.clone(),
        x,
        y,
        kernel: [w[2], w[3]],
        groups,
        w_q,
        mode,
        shapes: ExpectedShapes::of(desc),
    }))
}

impl QConvolutionWorkload {
    /// Every output's accumulator, `init[o] + sum((x - x_offset) * (w - w_offset))` wrapping
    /// in `i32` (`x_value(i)` is element `i`'s `x - x_offset`), handed to `store(index, o, acc)`
    /// with its index in the output. Each weight tap is added to a whole output plane at once
    /// (the taps of one output in the order channel, row, column, as the definition sums
    /// them; the sum wraps, so any order gives the same result).
    fn accumulate(
        &self,
        x_value: impl Fn(usize) -> i32,
        wb: &[u8],
        init: &[i32],
        mut store: impl FnMut(usize, usize, i32),
    ) {
        let [n, c, h, w] = self.x;
        let [_, m, oh, ow] = self.y;
        let [kh, kw] = self.kernel;
        let (cg, mg) = (c / self.groups, m / self.groups);
        let (wt, w_off) = (self.w_q.qtype, self.w_q.offset);
        let nhwc = self.d.layout == DataLayout::Nhwc;
        // The input's values, NCHW.
        let xs: Vec<i32> = (0..n * c * h * w)
            .map(|i| {
                let (ni, ci, p) = (i / (c * h * w), (i / (h * w)) % c, i % (h * w));
                x_value(if nhwc { (ni * h * w + p) * c + ci } else { i })
            })
            .collect();
        let y_at = |ni: usize, o: usize, p: usize| {
            if nhwc {
                (ni * oh * ow + p) * m + o
            } else {
                (ni * m + o) * oh * ow + p
            }
        };
        let (sy, sx) = (self.d.stride_y as usize, self.d.stride_x as usize);
        let (dy, dx) = (self.d.dilation_y as usize, self.d.dilation_x as usize);
        let (pt, pl) = (self.d.padding.top as usize, self.d.padding.left as usize);
        // The outputs `lo..hi` whose tap at offset `k · d` (less the padding `p`) falls inside
        // an input of extent `len`, for stride `s`.
        let inside = |out: usize, len: usize, s: usize, shift: usize, p: usize| {
            let lo = p.saturating_sub(shift).div_ceil(s).min(out);
            let hi = if len + p > shift {
                ((len + p - shift - 1) / s + 1).min(out)
            } else {
                0
            };
            (lo, hi.max(lo))
        };
        let mut plane = vec![0i32; oh * ow];
        for ni in 0..n {
            for o in 0..m {
                let g = o / mg;
                plane.fill(init[o]);
                for ic in 0..cg {
                    let ci = g * cg + ic;
                    let image = &xs[(ni * c + ci) * h * w..][..h * w];
                    for ky in 0..kh {
                        let (y0, y1) = inside(oh, h, sy, ky * dy, pt);
                        for kx in 0..kw {
                            let wv = wt.read(wb[((o * cg + ic) * kh + ky) * kw + kx]) - w_off;
                            let (x0, x1) = inside(ow, w, sx, kx * dx, pl);
                            for oy in y0..y1 {
                                let iy = oy * sy + ky * dy - pt;
                                let row = &image[iy * w..][..w];
                                let out = &mut plane[oy * ow..][..ow];
                                for ox in x0..x1 {
                                    let xv = row[ox * sx + kx * dx - pl];
                                    out[ox] = out[ox].wrapping_add(xv.wrapping_mul(wv));
                                }
                            }
                        }
                    }
                }
                for (p, &acc) in plane.iter().enumerate() {
                    store(y_at(ni, o, p), o, acc);
                }
            }
        }
    }
}

impl Workload for QConvolutionWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        check_buffers(&self.shapes, inputs, outputs)?;
        let out = &mut outputs[0];
        let (xb, wb) = (inputs[0].data.as_slice(), inputs[1].data.as_slice());
        let m = self.y[1];
        let ybytes = out.data.as_mut_slice();
        match &self.mode {
            Mode::Static { x_q, requantizer } => {
                let bias = bias_values(inputs.get(2).map(|b| b.data.as_slice()), m);
                let (xt, x_off) = (x_q.qtype, x_q.offset);
                self.accumulate(
                    |i| xt.read(xb[i]) - x_off,
                    wb,
                    &bias,
                    |at, o, acc| {
                        ybytes[at] = requantizer.apply(acc, o);
                    },
                );
            }
            Mode::Dynamic => {
                let x: Vec<f32> = xb
                    .chunks_exact(4)
                    .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                let dq = DynamicQuantization::of(&x);
                let xq: Vec<i32> = x.iter().map(|&v| dq.quantize(v) - dq.zero_point).collect();
                let scales = &self.w_q.scales;
                let mult: Vec<f32> = (0..m)
                    .map(|o| dq.scale * scales[if scales.len() == 1 { 0 } else { o }])
                    .collect();
                // The bias in the accumulator: floor(b / m) in f32, saturated to i32 (`as`).
                let init: Vec<i32> = match inputs.get(2) {
                    Some(b) => b
                        .data
                        .as_slice()
                        .chunks_exact(4)
                        .zip(&mult)
                        .map(|(c, &mo)| {
                            (f32::from_ne_bytes([c[0], c[1], c[2], c[3]]) / mo).floor() as i32
                        })
                        .collect(),
                    None => vec![0; m],
                };
                self.accumulate(
                    |i| xq[i],
                    wb,
                    &init,
                    |at, o, acc| {
                        ybytes[at * 4..at * 4 + 4]
                            .copy_from_slice(&(acc as f32 * mult[o]).to_ne_bytes());
                    },
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{
        Convolution2dDescriptor, DataLayout, DataType, LayerDescriptor, Padding2d,
    };

    use super::super::test_support::{
        XorShift, byte, i32_bytes, qt, qt_axis, range, run_bytes, sat, value,
    };
    use crate::workloads::test_support::to_nhwc;

    /// One case: the oracle is a direct loop over a zero-point-padded copy of the input,
    /// written from the definition; outputs must be equal byte for byte.
    #[allow(
        clippy::too_many_arguments,
        reason = "a test case is all of a convolution's parameters"
    )]
    fn case(
        rng: &mut XorShift,
        x_dt: DataType,
        w_dt: DataType,
        [n, c, h, w]: [usize; 4],
        m: usize,
        [kh, kw]: [usize; 2],
        groups: usize,
        stride: usize,
        dilation: usize,
        pad: [usize; 4],
        per_axis: bool,
        depthwise: bool,
        layout: DataLayout,
        tie: bool,
    ) -> usize {
        let (xlo, xhi) = range(x_dt);
        let x_off = rng.int(xlo, xhi);
        let w_off = if w_dt == DataType::QSymmS8 {
            0
        } else {
            let (lo, hi) = range(w_dt);
            rng.int(lo, hi)
        };
        let y_off = rng.int(xlo, xhi);
        // With `tie`, m = (0.5 * 0.25) / 0.25 = 0.5 exactly: every odd accumulator is a tie.
        let (x_s, y_s) = if tie {
            (0.5f32, 0.25f32)
        } else {
            (0.02f32, 0.05f32 + rng.float(0.0, 0.5))
        };
        let w_scales: Vec<f32> = (0..m)
            .map(|_| if tie { 0.25 } else { rng.float(0.001, 0.02) })
            .collect();
        let cg = c / groups;
        // With `tie`, every value is within one step of its zero point, so accumulators
        // stay small and many are odd.
        let mut near = |dt: DataType, off: i32, count: usize| -> Vec<u8> {
            let (lo, hi) = range(dt);
            (0..count)
                .map(|_| byte(dt, (off + rng.int(-1, 1)).clamp(lo, hi)))
                .collect()
        };
        let (xb, wb) = if tie {
            (
                near(x_dt, x_off, n * c * h * w),
                near(w_dt, w_off, m * cg * kh * kw),
            )
        } else {
            (rng.bytes(n * c * h * w), rng.bytes(m * cg * kh * kw))
        };
        let bias_range = if tie { 3 } else { 20000 };
        let bias: Vec<i32> = (0..m).map(|_| rng.int(-bias_range, bias_range)).collect();
        let [pt, pl, pb, pr] = pad;
        let oh = (h + pt + pb - dilation * (kh - 1) - 1) / stride + 1;
        let ow = (w + pl + pr - dilation * (kw - 1) - 1) / stride + 1;
        // Oracle, NCHW.
        let (ph, pw) = (h + pt + pb, w + pl + pr);
        let mut xp = vec![x_off; n * c * ph * pw];
        for ni in 0..n {
            for ci in 0..c {
                for yi in 0..h {
                    for xi in 0..w {
                        xp[((ni * c + ci) * ph + yi + pt) * pw + xi + pl] =
                            value(x_dt, xb[((ni * c + ci) * h + yi) * w + xi]);
                    }
                }
            }
        }
        let (ylo, yhi) = range(x_dt);
        let mut want = vec![0i32; n * m * oh * ow];
        for ni in 0..n {
            for o in 0..m {
                let g = o / (m / groups);
                let ws = if per_axis { w_scales[o] } else { w_scales[0] };
                let mult = (x_s * ws) / y_s;
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut acc: i64 = i64::from(bias[o]);
                        for ic in 0..cg {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let xv = xp[((ni * c + g * cg + ic) * ph
                                        + oy * stride
                                        + ky * dilation)
                                        * pw
                                        + ox * stride
                                        + kx * dilation];
                                    let wv = value(w_dt, wb[((o * cg + ic) * kh + ky) * kw + kx]);
                                    acc += i64::from(xv - x_off) * i64::from(wv - w_off);
                                }
                            }
                        }
                        want[((ni * m + o) * oh + oy) * ow + ox] =
                            sat(acc as i32 as f32 * mult, y_off, ylo, yhi);
                    }
                }
            }
        }
        let nhwc = layout == DataLayout::Nhwc;
        let shape = |[a, b, c, d]: [usize; 4]| -> Vec<u32> {
            let s = if nhwc { [a, c, d, b] } else { [a, b, c, d] };
            s.iter().map(|&v| v as u32).collect()
        };
        let x_info = qt(&shape([n, c, h, w]), x_dt, x_s, x_off);
        let w_shape = [m as u32, cg as u32, kh as u32, kw as u32];
        let w_info = if per_axis {
            qt_axis(&w_shape, w_dt, 0, &w_scales, w_off)
        } else {
            qt(&w_shape, w_dt, w_scales[0], w_off)
        };
        let b_info = backplane_api::TensorInfo::new(&[m as u32], DataType::Signed32);
        let y_info = qt(&shape([n, m, oh, ow]), x_dt, y_s, y_off);
        let d = Convolution2dDescriptor {
            padding: Padding2d {
                left: pl as u32,
                right: pr as u32,
                top: pt as u32,
                bottom: pb as u32,
            },
            stride_x: stride as u32,
            stride_y: stride as u32,
            dilation_x: dilation as u32,
            dilation_y: dilation as u32,
            groups: groups as u32,
            bias_enabled: true,
            layout,
        };
        let layer = if depthwise {
            LayerDescriptor::DepthwiseConvolution2d(d)
        } else {
            LayerDescriptor::Convolution2d(d)
        };
        // The test's x as laid out.
        let xin = if nhwc {
            let f: Vec<f32> = xb.iter().map(|&b| f32::from(b)).collect();
            to_nhwc(&f, [n, c, h, w]).iter().map(|&v| v as u8).collect()
        } else {
            xb.clone()
        };
        let got = run_bytes(
            &layer,
            &[(x_info, xin), (w_info, wb), (b_info, i32_bytes(&bias))],
            &y_info,
        )
        .unwrap();
        let got: Vec<i32> = got.iter().map(|&b| value(x_dt, b)).collect();
        let got = if nhwc {
            // Back to NCHW for the comparison.
            let mut back = vec![0; got.len()];
            for ni in 0..n {
                for yi in 0..oh {
                    for xi in 0..ow {
                        for o in 0..m {
                            back[((ni * m + o) * oh + yi) * ow + xi] =
                                got[((ni * oh + yi) * ow + xi) * m + o];
                        }
                    }
                }
            }
            back
        } else {
            got
        };
        assert_eq!(got, want, "{x_dt} x {w_dt}, groups {groups}, {layout:?}");
        got.iter().filter(|&&v| v == ylo || v == yhi).count()
    }

    #[test]
    fn quantized_convolutions_match_naive_oracle() {
        let mut rng = XorShift(0x1234_5678_9ABC_DEF1);
        let types = [
            (DataType::QAsymmU8, DataType::QAsymmU8),
            (DataType::QAsymmU8, DataType::QSymmS8),
            (DataType::QAsymmS8, DataType::QSymmS8),
            (DataType::QAsymmS8, DataType::QAsymmS8),
        ];
        let mut saturated = 0;
        for (i, &(x_dt, w_dt)) in types.iter().enumerate() {
            let per_axis = i % 2 == 1;
            let (nchw, nhwc) = (DataLayout::Nchw, DataLayout::Nhwc);
            saturated += case(
                &mut rng,
                x_dt,
                w_dt,
                [2, 4, 6, 5],
                6,
                [3, 3],
                2,
                1,
                1,
                [1, 1, 1, 0],
                per_axis,
                false,
                nchw,
                false,
            );
            saturated += case(
                &mut rng,
                x_dt,
                w_dt,
                [1, 3, 7, 7],
                4,
                [3, 2],
                1,
                2,
                2,
                [2, 0, 1, 1],
                !per_axis,
                false,
                nhwc,
                false,
            );
            saturated += case(
                &mut rng,
                x_dt,
                w_dt,
                [1, 4, 5, 5],
                8,
                [3, 3],
                4,
                1,
                1,
                [1, 1, 1, 1],
                per_axis,
                true,
                nchw,
                false,
            );
            case(
                &mut rng,
                x_dt,
                w_dt,
                [1, 2, 3, 3],
                2,
                [1, 1],
                1,
                1,
                1,
                [0, 0, 0, 0],
                false,
                false,
                nchw,
                true,
            );
        }
        assert!(saturated > 0, "no output saturated");
    }
}
