//! `backplane conformance`: the conformance kit (`backplane-conformance`) run on one backend,
//! found by discovery or given as a plugin file.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use backplane::{CreationOptions, Runtime, plugins::paths::PathSource};
use clap::Args;

use crate::{
    options::{DiscoveryArgs, backend_option_spec},
    output::{out, outln},
};

#[derive(Args, Debug)]
pub(crate) struct ConformanceArgs {
    /// The backend id to check.
    #[arg(long)]
    backend: String,
    /// A plugin file to check (any name; it is linked under the conventional name into a
    /// private directory). Without it the backend comes from the discovery options.
    #[arg(long, value_name = "FILE")]
    plugin: Option<PathBuf>,
    #[command(flatten)]
    discovery: DiscoveryArgs,
    /// Also run ONNX's node tests from this directory (made by scripts/fetch-onnx-tests.sh,
    /// with node/ and pytorch-converted/).
    #[arg(long, value_name = "DIR")]
    onnx_tests: Option<PathBuf>,
    /// The backend's declared expected failures: one `<case>: <reason>` per line. Declared
    /// failures still count as failed but do not make the exit status non-zero.
    #[arg(long, value_name = "FILE")]
    expected_failures: Option<PathBuf>,
    /// Run only the cases whose name contains this text.
    #[arg(long, value_name = "TEXT")]
    filter: Option<String>,
    /// A backend option for the backend under test, as ID:KEY=VALUE (repeatable; ID must be
    /// --backend). Values are typed: true/false, whole numbers, real numbers, else text.
    #[arg(long = "backend-option", value_name = "ID:KEY=VALUE", value_parser = backend_option_spec)]
    backend_options: Vec<String>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs the kit and prints its report; exits with status 1 on an undeclared failure.
pub(crate) fn run(args: &ConformanceArgs) -> Result<()> {
    let mut given = backplane::OptimizerOptions::default();
    for spec in &args.backend_options {
        given.add_backend_option(spec).map_err(anyhow::Error::msg)?;
    }
    if let Some(other) = given.backend_options.keys().find(|id| **id != args.backend) {
        bail!(
            "--backend-option for {other}: the kit passes options only to the backend under test ({})",
            args.backend
        );
    }
    let options = backplane_conformance::KitOptions {
        backend_options: given.options_for(&args.backend).clone(),
        onnx_tests: args.onnx_tests.clone(),
        filter: args.filter.clone(),
        expectations: match &args.expected_failures {
            Some(file) => {
                backplane_conformance::Expectations::read(file).map_err(anyhow::Error::msg)?
            }
            None => Default::default(),
        },
    };
    let staging = match &args.plugin {
        None => None,
        Some(file) => {
            let file = std::path::absolute(file)?;
            anyhow::ensure!(file.is_file(), "--plugin {}: no such file", file.display());
            let dir =
                std::env::temp_dir().join(format!("backplane-conformance-{}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
            let link = dir.join(format!("Conformance_{}_backend.so", args.backend));
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&file, &link)?;
            Some((dir, file))
        }
    };
    let runtime = std::sync::Arc::new(match &staging {
        None => args.discovery.runtime()?,
        Some((dir, _)) => {
            // The flags' trust, isolation and out-of-process choices; the plugin's private
            // directory as the only path.
            let options = CreationOptions {
                register_builtins: args.backend != "CpuRef",
                ..args.discovery.creation_options()?
            };
            Runtime::with_path_list(
                options,
                PathSource::Option,
                dir.to_str().context("temporary path is not UTF-8")?,
            )
        }
    });
    let result = backplane_conformance::run(
        &runtime,
        &args.backend,
        staging.as_ref().map(|(_, f)| f.as_path()),
        &options,
    );
    if let Some((dir, _)) = &staging {
        let _ = std::fs::remove_dir_all(dir);
    }
    let report = result.map_err(anyhow::Error::msg)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        out!("{}", report.to_text());
    }
    if report.undeclared > 0 {
        std::process::exit(1);
    }
    Ok(())
}
