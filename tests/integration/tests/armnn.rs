//! Arm NN's dynamic-backend loader tests, reproduced against real files.

use backplane::{CandidateStatus, ReasonCode};

use crate::fixtures::{
    PluginDir, assert_ignored, assert_registered, assert_rejected, candidate, runtime_for,
};

const VALID: [&str; 7] = [
    "Arm_GpuAcc_backend.so",
    "Arm_GpuAcc_backend.so.1",
    "Arm_GpuAcc_backend.so.1.2",
    "Arm_GpuAcc_backend.so.1.2.3",
    "Arm_GpuAcc_backend.so.10.1.27",
    "Arm123_GpuAcc_backend.so",
    "Arm_GpuAcc456_backend.so",
];

const INVALID: [&str; 13] = [
    "Arm_GpuAcc_backend.so.10.1.33.",
    "Arm_GpuAcc_backend.so.3.4..5",
    "Arm_GpuAcc_backend.so.1,1.1",
    "Arm%Co_GpuAcc_backend.so",
    "Arm_Gpu.Acc_backend.so",
    "GpuAcc_backend.so",
    "_GpuAcc_backend.so",
    "Arm__backend.so",
    "Arm_GpuAcc.so",
    "__backend.so",
    "__.so",
    "Arm_GpuAcc_backend",
    "Arm_GpuAcc_backend_v1.2.so",
];

/// Every row of the file-name table, as real files (copies of one plugin).
#[test]
fn file_name_table_as_files() {
    let dir = PluginDir::new();
    for n in VALID.iter().chain(INVALID.iter()) {
        dir.add("valid-alpha", n);
    }
    dir.link("nothing-here", "Arm_GpuAcc_backend.so.9");
    let rt = runtime_for(dir.as_str());
    for n in INVALID {
        let c = candidate(&rt, n);
        assert_eq!(
            (c.status, c.reason),
            (CandidateStatus::Ignored, Some(ReasonCode::NameMismatch)),
            "{n}"
        );
    }
    // Valid names are candidates: the first in byte order registers, the other copies (distinct
    // files, same id) are duplicate ids.
    assert_registered(&rt, "Arm123_GpuAcc_backend.so", "TestAlpha");
    for n in VALID.iter().filter(|n| **n != "Arm123_GpuAcc_backend.so") {
        assert_rejected(&rt, n, ReasonCode::DuplicateId, "already registered");
    }
    assert_rejected(
        &rt,
        "Arm_GpuAcc_backend.so.9",
        ReasonCode::DanglingLink,
        "does not resolve",
    );
    assert_eq!(
        rt.report().candidates.len(),
        VALID.len() + INVALID.len() + 1
    );
}

/// Every row of the file-name table, as symlinks to one plugin; and the chain
/// `.so.1.2.3 -> .so.1.2 -> .so.1 -> .so`.
#[test]
fn file_name_table_as_symlinks_and_chain() {
    let store = PluginDir::new();
    let real = store.add("valid-alpha", "real.so");
    let dir = PluginDir::new();
    for n in VALID.iter().chain(INVALID.iter()) {
        dir.link(real.to_str().unwrap(), n);
    }
    let rt = runtime_for(dir.as_str());
    for n in INVALID {
        assert_eq!(
            candidate(&rt, n).reason,
            Some(ReasonCode::NameMismatch),
            "{n}"
        );
    }
    assert_registered(&rt, "Arm123_GpuAcc_backend.so", "TestAlpha");
    for n in VALID.iter().filter(|n| **n != "Arm123_GpuAcc_backend.so") {
        assert_ignored(&rt, n, ReasonCode::DuplicateFile, "same file as");
        assert_eq!(
            candidate(&rt, n).canonical.as_deref(),
            Some(real.canonicalize().unwrap().as_path())
        );
    }

    let chain = PluginDir::new();
    chain.add("valid-alpha", "Arm_GpuAcc_backend.so");
    chain.link("Arm_GpuAcc_backend.so", "Arm_GpuAcc_backend.so.1");
    chain.link("Arm_GpuAcc_backend.so.1", "Arm_GpuAcc_backend.so.1.2");
    chain.link("Arm_GpuAcc_backend.so.1.2", "Arm_GpuAcc_backend.so.1.2.3");
    let rt = runtime_for(chain.as_str());
    assert_registered(&rt, "Arm_GpuAcc_backend.so", "TestAlpha");
    for n in [
        "Arm_GpuAcc_backend.so.1",
        "Arm_GpuAcc_backend.so.1.2",
        "Arm_GpuAcc_backend.so.1.2.3",
    ] {
        assert_ignored(&rt, n, ReasonCode::DuplicateFile, "Arm_GpuAcc_backend.so");
    }
    assert_eq!(rt.registry().ids(), vec!["TestAlpha"]);
}

#[test]
fn two_valid_plugins_in_one_dir_register_both() {
    let dir = PluginDir::new();
    dir.add("valid-alpha", "Test_TestAlpha_backend.so");
    dir.add("valid-beta", "Test_TestBeta_backend.so");
    let rt = runtime_for(dir.as_str());
    assert_eq!(rt.registry().ids(), vec!["TestAlpha", "TestBeta"]);
}

/// A copy of a plugin in a second directory, plus another file with the same id: registered
/// once, first wins.
#[test]
fn same_id_across_directories_registers_once() {
    let d1 = PluginDir::new();
    let d2 = PluginDir::new();
    let first = d1.add("valid-alpha", "Test_TestAlpha_backend.so");
    d2.add("valid-alpha", "Test_TestAlpha_backend.so");
    d2.add("dup-alpha", "Other_TestAlpha_backend.so");
    let rt = runtime_for(&format!("{}:{}", d1.as_str(), d2.as_str()));
    assert_eq!(rt.registry().ids(), vec!["TestAlpha"]);
    let report = rt.report();
    let registered: Vec<_> = report
        .candidates
        .iter()
        .filter(|c| c.status == CandidateStatus::Registered)
        .collect();
    assert_eq!(registered.len(), 1);
    assert_eq!(registered[0].file, first);
    let dups = rt
        .report()
        .candidates
        .iter()
        .filter(|c| c.reason == Some(ReasonCode::DuplicateId))
        .count();
    assert_eq!(dups, 2);
}

#[test]
fn dir_of_only_invalid_plugins_registers_nothing() {
    let dir = PluginDir::new();
    for (i, p) in [
        "no-get-backend-id",
        "id-empty",
        "id-unknown",
        "version-major-plus",
        "factory-null",
    ]
    .iter()
    .enumerate()
    {
        dir.add(p, &format!("Bad_Plugin{i}_backend.so"));
    }
    let rt = runtime_for(dir.as_str());
    assert!(rt.registry().ids().is_empty());
    assert!(
        rt.report()
            .candidates
            .iter()
            .all(|c| c.status == CandidateStatus::Rejected)
    );
    assert_eq!(rt.report().candidates.len(), 5);
}

#[test]
fn invalid_override_path_registers_nothing() {
    let dir = PluginDir::new();
    dir.add("valid-alpha", "Test_TestAlpha_backend.so");
    let missing = format!("{}/not-there", dir.as_str());
    let rt = runtime_for(&missing);
    assert!(rt.registry().ids().is_empty());
    assert_eq!(rt.report().paths.len(), 1);
    assert_eq!(rt.report().paths[0].status, backplane::PathStatus::Invalid);
    assert!(rt.report().candidates.is_empty());
}

#[test]
fn null_factory_and_bad_ids_rejected() {
    let dir = PluginDir::new();
    dir.add("factory-null", "Test_NullFactory_backend.so");
    dir.add("id-empty", "Test_Empty_backend.so");
    dir.add("id-unknown", "Test_Unknown_backend.so");
    let rt = runtime_for(dir.as_str());
    assert_rejected(
        &rt,
        "Test_NullFactory_backend.so",
        ReasonCode::FactoryFailed,
        "returned null",
    );
    assert_rejected(&rt, "Test_Empty_backend.so", ReasonCode::InvalidId, "empty");
    assert_rejected(
        &rt,
        "Test_Unknown_backend.so",
        ReasonCode::InvalidId,
        "reserved",
    );
}
