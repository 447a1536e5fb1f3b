//! `backplane inspect FILE`: everything about one plugin file, without registering it.

use std::{
    ffi::OsStr,
    path::{Path, PathBuf},
};

use backplane_api::{
    ActivationDescriptor, ActivationFunction, ApiVersion, ArgMinMaxDescriptor, ArgMinMaxFunction,
    BatchMatMulDescriptor, BatchNormalizationDescriptor, BinaryOperation, BroadcastToDescriptor,
    ComparisonOperation, ConcatDescriptor, ConstTensor, Convolution2dDescriptor,
    CoordinateTransformation, DataLayout, DataType, DilatedPooling2dDescriptor, FlattenDescriptor,
    FullyConnectedDescriptor, GatherDescriptor, InstanceNormalizationDescriptor, LayerDescriptor,
    LayerKind, LayerNormalizationDescriptor, MeanDescriptor, NearestRounding,
    NormalizationDescriptor, OutputRounding, PadDescriptor, PadMode, PadPair, Padding2d,
    Pooling2dDescriptor, PoolingType, Quantization, ReduceDescriptor, ReduceOperation,
    ReshapeDescriptor, ResizeDescriptor, ResizeMethod, SliceDescriptor, SoftmaxDescriptor, Support,
    TensorInfo, TransposeConvolution2dDescriptor, TransposeDescriptor, UnaryOperation, additions,
    ffi::FaultState,
};
use serde::{Deserialize, Serialize};

use crate::{
    child::{Child, run_child},
    plugins::isolation::Isolation,
    report::{Rejection, capabilities_json},
    sys::loader,
};

/// A small, valid example of a layer of `kind` in data type `dt`: descriptor, input and output
/// tensor infos. `None` for kinds that have no generic example (`PreCompiled`).
pub fn sample_layer(
    kind: LayerKind,
    dt: DataType,
) -> Option<(LayerDescriptor, Vec<TensorInfo>, Vec<TensorInfo>)> {
    // A quantised type's tensors carry parameters (Backend API 1.2); a bias of quantised
    // weights is Signed32 with the product of the input's and the weights' scales.
    let quantized = |info: TensorInfo, scale: f32| {
        let offset = if info.data_type == DataType::QAsymmU8 {
            128
        } else {
            0
        };
        info.with_quantization(Quantization::per_tensor(scale, offset))
    };
    let t = |shape: &[u32]| {
        let info = TensorInfo::new(shape, dt);
        if dt.is_quantized() {
            quantized(info, 0.5)
        } else {
            info
        }
    };
    let c = |shape: &[u32]| t(shape).constant();
    let bias = |shape: &[u32]| {
        if dt.is_quantized() {
            quantized(TensorInfo::new(shape, DataType::Signed32), 0.25).constant()
        } else {
            c(shape)
        }
    };
    let f = |shape: &[u32]| TensorInfo::new(shape, DataType::Float32);
    let q =
        |shape: &[u32], scale: f32| quantized(TensorInfo::new(shape, DataType::QAsymmU8), scale);
    let conv = Convolution2dDescriptor {
        bias_enabled: true,
        ..Convolution2dDescriptor::default()
    };
    Some(match kind {
        LayerKind::Input => (
            LayerDescriptor::Input("input".into()),
            vec![t(&[1, 4])],
            vec![t(&[1, 4])],
        ),
        LayerKind::Output => (
            LayerDescriptor::Output("output".into()),
            vec![t(&[1, 4])],
            vec![t(&[1, 4])],
        ),
        LayerKind::Constant => {
            let info = c(&[4]);
            let data = vec![0u8; info.num_bytes().unwrap_or(0)]
                .into_iter()
                .collect();
            (
                LayerDescriptor::Constant(ConstTensor {
                    info: info.clone(),
                    data,
                }),
                vec![],
                vec![info],
            )
        }
        LayerKind::Convolution2d => (
            LayerDescriptor::Convolution2d(conv),
            vec![t(&[1, 2, 5, 5]), c(&[3, 2, 3, 3]), bias(&[3])],
            vec![t(&[1, 3, 3, 3])],
        ),
        LayerKind::DepthwiseConvolution2d => (
            LayerDescriptor::DepthwiseConvolution2d(conv),
            vec![t(&[1, 2, 5, 5]), c(&[2, 1, 3, 3]), bias(&[2])],
            vec![t(&[1, 2, 3, 3])],
        ),
        LayerKind::FullyConnected => (
            LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
                bias_enabled: true,
                transpose_weights: false,
            }),
            vec![t(&[1, 8]), c(&[8, 4]), bias(&[4])],
            vec![t(&[1, 4])],
        ),
        LayerKind::ElementwiseBinary => (
            LayerDescriptor::ElementwiseBinary(BinaryOperation::Add),
            vec![t(&[2, 3]), t(&[3])],
            vec![t(&[2, 3])],
        ),
        LayerKind::Activation => (
            LayerDescriptor::Activation(ActivationDescriptor {
                function: ActivationFunction::ReLU,
                a: 0.0,
                b: 0.0,
            }),
            vec![t(&[1, 4])],
            vec![t(&[1, 4])],
        ),
        LayerKind::Pooling2d => (
            LayerDescriptor::Pooling2d(Pooling2dDescriptor {
                pool_type: PoolingType::Max,
                padding: Padding2d::default(),
                pool_width: 2,
                pool_height: 2,
                stride_x: 2,
                stride_y: 2,
                rounding: OutputRounding::Floor,
                count_include_pad: false,
                layout: DataLayout::Nchw,
            }),
            vec![t(&[1, 2, 4, 4])],
            vec![t(&[1, 2, 2, 2])],
        ),
        LayerKind::Softmax => (
            LayerDescriptor::Softmax(SoftmaxDescriptor {
                beta: 1.0,
                axis: -1,
            }),
            vec![t(&[1, 4])],
            vec![t(&[1, 4])],
        ),
        LayerKind::Reshape => (
            LayerDescriptor::Reshape(ReshapeDescriptor {
                target_shape: vec![3, 2].into(),
            }),
            vec![t(&[2, 3])],
            vec![t(&[3, 2])],
        ),
        LayerKind::Flatten => (
            LayerDescriptor::Flatten(FlattenDescriptor { axis: 1 }),
            vec![t(&[1, 2, 2, 2])],
            vec![t(&[1, 8])],
        ),
        LayerKind::Concat => (
            LayerDescriptor::Concat(ConcatDescriptor { axis: 1 }),
            vec![t(&[1, 2]), t(&[1, 3])],
            vec![t(&[1, 5])],
        ),
        LayerKind::Transpose => (
            LayerDescriptor::Transpose(TransposeDescriptor {
                permutation: vec![1, 0].into(),
            }),
            vec![t(&[2, 3])],
            vec![t(&[3, 2])],
        ),
        LayerKind::Pad => (
            LayerDescriptor::Pad(PadDescriptor {
                padding: vec![
                    PadPair {
                        before: 0,
                        after: 0,
                    },
                    PadPair {
                        before: 1,
                        after: 1,
                    },
                ]
                .into(),
                value: 0.0,
                mode: PadMode::Constant,
            }),
            vec![t(&[1, 2])],
            vec![t(&[1, 4])],
        ),
        LayerKind::Mean => (
            LayerDescriptor::Mean(MeanDescriptor {
                axes: vec![2, 3].into(),
                keep_dims: true,
            }),
            vec![t(&[1, 2, 4, 4])],
            vec![t(&[1, 2, 1, 1])],
        ),
        LayerKind::BatchNormalization => (
            LayerDescriptor::BatchNormalization(BatchNormalizationDescriptor {
                epsilon: 1e-5,
                layout: DataLayout::Nchw,
            }),
            vec![t(&[1, 2, 3, 3]), c(&[2]), c(&[2]), c(&[2]), c(&[2])],
            vec![t(&[1, 2, 3, 3])],
        ),
        LayerKind::MemCopy => (LayerDescriptor::MemCopy, vec![t(&[4])], vec![t(&[4])]),
        LayerKind::ElementwiseUnary => (
            LayerDescriptor::ElementwiseUnary(UnaryOperation::Abs),
            vec![t(&[2, 3])],
            vec![t(&[2, 3])],
        ),
        LayerKind::Normalization => (
            LayerDescriptor::Normalization(NormalizationDescriptor {
                size: 3,
                alpha: 1e-2,
                beta: 0.75,
                k: 1.0,
            }),
            vec![t(&[1, 4, 3, 3])],
            vec![t(&[1, 4, 3, 3])],
        ),
        LayerKind::BatchMatMul => (
            LayerDescriptor::BatchMatMul(BatchMatMulDescriptor::default()),
            vec![t(&[2, 3, 4]), t(&[4, 5])],
            vec![t(&[2, 3, 5])],
        ),
        LayerKind::Slice => (
            LayerDescriptor::Slice(SliceDescriptor {
                begin: vec![0, 3].into(),
                step: vec![1, -2].into(),
                size: vec![2, 2].into(),
            }),
            vec![t(&[2, 4])],
            vec![t(&[2, 2])],
        ),
        LayerKind::Resize => (
            LayerDescriptor::Resize(ResizeDescriptor {
                method: ResizeMethod::Linear,
                coordinates: CoordinateTransformation::HalfPixel,
                nearest: NearestRounding::RoundPreferFloor,
                height: 6,
                width: 4,
                scale_y: 2.0,
                scale_x: 2.0,
            }),
            vec![t(&[1, 2, 3, 2])],
            vec![t(&[1, 2, 6, 4])],
        ),
        LayerKind::TransposeConvolution2d => (
            LayerDescriptor::TransposeConvolution2d(TransposeConvolution2dDescriptor {
                stride_x: 2,
                stride_y: 2,
                bias_enabled: true,
                ..Default::default()
            }),
            vec![t(&[1, 2, 3, 3]), c(&[2, 3, 2, 2]), c(&[3])],
            vec![t(&[1, 3, 6, 6])],
        ),
        LayerKind::Gather => (
            LayerDescriptor::Gather(GatherDescriptor { axis: 0 }),
            vec![t(&[4, 3]), TensorInfo::new(&[2], DataType::Signed32)],
            vec![t(&[2, 3])],
        ),
        LayerKind::Reduce => (
            LayerDescriptor::Reduce(ReduceDescriptor {
                operation: ReduceOperation::Sum,
                axes: vec![1].into(),
                keep_dims: false,
            }),
            vec![t(&[2, 3])],
            vec![t(&[2])],
        ),
        LayerKind::ArgMinMax => (
            LayerDescriptor::ArgMinMax(ArgMinMaxDescriptor {
                function: ArgMinMaxFunction::Max,
                axis: 1,
                keep_dims: false,
                select_last_index: false,
            }),
            vec![t(&[2, 3])],
            vec![TensorInfo::new(&[2], DataType::Signed32)],
        ),
        LayerKind::LayerNormalization => (
            LayerDescriptor::LayerNormalization(LayerNormalizationDescriptor {
                axis: 1,
                epsilon: 1e-5,
                bias_enabled: true,
            }),
            vec![t(&[2, 4]), c(&[4]), c(&[4])],
            vec![t(&[2, 4])],
        ),
        LayerKind::InstanceNormalization => (
            LayerDescriptor::InstanceNormalization(InstanceNormalizationDescriptor {
                epsilon: 1e-5,
            }),
            vec![t(&[1, 2, 3, 3]), c(&[2]), c(&[2])],
            vec![t(&[1, 2, 3, 3])],
        ),
        LayerKind::Cast => (
            LayerDescriptor::Cast(DataType::Float32),
            vec![t(&[2, 3])],
            vec![TensorInfo::new(&[2, 3], DataType::Float32)],
        ),
        LayerKind::Comparison => (
            LayerDescriptor::Comparison(ComparisonOperation::Less),
            vec![t(&[2, 3]), t(&[3])],
            vec![TensorInfo::new(&[2, 3], DataType::Boolean)],
        ),
        LayerKind::Where => (
            LayerDescriptor::Where,
            vec![
                TensorInfo::new(&[2, 3], DataType::Boolean),
                t(&[2, 3]),
                t(&[3]),
            ],
            vec![t(&[2, 3])],
        ),
        LayerKind::BroadcastTo => (
            LayerDescriptor::BroadcastTo(BroadcastToDescriptor {
                shape: vec![2, 3].into(),
            }),
            vec![t(&[3])],
            vec![t(&[2, 3])],
        ),
        LayerKind::DilatedPooling2d => (
            LayerDescriptor::DilatedPooling2d(DilatedPooling2dDescriptor {
                pooling: Pooling2dDescriptor {
                    pool_type: PoolingType::Max,
                    padding: Padding2d::default(),
                    pool_width: 2,
                    pool_height: 2,
                    stride_x: 1,
                    stride_y: 1,
                    rounding: OutputRounding::Floor,
                    count_include_pad: false,
                    layout: DataLayout::Nchw,
                },
                dilation_x: 2,
                dilation_y: 2,
            }),
            vec![t(&[1, 2, 5, 5])],
            vec![t(&[1, 2, 3, 3])],
        ),
        LayerKind::Quantize => (
            LayerDescriptor::Quantize(DataType::QAsymmU8),
            vec![f(&[1, 4])],
            vec![q(&[1, 4], 0.5)],
        ),
        LayerKind::Dequantize => (
            LayerDescriptor::Dequantize,
            vec![q(&[1, 4], 0.5)],
            vec![f(&[1, 4])],
        ),
        LayerKind::Requantize => (
            LayerDescriptor::Requantize(DataType::QAsymmU8),
            vec![q(&[1, 4], 0.5)],
            vec![q(&[1, 4], 0.25)],
        ),
        LayerKind::NonZero => (
            LayerDescriptor::NonZero,
            vec![t(&[2, 3])],
            vec![TensorInfo::new(&[3, 6], DataType::Signed64)],
        ),
        LayerKind::ScatterElements => (
            LayerDescriptor::ScatterElements(backplane_api::ScatterElementsDescriptor {
                axis: 0,
                reduction: backplane_api::ScatterReduction::None,
            }),
            vec![
                t(&[4, 3]),
                TensorInfo::new(&[2, 3], DataType::Signed32),
                t(&[2, 3]),
            ],
            vec![t(&[4, 3])],
        ),
        LayerKind::ScatterNd => (
            LayerDescriptor::ScatterNd(backplane_api::ScatterReduction::None),
            vec![
                t(&[4, 3]),
                TensorInfo::new(&[2, 1], DataType::Signed32),
                t(&[2, 3]),
            ],
            vec![t(&[4, 3])],
        ),
        LayerKind::NonMaxSuppression => (
            LayerDescriptor::NonMaxSuppression(backplane_api::NonMaxSuppressionDescriptor {
                center_point_box: false,
                max_output_boxes_per_class: 3,
                iou_threshold: 0.5,
                score_threshold: 0.0,
            }),
            vec![t(&[1, 6, 4]), t(&[1, 2, 6])],
            vec![TensorInfo::new(&[4, 6], DataType::Signed64)],
        ),
        LayerKind::RoiAlign => (
            LayerDescriptor::RoiAlign(backplane_api::RoiAlignDescriptor {
                pooling: backplane_api::RoiPooling::Average,
                output_height: 2,
                output_width: 3,
                sampling_ratio: 2,
                spatial_scale: 4.0,
                half_pixel: true,
            }),
            vec![
                t(&[3, 2, 5, 6]),
                t(&[4, 4]),
                TensorInfo::new(&[4], DataType::Signed32),
            ],
            vec![t(&[4, 2, 2, 3])],
        ),
        LayerKind::BitCast => {
            // The integer type of the sample's width.
            let to = match dt.size_in_bytes() {
                1 => DataType::UnsignedInt8,
                2 => DataType::Signed16,
                8 => DataType::Signed64,
                _ => DataType::Signed32,
            };
            (
                LayerDescriptor::BitCast(to),
                vec![t(&[2, 3])],
                vec![TensorInfo::new(&[2, 3], to)],
            )
        }
        LayerKind::Determinant => (
            LayerDescriptor::Determinant,
            vec![t(&[2, 3, 3])],
            vec![t(&[2])],
        ),
        LayerKind::Unique => (
            LayerDescriptor::Unique(backplane_api::UniqueDescriptor {
                flatten: true,
                axis: 0,
                sorted: true,
            }),
            vec![t(&[2, 3])],
            vec![TensorInfo::new(&[4, 6], DataType::Signed64)],
        ),
        LayerKind::DeformableConvolution2d => (
            LayerDescriptor::DeformableConvolution2d(
                backplane_api::DeformableConvolution2dDescriptor {
                    convolution: Convolution2dDescriptor {
                        padding: Padding2d {
                            left: 1,
                            right: 1,
                            top: 1,
                            bottom: 1,
                        },
                        ..Convolution2dDescriptor::default()
                    },
                    offset_groups: 1,
                    mask_enabled: false,
                },
            ),
            vec![t(&[1, 2, 4, 4]), t(&[3, 2, 3, 3]), t(&[1, 18, 4, 4])],
            vec![t(&[1, 3, 4, 4])],
        ),
        LayerKind::Lstm => (
            LayerDescriptor::Lstm(backplane_api::LstmDescriptor {
                hidden_size: 2,
                direction: backplane_api::RecurrentDirection::Forward,
            }),
            vec![
                t(&[3, 1, 4]),
                t(&[1, 8, 4]),
                t(&[1, 8, 2]),
                t(&[1, 16]),
                t(&[1, 1, 2]),
                t(&[1, 1, 2]),
            ],
            vec![t(&[3, 1, 1, 2])],
        ),
        LayerKind::PreCompiled => return None,
    })
}

/// One cell of the layer-support matrix.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SupportCell {
    /// The layer kind.
    pub layer: String,
    /// The data type of every tensor of the sample.
    pub data_type: String,
    /// The backend's answer.
    pub supported: bool,
    /// `true` when the layer is newer than the plugin's Backend API version: the host does not
    /// ask (the answer is the host's refusal, see [`backplane_api::additions`]).
    pub gated: bool,
    /// Its reason when refused (or the call's error).
    pub reason: Option<String>,
}

/// A symbol and whether the file exports it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SymbolReport {
    /// The symbol name.
    pub name: String,
    /// Whether it is one of the three required symbols.
    pub required: bool,
    /// Whether the file exports it.
    pub present: bool,
}

/// Everything `inspect` found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InspectReport {
    /// The file inspected.
    pub file: PathBuf,
    /// Exported Backend API symbols.
    pub symbols: Vec<SymbolReport>,
    /// The backend id, when valid.
    pub backend_id: Option<String>,
    /// The Backend API version it was built against.
    pub version: Option<String>,
    /// The host's Backend API version.
    pub host_version: String,
    /// Whether this host can load it.
    pub compatible: bool,
    /// Vendor metadata, if embedded.
    pub vendor: Option<String>,
    /// Release metadata, if embedded.
    pub release: Option<String>,
    /// The first check that failed (reason code and message).
    pub error: Option<(String, String)>,
    /// Capabilities of a fresh instance.
    pub capabilities: std::collections::BTreeMap<String, serde_json::Value>,
    /// Layer kinds × data types.
    pub layer_support: Vec<SupportCell>,
}

/// Inspects one plugin file (any name) without registering it.
pub fn inspect(path: &Path) -> InspectReport {
    let mut r = InspectReport {
        file: path.to_path_buf(),
        symbols: vec![],
        backend_id: None,
        version: None,
        host_version: ApiVersion::CURRENT.to_string(),
        compatible: false,
        vendor: None,
        release: None,
        error: None,
        capabilities: Default::default(),
        layer_support: vec![],
    };
    let fail = |r: &mut InspectReport, e: Rejection| {
        r.error = Some((e.reason.to_string(), e.message.into_owned()))
    };
    let library = match loader::open(path) {
        Ok(l) => l,
        Err(e) => {
            fail(&mut r, e);
            return r;
        }
    };
    r.symbols = loader::symbol_presence(&library)
        .into_iter()
        .enumerate()
        .map(|(i, (name, present))| SymbolReport {
            name: name.into(),
            required: i < 3,
            present,
        })
        .collect();
    if let Some(m) = loader::metadata(&library) {
        r.vendor = Some(m.vendor);
        r.release = Some(m.release);
    }
    let opened = match loader::probe_library(library, ApiVersion::CURRENT) {
        Ok(o) => o,
        Err(f) => {
            r.backend_id = f.id;
            r.version = f.version.map(|v| v.to_string());
            fail(&mut r, f.rejection);
            return r;
        }
    };
    r.backend_id = Some(opened.factory.id().to_owned());
    r.version = Some(opened.version.to_string());
    r.compatible = true;
    let backend = match opened.factory.create(FaultState::new()) {
        Ok(b) => b,
        Err(e) => {
            fail(&mut r, e);
            return r;
        }
    };
    match backend.capabilities() {
        Ok(c) => r.capabilities = capabilities_json(&c),
        Err(e) => r.error = Some((e.code.to_string(), e.to_string())),
    }
    for kind in LayerKind::ALL {
        for dt in DataType::ALL {
            let Some((desc, ins, outs)) = sample_layer(kind, dt) else {
                continue;
            };
            let (supported, reason) = match backend.is_layer_supported(&desc, &ins, &outs) {
                Ok(Support::Supported) => (true, None),
                Ok(Support::Unsupported(why)) => (false, Some(why.to_string())),
                Err(e) => (false, Some(e.to_string())),
            };
            r.layer_support.push(SupportCell {
                layer: kind.to_string(),
                data_type: dt.to_string(),
                supported,
                gated: additions::gate(backend.api_version(), opened.factory.id(), &desc)
                    .and_then(|()| {
                        additions::gate_tensors(
                            backend.api_version(),
                            opened.factory.id(),
                            ins.iter().chain(&outs),
                        )
                    })
                    .is_err(),
                reason,
            });
        }
    }
    r
}

/// Inspects `path` in a child process, so that a file that crashes, hangs or ends the process
/// while it loads (its constructors, `GetBackendId`, the factory, …) cannot take this process
/// with it. The child is `isolation.program` run as `inspect --in-process --json FILE` (a
/// `backplane` CLI: [`Isolation::current_exe`] or [`Isolation::from_environment`]; the
/// probe's `isolation.args` are not used), killed after `isolation.timeout`.
///
/// # Errors
/// `inspecting FILE: ` and what happened to the child: the signal that killed it, the time
/// limit, an exit before it printed its report, or another exit status, with the end of its
/// stderr. An ordinary rejection (a missing symbol, a wrong version, …) is not an error: it
/// is the report's `error`.
pub fn inspect_isolated(path: &Path, isolation: &Isolation) -> Result<InspectReport, String> {
    inspect_in_child(path, isolation).map_err(|e| format!("inspecting {}: {e}", path.display()))
}

/// [`inspect_isolated`] without the file name in the message.
pub(crate) fn inspect_in_child(
    path: &Path,
    isolation: &Isolation,
) -> Result<InspectReport, String> {
    let child = Child {
        name: "the inspection child",
        // 1: the report has an error (the CLI's status after printing it).
        clean: &[0, 1],
        unfinished: "it printed its report",
    };
    let args = ["inspect", "--in-process", "--json"].map(OsStr::new);
    run_child(
        &isolation.program,
        &[&args[..], &[path.as_os_str()]].concat(),
        isolation.timeout,
        &child,
        |_, stdout| serde_json::from_slice(stdout).ok(),
    )
}

impl InspectReport {
    /// A readable rendering.
    pub fn to_table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let opt = |o: &Option<String>| o.clone().unwrap_or_else(|| "-".into());
        let _ = writeln!(s, "file:        {}", self.file.display());
        let _ = writeln!(s, "backend id:  {}", opt(&self.backend_id));
        let _ = writeln!(
            s,
            "built for:   Backend API {} (host {}): {}",
            opt(&self.version),
            self.host_version,
            if self.compatible {
                "compatible"
            } else {
                "not loadable"
            }
        );
        let _ = writeln!(
            s,
            "vendor:      {}  release: {}",
            opt(&self.vendor),
            opt(&self.release)
        );
        if let Some((code, msg)) = &self.error {
            let _ = writeln!(s, "error:       [{code}] {msg}");
        }
        let _ = writeln!(s, "symbols:");
        for sym in &self.symbols {
            let kind = if sym.required { "required" } else { "optional" };
            let _ = writeln!(
                s,
                "  {:<28} {kind:<9} {}",
                sym.name,
                if sym.present { "present" } else { "absent" }
            );
        }
        let _ = writeln!(s, "capabilities:");
        for (k, v) in &self.capabilities {
            let _ = writeln!(s, "  {k} = {v}");
        }
        if !self.layer_support.is_empty() {
            // One column per data type, as wide as its name (at least "gated").
            let widths: Vec<usize> = DataType::ALL
                .iter()
                .map(|dt| dt.to_string().len().max(5))
                .collect();
            let _ = write!(s, "layer support:\n  {:<24}", "");
            for (dt, w) in DataType::ALL.iter().zip(&widths) {
                let _ = write!(s, " {:<w$}", dt.to_string());
            }
            for row in self.layer_support.chunks(DataType::ALL.len()) {
                let _ = write!(s, "\n  {:<24}", row[0].layer);
                for (cell, w) in row.iter().zip(&widths) {
                    let mark = match (cell.supported, cell.gated) {
                        (_, true) => "gated",
                        (true, false) => "yes",
                        (false, false) => "no",
                    };
                    let _ = write!(s, " {mark:<w$}");
                }
            }
            let _ = writeln!(s);
            if self.layer_support.iter().any(|c| c.gated) {
                let _ = writeln!(
                    s,
                    "gated: newer than the plugin's Backend API; the host never asks it about them"
                );
            }
            let _ = writeln!(s, "refusal reasons (Float32):");
            for cell in self
                .layer_support
                .iter()
                .filter(|c| !c.supported && c.data_type == "Float32")
            {
                let _ = writeln!(
                    s,
                    "  {}: {}",
                    cell.layer,
                    cell.reason.as_deref().unwrap_or("")
                );
            }
        }
        s
    }
}
