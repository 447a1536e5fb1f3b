//! The figures the documentation quotes from tests and code are the ones the tests assert and
//! the code declares, so that the documents cannot drift from them: the conformance counts
//! (`cli`'s constants) and the current Backend API version (`backplane_api`'s).

use std::path::{Path, PathBuf};

use backplane_api::{API_MAJOR, API_MINOR};

use crate::cli::{
    CPU_REF_LAYER_CASES, CPU_REF_NODE_TESTS_TAIL, CPUFAST_TOTALS, GPUCL_TOTALS,
    TEST_ALPHA_NODE_TESTS,
};

/// The repository's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The text of `path`, relative to the repository's root.
fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The whole numbers of `line`, in order.
fn numbers(line: &str) -> Vec<u64> {
    line.split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().unwrap())
        .collect()
}

/// `doc` contains `text`, or the test fails naming both.
fn assert_quotes(doc: &str, path: &str, text: &str) {
    assert!(
        doc.contains(text),
        "{path} does not say {text:?}: update it to what the tests assert"
    );
}

/// docs/CONFORMANCE.md quotes the counts that `cli`'s conformance tests assert, and its
/// table and headings add up to them.
#[test]
fn conformance_counts_match_the_tests() {
    let path = "docs/CONFORMANCE.md";
    let doc = read(path);
    for line in CPU_REF_NODE_TESTS_TAIL {
        assert_quotes(&doc, path, line);
    }
    let [passed, failed, skipped] = numbers(CPU_REF_NODE_TESTS_TAIL[0])[..] else {
        panic!("{}", CPU_REF_NODE_TESTS_TAIL[0])
    };
    // The suites' lines: "onnx/<suite>: N tests, M relevant ...".
    let relevant: u64 = CPU_REF_NODE_TESTS_TAIL[5..]
        .iter()
        .map(|line| numbers(line)[1])
        .sum();
    let layer = CPU_REF_LAYER_CASES;
    assert_eq!(layer + relevant, passed + failed + skipped);
    for text in [
        format!("| layer suite | {layer} | {layer} | 0 | 0 |"),
        format!(
            "| ONNX node tests (node, pytorch-converted and pytorch-operator) | {relevant} | {} | {failed} | {skipped} |",
            passed - layer
        ),
        format!(
            "| **total** | **{}** | **{passed}** | **{failed}** | **{skipped}** |",
            layer + relevant
        ),
        format!("| layer suite | {layer} cases:"),
        format!("CpuRef passes all {layer} cases"),
        format!("### The {failed} declared failures"),
        format!("### The {skipped} skipped"),
        format!("| {CPUFAST_TOTALS}, nothing declared"),
        format!("| {GPUCL_TOTALS}, nothing declared"),
        format!(
            "| {} passed, {} failed, {} skipped",
            TEST_ALPHA_NODE_TESTS[0], TEST_ALPHA_NODE_TESTS[1], TEST_ALPHA_NODE_TESTS[2]
        ),
    ] {
        assert_quotes(&doc, path, &text);
    }

    let path = "docs/ARCHITECTURE.md";
    assert_quotes(
        &read(path),
        path,
        &format!("CpuRef's {failed} declared node-test failures"),
    );

    // The manifest declares exactly the failures the report counts.
    let manifest = read("tests/conformance/expected-failures/CpuRef.txt");
    let declared = manifest
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .count() as u64;
    assert_eq!(declared, failed);
}

/// The README and STATUS quote no test count: the test command prints its total, and
/// CONFORMANCE.md holds the conformance counts.
#[test]
fn readme_and_status_quote_no_count() {
    for path in ["README.md", "docs/STATUS.md"] {
        let doc = read(path);
        for (at, _) in doc.match_indices(" passed") {
            let before = doc[..at].chars().next_back();
            assert!(
                !before.is_some_and(|c| c.is_ascii_digit()),
                "{path} quotes a count: {:?}",
                &doc[at.saturating_sub(20)..at + 7]
            );
        }
    }
}

/// Where the documents state the current Backend API version, it is `backplane_api`'s.
#[test]
fn docs_state_the_current_backend_api() {
    let current = format!("{API_MAJOR}.{API_MINOR}");
    let crate_version = format!("{current}.0");
    let changelog = read("docs/BACKEND-API-CHANGELOG.md");
    let newest = changelog
        .lines()
        .find(|l| l.starts_with("## "))
        .expect("a version heading");
    assert_eq!(
        newest,
        format!("## {current} (`backplane-api` {crate_version})"),
        "docs/BACKEND-API-CHANGELOG.md's newest entry"
    );
    for (path, text) in [
        ("README.md", format!("- Backend API {current}: ABI-stable")),
        (
            "docs/ARCHITECTURE.md",
            format!("`API_MAJOR.API_MINOR` is {current} (`backplane-api` {crate_version})"),
        ),
        ("docs/STATUS.md", format!("| Backend API | {current}: ")),
        (
            "docs/DISCOVERY.md",
            format!("| `api_version` | The host's Backend API version, `\"{current}\"`. |"),
        ),
        (
            "docs/DISCOVERY.md",
            format!("\"api_version\": \"{current}\","),
        ),
        (
            "docs/VENDOR-GUIDE.md",
            format!("`Backend API {current} (host {current}): compatible`"),
        ),
    ] {
        assert_quotes(&read(path), path, &text);
    }

    // Every `backplane-api` requirement a document shows is the current crate's.
    let mut docs = vec![
        "README.md".to_owned(),
        "plugins-example/acme-cpufast/README.md".to_owned(),
        "plugins-example/acme-gpucl/README.md".to_owned(),
    ];
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".md") {
            docs.push(format!("docs/{name}"));
        }
    }
    let wanted = format!("version = \"{crate_version}\"");
    let mut seen = 0;
    for path in &docs {
        for line in read(path).lines() {
            if line.contains("backplane-api = {") && line.contains("version = ") {
                seen += 1;
                assert!(line.contains(&wanted), "{path}: {line} (want {wanted})");
            }
        }
    }
    assert!(seen > 0, "no backplane-api requirement found in {docs:?}");
}
