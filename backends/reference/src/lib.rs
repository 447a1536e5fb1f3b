//! # CpuRef: backplane's reference CPU backend
//!
//! Correct first, on ndarray. Built into the host (registered by
//! `backplane::register_builtin_backends`) and also a plugin: its `cdylib` installs as
//! `Backplane_CpuRef_backend.so`.
//!
//! Layers so far: Input, Output and ElementwiseBinary (Add, Sub, Mul, Div, Maximum, Minimum with
//! numpy broadcasting), in Float32. Everything else is refused with a reason.

mod backend;
mod layer_support;
mod workload_factory;
mod workloads;

pub use backend::CpuRef;

/// The backend id of CpuRef.
pub const CPU_REF_ID: &str = "CpuRef";

backplane_api::export_backend!(id: "CpuRef", vendor: "Backplane", backend: CpuRef::new);
