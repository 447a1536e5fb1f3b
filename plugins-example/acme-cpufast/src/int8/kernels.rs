//! The int8 kernels: the only module of CpuFast with `unsafe` (SIMD intrinsics and the
//! `#[target_feature]` functions, called only after run-time detection).
//!
//! # The product tile
//! [`tile`] multiplies a panel of [`MR`] weight rows (`i8`) by a panel of [`NR`] activation
//! columns (`u8`) over `k4` groups of four `k`, exactly in `i32`, and requantises the result
//! ([`Requant`]). Both panels come from `pack.rs`:
//! - weights: `[k4][MR][4]` bytes, a row's four consecutive `k` as one 32-bit word;
//! - activations: `[k4][NR][4]` bytes, a column's four consecutive `k` as one 32-bit word.
//!
//! So lane `j` of a 32-bit vector holds column `j`'s four bytes, and one broadcast word of
//! the weights multiplies them all:
//! - [`Isa::Vnni`] (AVX-512 F/BW and VNNI): `_mm512_dpbusd_epi32` adds the four `u8 × s8`
//!   products of each lane to its `i32` accumulator, without saturation;
//! - [`Isa::Avx2`]: `_mm256_maddubs_epi16` adds *pairs* of `u8 × s8` products into `i16` and
//!   saturates: `255 · 127 · 2` does not fit. CpuFast splits each activation byte
//!   `x = 2 · (x >> 1) + (x & 1)`: a pair of `(x >> 1) · w` lies in `[-32512, 32258]` and a
//!   pair of `(x & 1) · w` in `[-256, 254]`, both inside `i16`, so neither `maddubs`
//!   saturates; `_mm256_madd_epi16` by 2 and by 1 widens them to `i32` and adds the pairs
//!   (the test `avx2_never_saturates` runs the extremes);
//! - [`Isa::Scalar`]: the same sums in plain Rust.
//!
//! The accumulators wrap on `i32` overflow, as the reference's do (`wrapping_add`).
//!
//! # Requantisation
//! `y = clamp(round_half_even((acc + corr[r]) as f32 · mult[r]), lo - zp, hi - zp) + zp`,
//! the clamp in f32 before the conversion (so a huge value saturates) — the reference's
//! formula; `_mm512_cvtps_epi32` and `_mm256_cvtps_epi32` round half to even under the
//! default MXCSR, which Rust code never changes. `corr[r]` folds the bias and the
//! activation zero point's share (`bias - x_zp · Σ_k w[r, k]`).
//!
//! # Depthwise rows
//! [`depthwise_row`] adds one tap's products `x[i] · w` (`i16` differences from the zero
//! point, exact in `i16`: `|x - x_zp| <= 255` and `|w| <= 128`) to a row of `i32`
//! accumulators; it is one plain loop compiled for AVX-512 BW, AVX2 and the baseline.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[cfg(test)]
thread_local! {
    /// The instruction set the workloads a test creates on this thread use.
    pub(crate) static FORCED: std::cell::Cell<Option<Isa>> = const { std::cell::Cell::new(None) };
}

/// Weight rows of one tile.
pub(crate) const MR: usize = 8;
/// Activation columns of one tile.
pub(crate) const NR: usize = 32;

/// The instruction set a product runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isa {
    /// AVX-512 F, BW and VNNI.
    Vnni,
    /// AVX2.
    Avx2,
    /// Plain Rust.
    Scalar,
}

impl Isa {
    /// The best this CPU has (in unit tests: the one [`FORCED`] names, if any).
    pub(crate) fn detect() -> Self {
        #[cfg(test)]
        if let Some(isa) = FORCED.get() {
            return isa;
        }
        [Isa::Vnni, Isa::Avx2]
            .into_iter()
            .find(|i| i.available())
            .unwrap_or(Isa::Scalar)
    }

    /// Whether this CPU runs `self`.
    pub(crate) fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                Isa::Vnni => {
                    is_x86_feature_detected!("avx512f")
                        && is_x86_feature_detected!("avx512bw")
                        && is_x86_feature_detected!("avx512vnni")
                }
                Isa::Avx2 => is_x86_feature_detected!("avx2"),
                Isa::Scalar => true,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Isa::Scalar
        }
    }
}

/// The requantisation of a tile's rows (see the module doc): `corr` and `mult` hold one
/// value per row of the tile, `zp` is the output's zero point, `lo..=hi` the range the
/// result is clamped to (the type's, narrowed by a fused clamp).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Requant<'a> {
    /// `bias - x_zp · Σ w` per row.
    pub(crate) corr: &'a [i32],
    /// `(x_scale · w_scale) / y_scale` per row.
    pub(crate) mult: &'a [f32],
    /// The output zero point.
    pub(crate) zp: i32,
    /// The smallest output value.
    pub(crate) lo: i32,
    /// The largest output value.
    pub(crate) hi: i32,
}

/// One output value of accumulator `acc` (the reference formula, for the scalar paths).
#[inline(always)]
pub(crate) fn requant_one(acc: i32, corr: i32, mult: f32, zp: i32, lo: i32, hi: i32) -> u8 {
    let v = (acc.wrapping_add(corr) as f32 * mult)
        .round_ties_even()
        .clamp((lo - zp) as f32, (hi - zp) as f32);
    // The value is in lo..=hi (within -128..=255): its low byte is the u8 or the i8.
    (v as i32 + zp) as u8
}

/// The accumulators of one tile.
type Acc = [[i32; NR]; MR];

/// Multiplies the weight panel `a` (`k4 · MR · 4` bytes) by the activation panel `b`
/// (`k4 · NR · 4` bytes) on `isa` and writes the requantised first `rows` rows and `cols`
/// columns to `out`, row `r` column `j` at `out[r * ld + j]`.
///
/// # Panics
/// If a panel is shorter than its dimensions say, `out` is too short for the rows and
/// columns, `rows > MR`, `cols > NR`, `rq` has fewer than `rows` rows, or `isa` is not
/// [`available`](Isa::available).
#[allow(
    clippy::too_many_arguments,
    reason = "a micro-kernel's operands, sizes and output"
)]
pub(crate) fn tile(
    isa: Isa,
    a: &[i8],
    b: &[u8],
    k4: usize,
    rows: usize,
    cols: usize,
    rq: &Requant<'_>,
    out: &mut [u8],
    ld: usize,
) {
    assert!(a.len() >= k4 * MR * 4 && b.len() >= k4 * NR * 4);
    assert!(rows <= MR && cols <= NR && rq.corr.len() >= rows && rq.mult.len() >= rows);
    assert!(rows == 0 || cols == 0 || out.len() >= (rows - 1) * ld + cols);
    assert!(isa.available(), "{isa:?} is not available on this CPU");
    let mut acc: Acc = [[0; NR]; MR];
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Vnni => {
            // SAFETY: the CPU has AVX-512 F/BW/VNNI (asserted above); the panels hold
            // `k4` groups (asserted above), which is all the kernel reads.
            unsafe { acc_vnni(a.as_ptr(), b.as_ptr(), k4, &mut acc) };
            // SAFETY: the CPU has AVX-512 F/BW (asserted above); `out` holds every byte
            // written (asserted above: rows, columns, `ld`).
            unsafe { requant_avx512(&acc, rows, cols, rq, out.as_mut_ptr(), ld) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // SAFETY: the CPU has AVX2 (asserted above); the panels hold `k4` groups.
            unsafe { acc_avx2(a.as_ptr(), b.as_ptr(), k4, &mut acc) };
        }
        _ => acc_scalar(a, b, k4, &mut acc),
    }
    for (r, row) in acc.iter().enumerate().take(rows) {
        let o = &mut out[r * ld..r * ld + cols];
        for (o, &v) in o.iter_mut().zip(row) {
            *o = requant_one(v, rq.corr[r], rq.mult[r], rq.zp, rq.lo, rq.hi);
        }
    }
}

fn acc_scalar(a: &[i8], b: &[u8], k4: usize, acc: &mut Acc) {
    for k in 0..k4 {
        let (ak, bk) = (&a[k * MR * 4..][..MR * 4], &b[k * NR * 4..][..NR * 4]);
        for (r, row) in acc.iter_mut().enumerate() {
            let w = &ak[r * 4..r * 4 + 4];
            for (j, v) in row.iter_mut().enumerate() {
                let x = &bk[j * 4..j * 4 + 4];
                let s: i32 = (0..4).map(|q| i32::from(x[q]) * i32::from(w[q])).sum();
                *v = v.wrapping_add(s);
            }
        }
    }
}

/// # Safety
/// The CPU has AVX-512 F, BW and VNNI; `a` and `b` point at `k4 · MR · 4` and `k4 · NR · 4`
/// readable bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn acc_vnni(a: *const i8, b: *const u8, k4: usize, acc: &mut Acc) {
    let mut c = [[_mm512_setzero_si512(); 2]; MR];
    for k in 0..k4 {
        // SAFETY: group `k < k4` of `b` is `NR · 4 = 128` bytes at `k · 128` (caller).
        let (b0, b1) = unsafe {
            let p = b.add(k * NR * 4);
            (
                _mm512_loadu_si512(p.cast()),
                _mm512_loadu_si512(p.add(64).cast()),
            )
        };
        for (r, cr) in c.iter_mut().enumerate() {
            // SAFETY: word `r` of group `k` of `a`, inside its `k4 · MR · 4` bytes (caller).
            let w = unsafe { a.add((k * MR + r) * 4).cast::<i32>().read_unaligned() };
            let w = _mm512_set1_epi32(w);
            cr[0] = _mm512_dpbusd_epi32(cr[0], b0, w);
            cr[1] = _mm512_dpbusd_epi32(cr[1], b1, w);
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
/// The CPU has AVX2; `a` and `b` point at `k4 · MR · 4` and `k4 · NR · 4` readable bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn acc_avx2(a: *const i8, b: *const u8, k4: usize, acc: &mut Acc) {
    let (low7, one8) = (_mm256_set1_epi8(0x7f), _mm256_set1_epi8(1));
    let (two16, one16) = (_mm256_set1_epi16(2), _mm256_set1_epi16(1));
    // Four rows and two vectors (16 columns) at a time: 8 accumulators in 16 registers.
    for rows in 0..MR / 4 {
        for half in 0..2 {
            let mut c = [[_mm256_setzero_si256(); 2]; 4];
            for k in 0..k4 {
                let mut hi = [_mm256_setzero_si256(); 2];
                let mut lo = [_mm256_setzero_si256(); 2];
                for v in 0..2 {
                    // SAFETY: 32 bytes at column `16 · half + 8 · v` of group `k < k4`, inside
                    // the group's 128 bytes (caller).
                    let x = unsafe {
                        _mm256_loadu_si256(b.add(k * NR * 4 + (half * 16 + v * 8) * 4).cast())
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
/// The CPU has AVX-512 F and BW; `rows <= MR`, `cols <= NR`, `rq` has `rows` rows and `out`
/// points at `(rows - 1) · ld + cols` writable bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn requant_avx512(
    acc: &Acc,
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
            // SAFETY: 16 i32 of the row at `start <= 16`.
            let v = unsafe { _mm512_loadu_si512(row.as_ptr().add(start).cast()) };
            let f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(v, corr)), mult);
            let f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);
            let q = _mm512_add_epi32(_mm512_cvtps_epi32(f), zp);
            // SAFETY: the `n` bytes at `r · ld + start` are inside `out` (caller: `start + n
            // <= cols`).
            unsafe { _mm512_mask_cvtepi32_storeu_epi8(out.add(r * ld + start).cast(), mask, q) };
        }
    }
}

/// `acc[i] += x[i] · w` for every `i` (`x` and `acc` of equal length; the product is exact
/// in `i16`, see the module doc), on the best instruction set of `isa`'s.
pub(crate) fn depthwise_row(isa: Isa, acc: &mut [i32], x: &[i16], w: i16) {
    assert!(isa.available(), "{isa:?} is not available on this CPU");
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512 F/BW (asserted above).
        Isa::Vnni => unsafe { depthwise_row_avx512(acc, x, w) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (asserted above).
        Isa::Avx2 => unsafe { depthwise_row_avx2(acc, x, w) },
        _ => depthwise_row_plain(acc, x, w),
    }
}

#[inline(always)]
fn depthwise_row_plain(acc: &mut [i32], x: &[i16], w: i16) {
    for (a, &v) in acc.iter_mut().zip(x) {
        *a = a.wrapping_add(i32::from(v.wrapping_mul(w)));
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
fn depthwise_row_avx512(acc: &mut [i32], x: &[i16], w: i16) {
    depthwise_row_plain(acc, x, w);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn depthwise_row_avx2(acc: &mut [i32], x: &[i16], w: i16) {
    depthwise_row_plain(acc, x, w);
}

/// Requantises a row of accumulators of one channel into `out` (see the module doc).
pub(crate) fn requant_row(
    isa: Isa,
    acc: &[i32],
    corr: i32,
    mult: f32,
    rq: &Requant,
    out: &mut [u8],
) {
    assert!(isa.available(), "{isa:?} is not available on this CPU");
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512 F/BW (asserted above).
        Isa::Vnni => unsafe { requant_row_avx512(acc, corr, mult, rq, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (asserted above).
        Isa::Avx2 => unsafe { requant_row_avx2(acc, corr, mult, rq, out) },
        _ => requant_row_plain(acc, corr, mult, rq, out),
    }
}

#[inline(always)]
fn requant_row_plain(acc: &[i32], corr: i32, mult: f32, rq: &Requant, out: &mut [u8]) {
    for (o, &a) in out.iter_mut().zip(acc) {
        *o = requant_one(a, corr, mult, rq.zp, rq.lo, rq.hi);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
fn requant_row_avx512(acc: &[i32], corr: i32, mult: f32, rq: &Requant, out: &mut [u8]) {
    requant_row_plain(acc, corr, mult, rq, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn requant_row_avx2(acc: &[i32], corr: i32, mult: f32, rq: &Requant, out: &mut [u8]) {
    requant_row_plain(acc, corr, mult, rq, out);
}
