//! The matrix multiply under Convolution2d, FullyConnected and BatchMatMul: `C += A · B`.
//!
//! `C` is `m × n`, row-major and dense (or a block of columns of a wider matrix). `A` is
//! `m × k` and `B` is `k × n`, each stored row-major or as its row-major transpose (`k × m`
//! for a transposed `A`, `n × k` for fully connected weights stored `[out, in]`), which is only
//! a stride change for the kernel.
//!
//! The kernel is `faer`'s matrix multiply: cache-blocked, with AVX-512 or AVX2/FMA
//! micro-kernels picked at run time, reached through a safe, shape-checked call, so this
//! crate needs no `unsafe`. With more than one thread, the product is split into blocks of
//! columns, each a one-thread faer product, over CpuFast's persistent helpers
//! ([`for_each_part`]); starting threads for every product, as this module once did, cost
//! more than the product (a 3×3 convolution took 7.1 ms on two threads against 2.5 ms on
//! one). A vendor with its own BLAS swaps it in here: this module is the only place that
//! multiplies matrices.

use std::{
    ops::Range,
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

pub(crate) use faer::Accum;
use faer::{
    MatMut, MatRef, Par,
    linalg::matmul::matmul,
    traits::pulp::{Arch, Simd, WithSimd},
};

/// How an operand of [`gemm`] is stored.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Operand<'a> {
    /// The matrix, row-major.
    RowMajor(&'a [f32]),
    /// Its transpose, row-major.
    Transposed(&'a [f32]),
    /// The matrix, row-major with rows this many elements apart (at least its columns): a
    /// block of columns of a wider matrix.
    Strided(&'a [f32], usize),
}

impl<'a> Operand<'a> {
    /// `data` as stored, transposed or not.
    pub(crate) fn new(data: &'a [f32], transposed: bool) -> Self {
        if transposed {
            Operand::Transposed(data)
        } else {
            Operand::RowMajor(data)
        }
    }

    /// Whether the stored data holds a `rows × cols` matrix exactly (or, strided, at least).
    fn holds(&self, rows: usize, cols: usize) -> bool {
        match *self {
            Operand::RowMajor(x) | Operand::Transposed(x) => x.len() == rows * cols,
            Operand::Strided(x, stride) => {
                stride >= cols && (rows == 0 || x.len() >= (rows - 1) * stride + cols)
            }
        }
    }

    /// Element `(i, j)` of the `rows × cols` matrix this operand stores.
    fn at(&self, rows: usize, cols: usize, i: usize, j: usize) -> f32 {
        match *self {
            Operand::RowMajor(x) => x[i * cols + j],
            Operand::Transposed(x) => x[j * rows + i],
            Operand::Strided(x, stride) => x[i * stride + j],
        }
    }

    fn len(&self) -> usize {
        match self {
            Operand::RowMajor(x) | Operand::Transposed(x) | Operand::Strided(x, _) => x.len(),
        }
    }

    /// The `rows × cols` matrix this operand stores.
    fn view(self, rows: usize, cols: usize) -> MatRef<'a, f32> {
        match self {
            Operand::RowMajor(x) => MatRef::from_row_major_slice(x, rows, cols),
            Operand::Transposed(x) => MatRef::from_row_major_slice(x, cols, rows).transpose(),
            // As for `C` in `multiply`: the transpose of a column-major view.
            Operand::Strided(x, stride) => MatRef::from_column_major_slice_with_stride(
                &x[..(rows - 1) * stride + cols],
                cols,
                rows,
                stride,
            )
            .transpose(),
        }
    }
}

/// Below this many multiply-adds (about 80 µs of work) a product runs on the calling thread:
/// handing a smaller one to the pool cost more than it saved (PaddleOCR's 50 small
/// convolutions ran 0.84 → 1.41 ms on two threads with 1 << 18 here). The splits of
/// [`for_each_part`] use it too: at 1 << 20 (the caller works too, only helpers are woken),
/// PaddleOCR on two threads went 0.80 → 1.06 ms while PP-OCRv4 det gained about 7 %.
pub(crate) const MIN_PARALLEL_WORK: usize = 1 << 22;

/// How many of `threads` threads `work` is worth: all of them from `min` on, else one (the
/// calling thread). Every split of this crate asks it, with its own unit and threshold.
pub(crate) fn worth(work: usize, min: usize, threads: usize) -> usize {
    if threads > 1 && work >= min {
        threads
    } else {
        1
    }
}

/// `c += a · b` (`Accum::Add`) or `c = a · b` (`Accum::Replace`: what `c` held is
/// overwritten) for `a` `m × k`, `b` `k × n` (each possibly stored transposed) and `c` `m × n`
/// with rows `ldc` elements apart (`ldc >= n`; a block of columns of a wider matrix), on up to
/// `threads` threads.
///
/// # Panics
/// If a buffer's length does not match the dimensions: callers size their buffers from
/// geometry they validated when the workload was created, so this is a programming error.
#[allow(
    clippy::too_many_arguments,
    reason = "the BLAS signature: sizes, operands, stride, threads, accumulation"
)]
pub(crate) fn gemm(
    m: usize,
    k: usize,
    n: usize,
    a: Operand<'_>,
    b: Operand<'_>,
    c: &mut [f32],
    ldc: usize,
    threads: usize,
    accum: Accum,
) {
    assert!(
        a.holds(m, k) && b.holds(k, n) && ldc >= n && (m == 0 || c.len() >= (m - 1) * ldc + n),
        "gemm {m}x{k}x{n} (ldc {ldc}): buffers of {}, {} and {} elements",
        a.len(),
        b.len(),
        c.len()
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // An empty sum: faer is not asked.
        if matches!(accum, Accum::Replace) {
            for row in c.chunks_mut(ldc).take(m) {
                row[..n].fill(0.0);
            }
        }
        return;
    }
    let (a, b) = (a.view(m, k), b.view(k, n));
    let workers = worth(m * k * n, MIN_PARALLEL_WORK, threads).min(n.div_ceil(SPLIT_COLUMNS));
    multiply(a, b, c, ldc, accum, workers);
}

/// Column blocks of a split product are multiples of this (faer's micro-kernels take columns
/// of `c`, here pixels, in fours).
const SPLIT_COLUMNS: usize = 16;

/// The pool of `threads` threads named `cpufast-<kind>-<i>`: made on first use and kept for the
/// life of the process (the library is never unloaded). A pool that cannot be made (no threads
/// left) is a pool of one.
fn kept_pool(kind: &'static str, threads: usize) -> &'static rayon::ThreadPool {
    use std::{
        collections::HashMap,
        sync::{Mutex, OnceLock},
    };
    type Pools = HashMap<(&'static str, usize), &'static rayon::ThreadPool>;
    static POOLS: OnceLock<Mutex<Pools>> = OnceLock::new();
    let mut pools = POOLS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    pools.entry((kind, threads)).or_insert_with(|| {
        let made = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(move |i| format!("cpufast-{kind}-{i}"))
            .build()
            .or_else(|e| {
                log::warn!("CpuFast: no pool of {threads} threads ({e}); work runs on one");
                rayon::ThreadPoolBuilder::new().num_threads(1).build()
            })
            .expect("a pool of one thread");
        Box::leak(Box::new(made))
    })
}

/// Runs `f` on every part, on the calling thread and a pool of `threads - 1` helper threads
/// (made once per count, like faer's pool); returns when all are done. The parts are not
/// dealt out: each thread takes the next one not yet taken until none is left, the caller
/// first, so a helper that gets no core (another process holds it) leaves its share to the
/// caller instead of making it wait (a two-thread run with one core busy collapsed from ~20
/// to ~135 ms when the caller waited for a part dealt to a helper that was not running).
/// Give it about as many parts as threads: the caller works instead of sleeping while the
/// pool works, so `threads` threads run, not `threads + 1` (on two cores, a third thread
/// that spins for work slowed the caller's serial layers). A caller done first spins (up to
/// [`WARM`], yielding its core now and then) for the helpers' parts instead of sleeping in
/// rayon's latch: waking it from there cost tens of microseconds per split (MobileNetV2
/// block on two threads, A/B: 0.49 → 0.44 ms; MiniLM 3.0 → 2.9 ms).
pub(crate) fn for_each_part<T: Send>(
    threads: usize,
    parts: impl IntoIterator<Item = T>,
    f: impl Fn(T) + Sync,
) {
    let mut parts = parts.into_iter();
    if threads <= 1 {
        parts.for_each(&f);
        return;
    }
    let slots: Vec<Mutex<Option<T>>> = parts.by_ref().map(|p| Mutex::new(Some(p))).collect();
    if slots.len() <= 1 {
        slots
            .into_iter()
            .filter_map(|s| s.into_inner().unwrap_or_else(PoisonError::into_inner))
            .for_each(&f);
        return;
    }
    let f = &f;
    let pool = helpers(threads - 1);
    // A split inside a part, made on one of the helpers: its queued parts may be in that
    // helper's own queue. (No kernel nests today: BatchMatMul's groups run their products on
    // one thread each. This is a guard, and the test below nests.)
    let nested = pool.current_thread_index().is_some();
    let (next, pending) = (AtomicUsize::new(0), AtomicUsize::new(slots.len()));
    let work = Work {
        slots: &slots,
        next: &next,
        pending: &pending,
    };
    let generation = pool.in_place_scope(|s| {
        for _ in 0..(threads - 1).min(slots.len() - 1) {
            s.spawn(move |_| {
                // The helper may come from faer's AVX-512 kernels.
                backplane_api::clean_vector_state();
                work.run(f);
            });
        }
        // Helpers still spinning after the last split stop now and take parts.
        let generation = GENERATION.fetch_add(1, Ordering::AcqRel) + 1;
        work.run(f);
        // Nested, no spinning: rayon runs the helper's own queued jobs when the scope ends.
        if !nested {
            spin_until(|| pending.load(Ordering::Acquire) == 0);
        }
        generation
    });
    // Nested, no keep-warm: the helper's own queue would run it before a part another thread
    // waits for.
    if !nested {
        for _ in 0..threads - 1 {
            pool.spawn(move || keep_warm(generation));
        }
    }
}

/// The parts of one split, taken in turn by the threads that run it.
struct Work<'a, T> {
    slots: &'a [Mutex<Option<T>>],
    /// The index of the next part to take.
    next: &'a AtomicUsize,
    /// Parts not yet done.
    pending: &'a AtomicUsize,
}

impl<T> Clone for Work<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Work<'_, T> {}

impl<T> Work<'_, T> {
    /// Takes parts and runs `f` on each until none is left.
    fn run(self, f: &(impl Fn(T) + Sync)) {
        loop {
            let i = self.next.fetch_add(1, Ordering::AcqRel);
            let Some(slot) = self.slots.get(i) else {
                return;
            };
            // Counted done also when `f` panics (rayon then raises it at the scope's end).
            let _done = Done(self.pending);
            let part = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(part) = part {
                f(part);
            }
        }
    }
}

/// Takes one part off a split's count of pending parts when dropped.
struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Counts [`for_each_part`]'s splits, so that a spinning helper knows when work came.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// How long a helper spins for the next split before it may sleep.
const WARM: Duration = Duration::from_micros(1000);

/// Spins until split `generation` is no longer the last one or [`WARM`] has passed, so that
/// the helper is awake for the next split. A sleeping rayon thread takes tens of
/// microseconds to wake on this machine, as long as a whole product of a transformer's
/// projections: MiniLM's on two threads took 3.80 ms against 3.92 on one. A helper in this
/// loop leaves it within a few hundred nanoseconds of a new split and takes its part from
/// the pool's queue at once (onnxruntime's pool spins the same way).
fn keep_warm(generation: u64) {
    spin_until(|| GENERATION.load(Ordering::Acquire) != generation);
}

/// Spins until `done` or [`WARM`] has passed, yielding the core every 256 spins (a few
/// microseconds): when the threads outnumber the cores this process gets, a spinning thread
/// lets the one it waits for (or the caller's serial layers) run.
fn spin_until(done: impl Fn() -> bool) {
    let start = Instant::now();
    let mut spins = 0u32;
    while !done() {
        std::hint::spin_loop();
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(256) {
            if start.elapsed() >= WARM {
                return;
            }
            std::thread::yield_now();
        }
    }
}

/// The helper threads of [`for_each_part`].
fn helpers(count: usize) -> &'static rayon::ThreadPool {
    kept_pool("helper", count)
}

/// `c += a · b` (or `c = a · b`, as `accum` says) on `workers` threads: each multiplies a
/// block of `c`'s columns (a share of `b`'s columns, all of `a`) with faer on its own thread
/// ([`for_each_part`]: the caller and `workers - 1` helpers). faer's own split needs a pool
/// of `workers` threads besides the waiting caller; on two cores its idle threads, spinning
/// for work, slowed the serial layers between products (PP-OCRv4 det on two threads: 29 ms,
/// against 17.5 on one).
fn multiply(
    a: MatRef<'_, f32>,
    b: MatRef<'_, f32>,
    c: &mut [f32],
    ldc: usize,
    accum: Accum,
    workers: usize,
) {
    let (m, n) = (a.nrows(), b.ncols());
    // Row-major with a row stride, built as the transpose of a column-major view:
    // faer 0.24.4's `from_row_major_slice_with_stride_mut` swaps the strides (it builds a
    // column-major view, which reaches past the slice when there are more rows than columns).
    let c = MatMut::from_column_major_slice_with_stride_mut(&mut c[..(m - 1) * ldc + n], n, m, ldc)
        .transpose_mut();
    let per = n.div_ceil(workers.max(1)).next_multiple_of(SPLIT_COLUMNS);
    let mut parts = Vec::with_capacity(workers);
    let (mut rest, mut start) = (c, 0);
    while start < n {
        let cols = per.min(n - start);
        let (part, tail) = rest.split_at_col_mut(cols);
        parts.push((start, part));
        (rest, start) = (tail, start + cols);
    }
    for_each_part(parts.len(), parts, |(start, part)| {
        let cols = part.ncols();
        matmul(part, accum, a, b.subcols(start, cols), 1.0, Par::Seq);
        // faer's AVX-512 kernels return with the upper vector state dirty; this crate's own
        // loops (im2col, depthwise, elementwise) are SSE code and would run up to 2.4× slower
        // after them on this thread until it is cleared (docs/PERFORMANCE.md).
        backplane_api::clean_vector_state();
    });
}

/// Below this many multiply-adds a packed product runs on the calling thread. Lower than
/// [`MIN_PARALLEL_WORK`]: a packed product has no packing to repeat per part, and a
/// transformer's attention projections (MiniLM: 16 × 384 × 384, 2.4M) are half of its
/// products.
const MIN_PARALLEL_PACKED: usize = 1 << 20;

/// Columns of one panel of a [`PackedB`]: two AVX2 vectors (one AVX-512 vector).
const PANEL: usize = 16;

/// Rows of `a` that one pass over a panel serves (six rows × two vectors of accumulators:
/// twelve of the sixteen AVX2 registers).
const TILE_ROWS: usize = 6;

/// Up to this many rows, a product with constant `b` runs on [`PackedB`] instead of faer.
pub(crate) const PACKED_MAX_ROWS: usize = 64;

/// A constant right-hand matrix `b` (`k × n`) packed once for products with few rows (a
/// transformer's tokens, a batch of one): panels of [`PANEL`] columns, each `k × PANEL`
/// contiguous (the last one padded with zeros), so that a product streams each weight once,
/// in order. faer packs its operands at every product; for these shapes that copy of the
/// weights cost more than the multiplications (MiniLM's projections: 16 × 384 × 1536).
#[derive(Debug)]
pub(crate) struct PackedB {
    k: usize,
    n: usize,
    /// Shared, [`crate::prepared`].
    panels: std::sync::Arc<crate::prepared::Prepared>,
}

impl PackedB {
    /// `b` (`k × n`, stored as `b` says) packed.
    ///
    /// # Panics
    /// If `b` does not hold a `k × n` matrix.
    #[cfg(test)]
    pub(crate) fn new(k: usize, n: usize, b: Operand<'_>) -> Self {
        assert!(b.holds(k, n), "PackedB {k}x{n}: {} elements", b.len());
        // Panels depend on the weights only: every network of this process with these
        // weights (a model at several input shapes) shares them.
        let source = match b {
            Operand::RowMajor(x) | Operand::Transposed(x) | Operand::Strided(x, _) => x,
        };
        let (tag, dims, len) = Self::form(k, n, b);
        let panels = crate::prepared::shared(tag, dims, source, len, || Self::pack(k, n, b));
        Self { k, n, panels }
    }

    /// Shared weights `w` (stored transposed when `transposed`) packed as the test-only `new`
    /// packs them: found by the digest `w` was shared under when it is known
    /// ([`crate::prepared::shared_from`]).
    pub(crate) fn of_prepared(
        k: usize,
        n: usize,
        w: &crate::prepared::Prepared,
        transposed: bool,
    ) -> Self {
        let b = Operand::new(w, transposed);
        assert!(b.holds(k, n), "PackedB {k}x{n}: {} elements", b.len());
        let (tag, dims, len) = Self::form(k, n, b);
        let panels = crate::prepared::shared_from(tag, dims, w, len, || Self::pack(k, n, b));
        Self { k, n, panels }
    }

    /// The weights whose little-endian f32 bytes are `bytes` (a constant as the host hands it)
    /// packed as the test-only `new` packs them: found shared without reading them into
    /// floats, which happens only when the panels are made.
    ///
    /// # Panics
    /// If `bytes` is not a `k × n` matrix of f32.
    pub(crate) fn of_bytes(k: usize, n: usize, bytes: &[u8], transposed: bool) -> Self {
        assert_eq!(
            bytes.len(),
            k * n * 4,
            "PackedB {k}x{n}: {} bytes",
            bytes.len()
        );
        let (tag, dims, len) = Self::form(k, n, Operand::new(&[], transposed));
        let make = || {
            let w = crate::prepared::floats(bytes);
            Self::pack(k, n, Operand::new(&w, transposed))
        };
        let digest = || crate::prepared::digest_bytes(bytes);
        let panels = crate::prepared::shared_keyed(tag, dims, k * n, digest, len, make);
        Self { k, n, panels }
    }

    /// What the panels of `b` are named by in the shared forms (tag and dimensions), and
    /// their length.
    fn form(k: usize, n: usize, b: Operand<'_>) -> (&'static str, [usize; 3], usize) {
        let (tag, stride) = match b {
            Operand::RowMajor(_) => ("packed-row-major", 0),
            Operand::Transposed(_) => ("packed-transposed", 0),
            Operand::Strided(_, s) => ("packed-strided", s),
        };
        (tag, [k, n, stride], n.div_ceil(PANEL) * k * PANEL)
    }

    /// The panels of `b`: `PANEL` columns each, `k` rows of them, zero-padded.
    fn pack(k: usize, n: usize, b: Operand<'_>) -> Vec<f32> {
        let count = n.div_ceil(PANEL);
        let mut panels = vec![0.0; count * k * PANEL];
        for (p, panel) in panels
            .chunks_exact_mut((k * PANEL).max(1))
            .enumerate()
            .take(count)
        {
            for (i, row) in panel.chunks_exact_mut(PANEL).enumerate() {
                for (j, v) in row.iter_mut().enumerate().take(n - p * PANEL) {
                    *v = b.at(k, n, i, p * PANEL + j);
                }
            }
        }
        panels
    }

    /// `c += a · b` for `a` `m × k` row-major and `c` `m × n` with rows `ldc` apart, on up to
    /// `threads` threads (the panels split between them, each thread writing its columns to a
    /// buffer of its own, copied into `c` after).
    ///
    /// # Panics
    /// If a buffer's length does not match the dimensions.
    pub(crate) fn multiply_add(
        &self,
        m: usize,
        a: &[f32],
        c: &mut [f32],
        ldc: usize,
        threads: usize,
    ) {
        let (k, n) = (self.k, self.n);
        assert!(
            a.len() == m * k && ldc >= n && (m == 0 || c.len() >= (m - 1) * ldc + n),
            "packed gemm {m}x{k}x{n} (ldc {ldc}): buffers of {} and {} elements",
            a.len(),
            c.len()
        );
        if m == 0 || n == 0 || k == 0 {
            return;
        }
        let count = n.div_ceil(PANEL);
        let workers = worth(m * k * n, MIN_PARALLEL_PACKED, threads).min(count);
        if workers == 1 {
            return self.run_panels(0..count, m, a, c, ldc);
        }
        let per = count.div_ceil(workers);
        // One buffer per part, for its columns of `c`.
        let mut owns: Vec<(usize, Vec<f32>)> = (0..count)
            .step_by(per)
            .map(|first| {
                let cols = first * PANEL..((first + per) * PANEL).min(n);
                let mut own = Vec::with_capacity(m * cols.len());
                for row in c.chunks(ldc).take(m) {
                    own.extend_from_slice(&row[cols.clone()]);
                }
                (first, own)
            })
            .collect();
        for_each_part(workers, owns.iter_mut(), |(first, own)| {
            let width = own.len() / m;
            self.run_panels(*first..(*first + per).min(count), m, a, own, width);
        });
        for (first, own) in owns {
            let width = own.len() / m;
            for (row, part) in c.chunks_mut(ldc).zip(own.chunks_exact(width)) {
                row[first * PANEL..][..width].copy_from_slice(part);
            }
        }
    }

    /// `c += a · b` over `panels` on this thread, `c`'s column 0 being the first panel's.
    fn run_panels(&self, panels: Range<usize>, m: usize, a: &[f32], c: &mut [f32], ldc: usize) {
        Arch::new().dispatch(Panels {
            b: self,
            panels,
            m,
            a,
            c,
            ldc,
            prefetch: Prefetch::new(),
        });
        // Code built for AVX2 may leave the upper vector state dirty (see `multiply`).
        backplane_api::clean_vector_state();
    }
}

/// `c += a · b` over some panels of `b`, where `c`'s column 0 is panel `panels.start`'s.
struct Panels<'a> {
    b: &'a PackedB,
    panels: Range<usize>,
    m: usize,
    a: &'a [f32],
    c: &'a mut [f32],
    ldc: usize,
    prefetch: Prefetch,
}

/// Software prefetch where the CPU has it (x86-64 with AVX2: `pulp`'s safe `_mm_prefetch`),
/// nothing elsewhere.
#[derive(Clone, Copy)]
struct Prefetch(#[cfg(target_arch = "x86_64")] Option<faer::traits::pulp::x86::V3>);

impl Prefetch {
    fn new() -> Self {
        Self(
            #[cfg(target_arch = "x86_64")]
            faer::traits::pulp::x86::V3::try_new(),
        )
    }

    /// Asks for the cache line at `at` to be brought into L2 (`T1`: measured faster than into
    /// L1 on MiniLM, whose next panel is up to 96 KB). `at` may lie past the end of
    /// its allocation (a prefetch never faults; it is never read through).
    #[inline(always)]
    fn line(self, at: *const f32) {
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = self.0 {
            simd.sse
                ._mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(at.cast());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = at;
    }
}

/// The part of the next panel that one pass over a panel prefetches: with `passes` passes
/// (row tiles) per panel, pass `j` fetches the `j`-th of `passes` equal parts of the next
/// panel, one cache line (= one panel row) every `passes` steps, so that the next panel's
/// weights arrive from memory while this panel's are multiplied, spread over all its passes
/// (the first pass over a panel otherwise waits on memory: it needs a new line every six
/// cycles, more than one core's memory bandwidth).
#[derive(Clone, Copy)]
struct Ahead {
    prefetch: Prefetch,
    /// The first line of this pass's part.
    first: *const f32,
    /// Steps between two prefetches.
    every: usize,
}

impl WithSimd for Panels<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        match S::F32_LANES {
            16 => self.run::<S, 1>(simd),
            8 => self.run::<S, 2>(simd),
            4 => self.run::<S, 4>(simd),
            _ => self.run::<S, 16>(simd),
        }
    }
}

impl Panels<'_> {
    /// The panels, tile by tile, with `V` vectors of `S` per panel row.
    #[inline(always)]
    fn run<S: Simd, const V: usize>(self, simd: S) {
        let Self {
            b,
            panels,
            m,
            a,
            c,
            ldc,
            prefetch,
        } = self;
        let first = panels.start;
        let passes = m.div_ceil(TILE_ROWS);
        let part = b.k.div_ceil(passes);
        for p in panels {
            let panel = &b.panels[p * b.k * PANEL..][..b.k * PANEL];
            let next = panel.as_ptr().wrapping_add(b.k * PANEL);
            let col = (p - first) * PANEL;
            let width = PANEL.min(b.n - p * PANEL);
            let mut r = 0;
            while r < m {
                let rows = TILE_ROWS.min(m - r);
                let a_rows = &a[r * b.k..][..rows * b.k];
                let c_rows = &mut c[r * ldc + col..];
                let ahead = Ahead {
                    prefetch,
                    first: next.wrapping_add(r / TILE_ROWS * part * PANEL),
                    every: passes,
                };
                let t = (simd, panel, a_rows, c_rows, ldc, width, ahead);
                // Few rows make few accumulators, each a chain of dependent multiply-adds: a
                // tile of one or two rows keeps `U` sets, for interleaved rows of the panel.
                match rows {
                    6 => tile::<S, 6, V, 1>(t),
                    5 => tile::<S, 5, V, 1>(t),
                    4 => tile::<S, 4, V, 1>(t),
                    3 => tile::<S, 3, V, 1>(t),
                    2 => tile::<S, 2, V, 2>(t),
                    _ => tile::<S, 1, V, 4>(t),
                }
                r += rows;
            }
        }
    }
}

/// `acc[r] += rows[r][i] · panel row i`, `V` vectors of `S` a panel row (a function, not a
/// closure: a closure does not inherit its caller's target features when not inlined).
#[inline(always)]
fn panel_row<S: Simd, const R: usize, const V: usize>(
    simd: S,
    acc: &mut [[S::f32s; V]; R],
    rows: &[&[f32]; R],
    i: usize,
    panel: &[f32],
) {
    let (w, _) = S::as_simd_f32s(&panel[i * PANEL..][..PANEL]);
    for r in 0..R {
        let x = simd.splat_f32s(rows[r][i]);
        for v in 0..V {
            acc[r][v] = simd.mul_add_e_f32s(x, w[v], acc[r][v]);
        }
    }
}

/// `c[R × width] += a[R × k] · panel[k × PANEL]` (its first `width` columns), the `U × R × V`
/// accumulator vectors held in registers (`V` vectors of `S` make one panel row; set `u` takes
/// the panel rows `i` with `i % U == u`, so that `U` chains of multiply-adds overlap where `R`
/// alone makes too few; the sets are added at the end).
#[inline(always)]
fn tile<S: Simd, const R: usize, const V: usize, const U: usize>(
    (simd, panel, a, c, ldc, width, ahead): (S, &[f32], &[f32], &mut [f32], usize, usize, Ahead),
) {
    let k = panel.len() / PANEL;
    let rows: [&[f32]; R] = std::array::from_fn(|r| &a[r * k..][..k]);
    let zero = simd.splat_f32s(0.0);
    let mut sets = [[[zero; V]; R]; U];
    let (mut line, mut countdown) = (ahead.first, 0);
    let whole = k / U * U;
    for g in (0..whole).step_by(U) {
        for (u, set) in sets.iter_mut().enumerate() {
            if countdown == 0 {
                ahead.prefetch.line(line);
                line = line.wrapping_add(PANEL);
                countdown = ahead.every;
            }
            countdown -= 1;
            panel_row(simd, set, &rows, g + u, panel);
        }
    }
    for i in whole..k {
        if countdown == 0 {
            ahead.prefetch.line(line);
            line = line.wrapping_add(PANEL);
            countdown = ahead.every;
        }
        countdown -= 1;
        panel_row(simd, &mut sets[0], &rows, i, panel);
    }
    let (acc, rest) = sets.split_at_mut(1);
    let acc = &mut acc[0];
    for set in rest.iter() {
        for (a, b) in acc.iter_mut().zip(set) {
            for (a, &b) in a.iter_mut().zip(b) {
                *a = simd.add_f32s(*a, b);
            }
        }
    }
    let mut out = [0.0f32; PANEL];
    for (r, acc_r) in acc.iter().enumerate() {
        let (dst, _) = S::as_mut_simd_f32s(&mut out);
        dst.copy_from_slice(acc_r);
        for (o, &v) in c[r * ldc..][..width].iter_mut().zip(&out) {
            *o += v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close};

    /// Relative tolerance against the f64 oracle (sums of up to 300 products of values in
    /// [-1, 1)).
    const REL_TOL: f64 = 1e-5;

    /// `C0 + A · B` by the definition, in f64.
    fn oracle(m: usize, k: usize, n: usize, a: &[f32], b: &[f32], c0: &[f32]) -> Vec<f64> {
        let mut c = Vec::with_capacity(m * n);
        for i in 0..m {
            for j in 0..n {
                let mut s = f64::from(c0[i * n + j]);
                for p in 0..k {
                    s += f64::from(a[i * k + p]) * f64::from(b[p * n + j]);
                }
                c.push(s);
            }
        }
        c
    }

    fn transpose(rows: usize, cols: usize, x: &[f32]) -> Vec<f32> {
        let mut t = vec![0.0; x.len()];
        for r in 0..rows {
            for c in 0..cols {
                t[c * rows + r] = x[r * cols + c];
            }
        }
        t
    }

    /// Odd sizes (rows not a multiple of 4, columns over one tile), every storage of `A` and
    /// `B`, one and several threads, accumulating into a non-zero `C`.
    #[test]
    fn matches_the_definition() {
        let mut rng = Lcg(11);
        for &(m, k, n) in &[
            (1, 1, 1),
            (3, 5, 7),
            (4, 8, 4),
            (9, 17, 300),
            (70, 300, 33),
            (13, 64, 513),
            // Past MIN_PARALLEL_WORK on 3 threads: split in blocks of 112, 400 and 336
            // columns.
            (48, 300, 300),
            (20, 220, 1200),
            (8, 600, 1000),
        ] {
            let (a, b, c0) = (rng.vec(m * k), rng.vec(k * n), rng.vec(m * n));
            let want = oracle(m, k, n, &a, &b, &c0);
            let (at, bt) = (transpose(m, k, &a), transpose(k, n, &b));
            for threads in [1, 3] {
                for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                    let a_op = Operand::new(if ta { &at } else { &a }, ta);
                    let b_op = Operand::new(if tb { &bt } else { &b }, tb);
                    let mut c = c0.clone();
                    gemm(m, k, n, a_op, b_op, &mut c, n, threads, Accum::Add);
                    assert_close(
                        &c,
                        &want,
                        REL_TOL,
                        &format!("{m}x{k}x{n} a^T {ta} b^T {tb}, {threads} threads"),
                    );
                }
            }
        }
    }

    /// A block of columns of a wider `C` (`ldc > n`), from a transposed `A`, split between
    /// threads: the other columns are untouched.
    #[test]
    fn strided_output() {
        let mut rng = Lcg(5);
        let (m, k, n, ldc) = (37, 300, 30, 40);
        let (a, b) = (rng.vec(m * k), rng.vec(k * n));
        let wide = rng.vec(m * ldc);
        let c0: Vec<f32> = (0..m)
            .flat_map(|i| wide[i * ldc + 3..][..n].to_vec())
            .collect();
        let want = oracle(m, k, n, &a, &b, &c0);
        for threads in [1, 4] {
            let mut c = wide.clone();
            let at = transpose(m, k, &a);
            gemm(
                m,
                k,
                n,
                Operand::Transposed(&at),
                Operand::RowMajor(&b),
                &mut c[3..],
                ldc,
                threads,
                Accum::Add,
            );
            let got: Vec<f32> = (0..m)
                .flat_map(|i| c[i * ldc + 3..][..n].to_vec())
                .collect();
            assert_close(
                &got,
                &want,
                REL_TOL,
                &format!("ldc {ldc}, {threads} threads"),
            );
            for i in 0..m {
                for j in (0..ldc).filter(|j| !(3..3 + n).contains(j)) {
                    assert_eq!(c[i * ldc + j], wide[i * ldc + j], "({i}, {j}) was touched");
                }
            }
        }
    }

    /// The packed product: row counts that fill and do not fill a tile, a partial last panel,
    /// `b` stored both ways, a wider `C`, one and several threads (panels split).
    #[test]
    fn packed_matches_the_definition() {
        let mut rng = Lcg(23);
        for &(m, k, n) in &[
            (1, 1, 1),
            // One row (four sets of accumulators) with k past a multiple of four, two rows
            // (two sets) with k odd: the interleaved sets and the rows after them.
            (1, 7, 40),
            (2, 33, 20),
            (5, 7, 9),
            (6, 64, 16),
            (13, 300, 37),
            (16, 384, 1536),
        ] {
            let (a, b) = (rng.vec(m * k), rng.vec(k * n));
            let ldc = n + 3;
            let wide = rng.vec(m * ldc);
            let c0: Vec<f32> = (0..m).flat_map(|i| wide[i * ldc..][..n].to_vec()).collect();
            let want = oracle(m, k, n, &a, &b, &c0);
            let bt = transpose(k, n, &b);
            for (packed, how) in [
                (PackedB::new(k, n, Operand::RowMajor(&b)), "row-major"),
                (PackedB::new(k, n, Operand::Transposed(&bt)), "transposed"),
            ] {
                for threads in [1, 3] {
                    let mut c = wide.clone();
                    packed.multiply_add(m, &a, &mut c, ldc, threads);
                    let got: Vec<f32> = (0..m).flat_map(|i| c[i * ldc..][..n].to_vec()).collect();
                    let what = format!("{m}x{k}x{n} {how}, {threads} threads");
                    assert_close(&got, &want, REL_TOL, &what);
                    for i in 0..m {
                        assert_eq!(c[i * ldc + n..][..3], wide[i * ldc + n..][..3], "{what}");
                    }
                }
            }
        }
    }

    /// Empty dimensions leave `C` as it was.
    #[test]
    fn empty_dimensions() {
        let mut c = vec![1.0; 6];
        let none = Operand::RowMajor(&[]);
        gemm(2, 0, 3, none, none, &mut c, 3, 1, Accum::Add);
        assert_eq!(c, [1.0; 6]);
        gemm(
            0,
            4,
            3,
            none,
            Operand::RowMajor(&[0.0; 12]),
            &mut [],
            3,
            2,
            Accum::Add,
        );
    }

    /// Every part of a split runs once, on two and three threads, also when a part splits
    /// again on a helper (its inner parts then wait in that helper's own queue); splits in a
    /// row reuse the helpers. (Whether the caller spins or sleeps is not visible here: only
    /// in the time, which the benchmarks measure.)
    #[test]
    fn splits_run_every_part_once() {
        for threads in [2, 3] {
            for _ in 0..3 {
                let mut outer = [[0u32; 4]; 5];
                for_each_part(threads, outer.iter_mut().enumerate(), |(i, inner)| {
                    for_each_part(threads, inner.iter_mut().enumerate(), |(j, v)| {
                        *v += (10 * i + j) as u32 + 1;
                    });
                });
                for (i, inner) in outer.iter().enumerate() {
                    let want: [u32; 4] = std::array::from_fn(|j| (10 * i + j) as u32 + 1);
                    assert_eq!(*inner, want, "{threads} threads, part {i}");
                }
            }
        }
    }
}
