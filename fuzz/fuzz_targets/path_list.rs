//! Fuzz target: Arm NN's path-list rules (DESIGN §4.2) on any string. Never panics; every
//! path kept is absolute, an existing directory, listed once, and reported `ok`; nothing empty
//! is reported.
#![no_main]

use backplane::report::PathStatus;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let list = String::from_utf8_lossy(data);
    let (reports, valid) = backplane::plugins::paths::parse_path_list(&list);
    for (i, r) in reports.iter().enumerate() {
        assert!(!r.path.is_empty(), "an empty segment was reported");
        assert!(
            !reports[..i].iter().any(|o| o.path == r.path),
            "{:?} reported twice",
            r.path
        );
        assert!(list.split(':').any(|s| s == r.path), "{:?} is not a segment", r.path);
    }
    for (i, p) in valid.iter().enumerate() {
        assert!(p.is_absolute() && p.is_dir(), "{p:?} kept");
        // Exact strings: "/tmp" and "//tmp" are different entries by Arm NN's rule (the files
        // in them are then loaded once, by canonical path).
        assert!(
            !valid[..i].iter().any(|q| q.as_os_str() == p.as_os_str()),
            "{p:?} kept twice"
        );
        let report = reports
            .iter()
            .find(|r| std::path::Path::new(&r.path) == p)
            .expect("every kept path is reported");
        assert_eq!(report.status, PathStatus::Ok);
    }
    assert_eq!(
        valid.len(),
        reports.iter().filter(|r| r.status == PathStatus::Ok).count()
    );
});
