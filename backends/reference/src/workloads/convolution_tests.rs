//! Tests of `convolution.rs`.

use backplane_api::Padding2d;

use super::*;
use crate::workloads::test_support::{Lcg, assert_close, execute, f32t, make, run, to_nhwc, u32s};

/// Relative tolerance of the comparisons with the oracle.
const REL_TOL: f32 = 1e-5;

/// One convolution configuration, NCHW sizes.
#[derive(Clone, Copy)]
struct Conv {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    m: usize,
    kh: usize,
    kw: usize,
    groups: usize,
    stride: (usize, usize),
    dilation: (usize, usize),
    /// Top, bottom, left, right.
    pads: (usize, usize, usize, usize),
    bias: bool,
}

impl Conv {
    fn out_hw(&self) -> (usize, usize) {
        let (t, b, l, r) = self.pads;
        let oh = (self.h + t + b - self.dilation.0 * (self.kh - 1) - 1) / self.stride.0 + 1;
        let ow = (self.w + l + r - self.dilation.1 * (self.kw - 1) - 1) / self.stride.1 + 1;
        (oh, ow)
    }

    fn descriptor(&self, layout: DataLayout) -> Convolution2dDescriptor {
        let (top, bottom, left, right) = self.pads;
        let p = |v: usize| v as u32;
        Convolution2dDescriptor {
            padding: Padding2d {
                left: p(left),
                right: p(right),
                top: p(top),
                bottom: p(bottom),
            },
            stride_y: p(self.stride.0),
            stride_x: p(self.stride.1),
            dilation_y: p(self.dilation.0),
            dilation_x: p(self.dilation.1),
            groups: p(self.groups),
            bias_enabled: self.bias,
            layout,
        }
    }
}

/// ONNX `Conv` from its definition, NCHW, accumulated in f64:
/// `y[n, m, oy, ox] = B[m] + sum_{ic, ky, kx} xpad[n, g(m) * C/G + ic, oy*sy + ky*dy, ox*sx + kx*dx] * W[m, ic, ky, kx]`
/// where `xpad` is `x` surrounded by zeros and `g(m) = m / (M / G)`.
fn oracle(p: &Conv, x: &[f32], w: &[f32], b: Option<&[f32]>) -> Vec<f32> {
    let (oh, ow) = p.out_hw();
    let (cg, mg) = (p.c / p.groups, p.m / p.groups);
    let (pt, pl) = (p.pads.0, p.pads.2);
    let mut y = Vec::new();
    for n in 0..p.n {
        for m in 0..p.m {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut sum = b.map_or(0.0, |b| f64::from(b[m]));
                    for ic in 0..cg {
                        let c = (m / mg) * cg + ic;
                        for ky in 0..p.kh {
                            for kx in 0..p.kw {
                                let py = oy * p.stride.0 + ky * p.dilation.0;
                                let px = ox * p.stride.1 + kx * p.dilation.1;
                                if py < pt || py >= pt + p.h || px < pl || px >= pl + p.w {
                                    continue; // a zero of the padding
                                }
                                let xv = x[((n * p.c + c) * p.h + py - pt) * p.w + px - pl];
                                let wv = w[((m * cg + ic) * p.kh + ky) * p.kw + kx];
                                sum += f64::from(xv) * f64::from(wv);
                            }
                        }
                    }
                    y.push(sum as f32);
                }
            }
        }
    }
    y
}

/// Runs `p` in `layout` through the factory on random data and compares with the oracle.
/// Returns the NCHW-ordered result.
fn check(p: &Conv, layout: DataLayout, depthwise: bool, seed: u64) -> Vec<f32> {
    let mut rng = Lcg(seed);
    let x = rng.vec(p.n * p.c * p.h * p.w);
    let w = rng.vec(p.m * (p.c / p.groups) * p.kh * p.kw);
    let b = rng.vec(p.m);
    let bias = p.bias.then_some(b.as_slice());
    let want = oracle(p, &x, &w, bias);
    let (oh, ow) = p.out_hw();
    let d = p.descriptor(layout);
    let layer = if depthwise {
        LayerDescriptor::DepthwiseConvolution2d(d)
    } else {
        LayerDescriptor::Convolution2d(d)
    };
    let w_shape = u32s(&[p.m, p.c / p.groups, p.kh, p.kw]);
    let b_shape = u32s(&[p.m]);
    let got = match layout {
        DataLayout::Nchw => {
            let x_shape = u32s(&[p.n, p.c, p.h, p.w]);
            let mut ins: Vec<(&[u32], &[f32])> = vec![(&x_shape, &x), (&w_shape, &w)];
            if p.bias {
                ins.push((&b_shape, &b));
            }
            run(&layer, &ins, &u32s(&[p.n, p.m, oh, ow]))
        }
        DataLayout::Nhwc => {
            let x_shape = u32s(&[p.n, p.h, p.w, p.c]);
            let xt = to_nhwc(&x, [p.n, p.c, p.h, p.w]);
            let mut ins: Vec<(&[u32], &[f32])> = vec![(&x_shape, &xt), (&w_shape, &w)];
            if p.bias {
                ins.push((&b_shape, &b));
            }
            let got = run(&layer, &ins, &u32s(&[p.n, oh, ow, p.m]));
            assert_close(&got, &to_nhwc(&want, [p.n, p.m, oh, ow]), REL_TOL, "nhwc");
            return got;
        }
    };
    assert_close(&got, &want, REL_TOL, "nchw");
    got
}

const GROUPED: Conv = Conv {
    n: 2,
    c: 4,
    h: 9,
    w: 8,
    m: 6,
    kh: 3,
    kw: 3,
    groups: 2,
    stride: (2, 2),
    dilation: (2, 2),
    pads: (1, 2, 2, 1),
    bias: true,
};

/// The oracle itself on a hand-computed case: a 2x2 kernel of ones over 1..9.
#[test]
fn hand_computed_box_sum() {
    let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
    let layer = LayerDescriptor::Convolution2d(Convolution2dDescriptor::default());
    let got = run(
        &layer,
        &[(&[1, 1, 3, 3], &x), (&[1, 1, 2, 2], &[1.0; 4])],
        &[1, 1, 2, 2],
    );
    assert_eq!(got, [12.0, 16.0, 24.0, 28.0]);
    let p = Conv {
        n: 1,
        c: 1,
        h: 3,
        w: 3,
        m: 1,
        kh: 2,
        kw: 2,
        groups: 1,
        stride: (1, 1),
        dilation: (1, 1),
        pads: (0, 0, 0, 0),
        bias: false,
    };
    assert_eq!(oracle(&p, &x, &[1.0; 4], None), [12.0, 16.0, 24.0, 28.0]);
}

/// Asymmetric padding, stride 2, dilation 2, 2 groups and a bias, NCHW.
#[test]
fn grouped_strided_dilated_padded_with_bias() {
    check(&GROUPED, DataLayout::Nchw, false, 1);
    check(
        &Conv {
            bias: false,
            stride: (1, 3),
            dilation: (3, 1),
            ..GROUPED
        },
        DataLayout::Nchw,
        false,
        2,
    );
}

/// A 1x1 convolution without bias: a per-pixel matrix multiply.
#[test]
fn one_by_one_without_bias() {
    let p = Conv {
        n: 1,
        c: 5,
        h: 4,
        w: 3,
        m: 3,
        kh: 1,
        kw: 1,
        groups: 1,
        stride: (1, 1),
        dilation: (1, 1),
        pads: (0, 0, 0, 0),
        bias: false,
    };
    check(&p, DataLayout::Nchw, false, 3);
    check(&p, DataLayout::Nhwc, false, 3);
}

/// NHWC on the transposed input gives the transposed NCHW output.
#[test]
fn nhwc_matches_transposed_nchw() {
    let nchw = check(&GROUPED, DataLayout::Nchw, false, 4);
    let nhwc = check(&GROUPED, DataLayout::Nhwc, false, 4);
    let (oh, ow) = GROUPED.out_hw();
    assert_close(
        &nhwc,
        &to_nhwc(&nchw, [GROUPED.n, GROUPED.m, oh, ow]),
        REL_TOL,
        "nhwc vs transposed nchw",
    );
}

/// Padding wider than the kernel: whole output rows and columns see only zeros (= bias).
#[test]
fn padding_wider_than_the_kernel() {
    let p = Conv {
        n: 1,
        c: 3,
        h: 5,
        w: 6,
        m: 2,
        kh: 2,
        kw: 3,
        groups: 1,
        stride: (1, 3),
        dilation: (1, 1),
        pads: (3, 3, 2, 4),
        bias: true,
    };
    let got = check(&p, DataLayout::Nchw, false, 5);
    // Output row 0 covers padded rows 0..2, both padding: every element is the bias.
    let (_, ow) = p.out_hw();
    let b = Lcg(5).vec(p.n * p.c * p.h * p.w + p.m * p.c * p.kh * p.kw + p.m);
    let bias = &b[b.len() - p.m..];
    assert!(got[..ow].iter().all(|&v| v == bias[0]));
    check(&p, DataLayout::Nhwc, false, 5);
}

/// Depthwise with multiplier 2: output channel `o` reads input channel `o / 2`.
#[test]
fn depthwise_multiplier_two_both_layouts() {
    let p = Conv {
        n: 2,
        c: 3,
        h: 7,
        w: 9,
        m: 6,
        kh: 3,
        kw: 3,
        groups: 3,
        stride: (1, 2),
        dilation: (2, 1),
        pads: (1, 1, 1, 2),
        bias: true,
    };
    check(&p, DataLayout::Nchw, true, 6);
    check(&p, DataLayout::Nhwc, true, 6);
    check(
        &Conv {
            m: 3,
            bias: false,
            ..p
        },
        DataLayout::Nhwc,
        true,
        7,
    );

    // An oracle written in depthwise terms agrees with the workload too.
    let mut rng = Lcg(8);
    let (x, w, b) = (
        rng.vec(p.n * p.c * p.h * p.w),
        rng.vec(p.m * p.kh * p.kw),
        rng.vec(p.m),
    );
    let (oh, ow) = p.out_hw();
    let mut want = Vec::new();
    for n in 0..p.n {
        for o in 0..p.m {
            let c = o / 2;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut s = f64::from(b[o]);
                    for ky in 0..p.kh {
                        for kx in 0..p.kw {
                            let iy = (oy * p.stride.0 + ky * p.dilation.0) as i64 - p.pads.0 as i64;
                            let ix = (ox * p.stride.1 + kx * p.dilation.1) as i64 - p.pads.2 as i64;
                            if (0..p.h as i64).contains(&iy) && (0..p.w as i64).contains(&ix) {
                                let xv = x[((n * p.c + c) * p.h + iy as usize) * p.w + ix as usize];
                                s += f64::from(xv) * f64::from(w[(o * p.kh + ky) * p.kw + kx]);
                            }
                        }
                    }
                    want.push(s as f32);
                }
            }
        }
    }
    let layer = LayerDescriptor::DepthwiseConvolution2d(p.descriptor(DataLayout::Nchw));
    let got = run(
        &layer,
        &[(&[2, 3, 7, 9], &x), (&[6, 1, 3, 3], &w), (&[6], &b)],
        &u32s(&[p.n, p.m, oh, ow]),
    );
    assert_close(&got, &want, REL_TOL, "depthwise oracle");
}

/// Enough output channels and columns for the NCHW path's full blocks and tiles
/// ([`CHANNEL_BLOCK`] channels, [`PIXEL_BLOCK`] pixels) and their remainders, at stride 1
/// and at a stride and dilation, grouped and not.
#[test]
fn full_channel_blocks_and_pixel_tiles() {
    let p = Conv {
        n: 2,
        c: 5,
        h: 11,
        w: 21,
        m: 2 * CHANNEL_BLOCK + 2,
        kh: 3,
        kw: 3,
        groups: 1,
        stride: (1, 1),
        dilation: (1, 1),
        pads: (1, 1, 1, 2),
        bias: true,
    };
    assert!(p.out_hw().1 > 2 * PIXEL_BLOCK);
    check(&p, DataLayout::Nchw, false, 9);
    let strided = Conv {
        c: 4,
        w: 40,
        m: 2 * (CHANNEL_BLOCK + 1),
        groups: 2,
        stride: (2, 2),
        dilation: (1, 2),
        pads: (0, 2, 3, 0),
        bias: false,
        ..p
    };
    assert!(strided.out_hw().1 > PIXEL_BLOCK);
    check(&strided, DataLayout::Nchw, false, 10);
}

/// Wrong tensor counts or shapes at execution are errors, not panics.
#[test]
fn rejects_mismatched_tensors() {
    let layer = LayerDescriptor::Convolution2d(Convolution2dDescriptor::default());
    let (x_info, w_info, y_info) = (
        f32t(&[1, 1, 3, 3]),
        f32t(&[1, 1, 2, 2]),
        f32t(&[1, 1, 2, 2]),
    );
    let workload = make(
        &layer,
        &[x_info.clone(), w_info.clone()],
        std::slice::from_ref(&y_info),
    )
    .unwrap();
    let (x, w) = ([0f32; 9], [0f32; 4]);
    let mut y = [0f32; 4];
    let (x_view, w_view) = ((&x_info, &x[..]), (&w_info, &w[..]));
    assert!(execute(&*workload, &[x_view], &y_info, &mut y).is_err());
    let other = f32t(&[1, 1, 9, 1]);
    let odd = (&other, &x[..]);
    assert!(execute(&*workload, &[odd, w_view], &y_info, &mut y).is_err());
    assert!(execute(&*workload, &[x_view, w_view], &y_info, &mut y).is_ok());
    // A wrong output shape is refused by layer support, through the factory.
    assert!(make(&layer, &[x_info, w_info], &[f32t(&[1, 1, 3, 3])]).is_err());
}

/// Float64: a grouped, strided, padded convolution of small integers (exact in both the
/// oracle and the kernel), and values an f32 cannot hold (1e8 + k), which a 1x1 kernel of
/// ones must give back exactly.
#[test]
fn float64_in_its_own_precision() {
    use crate::workloads::test_support::{Bytes, try_run_typed};
    use backplane_api::DataType;
    let p = Conv {
        n: 1,
        c: 4,
        h: 5,
        w: 6,
        m: 4,
        kh: 3,
        kw: 2,
        groups: 2,
        stride: (2, 1),
        dilation: (1, 2),
        pads: (1, 0, 1, 1),
        bias: true,
    };
    let mut rng = Lcg(11);
    let ints = |n: usize, rng: &mut Lcg| -> Vec<f32> {
        (0..n).map(|_| rng.next_in(-8.0, 8.0).round()).collect()
    };
    let x = ints(p.n * p.c * p.h * p.w, &mut rng);
    let w = ints(p.m * (p.c / p.groups) * p.kh * p.kw, &mut rng);
    let b = ints(p.m, &mut rng);
    let want: Vec<f64> = oracle(&p, &x, &w, Some(&b))
        .into_iter()
        .map(f64::from)
        .collect();
    let wide = |v: &[f32]| Bytes::of(&v.iter().map(|&v| f64::from(v)).collect::<Vec<f64>>());
    let d = LayerDescriptor::Convolution2d(p.descriptor(DataLayout::Nchw));
    let t = |s: &[usize]| backplane_api::TensorInfo::new(&u32s(s), DataType::Float64);
    let (oh, ow) = p.out_hw();
    let got = try_run_typed(
        &d,
        &[
            (t(&[p.n, p.c, p.h, p.w]), wide(&x)),
            (t(&[p.m, p.c / p.groups, p.kh, p.kw]), wide(&w)),
            (t(&[p.m]), wide(&b)),
        ],
        &t(&[p.n, p.m, oh, ow]),
    )
    .unwrap()
    .to_vec::<f64>();
    assert_eq!(got, want);

    let big: Vec<f64> = (0..6).map(|k| 1e8 + f64::from(k)).collect();
    let one = LayerDescriptor::Convolution2d(
        Conv {
            n: 1,
            c: 1,
            h: 2,
            w: 3,
            m: 1,
            kh: 1,
            kw: 1,
            groups: 1,
            stride: (1, 1),
            dilation: (1, 1),
            pads: (0, 0, 0, 0),
            bias: false,
        }
        .descriptor(DataLayout::Nchw),
    );
    let got = try_run_typed(
        &one,
        &[
            (t(&[1, 1, 2, 3]), Bytes::of(&big)),
            (t(&[1, 1, 1, 1]), Bytes::of(&[1.0f64])),
        ],
        &t(&[1, 1, 2, 3]),
    )
    .unwrap()
    .to_vec::<f64>();
    assert_eq!(got, big);
}
