//! Test plugin `HeapCorrupt` (vendor `Test`): a working ReLU backend (see
//! `bp_test_exec_fault_support`) whose third `execute` call in the process corrupts the malloc
//! heap, so that glibc's allocator aborts the process (SIGABRT, "free(): invalid pointer").
//!
//! Tests load it only out of process (the host's `--out-of-process HeapCorrupt`): in-process
//! it would kill the test, and a corrupted heap is exactly what the host must not share.

/// Overwrites the malloc chunk header in front of a live allocation, then frees it.
fn corrupt_heap() {
    let block = std::hint::black_box(vec![0u8; 24]);
    let data = std::hint::black_box(block.as_ptr().cast_mut());
    // SAFETY: none: this is the fault this plugin exists for. The word before a malloc'd
    // block is its chunk's size field; a size of almost 2^64 makes glibc's `free` see a chunk
    // that wraps around the address space and abort ("free(): invalid pointer").
    unsafe {
        data.sub(size_of::<usize>())
            .cast::<usize>()
            .write_unaligned(usize::MAX - 15)
    };
    drop(block);
    // Should `free` have let it pass, the next allocations meet the damage.
    std::hint::black_box(vec![0u8; 24]);
    std::hint::black_box(vec![0u8; 4096]);
}

bp_test_exec_fault_support::exec_fault_plugin!(
    "HeapCorrupt",
    "overwriting a malloc chunk header, then freeing it",
    corrupt_heap
);
