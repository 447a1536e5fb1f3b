//! Fuzz target: any bytes read as a compiled network (`.bpn`) give a network or an error,
//! never a panic, a hang or an allocation the bytes do not justify. The bytes are read as
//! given, then once more re-sealed: every checksum the container holds (each section's, then
//! the table's) recomputed, so that mutations reach the network section's decoding and the
//! network's rebuild instead of stopping at a checksum. A network that reads is then bound to
//! a runtime with CpuRef, loaded within a memory budget of 64 MiB (issue 40: a crafted size is
//! refused, not allocated) and run once on zeros: the stored layers' descriptors and
//! constants reach CpuRef's workload creation and execution.
#![no_main]

use std::sync::{Arc, OnceLock};

use backplane::{
    CreationOptions, InputTensor, Runtime, Session, SessionOptions,
    compiled::{
        CompiledNetwork,
        container::{MAGIC, MAX_SECTIONS},
    },
};
use libfuzzer_sys::fuzz_target;

/// The container's header and table entry sizes (see `backplane::compiled::container`).
const HEADER: usize = 24;
const ENTRY: usize = 32;

/// `data` with the container's checksums recomputed, or `None` when it has no BPNET header
/// or no whole table to re-seal.
fn resealed(data: &[u8]) -> Option<Vec<u8>> {
    if data.len() < HEADER || !data.starts_with(MAGIC) {
        return None;
    }
    let mut f = data.to_vec();
    let count = u32::from_le_bytes(f[12..16].try_into().ok()?).min(MAX_SECTIONS) as usize;
    let table_end = HEADER + ENTRY * count;
    if table_end > f.len() {
        return None;
    }
    for e in (HEADER..table_end).step_by(ENTRY) {
        let offset = u64::from_le_bytes(f[e + 8..e + 16].try_into().ok()?);
        let length = u64::from_le_bytes(f[e + 16..e + 24].try_into().ok()?);
        let range = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(length).ok())
            .and_then(|(o, l)| Some(o..o.checked_add(l)?))
            .filter(|r| r.end <= f.len());
        if let Some(r) = range {
            let crc = crc32fast::hash(&f[r]);
            f[e + 24..e + 28].copy_from_slice(&crc.to_le_bytes());
        }
    }
    let crc = crc32fast::hash(&f[HEADER..table_end]);
    f[16..20].copy_from_slice(&crc.to_le_bytes());
    Some(f)
}

/// Binds, loads and runs `compiled` once on zeros, on CpuRef alone; errors are fine.
fn load_and_run(compiled: &CompiledNetwork) {
    static RUNTIME: OnceLock<Arc<Runtime>> = OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        let empty = std::env::temp_dir().join("backplane-fuzz-no-plugins");
        let _ = std::fs::create_dir_all(&empty);
        Arc::new(Runtime::new(
            CreationOptions::default().with_dynamic_backends_path(empty),
        ))
    });
    let mut options = SessionOptions::default();
    options.max_memory = Some(64 << 20);
    let Ok(session) = Session::from_compiled(runtime.clone(), compiled, &options) else {
        return;
    };
    let Some(plan) = session.current() else {
        return;
    };
    let zeros: Vec<(String, backplane_api::TensorInfo, Vec<u8>)> = plan
        .inputs()
        .iter()
        .map(|(name, info)| {
            let bytes = info.num_bytes().unwrap_or(0).min(64 << 20);
            (name.clone(), info.clone(), vec![0u8; bytes])
        })
        .collect();
    let inputs: Vec<InputTensor<'_>> = zeros
        .iter()
        .map(|(name, info, data)| InputTensor { name, info, data })
        .collect();
    let _ = session.run_alloc(&inputs);
}

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = CompiledNetwork::from_bytes(data) {
        load_and_run(&c);
    }
    if let Some(sealed) = resealed(data)
        && let Ok(c) = CompiledNetwork::from_bytes(&sealed)
    {
        load_and_run(&c);
    }
});
