//! The conformance kit: what a backend claims is checked against an oracle that does not
//! depend on any backend; what it refuses is recorded with its reason and never counted as a
//! pass. Each part has its own oracle:
//!
//! 1. **Loader checks** (for a plugin file): symbols, id, version, guarded thunks, factory and
//!    capabilities ([`loader_checks`]), against the loader contract (DESIGN §3).
//! 2. **Layer suite**: a case for every layer kind and its attributes, run on the backend
//!    under test (CpuRef included) and checked against [`oracle`], naive `f64` definitions of
//!    every layer written apart from every backend. CpuRef is not the oracle: it is checked
//!    like any other backend.
//! 3. **ONNX node tests** ([`onnx_tests`]): ONNX's own test models, checked against their
//!    stored outputs.
//! 4. **Expected failures** ([`expectations`]): declared per backend with a reason; only an
//!    undeclared failure fails the kit ([`ConformanceReport::undeclared`]).
//!
//! Imports: `session`, `runtime`, `onnx`, `exec`, `graph`, `plugins`, `npy`, `seeded`.

pub mod expectations;
pub mod onnx_tests;
pub mod oracle;

use std::{
    collections::HashMap,
    fmt::Write,
    path::{Path, PathBuf},
};

use backplane_api::{
    ActivationDescriptor, ActivationFunction, BackendOptions, BatchMatMulDescriptor,
    BinaryOperation, ConstTensor, Convolution2dDescriptor, CoordinateTransformation, DataType,
    LayerDescriptor, LayerKind, NearestRounding, NormalizationDescriptor, OutputRounding,
    PadDescriptor, PadMode, PadPair, Padding2d, Pooling2dDescriptor, PoolingType, ResizeDescriptor,
    ResizeMethod, SliceDescriptor, SoftmaxDescriptor, Support, TensorInfo,
    TransposeConvolution2dDescriptor, UnaryOperation,
};
use serde::Serialize;

pub use expectations::Expectations;

use crate::{
    exec::loaded_network::{InputTensor, OutputTensor},
    graph::{
        network::{NetworkBuilder, TensorRef},
        optimizer::{OptimizedNetwork, OptimizerOptions},
    },
    plugins::inspect,
    runtime::Runtime,
    seeded::uniform as seeded_data,
};

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
}

impl ConformanceReport {
    /// Counts the cases after marking the declared failures.
    fn new(
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
    fn optimizer_options(&self, backend: &str) -> OptimizerOptions {
        let mut o = OptimizerOptions::default();
        if !self.backend_options.entries.is_empty() {
            o.backend_options
                .insert(backend.to_owned(), self.backend_options.clone());
        }
        o
    }
}

fn case(case: String, outcome: Outcome, detail: impl Into<String>) -> CaseResult {
    CaseResult {
        case,
        outcome,
        detail: detail.into(),
        expected: None,
    }
}

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

/// The layer cases: every v1 layer, and variants of its attributes.
fn layer_cases() -> Vec<(String, LayerDescriptor, Vec<TensorInfo>)> {
    let t = |s: &[u32]| TensorInfo::new(s, DataType::Float32);
    let c = |s: &[u32]| TensorInfo::new(s, DataType::Float32).constant();
    let mut v: Vec<(String, LayerDescriptor, Vec<TensorInfo>)> = Vec::new();
    for kind in LayerKind::ALL {
        if matches!(
            kind,
            LayerKind::Input
                | LayerKind::Output
                | LayerKind::PreCompiled
                | LayerKind::Quantize
                | LayerKind::Dequantize
                | LayerKind::Requantize
        ) {
            continue;
        }
        if let Some((d, ins, _)) = inspect::sample_layer(kind, DataType::Float32) {
            v.push((format!("layer/{kind}/basic"), d, ins));
        }
    }
    let conv = |padding, stride, dilation, groups, bias| Convolution2dDescriptor {
        padding,
        stride_x: stride,
        stride_y: stride,
        dilation_x: dilation,
        dilation_y: dilation,
        groups,
        bias_enabled: bias,
        ..Default::default()
    };
    let pad1 = Padding2d {
        left: 1,
        right: 1,
        top: 1,
        bottom: 1,
    };
    v.push((
        "layer/Convolution2d/stride2_pad1".into(),
        LayerDescriptor::Convolution2d(conv(pad1, 2, 1, 1, true)),
        vec![t(&[1, 3, 9, 9]), c(&[4, 3, 3, 3]), c(&[4])],
    ));
    v.push((
        "layer/Convolution2d/dilation2".into(),
        LayerDescriptor::Convolution2d(conv(pad1, 1, 2, 1, false)),
        vec![t(&[1, 2, 8, 8]), c(&[3, 2, 3, 3])],
    ));
    v.push((
        "layer/Convolution2d/groups2".into(),
        LayerDescriptor::Convolution2d(conv(pad1, 1, 1, 2, true)),
        vec![t(&[1, 4, 6, 6]), c(&[6, 2, 3, 3]), c(&[6])],
    ));
    v.push((
        "layer/DepthwiseConvolution2d/multiplier2_stride2".into(),
        LayerDescriptor::DepthwiseConvolution2d(conv(pad1, 2, 1, 1, true)),
        vec![t(&[1, 3, 8, 8]), c(&[6, 1, 3, 3]), c(&[6])],
    ));
    for (name, f, a, b) in [
        ("ReLU", ActivationFunction::ReLU, 0.0, 0.0),
        ("ReLU6", ActivationFunction::BoundedReLU, 6.0, 0.0),
        ("Sigmoid", ActivationFunction::Sigmoid, 0.0, 0.0),
        ("TanH", ActivationFunction::TanH, 1.0, 1.0),
        ("LeakyReLU", ActivationFunction::LeakyReLU, 0.1, 0.0),
        ("HardSwish", ActivationFunction::HardSwish, 0.0, 0.0),
        ("Elu", ActivationFunction::Elu, 1.0, 0.0),
        ("Gelu", ActivationFunction::Gelu, 0.0, 0.0),
        ("Gelu_tanh", ActivationFunction::Gelu, 1.0, 0.0),
    ] {
        v.push((
            format!("layer/Activation/{name}"),
            LayerDescriptor::Activation(ActivationDescriptor { function: f, a, b }),
            vec![t(&[2, 3, 4])],
        ));
    }
    for op in BinaryOperation::ALL {
        v.push((
            format!("layer/ElementwiseBinary/{op:?}_broadcast"),
            LayerDescriptor::ElementwiseBinary(op),
            vec![t(&[2, 3, 4]), t(&[3, 1])],
        ));
    }
    for op in UnaryOperation::ALL {
        v.push((
            format!("layer/ElementwiseUnary/{op:?}"),
            LayerDescriptor::ElementwiseUnary(op),
            vec![t(&[2, 3, 4])],
        ));
    }
    for (name, method, coordinates, nearest) in [
        (
            "nearest_asymmetric_floor",
            ResizeMethod::Nearest,
            CoordinateTransformation::Asymmetric,
            NearestRounding::Floor,
        ),
        (
            "nearest_half_pixel",
            ResizeMethod::Nearest,
            CoordinateTransformation::HalfPixel,
            NearestRounding::RoundPreferCeil,
        ),
        (
            "linear_align_corners",
            ResizeMethod::Linear,
            CoordinateTransformation::AlignCorners,
            NearestRounding::RoundPreferFloor,
        ),
        (
            "linear_pytorch_half_pixel",
            ResizeMethod::Linear,
            CoordinateTransformation::PytorchHalfPixel,
            NearestRounding::RoundPreferFloor,
        ),
    ] {
        v.push((
            format!("layer/Resize/{name}"),
            LayerDescriptor::Resize(ResizeDescriptor {
                method,
                coordinates,
                nearest,
                height: 7,
                width: 3,
                scale_y: 7.0 / 4.0,
                scale_x: 0.5,
            }),
            vec![t(&[1, 2, 4, 6])],
        ));
    }
    v.push((
        "layer/TransposeConvolution2d/padded_dilated_groups".into(),
        LayerDescriptor::TransposeConvolution2d(TransposeConvolution2dDescriptor {
            padding: Padding2d {
                top: 1,
                left: 0,
                bottom: 0,
                right: 2,
            },
            stride_x: 2,
            stride_y: 3,
            dilation_x: 2,
            dilation_y: 1,
            groups: 2,
            output_padding_x: 1,
            output_padding_y: 0,
            bias_enabled: true,
        }),
        vec![t(&[1, 4, 3, 4]), c(&[4, 3, 3, 2]), c(&[6])],
    ));
    v.push((
        "layer/Slice/strided_backwards".into(),
        LayerDescriptor::Slice(SliceDescriptor {
            begin: vec![1, 4, 0].into(),
            step: vec![1, -2, 3].into(),
            size: vec![2, 3, 2].into(),
        }),
        vec![t(&[3, 5, 6])],
    ));
    for (name, a, b, transpose_a, transpose_b) in [
        (
            "broadcast_4d",
            &[2, 1, 3, 4][..],
            &[5, 4, 2][..],
            false,
            false,
        ),
        ("transposed", &[4, 3][..], &[2, 5, 4][..], true, true),
    ] {
        v.push((
            format!("layer/BatchMatMul/{name}"),
            LayerDescriptor::BatchMatMul(BatchMatMulDescriptor {
                transpose_a,
                transpose_b,
            }),
            vec![t(a), t(b)],
        ));
    }
    for (name, size, alpha, beta, k) in [
        ("alexnet", 5, 1e-4, 0.75, 1.0),
        ("even_window", 4, 0.3, 1.0, 2.0),
    ] {
        v.push((
            format!("layer/Normalization/{name}"),
            LayerDescriptor::Normalization(NormalizationDescriptor {
                size,
                alpha,
                beta,
                k,
            }),
            vec![t(&[2, 6, 3, 3])],
        ));
    }
    for (name, pool_type, rounding, include) in [
        ("max_ceil", PoolingType::Max, OutputRounding::Ceiling, false),
        (
            "avg_pad_include",
            PoolingType::Average,
            OutputRounding::Floor,
            true,
        ),
        (
            "avg_pad_exclude_ceil",
            PoolingType::Average,
            OutputRounding::Ceiling,
            false,
        ),
    ] {
        let d = Pooling2dDescriptor {
            pool_type,
            padding: pad1,
            pool_width: 3,
            pool_height: 3,
            stride_x: 2,
            stride_y: 2,
            rounding,
            count_include_pad: include,
            layout: Default::default(),
        };
        v.push((
            format!("layer/Pooling2d/{name}"),
            LayerDescriptor::Pooling2d(d),
            vec![t(&[1, 2, 6, 6])],
        ));
    }
    for axis in [0, 1, -1] {
        v.push((
            format!("layer/Softmax/axis{axis}"),
            LayerDescriptor::Softmax(SoftmaxDescriptor { beta: 1.0, axis }),
            vec![t(&[2, 3, 4])],
        ));
    }
    for (name, mode) in [
        ("constant", PadMode::Constant),
        ("reflect", PadMode::Reflect),
        ("edge", PadMode::Edge),
    ] {
        let d = PadDescriptor {
            padding: vec![
                PadPair {
                    before: 0,
                    after: 0,
                },
                PadPair {
                    before: 2,
                    after: 1,
                },
            ]
            .into(),
            value: 0.5,
            mode,
        };
        v.push((
            format!("layer/Pad/{name}"),
            LayerDescriptor::Pad(d),
            vec![t(&[2, 4])],
        ));
    }
    v
}

/// Loads `optimized`, runs it once with `feeds` (each input's bytes, by input name) and
/// unloads it; returns every output in network order as `(name, info, bytes)`.
pub(crate) fn run_optimized(
    rt: &Runtime,
    optimized: &OptimizedNetwork,
    feeds: &HashMap<String, Vec<u8>>,
) -> Result<Vec<(String, TensorInfo, Vec<u8>)>, String> {
    let network = optimized.network();
    let mut inputs = Vec::new();
    for (name, info) in network.inputs() {
        let bytes = feeds
            .get(name)
            .ok_or_else(|| format!("no data for input {name}"))?;
        inputs.push((name, info, bytes));
    }
    let outputs: Vec<(String, TensorInfo)> = network
        .outputs()
        .into_iter()
        .map(|(name, info)| (name.to_owned(), info.clone()))
        .collect();
    let mut buffers: Vec<Vec<u8>> = outputs
        .iter()
        .map(|(_, info)| vec![0u8; info.num_bytes().unwrap_or(0)])
        .collect();
    let id = rt
        .load_network(optimized)
        .map_err(|e| format!("load: {e}"))?;
    let bound: Vec<InputTensor<'_>> = inputs
        .iter()
        .map(|(name, info, data)| InputTensor { name, info, data })
        .collect();
    let mut bound_outputs: Vec<OutputTensor<'_>> = outputs
        .iter()
        .zip(buffers.iter_mut())
        .map(|((name, info), data)| OutputTensor { name, info, data })
        .collect();
    let run = rt.enqueue(id, &bound, &mut bound_outputs);
    drop(bound_outputs);
    let unload = rt.unload_network(id);
    run.map_err(|e| format!("enqueue: {e}"))?;
    unload.map_err(|e| format!("unload: {e}"))?;
    Ok(outputs
        .into_iter()
        .zip(buffers)
        .map(|((name, info), bytes)| (name, info, bytes))
        .collect())
}

/// Float32 values from their little-endian bytes.
pub(crate) fn f32_values(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The kit's seeded data for a tensor of `info`, as bytes: Float32 from [`seeded_data`];
/// Signed32 in `[0, 3)` (valid indices for the suite's `Gather` cases); Boolean true where
/// the seeded value is positive.
fn seeded_bytes(info: &TensorInfo, seed: u64) -> Result<Vec<u8>, String> {
    let values = seeded_data(info.num_elements().unwrap_or(0), seed);
    Ok(match info.data_type {
        DataType::Float32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DataType::Signed32 => values
            .iter()
            .flat_map(|v| (((v + 1.0) * 1.5) as i32).min(2).to_le_bytes())
            .collect(),
        DataType::Boolean => values.iter().map(|&v| u8::from(v > 0.0)).collect(),
        other => return Err(format!("the layer suite makes no {other} data")),
    })
}

/// The reason a case that [`oracle::evaluate`] does not define is skipped for CpuRef, and
/// checked against CpuRef only for other backends.
const NO_ORACLE: &str = "no independent oracle";

/// Runs one case on `backend` (pinned) and checks its output against [`oracle::evaluate`] of
/// the same inputs, with [`oracle::compare`]'s tolerances. A case the oracle does not define
/// is [`NO_ORACLE`]: skipped for CpuRef, and compared with CpuRef's output (within 1e-4
/// relative) for any other backend, which says so in its detail.
fn run_case(
    rt: &Runtime,
    backend: &str,
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    kit: &KitOptions,
) -> Result<(Outcome, String), String> {
    let mut n = NetworkBuilder::new();
    let mut refs: Vec<TensorRef> = Vec::new();
    let mut feeds = HashMap::new();
    let mut tensors = Vec::new();
    for (i, info) in inputs.iter().enumerate() {
        let values = seeded_bytes(info, 7 + i as u64)?;
        tensors.push(oracle::Tensor::from_bytes(info, &values)?);
        if info.is_constant {
            let constant = ConstTensor {
                info: info.clone(),
                data: values.into_iter().collect(),
            };
            refs.push(
                n.add_constant(&format!("const{i}"), constant)
                    .map_err(|e| e.to_string())?,
            );
        } else {
            let name = format!("in{i}");
            refs.push(
                n.add_input(&name, info.clone())
                    .map_err(|e| e.to_string())?,
            );
            feeds.insert(name, values);
        }
    }
    let out = match layer {
        LayerDescriptor::Constant(c) => n.add_constant("case", c.clone()),
        _ => n.add_layer("case", layer.clone(), &refs),
    }
    .map_err(|e| e.to_string())?;
    n.add_output("out", out).map_err(|e| e.to_string())?;
    let network = n.build().map_err(|e| e.to_string())?;
    let want = oracle::evaluate(layer, &tensors);
    if want.is_err() && backend == "CpuRef" {
        let why = want.err().unwrap_or_default();
        return Ok((Outcome::Skipped, format!("{NO_ORACLE}: {why}")));
    }
    let run_on = |prefs: &[&str], pin: Option<&str>| -> Result<_, String> {
        let options = OptimizerOptions {
            pins: pin
                .map(|b| vec![("case".to_owned(), b.to_owned())])
                .unwrap_or_default(),
            ..kit.optimizer_options(backend)
        };
        let optimized = rt
            .optimize(&network, prefs, &options)
            .map_err(|e| e.to_string())?;
        let mut outputs = run_optimized(rt, &optimized, &feeds)?;
        outputs.pop().ok_or_else(|| "no output".to_owned())
    };
    let (_, info, got) = run_on(&[backend, "CpuRef"], Some(backend))?;
    match want {
        Ok(want) => {
            let worst = oracle::compare(&info, &got, &want)?;
            Ok((Outcome::Passed, format!("max |diff| vs oracle {worst:.2e}")))
        }
        Err(why) => {
            let (_, _, reference) = run_on(&["CpuRef"], None)?;
            let worst = compare_with_cpu_ref(&info, &got, &reference)?;
            Ok((
                Outcome::Passed,
                format!("{NO_ORACLE} ({why}): max |diff| vs CpuRef only {worst:.2e}"),
            ))
        }
    }
}

/// The check of a case [`oracle::evaluate`] does not define, on a backend other than CpuRef:
/// its output against CpuRef's, exactly for integers and booleans, within 1e-4 relative for
/// Float32.
fn compare_with_cpu_ref(info: &TensorInfo, got: &[u8], want: &[u8]) -> Result<f32, String> {
    if info.data_type != DataType::Float32 {
        return if got == want {
            Ok(0.0)
        } else {
            Err(format!("{} differs from CpuRef's", info.data_type))
        };
    }
    let mut worst = 0f32;
    for (got, want) in f32_values(got).iter().zip(&f32_values(want)) {
        if got.is_nan() && want.is_nan() {
            continue;
        }
        let diff = (got - want).abs();
        if !got.is_finite() && got.to_bits() != want.to_bits() || diff > 1e-4 * (1.0 + want.abs()) {
            return Err(format!("differs from CpuRef: {got} vs {want}"));
        }
        worst = worst.max(diff);
    }
    Ok(worst)
}

/// Runs the loader checks (for a plugin file) and the layer suite against backend `id` of
/// `runtime`, which must also have CpuRef registered: the kit's networks fall back to it for
/// what `id` does not run, and it is the comparison of a case [`oracle`] does not define.
pub fn run(
    runtime: &Runtime,
    id: &str,
    plugin: Option<&Path>,
    options: &KitOptions,
) -> Result<ConformanceReport, String> {
    let entry = runtime
        .registry()
        .get(id)
        .ok_or_else(|| format!("backend {id} is not registered"))?;
    if !runtime.registry().is_registered("CpuRef") {
        return Err("CpuRef (the kit's fallback backend) is not registered".into());
    }
    let mut cases = plugin.map(|p| loader_checks(p, id)).unwrap_or_default();
    let wanted = |name: &str| {
        options
            .filter
            .as_ref()
            .is_none_or(|f| name.contains(f.as_str()))
    };
    let all: Vec<_> = layer_cases()
        .into_iter()
        .filter(|(name, _, _)| wanted(name))
        .collect();
    let total = all.len();
    for (done, (name, layer, inputs)) in all.into_iter().enumerate() {
        if entry.is_faulted() {
            let why = entry.fault_reason().unwrap_or_default();
            let rest = total - done;
            cases.push(case(
                "layer/remaining".into(),
                Outcome::Failed,
                format!("{rest} cases not run: the backend faulted ({why})"),
            ));
            break;
        }
        let outputs: Vec<TensorInfo> = match backplane_api::shapes::output_infos(&layer, &inputs) {
            Ok(infos) => infos,
            Err(e) => {
                cases.push(case(
                    name,
                    Outcome::Failed,
                    format!("the kit's own case is invalid: {e}"),
                ));
                continue;
            }
        };
        match entry
            .instance()
            .is_layer_supported(&layer, &inputs, &outputs)
        {
            Ok(Support::Unsupported(reason)) => {
                cases.push(case(name, Outcome::Unsupported, reason.to_string()))
            }
            Err(e) => cases.push(case(
                name,
                Outcome::Failed,
                format!("is_layer_supported: {e}"),
            )),
            Ok(Support::Supported) => match run_case(runtime, id, &layer, &inputs, options) {
                Ok((outcome, detail)) => cases.push(case(name, outcome, detail)),
                Err(e) => cases.push(case(name, Outcome::Failed, e)),
            },
        }
    }
    let mut suites = Vec::new();
    if let Some(dir) = &options.onnx_tests {
        let (node_cases, counts) =
            onnx_tests::run(runtime, id, dir, &wanted, &options.optimizer_options(id))?;
        cases.extend(node_cases);
        suites = counts.suites;
    }
    Ok(ConformanceReport::new(
        id,
        cases,
        &options.expectations,
        suites,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every case of the layer suite has an oracle (none is left to a comparison with CpuRef),
    /// and the oracle's output has the shape the Backend API's shape rules give.
    #[test]
    fn every_layer_case_has_an_oracle() {
        let cases = layer_cases();
        assert!(cases.len() >= 84, "{}", cases.len());
        for (name, layer, inputs) in cases {
            let tensors: Vec<oracle::Tensor> = inputs
                .iter()
                .enumerate()
                .map(|(i, info)| {
                    let bytes = seeded_bytes(info, 7 + i as u64).unwrap();
                    oracle::Tensor::from_bytes(info, &bytes).unwrap()
                })
                .collect();
            let want = oracle::evaluate(&layer, &tensors)
                .unwrap_or_else(|e| panic!("{name}: no oracle: {e}"));
            let infos = backplane_api::shapes::output_infos(&layer, &inputs).unwrap();
            let shape: Vec<usize> = infos[0].shape.iter().map(|&d| d as usize).collect();
            assert_eq!(want.shape, shape, "{name}");
        }
    }
}
