//! The loader checks of a plugin file ([`loader_checks`]), against the loader contract
//! (DESIGN §3).

use std::path::Path;

use backplane::plugins::inspect;

use crate::report::{CaseResult, Outcome, case};

/// The loader contract of a plugin file: symbols, id, version, factory and capabilities.
pub fn loader_checks(file: &Path, expected_id: &str) -> Vec<CaseResult> {
    let r = inspect::inspect(file);
    let mut out = Vec::new();
    for sym in r.symbols.iter().filter(|s| s.required) {
        let outcome = if sym.present {
            Outcome::Passed
        } else {
            Outcome::Failed
        };
        out.push(case(
            format!("loader/symbol/{}", sym.name),
            outcome,
            if sym.present { "exported" } else { "missing" },
        ));
    }
    let id_ok = r.backend_id.as_deref() == Some(expected_id);
    out.push(case(
        "loader/id".into(),
        if id_ok {
            Outcome::Passed
        } else {
            Outcome::Failed
        },
        format!(
            "GetBackendId = {:?}, expected {expected_id:?}",
            r.backend_id
        ),
    ));
    out.push(case(
        "loader/version".into(),
        if r.compatible {
            Outcome::Passed
        } else {
            Outcome::Failed
        },
        format!("built against {:?}, host {}", r.version, r.host_version),
    ));
    let guarded = r
        .symbols
        .iter()
        .any(|s| s.name == "BackplaneTakeFactoryError" && s.present);
    out.push(case(
        "loader/guarded_thunks".into(),
        if guarded {
            Outcome::Passed
        } else {
            Outcome::Unsupported
        },
        if guarded {
            "built with export_backend!: every call is guarded inside the plugin"
        } else {
            "not built with export_backend!: the kit cannot see whether calls are guarded"
        },
    ));
    let (outcome, detail) = match &r.error {
        None => (
            Outcome::Passed,
            format!(
                "factory and capabilities answered: {:?}",
                r.capabilities.keys().collect::<Vec<_>>()
            ),
        ),
        Some((code, message)) => (Outcome::Failed, format!("[{code}] {message}")),
    };
    out.push(case(
        "loader/factory_and_capabilities".into(),
        outcome,
        detail,
    ));
    out
}
