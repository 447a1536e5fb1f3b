//! Declared expected failures: a per-backend text manifest, one case per line with its reason.
//!
//! ```text
//! # comments and blank lines are ignored
//! onnx/node/test_maxpool_3d_default: 3-D pooling is not a v1 layer (Pooling2d only)
//! layer/Activation/sigmoid: known rounding issue, tracked in ACME-123
//! ```
//!
//! The case name is everything before the first `:`; the reason (required) is the rest. A
//! failure listed here is still counted as failed, but it does not make the kit's exit status
//! non-zero. A listed case that passes, or that the kit never ran, is reported as stale so that
//! the manifest does not rot.

use std::{collections::BTreeMap, path::Path};

/// The expected failures of one backend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expectations {
    /// Case name → reason.
    entries: BTreeMap<String, String>,
}

impl Expectations {
    /// Parses a manifest. `origin` names it in errors (a file name).
    pub fn parse(text: &str, origin: &str) -> Result<Self, String> {
        let mut entries = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = format!("{origin}:{}", i + 1);
            let (case, reason) = line
                .split_once(':')
                .ok_or_else(|| format!("{at}: expected `<case>: <reason>`, got {line:?}"))?;
            let (case, reason) = (case.trim(), reason.trim());
            if case.is_empty() || case.contains(char::is_whitespace) {
                return Err(format!("{at}: {case:?} is not a case name"));
            }
            if reason.is_empty() {
                return Err(format!("{at}: {case} has no reason"));
            }
            if entries.insert(case.to_owned(), reason.to_owned()).is_some() {
                return Err(format!("{at}: {case} is listed twice"));
            }
        }
        Ok(Self { entries })
    }

    /// Reads and parses a manifest file.
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// The declared reason for `case`, if any.
    pub fn reason(&self, case: &str) -> Option<&str> {
        self.entries.get(case).map(String::as_str)
    }

    /// Every declared case, in name order.
    pub fn cases(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// The number of declared cases.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is declared.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cases_and_reasons() {
        let e = Expectations::parse(
            "# header\n\nonnx/node/test_a: 3-D: not v1\n  layer/x/y:  spaces  \n",
            "m.txt",
        )
        .unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e.reason("onnx/node/test_a"), Some("3-D: not v1"));
        assert_eq!(e.reason("layer/x/y"), Some("spaces"));
        assert_eq!(e.reason("layer/x"), None);
        assert_eq!(
            e.cases().collect::<Vec<_>>(),
            ["layer/x/y", "onnx/node/test_a"]
        );
    }

    #[test]
    fn refuses_malformed_lines() {
        assert_eq!(
            Expectations::parse("a\n", "m.txt").unwrap_err(),
            "m.txt:1: expected `<case>: <reason>`, got \"a\""
        );
        assert_eq!(
            Expectations::parse("\na: \n", "m.txt").unwrap_err(),
            "m.txt:2: a has no reason"
        );
        assert_eq!(
            Expectations::parse("a:  \t\n", "m").unwrap_err(),
            "m:1: a has no reason"
        );
        assert_eq!(
            Expectations::parse("a b: r\n", "m").unwrap_err(),
            "m:1: \"a b\" is not a case name"
        );
        assert_eq!(
            Expectations::parse("a: r\na: s\n", "m").unwrap_err(),
            "m:2: a is listed twice"
        );
    }
}
