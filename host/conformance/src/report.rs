//! The kit's report: each check's [`Outcome`], and the [`ConformanceReport`] of one backend with
//! its counts and its text form.

use std::fmt::Write;

use serde::Serialize;

use crate::expectations::Expectations;

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The backend did what it claims.
    Passed,
    /// The backend claims it and got it wrong (or errored).
    Failed,
    /// The backend refuses it (with a reason): not a pass.
    Unsupported,
    /// Not run, for a reason outside the backend (for example a data type the suite does not
    /// cover): not a pass.
    Skipped,
}

/// One check and its outcome.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    /// The case name (`layer/Convolution2d/stride2_pad1`).
    pub case: String,
    /// The outcome.
    pub outcome: Outcome,
    /// The reason, the error, or the largest difference from the oracle.
    pub detail: String,
    /// For a failure declared in the backend's expectations: the declared reason.
    pub expected: Option<String>,
}

/// The kit's report for one backend.
#[derive(Debug, Clone, Serialize)]
pub struct ConformanceReport {
    /// The backend checked.
    pub backend: String,
    /// Every case, loader checks first.
    pub cases: Vec<CaseResult>,
    /// Cases passed.
    pub passed: usize,
    /// Cases failed, declared or not.
    pub failed: usize,
    /// Failures not declared in the expectations: non-zero fails the kit.
    pub undeclared: usize,
    /// Cases the backend refuses, or that the kit could not run.
    pub skipped: usize,
    /// Declared failures that passed, or that the kit did not run: the manifest is stale.
    pub stale: Vec<String>,
    /// The ONNX test suites: `(suite, tests found, tests relevant)`.
    pub onnx_suites: Vec<(String, usize, usize)>,
    /// onnxruntime's passes on the same suites beside the backend's, when the tests directory
    /// holds its results ([`crate::onnx_tests::PEER_FILE`]).
    pub peers: Vec<crate::onnx_tests::PeerCount>,
}

impl ConformanceReport {
    /// Counts the cases after marking the declared failures.
    pub(crate) fn new(
        backend: &str,
        mut cases: Vec<CaseResult>,
        expectations: &Expectations,
        onnx_suites: Vec<(String, usize, usize)>,
    ) -> Self {
        let mut stale = Vec::new();
        for declared in expectations.cases() {
            match cases.iter_mut().find(|c| c.case == declared) {
                Some(c) if c.outcome == Outcome::Failed => {
                    c.expected = expectations.reason(declared).map(str::to_owned);
                }
                Some(c) => stale.push(format!("{declared}: declared to fail, {:?}", c.outcome)),
                None => stale.push(format!("{declared}: declared to fail, not run")),
            }
        }
        let count = |f: &dyn Fn(&CaseResult) -> bool| cases.iter().filter(|c| f(c)).count();
        let failed = |c: &CaseResult| c.outcome == Outcome::Failed;
        Self {
            backend: backend.to_owned(),
            passed: count(&|c| c.outcome == Outcome::Passed),
            failed: count(&failed),
            undeclared: count(&|c| failed(c) && c.expected.is_none()),
            skipped: count(&|c| matches!(c.outcome, Outcome::Unsupported | Outcome::Skipped)),
            cases,
            stale,
            onnx_suites,
            peers: Vec::new(),
        }
    }

    /// One line per case, the suites, stale declarations, then the closing
    /// `N passed, N failed, N skipped`.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for c in &self.cases {
            let tag = match (c.outcome, &c.expected) {
                (Outcome::Passed, _) => "PASS",
                (Outcome::Failed, None) => "FAIL",
                (Outcome::Failed, Some(_)) => "XFAIL",
                (Outcome::Unsupported | Outcome::Skipped, _) => "SKIP",
            };
            let _ = write!(s, "{tag:<5} {:<48} {}", c.case, c.detail);
            if let Some(why) = &c.expected {
                let _ = write!(s, " [declared: {why}]");
            }
            s.push('\n');
        }
        for (suite, found, relevant) in &self.onnx_suites {
            let _ = writeln!(
                s,
                "onnx/{suite}: {found} tests, {relevant} relevant to v1 layers (run above), {} not",
                found - relevant
            );
        }
        for p in &self.peers {
            // A percentage of a count: exact enough in f64.
            #[allow(clippy::cast_precision_loss)]
            // reason: test counts, far below 2^53
            let share = if p.peer_passed == 0 {
                100.0
            } else {
                100.0 * p.also_passed as f64 / p.peer_passed as f64
            };
            let _ = writeln!(
                s,
                "onnx/{}: {} passes {}; {} passes {} of them ({share:.1}%)",
                p.suite, p.runtime, p.peer_passed, self.backend, p.also_passed
            );
        }
        for line in &self.stale {
            let _ = writeln!(s, "stale expectation: {line}");
        }
        let _ = writeln!(
            s,
            "{} undeclared failure(s), {} declared",
            self.undeclared,
            self.failed - self.undeclared
        );
        let _ = writeln!(
            s,
            "{} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        );
        s
    }
}

/// A result of `outcome` with `detail`, not (yet) marked as a declared failure.
pub(crate) fn case(case: String, outcome: Outcome, detail: impl Into<String>) -> CaseResult {
    CaseResult {
        case,
        outcome,
        detail: detail.into(),
        expected: None,
    }
}
