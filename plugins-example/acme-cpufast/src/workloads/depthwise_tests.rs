//! Tests of `depthwise.rs`.

use backplane_api::{ActivationDescriptor, ActivationFunction};
use backplane_backend_kit::geometry::Geometry2d;
use faer::traits::pulp::Scalar;

use super::*;
use crate::workloads::test_support::{Lcg, assert_close};

/// Relative tolerance against the f64 oracle (sums of up to 25 products of values in
/// `[-1, 1)`).
const REL_TOL: f64 = 1e-5;

/// One depthwise convolution: batch 2, 3 channels, `multiplier` outputs per channel.
#[derive(Debug, Clone, Copy)]
struct Case {
    multiplier: usize,
    size: (usize, usize),
    kernel: (usize, usize),
    stride: (usize, usize),
    dilation: (usize, usize),
    /// Top, bottom, left, right.
    pads: (usize, usize, usize, usize),
}

impl Case {
    /// Its geometry, or `None` if the padded input is smaller than the kernel.
    fn geometry(&self) -> Option<ConvGeometry> {
        let (t, b, l, r) = self.pads;
        let reach_y = self.dilation.0 * (self.kernel.0 - 1) + 1;
        let reach_x = self.dilation.1 * (self.kernel.1 - 1) + 1;
        let out_height = (self.size.0 + t + b).checked_sub(reach_y)? / self.stride.0 + 1;
        let out_width = (self.size.1 + l + r).checked_sub(reach_x)? / self.stride.1 + 1;
        Some(ConvGeometry(Geometry2d {
            batch: 2,
            channels: 3,
            height: self.size.0,
            width: self.size.1,
            out_channels: 3 * self.multiplier,
            out_height,
            out_width,
            kernel_h: self.kernel.0,
            kernel_w: self.kernel.1,
            stride_y: self.stride.0,
            stride_x: self.stride.1,
            dilation_y: self.dilation.0,
            dilation_x: self.dilation.1,
            pad_top: t,
            pad_left: l,
            pad_bottom: b,
            pad_right: r,
            groups: 3,
        }))
    }
}

/// The definition, in f64: `y[n, o, oy, ox] = act(b[o] + Σ x[n, o / multiplier,
/// oy·sy + ky·dy - top, ox·sx + kx·dx - left] · w[o, ky, kx])`, zero outside the input.
fn oracle(g: &ConvGeometry, x: &[f32], w: &[f32], b: &[f32], act: Option<&Epilogue>) -> Vec<f64> {
    let mut y = Vec::with_capacity(g.out_len());
    for n in 0..g.batch {
        for o in 0..g.out_channels {
            let c = o / g.group_out();
            for oy in 0..g.out_height {
                for ox in 0..g.out_width {
                    let mut s = f64::from(b[o]);
                    for ky in 0..g.kernel_h {
                        for kx in 0..g.kernel_w {
                            let iy =
                                (oy * g.stride_y + ky * g.dilation_y) as i64 - g.pad_top as i64;
                            let ix =
                                (ox * g.stride_x + kx * g.dilation_x) as i64 - g.pad_left as i64;
                            if (0..g.height as i64).contains(&iy)
                                && (0..g.width as i64).contains(&ix)
                            {
                                let (iy, ix) = (iy as usize, ix as usize);
                                let xv = x[((n * g.channels + c) * g.height + iy) * g.width + ix];
                                let wv = w[(o * g.kernel_h + ky) * g.kernel_w + kx];
                                s += f64::from(xv) * f64::from(wv);
                            }
                        }
                    }
                    y.push(act.map_or(s, |a| a.reference_f64(s as f32)));
                }
            }
        }
    }
    y
}

/// Runs `g` image by image with `kernel` on a NaN-filled output (an element left
/// unwritten fails every comparison) and scratch left over from another use.
fn run_images(
    g: &ConvGeometry,
    x: &[f32],
    kernel: impl Fn(&[f32], &mut [f32], &mut [f32]),
) -> Vec<f32> {
    let mut out = vec![f32::NAN; g.out_len()];
    let mut scratch = vec![7.0; scratch_len(g, 1)];
    let (in_image, out_image) = (x.len() / g.batch, out.len() / g.batch);
    for (n, out_n) in out.chunks_exact_mut(out_image).enumerate() {
        kernel(&x[n * in_image..][..in_image], out_n, &mut scratch);
    }
    out
}

/// Every kernel against the oracle (the phase kernel compiled for the CPU's instruction
/// set and for none, and the general one on the same cases), over strides 1, 2 and 3,
/// dilation 1 and 2, padding 0 to 2 on each side (asymmetric), kernels 1x1 to 5x5, odd,
/// even and tiny planes, multiplier 1 and 2, with and without a fused activation.
#[test]
fn depthwise_kernels_match_the_definition() {
    let relu6 = ActivationDescriptor {
        function: ActivationFunction::BoundedReLU,
        a: 6.0,
        b: 0.0,
    };
    let hard_swish = ActivationDescriptor {
        function: ActivationFunction::HardSwish,
        a: 0.0,
        b: 0.0,
    };
    // The activations, and HardSwish followed by an affine (PP-OCRv4's blocks).
    let activations = [
        None,
        Epilogue::of(Some(relu6), None, None),
        Epilogue::of(Some(hard_swish), Some(0.5), Some(-0.25)),
    ];
    let mut rng = Lcg(71);
    let (mut phase_cases, mut general_cases) = (0, 0);
    let mut i = 0;
    for size in [(1, 1), (2, 3), (5, 4), (7, 9), (8, 6), (12, 37)] {
        for kernel in [(3, 3), (1, 1), (5, 5), (2, 3), (3, 1)] {
            for (stride, dilation) in [
                ((1, 1), (1, 1)),
                ((2, 2), (1, 1)),
                ((1, 2), (1, 1)),
                ((2, 1), (1, 1)),
                ((3, 3), (1, 1)),
                ((1, 1), (2, 1)),
                ((2, 2), (1, 2)),
            ] {
                for pads in [(0, 0, 0, 0), (1, 1, 1, 1), (2, 0, 1, 2), (0, 2, 2, 0)] {
                    for multiplier in [1, 2] {
                        let case = Case {
                            multiplier,
                            size,
                            kernel,
                            stride,
                            dilation,
                            pads,
                        };
                        let Some(g) = case.geometry() else { continue };
                        i += 1;
                        let act = activations[i % activations.len()];
                        let act = act.as_ref();
                        let x = rng.vec(g.batch * g.channels * g.height * g.width);
                        let w = rng.vec(g.out_channels * g.kernel_h * g.kernel_w);
                        let b = rng.vec(g.out_channels);
                        let what = format!("{case:?} {act:?}");
                        let got = run_images(&g, &x, |x_n, out_n, scratch| {
                            run(&g, x_n, &w, Some(&b), act, out_n, scratch, 1)
                        });
                        let want = oracle(&g, &x, &w, &b, act);
                        assert_close(&got, &want, REL_TOL, &what);
                        let general = run_images(&g, &x, |x_n, out_n, _| {
                            general(&g, x_n, &w, Some(&b), act, out_n)
                        });
                        let phase = stride.0 <= 2 && stride.1 <= 2 && dilation == (1, 1);
                        assert_eq!(Phases::of(&g).is_some(), phase, "{what}: kernel");
                        if !phase {
                            general_cases += 1;
                            continue;
                        }
                        phase_cases += 1;
                        assert_close(&general, &want, REL_TOL, &format!("{what}: general"));
                        let scalar = run_images(&g, &x, |x_n, out_n, scratch| {
                            PhaseKernel {
                                g: &g,
                                phases: Phases::of(&g).unwrap(),
                                x_n,
                                w: &w,
                                bias: Some(&b),
                                activation: act,
                                out_n,
                                scratch,
                            }
                            .with_simd(Scalar)
                        });
                        assert_close(&scalar, &want, REL_TOL, &format!("{what}: scalar"));
                    }
                }
            }
        }
    }
    assert!(
        phase_cases > 300 && general_cases > 100,
        "{phase_cases} {general_cases}"
    );
}

/// Images past [`MIN_PARALLEL_WORK`], their channels split between 2 and 3 threads (3
/// does not divide 16): the phase kernel (stride 1 and 2, multiplier 2, wide rows and
/// narrow ones in several flat bands) and the general one (dilation), each equal to its
/// one-thread result and close to the oracle.
#[test]
fn channels_split_between_threads() {
    let relu6 = Epilogue::of(
        Some(ActivationDescriptor {
            function: ActivationFunction::BoundedReLU,
            a: 6.0,
            b: 0.0,
        }),
        None,
        None,
    )
    .unwrap();
    let mut rng = Lcg(73);
    let one = Case {
        multiplier: 1,
        size: (128, 130),
        kernel: (3, 3),
        stride: (1, 1),
        dilation: (1, 1),
        pads: (1, 1, 1, 1),
    };
    let cases = [
        (16, one),
        (
            8,
            Case {
                multiplier: 2,
                size: (146, 144),
                kernel: (5, 5),
                stride: (2, 2),
                pads: (2, 1, 2, 2),
                ..one
            },
        ),
        // Narrow planes tall enough for several flat bands, the last one shorter (`span`
        // 11: bands of 186 rows of 300; `span` 12: 170 rows of 451).
        (
            32,
            Case {
                size: (300, 9),
                ..one
            },
        ),
        (
            32,
            Case {
                multiplier: 2,
                size: (901, 21),
                kernel: (5, 5),
                stride: (2, 2),
                pads: (2, 1, 2, 2),
                ..one
            },
        ),
        (
            16,
            Case {
                dilation: (2, 2),
                pads: (2, 2, 2, 2),
                ..one
            },
        ),
    ];
    for (channels, case) in cases {
        let mut g = case.geometry().unwrap();
        (g.batch, g.channels, g.groups) = (1, channels, channels);
        g.out_channels = channels * case.multiplier;
        let taps = g.kernel_h * g.kernel_w;
        assert!(workers(&g, 2) == 2 && workers(&g, 3) == 3, "{case:?}");
        let x = rng.vec(g.channels * g.height * g.width);
        let w = rng.vec(g.out_channels * taps);
        let b = rng.vec(g.out_channels);
        let run_on = |threads| {
            let mut out = vec![f32::NAN; g.out_len()];
            let mut scratch = vec![7.0; scratch_len(&g, threads)];
            run(
                &g,
                &x,
                &w,
                Some(&b),
                Some(&relu6),
                &mut out,
                &mut scratch,
                threads,
            );
            out
        };
        let serial = run_on(1);
        let want = oracle(&g, &x, &w, &b, Some(&relu6));
        assert_close(&serial, &want, REL_TOL, &format!("{case:?}"));
        for threads in [2, 3] {
            assert_eq!(run_on(threads), serial, "{case:?}, {threads} threads");
        }
    }
}

/// Without a bias the sums start at zero; an empty input reads only padding.
#[test]
fn no_bias_and_empty_input() {
    let case = Case {
        multiplier: 1,
        size: (6, 5),
        kernel: (3, 3),
        stride: (2, 1),
        dilation: (1, 1),
        pads: (1, 1, 1, 1),
    };
    let g = case.geometry().unwrap();
    let mut rng = Lcg(72);
    let x = rng.vec(g.batch * g.channels * g.height * g.width);
    let w = rng.vec(g.out_channels * 9);
    let got = run_images(&g, &x, |x_n, out_n, scratch| {
        run(&g, x_n, &w, None, None, out_n, scratch, 1)
    });
    let zeros = vec![0.0; g.out_channels];
    assert_close(&got, &oracle(&g, &x, &w, &zeros, None), REL_TOL, "no bias");

    let empty = Case {
        size: (0, 5),
        kernel: (1, 3),
        ..case
    };
    let g = empty.geometry().unwrap();
    assert_eq!((g.out_height, g.out_width), (1, 5));
    let b = rng.vec(g.out_channels);
    let got = run_images(&g, &[], |x_n, out_n, scratch| {
        run(&g, x_n, &w, Some(&b), None, out_n, scratch, 1)
    });
    assert_close(&got, &oracle(&g, &[], &w, &b, None), 0.0, "empty input");
}
