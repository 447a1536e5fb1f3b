//! Fuzz target: any bytes read as a `.npy` file give an array or an error, never a panic or an
//! allocation beyond what the bytes can hold; an accepted array has as many values as its
//! shape says.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("fuzz.npy");
    match backplane::npy::read_f32_bytes(path, data) {
        Ok((shape, values)) => {
            let count: u64 = shape.iter().map(|&d| u64::from(d)).product();
            assert_eq!(count, values.len() as u64);
            assert!(values.len() * 4 <= data.len(), "more values than bytes");
        }
        Err(e) => assert_eq!(e.path(), path),
    }
});
