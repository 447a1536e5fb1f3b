//! The [`MemoryManager`] trait.

use crate::BackendResult;

/// A backend's memory manager (for example an arena for its intermediate buffers).
pub trait MemoryManager: Send + Sync + 'static {
    /// Allocates what the backend needs; called before the first execution.
    fn acquire(&self) -> BackendResult<()>;

    /// Frees it again; called when the network is unloaded.
    fn release(&self) -> BackendResult<()>;

    /// Bytes currently held, for reports.
    fn allocated_bytes(&self) -> u64 {
        0
    }
}
