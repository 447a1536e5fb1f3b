//! # Acme GpuCl: an example backplane vendor plugin with device tensors
//!
//! `GpuCl` (vendor `Acme`) is an OpenCL backend a vendor can copy as the starting point of a
//! GPU backend. It computes in its device's memory (Backend API 1.3, capability
//! `DeviceMemory`): the host allocates, fills and reads its buffers through its memory
//! manager and runs its workloads through `Workload::execute_device`; see the README for the
//! whole life cycle.
//!
//! - Float32, NCHW: Convolution2d and DepthwiseConvolution2d (groups, strides, dilations,
//!   padding, bias), FullyConnected, BatchMatMul (transposes, broadcast batches),
//!   ElementwiseBinary (every operation, numpy broadcasting up to rank 6), ElementwiseUnary,
//!   Activation (every function), Pooling2d (max, average, padding, ceil mode,
//!   `count_include_pad`), Mean, Reduce, Softmax, LayerNormalization, BatchNormalization,
//!   Reshape, Flatten, Transpose, Concat and MemCopy; every refusal carries a reason starting
//!   with `GpuCl:`;
//! - its own `PreCompiled` layers, made by `optimize_subgraph` (`fusion.rs`): convolution +
//!   batch normalisation + activation chains.
//!
//! The kernels are OpenCL C (`src/kernels/*.cl`, built on first use, once for every backend
//! instance of the process on the same device: they share the context, queue and program). The crate is `#![deny(unsafe_code)]`; only `cl.rs`, the thin wrapper over
//! `opencl3`'s unsafe calls, allows it, and the one call of its `unsafe fn launch` (in
//! `workloads/mod.rs`, whose bound buffers and plan make the kernel's indices safe).
//!
//! ## Files (the same set in every backplane backend)
//! | file | what |
//! |---|---|
//! | `backend.rs` | the [`Backend`](backplane_api::Backend): device choice, capabilities, factories |
//! | `layer_support.rs` | the routing function: what GpuCl runs (with a reason for every refusal) and which workload it makes |
//! | `workload_factory.rs` | one workload per layer or fused layer, as the route names it |
//! | `workloads/<op>.rs` | the launch plans of each operation; `workloads/mod.rs` runs them |
//! | `memory.rs` | the memory manager: device buffers, transfers, imports, the fence |
//! | `device.rs` | the opened device and its program (shared in the process), the instance's buffer table |
//! | `cl.rs` | the OpenCL calls (the crate's only `unsafe`, with the call of its `unsafe fn launch`) |
//! | `kernels/*.cl` | the OpenCL C kernels |
//! | `fusion.rs` | `optimize_subgraph`: convolution chains |
//! | `fused_op.rs` | the description of a fused chain and its versioned binary form |
//!
//! What every backend needs comes from `backplane-backend-kit` (released with the Backend
//! API): the payload reader and writer under `fused_op.rs`, the subgraph queries and greedy
//! driver under `fusion.rs`, the `Route` pattern and the refusals of `layer_support.rs`, the
//! convolution and pooling geometry, the constant reader and the tests' seeded generator.
//!
//! ## Device
//! [`DEVICE_VAR`] (`BACKPLANE_GPUCL_DEVICE`) chooses the device by a part of its name; without
//! it the first GPU, else the first device of any type. Without libOpenCL, a platform or a
//! device the factory fails with a sentence saying which (the host reports it as
//! `factory_failed`).

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod backend;
#[allow(
    unsafe_code,
    reason = "the thin wrapper over opencl3's unsafe buffer, enqueue and kernel-argument calls"
)]
mod cl;
mod device;
mod fused_op;
mod fusion;
mod layer_support;
mod memory;
mod workload_factory;
mod workloads;

pub use backend::{DEVICE_VAR, GpuCl};
pub use memory::GpuMemory;
pub use workload_factory::GpuClWorkloadFactory;

/// The backend id of GpuCl.
pub const GPU_CL_ID: &str = "GpuCl";

backplane_api::export_backend!(id: "GpuCl", vendor: "Acme", backend: GpuCl::from_env);
