//! The int8 kernels: the only module of CpuFast with `unsafe` (SIMD intrinsics and the
//! `#[target_feature]` functions, called only after run-time detection). This file holds
//! the instruction sets ([`Isa`]), the dispatch and the plain forms; `x86.rs` the x86-64
//! kernels, `arm.rs` the aarch64 ones (its module doc explains its three products).
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
//! - [`Isa::I8mm`], [`Isa::Dot`], [`Isa::Neon`] (aarch64): `usmmla` on pairs of groups,
//!   `sdot` by element with the activations read as `x - 128` and `128 · Σ w` added back,
//!   and `smull`/`sadalp` widening products (`arm.rs`);
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
//! baseline (on aarch64 the baseline is NEON, which the compiler vectorises them for).
//! Likewise the element-wise rows ([`binary_row`], [`quantize_row`]).

#[cfg(target_arch = "aarch64")]
mod arm;
#[cfg(target_arch = "x86_64")]
mod x86;

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
    /// x86-64: AVX-512 F, BW and VNNI.
    Vnni,
    /// x86-64: AVX2 and FMA.
    Avx2,
    /// aarch64: FEAT_I8MM (`usmmla`; the CPU has NEON, the aarch64 baseline).
    I8mm,
    /// aarch64: FEAT_DotProd (`sdot`).
    Dot,
    /// aarch64: NEON alone (widening multiplies).
    Neon,
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
        Isa::ALL
            .into_iter()
            .find(|i| i.available())
            .unwrap_or(Isa::Scalar)
    }

    /// The name the capability [`INT8_KERNELS`](crate::backend::INT8_KERNELS) reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Isa::Vnni => "Avx512Vnni",
            Isa::Avx2 => "Avx2",
            Isa::I8mm => "I8mm",
            Isa::Dot => "DotProd",
            Isa::Neon => "Neon",
            Isa::Scalar => "Scalar",
        }
    }

    /// Every instruction set, best first (on any one CPU: those of its architecture, then
    /// [`Isa::Scalar`]).
    pub(crate) const ALL: [Isa; 6] = [
        Isa::Vnni,
        Isa::Avx2,
        Isa::I8mm,
        Isa::Dot,
        Isa::Neon,
        Isa::Scalar,
    ];

    /// Whether this CPU runs `self`: the features are detected once per process, and every
    /// kernel call asserts this before its `unsafe` dispatch, so it is one load and a bit test.
    pub(crate) fn available(self) -> bool {
        static DETECTED: std::sync::OnceLock<u8> = std::sync::OnceLock::new();
        let mask = DETECTED.get_or_init(|| {
            Isa::ALL
                .iter()
                .filter(|isa| isa.detected())
                .fold(0u8, |m, &isa| m | 1 << isa as u8)
        });
        mask & (1 << self as u8) != 0
    }

    /// Whether this CPU has the features `self` needs, asked of the standard library.
    fn detected(self) -> bool {
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
                Isa::I8mm | Isa::Dot | Isa::Neon => false,
                Isa::Scalar => true,
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            match self {
                Isa::I8mm => std::arch::is_aarch64_feature_detected!("i8mm"),
                Isa::Dot => std::arch::is_aarch64_feature_detected!("dotprod"),
                Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
                Isa::Vnni | Isa::Avx2 => false,
                Isa::Scalar => true,
            }
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
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
/// gives `lo`. The clamp is written as comparisons, not `f32::max`/`min` (whose NaN rule costs
/// a compare and a blend per vector): `v > lo` is false for a NaN, so it takes `lo`, and each
/// comparison is one `maxps`/`minps`.
#[inline(always)]
pub(crate) fn round_clamp(v: f32, lo: f32, hi: f32) -> i32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23
    let c = if v > lo { v } else { lo };
    let c = if c < hi { c } else { hi };
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
    tile_acc_runs(isa, a, b, &[0], k4, b_stride, acc, accumulate);
}

/// [`tile_acc`] over several runs of `k4` groups, the accumulators kept in registers between
/// them where the kernel can: run `i` multiplies the weights' groups `i · k4 ..` by the
/// activations' groups at `b[runs[i] ..]` (`b_stride` bytes apart). An implicit convolution's
/// taps are such runs: each reads the same image at its own shift.
///
/// # Panics
/// If `a` is shorter than `runs.len() · k4` groups, a run's groups reach past `b`, or `isa` is
/// not available.
#[allow(
    clippy::too_many_arguments,
    reason = "a micro-kernel's operands, their runs and the accumulators"
)]
pub(crate) fn tile_acc_runs(
    isa: Isa,
    a: &[i8],
    b: &[u8],
    runs: &[usize],
    k4: usize,
    b_stride: usize,
    acc: &mut Acc,
    accumulate: bool,
) {
    assert!(a.len() >= runs.len() * k4 * MR * 4);
    assert!(
        k4 == 0
            || runs
                .iter()
                .all(|&run| b.len() >= run + (k4 - 1) * b_stride + NR * 4)
    );
    assert!(isa.available(), "{isa:?} is not available on this CPU");
    if !accumulate {
        *acc = [[0; NR]; MR];
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Vnni {
        // SAFETY: the CPU has AVX-512 F/BW/VNNI (asserted above); `a` holds every run's `k4`
        // groups and `b` every run's groups (asserted above), which is all the kernel reads.
        unsafe { x86::acc_vnni(a.as_ptr(), b.as_ptr(), runs, k4, b_stride, acc) };
        return;
    }
    for (i, &run) in runs.iter().enumerate() {
        let (a, b) = (&a[i * k4 * MR * 4..], &b[run..]);
        tile_acc_one(isa, a, b, k4, b_stride, acc);
    }
}

/// `acc += a · b` over `k4` groups on `isa` (one run of [`tile_acc_runs`]).
///
/// # Panics
/// As [`tile_acc`].
fn tile_acc_one(isa: Isa, a: &[i8], b: &[u8], k4: usize, b_stride: usize, acc: &mut Acc) {
    assert!(a.len() >= k4 * MR * 4);
    assert!(k4 == 0 || b.len() >= (k4 - 1) * b_stride + NR * 4);
    assert!(isa.available(), "{isa:?} is not available on this CPU");
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (asserted above); the panels hold `k4` groups.
        Isa::Avx2 => unsafe { x86::acc_avx2(a.as_ptr(), b.as_ptr(), k4, b_stride, acc) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: the CPU has FEAT_I8MM (asserted above); the panels hold `k4` groups.
        Isa::I8mm => unsafe { arm::acc_i8mm(a.as_ptr(), b.as_ptr(), k4, b_stride, acc) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: the CPU has FEAT_DotProd (asserted above); the panels hold `k4` groups.
        Isa::Dot => unsafe { arm::acc_dot(a.as_ptr(), b.as_ptr(), k4, b_stride, acc) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: the CPU has NEON (asserted above); the panels hold `k4` groups.
        Isa::Neon => unsafe { arm::acc_neon(a.as_ptr(), b.as_ptr(), k4, b_stride, acc) },
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
        unsafe { x86::requant_avx512(acc, col0, rows, cols, rq, out.as_mut_ptr(), ld) };
        return;
    }
    #[cfg(target_arch = "aarch64")]
    if matches!(isa, Isa::I8mm | Isa::Dot | Isa::Neon) {
        // SAFETY: the CPU has NEON (`isa` is available, asserted above).
        unsafe { arm::requant_neon(acc, col0, rows, cols, rq, out, ld) };
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
            x86::depthwise_avx512(
                plane, starts, taps, row_step, width, corr, mult, rq, acc, out,
            )
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (asserted above).
        Isa::Avx2 => unsafe {
            x86::depthwise_avx2(
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
            x86::depthwise_flat_avx512(plane, starts, taps, step, width, corr, mult, rq, acc, out)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (asserted above).
        Isa::Avx2 => unsafe {
            x86::depthwise_flat_avx2(plane, starts, taps, step, width, corr, mult, rq, acc, out)
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

/// Interleaves four rows of [`NR`] bytes into `out` (`out[4 · j + r] = rows[r][j] ^ flip`):
/// one group of an activation panel.
pub(crate) fn interleave4(isa: Isa, rows: [&[u8; NR]; 4], flip: u8, out: &mut [u8; NR * 4]) {
    assert!(isa.available(), "{isa:?} is not available on this CPU");
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512 F/BW (asserted above).
        Isa::Vnni => unsafe { x86::interleave4_avx512(rows, flip, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (asserted above).
        Isa::Avx2 => unsafe { x86::interleave4_avx2(rows, flip, out) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: the CPU has NEON (`isa` is available, asserted above).
        Isa::I8mm | Isa::Dot | Isa::Neon => unsafe { arm::interleave4_neon(rows, flip, out) },
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
    /// The QDQ definition (`DequantizeLinear` of each input, the float operation,
    /// `QuantizeLinear`), which onnxruntime keeps for `i8` tensors: `v = (a - za) as f32 · sa
    /// ⊕ (b - zb) as f32 · sb` (`⊕` an f32 addition or multiplication), then
    /// `round_half_even(v / sc) + zc`, saturated.
    Real {
        /// Multiply instead of add.
        mul: bool,
        /// `(zero point, scale)` of `a`.
        a: (i32, f32),
        /// The same for `b`.
        b: (i32, f32),
        /// The output's `(zero point, scale)`.
        c: (i32, f32),
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
        Isa::Vnni => unsafe { x86::binary_row_avx512(op, t, a, b, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 and FMA (`available` checks both for `Avx2`).
        Isa::Avx2 => unsafe { x86::binary_row_avx2(op, t, a, b, out) },
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
        // The integer product is at most 255 · 255 in size, exact in f32: multiplied as
        // floats (one `mulps`, not the slower `pmulld` and a conversion).
        BinaryRow::Mul { za, zb, ratio, zc } => binary_loop(t, a, b, out, |qa, qb| {
            ((qa - za) as f32 * (qb - zb) as f32) * ratio + zc
        }),
        BinaryRow::Real {
            mul,
            a: (za, sa),
            b: (zb, sb),
            c: (zc, sc),
        } => {
            // Rounded without the zero point, which is added after (ONNX `QuantizeLinear`).
            let (ra, rb) = (|q: i32| (q - za) as f32 * sa, |q: i32| (q - zb) as f32 * sb);
            if mul {
                binary_loop_shifted(t, zc, a, b, out, |qa, qb| (ra(qa) * rb(qb)) / sc);
            } else {
                binary_loop_shifted(t, zc, a, b, out, |qa, qb| (ra(qa) + rb(qb)) / sc);
            }
        }
    }
}

/// `out[i] = round_clamp(f(a[i], b[i]))` of the raw values, an operand of one element
/// broadcast.
#[inline(always)]
fn binary_loop(t: BinaryTypes, a: &[u8], b: &[u8], out: &mut [u8], f: impl Fn(i32, i32) -> f32) {
    binary_loop_shifted(t, 0, a, b, out, f);
}

/// [`binary_loop`] with `shift` added after the rounding: `out[i] = round_clamp(f(a[i],
/// b[i]), lo - shift, hi - shift) + shift`.
#[inline(always)]
fn binary_loop_shifted(
    t: BinaryTypes,
    shift: i32,
    a: &[u8],
    b: &[u8],
    out: &mut [u8],
    f: impl Fn(i32, i32) -> f32,
) {
    let (lo, hi) = ((t.lo - shift) as f32, (t.hi - shift) as f32);
    // A stored byte's value: `(byte ^ flip) - shift` (an `i8` is its byte XOR 0x80, minus 128).
    let read = |signed: bool, v: u8| {
        let (flip, shift) = if signed { (0x80u8, 128i32) } else { (0, 0) };
        i32::from(v ^ flip) - shift
    };
    let (sa, sb) = (t.a_signed, t.b_signed);
    let g = |x: i32, y: i32| (round_clamp(f(x, y), lo, hi) + shift) as u8;
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
        Isa::Vnni => unsafe { x86::quantize_row_avx512(x, scale, zp, (lo, hi), out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (asserted above).
        Isa::Avx2 => unsafe { x86::quantize_row_avx2(x, scale, zp, (lo, hi), out) },
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

/// ONNX `DequantizeLinear` per tensor: `out[i] = ((x[i] ^ flip) - zp) as f32 · scale`, `flip`
/// 0x80 and `zp` moved by 128 for `i8` storage.
pub(crate) fn dequantize_row(isa: Isa, x: &[u8], flip: u8, zp: i32, scale: f32, out: &mut [f32]) {
    assert!(isa.available(), "{isa:?} is not available on this CPU");
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512 F/BW (asserted above).
        Isa::Vnni => unsafe { x86::dequantize_row_avx512(x, flip, zp, scale, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (asserted above).
        Isa::Avx2 => unsafe { x86::dequantize_row_avx2(x, flip, zp, scale, out) },
        _ => dequantize_row_plain(x, flip, zp, scale, out),
    }
}

#[inline(always)]
fn dequantize_row_plain(x: &[u8], flip: u8, zp: i32, scale: f32, out: &mut [f32]) {
    for (o, &q) in out.iter_mut().zip(x) {
        *o = (i32::from(q ^ flip) - zp) as f32 * scale;
    }
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
        Isa::Vnni => unsafe { x86::dequant_add_quant_avx512(op, a, b, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (asserted above).
        Isa::Avx2 => unsafe { x86::dequant_add_quant_avx2(op, a, b, out) },
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

/// `out[i] = table[x[i]]`: with AVX-512 VBMI (checked here, apart from [`Isa`]), 64 bytes at a
/// time by two two-register byte permutes (`vpermi2b`, the low seven bits of each byte) and a
/// blend on its top bit; else a plain loop.
pub(crate) fn lookup_row(isa: Isa, table: &[u8; 256], x: &[u8], out: &mut [u8]) {
    assert_eq!(x.len(), out.len());
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Vnni && is_x86_feature_detected!("avx512vbmi") && isa.available() {
        // SAFETY: the CPU has AVX-512 F/BW (`Isa::Vnni` is available) and VBMI (checked).
        unsafe { x86::lookup_vbmi(table, x, out) };
        return;
    }
    #[cfg(target_arch = "aarch64")]
    if matches!(isa, Isa::I8mm | Isa::Dot | Isa::Neon) && isa.available() {
        // SAFETY: the CPU has NEON (`isa` is available, checked).
        unsafe { arm::lookup_neon(table, x, out) };
        return;
    }
    let _ = isa;
    for (o, &b) in out.iter_mut().zip(x) {
        *o = table[usize::from(b)];
    }
}
