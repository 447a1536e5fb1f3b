//! # Acme CpuFast: an example backplane vendor plugin
//!
//! `CpuFast` (vendor `Acme`) is a CPU backend a vendor can copy as the starting point of a
//! real one. It runs a subset of the v1 layers fast and leaves the rest to the next preferred
//! backend (normally `CpuRef`):
//!
//! - `Convolution2d` (im2col + a tuned GEMM, groups handled per group, 1x1 stride-1
//!   unpadded convolutions without im2col), `DepthwiseConvolution2d` (direct kernels,
//!   channel multiplier supported: one pass per output row for stride 1 or 2 without
//!   dilation, strided passes otherwise), `FullyConnected` (GEMM, `transpose_weights` honoured;
//!   a rank-2 input, as the API's shape rule defines the layer),
//!   `Activation` (every function, the 1.1 `Gelu` in both forms), `Pooling2d` (max and
//!   average, padding, strides, ceil mode, `count_include_pad`), `ElementwiseBinary` (every
//!   operation, numpy broadcasting), `BatchNormalization` (so that it can be folded into a
//!   convolution), `Mean` over adjacent axes (GlobalAveragePool), `Softmax` and `Reshape`;
//! - the Backend API 1.1 `BatchMatMul` (one GEMM per numpy-broadcast batch, transposes as
//!   strides; `x [B, S, K] · W [K, N]` as one GEMM of `B·S` rows) and `LayerNormalization`
//!   (statistics in f64);
//! - Float32 and NCHW, and the Backend API 1.2 quantised layers of `int8/` (convolutions,
//!   fully connected, batch matmul with a constant `b`, Add, Mul, Quantize, Dequantize,
//!   Concat, nearest Resize, max pooling; see the README); every refusal carries a reason
//!   starting with `CpuFast:`;
//! - its own `PreCompiled` layers, made by `optimize_subgraph` (`fusion.rs`): convolution,
//!   fully connected or batch matmul chains fused with batch normalisation (convolutions),
//!   bias, activation and pooling (convolutions).
//!
//! The crate is `#![deny(unsafe_code)]`; only `int8/kernels/` (the int8 SIMD kernels:
//! AVX-512 VNNI, AVX2; on aarch64 FEAT_I8MM, FEAT_DotProd, NEON; picked at run time and
//! reported as the capability [`INT8_KERNELS`]) allows it. The float kernels use no `unsafe`:
//! `gemm.rs` calls `faer`'s matrix multiply (AVX-512 or
//! AVX2/FMA micro-kernels picked at run time) through its safe, shape-checked API (see the
//! README for swapping in a BLAS), and the depthwise kernel's plain loops are compiled for
//! AVX2 as well as the baseline and picked at run time through `pulp`'s safe dispatch (which
//! `faer` re-exports).
//!
//! ## Files (the same set in every backplane backend)
//! | file | what |
//! |---|---|
//! | `backend.rs` | the [`Backend`](backplane_api::Backend): capabilities, support, factories |
//! | `layer_support.rs` | the routing function: what CpuFast runs (with a reason for every refusal) and which workload it makes |
//! | `workload_factory.rs` | one workload per layer or fused layer, as the route names it |
//! | `workloads/<op>.rs` | the kernels; `workloads/conv_geometry.rs` what the convolution kernels share |
//! | `memory.rs` | the arena that holds the kernels' scratch memory |
//! | `context.rs` | the backend context: counts loads, unloads and inferences per network |
//! | `fusion.rs` | `optimize_subgraph`: pattern matching of fusable chains |
//! | `fused_op.rs` | the description of a fused chain and its versioned binary form |
//! | `gemm.rs` | the matrix multiply under convolution, fully connected and batch matmul |
//! | `int8/` | the quantised layers and their kernels (the crate's only `unsafe`) |
//!
//! What every backend needs comes from `backplane-backend-kit` (released with the Backend
//! API): the payload reader and writer under `fused_op.rs`, the subgraph queries and greedy
//! driver under `fusion.rs`, the `Route` pattern, the Float32 gate and the other refusals of
//! `layer_support.rs`, the convolution and pooling geometry, the constant reader and the
//! tests' seeded generator.
//!
//! ## Build and install
//! ```text
//! cargo build --release
//! backplane install target/release/libacme_cpufast.so --dir DIR
//! backplane conformance --backend CpuFast --plugin DIR/Acme_CpuFast_backend.so --onnx-tests target/onnx-tests
//! ```
//! `install` names the file `Acme_CpuFast_backend.so.0.1.0` (vendor and release are embedded
//! by [`export_backend!`](backplane_api::export_backend)) with the `.so`, `.so.0` and
//! `.so.0.1` links; point the host at `DIR` with `DYNAMIC_BACKEND_PATHS` or `--path`.
//!
//! The plugin must be built with `panic = "unwind"` (the default): the export layer turns a
//! panic into an error only if it can catch it.
//!
//! ## Threads
//! The backend option `Threads` (Backend API 1.1, per network: `--backend-option
//! CpuFast:Threads=2`) sets the threads a GEMM may use, 1 to 64. Without it,
//! `ACME_CPUFAST_THREADS` (read when the backend is created; default 1) does, and is reported
//! as the `Threads` capability.

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod backend;
mod cache;
mod context;
mod fused_op;
mod fusion;
mod gemm;
mod int8;
mod layer_support;
mod memory;
mod prepared;
mod workload_factory;
mod workloads;

pub use backend::{CpuFast, INT8_KERNELS, MAX_THREADS, THREADS_OPTION, THREADS_VAR};
pub use cache::{L1D_BYTES, L2_BYTES};

/// The backend id of CpuFast.
pub const CPU_FAST_ID: &str = "CpuFast";

backplane_api::export_backend!(id: "CpuFast", vendor: "Acme", backend: CpuFast::from_env);
