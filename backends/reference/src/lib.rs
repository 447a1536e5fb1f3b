//! # CpuRef: backplane's reference CPU backend
//!
//! Correct first, on ndarray. Built into the host (registered by
//! `backplane::register_builtin_backends`) and also a plugin: `backplane-ref-plugin`
//! (`backends/reference-plugin`) is its `cdylib`, installed as `Backplane_CpuRef_backend.so`.
//! This crate exports no Backend API symbols, so any binary may link it.
//!
//! Layers: every layer kind of Backend API 1.1 but `PreCompiled`, in Float32 (see
//! `layer_support.rs`); with quantised tensors (Backend API 1.2), `Quantize`, `Dequantize`,
//! `Requantize`, the convolutions and matrix products in exact integer arithmetic, and the
//! layers real int8 models use around them (`workloads/quantized/`), with onnxruntime's
//! arithmetic. Everything else is refused with a reason.

mod backend;
mod layer_support;
mod workload_factory;
mod workloads;

pub use backend::CpuRef;

/// The backend id of CpuRef.
pub const CPU_REF_ID: &str = "CpuRef";
