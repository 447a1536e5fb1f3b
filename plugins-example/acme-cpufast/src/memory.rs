//! The CpuFast memory manager: an arena for the kernels' scratch memory (im2col columns and
//! the intermediate tensor of a fused chain that ends in pooling).
//!
//! Design, kept deliberately simple:
//! 1. Each workload tells the arena, when it is created, the most scratch it needs for one
//!    execution ([`Arena::reserve`]). The arena remembers the largest request.
//! 2. [`acquire`](MemoryManager::acquire) (before the first execution) and every later
//!    `reserve` while acquired make sure the arena holds one slab of that size.
//! 3. An execution borrows a slab ([`Arena::scratch`]) and gives it back when done. Concurrent
//!    executions of one network find the pool empty and allocate another slab, which also
//!    returns to the pool; so the arena grows to the concurrency actually seen, no further.
//! 4. [`release`](MemoryManager::release) (network unloaded) frees every pooled slab; slabs
//!    still borrowed are freed when they come back.
//!
//! [`allocated_bytes`](MemoryManager::allocated_bytes) counts every slab alive, pooled or
//! borrowed.

use std::{
    ops::{Deref, DerefMut},
    sync::{
        Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
};

use backplane_api::{BackendResult, MemoryManager};

/// What the lock protects.
#[derive(Debug, Default)]
struct Pool {
    /// Between `acquire` and `release`.
    acquired: bool,
    /// The largest scratch one execution needs, in elements.
    reserved: usize,
    /// Slabs not lent out.
    free: Vec<Vec<f32>>,
}

/// The arena (see the module documentation).
#[derive(Debug, Default)]
pub struct Arena {
    pool: Mutex<Pool>,
    /// Bytes of every slab alive.
    bytes: AtomicU64,
}

/// Bytes of a slab.
fn slab_bytes(slab: &Vec<f32>) -> u64 {
    (slab.capacity() * size_of::<f32>()) as u64
}

impl Arena {
    /// A new, unacquired arena.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Pool> {
        // A panic while the lock was held left the pool consistent (it only pushes and pops).
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new slab of `len` elements, counted.
    fn allocate(&self, len: usize) -> Vec<f32> {
        let slab = vec![0f32; len];
        self.bytes.fetch_add(slab_bytes(&slab), Ordering::Relaxed);
        slab
    }

    /// Forgets a slab.
    fn free(&self, slab: Vec<f32>) {
        self.bytes.fetch_sub(slab_bytes(&slab), Ordering::Relaxed);
    }

    /// Makes sure the pool holds a slab of the reserved size (while acquired).
    fn fill(&self, pool: &mut Pool) {
        if !pool.acquired || pool.reserved == 0 {
            return;
        }
        if pool.free.iter().all(|s| s.len() < pool.reserved) {
            if let Some(small) = pool.free.pop() {
                self.free(small);
            }
            let slab = self.allocate(pool.reserved);
            pool.free.push(slab);
        }
    }

    /// Records that one execution of a workload needs `len` elements of scratch.
    pub fn reserve(&self, len: usize) {
        let mut pool = self.lock();
        if len > pool.reserved {
            pool.reserved = len;
            self.fill(&mut pool);
        }
    }

    /// Borrows `len` elements of scratch (contents unspecified) until the guard drops.
    pub fn scratch(&self, len: usize) -> Scratch<'_> {
        let slab = {
            let mut pool = self.lock();
            pool.free
                .iter()
                .position(|s| s.len() >= len)
                .map(|i| pool.free.swap_remove(i))
        };
        let slab = slab.unwrap_or_else(|| self.allocate(len));
        Scratch {
            arena: self,
            slab,
            len,
        }
    }
}

impl MemoryManager for Arena {
    fn acquire(&self) -> BackendResult<()> {
        let mut pool = self.lock();
        pool.acquired = true;
        self.fill(&mut pool);
        log::debug!(
            "CpuFast arena acquired: {} bytes",
            self.bytes.load(Ordering::Relaxed)
        );
        Ok(())
    }

    fn release(&self) -> BackendResult<()> {
        let mut pool = self.lock();
        pool.acquired = false;
        for slab in pool.free.drain(..) {
            self.free(slab);
        }
        log::debug!(
            "CpuFast arena released; {} bytes still lent out",
            self.bytes.load(Ordering::Relaxed)
        );
        Ok(())
    }

    fn allocated_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// Scratch memory borrowed from an [`Arena`]; returned to it on drop.
#[derive(Debug)]
pub struct Scratch<'a> {
    arena: &'a Arena,
    slab: Vec<f32>,
    len: usize,
}

impl Deref for Scratch<'_> {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        &self.slab[..self.len]
    }
}

impl DerefMut for Scratch<'_> {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.slab[..self.len]
    }
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        let slab = std::mem::take(&mut self.slab);
        let mut pool = self.arena.lock();
        if pool.acquired {
            pool.free.push(slab);
        } else {
            drop(pool);
            self.arena.free(slab);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arena holds the largest reservation while acquired, lends and takes back slabs,
    /// grows only under concurrent borrowing, and frees everything on release.
    #[test]
    fn life_cycle() {
        let arena = Arena::new();
        arena.reserve(100);
        assert_eq!(arena.allocated_bytes(), 0, "nothing before acquire");
        arena.acquire().unwrap();
        assert_eq!(arena.allocated_bytes(), 400);
        arena.reserve(50);
        arena.reserve(250);
        assert_eq!(
            arena.allocated_bytes(),
            1000,
            "one slab of the largest request"
        );
        {
            let mut a = arena.scratch(250);
            a.fill(1.0);
            assert_eq!(a.len(), 250);
            let b = arena.scratch(10);
            assert_eq!(b.len(), 10);
            assert_eq!(
                arena.allocated_bytes(),
                1040,
                "a second slab while the first is lent"
            );
        }
        let again = arena.scratch(200);
        assert_eq!(again.len(), 200);
        assert_eq!(arena.allocated_bytes(), 1040, "slabs are reused");
        drop(again);
        arena.release().unwrap();
        assert_eq!(arena.allocated_bytes(), 0);
        let late = arena.scratch(8);
        assert_eq!(arena.allocated_bytes(), 32);
        drop(late);
        assert_eq!(arena.allocated_bytes(), 0, "not pooled after release");
    }
}
