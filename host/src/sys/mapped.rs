//! Files mapped read-only: a compiled network's constants and prepared workloads are read in
//! place from the mapping, never copied.

use std::{fs::File, io};

/// Maps `file` read-only and privately (`MAP_PRIVATE`).
///
/// # Errors
/// The operating system's error (an empty file maps as an error too).
pub fn map_read_only(file: &File) -> io::Result<memmap2::Mmap> {
    // SAFETY: the mapping is read-only and private, and every byte of it is checked (bounds
    // and CRC-32 per section) before it is used, so whatever the file holds is read as
    // untrusted bytes, never as Rust values. As with any mapped file (and `dlopen`), a
    // process that truncates the file while it is mapped makes later reads of the lost pages
    // fault: compiled networks are files to install read-only, like plugins.
    unsafe { memmap2::Mmap::map(file) }
}
