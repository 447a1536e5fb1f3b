//! ONNX's backend node tests, run against a backend with their stored expected outputs.
//!
//! The tests come from `scripts/fetch-onnx-tests.sh`: a directory with `node/` (the
//! `onnx==1.22.0` wheel's node tests) and `pytorch-converted/` (upgraded to opset 13). Each
//! test is a directory with `model.onnx` and `test_data_set_N/{input,output}_K.pb`.
//!
//! - **Relevant** tests are those whose every node is an operator the importer maps to v1
//!   layers ([`RELEVANT_OPS`]); the others are counted, not run.
//! - A relevant test whose data tensors are not float32, int64 (Signed64), int32 or
//!   bool (or uint8 and int8, quantized values, in a test of a quantized operator), or whose
//!   opset-13 conversion failed, is skipped with that reason. Integer, boolean and quantized
//!   outputs must match exactly. 8- and 16-bit parameters become initializers of their own ONNX
//!   type (uint8, int8, uint16 or int16: the zero point's type says what a tensor is quantized
//!   to).
//! - Graph inputs that ONNX passes as tensors but v1 layers take as parameters (weights,
//!   biases, shapes, pads, clip bounds, ...; [`parameter_inputs`]) are promoted to constants
//!   with the test's data, as `ImportOptions::constant_inputs` allows.
//! - The network runs with preferences `[backend, CpuRef]`. For a backend other than CpuRef,
//!   a test where the backend runs no layer is unsupported, with the backend's reasons, and a
//!   test that imports to no compute layer at all (Identity, inference Dropout) is checked
//!   but skipped: it exercises only the host.
//! - A test the importer cannot express in v1 layers fails for CpuRef (whose manifest
//!   declares each such test with its reason) and is skipped for other backends: the import
//!   does not depend on the backend.
//! - Outputs must match within `|got - want| <= atol + rtol * |want|` (rtol 1e-3, atol
//!   1e-7: [`RTOL`], [`ATOL`]); NaN matches NaN.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Arc,
};

use backplane_api::{ConstTensor, DataType, TensorInfo};
use prost::Message;

use backplane::{
    InputTensor,
    graph::optimizer::OptimizerOptions,
    npy::NpyData,
    onnx::{
        ImportOptions, Instance, Model, TensorValues, decode_tensor, import_model,
        proto::{ModelProto, TensorProto, data_type},
    },
    runtime::Runtime,
    session::{Session, SessionOptions, output_values},
};

use crate::{
    report::{CaseResult, Outcome, case},
    suite::{f32_values, run_optimized},
};

/// Relative tolerance of the node tests.
pub const RTOL: f32 = 1e-3;
/// Absolute tolerance of the node tests.
pub const ATOL: f32 = 1e-7;

/// The suites the kit runs, as sub-directories of the tests directory.
pub const SUITES: [&str; 3] = ["node", "pytorch-converted", "pytorch-operator"];

/// The file of onnxruntime's results on the same tests, in the tests directory (written by
/// `scripts/onnx_tests_onnxruntime.py`, which scripts/fetch-onnx-tests.sh runs).
pub const PEER_FILE: &str = "onnxruntime.json";

/// A peer runtime's results on one suite, beside the backend's: how many tests the peer
/// passes (the tests it is not fed, strings, sequences and the types its Python API cannot
/// take, aside), and how many of those the backend passes too.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PeerCount {
    /// The suite (`node`, `pytorch-converted`, `pytorch-operator`).
    pub suite: String,
    /// The peer and its version (`onnxruntime 1.31.1`).
    pub runtime: String,
    /// Tests the peer passes.
    pub peer_passed: usize,
    /// Of those, tests the backend passes.
    pub also_passed: usize,
}

/// [`PEER_FILE`] as written.
#[derive(serde::Deserialize)]
struct PeerFile {
    runtime: String,
    suites: std::collections::BTreeMap<String, PeerSuite>,
}

/// One suite of [`PeerFile`]: the names of the tests the peer passed (the failures and the
/// tests left out are listed too, for people; the kit reads only the passes).
#[derive(serde::Deserialize)]
struct PeerSuite {
    passed: Vec<String>,
}

/// The peer's counts beside the backend's `cases`, when `dir` holds [`PEER_FILE`] (`None`
/// without it); a file that does not parse is an error naming it.
pub fn peer_counts(dir: &Path, cases: &[CaseResult]) -> Result<Option<Vec<PeerCount>>, String> {
    let path = dir.join(PEER_FILE);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    let file: PeerFile = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not onnxruntime's results: {e}", path.display()))?;
    let passed: std::collections::HashSet<&str> = cases
        .iter()
        .filter(|c| c.outcome == Outcome::Passed)
        .map(|c| c.case.as_str())
        .collect();
    Ok(Some(
        SUITES
            .iter()
            .filter_map(|suite| {
                let peer = file.suites.get(*suite)?;
                let also = peer
                    .passed
                    .iter()
                    .filter(|t| passed.contains(format!("onnx/{suite}/{t}").as_str()))
                    .count();
                Some(PeerCount {
                    suite: (*suite).to_owned(),
                    runtime: file.runtime.clone(),
                    peer_passed: peer.passed.len(),
                    also_passed: also,
                })
            })
            .collect(),
    ))
}

/// Operators the importer maps to layers (of Backend API 1.0, then 1.1): a test made only of
/// these is relevant.
pub const RELEVANT_OPS: &[&str] = &[
    // Run in segments by a session when a value computed at run time decides them.
    "If",
    "Loop",
    "Scan",
    "NonZero",
    "Range",
    // Folded at import (their values are known then), or run in segments.
    "Shape",
    "Size",
    "ConstantOfShape",
    "CastLike",
    "And",
    "Or",
    "Xor",
    "Not",
    // Exact compositions of existing layers (onnx/import/composite.rs).
    "Softplus",
    "Softsign",
    "Selu",
    "Celu",
    "ThresholdedRelu",
    "Mish",
    "Shrink",
    "Sign",
    "Swish",
    "PRelu",
    "IsNaN",
    "IsInf",
    "LogSoftmax",
    "RMSNormalization",
    "Trilu",
    "EyeLike",
    "Tile",
    "Mod",
    "GatherElements",
    "CumSum",
    "CumProd",
    "Hardmax",
    "LpNormalization",
    "TopK",
    "NegativeLogLikelihoodLoss",
    "SoftmaxCrossEntropyLoss",
    // Backend API 1.5's unary and bitwise operations (onnx/import/bitwise.rs).
    "Tan",
    "Asin",
    "Acos",
    "Atan",
    "Sinh",
    "Cosh",
    "Asinh",
    "Acosh",
    "Atanh",
    "Round",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
    "BitwiseNot",
    "BitShift",
    "Scatter",
    "ScatterElements",
    "ScatterND",
    // Computed by its definition (onnx/import/expand/quantization.rs).
    "ConvInteger",
    // Backend API 1.5's detection layers (onnx/import/detection.rs).
    "NonMaxSuppression",
    "RoiAlign",
    // Backend API 1.5's BitCast and Determinant (onnx/import/constant.rs, matmul.rs).
    "BitCast",
    "Det",
    "Unique",
    "DeformConv",
    // Resize's predecessor (onnx/import/resize.rs).
    "Upsample",
    // A constant once its inputs are known (onnx/import/expand/signal.rs).
    "MelWeightMatrix",
    // Counts of integer n-grams (onnx/import/expand/text.rs).
    "TfIdfVectorizer",
    // Optionals of tensors (onnx/import/constant.rs).
    "Optional",
    "OptionalGetElement",
    "OptionalHasElement",
    // Imported as graphs of simpler operators (onnx/import/expand/).
    "STFT",
    "GridSample",
    "AffineGrid",
    "BlackmanWindow",
    "HammingWindow",
    "HannWindow",
    "Col2Im",
    "DFT",
    "LpPool",
    "MaxUnpool",
    "ReverseSequence",
    "TensorScatter",
    "Einsum",
    "RotaryEmbedding",
    "RNN",
    "GRU",
    "LSTM",
    "Attention",
    "CenterCropPad",
    "Compress",
    "DepthToSpace",
    "SpaceToDepth",
    "GatherND",
    "GroupNormalization",
    "MeanVarianceNormalization",
    "OneHot",
    "Conv",
    "Gemm",
    "MatMul",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Max",
    "Min",
    "Relu",
    "Clip",
    "LeakyRelu",
    "HardSigmoid",
    "HardSwish",
    "Sigmoid",
    "Tanh",
    "Elu",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Softmax",
    "Reshape",
    "Flatten",
    "Concat",
    "Transpose",
    "Pad",
    "BatchNormalization",
    "ReduceMean",
    "Constant",
    "Identity",
    "Dropout",
    // Backend API 1.1.
    "Sum",
    "Mean",
    "LRN",
    "Pow",
    "Abs",
    "Neg",
    "Exp",
    "Log",
    "Sqrt",
    "Reciprocal",
    "Sin",
    "Cos",
    "Erf",
    "Ceil",
    "Floor",
    "Slice",
    "ConvTranspose",
    "Resize",
    "Gather",
    "Split",
    "Squeeze",
    "Unsqueeze",
    "Expand",
    "Cast",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL2",
    "ReduceL1",
    "ReduceSumSquare",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ArgMax",
    "ArgMin",
    "LayerNormalization",
    "InstanceNormalization",
    "Equal",
    "Greater",
    "GreaterOrEqual",
    "Less",
    "LessOrEqual",
    "Where",
    "Gelu",
    // Backend API 1.2: quantized tensors.
    "QuantizeLinear",
    "DequantizeLinear",
    "QLinearConv",
    "QLinearMatMul",
    "DynamicQuantizeLinear",
    "MatMulInteger",
];

/// The quantized operators of [`RELEVANT_OPS`]: a test with one of them may have uint8 and
/// int8 data (quantized values).
pub const QUANTIZED_OPS: &[&str] = &[
    "QuantizeLinear",
    "DequantizeLinear",
    "QLinearConv",
    "QLinearMatMul",
    "DynamicQuantizeLinear",
    "MatMulInteger",
];

/// The input positions of `op` that v1 layers take as parameters (constants), not tensors.
pub fn parameter_inputs(op: &str) -> &'static [usize] {
    match op {
        "Conv" | "Gemm" => &[1, 2],
        "MatMul" | "Reshape" | "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin"
        | "ReduceProd" | "ReduceL2" | "ReduceL1" | "ReduceSumSquare" | "ReduceLogSum"
        | "ReduceLogSumExp" | "Expand" | "Split" | "Squeeze" | "Unsqueeze" => &[1],
        "Clip" | "Dropout" => &[1, 2],
        "Pad" => &[1, 2, 3],
        "Slice" => &[1, 2, 3, 4],
        "ConvTranspose" => &[1, 2],
        "Resize" => &[1, 2, 3],
        "BatchNormalization" => &[1, 2, 3, 4],
        // Scales and zero points; the quantized operands too, as the graph inputs of a
        // network are float or integer tensors, never quantized ones.
        "QuantizeLinear" => &[1, 2],
        "DequantizeLinear" => &[0, 1, 2],
        "QLinearConv" => &[0, 1, 2, 3, 4, 5, 6, 7, 8],
        "QLinearMatMul" => &[0, 1, 2, 3, 4, 5, 6, 7],
        "MatMulInteger" => &[1, 2, 3],
        _ => &[],
    }
}

/// What the node-test suites found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SuiteCounts {
    /// `(suite, tests found, tests relevant)`.
    pub suites: Vec<(String, usize, usize)>,
}

/// Runs every relevant test of the suites under `dir` whose case name `wanted` accepts on
/// `backend`. Once the backend has faulted, the remaining tests are one failed case.
pub fn run(
    rt: &Arc<Runtime>,
    backend: &str,
    dir: &Path,
    wanted: &dyn Fn(&str) -> bool,
    optimizer: &OptimizerOptions,
) -> Result<(Vec<CaseResult>, SuiteCounts), String> {
    let mut cases = Vec::new();
    let mut counts = SuiteCounts::default();
    for suite in SUITES {
        let root = dir.join(suite);
        let tests = sorted_dirs(&root).map_err(|e| {
            format!(
                "{}: {e} (run scripts/fetch-onnx-tests.sh to fetch the tests)",
                root.display()
            )
        })?;
        let mut relevant = 0;
        let mut not_run: Option<(usize, String)> = None;
        for test in &tests {
            let name = format!(
                "onnx/{suite}/{}",
                test.file_name().unwrap_or_default().to_string_lossy()
            );
            let model = match read_model(test) {
                Ok(m) => m,
                Err(e) => {
                    relevant += 1;
                    cases.push(case(name, Outcome::Failed, e));
                    continue;
                }
            };
            if !is_relevant(&model) {
                continue;
            }
            relevant += 1;
            if !wanted(&name) {
                continue;
            }
            if let Some(why) = rt
                .registry()
                .get(backend)
                .filter(|b| b.is_faulted())
                .map(|b| b.fault_reason().unwrap_or_default())
            {
                not_run = Some((not_run.map_or(0, |(k, _)| k) + 1, why));
                continue;
            }
            let (mut outcome, mut detail) = run_test(rt, backend, test, &model, optimizer);
            if outcome == Outcome::Failed && backend != "CpuRef" {
                // A test the reference fails too checks nothing of this backend (CpuRef's run
                // owns and declares the failure).
                let (reference, why) = run_test(rt, "CpuRef", test, &model, optimizer);
                if reference == Outcome::Failed {
                    outcome = Outcome::Skipped;
                    detail = format!("CpuRef fails it too (a CpuRef expected failure): {why}");
                }
            }
            cases.push(case(name, outcome, detail));
        }
        if let Some((k, why)) = not_run {
            cases.push(case(
                format!("onnx/{suite}/remaining"),
                Outcome::Failed,
                format!("{k} tests not run: the backend faulted ({why})"),
            ));
        }
        counts
            .suites
            .push((suite.to_owned(), tests.len(), relevant));
    }
    Ok((cases, counts))
}

fn sorted_dirs(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    Ok(v)
}

fn read_model(test: &Path) -> Result<ModelProto, String> {
    let path = test.join("model.onnx");
    let bytes = std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    ModelProto::decode(bytes.as_slice())
        .map_err(|e| format!("{} is not an ONNX model: {e}", path.display()))
}

fn is_relevant(model: &ModelProto) -> bool {
    let Some(graph) = &model.graph else {
        return false;
    };
    !graph.node.is_empty()
        && graph.node.iter().all(|n| {
            (n.domain.is_empty() || n.domain == "ai.onnx")
                && RELEVANT_OPS.contains(&n.op_type.as_str())
        })
}

/// Runs one test (every data set); the outcome and its detail.
fn run_test(
    rt: &Arc<Runtime>,
    backend: &str,
    test: &Path,
    model: &ModelProto,
    optimizer: &OptimizerOptions,
) -> (Outcome, String) {
    if let Ok(why) = std::fs::read_to_string(test.join("CONVERSION_FAILED")) {
        return (Outcome::Skipped, why.trim().to_owned());
    }
    let Some(graph) = &model.graph else {
        return (Outcome::Failed, "the model has no graph".into());
    };
    // Graph inputs that are not initializers, in order: what input_K.pb feeds.
    let initializers: Vec<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
    let fed: Vec<&str> = graph
        .input
        .iter()
        .map(|i| i.name.as_str())
        .filter(|n| !initializers.contains(n))
        .collect();
    let mut parameters: Vec<&str> = Vec::new();
    for n in &graph.node {
        for &i in parameter_inputs(&n.op_type) {
            if let Some(name) = n.input.get(i).filter(|s| !s.is_empty()) {
                parameters.push(name);
            }
        }
    }
    // v1 layers compute in float32: other data types are outside the suite. Parameter
    // inputs may be integers (shapes, pads, axes).
    let quantized = graph
        .node
        .iter()
        .any(|n| QUANTIZED_OPS.contains(&n.op_type.as_str()));
    // In a test of the quantized operators the parameters are data too (quantized values,
    // their scales): each must be of a type the host reads.
    let data_inputs = graph.input.iter().filter(|v| {
        fed.contains(&v.name.as_str()) && (quantized || !parameters.contains(&v.name.as_str()))
    });
    let data = data_inputs
        .map(|v| ("input", v))
        .chain(graph.output.iter().map(|v| ("output", v)));
    for (role, v) in data {
        let t = v
            .r#type
            .as_ref()
            .and_then(|t| t.tensor_type.as_ref())
            .map(|t| t.elem_type);
        // Backend API 1.5: every integer type, double (whose values the suite reads as f32:
        // compared within the tolerances), float16 and bfloat16 (widened to f32 exactly).
        let supported = [
            data_type::FLOAT,
            data_type::DOUBLE,
            data_type::FLOAT16,
            data_type::BFLOAT16,
            data_type::INT64,
            data_type::INT32,
            data_type::INT16,
            data_type::INT8,
            data_type::UINT64,
            data_type::UINT32,
            data_type::UINT16,
            data_type::UINT8,
            data_type::BOOL,
        ];
        if !t.is_some_and(|t| supported.contains(&t)) {
            return (
                Outcome::Skipped,
                format!(
                    "{role} {} is {}: the suite covers the float, integer and bool types",
                    v.name,
                    t.map_or(
                        "not a tensor (optional or sequence type)".into(),
                        data_type::name
                    ),
                ),
            );
        }
    }
    let sets = match sorted_dirs(test) {
        Ok(s) => s,
        Err(e) => return (Outcome::Failed, format!("{}: {e}", test.display())),
    };
    if sets.is_empty() {
        return (Outcome::Failed, "no test_data_set_* directory".into());
    }
    let mut worst = 0f32;
    let mut ran_on = Vec::new();
    for set in &sets {
        match run_set(rt, backend, model, &fed, &parameters, set, optimizer) {
            Ok(SetResult::Ran { max_diff, layers }) => {
                worst = worst.max(max_diff);
                ran_on = layers;
                if ran_on.is_empty() && backend != "CpuRef" {
                    // Checked, but nothing in it is the backend's: not its pass.
                    return (
                        Outcome::Skipped,
                        "no compute layer after import: the test exercises only the host".into(),
                    );
                }
            }
            Ok(SetResult::Refused(why)) => return (Outcome::Unsupported, why),
            // The import does not depend on the backend: CpuRef's run owns (and declares)
            // these failures, other backends skip the test.
            Ok(SetResult::NotImportable(why)) if backend == "CpuRef" => {
                return (Outcome::Failed, format!("import: {why}"));
            }
            Ok(SetResult::NotImportable(why)) => {
                return (
                    Outcome::Skipped,
                    format!("the host cannot import it (a CpuRef expected failure): {why}"),
                );
            }
            Ok(SetResult::NoFallback(why)) => {
                return (
                    Outcome::Skipped,
                    format!("CpuRef cannot run it either (a CpuRef expected failure): {why}"),
                );
            }
            Err(e) => {
                let set_name = set.file_name().unwrap_or_default().to_string_lossy();
                return (Outcome::Failed, format!("{set_name}: {e}"));
            }
        }
    }
    (
        Outcome::Passed,
        format!(
            "{} data set(s), max |diff| {worst:.2e}; {}",
            sets.len(),
            if ran_on.is_empty() {
                "no compute layer after import".to_owned()
            } else {
                ran_on.join(", ")
            }
        ),
    )
}

enum SetResult {
    /// The outputs matched; the largest difference and the layers the backend ran.
    Ran { max_diff: f32, layers: Vec<String> },
    /// The backend ran no layer of the test: its reasons.
    Refused(String),
    /// The importer cannot express the test in v1 layers: why.
    NotImportable(String),
    /// With a backend other than CpuRef: a layer that neither it nor CpuRef runs.
    NoFallback(String),
}

/// The tensors `<prefix>_K.pb` of a data set, in K order.
fn read_tensors(set: &Path, prefix: &str) -> Result<Vec<(String, TensorValues)>, String> {
    let mut out = Vec::new();
    for k in 0.. {
        let path = set.join(format!("{prefix}_{k}.pb"));
        if !path.exists() {
            break;
        }
        let bytes =
            std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        out.push(decode_tensor(&bytes).map_err(|e| format!("{}: {e}", path.display()))?);
    }
    Ok(out)
}

/// The `input_K.pb` tensors of a data set as stored (their ONNX element types intact), in
/// order.
fn read_protos(set: &Path) -> Result<Vec<TensorProto>, String> {
    let mut out = Vec::new();
    for k in 0.. {
        let path = set.join(format!("input_{k}.pb"));
        if !path.exists() {
            break;
        }
        let bytes =
            std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        out.push(TensorProto::decode(&*bytes).map_err(|e| format!("{}: {e}", path.display()))?);
    }
    Ok(out)
}

/// Pairs tensors with graph value names: by the tensor's own name when it is one of
/// `names`, else by position.
fn by_name<'a>(
    tensors: Vec<(String, TensorValues)>,
    names: &[&'a str],
) -> Result<Vec<(&'a str, TensorValues)>, String> {
    if tensors.len() > names.len() {
        return Err(format!(
            "{} tensors for {} graph values",
            tensors.len(),
            names.len()
        ));
    }
    Ok(tensors
        .into_iter()
        .enumerate()
        .map(|(k, (own, v))| {
            let name = names.iter().copied().find(|n| *n == own);
            (name.unwrap_or(names[k]), v)
        })
        .collect())
}

fn const_tensor(name: &str, v: &TensorValues) -> Result<ConstTensor, String> {
    match v {
        TensorValues::Float32 { shape, data } => Ok(ConstTensor::from_f32(shape, data)),
        TensorValues::Int64 { shape, data } => {
            let mut bytes = Vec::with_capacity(data.len() * 4);
            for &x in data {
                let x = i32::try_from(x)
                    .map_err(|_| format!("{name}: value {x} does not fit Signed32"))?;
                bytes.extend_from_slice(&x.to_le_bytes());
            }
            Ok(ConstTensor {
                info: TensorInfo::new(shape, DataType::Signed32).constant(),
                data: bytes.into(),
            })
        }
    }
}

fn run_set(
    rt: &Arc<Runtime>,
    backend: &str,
    model: &ModelProto,
    fed: &[&str],
    parameters: &[&str],
    set: &Path,
    optimizer: &OptimizerOptions,
) -> Result<SetResult, String> {
    let graph = model.graph.as_ref().ok_or("the model has no graph")?;
    let inputs = by_name(read_tensors(set, "input")?, fed)?;
    let output_names: Vec<&str> = graph.output.iter().map(|o| o.name.as_str()).collect();
    let expected = by_name(read_tensors(set, "output")?, &output_names)?;

    // 8- and 16-bit parameters (quantized operands, zero points) keep their ONNX type, which
    // says what a zero point quantizes to: they become initializers of a copy of the model.
    let mut model = model.clone();
    // Paired with the graph's inputs as `by_name` pairs the decoded ones: by the tensor's own
    // name when it is a fed input, else by position.
    let eight_bit = read_protos(set)?
        .into_iter()
        .enumerate()
        .filter_map(|(k, mut t)| {
            let name = fed.iter().find(|f| **f == t.name).or_else(|| fed.get(k))?;
            t.name = (*name).to_owned();
            Some(t)
        })
        .filter(|t| {
            parameters.contains(&t.name.as_str())
                && matches!(
                    t.data_type,
                    data_type::UINT8 | data_type::INT8 | data_type::UINT16 | data_type::INT16
                )
        })
        .collect::<Vec<_>>();
    let injected: Vec<String> = eight_bit.iter().map(|t| t.name.clone()).collect();
    if let Some(g) = model.graph.as_mut() {
        g.initializer.extend(eight_bit);
    }
    let model = &model;
    let mut options = ImportOptions::default();
    for (name, values) in &inputs {
        if injected.iter().any(|i| i == name) {
            continue;
        }
        if parameters.contains(name) {
            options
                .constant_inputs
                .insert((*name).to_owned(), const_tensor(name, values)?);
        } else {
            let (TensorValues::Float32 { shape, .. } | TensorValues::Int64 { shape, .. }) = values;
            options
                .input_shapes
                .insert((*name).to_owned(), shape.clone());
        }
    }
    let network = match import_model(model, &options) {
        Ok(n) => n,
        Err(e) => {
            // A model whose shapes depend on values computed at run time runs in segments,
            // through a session, on CpuRef.
            return match run_dynamic(rt, backend, model, &inputs, &expected, optimizer)? {
                Some(result) => Ok(result),
                None => Ok(SetResult::NotImportable(e.to_string())),
            };
        }
    };
    // The data in the network's types: int64 as Signed64 (or narrowed, range-checked, for an
    // int32 input), bool as bytes.
    let mut feeds: HashMap<String, Vec<u8>> = HashMap::new();
    for (name, info) in network.inputs() {
        let Some((_, values)) = inputs.iter().find(|(n, _)| *n == name) else {
            continue;
        };
        feeds.insert(name.to_owned(), feed_bytes(name, values, info.data_type)?);
    }
    let prefs: &[&str] = if backend == "CpuRef" {
        &["CpuRef"]
    } else {
        &[backend, "CpuRef"]
    };
    let optimized = match rt.optimize(&network, prefs, optimizer) {
        Ok(o) => o,
        // With the fallback CpuRef among the preferences, a layer no backend runs is one of
        // CpuRef's declared failures, not the backend's.
        Err(e) if backend != "CpuRef" => return Ok(SetResult::NoFallback(e.to_string())),
        Err(e) => return Err(format!("optimize: {e}")),
    };
    let mut layers = Vec::new();
    let mut refusals = Vec::new();
    let mut any_compute = false;
    for (layer, a) in optimized
        .network()
        .layers()
        .iter()
        .zip(optimized.assignments())
    {
        if !layer.computes() {
            continue;
        }
        any_compute = true;
        if a.backend == backend {
            layers.push(format!("{}:{}", layer.descriptor.kind(), a.backend));
        }
        for r in a.refusals.iter().filter(|r| r.backend == backend) {
            refusals.push(format!(
                "{} ({}): {}",
                layer.name,
                layer.descriptor.kind(),
                r.reason
            ));
        }
    }
    if layers.is_empty() && any_compute {
        return Ok(SetResult::Refused(refusals.join("; ")));
    }
    let outputs = run_optimized(rt, &optimized, &feeds)?;
    let worst = check_outputs(&expected, &outputs)?;
    Ok(SetResult::Ran {
        max_diff: worst,
        layers,
    })
}

/// A test's data for an input of type `t`: int64 as Signed64 (or narrowed, range-checked, for
/// an int32 input), bool as bytes, floats in their own width.
fn feed_bytes(name: &str, values: &TensorValues, t: DataType) -> Result<Vec<u8>, String> {
    Ok(match (values, t) {
        (TensorValues::Float32 { data, .. }, DataType::Float32) => {
            data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        (TensorValues::Int64 { data, .. }, DataType::Signed32) => {
            backplane::onnx::narrow_to_i32(data)
                .map_err(|v| format!("input {name}: {v} does not fit Signed32"))?
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect()
        }
        (TensorValues::Int64 { data, .. }, DataType::Signed64) => {
            data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        (TensorValues::Int64 { data, .. }, DataType::Boolean) => {
            data.iter().map(|&v| u8::from(v != 0)).collect()
        }
        (TensorValues::Float32 { data, .. }, DataType::Float64) => data
            .iter()
            .flat_map(|&v| f64::from(v).to_le_bytes())
            .collect(),
        // Exact: the values came from 16-bit floats of this type.
        (TensorValues::Float32 { data, .. }, t @ (DataType::Float16 | DataType::BFloat16)) => {
            backplane::onnx::half_bytes(data, t).unwrap_or_default()
        }
        (TensorValues::Int64 { data, .. }, t) if t.is_integer() || t.is_quantized() => {
            backplane::onnx::integer_bytes(data, t)
                .ok_or_else(|| format!("input {name}: {t} is not an integer type"))?
                .map_err(|v| format!("input {name}: {v} does not fit {t}"))?
        }
        (_, t) => return Err(format!("input {name}: the data does not fit {t}")),
    })
}

/// A test whose shapes depend on values computed at run time (`If`, `Loop`, `Range` on
/// inputs): run through a session, every input fed at run time; `None` when the model is not
/// such a model (its static import's error stands). Other backends than CpuRef skip it.
fn run_dynamic(
    rt: &Arc<Runtime>,
    backend: &str,
    model: &ModelProto,
    inputs: &[(&str, TensorValues)],
    expected: &[(&str, TensorValues)],
    optimizer: &OptimizerOptions,
) -> Result<Option<SetResult>, String> {
    let Ok(decoded) = Model::new(model.clone()) else {
        return Ok(None);
    };
    let mut options = SessionOptions {
        backends: vec!["CpuRef".to_owned()],
        optimizer: optimizer.clone(),
        ..SessionOptions::default()
    };
    for (name, values) in inputs {
        let (TensorValues::Float32 { shape, .. } | TensorValues::Int64 { shape, .. }) = values;
        options
            .input_shapes
            .insert((*name).to_owned(), shape.clone());
    }
    let import = ImportOptions {
        input_shapes: options.input_shapes.clone(),
        ..ImportOptions::default()
    };
    if !matches!(
        decoded.instantiate_dynamic(&import),
        Ok(Instance::Cut { .. })
    ) {
        return Ok(None);
    }
    if backend != "CpuRef" {
        return Ok(Some(SetResult::NoFallback(
            "its shapes depend on values computed at run time: checked on CpuRef".to_owned(),
        )));
    }
    let session = match Session::from_model(rt.clone(), decoded, &options) {
        Ok(s) => s,
        Err(e) => return Ok(Some(SetResult::NotImportable(e.to_string()))),
    };
    let mut feeds = Vec::with_capacity(inputs.len());
    for declared in session.inputs() {
        let (_, values) = inputs
            .iter()
            .find(|(n, _)| *n == declared.name)
            .ok_or_else(|| format!("no data for input {}", declared.name))?;
        let (TensorValues::Float32 { shape, .. } | TensorValues::Int64 { shape, .. }) = values;
        let t = declared
            .data_type
            .ok_or_else(|| format!("input {}: an unsupported type", declared.name))?;
        let info = TensorInfo::new(shape, t);
        feeds.push((
            declared.name.as_str(),
            info,
            feed_bytes(&declared.name, values, t)?,
        ));
    }
    let bound: Vec<InputTensor<'_>> = feeds
        .iter()
        .map(|(name, info, data)| InputTensor { name, info, data })
        .collect();
    let outputs: Vec<(String, TensorInfo, Vec<u8>)> = match session.run_alloc(&bound) {
        Ok(o) => o.into_iter().map(|t| (t.name, t.info, t.data)).collect(),
        Err(e) => return Ok(Some(SetResult::NotImportable(e.to_string()))),
    };
    let max_diff = check_outputs(expected, &outputs)?;
    Ok(Some(SetResult::Ran {
        max_diff,
        layers: vec!["segments:CpuRef".to_owned()],
    }))
}

/// Each expected output against the one computed: the largest difference of the float
/// outputs (within the tolerances), integers exactly.
fn check_outputs(
    expected: &[(&str, TensorValues)],
    outputs: &[(String, TensorInfo, Vec<u8>)],
) -> Result<f32, String> {
    let mut worst = 0f32;
    for (name, want) in expected {
        let (info, got) = outputs
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, info, got)| (info, got))
            .ok_or_else(|| format!("the network has no output {name}"))?;
        let (TensorValues::Float32 { shape, .. } | TensorValues::Int64 { shape, .. }) = want;
        if info.shape.as_slice() != shape.as_slice() {
            return Err(format!(
                "output {name} has shape {:?}, expected {shape:?}",
                info.shape.as_slice()
            ));
        }
        match (want, info.data_type) {
            (TensorValues::Float32 { data, .. }, DataType::Float32) => {
                worst = worst.max(compare(name, &f32_values(got), data)?);
            }
            (TensorValues::Float32 { data, .. }, DataType::Float16 | DataType::BFloat16) => {
                let widened: Vec<f32> = match output_values(name, info, got)? {
                    NpyData::F16(v) => v
                        .into_iter()
                        .map(|b| half::f16::from_bits(b).to_f32())
                        .collect(),
                    NpyData::F32(v) => v,
                    _ => unreachable!("a 16-bit float output"),
                };
                worst = worst.max(compare(name, &widened, data)?);
            }
            // Doubles, compared as the suite reads them: rounded to f32.
            (TensorValues::Float32 { data, .. }, DataType::Float64) => {
                let NpyData::F64(v) = output_values(name, info, got)? else {
                    unreachable!("a Float64 output")
                };
                let rounded: Vec<f32> = v.into_iter().map(|x| x as f32).collect();
                worst = worst.max(compare(name, &rounded, data)?);
            }
            // Integers, booleans and quantized values match exactly.
            (TensorValues::Int64 { data, .. }, t)
                if t.is_integer() || t.is_quantized() || t == DataType::Boolean =>
            {
                let values: Vec<i64> = match output_values(name, info, got)? {
                    NpyData::I16(v) => v.into_iter().map(i64::from).collect(),
                    NpyData::I32(v) => v.into_iter().map(i64::from).collect(),
                    NpyData::I64(v) => v,
                    NpyData::Bool(v) | NpyData::U8(v) => v.into_iter().map(i64::from).collect(),
                    NpyData::U16(v) => v.into_iter().map(i64::from).collect(),
                    NpyData::U32(v) => v.into_iter().map(i64::from).collect(),
                    // Beyond i64::MAX the expected data cannot hold it either: kept apart.
                    NpyData::U64(v) => v
                        .into_iter()
                        .map(|x| i64::try_from(x).unwrap_or(-1))
                        .collect(),
                    NpyData::I8(v) => v.into_iter().map(i64::from).collect(),
                    _ => unreachable!("the output is an integer type"),
                };
                if let Some(i) = (0..data.len()).find(|&i| values.get(i) != Some(&data[i])) {
                    return Err(format!(
                        "output {name}[{i}]: {:?}, expected {}",
                        values.get(i),
                        data[i]
                    ));
                }
            }
            (_, t) => return Err(format!("output {name} is {t}, the test expects other data")),
        }
    }
    Ok(worst)
}

/// `Ok(max |got - want|)` when every element is within `ATOL + RTOL * |want|` (NaN matches
/// NaN), else the first element that is not.
pub fn compare(name: &str, got: &[f32], want: &[f32]) -> Result<f32, String> {
    if got.len() != want.len() {
        return Err(format!(
            "output {name}: {} values, expected {}",
            got.len(),
            want.len()
        ));
    }
    let mut worst = 0f32;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if g.is_nan() && w.is_nan() {
            continue;
        }
        let diff = (g - w).abs();
        let close = if g.is_finite() && w.is_finite() {
            diff <= ATOL + RTOL * w.abs()
        } else {
            g == w
        };
        if !close {
            return Err(format!(
                "output {name}[{i}] = {g}, expected {w} (|diff| {diff:.3e} > {ATOL:e} + {RTOL:e} * |expected|)"
            ));
        }
        if diff.is_finite() {
            worst = worst.max(diff);
        }
    }
    Ok(worst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_uses_rtol_and_atol() {
        assert_eq!(compare("y", &[1.0, 0.0], &[1.0, 0.0]), Ok(0.0));
        // 1e-3 relative of 100 is 0.1.
        assert!(compare("y", &[100.09], &[100.0]).is_ok());
        assert!(compare("y", &[100.2], &[100.0]).is_err());
        assert!(compare("y", &[1e-7], &[0.0]).is_ok());
        assert!(compare("y", &[1e-6], &[0.0]).is_err());
        assert!(compare("y", &[f32::NAN], &[f32::NAN]).is_ok());
        assert!(compare("y", &[f32::NAN], &[1.0]).is_err());
        assert!(compare("y", &[1.0], &[f32::NAN]).is_err());
        assert!(compare("y", &[f32::INFINITY], &[f32::INFINITY]).is_ok());
        assert!(compare("y", &[f32::INFINITY], &[f32::NEG_INFINITY]).is_err());
        assert_eq!(
            compare("y", &[1.0], &[1.0, 2.0]).unwrap_err(),
            "output y: 1 values, expected 2"
        );
    }

    #[test]
    fn parameters_are_the_weight_like_inputs() {
        assert_eq!(parameter_inputs("Conv"), &[1, 2]);
        assert_eq!(parameter_inputs("Add"), &[] as &[usize]);
        assert!(RELEVANT_OPS.iter().all(|op| !op.is_empty()));
    }
}
