//! Shared memory between the host and an out-of-process backend ([`crate::remote`]): one
//! `memfd` holding a loaded network's tensor arena, mapped by both processes.
//!
//! The host creates it ([`SharedMemory::create`]) and passes its descriptor over the server's
//! socket; the server maps the same pages ([`SharedMemory::from_fd`]). Each side touches the
//! pages only while the other is not running workloads on them: the host is blocked in the
//! call that asked the server to run a segment, and holds no reference into the mapping
//! across that call.

use std::{
    fs::File,
    io,
    os::fd::{AsFd, BorrowedFd, OwnedFd},
};

use memmap2::MmapMut;

/// A mapped `memfd`.
pub struct SharedMemory {
    map: MmapMut,
    /// The descriptor, kept so that it can be sent; closed on drop (the mapping stays valid
    /// until then either way).
    file: File,
    len: usize,
}

impl std::fmt::Debug for SharedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedMemory({} bytes)", self.len)
    }
}

impl SharedMemory {
    /// A new zero-filled shared region of `len` bytes (at least one page is mapped).
    ///
    /// # Errors
    /// `memfd_create`, `ftruncate` or `mmap` failed.
    pub fn create(len: usize) -> io::Result<Self> {
        let fd = rustix::fs::memfd_create(
            "backplane-tensors",
            rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
        )?;
        let file = File::from(fd);
        file.set_len(len.max(1) as u64)?;
        // Its size is fixed from now on: the server cannot shrink it under the host's mapping
        // (which would fault the host on access).
        rustix::fs::fcntl_add_seals(
            &file,
            rustix::fs::SealFlags::SHRINK
                | rustix::fs::SealFlags::GROW
                | rustix::fs::SealFlags::SEAL,
        )?;
        Self::map(file, len)
    }

    /// Maps a region received from the host; `len` is the size the host said it has.
    ///
    /// # Errors
    /// The file is smaller than `len`, or `mmap` failed.
    pub fn from_fd(fd: OwnedFd, len: usize) -> io::Result<Self> {
        let file = File::from(fd);
        let size = file.metadata()?.len();
        if size < len.max(1) as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("shared region has {size} bytes, {len} expected"),
            ));
        }
        Self::map(file, len)
    }

    fn map(file: File, len: usize) -> io::Result<Self> {
        // SAFETY: the file is a memfd that only this process and its out-of-process server
        // map. The server writes to it only while this process waits for the call that asked
        // it to (the module's rule), and its size cannot change under the mapping (sealed by
        // the host before any mapping was shared). The mapping lives as long as `self`.
        let map = unsafe { memmap2::MmapOptions::new().len(len.max(1)).map_mut(&file)? };
        Ok(Self { map, file, len })
    }

    /// The descriptor, to pass to the other process.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// The region's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` for an empty region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes, to read.
    pub fn as_slice(&self) -> &[u8] {
        &self.map[..self.len]
    }

    /// The bytes, to write.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.map[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two mappings of one memfd see each other's writes, and a short file is refused.
    #[test]
    fn two_mappings_share_their_bytes() {
        let mut a = SharedMemory::create(4096 + 3).unwrap();
        let fd = a.fd().try_clone_to_owned().unwrap();
        let mut b = SharedMemory::from_fd(fd, 4096 + 3).unwrap();
        a.as_mut_slice()[4096 + 2] = 7;
        assert_eq!(b.as_slice()[4096 + 2], 7);
        b.as_mut_slice()[0] = 9;
        assert_eq!(a.as_slice()[0], 9);
        let fd = a.fd().try_clone_to_owned().unwrap();
        let e = SharedMemory::from_fd(fd, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("4099 bytes"), "{e}");
        // Sealed: the file cannot shrink under a mapping.
        assert!(a.file.set_len(1).is_err());
    }
}
