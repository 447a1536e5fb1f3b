//! Where dynamic backends are searched (DESIGN §4.1–§4.2).

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
};

use crate::report::{PathReport, PathStatus};

/// The environment variable holding the search path list.
pub const ENV_VAR: &str = "DYNAMIC_BACKEND_PATHS";

/// The search path list baked in at build time (`DYNAMIC_BACKEND_PATHS` in the build's
/// environment); `None` or empty means dynamic loading is off by default.
pub const BUILD_DEFAULT: Option<&str> = option_env!("DYNAMIC_BACKEND_PATHS");

/// Which source the search paths came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathSource {
    /// `CreationOptions::dynamic_backends_path`.
    Option,
    /// The `DYNAMIC_BACKEND_PATHS` environment variable.
    Environment,
    /// The build-time default.
    BuildDefault,
    /// Nothing set: dynamic loading is off.
    None,
}

/// Picks the path list: the option, else the environment (ignored when `privileged`), else the
/// build-time default. The first that is set wins, even if it turns out empty or invalid.
pub fn select_source(
    option: Option<&Path>,
    environment: Option<OsString>,
    privileged: bool,
    build_default: Option<&str>,
) -> (PathSource, String) {
    if let Some(p) = option {
        return (PathSource::Option, p.to_string_lossy().into_owned());
    }
    match environment {
        Some(_) if privileged => {
            log::warn!("{ENV_VAR} ignored: the process runs with raised privileges");
        }
        Some(v) => return (PathSource::Environment, v.to_string_lossy().into_owned()),
        None => {}
    }
    match build_default {
        Some(d) => (PathSource::BuildDefault, d.to_owned()),
        None => (PathSource::None, String::new()),
    }
}

/// Joins directories given one by one (CLI `--path`, the bindings' `paths`) into one path
/// list, each made absolute from the current directory.
///
/// # Errors
/// A directory that cannot be made absolute, is not UTF-8, or contains `:` (which separates
/// the list).
pub fn join_dirs<P: AsRef<Path>>(dirs: &[P]) -> Result<String, String> {
    let mut list = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let dir = dir.as_ref();
        let abs = std::path::absolute(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let s = abs
            .to_str()
            .ok_or_else(|| format!("{} is not UTF-8", dir.display()))?;
        if s.contains(':') {
            return Err(format!("{s:?} contains ':', which separates search paths"));
        }
        list.push(s.to_owned());
    }
    Ok(list.join(":"))
}

/// Arm NN's path-list rules: split on `:`, drop empty segments, keep the first of exact
/// duplicates; each must be absolute, exist and be a directory, else it is reported invalid
/// (with a warning) and skipped. Returns the report of every distinct path and the valid ones.
pub fn parse_path_list(list: &str) -> (Vec<PathReport>, Vec<PathBuf>) {
    let mut seen: Vec<&str> = Vec::new();
    let mut reports = Vec::new();
    let mut valid = Vec::new();
    for segment in list.split(':').filter(|s| !s.is_empty()) {
        if seen.contains(&segment) {
            continue;
        }
        seen.push(segment);
        let path = Path::new(segment);
        let problem = if !path.is_absolute() {
            Some("not an absolute path".to_owned())
        } else {
            match std::fs::metadata(path) {
                Err(e) => Some(format!("does not exist or cannot be read: {e}")),
                Ok(m) if !m.is_dir() => Some("not a directory".to_owned()),
                Ok(_) => None,
            }
        };
        if let Some(reason) = &problem {
            log::warn!("backend path {segment:?} skipped: {reason}");
        } else {
            valid.push(path.to_path_buf());
        }
        reports.push(PathReport {
            path: segment.to_owned(),
            status: if problem.is_some() {
                PathStatus::Invalid
            } else {
                PathStatus::Ok
            },
            reason: problem,
        });
    }
    (reports, valid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every example of DESIGN §4.2.
    #[test]
    fn arm_nn_path_examples() {
        let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let s: Vec<String> = dirs
            .iter()
            .map(|d| d.path().display().to_string())
            .collect();
        let missing = format!("{}/missing", s[0]);
        let (s1, s2, s3, s4) = (&s[0], &s[1], &s[2], &missing);
        let valid = |list: &str| -> Vec<String> {
            parse_path_list(list)
                .1
                .iter()
                .map(|p| p.display().to_string())
                .collect()
        };
        assert_eq!(valid(""), Vec::<String>::new());
        assert_eq!(valid(":::"), Vec::<String>::new());
        assert_eq!(valid(&format!("{s1}:{s1}")), vec![s1.clone()]);
        assert_eq!(valid(&format!("::{s1}:")), vec![s1.clone()]);
        assert_eq!(valid(&format!(":{s4}::")), Vec::<String>::new());
        assert_eq!(valid(&format!("{s1}:{s4}:")), vec![s1.clone()]);
        assert_eq!(
            valid(&format!("{s1}:{s4}::{s1}:{s4}::{s2}:{s2}")),
            vec![s1.clone(), s2.clone()]
        );
        assert_eq!(
            valid(&format!("{s1}:{s2}:{s3}")),
            vec![s1.clone(), s2.clone(), s3.clone()]
        );
        assert_eq!(valid("relative/dir"), Vec::<String>::new());
        // Duplicates are exact strings: another spelling of the same directory is kept (found by
        // the path_list fuzz target); discovery then loads its files once, by canonical path.
        assert_eq!(
            valid(&format!("{s1}:/{s1}")),
            vec![s1.clone(), format!("/{s1}")]
        );
        let file = dirs[0].path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let (reports, ok) = parse_path_list(&format!("{}:relative:{s4}", file.display()));
        assert!(ok.is_empty());
        let reasons: Vec<&str> = reports
            .iter()
            .map(|r| r.reason.as_deref().unwrap())
            .collect();
        assert_eq!(reasons[0], "not a directory");
        assert_eq!(reasons[1], "not an absolute path");
        assert!(reasons[2].starts_with("does not exist"), "{}", reasons[2]);
    }

    /// DESIGN §4.1: the first source that is set wins; the environment is ignored when
    /// privileged.
    #[test]
    fn source_precedence() {
        let opt = Path::new("/opt/b");
        let env = || Some(OsString::from("/env/b"));
        assert_eq!(
            select_source(Some(opt), env(), false, Some("/build")),
            (PathSource::Option, "/opt/b".into())
        );
        assert_eq!(
            select_source(None, env(), false, Some("/build")),
            (PathSource::Environment, "/env/b".into())
        );
        assert_eq!(
            select_source(None, env(), true, Some("/build")),
            (PathSource::BuildDefault, "/build".into())
        );
        assert_eq!(
            select_source(None, None, false, Some("/build")),
            (PathSource::BuildDefault, "/build".into())
        );
        assert_eq!(
            select_source(None, None, false, None),
            (PathSource::None, String::new())
        );
        assert_eq!(
            select_source(None, Some(OsString::new()), false, Some("/b")),
            (PathSource::Environment, String::new())
        );
    }
}
