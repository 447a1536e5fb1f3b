//! What a run of the kit takes besides the backend: [`KitOptions`].

use std::path::PathBuf;

use backplane::graph::optimizer::OptimizerOptions;

use backplane_api::BackendOptions;

use crate::expectations::Expectations;

/// What the kit runs besides the loader checks and the layer suite.
#[derive(Debug, Clone, Default)]
pub struct KitOptions {
    /// A directory made by `scripts/fetch-onnx-tests.sh` (with `node/` and
    /// `pytorch-converted/`): run the ONNX node tests from it.
    pub onnx_tests: Option<PathBuf>,
    /// Run only cases whose name contains this text.
    pub filter: Option<String>,
    /// The backend's declared expected failures.
    pub expectations: Expectations,
    /// Backend options for the backend under test, given to every network the kit runs on it
    /// (`--backend-option ID:KEY=VALUE`).
    pub backend_options: BackendOptions,
}

impl KitOptions {
    /// The optimizer options of a network run on `backend`: its backend options, if any.
    pub(crate) fn optimizer_options(&self, backend: &str) -> OptimizerOptions {
        let mut o = OptimizerOptions::default();
        if !self.backend_options.entries.is_empty() {
            o.backend_options
                .insert(backend.to_owned(), self.backend_options.clone());
        }
        o
    }
}
