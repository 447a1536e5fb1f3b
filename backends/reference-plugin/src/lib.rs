//! CpuRef as a plugin: `libbackplane_ref_plugin.so`, installed as
//! `Backplane_CpuRef_backend.so`. The backend itself is the `backplane-ref` crate, which the
//! host links as a built-in; the Backend API symbols live only here, so no binary that links
//! `backplane-ref` (the host, a test plugin) exports them.

backplane_api::export_backend!(id: "CpuRef", vendor: "Backplane", backend: backplane_ref::CpuRef::new);
