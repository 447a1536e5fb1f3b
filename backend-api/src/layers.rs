//! Layer kinds and their descriptors: every layer of Backend API 1.0 (DESIGN §6) and those
//! that later minors appended.
//!
//! Tensor conventions (the same as ONNX's operators of the same name):
//! - `Convolution2d` inputs: `[x, weights, bias?]`; weights `[out_channels, in_channels / groups, kh, kw]`.
//! - `DepthwiseConvolution2d` inputs: `[x, weights, bias?]`; weights `[channels * multiplier, 1, kh, kw]`.
//! - `FullyConnected` inputs: `[x, weights, bias?]`; weights `[in, out]`, or `[out, in]` when
//!   `transpose_weights` is set.
//! - `BatchNormalization` inputs: `[x, scale, bias, mean, variance]`.
//! - `ElementwiseBinary` inputs: `[a, b]` with numpy broadcasting.
//! - `ElementwiseUnary` inputs: `[x]`; the output has its shape.
//! - `Normalization` inputs: `[x]`, 4-D NCHW; the output has its shape.
//! - `BatchMatMul` inputs: `[a, b]`, each of rank 2 or more: `a[..., M, K] · b[..., K, N]` with
//!   numpy broadcasting of the leading (batch) dimensions.
//! - `Slice` inputs: `[x]`; the output's shape is the descriptor's `size`.
//! - `Resize` inputs: `[x]`, 4-D NCHW; the output is `[N, C, height, width]`.
//! - `TransposeConvolution2d` inputs: `[x, weights, bias?]`; weights
//!   `[in_channels, out_channels / groups, kh, kw]` (ONNX `ConvTranspose`).
//!
//! Kinds, variants and descriptors added after 1.0 are listed in [`crate::additions`].
//!
//! # Quantised tensors (Backend API 1.2)
//!
//! A tensor of type `QAsymmU8`, `QAsymmS8` or `QSymmS8` carries its [`Quantization`]
//! (`real = scale * (q - offset)`) in its [`TensorInfo`](crate::TensorInfo), wherever its shape
//! and type go: support queries, `optimize_subgraph` and workload creation. A layer's output
//! info carries the output's parameters (the network gives them; they are not inferred). The
//! conventions, the same as ONNX's `QLinear*` operators and onnxruntime's kernels:
//! - Activations are `QAsymmU8` or `QAsymmS8`, per tensor. Weights are `QSymmS8` or `QAsymmS8`/
//!   `QAsymmU8`, per tensor or per output channel (axis 0 of `Convolution2d`'s and
//!   `DepthwiseConvolution2d`'s weights, the output axis of `FullyConnected`'s and of
//!   `BatchMatMul`'s constant `b`). A bias is `Signed32` with quantisation
//!   `scale = input scale * weight scale` (per channel when the weights are) and offset 0.
//! - Convolutions, `FullyConnected` and `BatchMatMul` accumulate
//!   `acc = bias + sum((x - x_offset) * (w - w_offset))` exactly in 32 bits, then
//!   `y = saturate(round_half_even(acc as f32 * m) + y_offset)` with
//!   `m = (x_scale * w_scale[c]) / y_scale` computed in f32 in that order.
//! - `ElementwiseBinary` `Add` follows onnxruntime's `QLinearAdd` kernel, not a literal
//!   dequantise-add-quantise (the two differ in the last step for a few percent of inputs):
//!   with `ra = a_scale / y_scale`, `rb = b_scale / y_scale` and
//!   `k = y_offset - (ra * a_offset + rb * b_offset)` in f32,
//!   `y = saturate(round_half_even(fma(a, ra, fma(b, rb, k))))` (an operand broadcast as
//!   one value is folded into `k` first); `Mul` likewise follows `QLinearMul` (CpuRef's
//!   `workloads/quantized/binary.rs` gives every form step by step).
//! - Other layers (`Activation`, `Pooling2d` `Average`, `Mean`, `Concat` with differing
//!   input parameters, `Resize` bilinear) compute
//!   on the dequantised values in f32 and quantise the result with the output's parameters
//!   (round half to even, saturate); `Softmax` reads a 256-entry table of exponentials and
//!   scales by `floor(1 / y_scale)` as onnxruntime's `QLinearSoftmax` does (CpuRef's
//!   `workloads/quantized/softmax.rs` documents it step by step); data movement (`Reshape`,
//!   `Flatten`, `Transpose`, `Slice`, `Gather`, `Concat` of equal parameters, `Pooling2d` and
//!   `DilatedPooling2d` `Max`, `Resize` nearest) keeps
//!   the input's parameters and its bytes.
//! - `Activation` on a quantised tensor is ReLU or a clamp (`BoundedReLU`), Sigmoid or
//!   HardSwish: each quantises its f32 result.
//! - Dynamic quantisation (ONNX `DynamicQuantizeLinear` + `MatMulInteger`, what onnxruntime's
//!   `quantize_dynamic` writes): a `FullyConnected` or `BatchMatMul` whose first input is
//!   Float32, whose weights (`b`) are a quantised constant (per tensor, or per output column)
//!   and whose output is Float32 quantises its input per call, as `DynamicQuantizeLinear`
//!   defines: `lo = min(0, min x)`, `hi = max(0, max x)`, `s = (hi - lo) / 255` (f32),
//!   `zp = saturate_u8(round_half_even(0 - lo / s))`,
//!   `q = saturate_u8(round_half_even(x / s) + zp)` (all of `x`, every batch, shares `s` and
//!   `zp`; when `x` is all zeros, `s = 1` and `zp = 0`, as onnxruntime has it), accumulates `acc = sum((q - zp) * (w - w_offset))` in i32 and gives
//!   `y = (acc as f32) * (s * w_scale[c])`, the product of the scales in f32. A bias input,
//!   if any, is Float32 and added after, in f32.
//! - Dynamically quantised `Convolution2d` (Backend API 1.5; ONNX `DynamicQuantizeLinear` +
//!   `ConvInteger`): a Float32 input, quantised constant weights (per tensor, or per output
//!   channel: axis 0) and a Float32 output, with one group. The input is quantised per call as
//!   above and `acc = sum((q - zp) * (w - w_offset))` over the taps inside the input (a
//!   padding tap adds 0), in i32. A bias input, if any, is Float32 `[out_channels]` and enters
//!   the accumulator, as onnxruntime's older `quantize_dynamic` writes a `ConvInteger`'s bias:
//!   with `m[c] = s * w_scale[c]` (f32), `acc += saturate_i32(floor(bias[c] / m[c]))` (the
//!   division in f32, the sum wrapping), then `y = (acc as f32) * m[c]`. (A bias added after
//!   the scaling, as newer quantizers write it, is a separate `Add`.) A plugin older than 1.5
//!   is never asked about this form ([`crate::additions::gate_form`]).

use std::fmt;

use abi_stable::{
    StableAbi,
    std_types::{RString, RVec},
};

#[cfg(doc)]
use crate::Quantization;
use crate::{ConstTensor, DataLayout, DataType};

/// The kind of a layer, without its parameters.
#[repr(u8)]
#[derive(
    StableAbi,
    serde::Serialize,
    serde::Deserialize,
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
)]
pub enum LayerKind {
    /// A network input.
    Input,
    /// A network output.
    Output,
    /// A constant tensor.
    Constant,
    /// 2-D convolution (optionally grouped).
    Convolution2d,
    /// 2-D depthwise convolution.
    DepthwiseConvolution2d,
    /// Fully connected (matrix multiply plus optional bias).
    FullyConnected,
    /// Element-wise binary operation with broadcasting.
    ElementwiseBinary,
    /// Element-wise activation function.
    Activation,
    /// 2-D max or average pooling.
    Pooling2d,
    /// Softmax along one axis.
    Softmax,
    /// Reshape to a fixed shape.
    Reshape,
    /// Flatten to 2-D at an axis.
    Flatten,
    /// Concatenation along an axis.
    Concat,
    /// Permutation of dimensions.
    Transpose,
    /// Padding.
    Pad,
    /// Mean over axes (GlobalAveragePool is a Mean over H and W).
    Mean,
    /// Batch normalisation (inference form).
    BatchNormalization,
    /// A copy between backends that cannot share memory (inserted by the optimizer).
    MemCopy,
    /// A backend-specific layer produced by `optimize_subgraph` (for example a fused one).
    PreCompiled,
    /// Element-wise unary operation (Backend API 1.1).
    ElementwiseUnary,
    /// Local response normalisation across channels (ONNX `LRN`; Backend API 1.1).
    Normalization,
    /// Matrix products over broadcast batch dimensions (ONNX `MatMul`; Backend API 1.1).
    BatchMatMul,
    /// A strided box of a tensor (ONNX `Slice`; Backend API 1.1).
    Slice,
    /// Spatial resizing, nearest or bilinear (ONNX `Resize`; Backend API 1.1).
    Resize,
    /// Transposed ("de-") convolution (ONNX `ConvTranspose`; Backend API 1.1).
    TransposeConvolution2d,
    /// Gathers slices of a tensor along one axis by Signed32 indices, or Signed64 from 1.5
    /// (ONNX `Gather`; Backend API 1.1).
    Gather,
    /// Sum, maximum, minimum, mean or product over axes (ONNX `Reduce*`; Backend API 1.1).
    Reduce,
    /// Index of the smallest or largest element along an axis, as Signed32 (ONNX
    /// `ArgMin`/`ArgMax`; Backend API 1.1).
    ArgMinMax,
    /// Normalisation over the trailing dimensions, then scale and bias (ONNX
    /// `LayerNormalization`; Backend API 1.1).
    LayerNormalization,
    /// Normalisation of each channel of each batch item over its spatial dimensions (ONNX
    /// `InstanceNormalization`; Backend API 1.1).
    InstanceNormalization,
    /// Conversion between data types (ONNX `Cast`; Backend API 1.1).
    Cast,
    /// Element-wise comparison with broadcasting, giving Boolean (ONNX `Equal`, `Less`, ...;
    /// Backend API 1.1).
    Comparison,
    /// Element-wise selection `condition ? a : b` with broadcasting (ONNX `Where`; Backend API
    /// 1.1).
    Where,
    /// A tensor repeated along broadcast dimensions (ONNX `Expand`; Backend API 1.1).
    BroadcastTo,
    /// 2-D max or average pooling over dilated windows (ONNX `MaxPool`/`AveragePool` with
    /// `dilations`; Backend API 1.1).
    DilatedPooling2d,
    /// Float32 to a quantised type (ONNX `QuantizeLinear`; Backend API 1.2).
    Quantize,
    /// A quantised type to Float32 (ONNX `DequantizeLinear`; Backend API 1.2).
    Dequantize,
    /// A quantised tensor to other quantisation parameters (Backend API 1.2).
    Requantize,
    /// The indices of the non-zero elements, with their count (ONNX `NonZero`; Backend API
    /// 1.5): an output whose extent is known only after it ran.
    NonZero,
    /// `data` with elements replaced (or combined) at the positions an index tensor gives
    /// along one axis (ONNX `ScatterElements`; Backend API 1.5).
    ScatterElements,
    /// `data` with slices replaced (or combined) at the index tuples an index tensor gives
    /// (ONNX `ScatterND`; Backend API 1.5).
    ScatterNd,
    /// The boxes greedy non-maximum suppression keeps, per batch and class, with their count
    /// (ONNX `NonMaxSuppression`; Backend API 1.5): an output whose extent is known only after
    /// it ran.
    NonMaxSuppression,
    /// Each region of interest pooled to a fixed size by bilinear sampling (ONNX `RoiAlign`;
    /// Backend API 1.5).
    RoiAlign,
    /// The same bytes read as another type of the same width (ONNX `BitCast`; Backend API
    /// 1.5).
    BitCast,
    /// The determinant of each square matrix in the last two dimensions (ONNX `Det`; Backend
    /// API 1.5).
    Determinant,
    /// The distinct elements (or slices) of a tensor, with their first positions, the
    /// position of each element among them, and their counts (ONNX `Unique`; Backend API 1.5):
    /// an output whose extent is known only after it ran.
    Unique,
    /// A convolution whose taps sample the input at learned offsets (ONNX `DeformConv`;
    /// Backend API 1.5).
    DeformableConvolution2d,
    /// A long short-term memory over a sequence (ONNX `LSTM` with its default activations;
    /// Backend API 1.5).
    Lstm,
}

impl LayerKind {
    /// Every layer kind, in discriminant order (see [`crate::additions`] for the minor that
    /// introduced each).
    pub const ALL: [LayerKind; 48] = [
        LayerKind::Input,
        LayerKind::Output,
        LayerKind::Constant,
        LayerKind::Convolution2d,
        LayerKind::DepthwiseConvolution2d,
        LayerKind::FullyConnected,
        LayerKind::ElementwiseBinary,
        LayerKind::Activation,
        LayerKind::Pooling2d,
        LayerKind::Softmax,
        LayerKind::Reshape,
        LayerKind::Flatten,
        LayerKind::Concat,
        LayerKind::Transpose,
        LayerKind::Pad,
        LayerKind::Mean,
        LayerKind::BatchNormalization,
        LayerKind::MemCopy,
        LayerKind::PreCompiled,
        LayerKind::ElementwiseUnary,
        LayerKind::Normalization,
        LayerKind::BatchMatMul,
        LayerKind::Slice,
        LayerKind::Resize,
        LayerKind::TransposeConvolution2d,
        LayerKind::Gather,
        LayerKind::Reduce,
        LayerKind::ArgMinMax,
        LayerKind::LayerNormalization,
        LayerKind::InstanceNormalization,
        LayerKind::Cast,
        LayerKind::Comparison,
        LayerKind::Where,
        LayerKind::BroadcastTo,
        LayerKind::DilatedPooling2d,
        LayerKind::Quantize,
        LayerKind::Dequantize,
        LayerKind::Requantize,
        LayerKind::NonZero,
        LayerKind::ScatterElements,
        LayerKind::ScatterNd,
        LayerKind::NonMaxSuppression,
        LayerKind::RoiAlign,
        LayerKind::BitCast,
        LayerKind::Determinant,
        LayerKind::Unique,
        LayerKind::DeformableConvolution2d,
        LayerKind::Lstm,
    ];
}

impl fmt::Display for LayerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Parameters of `Normalization` (Backend API 1.1): local response normalisation across the
/// channels of an NCHW tensor, with ONNX `LRN`'s definition. For channel `c`, with
/// `lo = max(0, c - (size - 1) / 2)` and `hi = min(C - 1, c + size / 2)` (integer division),
/// `y = x / (k + alpha / size * sum(x[lo..=hi]^2)) ^ beta`.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct NormalizationDescriptor {
    /// The number of channels summed over (odd in practice; at least 1).
    pub size: u32,
    /// Scale of the sum (divided by `size`).
    pub alpha: f32,
    /// Exponent.
    pub beta: f32,
    /// Offset (ONNX `bias`).
    pub k: f32,
}

/// Parameters of `BatchMatMul` (Backend API 1.1). Each input has rank 2 or more; its last two
/// dimensions are a matrix and the others are batch dimensions, broadcast as numpy does. With
/// no transpose, `a` is `[..., M, K]`, `b` is `[..., K, N]` and the output is
/// `[broadcast batch..., M, N]`: `out[..., i, j] = sum over k of a[..., i, k] * b[..., k, j]`,
/// summed in order of `k`.
#[repr(C)]
#[derive(
    StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default,
)]
pub struct BatchMatMulDescriptor {
    /// `a`'s matrices are transposed first (`a` is `[..., K, M]`).
    pub transpose_a: bool,
    /// `b`'s matrices are transposed first (`b` is `[..., N, K]`).
    pub transpose_b: bool,
}

/// Parameters of `Slice` (Backend API 1.1): per dimension of the input, the first index, the
/// step between taken indices (negative walks backwards) and how many are taken. Output index
/// `i` of dimension `d` reads input index `begin[d] + i * step[d]`; every index read lies in the
/// input (checked by `shapes`). ONNX's `starts`/`ends`/`axes`/`steps` resolve to this form once
/// the input shape is known.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SliceDescriptor {
    /// First index per dimension.
    pub begin: RVec<u32>,
    /// Step per dimension (never 0).
    pub step: RVec<i32>,
    /// Indices taken per dimension: the output's shape.
    pub size: RVec<u32>,
}

/// How `Resize` computes values (Backend API 1.1).
#[repr(u8)]
#[derive(
    StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash,
)]
pub enum ResizeMethod {
    /// The nearest input element, chosen by [`NearestRounding`].
    Nearest,
    /// Bilinear interpolation of the four neighbours (the source coordinate clamped to the
    /// input).
    Linear,
}

/// How an output coordinate maps to an input coordinate in `Resize` (ONNX's
/// `coordinate_transformation_mode`); `scale` is the descriptor's scale for that axis.
#[repr(u8)]
#[derive(
    StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash,
)]
pub enum CoordinateTransformation {
    /// `(x + 0.5) / scale - 0.5`.
    HalfPixel,
    /// `x / scale`.
    Asymmetric,
    /// `x * (in - 1) / (out - 1)`, 0 when `out` is 1.
    AlignCorners,
    /// As `HalfPixel`, but 0 when `out` is 1.
    PytorchHalfPixel,
}

/// How `Resize`'s `Nearest` method rounds a source coordinate (ONNX's `nearest_mode`).
#[repr(u8)]
#[derive(
    StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash,
)]
pub enum NearestRounding {
    /// To the nearest integer, halves down.
    RoundPreferFloor,
    /// To the nearest integer, halves up.
    RoundPreferCeil,
    /// Down.
    Floor,
    /// Up.
    Ceil,
}

/// Parameters of `Resize` (Backend API 1.1): the height and width of an NCHW tensor resized to
/// `height` × `width`; `scale_y`/`scale_x` enter the coordinate transformation (ONNX: the
/// `scales` input when given, else output size / input size).
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct ResizeDescriptor {
    /// Nearest or linear.
    pub method: ResizeMethod,
    /// Output coordinate → input coordinate.
    pub coordinates: CoordinateTransformation,
    /// Rounding of `Nearest`.
    pub nearest: NearestRounding,
    /// Output height.
    pub height: u32,
    /// Output width.
    pub width: u32,
    /// Vertical scale.
    pub scale_y: f32,
    /// Horizontal scale.
    pub scale_x: f32,
}

/// Parameters of `TransposeConvolution2d` (Backend API 1.1), with ONNX `ConvTranspose`'s
/// meaning: input pixel `(y, x)` adds `w[ky, kx] * x` to output pixel
/// `(y * stride_y - top + ky * dilation_y, x * stride_x - left + kx * dilation_x)`. The output is
/// `(in - 1) * stride - (begin + end padding) + dilation * (k - 1) + output_padding + 1` per axis.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
pub struct TransposeConvolution2dDescriptor {
    /// Padding taken off the output's borders.
    pub padding: Padding2d,
    /// Horizontal stride.
    pub stride_x: u32,
    /// Vertical stride.
    pub stride_y: u32,
    /// Horizontal dilation (1 = none).
    pub dilation_x: u32,
    /// Vertical dilation (1 = none).
    pub dilation_y: u32,
    /// Groups.
    pub groups: u32,
    /// Extra columns at the right of the output.
    pub output_padding_x: u32,
    /// Extra rows at the bottom of the output.
    pub output_padding_y: u32,
    /// Whether a bias (`[out_channels]`) is the third input.
    pub bias_enabled: bool,
}

impl Default for TransposeConvolution2dDescriptor {
    /// Stride and dilation 1, one group, no padding or output padding, no bias (as
    /// [`Convolution2dDescriptor`]'s default).
    fn default() -> Self {
        Self {
            padding: Padding2d::default(),
            stride_x: 1,
            stride_y: 1,
            dilation_x: 1,
            dilation_y: 1,
            groups: 1,
            output_padding_x: 0,
            output_padding_y: 0,
            bias_enabled: false,
        }
    }
}

/// Parameters of `Gather` (Backend API 1.1), ONNX `Gather`. Inputs `[data, indices]`,
/// `indices` Signed32 (or, from Backend API 1.5, Signed64) of any shape; the output is `data.shape[..axis] ++ indices.shape ++
/// data.shape[axis + 1..]` of `data`'s type, and `out[i.., j.., k..] = data[i.., indices[j..],
/// k..]`. A negative index counts from the end; an index outside `[-d, d)` (`d` =
/// `data.shape[axis]`) fails the execution.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatherDescriptor {
    /// The axis of `data` that the indices select along.
    pub axis: u32,
}

/// How a scatter layer combines an update with the element it lands on (Backend API 1.5;
/// ONNX's `reduction`).
#[repr(u8)]
#[derive(
    StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash,
)]
pub enum ScatterReduction {
    /// The update replaces the element; with two updates for one element, the later one (in
    /// the updates' row-major order) wins.
    None,
    /// `element + update`.
    Add,
    /// `element * update`.
    Mul,
    /// `max(element, update)`.
    Max,
    /// `min(element, update)`.
    Min,
}

/// Parameters of `ScatterElements` (Backend API 1.5). Inputs `data`, `indices` (Signed32 or
/// Signed64) and `updates` of one rank, `indices` and `updates` of one shape, no dimension of
/// it longer than `data`'s except along `axis`; the output is `data`'s shape and type. The
/// output starts as `data`; then, for each position `p` of `updates` in row-major order, the
/// element at `p` with its `axis` coordinate replaced by `indices[p]` is combined with
/// `updates[p]` by `reduction`. A negative index counts from the end; one outside `[-d, d)`
/// fails the execution.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScatterElementsDescriptor {
    /// The axis the indices select along.
    pub axis: u32,
    /// How an update is combined with its element.
    pub reduction: ScatterReduction,
}

/// Parameters of `NonMaxSuppression` (Backend API 1.5; ONNX `NonMaxSuppression`, its three
/// scalar inputs given here as values). Inputs `boxes` (Float32 `[batches, n, 4]`) and
/// `scores` (Float32 `[batches, classes, n]`). For each batch, then each class: the boxes
/// whose score is greater than `score_threshold` (a NaN score never is), by score descending
/// (equal scores by index ascending), are taken in turn; a box is kept unless its
/// intersection over union with a box already kept in its class is greater than
/// `iou_threshold`, until `max_output_boxes_per_class` are kept. The IoU of two boxes is 0
/// when either has no area or they do not overlap (a box's corners may come in either
/// order). The output is Signed64 `[4, m]`, `m = batches * classes * min(max, n)`: row 0
/// holds the count `k` of kept boxes in column 0 (0 elsewhere); rows 1, 2 and 3 hold, in
/// columns `0..k`, the batch, class and box index of each kept box in the order above (ONNX's
/// `[k, 3]` result, transposed), and 0 in columns `k..m`. As for `NonZero`, the host sizes
/// the output for the largest result and reads the count after the run.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct NonMaxSuppressionDescriptor {
    /// `false`: a box is `[y1, x1, y2, x2]`, two opposite corners; `true`: `[x_center,
    /// y_center, width, height]`.
    pub center_point_box: bool,
    /// The most boxes kept per batch and class (at least 1).
    pub max_output_boxes_per_class: u32,
    /// A box overlapping a kept one by more than this IoU is suppressed.
    pub iou_threshold: f32,
    /// Only boxes scoring more than this are candidates (`-inf`: every box but NaN scores).
    pub score_threshold: f32,
}

/// Parameters of `DeformableConvolution2d` (Backend API 1.5; ONNX `DeformConv`, 2-D). Inputs
/// `x` (Float32 or Float64 `[n, c, h, w]`, NCHW), `weights` (`[m, c / groups, kh, kw]`),
/// `offset` (`[n, offset_groups * 2 * kh * kw, oh, ow]`), then `bias` (`[m]`) when
/// `convolution.bias_enabled` and `mask` (`[n, offset_groups * kh * kw, oh, ow]`) when
/// `mask_enabled`, all of `x`'s type; `(oh, ow)` must be the convolution's output size. The
/// output `y[n, o, i, j]` is the bias plus, over the input channels `c` of `o`'s group and the
/// taps `(ky, kx)`, `weights[o, c, ky, kx] * mask[n, g, ky, kx, i, j] * x_n,c(py, px)` where
/// `g` is `c`'s offset group (`c / (channels / offset_groups)`), `py = i * stride_y - top +
/// ky * dilation_y + offset[n, g, ky, kx, 0, i, j]` and `px` likewise with the offset's `1`
/// entry (the offset channel is `((g * kh + ky) * kw + kx) * 2 + {0, 1}`, the mask's
/// `(g * kh + ky) * kw + kx`), and `x_n,c(py, px)` is the bilinear interpolation of the four
/// nearest elements, each outside the plane counting as 0.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
pub struct DeformableConvolution2dDescriptor {
    /// Padding (its top and left place the taps; the output size checks all four), strides,
    /// dilations, groups and bias, as a convolution's; the layout must be NCHW.
    pub convolution: Convolution2dDescriptor,
    /// The groups of input channels that share one set of offsets (and of mask values).
    pub offset_groups: u32,
    /// Whether a mask is the last input.
    pub mask_enabled: bool,
}

/// The directions an [`LstmDescriptor`] runs its sequence in.
#[repr(u8)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecurrentDirection {
    /// First step to last.
    Forward,
    /// Last step to first.
    Reverse,
    /// Both: direction 0 forward, direction 1 reverse.
    Bidirectional,
}

impl RecurrentDirection {
    /// How many directions run (1 or 2).
    pub fn count(self) -> usize {
        match self {
            RecurrentDirection::Bidirectional => 2,
            _ => 1,
        }
    }
}

/// Parameters of `Lstm` (Backend API 1.5; ONNX `LSTM` with `layout` 0, its default
/// activations, no `clip`, no peepholes, `input_forget` 0 and every sequence its full
/// length). Six inputs of one float type (Float32 or Float64), `D` the number of directions
/// and `H` `hidden_size`: `x` `[seq, batch, input]`, `w` `[D, 4H, input]`, `r` `[D, 4H, H]`
/// (the gates in ONNX's order `i, o, f, c`), `b` `[D, 8H]` (`Wb` then `Rb`), `initial_h` and
/// `initial_c` `[D, batch, H]`. One output, `y` `[seq, D, batch, H]`: every step's `h` (ONNX's
/// `Y_h` is a slice of it; its `Y_c` is not an output here). Direction `d` runs its steps in its
/// order (forward, or the reverse direction from the last), each
/// `g = x_t · w[d]ᵀ + h · r[d]ᵀ + Wb[d] + Rb[d]`, `i = σ(g_i)`, `o = σ(g_o)`, `f = σ(g_f)`,
/// `c̃ = tanh(g_c)`, `c = f ⊙ c + i ⊙ c̃`, `h = o ⊙ tanh(c)`, starting from
/// `initial_h[d]`, `initial_c[d]`; `y[t, d]` is its `h` after step `t`.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct LstmDescriptor {
    /// `H`, the hidden size.
    pub hidden_size: u32,
    /// The directions.
    pub direction: RecurrentDirection,
}

/// Parameters of `Unique` (Backend API 1.5; ONNX `Unique`). One input `x` of any plain type
/// and rank `r >= 1`. The items compared are its `n` elements in row-major order (`flatten`),
/// or its `n = x.shape[axis]` slices along `axis` (each compared element by element). Two
/// items are equal when every element is (floats by value: -0 equals +0, a NaN equals
/// nothing, so each NaN is distinct); `sorted` orders the distinct items ascending (slices
/// lexicographically, a NaN after every number), else by first occurrence. The output is
/// Signed64 `[4, n]` in the counted layout `NonZero` set: row 0 holds the count `k` of
/// distinct items in column 0; row 1, in columns `0..k`, the position of each distinct item's
/// first occurrence; row 2, in all `n` columns, the index among the distinct items of each
/// item of `x`; row 3, in columns `0..k`, how many times each occurs; zeros elsewhere. The
/// distinct items themselves are `x` gathered at row 1 (along `axis`, or of `x` flattened).
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct UniqueDescriptor {
    /// Whether the items are `x`'s elements (`axis` ignored).
    pub flatten: bool,
    /// The axis whose slices are the items, when not `flatten`.
    pub axis: u32,
    /// Ascending order, else order of first occurrence.
    pub sorted: bool,
}

/// How `RoiAlign` pools the samples of an output element (Backend API 1.5).
#[repr(u8)]
#[derive(
    StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash,
)]
pub enum RoiPooling {
    /// The mean of the bilinearly interpolated samples.
    Average,
    /// The largest of the weighted corner values over all samples: for each sample, the
    /// four corners' values each times its bilinear weight, and the maximum of all those
    /// products (ONNX's definition, which onnxruntime follows; not the maximum of the
    /// interpolated values).
    Max,
}

/// Parameters of `RoiAlign` (Backend API 1.5; ONNX `RoiAlign`). Inputs `x` (Float32 or
/// Float64 `[n, c, h, w]`), `rois` (the same type, `[r, 4]`: `x1, y1, x2, y2` in the input
/// image's coordinates) and `batch_indices` (Signed64 or Signed32 `[r]`, each in `[0, n)`,
/// else the execution fails). The output is `x`'s type, `[r, c, output_height,
/// output_width]`. Each region is scaled by `spatial_scale` (and shifted by -0.5 when
/// `half_pixel`; without it a region narrower than 1 is widened to 1) and cut into
/// `output_height x output_width` bins; each bin is sampled on a `gh x gw` grid of points at
/// the centres of equal sub-bins (`gh = sampling_ratio`, or `ceil(bin height)` when
/// `sampling_ratio` is 0; likewise `gw`). A sample outside `[-1, h] x [-1, w]` counts as 0;
/// inside, its coordinates are clamped to at least 0 and it is interpolated bilinearly from
/// the four nearest elements (an edge element repeated). `pooling` combines the samples.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct RoiAlignDescriptor {
    /// How a bin's samples are combined.
    pub pooling: RoiPooling,
    /// Output rows per region (at least 1).
    pub output_height: u32,
    /// Output columns per region (at least 1).
    pub output_width: u32,
    /// Sample points per bin along each axis; 0: adaptive (`ceil` of the bin's extent).
    pub sampling_ratio: u32,
    /// The factor from `rois`' coordinates to the input's.
    pub spatial_scale: f32,
    /// ONNX's `coordinate_transformation_mode = half_pixel` (opset 16's default): regions are
    /// shifted by -0.5 and not widened; `false`: `output_half_pixel`.
    pub half_pixel: bool,
}

/// The reduction of a `Reduce` layer (Backend API 1.1).
#[repr(u8)]
#[derive(
    StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash,
)]
pub enum ReduceOperation {
    /// Sum (0 over no elements).
    Sum,
    /// Largest element (NaN if any is NaN; -inf over no elements).
    Max,
    /// Smallest element (NaN if any is NaN; +inf over no elements).
    Min,
    /// Arithmetic mean (NaN over no elements).
    Mean,
    /// Product (1 over no elements).
    Prod,
}

impl ReduceOperation {
    /// Every reduction, in discriminant order.
    pub const ALL: [ReduceOperation; 5] = [
        ReduceOperation::Sum,
        ReduceOperation::Max,
        ReduceOperation::Min,
        ReduceOperation::Mean,
        ReduceOperation::Prod,
    ];
}

/// Parameters of `Reduce` (Backend API 1.1): the operation over `axes` of the one input (Float32).
/// The output drops the reduced dimensions, or keeps them as 1 with `keep_dims`.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ReduceDescriptor {
    /// The reduction.
    pub operation: ReduceOperation,
    /// The axes reduced: distinct, each below the input's rank (none: the output is the input).
    pub axes: RVec<u32>,
    /// Reduced dimensions stay, with size 1.
    pub keep_dims: bool,
}

/// Which index `ArgMinMax` finds (Backend API 1.1).
#[repr(u8)]
#[derive(
    StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash,
)]
pub enum ArgMinMaxFunction {
    /// The smallest element's.
    Min,
    /// The largest element's.
    Max,
}

/// Parameters of `ArgMinMax` (Backend API 1.1): along `axis` of the one Float32 input, the
/// index of the smallest or largest element as Signed32, the first one found among equals
/// (the last with `select_last_index`); a NaN counts as larger than everything for `Max` and
/// smaller for `Min`, as onnxruntime does. The output drops `axis`, or keeps it as 1.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgMinMaxDescriptor {
    /// Smallest or largest.
    pub function: ArgMinMaxFunction,
    /// The axis searched (its size must be at least 1).
    pub axis: u32,
    /// The searched dimension stays, with size 1.
    pub keep_dims: bool,
    /// Among equal elements, the last index instead of the first.
    pub select_last_index: bool,
}

/// Parameters of `LayerNormalization` (Backend API 1.1), ONNX `LayerNormalization`. Inputs
/// `[x, scale, bias?]` (Float32); `scale` and `bias` have the shape `x.shape[axis..]`. Each
/// group of elements that share their indices before `axis` is normalised:
/// `y = (x - mean) / sqrt(variance + epsilon) * scale + bias`, with the mean and the (biased)
/// variance over the group.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct LayerNormalizationDescriptor {
    /// The first normalised axis (below the input's rank).
    pub axis: u32,
    /// Added to the variance.
    pub epsilon: f32,
    /// A third input holds the bias.
    pub bias_enabled: bool,
}

/// Parameters of `InstanceNormalization` (Backend API 1.1), ONNX `InstanceNormalization`.
/// Inputs `[x, scale, bias]` (Float32): `x` is `[N, C, ...]` of rank 3 or more, `scale` and
/// `bias` are `[C]`; each `x[n, c]` is normalised over its remaining dimensions as
/// `LayerNormalization` does, then scaled by `scale[c]` and shifted by `bias[c]`.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct InstanceNormalizationDescriptor {
    /// Added to the variance.
    pub epsilon: f32,
}

/// The comparison of a `Comparison` layer (Backend API 1.1); NaN compares unequal to
/// everything, as IEEE 754 says.
#[repr(u8)]
#[derive(
    StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash,
)]
pub enum ComparisonOperation {
    /// `a == b`.
    Equal,
    /// `a > b`.
    Greater,
    /// `a >= b`.
    GreaterOrEqual,
    /// `a < b`.
    Less,
    /// `a <= b`.
    LessOrEqual,
    /// `a != b`.
    NotEqual,
}

impl ComparisonOperation {
    /// Every comparison, in discriminant order.
    pub const ALL: [ComparisonOperation; 6] = [
        ComparisonOperation::Equal,
        ComparisonOperation::Greater,
        ComparisonOperation::GreaterOrEqual,
        ComparisonOperation::Less,
        ComparisonOperation::LessOrEqual,
        ComparisonOperation::NotEqual,
    ];

    /// The comparison of `a` and `b`.
    pub fn compare<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            ComparisonOperation::Equal => a == b,
            ComparisonOperation::Greater => a > b,
            ComparisonOperation::GreaterOrEqual => a >= b,
            ComparisonOperation::Less => a < b,
            ComparisonOperation::LessOrEqual => a <= b,
            ComparisonOperation::NotEqual => a != b,
        }
    }
}

/// Parameters of `DilatedPooling2d` (Backend API 1.1): a [`Pooling2dDescriptor`] whose
/// window cells are `dilation` apart, as ONNX `MaxPool` and `AveragePool` with `dilations`.
/// Along an axis, output `o`'s window holds the cells `o * stride - pad_begin + j * dilation`
/// for `j` in `0..pool_size`; the output size is that of a window of `(pool_size - 1) *
/// dilation + 1` cells; each padding must be smaller than that extent. Cells outside the
/// input take no part in a maximum; an average divides by the window's cells inside the input,
/// or, with `count_include_pad`, inside the padded input.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
pub struct DilatedPooling2dDescriptor {
    /// Everything but the dilation.
    pub pooling: Pooling2dDescriptor,
    /// Distance between horizontally adjacent window cells (at least 1).
    pub dilation_x: u32,
    /// Distance between vertically adjacent window cells (at least 1).
    pub dilation_y: u32,
}

/// Parameters of `BroadcastTo` (Backend API 1.1), ONNX `Expand` once its output shape is
/// known: the one input broadcast (numpy's rules) to `shape`, which the input's shape must
/// broadcast to exactly. Any data type.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct BroadcastToDescriptor {
    /// The output's shape.
    pub shape: RVec<u32>,
}

/// Explicit padding of a 2-D window, in elements.
#[repr(C)]
#[derive(
    StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default,
)]
pub struct Padding2d {
    /// Columns added on the left.
    pub left: u32,
    /// Columns added on the right.
    pub right: u32,
    /// Rows added on top.
    pub top: u32,
    /// Rows added at the bottom.
    pub bottom: u32,
}

/// Parameters of `Convolution2d` and `DepthwiseConvolution2d`.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
pub struct Convolution2dDescriptor {
    /// Explicit padding.
    pub padding: Padding2d,
    /// Horizontal stride.
    pub stride_x: u32,
    /// Vertical stride.
    pub stride_y: u32,
    /// Horizontal dilation (1 = none).
    pub dilation_x: u32,
    /// Vertical dilation (1 = none).
    pub dilation_y: u32,
    /// Groups (1 for a plain convolution; ignored for depthwise).
    pub groups: u32,
    /// Whether a bias is the third input.
    pub bias_enabled: bool,
    /// Layout of the activations.
    pub layout: DataLayout,
}

impl Default for Convolution2dDescriptor {
    fn default() -> Self {
        Self {
            padding: Padding2d::default(),
            stride_x: 1,
            stride_y: 1,
            dilation_x: 1,
            dilation_y: 1,
            groups: 1,
            bias_enabled: false,
            layout: DataLayout::Nchw,
        }
    }
}

/// Parameters of `FullyConnected`.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct FullyConnectedDescriptor {
    /// Whether a bias is the third input.
    pub bias_enabled: bool,
    /// Weights are `[out, in]` instead of `[in, out]`.
    pub transpose_weights: bool,
}

/// Element-wise binary operations.
#[repr(u8)]
#[derive(
    StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash,
)]
pub enum BinaryOperation {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b`
    Div,
    /// `max(a, b)`
    Maximum,
    /// `min(a, b)`
    Minimum,
    /// `a ^ b` (ONNX `Pow`; Backend API 1.1).
    Power,
    /// `(a - b)^2` (Backend API 1.1).
    SquaredDifference,
    /// `a & b` on integer tensors (ONNX `BitwiseAnd`; Backend API 1.5).
    BitwiseAnd,
    /// `a | b` on integer tensors (ONNX `BitwiseOr`; Backend API 1.5).
    BitwiseOr,
    /// `a ^ b` on integer tensors (ONNX `BitwiseXor`; Backend API 1.5).
    BitwiseXor,
    /// `a << b` on unsigned integer tensors (ONNX `BitShift` `LEFT`; Backend API 1.5): bits
    /// shifted past the type's width are lost, a shift by the width or more gives 0.
    ShiftLeft,
    /// `a >> b` on unsigned integer tensors (ONNX `BitShift` `RIGHT`; Backend API 1.5): a
    /// shift by the type's width or more gives 0.
    ShiftRight,
}

impl BinaryOperation {
    /// Every operation, in discriminant order.
    pub const ALL: [BinaryOperation; 13] = [
        BinaryOperation::Add,
        BinaryOperation::Sub,
        BinaryOperation::Mul,
        BinaryOperation::Div,
        BinaryOperation::Maximum,
        BinaryOperation::Minimum,
        BinaryOperation::Power,
        BinaryOperation::SquaredDifference,
        BinaryOperation::BitwiseAnd,
        BinaryOperation::BitwiseOr,
        BinaryOperation::BitwiseXor,
        BinaryOperation::ShiftLeft,
        BinaryOperation::ShiftRight,
    ];

    /// Whether the operation is defined on integer tensors only (the bitwise ones and the
    /// shifts, Backend API 1.5).
    pub fn is_integer_only(self) -> bool {
        matches!(
            self,
            BinaryOperation::BitwiseAnd
                | BinaryOperation::BitwiseOr
                | BinaryOperation::BitwiseXor
                | BinaryOperation::ShiftLeft
                | BinaryOperation::ShiftRight
        )
    }
}

/// Element-wise unary operations (the `ElementwiseUnary` layer, Backend API 1.1).
#[repr(u8)]
#[derive(
    StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash,
)]
pub enum UnaryOperation {
    /// `|x|`
    Abs,
    /// `-x`
    Neg,
    /// `e^x`
    Exp,
    /// `ln x`
    Log,
    /// `sqrt(x)`
    Sqrt,
    /// `1 / sqrt(x)`
    Rsqrt,
    /// `1 / x`
    Reciprocal,
    /// `sin x`
    Sin,
    /// `cos x`
    Cos,
    /// The Gauss error function.
    Erf,
    /// Rounds up.
    Ceil,
    /// Rounds down.
    Floor,
    /// `tan x` (Backend API 1.5, as every operation below).
    Tan,
    /// `asin x`, in `[-π/2, π/2]`.
    Asin,
    /// `acos x`, in `[0, π]`.
    Acos,
    /// `atan x`, in `(-π/2, π/2)`.
    Atan,
    /// `sinh x`
    Sinh,
    /// `cosh x`
    Cosh,
    /// `asinh x`
    Asinh,
    /// `acosh x` (NaN below 1).
    Acosh,
    /// `atanh x` (NaN outside `[-1, 1]`).
    Atanh,
    /// Rounds to the nearest integer, halves to even (ONNX `Round`).
    Round,
}

impl UnaryOperation {
    /// Every operation, in discriminant order.
    pub const ALL: [UnaryOperation; 22] = [
        UnaryOperation::Abs,
        UnaryOperation::Neg,
        UnaryOperation::Exp,
        UnaryOperation::Log,
        UnaryOperation::Sqrt,
        UnaryOperation::Rsqrt,
        UnaryOperation::Reciprocal,
        UnaryOperation::Sin,
        UnaryOperation::Cos,
        UnaryOperation::Erf,
        UnaryOperation::Ceil,
        UnaryOperation::Floor,
        UnaryOperation::Tan,
        UnaryOperation::Asin,
        UnaryOperation::Acos,
        UnaryOperation::Atan,
        UnaryOperation::Sinh,
        UnaryOperation::Cosh,
        UnaryOperation::Asinh,
        UnaryOperation::Acosh,
        UnaryOperation::Atanh,
        UnaryOperation::Round,
    ];
}

/// Activation functions. The meaning of `a` and `b` is given per variant.
#[repr(u8)]
#[derive(
    StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash,
)]
pub enum ActivationFunction {
    /// `max(0, x)`
    ReLU,
    /// `min(a, max(b, x))`: ReLU6 is `a = 6, b = 0`.
    BoundedReLU,
    /// `1 / (1 + e^-x)`
    Sigmoid,
    /// `a * tanh(b * x)` (ONNX Tanh is `a = b = 1`).
    TanH,
    /// `x` if `x > 0` else `a * x`.
    LeakyReLU,
    /// `x * relu6(x + 3) / 6`
    HardSwish,
    /// `x` if `x > 0` else `a * (e^x - 1)`.
    Elu,
    /// GELU (Backend API 1.1): `x * Φ(x) = x / 2 * (1 + erf(x / √2))` with `a = 0`; with
    /// `a = 1`, the tanh approximation `x / 2 * (1 + tanh(√(2/π) * (x + 0.044715 x³)))` (ONNX
    /// `Gelu`'s `approximate = "tanh"`). Other values of `a` are invalid.
    Gelu,
}

impl ActivationFunction {
    /// Every activation function, in discriminant order.
    pub const ALL: [ActivationFunction; 8] = [
        ActivationFunction::ReLU,
        ActivationFunction::BoundedReLU,
        ActivationFunction::Sigmoid,
        ActivationFunction::TanH,
        ActivationFunction::LeakyReLU,
        ActivationFunction::HardSwish,
        ActivationFunction::Elu,
        ActivationFunction::Gelu,
    ];
}

/// Parameters of `Activation`.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct ActivationDescriptor {
    /// The function.
    pub function: ActivationFunction,
    /// First parameter (see [`ActivationFunction`]).
    pub a: f32,
    /// Second parameter (see [`ActivationFunction`]).
    pub b: f32,
}

impl ActivationDescriptor {
    /// Replaces every element of `data` with this activation of it: the definition of each
    /// function (see [`ActivationFunction`]) as a kernel that backends can share. A NaN input
    /// gives a NaN output for every function (no comparison lets a NaN select a bound), and
    /// the sigmoid does not overflow for large `|x|`.
    ///
    /// Always inlined: a backend that calls it from code compiled for wider vector
    /// instructions (chosen at run time) gets loops compiled for them.
    #[inline(always)]
    pub fn apply_in_place(&self, data: &mut [f32]) {
        /// One loop per function, so that the match stays outside it.
        #[inline(always)]
        fn map(data: &mut [f32], f: impl Fn(f32) -> f32) {
            for v in data {
                *v = f(*v);
            }
        }
        /// `1 / (1 + e^-x)` with an exponent that is never positive.
        fn sigmoid(x: f32) -> f32 {
            if x >= 0.0 {
                1.0 / (1.0 + (-x).exp())
            } else {
                let e = x.exp();
                e / (1.0 + e)
            }
        }
        let (a, b) = (self.a, self.b);
        match self.function {
            ActivationFunction::ReLU => map(data, |x| if x < 0.0 { 0.0 } else { x }),
            // min(a, max(b, x)), written so that NaN selects no bound.
            ActivationFunction::BoundedReLU => map(data, |x| {
                let y = if x < b { b } else { x };
                if y > a { a } else { y }
            }),
            ActivationFunction::Sigmoid => map(data, sigmoid),
            ActivationFunction::TanH => map(data, |x| a * (b * x).tanh()),
            ActivationFunction::LeakyReLU => map(data, |x| if x > 0.0 { x } else { a * x }),
            // `clamp` propagates NaN.
            ActivationFunction::HardSwish => map(data, |x| x * (x + 3.0).clamp(0.0, 6.0) / 6.0),
            ActivationFunction::Elu => map(data, |x| if x > 0.0 { x } else { a * x.exp_m1() }),
            ActivationFunction::Gelu if a == 0.0 => map(data, |x| {
                0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2))
            }),
            ActivationFunction::Gelu => map(data, |x| {
                let inner = (2.0 / std::f32::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
                0.5 * x * (1.0 + inner.tanh())
            }),
        }
    }

    /// This activation of `x`, evaluated in `f64` straight from the definitions of
    /// [`ActivationFunction`] (ONNX's HardSwish form, `x * clamp(x / 6 + 1/2, 0, 1)`), and
    /// written apart from [`apply_in_place`](Self::apply_in_place). It is the oracle that
    /// backends' tests compare their `f32` kernels with, not a kernel.
    pub fn reference_f64(&self, x: f32) -> f64 {
        let (x, a, b) = (f64::from(x), f64::from(self.a), f64::from(self.b));
        match self.function {
            ActivationFunction::ReLU => x.max(0.0),
            ActivationFunction::BoundedReLU => a.min(b.max(x)),
            ActivationFunction::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            ActivationFunction::TanH => a * (b * x).tanh(),
            ActivationFunction::LeakyReLU => {
                if x > 0.0 {
                    x
                } else {
                    a * x
                }
            }
            ActivationFunction::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
            ActivationFunction::Elu => {
                if x > 0.0 {
                    x
                } else {
                    a * (x.exp() - 1.0)
                }
            }
            ActivationFunction::Gelu if a == 0.0 => {
                0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
            }
            ActivationFunction::Gelu => {
                let inner = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3));
                0.5 * x * (1.0 + inner.tanh())
            }
        }
    }
}

/// Pooling kinds.
#[repr(u8)]
#[derive(
    StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash,
)]
pub enum PoolingType {
    /// Maximum over the window.
    Max,
    /// Average over the window.
    Average,
}

/// How the output size is rounded.
#[repr(u8)]
#[derive(
    StableAbi,
    serde::Serialize,
    serde::Deserialize,
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
)]
pub enum OutputRounding {
    /// Round down (ONNX `ceil_mode = 0`).
    #[default]
    Floor,
    /// Round up (ONNX `ceil_mode = 1`).
    Ceiling,
}

/// Parameters of `Pooling2d`.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
pub struct Pooling2dDescriptor {
    /// Max or average.
    pub pool_type: PoolingType,
    /// Explicit padding.
    pub padding: Padding2d,
    /// Window width.
    pub pool_width: u32,
    /// Window height.
    pub pool_height: u32,
    /// Horizontal stride.
    pub stride_x: u32,
    /// Vertical stride.
    pub stride_y: u32,
    /// Output size rounding (ceil mode).
    pub rounding: OutputRounding,
    /// Average pooling: whether padded elements count in the divisor.
    pub count_include_pad: bool,
    /// Layout of the activations.
    pub layout: DataLayout,
}

/// Parameters of `Softmax`.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct SoftmaxDescriptor {
    /// Exponent scale (1 for ONNX Softmax).
    pub beta: f32,
    /// Axis, negative counting from the end.
    pub axis: i32,
}

/// Parameters of `Reshape`.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ReshapeDescriptor {
    /// The output shape (fully resolved, no `-1`).
    pub target_shape: RVec<u32>,
}

/// Parameters of `Flatten`.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlattenDescriptor {
    /// Dimensions before `axis` form the first output dimension.
    pub axis: u32,
}

/// Parameters of `Concat`.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConcatDescriptor {
    /// The axis the inputs are joined along.
    pub axis: u32,
}

/// Parameters of `Transpose`.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct TransposeDescriptor {
    /// Output dimension `i` is input dimension `permutation[i]`.
    pub permutation: RVec<u32>,
}

/// Padding before and after one dimension.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct PadPair {
    /// Elements added before.
    pub before: u32,
    /// Elements added after.
    pub after: u32,
}

/// How `Pad` fills.
#[repr(u8)]
#[derive(
    StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash,
)]
pub enum PadMode {
    /// A constant value.
    Constant,
    /// Mirror without repeating the edge.
    Reflect,
    /// Repeat the edge.
    Edge,
}

/// Parameters of `Pad`.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
pub struct PadDescriptor {
    /// One pair per input dimension.
    pub padding: RVec<PadPair>,
    /// The fill value for [`PadMode::Constant`].
    pub value: f32,
    /// The fill mode.
    pub mode: PadMode,
}

/// Parameters of `Mean`. The axes are explicit and non-negative: an importer expands ONNX
/// `ReduceMean` without axes to every axis and normalises negative ones. Empty `axes` reduce
/// nothing (the identity).
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MeanDescriptor {
    /// The axes reduced.
    pub axes: RVec<u32>,
    /// Keep reduced axes as size 1.
    pub keep_dims: bool,
}

/// Parameters of `BatchNormalization`.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct BatchNormalizationDescriptor {
    /// Added to the variance.
    pub epsilon: f32,
    /// Layout of the activations.
    pub layout: DataLayout,
}

/// A backend-specific layer (for example fused Conv2d+Bias+ReLU) that a backend created in
/// `optimize_subgraph` and will be asked to build a workload for.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct PreCompiledDescriptor {
    /// The backend that created it (its id); only that backend is asked to run it.
    pub backend: RString,
    /// A short name of the operation, for reports (`"Conv2dBiasReLU"`).
    pub operation: RString,
    /// Opaque parameters, meaningful to the backend only.
    pub payload: RVec<u8>,
}

/// A layer: its kind and parameters.
#[repr(u8)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
pub enum LayerDescriptor {
    /// A network input, by name.
    Input(RString),
    /// A network output, by name.
    Output(RString),
    /// A constant tensor.
    Constant(ConstTensor),
    /// 2-D convolution.
    Convolution2d(Convolution2dDescriptor),
    /// 2-D depthwise convolution.
    DepthwiseConvolution2d(Convolution2dDescriptor),
    /// Fully connected.
    FullyConnected(FullyConnectedDescriptor),
    /// Element-wise binary operation.
    ElementwiseBinary(BinaryOperation),
    /// Activation.
    Activation(ActivationDescriptor),
    /// Pooling.
    Pooling2d(Pooling2dDescriptor),
    /// Softmax.
    Softmax(SoftmaxDescriptor),
    /// Reshape.
    Reshape(ReshapeDescriptor),
    /// Flatten.
    Flatten(FlattenDescriptor),
    /// Concatenation.
    Concat(ConcatDescriptor),
    /// Transpose.
    Transpose(TransposeDescriptor),
    /// Pad.
    Pad(PadDescriptor),
    /// Mean.
    Mean(MeanDescriptor),
    /// Batch normalisation.
    BatchNormalization(BatchNormalizationDescriptor),
    /// Copy between backends.
    MemCopy,
    /// Backend-specific layer.
    PreCompiled(PreCompiledDescriptor),
    /// Element-wise unary operation (Backend API 1.1).
    ElementwiseUnary(UnaryOperation),
    /// Local response normalisation across channels (Backend API 1.1).
    Normalization(NormalizationDescriptor),
    /// Matrix products over broadcast batch dimensions (Backend API 1.1).
    BatchMatMul(BatchMatMulDescriptor),
    /// A strided box of a tensor (Backend API 1.1).
    Slice(SliceDescriptor),
    /// Spatial resizing (Backend API 1.1).
    Resize(ResizeDescriptor),
    /// Transposed convolution (Backend API 1.1).
    TransposeConvolution2d(TransposeConvolution2dDescriptor),
    /// See [`GatherDescriptor`] (Backend API 1.1).
    Gather(GatherDescriptor),
    /// See [`ReduceDescriptor`] (Backend API 1.1).
    Reduce(ReduceDescriptor),
    /// See [`ArgMinMaxDescriptor`] (Backend API 1.1).
    ArgMinMax(ArgMinMaxDescriptor),
    /// See [`LayerNormalizationDescriptor`] (Backend API 1.1).
    LayerNormalization(LayerNormalizationDescriptor),
    /// See [`InstanceNormalizationDescriptor`] (Backend API 1.1).
    InstanceNormalization(InstanceNormalizationDescriptor),
    /// Conversion of the one input to this data type (Backend API 1.1): Float32, Signed32
    /// and Boolean in any pair. Float32 to Signed32 rounds toward zero and saturates (NaN gives
    /// 0); to Boolean, anything but zero is true (NaN too); Boolean reads as 0 or 1.
    Cast(DataType),
    /// See [`ComparisonOperation`] (Backend API 1.1). Inputs `[a, b]` of one data type.
    Comparison(ComparisonOperation),
    /// `out = condition ? a : b` element-wise (Backend API 1.1). Inputs `[condition, a, b]`:
    /// `condition` Boolean, `a` and `b` of one data type, all three broadcast as numpy does.
    Where,
    /// See [`BroadcastToDescriptor`] (Backend API 1.1).
    BroadcastTo(BroadcastToDescriptor),
    /// See [`DilatedPooling2dDescriptor`] (Backend API 1.1).
    DilatedPooling2d(DilatedPooling2dDescriptor),
    /// Float32 to this quantised type (`QAsymmU8`, `QAsymmS8` or `QSymmS8`; Backend API 1.2),
    /// with the output's quantisation, per tensor or per axis, as ONNX `QuantizeLinear`:
    /// `q = saturate(round_half_even(x / scale) + offset)`, the division in f32.
    Quantize(DataType),
    /// A quantised tensor to Float32 (Backend API 1.2), with the input's quantisation, per
    /// tensor or per axis, as ONNX `DequantizeLinear`: `x = (q - offset) as f32 * scale`.
    Dequantize,
    /// A quantised tensor to this quantised type with the output's quantisation (Backend API
    /// 1.2): exactly a `Dequantize` then a `Quantize` in f32, so that a folded pair of
    /// ONNX `DequantizeLinear`/`QuantizeLinear` keeps its values bit for bit.
    Requantize(DataType),
    /// The non-zero elements of the one input (any plain type; a float is zero when it is
    /// +0 or -0, NaN is not), Backend API 1.5. For an input of rank `r >= 1` with `n`
    /// elements the output is Signed64 of shape `[r + 1, n]`: row 0 holds the count `k` of
    /// non-zero elements in column 0 (the rest of the row is 0); rows `1..=r` hold, in columns
    /// `0..k`, the index along each dimension of each non-zero element in row-major order
    /// (ONNX `NonZero`'s output), and 0 in columns `k..n`. The host sizes the output for every
    /// element being non-zero and reads the count after the run: the extent of the result is
    /// known only then (it ends a segment: see the host's "Dynamic networks").
    NonZero,
    /// See [`ScatterElementsDescriptor`] (Backend API 1.5).
    ScatterElements(ScatterElementsDescriptor),
    /// Slices of `data` replaced or combined (Backend API 1.5; ONNX `ScatterND`). Inputs
    /// `data` (rank `r`), `indices` (Signed32 or Signed64, rank `q`, its last dimension `k <=
    /// r`) and `updates` of shape `indices.shape[..q - 1] ++ data.shape[k..]`; the output is
    /// `data`'s shape and type. It starts as `data`; then for each index tuple `t` (the
    /// tuples in row-major order), the slice `data[t[0], …, t[k - 1], ..]` is combined element
    /// by element with the matching slice of `updates` by the reduction. Negative indices count
    /// from the end; one outside its dimension fails the execution.
    ScatterNd(ScatterReduction),
    /// See [`NonMaxSuppressionDescriptor`] (Backend API 1.5).
    NonMaxSuppression(NonMaxSuppressionDescriptor),
    /// See [`RoiAlignDescriptor`] (Backend API 1.5).
    RoiAlign(RoiAlignDescriptor),
    /// The one input's bytes, unchanged, read as this plain type of the same width (Backend
    /// API 1.5; ONNX `BitCast`: little-endian; `Boolean` and the 8-bit integers are one byte).
    /// The output has the input's shape.
    BitCast(DataType),
    /// The determinant of each `[m, m]` matrix of the one input (Float32 or Float64, shape
    /// `[..., m, m]`); the output is the input's type, shape `[...]` (Backend API 1.5; ONNX
    /// `Det`). A matrix of size 0 has determinant 1.
    Determinant,
    /// See [`UniqueDescriptor`] (Backend API 1.5).
    Unique(UniqueDescriptor),
    /// See [`DeformableConvolution2dDescriptor`] (Backend API 1.5).
    DeformableConvolution2d(DeformableConvolution2dDescriptor),
    /// See [`LstmDescriptor`] (Backend API 1.5).
    Lstm(LstmDescriptor),
}

impl LayerDescriptor {
    /// The kind of this layer.
    pub fn kind(&self) -> LayerKind {
        match self {
            LayerDescriptor::Input(_) => LayerKind::Input,
            LayerDescriptor::Output(_) => LayerKind::Output,
            LayerDescriptor::Constant(_) => LayerKind::Constant,
            LayerDescriptor::Convolution2d(_) => LayerKind::Convolution2d,
            LayerDescriptor::DepthwiseConvolution2d(_) => LayerKind::DepthwiseConvolution2d,
            LayerDescriptor::FullyConnected(_) => LayerKind::FullyConnected,
            LayerDescriptor::ElementwiseBinary(_) => LayerKind::ElementwiseBinary,
            LayerDescriptor::Activation(_) => LayerKind::Activation,
            LayerDescriptor::Pooling2d(_) => LayerKind::Pooling2d,
            LayerDescriptor::Softmax(_) => LayerKind::Softmax,
            LayerDescriptor::Reshape(_) => LayerKind::Reshape,
            LayerDescriptor::Flatten(_) => LayerKind::Flatten,
            LayerDescriptor::Concat(_) => LayerKind::Concat,
            LayerDescriptor::Transpose(_) => LayerKind::Transpose,
            LayerDescriptor::Pad(_) => LayerKind::Pad,
            LayerDescriptor::Mean(_) => LayerKind::Mean,
            LayerDescriptor::BatchNormalization(_) => LayerKind::BatchNormalization,
            LayerDescriptor::MemCopy => LayerKind::MemCopy,
            LayerDescriptor::PreCompiled(_) => LayerKind::PreCompiled,
            LayerDescriptor::ElementwiseUnary(_) => LayerKind::ElementwiseUnary,
            LayerDescriptor::Normalization(_) => LayerKind::Normalization,
            LayerDescriptor::BatchMatMul(_) => LayerKind::BatchMatMul,
            LayerDescriptor::Slice(_) => LayerKind::Slice,
            LayerDescriptor::Resize(_) => LayerKind::Resize,
            LayerDescriptor::TransposeConvolution2d(_) => LayerKind::TransposeConvolution2d,
            LayerDescriptor::Gather(_) => LayerKind::Gather,
            LayerDescriptor::Reduce(_) => LayerKind::Reduce,
            LayerDescriptor::ArgMinMax(_) => LayerKind::ArgMinMax,
            LayerDescriptor::LayerNormalization(_) => LayerKind::LayerNormalization,
            LayerDescriptor::InstanceNormalization(_) => LayerKind::InstanceNormalization,
            LayerDescriptor::Cast(_) => LayerKind::Cast,
            LayerDescriptor::Comparison(_) => LayerKind::Comparison,
            LayerDescriptor::Where => LayerKind::Where,
            LayerDescriptor::BroadcastTo(_) => LayerKind::BroadcastTo,
            LayerDescriptor::DilatedPooling2d(_) => LayerKind::DilatedPooling2d,
            LayerDescriptor::Quantize(_) => LayerKind::Quantize,
            LayerDescriptor::Dequantize => LayerKind::Dequantize,
            LayerDescriptor::Requantize(_) => LayerKind::Requantize,
            LayerDescriptor::NonZero => LayerKind::NonZero,
            LayerDescriptor::ScatterElements(_) => LayerKind::ScatterElements,
            LayerDescriptor::ScatterNd(_) => LayerKind::ScatterNd,
            LayerDescriptor::NonMaxSuppression(_) => LayerKind::NonMaxSuppression,
            LayerDescriptor::RoiAlign(_) => LayerKind::RoiAlign,
            LayerDescriptor::BitCast(_) => LayerKind::BitCast,
            LayerDescriptor::Determinant => LayerKind::Determinant,
            LayerDescriptor::Unique(_) => LayerKind::Unique,
            LayerDescriptor::DeformableConvolution2d(_) => LayerKind::DeformableConvolution2d,
            LayerDescriptor::Lstm(_) => LayerKind::Lstm,
        }
    }
}

/// A backend's answer to a layer-support query.
#[repr(u8)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum Support {
    /// The backend can run the layer as described.
    Supported,
    /// The backend cannot; the reason is for a person (and is recorded by the optimizer).
    Unsupported(RString),
}

impl Support {
    /// A refusal with a reason.
    pub fn unsupported(reason: impl Into<String>) -> Self {
        Support::Unsupported(RString::from(reason.into()))
    }

    /// `true` for [`Support::Supported`].
    pub fn is_supported(&self) -> bool {
        matches!(self, Support::Supported)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The oracle's values at a few points, by hand from the definitions.
    #[test]
    fn reference_activations_by_hand() {
        let act = |function, a, b| ActivationDescriptor { function, a, b };
        use ActivationFunction::*;
        assert_eq!(act(ReLU, 0.0, 0.0).reference_f64(-2.0), 0.0);
        assert_eq!(act(ReLU, 0.0, 0.0).reference_f64(1.5), 1.5);
        assert_eq!(act(BoundedReLU, 6.0, 0.0).reference_f64(7.0), 6.0);
        assert_eq!(act(BoundedReLU, 6.0, 0.0).reference_f64(-1.0), 0.0);
        assert_eq!(act(Sigmoid, 0.0, 0.0).reference_f64(0.0), 0.5);
        assert_eq!(act(TanH, 2.0, 1.0).reference_f64(0.0), 0.0);
        assert_eq!(act(LeakyReLU, 0.5, 0.0).reference_f64(-2.0), -1.0);
        assert_eq!(act(HardSwish, 0.0, 0.0).reference_f64(3.0), 3.0);
        assert_eq!(act(HardSwish, 0.0, 0.0).reference_f64(-3.0), 0.0);
        assert_eq!(act(HardSwish, 0.0, 0.0).reference_f64(0.0), 0.0);
        assert_eq!(act(Elu, 1.0, 0.0).reference_f64(2.0), 2.0);
        assert!(
            (act(Elu, 1.0, 0.0).reference_f64(-1.0) - (-0.632_120_558_828_557_7)).abs() < 1e-15
        );
    }
}
