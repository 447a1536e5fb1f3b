//! The isolation probe's child: `backplane probe FILE` loads one plugin file in its own
//! process, exactly as discovery would, and exits with a status that says how it went. The
//! parent's side is [`super::isolation`].

use std::path::Path;

use super::{
    isolation::{PROBE_DONE, PROBE_LOADED, PROBE_REJECTED},
    load,
    registry::BackendRegistry,
};
use crate::report::CandidateReport;

/// The child's side: loads `file` in this process exactly as discovery does after its trust
/// checks (`load::load_plugin`: the loader's checks, the factory, the capabilities) and
/// returns the exit status for it:
/// [`PROBE_LOADED`] or [`PROBE_REJECTED`] (the reason is logged), after printing
/// [`PROBE_DONE`]. A crash or hang here is what the parent is there to see.
pub fn probe_here(file: &Path) -> i32 {
    let mut report = CandidateReport::registered(file.to_owned(), Some(file.to_owned()));
    let status = match load::load_plugin(file, &mut BackendRegistry::new(), &mut report) {
        Ok(()) => PROBE_LOADED,
        Err(r) => {
            log::info!("{}: rejected in the probe ({r})", file.display());
            PROBE_REJECTED
        }
    };
    println!("{PROBE_DONE}");
    status
}
