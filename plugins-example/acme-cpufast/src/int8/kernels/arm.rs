//! The aarch64 kernels: the product tile on FEAT_I8MM (`usmmla`), FEAT_DotProd (`sdot`) and
//! plain NEON (widening multiplies), the requantisation, the panel interleave and the byte
//! lookup on NEON. `super`'s dispatch calls each only after run-time detection
//! ([`Isa::available`]); NEON itself is part of every aarch64 CPU (the target's baseline).
//!
//! The dot-product and matrix instructions are written as `asm!` (their intrinsics are not
//! stable Rust yet), inside functions compiled with the feature enabled, so the assembler
//! accepts them and the detection is the only gate.
//!
//! # The three products, on the panels of `super`'s module doc
//! - [`acc_i8mm`]: `usmmla` multiplies a 2×8 block of `u8` (two activation columns, eight
//!   `k`) by a 2×8 block of `s8` (two weight rows) into a 2×2 block of `i32`. Two groups of
//!   four `k` make the eight: a 32-bit zip of groups `g` and `g + 1` puts each column's (and
//!   each row's) eight bytes side by side. The blocks are unzipped into rows at the end. No
//!   sign trick: `u8 × s8` is what the instruction multiplies.
//! - [`acc_dot`]: `sdot` (by element) adds, in each 32-bit lane, the four products of a
//!   column's four `s8` with one row's four `s8`. The activations are `u8`: they are read as
//!   `x ^ 0x80 = x - 128` (an `s8`), and `128 · Σ_k w[r, k]` (the row's weight sum, by `sdot`
//!   against ones) is added back, exactly: `Σ w·x = Σ w·(x - 128) + 128 · Σ w` in wrapping
//!   `i32` arithmetic, as the reference wraps.
//! - [`acc_neon`]: the same `x - 128`, then `smull` (`s8 × s8 → i16`, exact: at most `128 ·
//!   128`) of a column quad by a row's broadcast word, and `sadalp` adds the pairs into `i32`;
//!   one `addp` at the end joins each column's two pairs.

use std::arch::aarch64::*;
use std::arch::asm;

use super::*;

/// `sdot` by element: `c.4s += x.16b · w.4b[lane]` (four `s8` products per lane).
macro_rules! sdot_lane {
    ($c:expr, $x:expr, $w:expr, $lane:literal) => {
        // SAFETY: a register-only instruction of FEAT_DotProd, which the calling function
        // is compiled with and its caller detected.
        unsafe {
            asm!(
                concat!("sdot {c:v}.4s, {x:v}.16b, {w:v}.4b[", $lane, "]"),
                c = inout(vreg) $c,
                x = in(vreg) $x,
                w = in(vreg) $w,
                options(pure, nomem, nostack, preserves_flags)
            )
        }
    };
}

/// `sdot` by vector: `c.4s += x.16b · w.16b`, lane by lane.
macro_rules! sdot {
    ($c:expr, $x:expr, $w:expr) => {
        // SAFETY: as `sdot_lane`.
        unsafe {
            asm!(
                "sdot {c:v}.4s, {x:v}.16b, {w:v}.16b",
                c = inout(vreg) $c,
                x = in(vreg) $x,
                w = in(vreg) $w,
                options(pure, nomem, nostack, preserves_flags)
            )
        }
    };
}

/// `usmmla`: `c.4s += x (2×8 u8) · w (2×8 s8)ᵀ`, `c = [x0·w0, x0·w1, x1·w0, x1·w1]`.
macro_rules! usmmla {
    ($c:expr, $x:expr, $w:expr) => {
        // SAFETY: a register-only instruction of FEAT_I8MM, which the calling function is
        // compiled with and its caller detected.
        unsafe {
            asm!(
                "usmmla {c:v}.4s, {x:v}.16b, {w:v}.16b",
                c = inout(vreg) $c,
                x = in(vreg) $x,
                w = in(vreg) $w,
                options(pure, nomem, nostack, preserves_flags)
            )
        }
    };
}

/// Columns a block of the NEON and dot-product kernels covers: two vectors of four.
const NB: usize = 8;

/// `128 · Σ_k w[r, k]` for each of the [`MR`] rows of the weight panel `a` (`k4` groups).
///
/// # Safety
/// `a` points at `k4 · MR · 4` readable bytes.
#[target_feature(enable = "neon,dotprod")]
unsafe fn shifted_row_sums_dot(a: *const i8, k4: usize) -> [int32x4_t; 2] {
    let ones = vdupq_n_s8(1);
    let mut sums = [vdupq_n_s32(0); 2];
    for k in 0..k4 {
        // SAFETY: group `k < k4` of `a` is 32 bytes at `k · MR · 4` (caller).
        let (w0, w1) = unsafe {
            (
                vld1q_s8(a.add(k * MR * 4)),
                vld1q_s8(a.add(k * MR * 4 + 16)),
            )
        };
        sdot!(sums[0], w0, ones);
        sdot!(sums[1], w1, ones);
    }
    [vshlq_n_s32::<7>(sums[0]), vshlq_n_s32::<7>(sums[1])]
}

/// The product tile on FEAT_DotProd (see the module doc).
///
/// # Safety
/// The CPU has FEAT_DotProd; `a` points at `k4 · MR · 4` readable bytes, `b` at
/// `(k4 - 1) · b_stride + NR · 4`.
#[target_feature(enable = "neon,dotprod")]
pub(super) unsafe fn acc_dot(
    a: *const i8,
    b: *const u8,
    k4: usize,
    b_stride: usize,
    acc: &mut Acc,
) {
    // SAFETY: the caller's contract on `a` and the CPU.
    let corr = unsafe { shifted_row_sums_dot(a, k4) };
    let corr: [int32x4_t; MR] = std::array::from_fn(|r| match r % 4 {
        0 => vdupq_laneq_s32::<0>(corr[r / 4]),
        1 => vdupq_laneq_s32::<1>(corr[r / 4]),
        2 => vdupq_laneq_s32::<2>(corr[r / 4]),
        _ => vdupq_laneq_s32::<3>(corr[r / 4]),
    });
    let flip = vdupq_n_u8(0x80);
    for block in 0..NR / NB {
        let col = block * NB;
        // SAFETY: columns `col .. col + 8` of each row, two vectors of four i32.
        let mut c: [[int32x4_t; 2]; MR] = std::array::from_fn(|r| unsafe {
            let p = acc[r].as_ptr().add(col);
            [
                vaddq_s32(vld1q_s32(p), corr[r]),
                vaddq_s32(vld1q_s32(p.add(4)), corr[r]),
            ]
        });
        for k in 0..k4 {
            // SAFETY: 32 bytes (columns `col .. col + 8`) of group `k < k4` of `b`, inside
            // its 128 bytes at `k · b_stride`; group `k` of `a`, 32 bytes (caller).
            let (x, w0, w1) = unsafe {
                let p = b.add(k * b_stride + col * 4);
                let x = [vld1q_u8(p), vld1q_u8(p.add(16))];
                let w = a.add(k * MR * 4);
                (x, vld1q_s8(w), vld1q_s8(w.add(16)))
            };
            let x = x.map(|v| vreinterpretq_s8_u8(veorq_u8(v, flip)));
            for v in 0..2 {
                sdot_lane!(c[0][v], x[v], w0, "0");
                sdot_lane!(c[1][v], x[v], w0, "1");
                sdot_lane!(c[2][v], x[v], w0, "2");
                sdot_lane!(c[3][v], x[v], w0, "3");
                sdot_lane!(c[4][v], x[v], w1, "0");
                sdot_lane!(c[5][v], x[v], w1, "1");
                sdot_lane!(c[6][v], x[v], w1, "2");
                sdot_lane!(c[7][v], x[v], w1, "3");
            }
        }
        for (cr, row) in c.iter().zip(acc.iter_mut()) {
            // SAFETY: columns `col .. col + 8` of the row, two vectors of four i32.
            unsafe {
                vst1q_s32(row.as_mut_ptr().add(col), cr[0]);
                vst1q_s32(row.as_mut_ptr().add(col + 4), cr[1]);
            }
        }
    }
}

/// The product tile on FEAT_I8MM (see the module doc).
///
/// # Safety
/// The CPU has FEAT_I8MM; `a` points at `k4 · MR · 4` readable bytes, `b` at
/// `(k4 - 1) · b_stride + NR · 4`.
#[target_feature(enable = "neon,i8mm")]
pub(super) unsafe fn acc_i8mm(
    a: *const i8,
    b: *const u8,
    k4: usize,
    b_stride: usize,
    acc: &mut Acc,
) {
    for block in 0..NR / NB {
        let col = block * NB;
        // c[p][q]: columns `col + 2p, col + 2p + 1` by rows `2q, 2q + 1`.
        let mut c = [[vdupq_n_s32(0); MR / 2]; NB / 2];
        for g in (0..k4).step_by(2) {
            // SAFETY: groups `g` and (when `g + 1 < k4`) `g + 1` of both panels: 32 bytes of
            // `b` at column `col` of each, 32 bytes of `a` each (caller).
            let ((x0, w0), (x1, w1)) = unsafe {
                let load = |g: usize| {
                    let p = b.add(g * b_stride + col * 4);
                    let w = a.add(g * MR * 4);
                    (
                        [vld1q_u8(p), vld1q_u8(p.add(16))],
                        [vld1q_s8(w), vld1q_s8(w.add(16))],
                    )
                };
                let zero = ([vdupq_n_u8(0); 2], [vdupq_n_s8(0); 2]);
                (load(g), if g + 1 < k4 { load(g + 1) } else { zero })
            };
            // Eight `k` of two columns (two rows) side by side: 32-bit zips of the groups.
            let zip_u = |lo: uint8x16_t, hi: uint8x16_t| {
                let (lo, hi) = (vreinterpretq_u32_u8(lo), vreinterpretq_u32_u8(hi));
                [
                    vreinterpretq_u8_u32(vzip1q_u32(lo, hi)),
                    vreinterpretq_u8_u32(vzip2q_u32(lo, hi)),
                ]
            };
            let zip_s = |lo: int8x16_t, hi: int8x16_t| {
                let (lo, hi) = (vreinterpretq_s32_s8(lo), vreinterpretq_s32_s8(hi));
                [
                    vreinterpretq_s8_s32(vzip1q_s32(lo, hi)),
                    vreinterpretq_s8_s32(vzip2q_s32(lo, hi)),
                ]
            };
            let [xa, xb] = zip_u(x0[0], x1[0]);
            let [xc, xd] = zip_u(x0[1], x1[1]);
            let [wa, wb] = zip_s(w0[0], w1[0]);
            let [wc, wd] = zip_s(w0[1], w1[1]);
            let (x, w) = ([xa, xb, xc, xd], [wa, wb, wc, wd]);
            for p in 0..NB / 2 {
                for q in 0..MR / 2 {
                    usmmla!(c[p][q], x[p], w[q]);
                }
            }
        }
        // Blocks of column pairs (p, p + 1) give rows 2q and 2q + 1 of four columns.
        for p in (0..NB / 2).step_by(2) {
            for q in 0..MR / 2 {
                let (top, bottom) = (
                    vuzp1q_s32(c[p][q], c[p + 1][q]),
                    vuzp2q_s32(c[p][q], c[p + 1][q]),
                );
                for (r, v) in [(2 * q, top), (2 * q + 1, bottom)] {
                    let at = col + 2 * p;
                    // SAFETY: columns `at .. at + 4` of row `r < MR` (`at + 4 <= NR`).
                    unsafe {
                        let o = acc[r].as_mut_ptr().add(at);
                        vst1q_s32(o, vaddq_s32(vld1q_s32(o), v));
                    }
                }
            }
        }
    }
}

/// The product tile on plain NEON (see the module doc).
///
/// # Safety
/// The CPU has NEON; `a` points at `k4 · MR · 4` readable bytes, `b` at `(k4 - 1) · b_stride + NR · 4`.
#[target_feature(enable = "neon")]
pub(super) unsafe fn acc_neon(
    a: *const i8,
    b: *const u8,
    k4: usize,
    b_stride: usize,
    acc: &mut Acc,
) {
    // `128 · Σ_k w[r, k]`, added back for reading `x` as `x - 128`.
    let mut corr = [0i32; MR];
    for k in 0..k4 {
        for (r, c) in corr.iter_mut().enumerate() {
            // SAFETY: row `r` of group `k < k4` of `a`, four bytes (caller).
            let w = unsafe { std::slice::from_raw_parts(a.add((k * MR + r) * 4), 4) };
            *c = c.wrapping_add(w.iter().map(|&v| i32::from(v)).sum::<i32>() << 7);
        }
    }
    let flip = vdupq_n_u8(0x80);
    for rows in 0..MR / 4 {
        for block in 0..NR / NB {
            let col = block * NB;
            // pairs[r][v][h]: row `4 · rows + r`, column quad `v`, its columns `2h, 2h + 1`,
            // each as two pair sums.
            let mut pairs = [[[vdupq_n_s32(0); 2]; 2]; 4];
            for k in 0..k4 {
                // SAFETY: 32 bytes (columns `col .. col + 8`) of group `k < k4` of `b`
                // (caller).
                let x = unsafe {
                    let p = b.add(k * b_stride + col * 4);
                    [vld1q_u8(p), vld1q_u8(p.add(16))]
                };
                let x = x.map(|v| vreinterpretq_s8_u8(veorq_u8(v, flip)));
                for (r, pr) in pairs.iter_mut().enumerate() {
                    // SAFETY: word `4 · rows + r < MR` of group `k < k4` of `a` (caller).
                    let w = unsafe {
                        a.add((k * MR + rows * 4 + r) * 4)
                            .cast::<i32>()
                            .read_unaligned()
                    };
                    let w = vreinterpretq_s8_s32(vdupq_n_s32(w));
                    for (v, pv) in pr.iter_mut().enumerate() {
                        pv[0] = vpadalq_s16(pv[0], vmull_s8(vget_low_s8(x[v]), vget_low_s8(w)));
                        pv[1] = vpadalq_s16(pv[1], vmull_high_s8(x[v], w));
                    }
                }
            }
            for (r, pr) in pairs.iter().enumerate() {
                let row = rows * 4 + r;
                let c = vdupq_n_s32(corr[row]);
                for (v, pv) in pr.iter().enumerate() {
                    let sums = vaddq_s32(vpaddq_s32(pv[0], pv[1]), c);
                    // SAFETY: columns `col + 4v .. col + 4v + 4` of the row (`<= NR`).
                    unsafe {
                        let o = acc[row].as_mut_ptr().add(col + 4 * v);
                        vst1q_s32(o, vaddq_s32(vld1q_s32(o), sums));
                    }
                }
            }
        }
    }
}

/// [`tile_store`](super::tile_store) on NEON: four columns at a time, the rest as the
/// reference formula ([`requant_one`]). The same arithmetic: `vcvtnq_s32_f32` rounds half to
/// even, and `fmaxnm`/`fminnm` send a NaN to the bound, as `f32::max`/`min` do.
#[target_feature(enable = "neon")]
pub(super) fn requant_neon(
    acc: &Acc,
    col0: usize,
    rows: usize,
    cols: usize,
    rq: &Requant<'_>,
    out: &mut [u8],
    ld: usize,
) {
    let lo = vdupq_n_f32((rq.lo - rq.zp) as f32);
    let hi = vdupq_n_f32((rq.hi - rq.zp) as f32);
    let zp = vdupq_n_s32(rq.zp);
    for (r, row) in acc.iter().enumerate().take(rows) {
        let (corr, mult) = (vdupq_n_s32(rq.corr[r]), vdupq_n_f32(rq.mult[r]));
        let row = &row[col0..col0 + cols];
        let o = &mut out[r * ld..r * ld + cols];
        let full = cols / 4 * 4;
        for (src, dst) in row[..full]
            .chunks_exact(4)
            .zip(o[..full].chunks_exact_mut(4))
        {
            // SAFETY: `src` is four i32.
            let v = unsafe { vld1q_s32(src.as_ptr()) };
            let f = vmulq_f32(vcvtq_f32_s32(vaddq_s32(v, corr)), mult);
            let f = vminnmq_f32(vmaxnmq_f32(f, lo), hi);
            let q = vaddq_s32(vcvtnq_s32_f32(f), zp);
            // The values lie in lo..=hi (within -128..=255): their low bytes are the u8 or i8.
            let bytes = vreinterpretq_u8_s32(q);
            dst.copy_from_slice(&[
                vgetq_lane_u8::<0>(bytes),
                vgetq_lane_u8::<4>(bytes),
                vgetq_lane_u8::<8>(bytes),
                vgetq_lane_u8::<12>(bytes),
            ]);
        }
        for (d, &v) in o[full..].iter_mut().zip(&row[full..]) {
            *d = requant_one(v, rq.corr[r], rq.mult[r], rq.zp, rq.lo, rq.hi);
        }
    }
}

/// [`interleave4`](super::interleave4) by `st4` (four registers stored interleaved).
#[target_feature(enable = "neon")]
pub(super) fn interleave4_neon(rows: [&[u8; NR]; 4], flip: u8, out: &mut [u8; NR * 4]) {
    let f = vdupq_n_u8(flip);
    for half in 0..2 {
        // SAFETY: 16 bytes of each 32-byte row at `16 · half`; 64 bytes of the 128-byte
        // `out` at `64 · half`.
        unsafe {
            let load = |i: usize| veorq_u8(vld1q_u8(rows[i].as_ptr().add(16 * half)), f);
            let v = uint8x16x4_t(load(0), load(1), load(2), load(3));
            vst4q_u8(out.as_mut_ptr().add(64 * half), v);
        }
    }
}

/// [`lookup_row`](super::lookup_row) by `tbl`/`tbx` over the table's four 64-byte quarters.
#[target_feature(enable = "neon")]
pub(super) fn lookup_neon(table: &[u8; 256], x: &[u8], out: &mut [u8]) {
    // SAFETY: four 64-byte quarters of the 256-byte table, 16 bytes a load.
    let t: [uint8x16x4_t; 4] = std::array::from_fn(|q| unsafe {
        let p = table.as_ptr().add(64 * q);
        uint8x16x4_t(
            vld1q_u8(p),
            vld1q_u8(p.add(16)),
            vld1q_u8(p.add(32)),
            vld1q_u8(p.add(48)),
        )
    });
    let full = x.len() / 16 * 16;
    for (src, dst) in x[..full]
        .chunks_exact(16)
        .zip(out[..full].chunks_exact_mut(16))
    {
        // SAFETY: `src` and `dst` are 16 bytes each.
        unsafe {
            let v = vld1q_u8(src.as_ptr());
            // An index past a quarter's 64 bytes leaves the lane as it was (`tbx`).
            let mut r = vqtbl4q_u8(t[0], v);
            r = vqtbx4q_u8(r, t[1], vsubq_u8(v, vdupq_n_u8(64)));
            r = vqtbx4q_u8(r, t[2], vsubq_u8(v, vdupq_n_u8(128)));
            r = vqtbx4q_u8(r, t[3], vsubq_u8(v, vdupq_n_u8(192)));
            vst1q_u8(dst.as_mut_ptr(), r);
        }
    }
    for (o, &b) in out[full..].iter_mut().zip(&x[full..]) {
        *o = table[usize::from(b)];
    }
}
