//! The layer suite's oracle (`backplane_conformance::oracle`) is independent of CpuRef: a
//! backend that is CpuRef with one wrong kernel (`tests/plugins/wrong-kernel`, `WrongRef`:
//! ReLU computed as LeakyReLU(0.01)) fails exactly the ReLU cases, while CpuRef itself passes
//! every case, each checked against the oracle.

use crate::fixtures::{PluginDir, cli as run, plugin};

/// `backplane conformance --json ARGS`: the exit status and the report.
fn conformance(args: &[&str]) -> (bool, serde_json::Value) {
    let mut all = vec!["conformance", "--json"];
    all.extend_from_slice(args);
    let (ok, stdout, stderr) = run(&all);
    let report = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));
    (ok, report)
}

/// The names of the cases of `report` with `outcome`, in report order.
fn cases_with<'a>(report: &'a serde_json::Value, outcome: &str) -> Vec<&'a str> {
    report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["outcome"] == outcome)
        .map(|c| c["case"].as_str().unwrap())
        .collect()
}

/// The cases WrongRef's ReLU must fail: the suite's ReLU case and the basic Activation case
/// (a ReLU); every other layer case is CpuRef's own kernel and passes.
const WRONG_CASES: [&str; 2] = ["layer/Activation/basic", "layer/Activation/ReLU"];

#[test]
fn oracle_catches_a_wrong_relu_that_cpu_ref_comparison_would_miss() {
    let file = plugin("wrong-kernel");
    let file = file.to_str().unwrap();
    let (ok, report) = conformance(&["--backend", "WrongRef", "--plugin", file]);
    assert!(!ok, "a wrong kernel must fail the kit: {report}");
    assert_eq!(cases_with(&report, "failed"), WRONG_CASES, "{report}");
    assert_eq!(report["undeclared"], 2, "{report}");
    assert_eq!(cases_with(&report, "skipped"), Vec::<&str>::new());
    assert_eq!(cases_with(&report, "unsupported"), Vec::<&str>::new());
    for c in report["cases"].as_array().unwrap() {
        let (case, detail) = (c["case"].as_str().unwrap(), c["detail"].as_str().unwrap());
        if WRONG_CASES.contains(&case) {
            // The first negative input: LeakyReLU(0.01) of it against the oracle's 0.
            assert!(detail.contains(" vs oracle 0 at ["), "{case}: {detail}");
        } else if case.starts_with("layer/") {
            assert!(
                detail.starts_with("max |diff| vs oracle ")
                    || detail.starts_with("max |diff| vs quantized oracle "),
                "{case}: {detail}"
            );
        }
    }

    // Declared, the two failures no longer fail the kit.
    let dir = PluginDir::new();
    let manifest = dir.write(
        "WrongRef.txt",
        b"layer/Activation/basic: ReLU is LeakyReLU(0.01)\n\
layer/Activation/ReLU: ReLU is LeakyReLU(0.01)\n",
    );
    let (ok, report) = conformance(&[
        "--backend",
        "WrongRef",
        "--plugin",
        file,
        "--expected-failures",
        manifest.to_str().unwrap(),
    ]);
    assert!(ok, "{report}");
    assert_eq!(
        (&report["failed"], &report["undeclared"]),
        (&2.into(), &0.into())
    );
}

#[test]
fn cpu_ref_passes_every_layer_case_against_the_oracle() {
    let (ok, report) = conformance(&["--backend", "CpuRef"]);
    assert!(ok, "{report}");
    assert_eq!(
        cases_with(&report, "failed"),
        Vec::<&str>::new(),
        "{report}"
    );
    assert_eq!(
        cases_with(&report, "skipped"),
        Vec::<&str>::new(),
        "{report}"
    );
    let cases = report["cases"].as_array().unwrap();
    // 128 cases of plain types (of them Backend API 1.5's: three NonZero, ten unary
    // functions, five bitwise operations, six scatters, three NonMaxSuppression, two
    // RoiAlign, three BitCast, three Determinant, five Unique, two
    // DeformableConvolution2d and two Lstm) and 29 quantized ones (1.2; two dynamically
    // quantized convolutions of 1.5; two Softmax and a BatchMatMul of two activations).
    assert_eq!(cases.len(), 157, "{report}");
    for c in cases {
        let detail = c["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("max |diff| vs oracle ")
                || detail.starts_with("max |diff| vs quantized oracle "),
            "{}: {detail}",
            c["case"]
        );
    }
}
