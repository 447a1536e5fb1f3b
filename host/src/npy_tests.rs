//! Tests of `npy.rs`.

use super::*;

/// A `.npy` file as NumPy writes it: magic, version, little-endian header length (2
/// bytes in version 1.0, 4 after), the header dict padded with spaces and a newline so
/// that the data starts at a multiple of 64, then the data.
fn npy_file(major: u8, dict: &str, data: &[u8]) -> Vec<u8> {
    let preamble = if major == 1 { 10 } else { 12 };
    let mut text = dict.to_owned();
    let unpadded = preamble + text.len() + 1;
    text.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    text.push('\n');
    let mut out = MAGIC.to_vec();
    out.extend([major, 0]);
    if major == 1 {
        out.extend(u16::try_from(text.len()).unwrap().to_le_bytes());
    } else {
        out.extend(u32::try_from(text.len()).unwrap().to_le_bytes());
    }
    out.extend(text.as_bytes());
    assert_eq!(out.len() % 64, 0, "NumPy aligns the data to 64 bytes");
    out.extend(data);
    out
}

/// A version 1.0 file of a plain dtype, as `numpy.save` writes it.
fn numpy_v1(descr: &str, fortran_order: bool, shape: &str, data: &[u8]) -> Vec<u8> {
    let fortran = if fortran_order { "True" } else { "False" };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}");
    npy_file(1, &dict, data)
}

const VALUES: [f32; 6] = [0.5, -1.25, 2.0, 3.0e10, -4.5e-8, 6.0];

fn f4_bytes() -> Vec<u8> {
    VALUES.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn write_temp(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Reads a file that must be refused; checks the message names the file.
fn refused(path: &Path) -> NpyError {
    let err = read_f32(path).expect_err("the file must be refused");
    let file_name = path.file_name().unwrap().to_str().unwrap();
    assert!(err.to_string().contains(file_name), "{err}");
    assert_eq!(err.path(), path);
    err
}

#[test]
fn round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[u32], Vec<f32>); 4] = [
        (&[2, 3, 4], (0..24).map(|i| i as f32 * 0.37 - 4.0).collect()),
        (
            &[5],
            vec![f32::NAN, f32::INFINITY, -0.0, f32::MIN_POSITIVE, f32::MAX],
        ),
        (&[], vec![42.5]),
        (&[0, 7], vec![]),
    ];
    for (i, (shape, data)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("case{i}.npy"));
        write_f32(&path, shape, data).unwrap();
        let (read_shape, read_data) = read_f32(&path).unwrap();
        assert_eq!(read_shape, *shape);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&read_data), bits(data));
    }
    // The header is a version 1.0 one that NumPy reads (npyz aligns the data to 16).
    let bytes = std::fs::read(dir.path().join("case0.npy")).unwrap();
    assert_eq!(bytes[..8], *b"\x93NUMPY\x01\x00");
    let header_len = usize::from(u16::from_le_bytes([bytes[8], bytes[9]]));
    assert_eq!((10 + header_len) % 16, 0);
    assert_eq!(bytes.len(), 10 + header_len + 24 * 4);
    let text = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
    assert!(
        text.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4, ), }"),
        "{text}"
    );
    assert!(text.ends_with('\n'), "{text}");
}

/// uint8 and int8 files (quantized tensors' elements) round-trip exactly.
#[test]
fn int8_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let (u, i) = (dir.path().join("u.npy"), dir.path().join("i.npy"));
    write(&u, &[2, 2], &NpyData::U8(vec![0, 1, 128, 255])).unwrap();
    write(&i, &[4], &NpyData::I8(vec![-128, -1, 0, 127])).unwrap();
    assert_eq!(
        read(&u).unwrap(),
        (vec![2, 2], NpyData::U8(vec![0, 1, 128, 255]))
    );
    assert_eq!(
        read(&i).unwrap(),
        (vec![4], NpyData::I8(vec![-128, -1, 0, 127]))
    );
    let header = std::fs::read(&i).unwrap();
    assert!(String::from_utf8_lossy(&header).contains("'descr': '|i1'"));
}

#[test]
fn reads_numpy_f4_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_temp(
        &dir,
        "a.npy",
        &numpy_v1("<f4", false, "(2, 3)", &f4_bytes()),
    );
    assert_eq!(read_f32(&path).unwrap(), (vec![2, 3], VALUES.to_vec()));
}

#[test]
fn reads_numpy_f8_file_as_f32() {
    let dir = tempfile::tempdir().unwrap();
    let wide = [0.1_f64, -2.5, 1e300, 3.0, 1e-50, 1.0 / 3.0];
    let data: Vec<u8> = wide.iter().flat_map(|v| v.to_le_bytes()).collect();
    let path = write_temp(&dir, "a.npy", &numpy_v1("<f8", false, "(2, 3)", &data));
    let (shape, values) = read_f32(&path).unwrap();
    assert_eq!(shape, [2, 3]);
    assert_eq!(values, [0.1, -2.5, f32::INFINITY, 3.0, 0.0, 1.0 / 3.0]);
}

#[test]
fn reads_version_2_and_1d_and_0d() {
    let dir = tempfile::tempdir().unwrap();
    // Version 2.0: same as 1.0 but a 4-byte header length.
    let v2 = npy_file(
        2,
        "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }",
        &f4_bytes(),
    );
    let path = write_temp(&dir, "v2.npy", &v2);
    assert_eq!(read_f32(&path).unwrap(), (vec![6], VALUES.to_vec()));

    let path = write_temp(
        &dir,
        "scalar.npy",
        &numpy_v1("<f4", false, "()", &7.5_f32.to_le_bytes()),
    );
    assert_eq!(read_f32(&path).unwrap(), (vec![], vec![7.5]));
}

#[test]
fn truncated_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let full = numpy_v1("<f4", false, "(2, 3)", &f4_bytes());
    for (name, len, part) in [
        ("data.npy", full.len() - 1, "the array data"),
        ("no_data.npy", 128, "the array data"),
        ("version.npy", 7, "the format version"),
        ("header.npy", 40, "the header"),
        ("length.npy", 9, "the header length"),
        ("magic.npy", 3, "the magic string"),
    ] {
        let path = write_temp(&dir, name, &full[..len]);
        match refused(&path) {
            NpyError::Truncated {
                what,
                expected,
                actual,
                ..
            } => {
                assert_eq!(what, part, "{name}");
                assert_eq!(actual, len as u64);
                assert!(expected > actual);
            }
            other => panic!("{name}: {other}"),
        }
    }
    let path = write_temp(&dir, "empty.npy", &[]);
    assert!(matches!(refused(&path), NpyError::Truncated { .. }));
}

#[test]
fn trailing_bytes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = numpy_v1("<f4", false, "(2, 3)", &f4_bytes());
    bytes.extend([0; 4]);
    let path = write_temp(&dir, "long.npy", &bytes);
    assert!(matches!(
        refused(&path),
        NpyError::TrailingBytes {
            expected: 24,
            extra: 4,
            ..
        }
    ));
}

/// int32, int64 and bool files are read as such and written back identically; a float
/// reader refuses them, naming the dtype.
#[test]
fn integer_and_bool_arrays_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        NpyData::I32(vec![1, -2, i32::MAX, i32::MIN, 0, 7]),
        NpyData::I64(vec![1, -2, 1 << 40, i64::MIN, 0, 7]),
        NpyData::Bool(vec![1, 0, 0, 1, 1, 0]),
    ];
    for (i, data) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("t{i}.npy"));
        write(&path, &[2, 3], &data).unwrap();
        assert_eq!(read(&path).unwrap(), (vec![2, 3], data.clone()));
        let err = read_f32(&path).unwrap_err();
        assert!(
            matches!(&err, NpyError::UnsupportedDtype { descr, .. } if descr.contains(data.dtype())),
            "{err}"
        );
    }
    // A file as NumPy writes it: int64 little-endian.
    let bytes: Vec<u8> = [5i64, -1].iter().flat_map(|v| v.to_le_bytes()).collect();
    let path = write_temp(&dir, "np.npy", &numpy_v1("<i8", false, "(2,)", &bytes));
    assert_eq!(read(&path).unwrap(), (vec![2], NpyData::I64(vec![5, -1])));
}

#[test]
fn wrong_dtype_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (i, descr) in [">i4", ">f4", "<c8", ">u2"].into_iter().enumerate() {
        let path = write_temp(
            &dir,
            &format!("d{i}.npy"),
            &numpy_v1(descr, false, "(2, 3)", &f4_bytes()),
        );
        let err = refused(&path);
        assert!(
            matches!(&err, NpyError::UnsupportedDtype { descr: d, .. } if d.contains(descr)),
            "{err}"
        );
    }
    // A structured dtype.
    let bytes = npy_file(
        1,
        "{'descr': [('a', '<f4'), ('b', '<f4')], 'fortran_order': False, 'shape': (3,), }",
        &f4_bytes(),
    );
    let path = write_temp(&dir, "record.npy", &bytes);
    assert!(matches!(refused(&path), NpyError::UnsupportedDtype { .. }));
}

#[test]
fn fortran_order_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_temp(&dir, "f.npy", &numpy_v1("<f4", true, "(2, 3)", &f4_bytes()));
    let err = refused(&path);
    assert!(matches!(err, NpyError::FortranOrder { .. }), "{err}");
}

#[test]
fn huge_or_negative_shapes_are_refused_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    for (i, shape) in [
        "(4294967296, 2)",
        "(100000, 100000, 100000)",
        "(1099511627776, 1099511627776)",
        "(1099511627776, 1099511627776, 1099511627776, 0)",
        "(0, 4294967295, 4294967295, 4294967295)",
        "(1180591620717411303424,)",
        "(-1, 3)",
        "(2, 3.0)",
        "'(2, 3)'",
    ]
    .into_iter()
    .enumerate()
    {
        let path = write_temp(
            &dir,
            &format!("s{i}.npy"),
            &numpy_v1("<f4", false, shape, &f4_bytes()),
        );
        let err = refused(&path);
        assert!(matches!(err, NpyError::BadShape { .. }), "{shape}: {err}");
    }
    let many_dims = format!("({})", "1, ".repeat(MAX_DIMS + 1));
    let path = write_temp(&dir, "dims.npy", &numpy_v1("<f4", false, &many_dims, &[]));
    assert!(matches!(refused(&path), NpyError::BadShape { .. }));
}

#[test]
fn malformed_headers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let good = numpy_v1("<f4", false, "(2, 3)", &f4_bytes());
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    cases.push((
        "magic.npy",
        b"PK\x03\x04 this is a zip file, not .npy".to_vec(),
    ));
    let mut version = good.clone();
    version[6] = 4;
    cases.push(("version.npy", version));
    let dict_text = |text: &str| npy_file(1, text, &f4_bytes());
    cases.push(("syntax.npy", dict_text("{'descr': '<f4', 'shape': (2, 3")));
    cases.push(("list.npy", dict_text("['<f4', False, (2, 3)]")));
    cases.push((
        "missing.npy",
        dict_text("{'descr': '<f4', 'shape': (2, 3)}"),
    ));
    cases.push((
        "twice.npy",
        dict_text("{'descr': '<f4', 'shape': (2, 3), 'shape': (6,)}"),
    ));
    cases.push((
        "nested.npy",
        dict_text(&format!("{}{}", "(".repeat(20), ")".repeat(20))),
    ));
    let mut huge_header = good.clone();
    huge_header[6] = 2;
    huge_header.splice(8..10, [0, 0, 0, 1]);
    cases.push(("huge_header.npy", huge_header));
    for (name, bytes) in cases {
        let path = write_temp(&dir, name, &bytes);
        let err = refused(&path);
        assert!(matches!(err, NpyError::Malformed { .. }), "{name}: {err}");
    }
    let missing = dir.path().join("missing_file.npy");
    assert!(matches!(refused(&missing), NpyError::Io { .. }));
}

#[test]
fn write_checks_the_shape() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.npy");
    let err = write_f32(&path, &[2, 3], &[1.0; 5]).unwrap_err();
    assert!(
        matches!(
            err,
            NpyError::ShapeMismatch {
                expected: 6,
                actual: 5,
                ..
            }
        ),
        "{err}"
    );
    // Would overflow a naive product before reaching the 0.
    let err = write_f32(&path, &[u32::MAX, u32::MAX, u32::MAX, 0], &[]).unwrap_err();
    assert!(matches!(err, NpyError::BadShape { .. }), "{err}");
    let err = write_f32(&path, &[1; MAX_DIMS + 1], &[1.0]).unwrap_err();
    assert!(matches!(err, NpyError::BadShape { .. }), "{err}");
    let err = write_f32(&dir.path().join("no/such/dir.npy"), &[1], &[1.0]).unwrap_err();
    assert!(matches!(err, NpyError::Io { .. }), "{err}");
    assert!(err.to_string().contains("dir.npy"), "{err}");
}

#[test]
fn output_names_are_sanitised() {
    assert_eq!(file_name_for_output("out/put:0"), "out_put_0.npy");
    assert_eq!(
        file_name_for_output("softmax_0.tmp_0"),
        "softmax_0.tmp_0.npy"
    );
    assert_eq!(file_name_for_output("a-B.9_z"), "a-B.9_z.npy");
    assert_eq!(file_name_for_output("é x\\y"), "__x_y.npy");
    assert_eq!(file_name_for_output(""), ".npy");
}

/// Every dtype of Backend API 1.5's types, from bytes laid out as `numpy.save` does (not by
/// our writer), then written back and read again.
#[test]
fn every_1_5_dtype_reads_and_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let le = |words: &[&[u8]]| words.concat();
    let cases: Vec<(&str, Vec<u8>, NpyData)> = vec![
        (
            "<f8",
            le(&[&1.5f64.to_le_bytes(), &(-0.25f64).to_le_bytes()]),
            NpyData::F64(vec![1.5, -0.25]),
        ),
        // binary16 1.0 is 0x3c00 and -2.0 is 0xc000.
        (
            "<f2",
            le(&[&[0x00, 0x3c], &[0x00, 0xc0]]),
            NpyData::F16(vec![0x3c00, 0xc000]),
        ),
        (
            "<i2",
            le(&[&(-2i16).to_le_bytes(), &300i16.to_le_bytes()]),
            NpyData::I16(vec![-2, 300]),
        ),
        (
            "<u2",
            le(&[&65535u16.to_le_bytes(), &1u16.to_le_bytes()]),
            NpyData::U16(vec![65535, 1]),
        ),
        (
            "<u4",
            le(&[&u32::MAX.to_le_bytes(), &7u32.to_le_bytes()]),
            NpyData::U32(vec![u32::MAX, 7]),
        ),
        (
            "<u8",
            le(&[&u64::MAX.to_le_bytes(), &0u64.to_le_bytes()]),
            NpyData::U64(vec![u64::MAX, 0]),
        ),
        (
            "<i8",
            le(&[&i64::MIN.to_le_bytes(), &5i64.to_le_bytes()]),
            NpyData::I64(vec![i64::MIN, 5]),
        ),
    ];
    for (descr, data, want) in cases {
        let path = write_temp(&dir, "in.npy", &numpy_v1(descr, false, "(2,)", &data));
        let (shape, got) = read(&path).unwrap();
        assert_eq!(
            (shape.as_slice(), &got),
            ([2u32].as_slice(), &want),
            "{descr}"
        );
        let out = dir.path().join("out.npy");
        write(&out, &[2], &got).unwrap();
        assert_eq!(read(&out).unwrap(), (vec![2], want), "{descr} written back");
        // Our writer's bytes are numpy's: the data section is the same bytes.
        let written = std::fs::read(&out).unwrap();
        assert!(written.ends_with(&data), "{descr}");
    }
}
