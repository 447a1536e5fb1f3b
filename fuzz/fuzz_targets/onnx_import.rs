//! Fuzz target: any bytes given to the ONNX importer give a network or an error, never a
//! panic, a hang or an abort.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = backplane::onnx::import_bytes(data, &backplane::onnx::ImportOptions::default());
});
