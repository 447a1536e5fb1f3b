//! Seal keys on disk, the seals section, and what a seal covers.

use std::os::unix::fs::PermissionsExt;

use backplane_api::{BinaryOperation, ConstTensor, DataType, LayerDescriptor, TensorInfo};

use super::*;
use crate::graph::network::NetworkBuilder;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Made once (mode 0600, 64 hex digits, its new folder 0700), then read back the same, by
/// `read` and by `read_or_create` alike.
#[test]
fn a_key_is_made_once_for_its_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config/backplane/seal.key");
    let made = SealKey::read_or_create(&path).unwrap();
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.len(), 65, "{text:?}");
    assert!(text.ends_with('\n') && text[..64].bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(SealKey::read(&path).unwrap().0, made.0);
    assert_eq!(SealKey::read_or_create(&path).unwrap().0, made.0);
    assert_ne!(made.0, [0; 32]);
    // Nothing but the key is left in the folder (the temporary file was linked, then gone).
    assert_eq!(
        std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
        1
    );
}

/// A key others may read, a file of other content, a folder: refused, each saying why; a
/// missing file is an I/O error for `read` (loading never makes a key).
#[test]
fn an_unusable_key_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seal.key");
    std::fs::write(&path, format!("{}\n", "ab".repeat(32))).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = SealKey::read(&path).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "seal key {}: group or others may use it (mode 644); `chmod 600` it",
            path.display()
        )
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(SealKey::read(&path).unwrap().0, [0xab; 32]);
    std::fs::write(&path, "not a key").unwrap();
    let e = SealKey::read(&path).unwrap_err().to_string();
    assert!(e.ends_with("does not hold 64 hexadecimal digits"), "{e}");
    let e = SealKey::read(dir.path()).unwrap_err().to_string();
    assert!(e.ends_with("not a regular file"), "{e}");
    let missing = dir.path().join("none.key");
    assert!(matches!(
        SealKey::read(&missing),
        Err(SealKeyError::Io { .. })
    ));
    assert!(!missing.exists());
}

#[test]
fn the_seals_section_round_trips_and_refuses_damage() {
    let a = [7u8; 32];
    let b = [9u8; 32];
    let bytes = encode(&[(1, a), (3, b)]);
    assert_eq!(bytes.len(), 2 * ENTRY);
    assert_eq!(
        decode(&bytes, 4).unwrap(),
        vec![None, Some(a), None, Some(b)]
    );
    assert_eq!(
        decode(&bytes[..ENTRY + 1], 4).unwrap_err(),
        "the seals section has 41 bytes, not a multiple of 40"
    );
    assert_eq!(decode(&bytes, 3).unwrap_err(), "a seal for layer 3, of 3");
    let twice = encode(&[(1, a), (1, b)]);
    assert_eq!(decode(&twice, 4).unwrap_err(), "layer 1 is sealed twice");
    let mut padded = bytes;
    padded[5] = 1;
    assert_eq!(
        decode(&padded, 4).unwrap_err(),
        "the seal of layer 1 has nonzero padding"
    );
}

/// `y = x + c`, with `c` of these values; layer 2 is the Add.
fn add_network(c: &[f32]) -> Network {
    let mut b = NetworkBuilder::new();
    let x = b
        .add_input("x", TensorInfo::new(&[2], DataType::Float32))
        .unwrap();
    let c = b.add_constant("c", ConstTensor::from_f32(&[2], c)).unwrap();
    let y = b
        .add_layer(
            "add",
            LayerDescriptor::ElementwiseBinary(BinaryOperation::Add),
            &[x, c],
        )
        .unwrap();
    b.add_output("y", y).unwrap();
    b.build().unwrap()
}

/// A seal holds for exactly what it was made for: another key, blob, constant value,
/// backend, format version or layer breaks it.
#[test]
fn a_seal_covers_key_layer_constants_backend_version_and_blob() {
    let key = SealKey::from_bytes([1; 32]);
    let network = add_network(&[1.0, 2.0]);
    let p = Prepared {
        network: &network,
        layer: 2,
        backend: "CpuFast",
        version: 3,
        blob: b"prepared weights",
    };
    let seal = key.seal(&p);
    assert!(key.verify(&p, &seal));
    assert!(!SealKey::from_bytes([2; 32]).verify(&p, &seal));
    let forged = b"prepared weighus";
    assert!(!key.verify(&Prepared { blob: forged, ..p }, &seal));
    let changed = add_network(&[1.0, 2.5]);
    assert!(!key.verify(
        &Prepared {
            network: &changed,
            ..p
        },
        &seal
    ));
    assert!(!key.verify(
        &Prepared {
            backend: "GpuCl",
            ..p
        },
        &seal
    ));
    assert!(!key.verify(&Prepared { version: 4, ..p }, &seal));
    assert!(!key.verify(&Prepared { layer: 3, ..p }, &seal));
    // The same inputs, the same seal (nothing random in it).
    let again = add_network(&[1.0, 2.0]);
    assert_eq!(
        key.seal(&Prepared {
            network: &again,
            ..p
        }),
        seal
    );
}
