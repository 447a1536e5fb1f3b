//! The conformance kit: what a backend claims is checked against an oracle that does not
//! depend on any backend; what it refuses is recorded with its reason and never counted as a
//! pass. Each part has its own oracle:
//!
//! 1. **Loader checks** (for a plugin file): symbols, id, version, guarded thunks, factory and
//!    capabilities ([`loader_checks`]), against the loader contract (DESIGN §3).
//! 2. **Layer suite**: a case for every layer kind and its attributes, run on the backend
//!    under test (CpuRef included) and checked against [`oracle`], naive `f64` definitions of
//!    every layer written apart from every backend. CpuRef is not the oracle: it is checked
//!    like any other backend. Cases with quantised tensors (Backend API 1.2)
//!    are checked against [`quantized_oracle`], which says which layers must match exactly and
//!    which within one quantisation step. A backend that does not claim them records each as
//!    unsupported with its reason, never as a failure.
//! 3. **ONNX node tests** ([`onnx_tests`]): ONNX's own test models, checked against their
//!    stored outputs.
//! 4. **Expected failures** ([`expectations`]): declared per backend with a reason; only an
//!    undeclared failure fails the kit ([`ConformanceReport::undeclared`]).
//!
//! Imports: `session`, `runtime`, `onnx`, `exec`, `graph`, `plugins`, `npy`, `seeded`.

pub mod expectations;
pub mod onnx_tests;
pub mod oracle;
pub mod quantized_oracle;

use std::{
    collections::HashMap,
    fmt::Write,
    path::{Path, PathBuf},
};

use backplane_api::{
    ActivationDescriptor, ActivationFunction, BackendOptions, BatchMatMulDescriptor,
    BinaryOperation, ConstTensor, Convolution2dDescriptor, CoordinateTransformation, DataType,
    LayerDescriptor, LayerKind, NearestRounding, NormalizationDescriptor, OutputRounding,
    PadDescriptor, PadMode, PadPair, Padding2d, PerAxisQuantization, Pooling2dDescriptor,
    PoolingType, Quantization, ResizeDescriptor, ResizeMethod, SliceDescriptor, SoftmaxDescriptor,
    Support, TensorInfo, TransposeConvolution2dDescriptor, UnaryOperation,
};
use serde::Serialize;

pub use expectations::Expectations;

use backplane::{
    InputTensor, OutputTensor,
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

/// A layer case: its name, layer, inputs, and the output's quantisation parameters when the
/// network chooses them (a quantised output not inferred from the first input).
type Case = (
    String,
    LayerDescriptor,
    Vec<TensorInfo>,
    Option<Quantization>,
);

/// A per-tensor quantised tensor.
fn qtensor(shape: &[u32], data_type: DataType, scale: f32, offset: i32) -> TensorInfo {
    TensorInfo::new(shape, data_type).with_quantization(Quantization::per_tensor(scale, offset))
}

/// A tensor quantised along `axis` with `scales` (offset 0).
fn qtensor_axis(shape: &[u32], data_type: DataType, axis: u32, scales: &[f32]) -> TensorInfo {
    TensorInfo::new(shape, data_type).with_quantization(Quantization {
        scale: 0.0,
        offset: 0,
        per_axis: Some(PerAxisQuantization {
            axis,
            scales: scales.to_vec().into(),
        })
        .into(),
    })
}

/// The cases with quantised tensors (Backend API 1.2), as the layers doc defines them: the
/// three conversions per tensor and per axis; the products with u8 or s8 activations, s8
/// per-channel or per-tensor weights and a Signed32 bias; the dynamically quantised
/// `FullyConnected` (Float32 input); the layers that compute on real values; and the layers
/// that move stored values.
fn quantized_cases() -> Vec<Case> {
    let (u8q, s8q, s8s) = (DataType::QAsymmU8, DataType::QAsymmS8, DataType::QSymmS8);
    let f = |s: &[u32]| TensorInfo::new(s, DataType::Float32);
    let per_tensor = Quantization::per_tensor;
    let per_axis = |axis: u32, scales: &[f32]| Quantization {
        scale: 0.0,
        offset: 0,
        per_axis: Some(PerAxisQuantization {
            axis,
            scales: scales.to_vec().into(),
        })
        .into(),
    };
    // A Signed32 bias of weights with `w_scales`, for an input of scale `x_scale`.
    let bias = |n: u32, x_scale: f32, w_scales: &[f32]| {
        let scales: Vec<f32> = w_scales.iter().map(|w| x_scale * w).collect();
        if scales.len() == 1 {
            qtensor(&[n], DataType::Signed32, scales[0], 0).constant()
        } else {
            qtensor_axis(&[n], DataType::Signed32, 0, &scales).constant()
        }
    };
    let mut v: Vec<Case> = Vec::new();
    let mut push = |name: &str, layer, inputs, out: Option<Quantization>| {
        v.push((format!("layer/{name}"), layer, inputs, out));
    };
    push(
        "Quantize/u8_per_tensor",
        LayerDescriptor::Quantize(u8q),
        vec![f(&[2, 3, 4])],
        Some(per_tensor(0.01, 120)),
    );
    push(
        "Quantize/s8_per_axis",
        LayerDescriptor::Quantize(s8s),
        vec![f(&[2, 3, 4])],
        Some(per_axis(1, &[0.004, 0.01, 0.02])),
    );
    push(
        "Dequantize/u8_per_tensor",
        LayerDescriptor::Dequantize,
        vec![qtensor(&[2, 3, 4], u8q, 0.03, 131)],
        None,
    );
    push(
        "Dequantize/s8_per_axis",
        LayerDescriptor::Dequantize,
        vec![qtensor_axis(&[3, 4], s8s, 0, &[0.5, 0.01, 0.125])],
        None,
    );
    push(
        "Requantize/u8_to_s8_per_tensor",
        LayerDescriptor::Requantize(s8q),
        vec![qtensor(&[2, 3, 4], u8q, 0.02, 128)],
        Some(per_tensor(0.03, -5)),
    );
    push(
        "Requantize/per_axis_to_u8",
        LayerDescriptor::Requantize(u8q),
        vec![qtensor_axis(&[2, 3, 4], s8s, 2, &[0.01, 0.02, 0.04, 0.08])],
        Some(per_tensor(0.02, 100)),
    );
    let pad1 = Padding2d {
        left: 1,
        right: 1,
        top: 1,
        bottom: 1,
    };
    let conv = Convolution2dDescriptor {
        padding: pad1,
        stride_x: 2,
        stride_y: 2,
        bias_enabled: true,
        ..Default::default()
    };
    let w4 = [0.004, 0.006, 0.003, 0.008];
    push(
        "Convolution2d/q_u8_s8_per_channel",
        LayerDescriptor::Convolution2d(conv.clone()),
        vec![
            qtensor(&[1, 3, 7, 7], u8q, 0.02, 128),
            qtensor_axis(&[4, 3, 3, 3], s8s, 0, &w4).constant(),
            bias(4, 0.02, &w4),
        ],
        Some(per_tensor(0.05, 100)),
    );
    let w6 = [0.01, 0.02, 0.015, 0.005, 0.03, 0.012];
    push(
        "DepthwiseConvolution2d/q_s8_per_channel",
        LayerDescriptor::DepthwiseConvolution2d(Convolution2dDescriptor {
            stride_x: 1,
            stride_y: 1,
            ..conv
        }),
        vec![
            qtensor(&[1, 3, 6, 6], s8q, 0.03, -3),
            qtensor_axis(&[6, 1, 3, 3], s8s, 0, &w6).constant(),
            bias(6, 0.03, &w6),
        ],
        Some(per_tensor(0.06, 2)),
    );
    let w5 = [0.004, 0.01, 0.007, 0.002, 0.005];
    push(
        "FullyConnected/q_u8_s8_per_column",
        LayerDescriptor::FullyConnected(backplane_api::FullyConnectedDescriptor {
            bias_enabled: true,
            transpose_weights: false,
        }),
        vec![
            qtensor(&[3, 8], u8q, 0.02, 128),
            qtensor_axis(&[8, 5], s8s, 1, &w5).constant(),
            bias(5, 0.02, &w5),
        ],
        Some(per_tensor(0.04, 120)),
    );
    push(
        "FullyConnected/q_s8_transposed_per_tensor",
        LayerDescriptor::FullyConnected(backplane_api::FullyConnectedDescriptor {
            bias_enabled: false,
            transpose_weights: true,
        }),
        vec![
            qtensor(&[3, 8], s8q, 0.02, 4),
            qtensor(&[5, 8], s8q, 0.006, -7).constant(),
        ],
        Some(per_tensor(0.05, -10)),
    );
    push(
        "FullyConnected/dynamic_s8_per_column",
        LayerDescriptor::FullyConnected(backplane_api::FullyConnectedDescriptor {
            bias_enabled: true,
            transpose_weights: false,
        }),
        vec![
            f(&[3, 8]),
            qtensor_axis(&[8, 5], s8s, 1, &w5).constant(),
            f(&[5]).constant(),
        ],
        None,
    );
    push(
        "FullyConnected/dynamic_u8_transposed",
        LayerDescriptor::FullyConnected(backplane_api::FullyConnectedDescriptor {
            bias_enabled: false,
            transpose_weights: true,
        }),
        vec![f(&[3, 8]), qtensor(&[5, 8], u8q, 0.01, 131).constant()],
        None,
    );
    let w4b = [0.01, 0.004, 0.02, 0.008];
    push(
        "BatchMatMul/q_u8_s8_per_column",
        LayerDescriptor::BatchMatMul(BatchMatMulDescriptor {
            transpose_a: false,
            transpose_b: false,
        }),
        vec![
            qtensor(&[2, 3, 6], u8q, 0.02, 128),
            qtensor_axis(&[6, 4], s8s, 1, &w4b).constant(),
        ],
        Some(per_tensor(0.05, 128)),
    );
    for (name, op, dt) in [
        ("Add", BinaryOperation::Add, u8q),
        ("Mul", BinaryOperation::Mul, s8q),
    ] {
        let offset = if dt == u8q { 128 } else { 0 };
        push(
            &format!("ElementwiseBinary/q_{name}_broadcast"),
            LayerDescriptor::ElementwiseBinary(op),
            vec![
                qtensor(&[2, 3, 4], dt, 0.02, offset),
                qtensor(&[3, 1], dt, 0.03, offset - 10),
            ],
            Some(per_tensor(0.04, offset + 5)),
        );
    }
    for (name, function, out) in [
        ("ReLU", ActivationFunction::ReLU, per_tensor(0.01, 0)),
        (
            "Sigmoid",
            ActivationFunction::Sigmoid,
            per_tensor(1.0 / 256.0, 0),
        ),
    ] {
        push(
            &format!("Activation/q_{name}"),
            LayerDescriptor::Activation(ActivationDescriptor {
                function,
                a: 0.0,
                b: 0.0,
            }),
            vec![qtensor(&[2, 3, 4], u8q, 0.04, 128)],
            Some(out),
        );
    }
    for (name, pool_type, out) in [
        (
            "q_avg_pad_exclude",
            PoolingType::Average,
            Some(per_tensor(0.015, 120)),
        ),
        ("q_max_ceil", PoolingType::Max, None),
    ] {
        push(
            &format!("Pooling2d/{name}"),
            LayerDescriptor::Pooling2d(Pooling2dDescriptor {
                pool_type,
                padding: pad1,
                pool_width: 3,
                pool_height: 3,
                stride_x: 2,
                stride_y: 2,
                rounding: if pool_type == PoolingType::Max {
                    OutputRounding::Ceiling
                } else {
                    OutputRounding::Floor
                },
                count_include_pad: false,
                layout: Default::default(),
            }),
            vec![qtensor(&[1, 2, 6, 6], u8q, 0.02, 128)],
            out,
        );
    }
    push(
        "Mean/q_global_average",
        LayerDescriptor::Mean(backplane_api::MeanDescriptor {
            axes: vec![2, 3].into(),
            keep_dims: true,
        }),
        vec![qtensor(&[1, 3, 4, 4], u8q, 0.02, 128)],
        Some(per_tensor(0.005, 128)),
    );
    push(
        "Concat/q_differing_parameters",
        LayerDescriptor::Concat(backplane_api::ConcatDescriptor { axis: 1 }),
        vec![
            qtensor(&[1, 2, 3], u8q, 0.02, 128),
            qtensor(&[1, 3, 3], u8q, 0.05, 100),
        ],
        Some(per_tensor(0.03, 110)),
    );
    push(
        "Concat/q_same_parameters",
        LayerDescriptor::Concat(backplane_api::ConcatDescriptor { axis: 1 }),
        vec![
            qtensor(&[1, 2, 3], s8q, 0.02, -3),
            qtensor(&[1, 3, 3], s8q, 0.02, -3),
        ],
        None,
    );
    push(
        "Reshape/q_u8",
        LayerDescriptor::Reshape(backplane_api::ReshapeDescriptor {
            target_shape: vec![6, 4].into(),
        }),
        vec![qtensor(&[2, 3, 4], u8q, 0.02, 128)],
        None,
    );
    push(
        "Transpose/q_s8",
        LayerDescriptor::Transpose(backplane_api::TransposeDescriptor {
            permutation: vec![2, 0, 1].into(),
        }),
        vec![qtensor(&[2, 3, 4], s8q, 0.02, -3)],
        None,
    );
    v
}

/// The infos of a case's outputs: [`backplane_api::shapes::output_infos`], with the case's
/// output quantisation when it gives one.
fn case_outputs(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    quantization: Option<&Quantization>,
) -> Result<Vec<TensorInfo>, String> {
    let mut outputs = backplane_api::shapes::output_infos(layer, inputs)?;
    if let (Some(q), Some(out)) = (quantization, outputs.first_mut()) {
        out.quantization = Some(q.clone()).into();
    }
    Ok(outputs)
}

/// Every case of the layer suite: the Float32 (and Signed32, Boolean) cases, then the
/// quantised ones.
fn all_cases() -> Vec<Case> {
    layer_cases()
        .into_iter()
        .map(|(name, layer, inputs)| (name, layer, inputs, None))
        .chain(quantized_cases())
        .collect()
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
/// a quantised Signed32 tensor (a bias) in `[-2000, 2000)`, any other Signed32 in `[0, 3)`
/// (valid indices for the suite's `Gather` cases); Boolean true where the seeded value is
/// positive; the quantised types over their whole range.
fn seeded_bytes(info: &TensorInfo, seed: u64) -> Result<Vec<u8>, String> {
    let values = seeded_data(info.num_elements().unwrap_or(0), seed);
    Ok(match info.data_type {
        DataType::Float32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DataType::Signed32 if info.quantization.is_some() => values
            .iter()
            .flat_map(|v| ((v * 2000.0).floor() as i32).to_le_bytes())
            .collect(),
        DataType::QAsymmU8 => values
            .iter()
            .map(|v| ((v + 1.0) * 128.0).floor().clamp(0.0, 255.0) as u8)
            .collect(),
        DataType::QAsymmS8 | DataType::QSymmS8 => values
            .iter()
            .map(|v| (v * 128.0).floor().clamp(-128.0, 127.0) as i8 as u8)
            .collect(),
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
    output: &TensorInfo,
    kit: &KitOptions,
) -> Result<(Outcome, String), String> {
    let quantized = inputs
        .iter()
        .chain([output])
        .any(|t| t.data_type.is_quantized());
    if quantized {
        return run_quantized_case(rt, backend, layer, inputs, output, kit);
    }
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

/// The network of one case: its inputs (constants, or network inputs fed with seeded data),
/// the layer (its output quantised with `output`'s parameters when they are given) and the
/// output. Returns the network and the feeds.
fn case_network(
    layer: &LayerDescriptor,
    inputs: &[(TensorInfo, Vec<u8>)],
    output: &TensorInfo,
) -> Result<(backplane::graph::network::Network, HashMap<String, Vec<u8>>), String> {
    let mut n = NetworkBuilder::new();
    let mut refs: Vec<TensorRef> = Vec::new();
    let mut feeds = HashMap::new();
    for (i, (info, values)) in inputs.iter().enumerate() {
        if info.is_constant {
            let constant = ConstTensor {
                info: info.clone(),
                data: values.iter().copied().collect(),
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
            feeds.insert(name, values.clone());
        }
    }
    let out = match output.quantization.as_ref().into_option() {
        Some(q) if output.data_type.is_quantized() => {
            n.add_quantized_layer("case", layer.clone(), &refs, q.clone())
        }
        _ => n.add_layer("case", layer.clone(), &refs),
    }
    .map_err(|e| e.to_string())?;
    n.add_output("out", out).map_err(|e| e.to_string())?;
    Ok((n.build().map_err(|e| e.to_string())?, feeds))
}

/// Runs a case with quantised tensors on `backend` (pinned) and checks its output against
/// [`quantized_oracle::evaluate`] with [`quantized_oracle::compare`] (exactly, or within one
/// step where the definition computes on real values in f32). A case that oracle does not
/// define fails: every quantised case of the suite has one (a unit test says so).
fn run_quantized_case(
    rt: &Runtime,
    backend: &str,
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    output: &TensorInfo,
    kit: &KitOptions,
) -> Result<(Outcome, String), String> {
    let data: Vec<(TensorInfo, Vec<u8>)> = inputs
        .iter()
        .enumerate()
        .map(|(i, info)| Ok((info.clone(), seeded_bytes(info, 7 + i as u64)?)))
        .collect::<Result<_, String>>()?;
    let pairs: Vec<(&TensorInfo, &[u8])> = data.iter().map(|(i, b)| (i, b.as_slice())).collect();
    let want = quantized_oracle::evaluate(layer, &pairs, output)
        .map_err(|e| format!("{NO_ORACLE}: {e}"))?;
    let (network, feeds) = case_network(layer, &data, output)?;
    let options = OptimizerOptions {
        pins: vec![("case".to_owned(), backend.to_owned())],
        ..kit.optimizer_options(backend)
    };
    let optimized = rt
        .optimize(&network, &[backend, "CpuRef"], &options)
        .map_err(|e| e.to_string())?;
    let (_, info, got) = run_optimized(rt, &optimized, &feeds)?
        .pop()
        .ok_or_else(|| "no output".to_owned())?;
    let worst = quantized_oracle::compare(&info, &got, &want)?;
    let unit = if info.data_type.is_quantized() {
        format!(
            " step(s), {}",
            match want.tolerance {
                quantized_oracle::Tolerance::Exact => "exact required",
                quantized_oracle::Tolerance::OneStep => "one allowed",
            }
        )
    } else {
        " (Float32, bit-exact required)".to_owned()
    };
    Ok((
        Outcome::Passed,
        format!("max |diff| vs quantized oracle {worst}{unit}"),
    ))
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
    let all: Vec<_> = all_cases()
        .into_iter()
        .filter(|(name, _, _, _)| wanted(name))
        .collect();
    let total = all.len();
    for (done, (name, layer, inputs, quantization)) in all.into_iter().enumerate() {
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
        let outputs: Vec<TensorInfo> = match case_outputs(&layer, &inputs, quantization.as_ref()) {
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
            Ok(Support::Supported) => {
                match run_case(runtime, id, &layer, &inputs, &outputs[0], options) {
                    Ok((outcome, detail)) => cases.push(case(name, outcome, detail)),
                    Err(e) => cases.push(case(name, Outcome::Failed, e)),
                }
            }
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

    /// Every quantised case is valid (its output infos pass the quantisation checks) and has a
    /// quantised oracle, whose output has the output's shape; the conversions, products and
    /// moves are compared exactly, the computations on real values within one step.
    #[test]
    fn every_quantized_case_has_an_oracle() {
        let cases = quantized_cases();
        assert!(cases.len() >= 24, "{}", cases.len());
        for (name, layer, inputs, quantization) in cases {
            let outputs = case_outputs(&layer, &inputs, quantization.as_ref()).unwrap();
            for t in inputs.iter().chain(&outputs) {
                t.check_quantization()
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
            }
            let data: Vec<Vec<u8>> = inputs
                .iter()
                .enumerate()
                .map(|(i, info)| seeded_bytes(info, 7 + i as u64).unwrap())
                .collect();
            let pairs: Vec<(&TensorInfo, &[u8])> = inputs
                .iter()
                .zip(&data)
                .map(|(i, b)| (i, b.as_slice()))
                .collect();
            let want = quantized_oracle::evaluate(&layer, &pairs, &outputs[0])
                .unwrap_or_else(|e| panic!("{name}: no oracle: {e}"));
            let shape: Vec<usize> = outputs[0].shape.iter().map(|&d| d as usize).collect();
            assert_eq!(want.values.shape, shape, "{name}");
            let real = matches!(
                layer,
                LayerDescriptor::ElementwiseBinary(_)
                    | LayerDescriptor::Activation(_)
                    | LayerDescriptor::Mean(_)
            ) || name.contains("avg")
                || name.contains("differing");
            let expected = if real {
                quantized_oracle::Tolerance::OneStep
            } else {
                quantized_oracle::Tolerance::Exact
            };
            assert_eq!(want.tolerance, expected, "{name}");
        }
    }
}
