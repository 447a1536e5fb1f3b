//! One test per failure mode: the exact reason code, and loading went on with the next file
//! (a valid plugin named to sort after the broken one is registered).

use std::os::unix::fs::PermissionsExt;

use backplane::{CandidateStatus, ReasonCode};

use crate::fixtures::{PluginDir, assert_ignored, assert_registered, assert_rejected, runtime_for};

const NEXT: &str = "Zz_TestAlpha_backend.so";

/// Puts the broken plugin in as `Aa_Broken_backend.so`, a valid one after it, and checks both.
fn check_plugin(plugin: &str, reason: ReasonCode, message: &str) {
    let dir = PluginDir::new();
    dir.add(plugin, "Aa_Broken_backend.so");
    dir.add("valid-alpha", NEXT);
    let rt = runtime_for(dir.as_str());
    assert_rejected(&rt, "Aa_Broken_backend.so", reason, message);
    assert_registered(&rt, NEXT, "TestAlpha");
    assert_eq!(rt.registry().ids(), vec!["TestAlpha"]);
}

#[test]
fn missing_get_backend_id() {
    check_plugin(
        "no-get-backend-id",
        ReasonCode::MissingSymbol,
        "missing required symbol(s): GetBackendId",
    );
}

#[test]
fn missing_get_version() {
    check_plugin(
        "no-get-version",
        ReasonCode::MissingSymbol,
        "missing required symbol(s): GetVersion",
    );
}

#[test]
fn missing_backend_factory() {
    check_plugin(
        "no-backend-factory",
        ReasonCode::MissingSymbol,
        "missing required symbol(s): BackendFactory",
    );
}

#[test]
fn cxx_mangled_exports() {
    check_plugin(
        "mangled-exports",
        ReasonCode::MissingSymbol,
        "missing required symbol(s): GetBackendId, GetVersion, BackendFactory",
    );
}

#[test]
fn null_id() {
    check_plugin(
        "id-null",
        ReasonCode::InvalidId,
        "GetBackendId returned a null pointer",
    );
}

#[test]
fn empty_id() {
    check_plugin("id-empty", ReasonCode::InvalidId, "backend id is empty");
}

#[test]
fn reserved_id() {
    check_plugin(
        "id-unknown",
        ReasonCode::InvalidId,
        "backend id \"Unknown\" is reserved",
    );
}

#[test]
fn over_long_id() {
    check_plugin(
        "id-too-long",
        ReasonCode::InvalidId,
        "backend id is 65 bytes long, the limit is 64",
    );
}

#[test]
fn bad_character_id() {
    check_plugin(
        "id-bad-char",
        ReasonCode::InvalidId,
        "backend id contains '-'",
    );
}

#[test]
fn non_utf8_id() {
    check_plugin(
        "id-not-utf8",
        ReasonCode::InvalidId,
        "backend id is not valid UTF-8",
    );
}

#[test]
fn version_0_7() {
    check_plugin(
        "version-0-7",
        ReasonCode::IncompatibleVersion,
        "backend OldVersion built against Backend API 0.7, host provides 1.5 (needs major 1, minor <= 5)",
    );
}

#[test]
fn version_minor_plus_one() {
    check_plugin(
        "version-minor-plus",
        ReasonCode::IncompatibleVersion,
        "backend MinorPlus built against Backend API 1.6, host provides 1.5 (needs major 1, minor <= 5)",
    );
}

#[test]
fn version_major_plus_one() {
    check_plugin(
        "version-major-plus",
        ReasonCode::IncompatibleVersion,
        "backend MajorPlus built against Backend API 2.0, host provides 1.5 (needs major 1, minor <= 5)",
    );
}

#[test]
fn incompatible_version_reports_id_and_version() {
    let dir = PluginDir::new();
    dir.add("version-0-7", "Old_Version_backend.so");
    let rt = runtime_for(dir.as_str());
    let c = crate::fixtures::candidate(&rt, "Old_Version_backend.so");
    assert_eq!(c.backend_id.as_deref(), Some("OldVersion"));
    assert_eq!(c.version.as_deref(), Some("0.7"));
}

#[test]
fn null_factory() {
    check_plugin(
        "factory-null",
        ReasonCode::FactoryFailed,
        "BackendFactory returned null",
    );
}

#[test]
fn factory_error() {
    check_plugin(
        "factory-error",
        ReasonCode::FactoryFailed,
        "no device found",
    );
}

#[test]
fn panicking_constructor() {
    check_plugin(
        "factory-panics",
        ReasonCode::Panicked,
        "BackendFactory panicked: constructor exploded",
    );
}

#[test]
fn missing_shared_library_dependency() {
    check_plugin(
        "missing-dep",
        ReasonCode::OpenFailed,
        "libbp_absent_dep.so: cannot open shared object file",
    );
}

#[test]
fn text_empty_and_directory_named_like_plugins() {
    let dir = PluginDir::new();
    dir.write(
        "Aa_Text_backend.so",
        "this is a text file, not an ELF shared object\n"
            .repeat(8)
            .as_bytes(),
    );
    dir.write("Ab_Empty_backend.so", b"");
    std::fs::create_dir(dir.file("Ac_Dir_backend.so")).unwrap();
    dir.add("valid-alpha", NEXT);
    let rt = runtime_for(dir.as_str());
    assert_rejected(
        &rt,
        "Aa_Text_backend.so",
        ReasonCode::OpenFailed,
        "invalid ELF header",
    );
    assert_rejected(
        &rt,
        "Ab_Empty_backend.so",
        ReasonCode::OpenFailed,
        "file too short",
    );
    assert_rejected(
        &rt,
        "Ac_Dir_backend.so",
        ReasonCode::NotAFile,
        "resolves to a directory",
    );
    assert_registered(&rt, NEXT, "TestAlpha");
}

#[test]
fn dangling_link_and_link_loop() {
    let dir = PluginDir::new();
    dir.link("does-not-exist.so", "Aa_Dangling_backend.so");
    dir.link("Ab_Loop2_backend.so", "Ab_Loop1_backend.so");
    dir.link("Ab_Loop1_backend.so", "Ab_Loop2_backend.so");
    dir.add("valid-alpha", NEXT);
    let rt = runtime_for(dir.as_str());
    assert_rejected(
        &rt,
        "Aa_Dangling_backend.so",
        ReasonCode::DanglingLink,
        "No such file or directory",
    );
    assert_rejected(
        &rt,
        "Ab_Loop1_backend.so",
        ReasonCode::DanglingLink,
        "Too many levels of symbolic links",
    );
    assert_rejected(
        &rt,
        "Ab_Loop2_backend.so",
        ReasonCode::DanglingLink,
        "Too many levels of symbolic links",
    );
    assert_registered(&rt, NEXT, "TestAlpha");
}

#[test]
fn world_writable_copy_and_directory() {
    let dir = PluginDir::new();
    let f = dir.add("valid-beta", "Aa_TestBeta_backend.so");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
    dir.add("valid-alpha", NEXT);
    let rt = runtime_for(dir.as_str());
    assert_rejected(
        &rt,
        "Aa_TestBeta_backend.so",
        ReasonCode::InsecurePermissions,
        "writable by group or others",
    );
    assert_registered(&rt, NEXT, "TestAlpha");

    let open_dir = PluginDir::new();
    open_dir.add("valid-alpha", NEXT);
    std::fs::set_permissions(open_dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let rt = runtime_for(open_dir.as_str());
    assert_rejected(
        &rt,
        NEXT,
        ReasonCode::InsecurePermissions,
        "writable by group or others",
    );
    assert!(rt.registry().ids().is_empty());

    // The check can be turned off explicitly.
    let options = backplane::CreationOptions {
        trust: backplane::TrustPolicy {
            check_permissions: false,
            pinned_sha256: None,
        },
        ..backplane::CreationOptions::default().without_builtins()
    };
    let rt = backplane::Runtime::with_path_list(
        options,
        backplane::plugins::paths::PathSource::Option,
        open_dir.as_str(),
    );
    assert_registered(&rt, NEXT, "TestAlpha");
}

#[test]
fn sha256_pins() {
    let dir = PluginDir::new();
    let beta = dir.add("valid-beta", "Aa_TestBeta_backend.so");
    dir.add("valid-alpha", NEXT);
    let digest = backplane::plugins::trust::sha256_file(&beta).unwrap();
    let options = backplane::CreationOptions {
        trust: backplane::TrustPolicy {
            check_permissions: true,
            pinned_sha256: Some(vec![digest]),
        },
        ..backplane::CreationOptions::default().without_builtins()
    };
    let rt = backplane::Runtime::with_path_list(
        options,
        backplane::plugins::paths::PathSource::Option,
        dir.as_str(),
    );
    assert_registered(&rt, "Aa_TestBeta_backend.so", "TestBeta");
    assert_rejected(&rt, NEXT, ReasonCode::Untrusted, "is not in the pin list");
}

#[test]
fn duplicate_file_through_symlinks_and_repeated_directory() {
    let dir = PluginDir::new();
    dir.add("valid-alpha", "Test_TestAlpha_backend.so");
    dir.link("Test_TestAlpha_backend.so", "Test_TestAlpha_backend.so.1");
    let second = PluginDir::new();
    second.link(
        dir.file("Test_TestAlpha_backend.so").to_str().unwrap(),
        "Other_TestAlpha_backend.so",
    );
    let rt = runtime_for(&format!("{}:{}", dir.as_str(), second.as_str()));
    assert_registered(&rt, "Test_TestAlpha_backend.so", "TestAlpha");
    assert_ignored(
        &rt,
        "Test_TestAlpha_backend.so.1",
        ReasonCode::DuplicateFile,
        "same file as",
    );
    assert_ignored(
        &rt,
        "Other_TestAlpha_backend.so",
        ReasonCode::DuplicateFile,
        "same file as",
    );
}

#[test]
fn duplicate_id_names_the_holder() {
    let dir = PluginDir::new();
    let first = dir.add("valid-alpha", "Aa_TestAlpha_backend.so");
    dir.add("dup-alpha", "Ab_TestAlpha_backend.so");
    let rt = runtime_for(dir.as_str());
    assert_registered(&rt, "Aa_TestAlpha_backend.so", "TestAlpha");
    assert_rejected(
        &rt,
        "Ab_TestAlpha_backend.so",
        ReasonCode::DuplicateId,
        &format!(
            "backend id TestAlpha is already registered from {}",
            first.display()
        ),
    );
    // The first one's capabilities are the ones registered.
    assert!(
        rt.registry()
            .capabilities("TestAlpha")
            .unwrap()
            .is_enabled("TestAlphaCapability")
    );
    assert!(
        !rt.registry()
            .capabilities("TestAlpha")
            .unwrap()
            .is_enabled("DupAlpha")
    );
}

#[test]
fn non_matching_names_are_ignored_in_order() {
    let dir = PluginDir::new();
    dir.write("README", b"x");
    dir.write("libfoo.so", b"x");
    dir.add("valid-alpha", NEXT);
    let rt = runtime_for(dir.as_str());
    let names: Vec<_> = rt
        .report()
        .candidates
        .iter()
        .map(|c| c.file.file_name().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["README", "Zz_TestAlpha_backend.so", "libfoo.so"]);
    let c = crate::fixtures::candidate(&rt, "README");
    assert_eq!(
        (c.status, c.reason),
        (CandidateStatus::Ignored, Some(ReasonCode::NameMismatch))
    );
}
