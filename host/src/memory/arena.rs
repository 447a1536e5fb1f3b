//! A loaded network's tensor memory: one block holding every planned buffer at its offset.
//! In-process it is heap memory; when a backend of the network runs out of process it is a
//! shared `memfd` ([`crate::sys::shm`]) that the backend's server maps too, so tensors never
//! travel through its socket.

use backplane_api::{
    TensorInfo, TensorView, TensorViewMut,
    ffi::{CallError, WorkloadHandle},
};
use smallvec::SmallVec;

use crate::sys::shm::SharedMemory;

/// Offsets are aligned for every element type, and to a cache line.
pub const ALIGN: usize = 64;

/// The bytes of a network's tensors.
#[derive(Debug)]
pub enum Arena {
    /// Heap memory (`u64`s, so that the block itself is 8-byte aligned; offsets are 64-byte
    /// aligned within it).
    Heap(Vec<u64>),
    /// Shared with out-of-process servers (page aligned).
    Shared(SharedMemory),
}

impl Arena {
    /// Heap memory of `len` zero bytes.
    ///
    /// # Errors
    /// The allocator's refusal (a size the machine cannot give), as an error instead of the
    /// abort of a plain `vec!`.
    pub fn heap(len: usize) -> Result<Self, std::collections::TryReserveError> {
        let words = len.div_ceil(8);
        // A size the allocator refuses is an error here, not an abort in `vec!`; the zeroed
        // vector itself comes from `calloc`, whose fresh pages are zero without being
        // written (a 200 MB arena costs no memset at load, and no resident memory until used).
        let mut probe: Vec<u64> = Vec::new();
        probe.try_reserve_exact(words)?;
        drop(probe);
        Ok(Self::Heap(vec![0u64; words]))
    }

    /// The bytes, to read.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Arena::Heap(v) => backplane_api::bytemuck::cast_slice(v),
            Arena::Shared(m) => m.as_slice(),
        }
    }

    /// The bytes, to write.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Arena::Heap(v) => backplane_api::bytemuck::cast_slice_mut(v),
            Arena::Shared(m) => m.as_mut_slice(),
        }
    }
}

/// Heap arenas that in-process networks take for a run and give back: the networks of one
/// pool (a session's plans, one per set of input shapes) share their scratch memory, so a
/// new network runs on pages already mapped, and the pool holds as many arenas as runs go on
/// at once, each as large as the largest network that took it.
#[derive(Debug, Default)]
pub struct Pool {
    /// Arenas not in use.
    idle: std::sync::Mutex<Vec<Arena>>,
    /// Bytes of every arena the pool made that is alive (idle or taken).
    bytes: std::sync::atomic::AtomicUsize,
}

impl Pool {
    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Arena>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes sure an idle arena of at least `len` bytes exists (a network's load calls it, so
    /// that memory the machine cannot give fails the load, not a run): the largest idle one
    /// grows to `len`, or a new one is made. Pages are not touched.
    ///
    /// # Errors
    /// The allocator's refusal.
    pub fn reserve(&self, len: usize) -> Result<(), std::collections::TryReserveError> {
        let mut idle = self.idle();
        if idle.iter().any(|a| a.bytes().len() >= len) {
            return Ok(());
        }
        self.drop_largest(&mut idle);
        idle.push(self.make(len)?);
        Ok(())
    }

    /// An arena of at least `len` bytes for one run: the smallest idle one that is large
    /// enough, else the largest idle one grown, else a new one. Give it back with
    /// [`Pool::give`]. Its bytes are what the last run left there.
    ///
    /// # Errors
    /// The allocator's refusal.
    pub fn take(&self, len: usize) -> Result<Arena, std::collections::TryReserveError> {
        let mut idle = self.idle();
        let fits = (0..idle.len())
            .filter(|&k| idle[k].bytes().len() >= len)
            .min_by_key(|&k| idle[k].bytes().len());
        if let Some(k) = fits {
            return Ok(idle.swap_remove(k));
        }
        self.drop_largest(&mut idle);
        drop(idle);
        self.make(len)
    }

    /// Returns an arena [`Pool::take`] gave.
    pub fn give(&self, arena: Arena) {
        self.idle().push(arena);
    }

    /// Bytes of every arena of the pool, idle or taken.
    pub fn bytes(&self) -> usize {
        self.bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn make(&self, len: usize) -> Result<Arena, std::collections::TryReserveError> {
        let arena = Arena::heap(len)?;
        self.bytes
            .fetch_add(arena.bytes().len(), std::sync::atomic::Ordering::Relaxed);
        Ok(arena)
    }

    /// Frees the largest idle arena, if any: the one a larger one is about to replace.
    fn drop_largest(&self, idle: &mut Vec<Arena>) {
        if let Some(k) = (0..idle.len()).max_by_key(|&k| idle[k].bytes().len()) {
            let old = idle.swap_remove(k);
            self.bytes
                .fetch_sub(old.bytes().len(), std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Lays out buffers of `sizes` bytes one after another at [`ALIGN`]ed offsets: the offsets and
/// the total length, or `None` when the total does not fit in `usize`.
pub fn layout(sizes: &[usize]) -> Option<(Vec<usize>, usize)> {
    let mut offsets = Vec::with_capacity(sizes.len());
    let mut end = 0usize;
    for &n in sizes {
        offsets.push(end);
        end = end.checked_add(n)?.checked_next_multiple_of(ALIGN)?;
    }
    Some((offsets, end))
}

/// The input ranges to read and the output range to write, borrowed from one block.
pub type Split<'a> = (SmallVec<[&'a [u8]; 4]>, &'a mut [u8]);

/// Borrows the `(offset, len)` ranges `inputs` to read and `output` to write, out of one
/// block. `None` when a range is outside `arena` or an input overlaps the output.
pub fn split<'a>(
    arena: &'a mut [u8],
    inputs: &[(usize, usize)],
    output: (usize, usize),
) -> Option<Split<'a>> {
    let (start, len) = output;
    let end = start.checked_add(len)?;
    if end > arena.len() {
        return None;
    }
    let (head, rest) = arena.split_at_mut(start);
    let (out, tail) = rest.split_at_mut(len);
    let (head, tail): (&'a [u8], &'a [u8]) = (head, tail);
    let ins = inputs
        .iter()
        .map(|&(offset, n)| {
            let last = offset.checked_add(n)?;
            if last <= start {
                head.get(offset..last)
            } else if offset >= end {
                tail.get(offset - end..last - end)
            } else if n == 0 || len == 0 {
                // Empty ranges overlap nothing.
                Some(&[][..])
            } else {
                None
            }
        })
        .collect::<Option<SmallVec<_>>>()?;
    Some((ins, out))
}

/// Where one tensor of a workload lives in an arena.
#[derive(Debug, Clone, Copy)]
pub struct Place<'t> {
    /// Byte offset.
    pub offset: usize,
    /// Length in bytes.
    pub bytes: usize,
    /// Shape and type.
    pub info: &'t TensorInfo,
}

impl Place<'_> {
    /// Its byte range in the arena; `None` when the end overflows.
    pub fn range(&self) -> Option<std::ops::Range<usize>> {
        Some(self.offset..self.offset.checked_add(self.bytes)?)
    }
}

/// Where a workload reads one input.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// A place in the arena.
    Arena(Place<'a>),
    /// The caller's buffer, read in place.
    Caller(&'a [u8], &'a TensorInfo),
}

/// Where a workload writes its output.
#[derive(Debug)]
pub enum Sink<'a> {
    /// A place in the arena.
    Arena(Place<'a>),
    /// The caller's buffer, written in place.
    Caller(&'a mut [u8], &'a TensorInfo),
}

/// Runs `workload`: it reads `inputs` and writes `output`, each from or to its place in
/// `arena` or the caller's buffer. `None` (nothing runs) when a place is outside the arena or
/// an input in the arena overlaps an output there. The in-process loop and an out-of-process
/// server run every workload through this.
pub fn execute<'a>(
    arena: &'a mut [u8],
    inputs: &[Source<'a>],
    output: Sink<'a>,
    workload: &WorkloadHandle,
) -> Option<Result<(), CallError>> {
    let ranges: SmallVec<[(usize, usize); 4]> = inputs
        .iter()
        .filter_map(|s| match s {
            Source::Arena(p) => Some((p.offset, p.bytes)),
            Source::Caller(..) => None,
        })
        .collect();
    let (from_arena, out, out_info) = match output {
        Sink::Arena(p) => {
            let (ins, out) = split(arena, &ranges, (p.offset, p.bytes))?;
            (ins, out, p.info)
        }
        Sink::Caller(out, info) => {
            let arena: &'a [u8] = arena;
            let ins = ranges
                .iter()
                .map(|&(offset, n)| arena.get(offset..offset.checked_add(n)?))
                .collect::<Option<SmallVec<_>>>()?;
            (ins, out, info)
        }
    };
    let mut from_arena = from_arena.into_iter();
    let views: SmallVec<[TensorView<'_>; 4]> = inputs
        .iter()
        .map(|s| match *s {
            Source::Arena(p) => TensorView::new(
                p.info,
                from_arena.next().expect("one range per arena input"),
            ),
            Source::Caller(bytes, info) => TensorView::new(info, bytes),
        })
        .collect();
    let mut outs = [TensorViewMut::new(out_info, out)];
    Some(workload.execute(&views, &mut outs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_aligns_every_buffer() {
        assert_eq!(layout(&[3, 64, 65, 0]), Some((vec![0, 64, 128, 256], 256)));
        assert_eq!(layout(&[]), Some((vec![], 0)));
        assert_eq!(layout(&[usize::MAX - 10, 1]), None);
        assert_eq!(layout(&[usize::MAX / 2, usize::MAX / 2 + 1]), None);
    }

    /// A size the allocator refuses is an error, not an abort.
    #[test]
    fn a_pool_reuses_and_grows_its_arenas() {
        let pool = Pool::default();
        pool.reserve(100).unwrap();
        assert_eq!(pool.bytes(), 104);
        let a = pool.take(64).unwrap();
        assert_eq!(a.bytes().len(), 104, "the idle arena is large enough");
        // Taken: a second run at once gets an arena of its own.
        let b = pool.take(8).unwrap();
        assert_eq!((b.bytes().len(), pool.bytes()), (8, 112));
        pool.give(a);
        pool.give(b);
        // The smallest that fits is taken; too small ones are grown, not added to.
        assert_eq!(pool.take(8).unwrap().bytes().len(), 8);
        let c = pool.take(1000).unwrap();
        assert_eq!((c.bytes().len(), pool.bytes()), (1000, 1008));
        pool.give(c);
        pool.reserve(500).unwrap();
        assert_eq!(pool.bytes(), 1008, "reserve takes an idle arena that fits");
        assert!(pool.take(usize::MAX - 64).is_err());
    }

    #[test]
    fn heap_too_large_is_an_error() {
        assert!(Arena::heap(usize::MAX - 64).is_err());
        assert!(Arena::heap(1 << 62).is_err());
        assert_eq!(Arena::heap(17).map(|a| a.bytes().len()).ok(), Some(24));
    }

    /// Inputs before and after the output are borrowed; overlaps and ranges past the end are
    /// refused.
    #[test]
    fn split_borrows_disjoint_ranges() {
        let mut block: Vec<u8> = (0..32).collect();
        {
            let (ins, out) = split(&mut block, &[(0, 4), (24, 8)], (8, 8)).unwrap();
            assert_eq!(ins[0], &[0, 1, 2, 3]);
            assert_eq!(ins[1], &[24, 25, 26, 27, 28, 29, 30, 31]);
            out.fill(0);
        }
        assert_eq!(&block[8..16], &[0; 8]);
        assert!(split(&mut block, &[(4, 8)], (8, 8)).is_none());
        assert!(split(&mut block, &[(0, 4)], (30, 8)).is_none());
        assert!(split(&mut block, &[(30, 4)], (0, 8)).is_none());
        assert!(split(&mut block, &[(usize::MAX, 4)], (0, 8)).is_none());
    }
}
