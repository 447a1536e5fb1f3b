//! The int8 kernels: the only module of CpuFast with `unsafe` (SIMD intrinsics and the
//! `#[target_feature]` functions, called only after run-time detection).
//!
//! # The product tile
//! [`tile_acc`] multiplies a panel of [`MR`] weight rows (`i8`) by a panel of [`NR`]
//! activation columns (`u8`) over `k4` groups of four `k`, exactly in `i32`;
//! [`tile_store`] requantises the result ([`Requant`]). Both panels come from `pack.rs` (or,
//! for the activations, an interleaved image whose groups are a plane apart):
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
//! # Depthwise channels
//! [`depthwise_channel`] adds each tap's products `x[i] · w` (`i16` differences from the zero
//! point, exact in `i16`: `|x - x_zp| <= 255` and `|w| <= 128`) to a row of `i32`
//! accumulators and requantises each row; plain loops compiled for AVX-512 BW, AVX2 and the
//! baseline. Likewise the element-wise rows ([`binary_row`], [`quantize_row`]).

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
    /// AVX2 and FMA.
    Avx2,
    /// Plain Rust.
    Scalar,
}

impl Isa {
    /// The best this CPU has (in unit tests: the one the test-only `FORCED` names, if any).
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
                        && is_x86_feature_detected!("fma")
                }
                Isa::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
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

/// `clamp(round_half_even(v), lo, hi)` for integer bounds within `±2^22`, as plain float
/// arithmetic that vectorises: clamping first changes nothing (the bounds are integers), and
/// adding `1.5 · 2^23` leaves the value rounded half to even in the low mantissa bits. A NaN
/// gives `lo` (`f32::max` ignores it).
#[inline(always)]
pub(crate) fn round_clamp(v: f32, lo: f32, hi: f32) -> i32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23
    let c = v.max(lo).min(hi);
    (c + MAGIC).to_bits() as i32 - MAGIC.to_bits() as i32
}

/// One output value of accumulator `acc` (the reference formula, for the scalar paths).
#[inline(always)]
pub(crate) fn requant_one(acc: i32, corr: i32, mult: f32, zp: i32, lo: i32, hi: i32) -> u8 {
    let v = round_clamp(
        acc.wrapping_add(corr) as f32 * mult,
        (lo - zp) as f32,
        (hi - zp) as f32,
    );
    // The value is in lo..=hi (within -128..=255): its low byte is the u8 or the i8.
    (v + zp) as u8
}

/// The accumulators of one tile.
pub(crate) type Acc = [[i32; NR]; MR];

/// Multiplies the weight panel `a` (`k4 · MR · 4` bytes) by the activation panel `b`
/// (`k4 · NR · 4` bytes) on `isa` and writes the requantised first `rows` rows and `cols`
/// columns to `out`, row `r` column `j` at `out[r * ld + j]`.
///
/// # Panics
/// If a panel is shorter than its dimensions say, `out` is too short for the rows and
/// columns, `rows > MR`, `cols > NR`, `rq` has fewer than `rows` rows, or `isa` is not
/// [`available`](Isa::available).
#[cfg(test)]
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
    let mut acc: Acc = [[0; NR]; MR];
    tile_acc(isa, a, b, k4, NR * 4, &mut acc, false);
    tile_store(isa, &acc, 0, rows, cols, rq, out, ld);
}

/// `acc (+)= a · b` over `k4` groups of four (`acc` is overwritten unless `accumulate`); the
/// panels as the module doc lays them out, except that the activations' groups are `b_stride` bytes
/// apart (`NR · 4` in a packed panel; a plane apart in an interleaved image).
///
/// # Panics
/// If a panel is shorter than `k4` groups or `isa` is not available.
pub(crate) fn tile_acc(
    isa: Isa,
    a: &[i8],
    b: &[u8],
    k4: usize,
    b_stride: usize,
    acc: &mut Acc,
    accumulate: bool,
) {
    assert!(a.len() >= k4 * MR * 4);
    assert!(k4 == 0 || b.len() >= (k4 - 1) * b_stride + NR * 4);
    assert!(isa.available(), "{isa:?} is not available on this CPU");
    if !accumulate {
        *acc = [[0; NR]; MR];
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512 F/BW/VNNI (asserted above); the panels hold `k4`
        // groups (asserted above), which is all the kernel reads.
        Isa::Vnni => unsafe { acc_vnni(a.as_ptr(), b.as_ptr(), k4, b_stride, acc) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (asserted above); the panels hold `k4` groups.
        Isa::Avx2 => unsafe { acc_avx2(a.as_ptr(), b.as_ptr(), k4, b_stride, acc) },
        _ => acc_scalar(a, b, k4, b_stride, acc),
    }
}

/// Requantises the first `rows` rows and the columns `col0 .. col0 + cols` of `acc` into
/// `out` (row `r` column `col0 + j` at `out[r * ld + j]`).
///
/// # Panics
/// If `out` is too short, `rq` has fewer than `rows` rows, `rows > MR`, `col0 + cols > NR`,
/// or `isa` is not available.
#[allow(
    clippy::too_many_arguments,
    reason = "the accumulators, their block, the requantisation and the output"
)]
pub(crate) fn tile_store(
    isa: Isa,
    acc: &Acc,
    col0: usize,
    rows: usize,
    cols: usize,
    rq: &Requant<'_>,
    out: &mut [u8],
    ld: usize,
) {
    assert!(rows <= MR && col0 + cols <= NR && rq.corr.len() >= rows && rq.mult.len() >= rows);
    assert!(rows == 0 || cols == 0 || out.len() >= (rows - 1) * ld + cols);
    assert!(isa.available(), "{isa:?} is not available on this CPU");
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Vnni {
        // SAFETY: the CPU has AVX-512 F/BW (asserted above); `out` holds every byte
        // written (asserted above: rows, columns, `ld`); `col0 + cols <= NR`.
        unsafe { requant_avx512(acc, col0, rows, cols, rq, out.as_mut_ptr(), ld) };
        return;
    }
    for (r, row) in acc.iter().enumerate().take(rows) {
        let o = &mut out[r * ld..r * ld + cols];
        for (o, &v) in o.iter_mut().zip(&row[col0..]) {
            *o = requant_one(v, rq.corr[r], rq.mult[r], rq.zp, rq.lo, rq.hi);
        }
    }
}

fn acc_scalar(a: &[i8], b: &[u8], k4: usize, b_stride: usize, acc: &mut Acc) {
    for k in 0..k4 {
        let (ak, bk) = (&a[k * MR * 4..][..MR * 4], &b[k * b_stride..][..NR * 4]);
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
/// The CPU has AVX-512 F, BW and VNNI; `a` points at `k4 · MR · 4` readable bytes, `b` at
/// `(k4 - 1) · b_stride + NR · 4`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn acc_vnni(a: *const i8, b: *const u8, k4: usize, b_stride: usize, acc: &mut Acc) {
    // SAFETY: each row of `acc` is `NR = 32` i32, two vectors of 16.
    let mut c: [[__m512i; 2]; MR] = std::array::from_fn(|r| unsafe {
        [
            _mm512_loadu_si512(acc[r].as_ptr().cast()),
            _mm512_loadu_si512(acc[r].as_ptr().add(16).cast()),
        ]
    });
    for k in 0..k4 {
        // SAFETY: group `k < k4` of `b` is `NR · 4 = 128` bytes at `k · b_stride` (caller).
        let (b0, b1) = unsafe {
            let p = b.add(k * b_stride);
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
/// The CPU has AVX2; `a` points at `k4 · MR · 4` readable bytes, `b` at
/// `(k4 - 1) · b_stride + NR · 4`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn acc_avx2(a: *const i8, b: *const u8, k4: usize, b_stride: usize, acc: &mut Acc) {
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
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn requant_avx512(
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

/// One output channel of a depthwise convolution: for every output row `oy`,
/// `acc[ox] = Σ_taps plane[starts[tap] + oy · row_step + ox] · w[tap]` (products exact in
/// `i16`, see the module doc), then requantised with `corr` (the bias) and `mult` into row
/// `oy` of `out` (`width` bytes a row).
#[allow(
    clippy::too_many_arguments,
    reason = "the plane, its taps, the geometry and the requantisation"
)]
pub(crate) fn depthwise_channel(
    isa: Isa,
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
    assert!(isa.available(), "{isa:?} is not available on this CPU");
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512 F/BW (asserted above).
        Isa::Vnni => unsafe {
            depthwise_avx512(
                plane, starts, taps, row_step, width, corr, mult, rq, acc, out,
            )
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (asserted above).
        Isa::Avx2 => unsafe {
            depthwise_avx2(
                plane, starts, taps, row_step, width, corr, mult, rq, acc, out,
            )
        },
        _ => depthwise_plain(
            plane, starts, taps, row_step, width, corr, mult, rq, acc, out,
        ),
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments, reason = "as depthwise_channel")]
fn depthwise_plain(
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
    let acc = &mut acc[..width];
    for (oy, o) in out.chunks_exact_mut(width).enumerate() {
        acc.fill(0);
        for (&start, &w) in starts.iter().zip(taps) {
            let x = &plane[start + oy * row_step..start + oy * row_step + width];
            for (a, &v) in acc.iter_mut().zip(x) {
                *a = a.wrapping_add(i32::from(v.wrapping_mul(w)));
            }
        }
        requant_row_plain(acc, corr, mult, rq, o);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
#[allow(clippy::too_many_arguments, reason = "as depthwise_channel")]
fn depthwise_avx512(
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

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments, reason = "as depthwise_channel")]
fn depthwise_avx2(
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

#[inline(always)]
fn requant_row_plain(acc: &[i32], corr: i32, mult: f32, rq: &Requant, out: &mut [u8]) {
    for (o, &a) in out.iter_mut().zip(acc) {
        *o = requant_one(a, corr, mult, rq.zp, rq.lo, rq.hi);
    }
}

/// A stride-1 depthwise channel as one flat run: `acc[i] = Σ_taps plane[starts[tap] + i] ·
/// w[tap]` for `i < len` (a padded-width grid: outputs at `oy · step + ox`, the columns past
/// the output width are discarded), then output row `oy` is requantised from
/// `acc[oy · step ..][.. width]` into `out[oy · width ..]`.
#[allow(
    clippy::too_many_arguments,
    reason = "the plane, its taps, the geometry and the requantisation"
)]
pub(crate) fn depthwise_flat(
    isa: Isa,
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
    assert!(isa.available(), "{isa:?} is not available on this CPU");
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512 F/BW (asserted above).
        Isa::Vnni => unsafe {
            depthwise_flat_avx512(plane, starts, taps, step, width, corr, mult, rq, acc, out)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (asserted above).
        Isa::Avx2 => unsafe {
            depthwise_flat_avx2(plane, starts, taps, step, width, corr, mult, rq, acc, out)
        },
        _ => depthwise_flat_plain(plane, starts, taps, step, width, corr, mult, rq, acc, out),
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments, reason = "as depthwise_flat")]
fn depthwise_flat_plain(
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
    let rows = out.len() / width.max(1);
    let len = (rows.max(1) - 1) * step + width;
    let acc = &mut acc[..len];
    acc.fill(0);
    for (&start, &w) in starts.iter().zip(taps) {
        for (a, &v) in acc.iter_mut().zip(&plane[start..start + len]) {
            *a = a.wrapping_add(i32::from(v.wrapping_mul(w)));
        }
    }
    for (oy, o) in out.chunks_exact_mut(width).enumerate() {
        requant_row_plain(&acc[oy * step..oy * step + width], corr, mult, rq, o);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
#[allow(clippy::too_many_arguments, reason = "as depthwise_flat")]
fn depthwise_flat_avx512(
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

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments, reason = "as depthwise_flat")]
fn depthwise_flat_avx2(
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

/// Interleaves four rows of [`NR`] bytes into `out` (`out[4 · j + r] = rows[r][j] ^ flip`):
/// one group of an activation panel.
pub(crate) fn interleave4(isa: Isa, rows: [&[u8; NR]; 4], flip: u8, out: &mut [u8; NR * 4]) {
    assert!(isa.available(), "{isa:?} is not available on this CPU");
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512 F/BW (asserted above).
        Isa::Vnni => unsafe { interleave4_avx512(rows, flip, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (asserted above).
        Isa::Avx2 => unsafe { interleave4_avx2(rows, flip, out) },
        _ => interleave4_plain(rows, flip, out),
    }
}

#[inline(always)]
fn interleave4_plain(rows: [&[u8; NR]; 4], flip: u8, out: &mut [u8; NR * 4]) {
    for (j, o) in out.chunks_exact_mut(4).enumerate() {
        o[0] = rows[0][j] ^ flip;
        o[1] = rows[1][j] ^ flip;
        o[2] = rows[2][j] ^ flip;
        o[3] = rows[3][j] ^ flip;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
fn interleave4_avx512(rows: [&[u8; NR]; 4], flip: u8, out: &mut [u8; NR * 4]) {
    // SAFETY: this function runs with AVX-512 F enabled, which implies AVX2.
    unsafe { interleave4_avx2_body(rows, flip, out) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn interleave4_avx2(rows: [&[u8; NR]; 4], flip: u8, out: &mut [u8; NR * 4]) {
    // SAFETY: this function runs with AVX2 enabled.
    unsafe { interleave4_avx2_body(rows, flip, out) }
}

/// The unpack form of the interleave (`unpacklo/hi` of bytes, then of 16-bit pairs).
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn interleave4_avx2_body(rows: [&[u8; NR]; 4], flip: u8, out: &mut [u8; NR * 4]) {
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

/// The arithmetic of one quantised `Add`/`Mul` row (onnxruntime's, as CpuRef's
/// `quantized/binary.rs` documents it), on raw stored values read through `flip` (0x80 for
/// `i8` storage: the value is then `byte ^ 0x80` minus 128, folded into the constants).
#[derive(Debug, Clone, Copy)]
pub(crate) enum BinaryRow {
    /// `fma(a, ra, fma(b, rb, fixed))`, both varying.
    AddVectors { ra: f32, rb: f32, fixed: f32 },
    /// `fma(a, ra, fixed + b · rb)`, `b` one value along the row.
    AddScalarB { ra: f32, rb: f32, fixed: f32 },
    /// `fma(b, rb, fixed + a · ra)`, `a` one value along the row.
    AddScalarA { ra: f32, rb: f32, fixed: f32 },
    /// `((a - za) · (b - zb)) as f32 · ratio + zc`.
    Mul {
        za: i32,
        zb: i32,
        ratio: f32,
        zc: f32,
    },
}

/// The signedness of the three tensors of a binary row and the output range.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BinaryTypes {
    /// `a` stored as `i8`.
    pub(crate) a_signed: bool,
    /// `b` stored as `i8`.
    pub(crate) b_signed: bool,
    /// The smallest output value.
    pub(crate) lo: i32,
    /// The largest output value.
    pub(crate) hi: i32,
}

/// `out[i] = op(a[i or 0], b[i or 0])` (an operand of one element is broadcast along the
/// row), rounded half to even and saturated to `types`' range.
pub(crate) fn binary_row(
    isa: Isa,
    op: BinaryRow,
    t: BinaryTypes,
    a: &[u8],
    b: &[u8],
    out: &mut [u8],
) {
    assert!(isa.available(), "{isa:?} is not available on this CPU");
    assert!(a.len() == out.len() || a.len() == 1);
    assert!(b.len() == out.len() || b.len() == 1);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512 F/BW (asserted above).
        Isa::Vnni => unsafe { binary_row_avx512(op, t, a, b, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 and FMA (`available` checks both for `Avx2`).
        Isa::Avx2 => unsafe { binary_row_avx2(op, t, a, b, out) },
        _ => binary_row_plain(op, t, a, b, out),
    }
}

#[inline(always)]
fn binary_row_plain(op: BinaryRow, t: BinaryTypes, a: &[u8], b: &[u8], out: &mut [u8]) {
    match op {
        BinaryRow::AddVectors { ra, rb, fixed } => binary_loop(t, a, b, out, |qa, qb| {
            (qa as f32).mul_add(ra, (qb as f32).mul_add(rb, fixed))
        }),
        BinaryRow::AddScalarB { ra, rb, fixed } => binary_loop(t, a, b, out, |qa, qb| {
            (qa as f32).mul_add(ra, fixed + qb as f32 * rb)
        }),
        BinaryRow::AddScalarA { ra, rb, fixed } => binary_loop(t, a, b, out, |qa, qb| {
            (qb as f32).mul_add(rb, fixed + qa as f32 * ra)
        }),
        BinaryRow::Mul { za, zb, ratio, zc } => binary_loop(t, a, b, out, |qa, qb| {
            ((qa - za) * (qb - zb)) as f32 * ratio + zc
        }),
    }
}

/// `out[i] = round_clamp(f(a[i], b[i]))` of the raw values, an operand of one element
/// broadcast.
#[inline(always)]
fn binary_loop(t: BinaryTypes, a: &[u8], b: &[u8], out: &mut [u8], f: impl Fn(i32, i32) -> f32) {
    let (lo, hi) = (t.lo as f32, t.hi as f32);
    // A stored byte's value: `(byte ^ flip) - shift` (an `i8` is its byte XOR 0x80, minus 128).
    let read = |signed: bool, v: u8| {
        let (flip, shift) = if signed { (0x80u8, 128i32) } else { (0, 0) };
        i32::from(v ^ flip) - shift
    };
    let (sa, sb) = (t.a_signed, t.b_signed);
    let g = |x: i32, y: i32| round_clamp(f(x, y), lo, hi) as u8;
    match (
        a.len() == 1 && out.len() != 1,
        b.len() == 1 && out.len() != 1,
    ) {
        (false, false) => {
            for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                *o = g(read(sa, x), read(sb, y));
            }
        }
        (true, false) => {
            let x = read(sa, a[0]);
            for (o, &y) in out.iter_mut().zip(b) {
                *o = g(x, read(sb, y));
            }
        }
        (false, true) => {
            let y = read(sb, b[0]);
            for (o, &x) in out.iter_mut().zip(a) {
                *o = g(read(sa, x), y);
            }
        }
        (true, true) => out.fill(g(read(sa, a[0]), read(sb, b[0]))),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,fma")]
fn binary_row_avx512(op: BinaryRow, t: BinaryTypes, a: &[u8], b: &[u8], out: &mut [u8]) {
    binary_row_plain(op, t, a, b, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn binary_row_avx2(op: BinaryRow, t: BinaryTypes, a: &[u8], b: &[u8], out: &mut [u8]) {
    binary_row_plain(op, t, a, b, out);
}

/// ONNX `QuantizeLinear` per tensor: `out[i] = saturate(round_half_even(x[i] / scale) + zp)`
/// (the division in f32; a NaN gives `zp`), to `lo..=hi`.
pub(crate) fn quantize_row(
    isa: Isa,
    x: &[f32],
    scale: f32,
    zp: i32,
    (lo, hi): (i32, i32),
    out: &mut [u8],
) {
    assert!(isa.available(), "{isa:?} is not available on this CPU");
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512 F/BW (asserted above).
        Isa::Vnni => unsafe { quantize_row_avx512(x, scale, zp, (lo, hi), out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (asserted above).
        Isa::Avx2 => unsafe { quantize_row_avx2(x, scale, zp, (lo, hi), out) },
        _ => quantize_row_plain(x, scale, zp, (lo, hi), out),
    }
}

#[inline(always)]
fn quantize_row_plain(x: &[f32], scale: f32, zp: i32, (lo, hi): (i32, i32), out: &mut [u8]) {
    let (l, h) = ((lo - zp) as f32, (hi - zp) as f32);
    for (o, &v) in out.iter_mut().zip(x) {
        // A NaN quantises to the zero point.
        let q = v / scale;
        let q = if q.is_nan() { 0.0 } else { q };
        *o = (round_clamp(q, l, h) + zp) as u8;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
fn quantize_row_avx512(x: &[f32], scale: f32, zp: i32, r: (i32, i32), out: &mut [u8]) {
    quantize_row_plain(x, scale, zp, r, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn quantize_row_avx2(x: &[f32], scale: f32, zp: i32, r: (i32, i32), out: &mut [u8]) {
    quantize_row_plain(x, scale, zp, r, out);
}

/// ONNX `DequantizeLinear` per tensor: `out[i] = ((x[i] ^ flip) - zp) as f32 · scale`, `flip`
/// 0x80 and `zp` moved by 128 for `i8` storage.
pub(crate) fn dequantize_row(isa: Isa, x: &[u8], flip: u8, zp: i32, scale: f32, out: &mut [f32]) {
    assert!(isa.available(), "{isa:?} is not available on this CPU");
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512 F/BW (asserted above).
        Isa::Vnni => unsafe { dequantize_row_avx512(x, flip, zp, scale, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (asserted above).
        Isa::Avx2 => unsafe { dequantize_row_avx2(x, flip, zp, scale, out) },
        _ => dequantize_row_plain(x, flip, zp, scale, out),
    }
}

#[inline(always)]
fn dequantize_row_plain(x: &[u8], flip: u8, zp: i32, scale: f32, out: &mut [f32]) {
    for (o, &q) in out.iter_mut().zip(x) {
        *o = (i32::from(q ^ flip) - zp) as f32 * scale;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
fn dequantize_row_avx512(x: &[u8], flip: u8, zp: i32, scale: f32, out: &mut [f32]) {
    dequantize_row_plain(x, flip, zp, scale, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dequantize_row_avx2(x: &[u8], flip: u8, zp: i32, scale: f32, out: &mut [f32]) {
    dequantize_row_plain(x, flip, zp, scale, out);
}

/// `Quantize(ReLU?(Dequantize(a) + Dequantize(b)))` of one row, each step in f32 as the
/// separate layers compute it: `(q - zp) as f32 · scale` for each input (an `i8` input read
/// through `flip`, its zero point moved by 128), one f32 addition, `max(v, 0)` when `relu`,
/// then `round_half_even(v / y_scale) + y_zp`, saturated to `lo..=hi`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DequantAddQuant {
    /// `(flip, zero point as u8, scale)` of `a`.
    pub(crate) a: (u8, i32, f32),
    /// The same for `b`.
    pub(crate) b: (u8, i32, f32),
    /// Whether a ReLU follows the addition.
    pub(crate) relu: bool,
    /// The output scale.
    pub(crate) y_scale: f32,
    /// The output zero point.
    pub(crate) y_zp: i32,
    /// The output range.
    pub(crate) lo: i32,
    /// See `lo`.
    pub(crate) hi: i32,
}

/// [`DequantAddQuant`] over rows `a`, `b` into `out` (equal lengths).
pub(crate) fn dequant_add_quant_row(
    isa: Isa,
    op: &DequantAddQuant,
    a: &[u8],
    b: &[u8],
    out: &mut [u8],
) {
    assert!(isa.available(), "{isa:?} is not available on this CPU");
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512 F/BW (asserted above).
        Isa::Vnni => unsafe { dequant_add_quant_avx512(op, a, b, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (asserted above).
        Isa::Avx2 => unsafe { dequant_add_quant_avx2(op, a, b, out) },
        _ => dequant_add_quant_plain(op, a, b, out),
    }
}

#[inline(always)]
fn dequant_add_quant_plain(op: &DequantAddQuant, a: &[u8], b: &[u8], out: &mut [u8]) {
    let ((fa, za, sa), (fb, zb, sb)) = (op.a, op.b);
    let (l, h) = ((op.lo - op.y_zp) as f32, (op.hi - op.y_zp) as f32);
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        let ra = (i32::from(x ^ fa) - za) as f32 * sa;
        let rb = (i32::from(y ^ fb) - zb) as f32 * sb;
        let mut v = ra + rb;
        if op.relu {
            v = v.max(0.0);
        }
        *o = (round_clamp(v / op.y_scale, l, h) + op.y_zp) as u8;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
fn dequant_add_quant_avx512(op: &DequantAddQuant, a: &[u8], b: &[u8], out: &mut [u8]) {
    dequant_add_quant_plain(op, a, b, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dequant_add_quant_avx2(op: &DequantAddQuant, a: &[u8], b: &[u8], out: &mut [u8]) {
    dequant_add_quant_plain(op, a, b, out);
}

/// `out[i] = table[x[i]]`: with AVX-512 VBMI (checked here, apart from [`Isa`]), 64 bytes at a
/// time by two two-register byte permutes (`vpermi2b`, the low seven bits of each byte) and a
/// blend on its top bit; else a plain loop.
pub(crate) fn lookup_row(isa: Isa, table: &[u8; 256], x: &[u8], out: &mut [u8]) {
    assert_eq!(x.len(), out.len());
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Vnni && is_x86_feature_detected!("avx512vbmi") && isa.available() {
        // SAFETY: the CPU has AVX-512 F/BW (`Isa::Vnni` is available) and VBMI (checked).
        unsafe { lookup_vbmi(table, x, out) };
        return;
    }
    let _ = isa;
    for (o, &b) in out.iter_mut().zip(x) {
        *o = table[usize::from(b)];
    }
}

/// # Safety
/// The CPU has AVX-512 F, BW and VBMI; `x` and `out` have equal lengths.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
unsafe fn lookup_vbmi(table: &[u8; 256], x: &[u8], out: &mut [u8]) {
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
