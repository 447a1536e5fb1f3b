//! Execution: a loaded network (per backend a memory manager, workload factory and context;
//! the tensor arena; the workloads in order) and its runs, profiles and unloading.
//!
//! Imports: `graph`, `plugins`, `remote`, `memory`, `sys`, `report`.

pub(crate) mod device;
pub mod loaded_network;
