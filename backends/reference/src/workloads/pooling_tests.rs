//! Tests of `pooling.rs`.

use backplane_api::{OutputRounding, Padding2d, Pooling2dDescriptor};

use super::*;
use crate::workloads::test_support::{Lcg, assert_close, execute, f32t, make, run, to_nhwc, u32s};

/// Relative tolerance of the comparisons with the oracle.
const REL_TOL: f32 = 1e-5;

/// One pooling configuration.
#[derive(Clone, Copy)]
struct Pool {
    max: bool,
    kernel: (usize, usize),
    stride: (usize, usize),
    /// Top, bottom, left, right.
    pads: (usize, usize, usize, usize),
    ceil: bool,
    count_include_pad: bool,
    /// Vertical, horizontal (`(1, 1)`: a plain `Pooling2d`).
    dilation: (usize, usize),
}

impl Pool {
    fn descriptor(&self, layout: DataLayout) -> LayerDescriptor {
        let (top, bottom, left, right) = self.pads;
        let p = |v: usize| v as u32;
        let pooling = Pooling2dDescriptor {
            pool_type: if self.max {
                PoolingType::Max
            } else {
                PoolingType::Average
            },
            padding: Padding2d {
                left: p(left),
                right: p(right),
                top: p(top),
                bottom: p(bottom),
            },
            pool_width: p(self.kernel.1),
            pool_height: p(self.kernel.0),
            stride_x: p(self.stride.1),
            stride_y: p(self.stride.0),
            rounding: if self.ceil {
                OutputRounding::Ceiling
            } else {
                OutputRounding::Floor
            },
            count_include_pad: self.count_include_pad,
            layout,
        };
        if self.dilation == (1, 1) {
            return LayerDescriptor::Pooling2d(pooling);
        }
        LayerDescriptor::DilatedPooling2d(backplane_api::DilatedPooling2dDescriptor {
            pooling,
            dilation_y: p(self.dilation.0),
            dilation_x: p(self.dilation.1),
        })
    }
}

/// ONNX output length: `floor` or `ceil` of `(in + pads - k) / s + 1`, and in ceil mode a
/// last window that would start in the end padding is dropped.
fn onnx_len(input: usize, pb: usize, pe: usize, k: usize, s: usize, ceil: bool) -> usize {
    let span = input + pb + pe - k;
    let mut out = if ceil {
        span.div_ceil(s) + 1
    } else {
        span / s + 1
    };
    if ceil && (out - 1) * s >= input + pb {
        out -= 1;
    }
    out
}

/// ONNX `MaxPool`/`AveragePool` the way the ONNX reference implementation evaluates them:
/// walk the window cells in padded coordinates; cells past the padded input (ceil mode)
/// are dropped, padding cells never enter a maximum and enter the divisor of an average
/// only with `count_include_pad`. Returns the output `(oh, ow)` and NCHW values.
fn oracle(p: &Pool, x: &[f32], [n, c, h, w]: [usize; 4]) -> ((usize, usize), Vec<f32>) {
    let (pt, pb, pl, pr) = p.pads;
    let (dy, dx) = p.dilation;
    let extent = |k: usize, d: usize| (k - 1) * d + 1;
    let oh = onnx_len(h, pt, pb, extent(p.kernel.0, dy), p.stride.0, p.ceil);
    let ow = onnx_len(w, pl, pr, extent(p.kernel.1, dx), p.stride.1, p.ceil);
    let mut y = Vec::new();
    for plane in 0..n * c {
        for oy in 0..oh {
            for ox in 0..ow {
                let (mut real, mut pad_cells) = (Vec::new(), 0usize);
                for i in 0..p.kernel.0 {
                    for j in 0..p.kernel.1 {
                        let (py, px) = (oy * p.stride.0 + i * dy, ox * p.stride.1 + j * dx);
                        if py >= pt + h + pb || px >= pl + w + pr {
                            continue; // past the padded input
                        }
                        if py < pt || py >= pt + h || px < pl || px >= pl + w {
                            pad_cells += 1;
                            continue;
                        }
                        real.push(f64::from(x[(plane * h + py - pt) * w + px - pl]));
                    }
                }
                let v = if p.max {
                    real.iter().copied().fold(f64::NEG_INFINITY, f64::max)
                } else {
                    let count = if p.count_include_pad {
                        real.len() + pad_cells
                    } else {
                        real.len()
                    };
                    real.iter().sum::<f64>() / count as f64
                };
                y.push(v as f32);
            }
        }
    }
    ((oh, ow), y)
}

/// Runs `p` on `x` (NCHW `dims`) in both layouts through the factory against the oracle.
fn check_on(p: &Pool, x: &[f32], dims: [usize; 4]) {
    let [n, c, h, w] = dims;
    let ((oh, ow), want) = oracle(p, x, dims);
    let got = run(
        &p.descriptor(DataLayout::Nchw),
        &[(&u32s(&[n, c, h, w]), x)],
        &u32s(&[n, c, oh, ow]),
    );
    assert_close(&got, &want, REL_TOL, "nchw");
    let got = run(
        &p.descriptor(DataLayout::Nhwc),
        &[(&u32s(&[n, h, w, c]), &to_nhwc(x, dims))],
        &u32s(&[n, oh, ow, c]),
    );
    assert_close(&got, &to_nhwc(&want, [n, c, oh, ow]), REL_TOL, "nhwc");
}

fn check(p: &Pool, dims: [usize; 4], seed: u64) {
    let x = Lcg(seed).vec(dims.iter().product());
    check_on(p, &x, dims);
}

/// Dilated windows (ONNX `dilations`), with padding, in floor and ceil mode, every type and
/// divisor rule, against the oracle's cell walk.
#[test]
fn dilated_windows() {
    for (dilation, ceil, pads) in [
        ((2, 2), false, (0, 0, 0, 0)),
        ((2, 3), false, (1, 2, 2, 1)),
        ((3, 2), true, (2, 0, 1, 3)),
    ] {
        check_all_kinds(
            Pool {
                dilation,
                ceil,
                pads,
                ..BASE
            },
            [1, 2, 9, 10],
            7,
        );
    }
}

/// Every type and divisor rule of `p`.
fn check_all_kinds(p: Pool, dims: [usize; 4], seed: u64) {
    for (max, count_include_pad) in [(true, false), (false, false), (false, true)] {
        check(
            &Pool {
                max,
                count_include_pad,
                ..p
            },
            dims,
            seed,
        );
    }
}

const BASE: Pool = Pool {
    max: false,
    kernel: (3, 3),
    stride: (2, 2),
    pads: (1, 1, 1, 1),
    ceil: false,
    count_include_pad: false,
    dilation: (1, 1),
};

/// 1..16 in a 4x4 plane, k 3, s 2, pads 1, ceil mode: 3x3 outputs, the last row and
/// column of windows run one cell past the padded input. Computed by hand.
#[test]
fn hand_computed_ceil_mode_with_padding() {
    let x: Vec<f32> = (1..=16).map(|v| v as f32).collect();
    let p = Pool { ceil: true, ..BASE };
    let layer = |p: Pool| p.descriptor(DataLayout::Nchw);
    // count_include_pad = 1: per axis the windows hold 3, 3 and 2 cells of the padded
    // input (rows -1..2, 1..4, 3..5), so the divisors are 9 9 6 / 9 9 6 / 6 6 4.
    let include = run(
        &layer(Pool {
            count_include_pad: true,
            ..p
        }),
        &[(&[1, 1, 4, 4], &x)],
        &[1, 1, 3, 3],
    );
    let want_include = [
        14.0 / 9.0,
        30.0 / 9.0,
        2.0,
        57.0 / 9.0,
        11.0,
        6.0,
        4.5,
        7.5,
        4.0,
    ];
    assert_close(
        &include,
        &want_include,
        REL_TOL,
        "count_include_pad by hand",
    );
    // The corner window holds only x[3][3] = 16: 16 / 4 with padding counted, 16 alone.
    assert_eq!(include[8], 4.0);
    let exclude = run(&layer(p), &[(&[1, 1, 4, 4], &x)], &[1, 1, 3, 3]);
    assert_eq!(exclude, [3.5, 5.0, 6.0, 9.5, 11.0, 12.0, 13.5, 15.0, 16.0]);
    let max = run(
        &layer(Pool { max: true, ..p }),
        &[(&[1, 1, 4, 4], &x)],
        &[1, 1, 3, 3],
    );
    assert_eq!(max, [6.0, 8.0, 8.0, 14.0, 16.0, 16.0, 14.0, 16.0, 16.0]);
    // Padding never enters a maximum, even of negative values.
    let neg: Vec<f32> = x.iter().map(|v| -v).collect();
    let max = run(
        &layer(Pool { max: true, ..p }),
        &[(&[1, 1, 4, 4], &neg)],
        &[1, 1, 3, 3],
    );
    assert_eq!(
        max,
        [-1.0, -2.0, -4.0, -5.0, -6.0, -8.0, -13.0, -14.0, -16.0]
    );
    // The same in NHWC with a second, negated channel.
    let both: Vec<f32> = x.iter().flat_map(|&v| [v, -v]).collect();
    let nhwc = Pool {
        count_include_pad: true,
        ..p
    }
    .descriptor(DataLayout::Nhwc);
    let got = run(&nhwc, &[(&[1, 4, 4, 2], &both)], &[1, 3, 3, 2]);
    let want: Vec<f32> = want_include.iter().flat_map(|&v| [v, -v]).collect();
    assert_close(&got, &want, REL_TOL, "nhwc, negated second channel");
    // And the oracle agrees with the hand computation.
    assert_close(
        &oracle(
            &Pool {
                count_include_pad: true,
                ..p
            },
            &x,
            [1, 1, 4, 4],
        )
        .1,
        &want_include,
        REL_TOL,
        "oracle by hand",
    );
}

/// Floor mode with symmetric padding.
#[test]
fn floor_mode_with_padding() {
    check_all_kinds(BASE, [2, 3, 7, 7], 1);
    check_all_kinds(
        Pool {
            kernel: (2, 3),
            stride: (1, 2),
            pads: (1, 0, 2, 1),
            ..BASE
        },
        [1, 2, 6, 8],
        2,
    );
}

/// Ceil mode with asymmetric padding, including a window dropped because it would start
/// in the end padding (width 4, k 2, s 2, pad 0+1: ceil gives 3, ONNX keeps 2).
#[test]
fn ceil_mode() {
    let p = Pool { ceil: true, ..BASE };
    check_all_kinds(p, [2, 3, 8, 8], 3);
    check_all_kinds(
        Pool {
            kernel: (2, 3),
            pads: (0, 1, 1, 0),
            ..p
        },
        [1, 2, 6, 7],
        4,
    );
    let dropped = Pool {
        kernel: (2, 2),
        pads: (0, 1, 0, 1),
        ..p
    };
    assert_eq!(onnx_len(4, 0, 1, 2, 2, true), 2);
    assert_eq!(onnx_len(5, 0, 1, 2, 2, true), 3);
    check_all_kinds(dropped, [1, 3, 5, 4], 5);
    // Ceil mode where the division is exact changes nothing.
    check_all_kinds(
        Pool {
            pads: (0, 0, 0, 0),
            ..p
        },
        [1, 2, 7, 9],
        6,
    );
}

/// Without padding both divisor rules agree; a 1x1 window is the identity; a whole-plane
/// window is a global pool.
#[test]
fn unpadded_identity_and_global() {
    let p = Pool {
        pads: (0, 0, 0, 0),
        ..BASE
    };
    check_all_kinds(p, [1, 4, 9, 5], 7);
    let x = Lcg(8).vec(2 * 3 * 4 * 5);
    let id = Pool {
        kernel: (1, 1),
        stride: (1, 1),
        ..p
    };
    for max in [true, false] {
        let got = run(
            &Pool { max, ..id }.descriptor(DataLayout::Nchw),
            &[(&[2, 3, 4, 5], &x)],
            &[2, 3, 4, 5],
        );
        assert_eq!(got, x);
    }
    check_all_kinds(
        Pool {
            kernel: (4, 5),
            stride: (1, 1),
            ..p
        },
        [2, 3, 4, 5],
        9,
    );
}

/// End padding as wide as the window: with `count_include_pad` a window of padding only
/// averages to 0; max and the other average have no value and are refused at creation.
#[test]
fn windows_of_padding_only() {
    // Padding as wide as the window would make windows of padding only: refused by layer
    // support (as ONNX Runtime refuses it) in every mode, with the reason.
    let p = Pool {
        kernel: (1, 2),
        stride: (1, 2),
        pads: (0, 0, 0, 3),
        ..BASE
    };
    for bad in [
        p,
        Pool { max: true, ..p },
        Pool {
            count_include_pad: true,
            ..p
        },
    ] {
        let layer = bad.descriptor(DataLayout::Nchw);
        let support = crate::layer_support::is_layer_supported(
            &layer,
            &[f32t(&[1, 1, 1, 2])],
            &[f32t(&[1, 1, 1, 3])],
        );
        match support {
            backplane_api::Support::Unsupported(reason) => {
                assert!(
                    reason.contains("must be smaller than the 1x2 window"),
                    "{reason}"
                )
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}

/// Wrong tensor counts or shapes at execution are errors, not panics.
#[test]
fn rejects_mismatched_tensors() {
    let layer = BASE.descriptor(DataLayout::Nchw);
    let (x_info, y_info) = (f32t(&[1, 1, 5, 5]), f32t(&[1, 1, 3, 3]));
    let workload = make(
        &layer,
        std::slice::from_ref(&x_info),
        std::slice::from_ref(&y_info),
    )
    .unwrap();
    let x = [0f32; 25];
    let mut y = [0f32; 9];
    assert!(execute(&*workload, &[], &y_info, &mut y).is_err());
    let other = f32t(&[1, 5, 5, 1]);
    assert!(execute(&*workload, &[(&other, &x)], &y_info, &mut y).is_err());
    assert!(execute(&*workload, &[(&x_info, &x)], &y_info, &mut y).is_ok());
    assert!(make(&layer, &[x_info], &[f32t(&[1, 1, 2, 2])]).is_err());
}
