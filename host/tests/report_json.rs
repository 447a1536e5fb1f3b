//! `backplane backends --json` writes the report through a streaming writer
//! (`Runtime::write_report_json`, `report::write_json`) instead of serde_json: these tests
//! hold its bytes to serde_json's pretty output of the same report, over directories whose
//! names need every kind of escape, so that the two cannot drift apart.

use std::{
    ffi::OsStr,
    os::unix::{ffi::OsStrExt, fs::PermissionsExt},
    path::Path,
};

use backplane::{CreationOptions, Runtime, plugins::paths::PathSource};

/// The fast path's bytes, or its error and what it wrote before it.
fn fast(rt: &Runtime) -> (Vec<u8>, Option<String>) {
    let mut out = Vec::new();
    let err = rt.write_report_json(&mut out).err().map(|e| e.to_string());
    (out, err)
}

/// serde_json's bytes for the report `rt` builds, or its error and what it wrote before it.
fn serde(rt: &Runtime) -> (Vec<u8>, Option<String>) {
    let mut out = Vec::new();
    let err = serde_json::to_writer_pretty(&mut out, &rt.report())
        .err()
        .map(|e| e.to_string());
    (out, err)
}

/// Names that need escapes in JSON (quotes, backslashes, control characters, DEL), that are
/// not ASCII, or that are plugin candidates with every scan verdict short of loading.
fn fill(dir: &Path) {
    let names: [&[u8]; 11] = [
        b"plain.txt",
        b"quote\"name",
        b"back\\slash",
        b"tab\tand\nnewline\rreturn",
        b"ctl\x01\x08\x0c\x1f",
        b"del\x7f",
        "ünïcödé 🦀 ǅ".as_bytes(),
        b"\xe2\x80\xa8line separator",
        b"Acme_Empty_backend.so",
        b"a",
        b"zzzzzzzzzzzzzzzzzzzzzzzz",
    ];
    for n in names {
        std::fs::write(dir.join(OsStr::from_bytes(n)), b"").unwrap();
    }
    // Each byte that needs an escape (and its neighbours), alone in a name.
    for b in (1u8..=0x21).chain([b'"', b'\\', 0x7f, 0x80]) {
        if b == b'/' {
            continue;
        }
        let name = [b'e', b'-', b];
        let name = if b >= 0x80 {
            &b"e-\xc2\x80"[..]
        } else {
            &name[..]
        };
        std::fs::write(dir.join(OsStr::from_bytes(name)), b"").unwrap();
    }
    std::fs::set_permissions(
        dir.join("Acme_Empty_backend.so"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::create_dir(dir.join("Acme_Dir_backend.so")).unwrap();
    std::os::unix::fs::symlink("nowhere", dir.join("Acme_Dangling_backend.so")).unwrap();
    std::os::unix::fs::symlink("Acme_Empty_backend.so", dir.join("Acme_Empty_backend.so.1"))
        .unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Several directories (one with an odd name of its own, one given with a trailing `/`, one
/// empty), paths that are skipped, the built-in backend: the same bytes both ways.
#[test]
fn streamed_json_is_serde_jsons_pretty_output() {
    let root = tempfile::tempdir().unwrap();
    let odd = root.path().join("odd \"dir\" \\ ünï\tcode\x01");
    let plain = root.path().join("plain");
    let empty = root.path().join("empty");
    for d in [&odd, &plain, &empty] {
        std::fs::create_dir(d).unwrap();
        fill(d);
    }
    for e in std::fs::read_dir(&empty).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() && !p.is_symlink() {
            std::fs::remove_dir(p).unwrap();
        } else {
            std::fs::remove_file(p).unwrap();
        }
    }
    let list = format!(
        "{}:{}/:{}:relative/dir:{}/missing",
        odd.display(),
        plain.display(),
        empty.display(),
        root.path().display()
    );
    for builtins in [true, false] {
        let options = if builtins {
            CreationOptions::default()
        } else {
            CreationOptions::default().without_builtins()
        };
        let rt = Runtime::with_path_list(options, PathSource::Option, &list);
        let (got, err) = fast(&rt);
        assert_eq!(err, None);
        let (want, _) = serde(&rt);
        assert_eq!(
            String::from_utf8(got).unwrap(),
            String::from_utf8(want).unwrap()
        );
        // The same through DiscoveryReport::write_json (every row built in full).
        let mut whole = Vec::new();
        rt.report().write_json(&mut whole).unwrap();
        assert_eq!(whole, serde(&rt).0);
        // What the report holds, so that the comparison above covers it.
        let report = rt.report();
        let reasons: Vec<&str> = report
            .candidates
            .iter()
            .filter_map(|c| c.reason.map(|r| r.as_str()))
            .collect();
        for code in [
            "name_mismatch",
            "dangling_link",
            "not_a_file",
            "open_failed",
            "duplicate_file",
        ] {
            assert!(reasons.contains(&code), "{code} in {reasons:?}");
        }
        assert_eq!(report.backends.is_empty(), !builtins);
        assert!(report.paths.iter().any(|p| p.reason.is_some()));
    }
}

/// No search path at all: empty lists are `[]` both ways.
#[test]
fn streamed_json_of_an_empty_report() {
    let rt = Runtime::with_path_list(
        CreationOptions::default().without_builtins(),
        PathSource::Option,
        "",
    );
    assert_eq!(fast(&rt), serde(&rt));
    assert!(rt.report().candidates.is_empty());
}

/// A name that is not UTF-8 cannot be a JSON string: both ways fail with serde's message.
/// The streaming writer has then written the start of serde_json's bytes in whole blocks:
/// nothing for a small report, some for a large one.
#[test]
fn a_name_that_is_not_utf8_fails_the_same_way() {
    for others in [0, 2000] {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("a"), b"").unwrap();
        std::fs::write(root.path().join(OsStr::from_bytes(b"bad\xffname")), b"").unwrap();
        for n in 0..others {
            std::fs::write(root.path().join(format!("b{n:05}")), b"").unwrap();
        }
        let rt = Runtime::with_path_list(
            CreationOptions::default(),
            PathSource::Option,
            root.path().to_str().unwrap(),
        );
        let (got, err) = fast(&rt);
        let (want, serde_err) = serde(&rt);
        assert_eq!(
            serde_err.as_deref(),
            Some("path contains invalid UTF-8 characters")
        );
        assert_eq!(err, serde_err);
        assert!(want.starts_with(&got));
        assert_eq!(got.is_empty(), others == 0, "{} bytes written", got.len());
    }
}
