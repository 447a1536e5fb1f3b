//! Tensor memory in host memory: the arena a network's tensors live in (heap, or shared with
//! an out-of-process backend) and the plan that places each tensor in it by lifetime.
//!
//! - [`arena`]: the arena, its 64-byte aligned layout, and running a workload on places in it.
//! - [`memory_plan`]: intermediate tensors placed by lifetime, buffers reused.
//! - [`budget`]: the memory budget every load charges before it allocates.
//!
//! Imports: `sys`.

pub mod arena;
pub mod budget;
pub mod memory_plan;
