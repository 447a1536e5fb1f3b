//! Files mapped read-only: a compiled network's constants and prepared workloads are read in
//! place from the mapping, never copied.

use std::{fs::File, io};

/// Maps `file` read-only and privately (`MAP_PRIVATE`).
///
/// # Errors
/// The operating system's error.
pub fn map_read_only(file: &File) -> io::Result<memmap2::Mmap> {
    // SAFETY: the mapping is read-only and private. Its bytes are read as bytes (slices of
    // `u8`, never as Rust values of other types), and checked (bounds and CRC-32 per section)
    // when the file is opened. memmap2's contract is that the file is not modified or
    // truncated while mapped; this process never writes a file it maps (`compile_to` writes
    // beside and renames over), and the documentation tells users to install compiled
    // networks read-only, as plugins: a file changed in place by another process would show
    // the change (or, truncated, fault on the lost pages), as a plugin's would under `dlopen`.
    unsafe { memmap2::Mmap::map(file) }
}
