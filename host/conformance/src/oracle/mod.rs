//! The layer suite's oracle: every layer the suite has cases for, defined again in `f64`, one
//! plain function per layer kind, straight from its definition (the descriptor's documentation
//! in `backplane-api`, which follows the ONNX operator of the same name).
//!
//! One file per operator family: [`convolution2d`] and the other windowed layers
//! (`convolution.rs`), the matrix products (`matmul.rs`), the element-wise layers
//! (`elementwise.rs`), the normalisations (`normalization.rs`), the reductions
//! (`reduction.rs`), the layers that move values (`movement.rs`), `Resize` (`resize.rs`), the
//! scatters (`scatter.rs`), the detection layers (`detection.rs`) and `Lstm` (`recurrent.rs`);
//! this file holds the [`Tensor`], [`evaluate`] (a layer to its function) and [`compare`].
//!
//! The oracle shares no code with any backend: it does not call or copy CpuRef
//! (`backplane-ref`) or the kernels `backplane-api` offers backends (such as
//! `ActivationDescriptor::apply_in_place`). Its loops walk NCHW (row-major) indices one output
//! element at a time, with no blocking, no vectorisation and no clever reuse, so that reading
//! one function is enough to check it against the definition. It is slow, and the suite's
//! tensors are small.
//!
//! [`compare`] judges a backend's output against the oracle's:
//! - Float32: each `f64` result is rounded to `f32` (`want`), and `got` must satisfy
//!   `|got - want| <= ABS_TOLERANCE + REL_TOLERANCE * |want|` ([`ABS_TOLERANCE`] =
//!   [`REL_TOLERANCE`] = 1e-4, for every layer: no layer needs more). A NaN must be a NaN, an
//!   infinity the same infinity.
//! - Signed32 and Boolean: exactly.

mod convolution;
mod detection;
mod elementwise;
mod matmul;
mod movement;
mod normalization;
mod recurrent;
mod reduction;
mod resize;
mod scatter;
// Inputs are written inline as `&[x.clone()]`, the same form as the cases with several.
#[allow(clippy::cloned_ref_to_slice_refs)]
#[cfg(test)]
mod tests;

use backplane_api::{ConstTensor, DataType, LayerDescriptor, ReduceOperation, TensorInfo};

pub use convolution::{
    convolution2d, deformable_convolution2d, pooling2d, transpose_convolution2d, window_count,
};
pub use detection::{non_max_suppression, roi_align};
pub use elementwise::{
    activation, bit_cast, cast, comparison, elementwise_binary, elementwise_unary, erf, select,
};
pub use matmul::{batch_matmul, determinant, fully_connected};
pub use movement::{broadcast_to, concat, flatten, gather, pad, reshape, slice, transpose, unique};
pub use normalization::{
    batch_normalization, instance_normalization, layer_normalization, local_response_normalization,
    softmax,
};
pub use recurrent::lstm;
pub use reduction::{arg_min_max, reduce};
pub use resize::resize;
pub use scatter::{scatter_elements, scatter_nd};

/// Absolute tolerance of a Float32 output against the oracle's result rounded to `f32`.
pub const ABS_TOLERANCE: f64 = 1e-4;

/// Relative tolerance of a Float32 output against the oracle's result rounded to `f32`.
pub const REL_TOLERANCE: f64 = 1e-4;

/// A dense tensor of `f64` values, row-major (NCHW for 4-D activations). Signed32 values and
/// Booleans (0 or 1) are held exactly.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// The elements, row-major.
    pub data: Vec<f64>,
}

impl Tensor {
    /// A tensor of `shape` holding `data`. Panics when the lengths differ (a programming error).
    pub fn new(shape: &[usize], data: Vec<f64>) -> Self {
        assert_eq!(
            shape.iter().product::<usize>(),
            data.len(),
            "shape {shape:?} does not hold {} values",
            data.len()
        );
        Self {
            shape: shape.to_vec(),
            data,
        }
    }

    /// A tensor of `shape` filled with zeros.
    pub fn zeros(shape: &[usize]) -> Self {
        Self::new(shape, vec![0.0; shape.iter().product()])
    }

    /// The tensor described by `info` from its little-endian bytes (Float32, Signed32,
    /// UnsignedInt32, Signed64 or Boolean).
    pub fn from_bytes(info: &TensorInfo, bytes: &[u8]) -> Result<Self, String> {
        let shape: Vec<usize> = info.shape.iter().map(|&d| d as usize).collect();
        let data: Vec<f64> = match info.data_type {
            DataType::Float32 => bytes
                .chunks_exact(4)
                .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            DataType::Signed32 => bytes
                .chunks_exact(4)
                .map(|c| f64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            DataType::UnsignedInt32 => bytes
                .chunks_exact(4)
                .map(|c| f64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            DataType::Boolean => bytes.iter().map(|&b| f64::from(u8::from(b != 0))).collect(),
            // Exact for every value within 2^53 (indices and counts are).
            #[allow(clippy::cast_precision_loss)]
            // reason: the values compared are indices, far below 2^53
            DataType::Signed64 => bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64)
                .collect(),
            other => return Err(format!("the oracle reads no {other} data")),
        };
        if data.len() != shape.iter().product::<usize>() {
            return Err(format!("{} bytes do not hold {info}", bytes.len()));
        }
        Ok(Self { shape, data })
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// `true` when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The position in `data` of the element at `index` (one entry per dimension).
    pub fn offset(&self, index: &[usize]) -> usize {
        assert_eq!(index.len(), self.shape.len(), "index rank");
        let mut offset = 0;
        for (&i, &d) in index.iter().zip(&self.shape) {
            assert!(i < d, "index {index:?} outside {:?}", self.shape);
            offset = offset * d + i;
        }
        offset
    }

    /// The element at `index`.
    pub fn at(&self, index: &[usize]) -> f64 {
        self.data[self.offset(index)]
    }

    /// Sets the element at `index`.
    pub fn set(&mut self, index: &[usize], value: f64) {
        let o = self.offset(index);
        self.data[o] = value;
    }

    /// The element of a tensor of rank `out.len()` or less that numpy broadcasting reads for
    /// output index `out`: dimensions aligned at the end, a dimension of 1 read at 0.
    pub fn at_broadcast(&self, out: &[usize]) -> f64 {
        let skip = out.len() - self.shape.len();
        let index: Vec<usize> = self
            .shape
            .iter()
            .zip(&out[skip..])
            .map(|(&d, &i)| if d == 1 { 0 } else { i })
            .collect();
        self.at(&index)
    }
}

/// Every index of `shape`, in row-major order (the last dimension fastest).
pub fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let total: usize = shape.iter().product();
    let mut all = Vec::with_capacity(total);
    let mut index = vec![0; shape.len()];
    for _ in 0..total {
        all.push(index.clone());
        for d in (0..shape.len()).rev() {
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
    all
}

/// The numpy broadcast of two shapes.
fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| {
        if i < rank - s.len() {
            1
        } else {
            s[i - (rank - s.len())]
        }
    };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y => Ok(x),
            (1, y) => Ok(y),
            (x, 1) => Ok(x),
            (x, y) => Err(format!("{a:?} and {b:?} do not broadcast ({x} vs {y})")),
        })
        .collect()
}

/// The four dimensions of a 4-D tensor.
fn dims4(t: &Tensor, what: &str) -> Result<[usize; 4], String> {
    <[usize; 4]>::try_from(t.shape.as_slice())
        .map_err(|_| format!("{what} must be 4-D, got {:?}", t.shape))
}

/// The input at `slot`, or an error naming it.
fn input(inputs: &[Tensor], slot: usize) -> Result<&Tensor, String> {
    inputs
        .get(slot)
        .ok_or_else(|| format!("missing input {slot}"))
}

/// [`evaluate`], for layers whose definition reads the inputs' data types too (`BitCast`:
/// `types[i]` is input `i`'s).
pub fn evaluate_typed(
    layer: &LayerDescriptor,
    inputs: &[Tensor],
    types: &[DataType],
) -> Result<Tensor, String> {
    match (layer, types.first()) {
        (LayerDescriptor::BitCast(to), Some(&from)) => bit_cast(input(inputs, 0)?, from, *to),
        _ => evaluate(layer, inputs),
    }
}

/// The output of `layer` applied to `inputs` (in slot order), by the layer's definition.
///
/// `Err` means the oracle gives no output for this layer and these inputs: a layer or an
/// attribute it does not define (`PreCompiled`, an NHWC layout, a quantised type), or inputs
/// outside the layer's definition.
pub fn evaluate(layer: &LayerDescriptor, inputs: &[Tensor]) -> Result<Tensor, String> {
    let x = || input(inputs, 0);
    match layer {
        LayerDescriptor::MemCopy => Ok(x()?.clone()),
        LayerDescriptor::Input(_)
        | LayerDescriptor::Output(_)
        | LayerDescriptor::PreCompiled(_)
        | LayerDescriptor::Quantize(_)
        | LayerDescriptor::Dequantize
        | LayerDescriptor::Requantize(_) => Err(format!(
            "{} is not a computation the oracle defines",
            layer.kind()
        )),
        LayerDescriptor::Constant(c) => constant(c),
        LayerDescriptor::Convolution2d(d) => convolution2d(inputs, d, false),
        LayerDescriptor::DepthwiseConvolution2d(d) => convolution2d(inputs, d, true),
        LayerDescriptor::FullyConnected(d) => fully_connected(inputs, d),
        LayerDescriptor::ElementwiseBinary(op) => elementwise_binary(x()?, input(inputs, 1)?, *op),
        LayerDescriptor::Activation(d) => Ok(activation(x()?, d)),
        LayerDescriptor::Pooling2d(d) => pooling2d(x()?, d, 1, 1),
        LayerDescriptor::DilatedPooling2d(d) => pooling2d(
            x()?,
            &d.pooling,
            d.dilation_y as usize,
            d.dilation_x as usize,
        ),
        LayerDescriptor::Softmax(d) => softmax(x()?, f64::from(d.beta), d.axis),
        LayerDescriptor::Reshape(d) => {
            let shape: Vec<usize> = d.target_shape.iter().map(|&s| s as usize).collect();
            reshape(x()?, &shape)
        }
        LayerDescriptor::Flatten(d) => flatten(x()?, d.axis as usize),
        LayerDescriptor::Concat(d) => concat(inputs, d.axis as usize),
        LayerDescriptor::Transpose(d) => {
            let perm: Vec<usize> = d.permutation.iter().map(|&p| p as usize).collect();
            transpose(x()?, &perm)
        }
        LayerDescriptor::Pad(d) => pad(x()?, d),
        LayerDescriptor::Mean(d) => {
            let axes: Vec<usize> = d.axes.iter().map(|&a| a as usize).collect();
            reduce(x()?, &axes, d.keep_dims, ReduceOperation::Mean)
        }
        LayerDescriptor::BatchNormalization(d) => batch_normalization(inputs, d),
        LayerDescriptor::ElementwiseUnary(op) => Ok(elementwise_unary(x()?, *op)),
        LayerDescriptor::Normalization(d) => local_response_normalization(x()?, d),
        LayerDescriptor::BatchMatMul(d) => batch_matmul(x()?, input(inputs, 1)?, d),
        LayerDescriptor::Slice(d) => slice(x()?, d),
        LayerDescriptor::Resize(d) => resize(x()?, d),
        LayerDescriptor::TransposeConvolution2d(d) => transpose_convolution2d(inputs, d),
        LayerDescriptor::Gather(d) => gather(x()?, input(inputs, 1)?, d.axis as usize),
        LayerDescriptor::Reduce(d) => {
            let axes: Vec<usize> = d.axes.iter().map(|&a| a as usize).collect();
            reduce(x()?, &axes, d.keep_dims, d.operation)
        }
        LayerDescriptor::ArgMinMax(d) => arg_min_max(x()?, d),
        LayerDescriptor::LayerNormalization(d) => layer_normalization(
            inputs,
            d.axis as usize,
            f64::from(d.epsilon),
            d.bias_enabled,
        ),
        LayerDescriptor::InstanceNormalization(d) => {
            instance_normalization(inputs, f64::from(d.epsilon))
        }
        LayerDescriptor::Cast(to) => cast(x()?, *to),
        LayerDescriptor::Comparison(op) => comparison(x()?, input(inputs, 1)?, *op),
        LayerDescriptor::Where => select(x()?, input(inputs, 1)?, input(inputs, 2)?),
        LayerDescriptor::NonZero => movement::non_zero(x()?),
        LayerDescriptor::ScatterElements(d) => scatter_elements(
            x()?,
            input(inputs, 1)?,
            input(inputs, 2)?,
            d.axis as usize,
            d.reduction,
        ),
        LayerDescriptor::ScatterNd(r) => scatter_nd(x()?, input(inputs, 1)?, input(inputs, 2)?, *r),
        LayerDescriptor::BroadcastTo(d) => {
            let shape: Vec<usize> = d.shape.iter().map(|&s| s as usize).collect();
            broadcast_to(x()?, &shape)
        }
        LayerDescriptor::BitCast(_) => Err("BitCast's definition needs the input's type \
             (evaluate_typed)"
            .to_owned()),
        LayerDescriptor::Determinant => determinant(x()?),
        LayerDescriptor::Unique(d) => unique(x()?, d),
        LayerDescriptor::DeformableConvolution2d(d) => deformable_convolution2d(inputs, d),
        LayerDescriptor::Lstm(d) => lstm(inputs, d),
        LayerDescriptor::NonMaxSuppression(d) => non_max_suppression(x()?, input(inputs, 1)?, d),
        LayerDescriptor::RoiAlign(d) => roi_align(x()?, input(inputs, 1)?, input(inputs, 2)?, d),
    }
}

/// `Constant`: the tensor's own values.
pub fn constant(c: &ConstTensor) -> Result<Tensor, String> {
    Tensor::from_bytes(&c.info, &c.data)
}

/// `axis` (negative counting from the end) as an index below `rank`.
fn normalize_axis(axis: i32, rank: usize) -> Result<usize, String> {
    let a = if axis < 0 { axis + rank as i32 } else { axis };
    usize::try_from(a)
        .ok()
        .filter(|&a| a < rank)
        .ok_or_else(|| format!("axis {axis} out of range for rank {rank}"))
}

/// Compares a backend's output (`info`, `bytes`) with the oracle's `want`: the shapes must be
/// equal; Float32 within [`ABS_TOLERANCE`] + [`REL_TOLERANCE`] × |want| of `want` rounded to
/// `f32` (NaN for NaN, infinities exactly); Signed32 and Boolean exactly. Returns the largest
/// difference, or the first element out of tolerance.
pub fn compare(info: &TensorInfo, bytes: &[u8], want: &Tensor) -> Result<f64, String> {
    let got = Tensor::from_bytes(info, bytes)?;
    if got.shape != want.shape {
        return Err(format!(
            "shape {:?}, the oracle's is {:?}",
            got.shape, want.shape
        ));
    }
    let mut worst = 0f64;
    for (k, (&g, &w)) in got.data.iter().zip(&want.data).enumerate() {
        let at = || {
            let index = &indices(&want.shape)[k];
            format!("at {index:?}")
        };
        if info.data_type != DataType::Float32 {
            if g != w {
                return Err(format!("{} {g} vs oracle {w} {}", info.data_type, at()));
            }
            continue;
        }
        let w32 = f64::from(w as f32);
        let ok = if w32.is_nan() {
            g.is_nan()
        } else if w32.is_infinite() {
            g == w32
        } else {
            (g - w32).abs() <= ABS_TOLERANCE + REL_TOLERANCE * w32.abs()
        };
        if !ok {
            return Err(format!("{g} vs oracle {w32} {}", at()));
        }
        if g.is_finite() {
            worst = worst.max((g - w32).abs());
        }
    }
    Ok(worst)
}
