//! Custom allocators: the host (application) offers one, a backend may use it.

use std::{ffi::c_void, ptr::NonNull, sync::Arc};

use abi_stable::StableAbi;

/// The application's allocator, as the host implements it.
pub trait HostAllocator: Send + Sync + 'static {
    /// Allocates `size` bytes aligned to `align`; null on failure.
    fn allocate(&self, size: usize, align: usize) -> *mut u8;
    /// Frees a block returned by `allocate` with the same size and alignment.
    fn free(&self, ptr: *mut u8, size: usize, align: usize);
}

/// The ABI form of an allocator: a context pointer and two functions.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct RawAllocator {
    /// Opaque context, passed back to the functions.
    pub ctx: *const c_void,
    /// Allocates `size` bytes aligned to `align`; null on failure.
    pub allocate: extern "C" fn(ctx: *const c_void, size: usize, align: usize) -> *mut u8,
    /// Frees a block.
    pub free: extern "C" fn(ctx: *const c_void, ptr: *mut u8, size: usize, align: usize),
}

/// Host side: owns the application's allocator while a backend may use it.
pub(crate) struct HostAllocatorBox(Box<Arc<dyn HostAllocator>>);

/// The contexts of every [`RawAllocator`] this host made (each a leaked
/// [`HostAllocatorBox`], never freed). `allocate` and `free` are safe `extern "C"` functions
/// that anyone holding the fields can call with any `ctx`; they only ever use a `ctx` found
/// here, so a forged one is refused (null, or nothing freed) instead of dereferenced.
static LIVE_CONTEXTS: std::sync::RwLock<Vec<usize>> = std::sync::RwLock::new(Vec::new());

/// The host's allocator behind `ctx`, if `ctx` is one this host made.
fn allocator_at(ctx: *const c_void) -> Option<&'static Arc<dyn HostAllocator>> {
    let live = LIVE_CONTEXTS.read().unwrap_or_else(|e| e.into_inner());
    if !live.contains(&(ctx as usize)) {
        return None;
    }
    // SAFETY: `ctx` is listed, so it is the `Arc` inside a `HostAllocatorBox` that the host
    // leaked on purpose (`HostAllocatorBox::raw` lists only leaked boxes): valid for the
    // rest of the process.
    Some(unsafe { &*ctx.cast::<Arc<dyn HostAllocator>>() })
}

extern "C" fn host_allocate(ctx: *const c_void, size: usize, align: usize) -> *mut u8 {
    let Some(a) = allocator_at(ctx) else {
        return std::ptr::null_mut();
    };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| a.allocate(size, align)))
        .unwrap_or(std::ptr::null_mut())
}

extern "C" fn host_free(ctx: *const c_void, ptr: *mut u8, size: usize, align: usize) {
    if let Some(a) = allocator_at(ctx) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| a.free(ptr, size, align)));
    }
}

impl HostAllocatorBox {
    pub(crate) fn new(a: Arc<dyn HostAllocator>) -> Self {
        Self(Box::new(a))
    }

    /// The ABI form of this allocator. Only for a box that is never freed (`'static`: the
    /// host leaks it), since its context is listed as live from now on.
    pub(crate) fn raw(&'static self) -> RawAllocator {
        let ctx: *const c_void = (&*self.0 as *const Arc<dyn HostAllocator>).cast();
        LIVE_CONTEXTS
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(ctx as usize);
        RawAllocator {
            ctx,
            allocate: host_allocate,
            free: host_free,
        }
    }
}

/// Plugin side: the allocator a backend was offered in `use_custom_allocator`.
#[derive(Clone, Copy, Debug)]
pub struct CustomAllocator(RawAllocator);

// SAFETY: the host's allocator is `Send + Sync` (`HostAllocator`'s bounds) and lives for the
// rest of the process (the host leaks its box).
unsafe impl Send for CustomAllocator {}
// SAFETY: as above.
unsafe impl Sync for CustomAllocator {}

impl CustomAllocator {
    pub(crate) fn new(raw: RawAllocator) -> Self {
        Self(raw)
    }

    /// Allocates a zeroed buffer of `size` bytes aligned to `align` (a power of two), or `None`.
    pub fn allocate(&self, size: usize, align: usize) -> Option<AllocatedBuffer> {
        if !align.is_power_of_two() || size == 0 {
            return None;
        }
        let ptr = NonNull::new((self.0.allocate)(self.0.ctx, size, align))?;
        if ptr.as_ptr().align_offset(align) != 0 {
            (self.0.free)(self.0.ctx, ptr.as_ptr(), size, align);
            return None;
        }
        // SAFETY: the allocator returned `size` writable bytes at `ptr`.
        unsafe { ptr.as_ptr().write_bytes(0, size) };
        Some(AllocatedBuffer {
            ptr,
            size,
            align,
            allocator: *self,
        })
    }
}

/// A buffer from a [`CustomAllocator`], freed on drop.
#[derive(Debug)]
pub struct AllocatedBuffer {
    ptr: NonNull<u8>,
    size: usize,
    align: usize,
    allocator: CustomAllocator,
}

// SAFETY: the buffer is uniquely owned memory; the allocator is `Send + Sync`.
unsafe impl Send for AllocatedBuffer {}
// SAFETY: shared access only reads.
unsafe impl Sync for AllocatedBuffer {}

impl std::ops::Deref for AllocatedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` holds `size` initialised (zeroed at allocation) bytes owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.size) }
    }
}

impl std::ops::DerefMut for AllocatedBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.size) }
    }
}

impl Drop for AllocatedBuffer {
    fn drop(&mut self) {
        (self.allocator.0.free)(
            self.allocator.0.ctx,
            self.ptr.as_ptr(),
            self.size,
            self.align,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counting(std::sync::atomic::AtomicUsize);

    impl HostAllocator for Counting {
        fn allocate(&self, size: usize, align: usize) -> *mut u8 {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let layout = std::alloc::Layout::from_size_align(size, align).unwrap();
            // SAFETY: a non-zero size (the tests ask for 64 bytes).
            unsafe { std::alloc::alloc(layout) }
        }
        fn free(&self, ptr: *mut u8, size: usize, align: usize) {
            let layout = std::alloc::Layout::from_size_align(size, align).unwrap();
            // SAFETY: `ptr` came from `allocate` with this layout.
            unsafe { std::alloc::dealloc(ptr, layout) }
        }
    }

    /// The safe functions of a `RawAllocator` called with a context the host never made (a
    /// forged or stale pointer, which safe code can pass): refused, never dereferenced. With
    /// the real one they reach the application's allocator.
    #[test]
    fn a_forged_context_is_refused() {
        let counting = Arc::new(Counting(std::sync::atomic::AtomicUsize::new(0)));
        let boxed: &'static HostAllocatorBox =
            Box::leak(Box::new(HostAllocatorBox::new(counting.clone())));
        let raw = boxed.raw();
        let forged = [
            std::ptr::null(),
            8usize as *const c_void,
            (&raw as *const RawAllocator).cast(),
        ];
        for ctx in forged {
            assert!((raw.allocate)(ctx, 64, 8).is_null());
            (raw.free)(ctx, 16usize as *mut u8, 64, 8);
        }
        assert_eq!(counting.0.load(std::sync::atomic::Ordering::Relaxed), 0);
        let buffer = CustomAllocator::new(raw).allocate(64, 8).unwrap();
        assert_eq!(buffer.len(), 64);
        assert_eq!(counting.0.load(std::sync::atomic::Ordering::Relaxed), 1);
    }
}
