//! Quantised `DepthwiseConvolution2d` (channel multiplier allowed), direct: each input
//! plane is copied once as `i16` differences from the zero point (so padding is 0), with a
//! zero border and its columns split by phase of the stride (`phase[p][row][q]` holds column
//! `q · stride + p`), so that every tap of every output row is one contiguous pass
//! `acc[ox] += x[ox + offset] · w` over the output width (`kernels::depthwise_channel`), whatever the
//! stride and dilation. The channels are split between threads.
//!
//! The kernels' products are exact in `i16` for weights of magnitude up to 128 (`255 · 128`);
//! weights with a zero point (`u8` ones) reach 255, and then every tap is split in two
//! halves of at most 128 each, the same input added twice (exact in the `i32` sums).

use std::cell::RefCell;

use backplane_api::{BackendError, BackendResult, TensorView, TensorViewMut, Workload};

use super::{
    Output, QTensor,
    kernels::{Isa, Requant, depthwise_channel, depthwise_flat},
};
use crate::{
    gemm::{MIN_PARALLEL_WORK, for_each_part, worth},
    workloads::{Signature, conv_geometry::ConvGeometry},
};

/// A quantised depthwise convolution.
#[derive(Debug)]
pub(crate) struct DepthwiseWorkload {
    g: ConvGeometry,
    /// `[out channels][kh][kw]`, or `[out channels][kh][kw][2]` when `split`.
    weights: Vec<i16>,
    /// Whether each tap is two entries (weights past ±128, see the module doc).
    split: bool,
    bias: Vec<i32>,
    x: QTensor,
    out: Output,
    signature: Signature,
    isa: Isa,
    threads: usize,
    /// Padded rows and columns.
    padded: [usize; 2],
    /// Where each tap's entries start reading in a channel's planes (twice per tap when
    /// `split`): the same for every channel.
    starts: Vec<usize>,
}

/// A thread's planes and accumulators, and the layout its planes were last zeroed for.
struct Scratch {
    planes: Vec<i16>,
    acc: Vec<i32>,
    /// `(height, width, stride, pad_top, pad_left, padded rows, padded columns)` of the channel
    /// last laid out in `planes`: its border (the bytes no channel of that layout writes) is
    /// still 0, so the next channel of the same layout only writes its interior.
    layout: Option<[usize; 7]>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = const {
        RefCell::new(Scratch { planes: Vec::new(), acc: Vec::new(), layout: None })
    };
}

impl DepthwiseWorkload {
    /// The workload of `g` with the weights' values (stored minus their zero point, within
    /// -255..=255) `[out channels, 1, kh, kw]` and `bias` per output channel.
    #[allow(
        clippy::too_many_arguments,
        reason = "geometry, parameters and the workload's context"
    )]
    pub(crate) fn new(
        g: ConvGeometry,
        values: Vec<i32>,
        bias: Vec<i32>,
        x: QTensor,
        out: Output,
        signature: Signature,
        isa: Isa,
        threads: usize,
    ) -> Self {
        let padded = [
            (g.out_height - 1) * g.stride_y + (g.kernel_h - 1) * g.dilation_y + 1,
            (g.out_width - 1) * g.stride_x + (g.kernel_w - 1) * g.dilation_x + 1,
        ];
        let split = values.iter().any(|v| v.abs() > 128);
        let [hp, wp] = padded;
        let s = g.stride_x;
        let wq = wp.div_ceil(s);
        let (kw, dx, dy) = (g.kernel_w, g.dilation_x, g.dilation_y);
        let starts: Vec<usize> = (0..g.kernel_h)
            .flat_map(|ky| {
                (0..kw).map(move |kx| {
                    let col = kx * dx;
                    ((col % s) * hp + ky * dy) * wq + col / s
                })
            })
            .flat_map(|start| [start, start].into_iter().take(if split { 2 } else { 1 }))
            .collect();
        let weights = if split {
            // Halves of at most 128: `v / 2` (rounded toward zero) and the rest.
            values
                .iter()
                .flat_map(|&v| [(v / 2) as i16, (v - v / 2) as i16])
                .collect()
        } else {
            values.iter().map(|&v| v as i16).collect()
        };
        Self {
            g,
            weights,
            split,
            bias,
            x,
            out,
            signature,
            isa,
            threads,
            padded,
            starts,
        }
    }

    /// Output channel `o` of one image: `plane` is its input channel, `y` its output plane.
    fn channel(&self, o: usize, plane: &[u8], y: &mut [u8], scratch: &mut Scratch) {
        let g = &self.g;
        let [hp, wp] = self.padded;
        let s = g.stride_x;
        let wq = wp.div_ceil(s);
        let Scratch {
            planes,
            acc,
            layout,
        } = scratch;
        let this = [g.height, g.width, s, g.pad_top, g.pad_left, hp, wp];
        if *layout != Some(this) || planes.len() != s * hp * wq {
            planes.clear();
            planes.resize(s * hp * wq, 0);
            *layout = Some(this);
        }
        // Stored bytes as `u8` (an `i8` plus 128) minus the zero point moved the same way.
        let (flip, zp) = self.x.as_u8();
        let zp = zp as i16;
        let used = g.width.min(wp.saturating_sub(g.pad_left));
        for iy in 0..g.height.min(hp.saturating_sub(g.pad_top)) {
            let py = iy + g.pad_top;
            let src = &plane[iy * g.width..iy * g.width + used];
            if s == 1 {
                let dst = &mut planes[py * wq + g.pad_left..py * wq + g.pad_left + used];
                for (d, &b) in dst.iter_mut().zip(src) {
                    *d = i16::from(b ^ flip) - zp;
                }
            } else if s == 2 {
                // Even and odd input columns go to the two phases: a de-interleave of pairs.
                let pl = g.pad_left;
                let p0 = pl % 2;
                let (q0, q1) = (pl / 2, pl.div_ceil(2));
                let (lo_plane, hi_plane) = planes.split_at_mut(hp * wq);
                let mut phase = [
                    &mut lo_plane[py * wq..(py + 1) * wq],
                    &mut hi_plane[py * wq..(py + 1) * wq],
                ];
                let pairs = src.chunks_exact(2);
                let tail = pairs.remainder();
                let n = src.len() / 2;
                {
                    let [a, b] = &mut phase;
                    let (even, odd): (&mut [i16], &mut [i16]) = if p0 == 0 {
                        (&mut a[q0..q0 + n], &mut b[q1..q1 + n])
                    } else {
                        (&mut b[q0..q0 + n], &mut a[q1..q1 + n])
                    };
                    for ((e, o), pair) in even.iter_mut().zip(odd.iter_mut()).zip(pairs) {
                        *e = i16::from(pair[0] ^ flip) - zp;
                        *o = i16::from(pair[1] ^ flip) - zp;
                    }
                }
                if let [b] = tail {
                    phase[p0][q0 + n] = i16::from(b ^ flip) - zp;
                }
            } else {
                for (ix, &b) in src.iter().enumerate() {
                    let px = ix + g.pad_left;
                    planes[((px % s) * hp + py) * wq + px / s] = i16::from(b ^ flip) - zp;
                }
            }
        }
        let ow = g.out_width;
        acc.clear();
        acc.resize(ow, 0);
        let entries = g.kernel_h * g.kernel_w * if self.split { 2 } else { 1 };
        let taps = &self.weights[o * entries..][..entries];
        let starts = &self.starts;
        let rq = Requant {
            corr: &[],
            mult: &[],
            zp: self.out.zp,
            lo: self.out.lo,
            hi: self.out.hi,
        };
        if g.stride_y == 1 && s == 1 {
            // One flat run over the padded-width grid (short rows cost a pass per tap each).
            acc.resize((g.out_height.max(1) - 1) * wq + ow, 0);
            depthwise_flat(
                self.isa,
                planes,
                starts,
                taps,
                wq,
                ow,
                self.bias[o],
                self.out.mult[o],
                &rq,
                acc,
                &mut y[..g.out_height * ow],
            );
            return;
        }
        depthwise_channel(
            self.isa,
            planes,
            starts,
            taps,
            g.stride_y * wq,
            ow,
            self.bias[o],
            self.out.mult[o],
            &rq,
            acc,
            &mut y[..g.out_height * ow],
        );
    }
}

impl Workload for DepthwiseWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let g = &self.g;
        let x = inputs[0].data.as_slice();
        let y = outputs[0].data.as_mut_slice();
        let (hw, hw_out, m) = (
            g.height * g.width,
            g.out_height * g.out_width,
            g.out_channels,
        );
        if x.len() != g.batch * g.channels * hw || y.len() != g.batch * m * hw_out {
            return Err(BackendError::invalid_argument(
                "buffer sizes differ from the tensors'",
            ));
        }
        let multiplier = m / g.channels;
        let work = m * hw_out * g.kernel_h * g.kernel_w * 16;
        let parts = worth(work, MIN_PARALLEL_WORK, self.threads).min(m.max(1));
        let per = m.div_ceil(parts.max(1));
        for b in 0..g.batch {
            let xi = &x[b * g.channels * hw..(b + 1) * g.channels * hw];
            let yi = &mut y[b * m * hw_out..(b + 1) * m * hw_out];
            for_each_part(
                parts,
                yi.chunks_mut(per * hw_out).enumerate(),
                |(part, band)| {
                    SCRATCH.with_borrow_mut(|scratch| {
                        for (i, yo) in band.chunks_mut(hw_out).enumerate() {
                            let o = part * per + i;
                            let c = o / multiplier;
                            self.channel(o, &xi[c * hw..(c + 1) * hw], yo, scratch);
                        }
                    });
                },
            );
        }
        Ok(())
    }
}
