//! The x86-64 kernels: AVX-512 (F, BW, VNNI, VBMI) and AVX2, each called by `super`'s
//! dispatch only after run-time detection.

use std::arch::x86_64::*;

use super::*;

/// # Safety
/// The CPU has AVX-512 F, BW and VNNI; `a` points at `runs.len() · k4 · MR · 4` readable
/// bytes, and `b` at `run + (k4 - 1) · b_stride + NR · 4` for each `run` of `runs`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn acc_vnni(
    a: *const i8,
    b: *const u8,
    runs: &[usize],
    k4: usize,
    b_stride: usize,
    acc: &mut Acc,
) {
    // SAFETY: each row of `acc` is `NR = 32` i32, two vectors of 16.
    let mut c: [[__m512i; 2]; MR] = std::array::from_fn(|r| unsafe {
        [
            _mm512_loadu_si512(acc[r].as_ptr().cast()),
            _mm512_loadu_si512(acc[r].as_ptr().add(16).cast()),
        ]
    });
    for (i, &run) in runs.iter().enumerate() {
        // SAFETY: run `i`'s `k4` groups of `a` follow the runs before it (caller).
        let a = unsafe { a.add(i * k4 * MR * 4) };
        for k in 0..k4 {
            // SAFETY: group `k < k4` of the run is `NR · 4 = 128` bytes at `run + k ·
            // b_stride` of `b` (caller).
            let (b0, b1) = unsafe {
                let p = b.add(run + k * b_stride);
                (
                    _mm512_loadu_si512(p.cast()),
                    _mm512_loadu_si512(p.add(64).cast()),
                )
            };
            for (r, cr) in c.iter_mut().enumerate() {
                // SAFETY: word `r` of group `k` of the run's `k4 · MR · 4` bytes (caller).
                let w = unsafe { a.add((k * MR + r) * 4).cast::<i32>().read_unaligned() };
                let w = _mm512_set1_epi32(w);
                cr[0] = _mm512_dpbusd_epi32(cr[0], b0, w);
                cr[1] = _mm512_dpbusd_epi32(cr[1], b1, w);
            }
        }
    }
    for (cr, out) in c.iter().zip(acc.iter_mut()) {
        // SAFETY: each row of `acc` is `NR = 32` i32, two vectors of 16.
        unsafe {
            _mm512_storeu_si512(out.as_mut_ptr().cast(), cr[0]);
            _mm512_storeu_si512(out.as_mut_ptr().add(16).cast(), cr[1]);
        }
    }
}

/// # Safety
/// The CPU has AVX2; `a` points at `k4 · MR · 4` readable bytes, `b` at
/// `(k4 - 1) · b_stride + NR · 4`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn acc_avx2(
    a: *const i8,
    b: *const u8,
    k4: usize,
    b_stride: usize,
    acc: &mut Acc,
) {
    let (low7, one8) = (_mm256_set1_epi8(0x7f), _mm256_set1_epi8(1));
    let (two16, one16) = (_mm256_set1_epi16(2), _mm256_set1_epi16(1));
    // Four rows and two vectors (16 columns) at a time: 8 accumulators in 16 registers.
    for rows in 0..MR / 4 {
        for half in 0..2 {
            // SAFETY: 16 i32 of each row at `16 · half`, two vectors of 8.
            let mut c: [[__m256i; 2]; 4] = std::array::from_fn(|r| unsafe {
                let p = acc[rows * 4 + r].as_ptr().add(half * 16);
                [
                    _mm256_loadu_si256(p.cast()),
                    _mm256_loadu_si256(p.add(8).cast()),
                ]
            });
            for k in 0..k4 {
                let mut hi = [_mm256_setzero_si256(); 2];
                let mut lo = [_mm256_setzero_si256(); 2];
                for v in 0..2 {
                    // SAFETY: 32 bytes at column `16 · half + 8 · v` of group `k < k4`, inside
                    // the group's 128 bytes at `k · b_stride` (caller).
                    let x = unsafe {
                        _mm256_loadu_si256(b.add(k * b_stride + (half * 16 + v * 8) * 4).cast())
                    };
                    hi[v] = _mm256_and_si256(_mm256_srli_epi16(x, 1), low7);
                    lo[v] = _mm256_and_si256(x, one8);
                }
                for (r, cr) in c.iter_mut().enumerate() {
                    // SAFETY: word `4 · rows + r < MR` of group `k < k4` of `a` (caller).
                    let w = unsafe {
                        a.add((k * MR + rows * 4 + r) * 4)
                            .cast::<i32>()
                            .read_unaligned()
                    };
                    let w = _mm256_set1_epi32(w);
                    for v in 0..2 {
                        let th = _mm256_madd_epi16(_mm256_maddubs_epi16(hi[v], w), two16);
                        let tl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo[v], w), one16);
                        cr[v] = _mm256_add_epi32(cr[v], _mm256_add_epi32(th, tl));
                    }
                }
            }
            for (r, cr) in c.iter().enumerate() {
                let out = &mut acc[rows * 4 + r][half * 16..half * 16 + 16];
                // SAFETY: `out` is 16 i32, two vectors of 8.
                unsafe {
                    _mm256_storeu_si256(out.as_mut_ptr().cast(), cr[0]);
                    _mm256_storeu_si256(out.as_mut_ptr().add(8).cast(), cr[1]);
                }
            }
        }
    }
}

/// # Safety
/// The CPU has AVX-512 F and BW; `rows <= MR`, `col0 + cols <= NR`, `rq` has `rows` rows and
/// `out` points at `(rows - 1) · ld + cols` writable bytes.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn requant_avx512(
    acc: &Acc,
    col0: usize,
    rows: usize,
    cols: usize,
    rq: &Requant<'_>,
    out: *mut u8,
    ld: usize,
) {
    let zp = _mm512_set1_epi32(rq.zp);
    let lo = _mm512_set1_ps((rq.lo - rq.zp) as f32);
    let hi = _mm512_set1_ps((rq.hi - rq.zp) as f32);
    for (r, row) in acc.iter().enumerate().take(rows) {
        let corr = _mm512_set1_epi32(rq.corr[r]);
        let mult = _mm512_set1_ps(rq.mult[r]);
        for half in 0..2 {
            let start = half * 16;
            if start >= cols {
                break;
            }
            let n = (cols - start).min(16);
            let mask: __mmask16 = if n == 16 { 0xffff } else { (1u16 << n) - 1 };
            // SAFETY: 16 i32 of the row at `col0 + start`; the lanes past `NR` are masked off
            // (`_mm512_maskz_loadu_epi32` reads only the `n` lanes asked for).
            let v =
                unsafe { _mm512_maskz_loadu_epi32(mask, row.as_ptr().add(col0 + start).cast()) };
            let f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(v, corr)), mult);
            let f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);
            let q = _mm512_add_epi32(_mm512_cvtps_epi32(f), zp);
            // SAFETY: the `n` bytes at `r · ld + start` are inside `out` (caller: `start + n
            // <= cols`).
            unsafe { _mm512_mask_cvtepi32_storeu_epi8(out.add(r * ld + start).cast(), mask, q) };
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw")]
#[allow(clippy::too_many_arguments, reason = "as depthwise_channel")]
pub(super) fn depthwise_avx512(
    plane: &[i16],
    starts: &[usize],
    taps: &[i16],
    row_step: usize,
    width: usize,
    corr: i32,
    mult: f32,
    rq: &Requant<'_>,
    acc: &mut [i32],
    out: &mut [u8],
) {
    depthwise_plain(
        plane, starts, taps, row_step, width, corr, mult, rq, acc, out,
    );
}

#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments, reason = "as depthwise_channel")]
pub(super) fn depthwise_avx2(
    plane: &[i16],
    starts: &[usize],
    taps: &[i16],
    row_step: usize,
    width: usize,
    corr: i32,
    mult: f32,
    rq: &Requant<'_>,
    acc: &mut [i32],
    out: &mut [u8],
) {
    depthwise_plain(
        plane, starts, taps, row_step, width, corr, mult, rq, acc, out,
    );
}

#[target_feature(enable = "avx512f,avx512bw")]
#[allow(clippy::too_many_arguments, reason = "as depthwise_flat")]
pub(super) fn depthwise_flat_avx512(
    plane: &[i16],
    starts: &[usize],
    taps: &[i16],
    step: usize,
    width: usize,
    corr: i32,
    mult: f32,
    rq: &Requant<'_>,
    acc: &mut [i32],
    out: &mut [u8],
) {
    depthwise_flat_plain(plane, starts, taps, step, width, corr, mult, rq, acc, out);
}

#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments, reason = "as depthwise_flat")]
pub(super) fn depthwise_flat_avx2(
    plane: &[i16],
    starts: &[usize],
    taps: &[i16],
    step: usize,
    width: usize,
    corr: i32,
    mult: f32,
    rq: &Requant<'_>,
    acc: &mut [i32],
    out: &mut [u8],
) {
    depthwise_flat_plain(plane, starts, taps, step, width, corr, mult, rq, acc, out);
}

#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn interleave4_avx512(rows: [&[u8; NR]; 4], flip: u8, out: &mut [u8; NR * 4]) {
    // SAFETY: this function runs with AVX-512 F enabled, which implies AVX2.
    unsafe { interleave4_avx2_body(rows, flip, out) }
}

#[target_feature(enable = "avx2")]
pub(super) fn interleave4_avx2(rows: [&[u8; NR]; 4], flip: u8, out: &mut [u8; NR * 4]) {
    // SAFETY: this function runs with AVX2 enabled.
    unsafe { interleave4_avx2_body(rows, flip, out) }
}

/// The unpack form of the interleave (`unpacklo/hi` of bytes, then of 16-bit pairs).
///
/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn interleave4_avx2_body(rows: [&[u8; NR]; 4], flip: u8, out: &mut [u8; NR * 4]) {
    // SAFETY: AVX2 is enabled here (the caller's contract); each row is 32 bytes, one
    // unaligned load; `out` is 128 bytes, four unaligned stores.
    unsafe {
        let f = _mm256_set1_epi8(flip as i8);
        let r: [__m256i; 4] = std::array::from_fn(|i| {
            _mm256_xor_si256(_mm256_loadu_si256(rows[i].as_ptr().cast()), f)
        });
        // Bytes of rows 0/1 and 2/3 paired, per 128-bit lane.
        let a_lo = _mm256_unpacklo_epi8(r[0], r[1]);
        let a_hi = _mm256_unpackhi_epi8(r[0], r[1]);
        let b_lo = _mm256_unpacklo_epi8(r[2], r[3]);
        let b_hi = _mm256_unpackhi_epi8(r[2], r[3]);
        // Groups of four: columns 0-3, 4-7 (lane 0), 16-19, 20-23 (lane 1) ...
        let g0 = _mm256_unpacklo_epi16(a_lo, b_lo); // cols 0..4 | 16..20
        let g1 = _mm256_unpackhi_epi16(a_lo, b_lo); // cols 4..8 | 20..24
        let g2 = _mm256_unpacklo_epi16(a_hi, b_hi); // cols 8..12 | 24..28
        let g3 = _mm256_unpackhi_epi16(a_hi, b_hi); // cols 12..16 | 28..32
        let o = out.as_mut_ptr();
        _mm256_storeu_si256(o.cast(), _mm256_permute2x128_si256(g0, g1, 0x20));
        _mm256_storeu_si256(o.add(32).cast(), _mm256_permute2x128_si256(g2, g3, 0x20));
        _mm256_storeu_si256(o.add(64).cast(), _mm256_permute2x128_si256(g0, g1, 0x31));
        _mm256_storeu_si256(o.add(96).cast(), _mm256_permute2x128_si256(g2, g3, 0x31));
    }
}

#[target_feature(enable = "avx512f,avx512bw,fma")]
pub(super) fn binary_row_avx512(op: BinaryRow, t: BinaryTypes, a: &[u8], b: &[u8], out: &mut [u8]) {
    binary_row_plain(op, t, a, b, out);
}

#[target_feature(enable = "avx2,fma")]
pub(super) fn binary_row_avx2(op: BinaryRow, t: BinaryTypes, a: &[u8], b: &[u8], out: &mut [u8]) {
    binary_row_plain(op, t, a, b, out);
}

#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn quantize_row_avx512(x: &[f32], scale: f32, zp: i32, r: (i32, i32), out: &mut [u8]) {
    quantize_row_plain(x, scale, zp, r, out);
}

#[target_feature(enable = "avx2")]
pub(super) fn quantize_row_avx2(x: &[f32], scale: f32, zp: i32, r: (i32, i32), out: &mut [u8]) {
    quantize_row_plain(x, scale, zp, r, out);
}

#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn dequantize_row_avx512(x: &[u8], flip: u8, zp: i32, scale: f32, out: &mut [f32]) {
    dequantize_row_plain(x, flip, zp, scale, out);
}

#[target_feature(enable = "avx2")]
pub(super) fn dequantize_row_avx2(x: &[u8], flip: u8, zp: i32, scale: f32, out: &mut [f32]) {
    dequantize_row_plain(x, flip, zp, scale, out);
}

#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn dequant_add_quant_avx512(op: &DequantAddQuant, a: &[u8], b: &[u8], out: &mut [u8]) {
    dequant_add_quant_plain(op, a, b, out);
}

#[target_feature(enable = "avx2")]
pub(super) fn dequant_add_quant_avx2(op: &DequantAddQuant, a: &[u8], b: &[u8], out: &mut [u8]) {
    dequant_add_quant_plain(op, a, b, out);
}

/// # Safety
/// The CPU has AVX-512 F, BW and VBMI; `x` and `out` have equal lengths.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
pub(super) unsafe fn lookup_vbmi(table: &[u8; 256], x: &[u8], out: &mut [u8]) {
    // SAFETY: four 64-byte loads inside the 256-byte table.
    let t: [__m512i; 4] =
        std::array::from_fn(|q| unsafe { _mm512_loadu_si512(table.as_ptr().add(64 * q).cast()) });
    let full = x.len() / 64 * 64;
    for i in (0..full).step_by(64) {
        // SAFETY: bytes `i .. i + 64` of `x` and `out` (`i + 64 <= full <= len`).
        unsafe {
            let v = _mm512_loadu_si512(x.as_ptr().add(i).cast());
            let lo = _mm512_permutex2var_epi8(t[0], v, t[1]);
            let hi = _mm512_permutex2var_epi8(t[2], v, t[3]);
            let r = _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi);
            _mm512_storeu_si512(out.as_mut_ptr().add(i).cast(), r);
        }
    }
    for (o, &b) in out[full..].iter_mut().zip(&x[full..]) {
        *o = table[usize::from(b)];
    }
}
