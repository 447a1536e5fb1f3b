//! The layer suite's oracle: every layer the suite has cases for, defined again in `f64`, one
//! plain function per layer kind, straight from its definition (the descriptor's documentation
//! in `backplane-api`, which follows the ONNX operator of the same name).
//!
//! This file shares no code with any backend: it does not call or copy CpuRef
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

use backplane_api::{
    ActivationDescriptor, ActivationFunction, ArgMinMaxDescriptor, ArgMinMaxFunction,
    BatchMatMulDescriptor, BatchNormalizationDescriptor, BinaryOperation, ComparisonOperation,
    ConstTensor, Convolution2dDescriptor, CoordinateTransformation, DataLayout, DataType,
    FullyConnectedDescriptor, LayerDescriptor, NearestRounding, NormalizationDescriptor,
    OutputRounding, PadDescriptor, PadMode, Pooling2dDescriptor, PoolingType, ReduceOperation,
    ResizeDescriptor, ResizeMethod, SliceDescriptor, TensorInfo, TransposeConvolution2dDescriptor,
    UnaryOperation,
};

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

    /// The tensor described by `info` from its little-endian bytes (Float32, Signed32 or
    /// Boolean).
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
            DataType::Boolean => bytes.iter().map(|&b| f64::from(u8::from(b != 0))).collect(),
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
        LayerDescriptor::BroadcastTo(d) => {
            let shape: Vec<usize> = d.shape.iter().map(|&s| s as usize).collect();
            broadcast_to(x()?, &shape)
        }
    }
}

/// `Constant`: the tensor's own values.
pub fn constant(c: &ConstTensor) -> Result<Tensor, String> {
    Tensor::from_bytes(&c.info, &c.data)
}

/// The number of positions of a sliding window along one axis (ONNX `Conv` and pooling):
/// `(padded - extent) / stride + 1` with the division rounded down, or up in ceil mode, where
/// `extent = dilation * (kernel - 1) + 1`; in ceil mode a last window that would start past
/// the input and its leading padding is dropped.
pub fn window_count(
    input: usize,
    (pad_begin, pad_end): (usize, usize),
    kernel: usize,
    stride: usize,
    dilation: usize,
    ceil: bool,
) -> Result<usize, String> {
    let padded = input + pad_begin + pad_end;
    let extent = dilation * (kernel - 1) + 1;
    if padded < extent || stride == 0 {
        return Err(format!(
            "a window of {extent} and stride {stride} over {padded}"
        ));
    }
    let steps = if ceil {
        (padded - extent).div_ceil(stride)
    } else {
        (padded - extent) / stride
    };
    let mut count = steps + 1;
    if ceil && (count - 1) * stride >= input + pad_begin {
        count -= 1;
    }
    Ok(count)
}

/// `o * stride - pad + j * dilation`: the input coordinate of window cell `j` of output `o`,
/// `None` when it falls outside `0..size`.
fn source(
    o: usize,
    stride: usize,
    pad: usize,
    j: usize,
    dilation: usize,
    size: usize,
) -> Option<usize> {
    let at = (o * stride + j * dilation).checked_sub(pad)?;
    (at < size).then_some(at)
}

/// `Convolution2d` and `DepthwiseConvolution2d` (NCHW), ONNX `Conv`:
/// `y[n, m, oy, ox] = bias[m] + sum over c in m's group, ky, kx of
/// x[n, c, oy * sy - top + ky * dy, ox * sx - left + kx * dx] * w[m, c - group start, ky, kx]`,
/// cells outside the input being 0 (padding). Weights are `[M, C / groups, kh, kw]`; the
/// depthwise form has `groups = C` (so output channel `m` reads input channel
/// `m / multiplier`).
pub fn convolution2d(
    inputs: &[Tensor],
    d: &Convolution2dDescriptor,
    depthwise: bool,
) -> Result<Tensor, String> {
    if d.layout != DataLayout::Nchw {
        return Err("the oracle's convolution is NCHW".into());
    }
    let (x, w) = (input(inputs, 0)?, input(inputs, 1)?);
    let [n, c, h, wd] = dims4(x, "input")?;
    let [m, c_per_group, kh, kw] = dims4(w, "weights")?;
    let groups = if depthwise { c } else { d.groups as usize };
    let m_per_group = m / groups;
    let (sy, sx) = (d.stride_y as usize, d.stride_x as usize);
    let (dy, dx) = (d.dilation_y as usize, d.dilation_x as usize);
    let p = d.padding;
    let (top, left) = (p.top as usize, p.left as usize);
    let oh = window_count(h, (top, p.bottom as usize), kh, sy, dy, false)?;
    let ow = window_count(wd, (left, p.right as usize), kw, sx, dx, false)?;
    let mut y = Tensor::zeros(&[n, m, oh, ow]);
    for b in 0..n {
        for oc in 0..m {
            let group = oc / m_per_group;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = if d.bias_enabled {
                        input(inputs, 2)?.at(&[oc])
                    } else {
                        0.0
                    };
                    for icg in 0..c_per_group {
                        let ic = group * c_per_group + icg;
                        for ky in 0..kh {
                            let Some(iy) = source(oy, sy, top, ky, dy, h) else {
                                continue;
                            };
                            for kx in 0..kw {
                                let Some(ix) = source(ox, sx, left, kx, dx, wd) else {
                                    continue;
                                };
                                acc += x.at(&[b, ic, iy, ix]) * w.at(&[oc, icg, ky, kx]);
                            }
                        }
                    }
                    y.set(&[b, oc, oy, ox], acc);
                }
            }
        }
    }
    Ok(y)
}

/// `FullyConnected`: `y[n, o] = bias[o] + sum over i of x[n, i] * w[i, o]` (`w[o, i]` with
/// `transpose_weights`).
pub fn fully_connected(inputs: &[Tensor], d: &FullyConnectedDescriptor) -> Result<Tensor, String> {
    let (x, w) = (input(inputs, 0)?, input(inputs, 1)?);
    let (n, k) = (x.shape[0], x.shape[1]);
    let m = if d.transpose_weights {
        w.shape[0]
    } else {
        w.shape[1]
    };
    let mut y = Tensor::zeros(&[n, m]);
    for b in 0..n {
        for o in 0..m {
            let mut acc = if d.bias_enabled {
                input(inputs, 2)?.at(&[o])
            } else {
                0.0
            };
            for i in 0..k {
                let weight = if d.transpose_weights {
                    w.at(&[o, i])
                } else {
                    w.at(&[i, o])
                };
                acc += x.at(&[b, i]) * weight;
            }
            y.set(&[b, o], acc);
        }
    }
    Ok(y)
}

/// `ElementwiseBinary` with numpy broadcasting: `y = a op b`, with Float32's meaning (the
/// suite's cases are Float32; Signed32's truncating division is not defined here). A maximum or
/// minimum with a NaN is NaN.
pub fn elementwise_binary(a: &Tensor, b: &Tensor, op: BinaryOperation) -> Result<Tensor, String> {
    let f = |a: f64, b: f64| match op {
        BinaryOperation::Add => a + b,
        BinaryOperation::Sub => a - b,
        BinaryOperation::Mul => a * b,
        BinaryOperation::Div => a / b,
        BinaryOperation::Maximum => {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else if a > b {
                a
            } else {
                b
            }
        }
        BinaryOperation::Minimum => {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else if a < b {
                a
            } else {
                b
            }
        }
        BinaryOperation::Power => a.powf(b),
        BinaryOperation::SquaredDifference => (a - b) * (a - b),
    };
    map2(a, b, f)
}

/// `y[i] = f(a[i], b[i])` over the numpy broadcast of `a` and `b`.
fn map2(a: &Tensor, b: &Tensor, f: impl Fn(f64, f64) -> f64) -> Result<Tensor, String> {
    let shape = broadcast_shape(&a.shape, &b.shape)?;
    let data = indices(&shape)
        .iter()
        .map(|i| f(a.at_broadcast(i), b.at_broadcast(i)))
        .collect();
    Ok(Tensor::new(&shape, data))
}

/// The Gauss error function, `2 / sqrt(pi) * integral from 0 to x of e^(-t^2) dt`: for
/// `|x| < 2` its Taylor series `2 / sqrt(pi) * sum over n of (-1)^n x^(2n+1) / (n! (2n+1))`,
/// summed until the terms stop mattering (the largest is below 3, so cancellation costs about
/// 1e-15); beyond, `1 - erfc(|x|)` with Laplace's continued fraction
/// `erfc(x) = e^(-x^2) / sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...))))`, 200
/// levels deep, evaluated from the bottom up.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    let a = x.abs();
    let value = if a < 2.0 {
        let mut sum = 0.0;
        let mut power = a; // a^(2n+1) / n!
        let mut n = 0.0;
        loop {
            let term = power / (2.0 * n + 1.0);
            sum += if (n as u64).is_multiple_of(2) {
                term
            } else {
                -term
            };
            if term <= 1e-17 * sum.abs() || n > 100.0 {
                break;
            }
            n += 1.0;
            power *= a * a / n;
        }
        2.0 / std::f64::consts::PI.sqrt() * sum
    } else {
        let mut fraction = a;
        for k in (1..=200).rev() {
            fraction = a + f64::from(k) / 2.0 / fraction;
        }
        1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / fraction
    };
    value.copysign(x)
}

/// `Activation`: each function as [`ActivationFunction`] defines it.
pub fn activation(x: &Tensor, d: &ActivationDescriptor) -> Tensor {
    let (a, b) = (f64::from(d.a), f64::from(d.b));
    let f = |v: f64| match d.function {
        ActivationFunction::ReLU => {
            if v > 0.0 {
                v
            } else {
                0.0
            }
        }
        // min(a, max(b, x))
        ActivationFunction::BoundedReLU => {
            let lower = if v > b { v } else { b };
            if lower < a { lower } else { a }
        }
        ActivationFunction::Sigmoid => 1.0 / (1.0 + (-v).exp()),
        ActivationFunction::TanH => a * (b * v).tanh(),
        ActivationFunction::LeakyReLU => {
            if v > 0.0 {
                v
            } else {
                a * v
            }
        }
        // x * relu6(x + 3) / 6
        ActivationFunction::HardSwish => {
            let relu6 = (v + 3.0).clamp(0.0, 6.0);
            v * relu6 / 6.0
        }
        ActivationFunction::Elu => {
            if v > 0.0 {
                v
            } else {
                a * (v.exp() - 1.0)
            }
        }
        // a = 0: x * Phi(x); a = 1: the tanh approximation.
        ActivationFunction::Gelu if d.a == 0.0 => v / 2.0 * (1.0 + erf(v / 2f64.sqrt())),
        ActivationFunction::Gelu => {
            let inner = (2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v);
            v / 2.0 * (1.0 + inner.tanh())
        }
    };
    let propagate_nan = |v: f64| if v.is_nan() { v } else { f(v) };
    Tensor::new(&x.shape, x.data.iter().map(|&v| propagate_nan(v)).collect())
}

/// `Pooling2d` (NCHW), and `DilatedPooling2d` with window cells `(dy, dx)` apart (1 for plain
/// pooling): output `(oy, ox)`'s window holds the cells `oy * sy - top + j * dy` (and the
/// same across) for `j` below the window size. A maximum is over the cells inside the input;
/// an average divides the sum of those by their count, or, with `count_include_pad`, by the
/// count of the window's cells inside the padded input (rows `-top .. h + bottom`), as ONNX
/// `AveragePool` does in ceil mode.
pub fn pooling2d(
    x: &Tensor,
    d: &Pooling2dDescriptor,
    dy: usize,
    dx: usize,
) -> Result<Tensor, String> {
    if d.layout != DataLayout::Nchw {
        return Err("the oracle's pooling is NCHW".into());
    }
    let [n, c, h, w] = dims4(x, "input")?;
    let (kh, kw) = (d.pool_height as usize, d.pool_width as usize);
    let (sy, sx) = (d.stride_y as usize, d.stride_x as usize);
    let p = d.padding;
    let (top, bottom, left, right) = (
        p.top as usize,
        p.bottom as usize,
        p.left as usize,
        p.right as usize,
    );
    let ceil = d.rounding == OutputRounding::Ceiling;
    let oh = window_count(h, (top, bottom), kh, sy, dy, ceil)?;
    let ow = window_count(w, (left, right), kw, sx, dx, ceil)?;
    let mut y = Tensor::zeros(&[n, c, oh, ow]);
    for b in 0..n {
        for ch in 0..c {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut inside = Vec::new();
                    let mut in_padded = 0usize;
                    for j in 0..kh {
                        // The row in padded coordinates (0 is the first padding row).
                        let py = oy * sy + j * dy;
                        for i in 0..kw {
                            let px = ox * sx + i * dx;
                            if py < top + h + bottom && px < left + w + right {
                                in_padded += 1;
                            }
                            if let (Some(iy), Some(ix)) = (
                                source(oy, sy, top, j, dy, h),
                                source(ox, sx, left, i, dx, w),
                            ) {
                                inside.push(x.at(&[b, ch, iy, ix]));
                            }
                        }
                    }
                    let value = match d.pool_type {
                        PoolingType::Max => inside.iter().fold(f64::NEG_INFINITY, |m, &v| {
                            if v > m || v.is_nan() { v } else { m }
                        }),
                        PoolingType::Average => {
                            let divisor = if d.count_include_pad {
                                in_padded
                            } else {
                                inside.len()
                            };
                            inside.iter().sum::<f64>() / divisor as f64
                        }
                    };
                    y.set(&[b, ch, oy, ox], value);
                }
            }
        }
    }
    Ok(y)
}

/// `axis` (negative counting from the end) as an index below `rank`.
fn normalize_axis(axis: i32, rank: usize) -> Result<usize, String> {
    let a = if axis < 0 { axis + rank as i32 } else { axis };
    usize::try_from(a)
        .ok()
        .filter(|&a| a < rank)
        .ok_or_else(|| format!("axis {axis} out of range for rank {rank}"))
}

/// `Softmax` along `axis`: `y = e^(beta x) / sum along the axis of e^(beta x)` (computed as
/// `e^(beta (x - max))`, the same value without overflow).
pub fn softmax(x: &Tensor, beta: f64, axis: i32) -> Result<Tensor, String> {
    let axis = normalize_axis(axis, x.shape.len())?;
    let mut y = Tensor::zeros(&x.shape);
    for index in indices(&x.shape) {
        let along = |k: usize| {
            let mut i = index.clone();
            i[axis] = k;
            x.at(&i)
        };
        let n = x.shape[axis];
        let max = (0..n).map(along).fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = (0..n).map(|k| (beta * (along(k) - max)).exp()).sum();
        y.set(&index, (beta * (x.at(&index) - max)).exp() / sum);
    }
    Ok(y)
}

/// `Reshape` (and `MemCopy`): the same elements in the same order, another shape.
pub fn reshape(x: &Tensor, shape: &[usize]) -> Result<Tensor, String> {
    if shape.iter().product::<usize>() != x.len() {
        return Err(format!("cannot reshape {:?} into {shape:?}", x.shape));
    }
    Ok(Tensor::new(shape, x.data.clone()))
}

/// `Flatten` at `axis`: `[product of dims before axis, product of the rest]`.
pub fn flatten(x: &Tensor, axis: usize) -> Result<Tensor, String> {
    let outer: usize = x.shape[..axis].iter().product();
    let inner: usize = x.shape[axis..].iter().product();
    reshape(x, &[outer, inner])
}

/// `Concat` along `axis`: the inputs one after another along it.
pub fn concat(inputs: &[Tensor], axis: usize) -> Result<Tensor, String> {
    let first = input(inputs, 0)?;
    let mut shape = first.shape.clone();
    shape[axis] = inputs.iter().map(|t| t.shape[axis]).sum();
    let mut y = Tensor::zeros(&shape);
    for index in indices(&shape) {
        let mut k = index[axis];
        for t in inputs {
            if k < t.shape[axis] {
                let mut i = index.clone();
                i[axis] = k;
                y.set(&index, t.at(&i));
                break;
            }
            k -= t.shape[axis];
        }
    }
    Ok(y)
}

/// `Transpose`: output dimension `k` is input dimension `perm[k]`, so
/// `y[o] = x[i]` with `i[perm[k]] = o[k]`.
pub fn transpose(x: &Tensor, perm: &[usize]) -> Result<Tensor, String> {
    if perm.len() != x.shape.len() {
        return Err(format!("{perm:?} does not permute {:?}", x.shape));
    }
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    let mut y = Tensor::zeros(&shape);
    for o in indices(&shape) {
        let mut i = vec![0; perm.len()];
        for (k, &p) in perm.iter().enumerate() {
            i[p] = o[k];
        }
        y.set(&o, x.at(&i));
    }
    Ok(y)
}

/// `Pad`: output index `o` along a dimension of size `n` with `before` added reads input
/// `o - before`; outside `0..n`, `Constant` gives the value, `Reflect` mirrors without
/// repeating the edge (`-1` reads `1`, `n` reads `n - 2`), `Edge` repeats the edge.
pub fn pad(x: &Tensor, d: &PadDescriptor) -> Result<Tensor, String> {
    if d.padding.len() != x.shape.len() {
        return Err("one padding pair per dimension".into());
    }
    let shape: Vec<usize> = x
        .shape
        .iter()
        .zip(d.padding.iter())
        .map(|(&n, p)| n + p.before as usize + p.after as usize)
        .collect();
    let mut y = Tensor::zeros(&shape);
    'element: for o in indices(&shape) {
        let mut i = Vec::with_capacity(o.len());
        for (k, p) in d.padding.iter().enumerate() {
            let n = x.shape[k] as i64;
            let mut at = o[k] as i64 - i64::from(p.before);
            if !(0..n).contains(&at) {
                match d.mode {
                    PadMode::Constant => {
                        y.set(&o, f64::from(d.value));
                        continue 'element;
                    }
                    PadMode::Reflect => {
                        at = if at < 0 { -at } else { 2 * (n - 1) - at };
                    }
                    PadMode::Edge => at = at.clamp(0, n - 1),
                }
            }
            i.push(at as usize);
        }
        y.set(&o, x.at(&i));
    }
    Ok(y)
}

/// `Reduce` (and `Mean`, which is `Reduce` with `Mean`) over `axes`: the reduced dimensions
/// dropped, or kept as 1. Sum, product, mean; a maximum or minimum is NaN when any element is.
pub fn reduce(
    x: &Tensor,
    axes: &[usize],
    keep_dims: bool,
    op: ReduceOperation,
) -> Result<Tensor, String> {
    if axes.iter().any(|&a| a >= x.shape.len()) {
        return Err(format!("axes {axes:?} out of range for {:?}", x.shape));
    }
    // The kept shape (reduced dimensions as 1), then the output's.
    let kept: Vec<usize> = (0..x.shape.len())
        .map(|d| if axes.contains(&d) { 1 } else { x.shape[d] })
        .collect();
    let mut groups: Vec<Vec<f64>> = vec![Vec::new(); kept.iter().product()];
    let grouping = Tensor::zeros(&kept);
    for i in indices(&x.shape) {
        let g: Vec<usize> = (0..i.len())
            .map(|d| if axes.contains(&d) { 0 } else { i[d] })
            .collect();
        groups[grouping.offset(&g)].push(x.at(&i));
    }
    let data = groups
        .iter()
        .map(|g| match op {
            ReduceOperation::Sum => g.iter().sum(),
            ReduceOperation::Prod => g.iter().product(),
            ReduceOperation::Mean => g.iter().sum::<f64>() / g.len() as f64,
            ReduceOperation::Max if g.iter().any(|v| v.is_nan()) => f64::NAN,
            ReduceOperation::Min if g.iter().any(|v| v.is_nan()) => f64::NAN,
            ReduceOperation::Max => g.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ReduceOperation::Min => g.iter().copied().fold(f64::INFINITY, f64::min),
        })
        .collect();
    let shape: Vec<usize> = if keep_dims {
        kept
    } else {
        (0..x.shape.len())
            .filter(|d| !axes.contains(d))
            .map(|d| x.shape[d])
            .collect()
    };
    Ok(Tensor::new(&shape, data))
}

/// `BatchNormalization` (inference, NCHW: channels on axis 1), inputs
/// `[x, scale, bias, mean, variance]`:
/// `y = (x - mean[c]) / sqrt(variance[c] + epsilon) * scale[c] + bias[c]`.
pub fn batch_normalization(
    inputs: &[Tensor],
    d: &BatchNormalizationDescriptor,
) -> Result<Tensor, String> {
    if d.layout != DataLayout::Nchw {
        return Err("the oracle's batch normalisation is NCHW".into());
    }
    let x = input(inputs, 0)?;
    let [scale, bias, mean, variance] = [1, 2, 3, 4].map(|slot| input(inputs, slot));
    let (scale, bias, mean, variance) = (scale?, bias?, mean?, variance?);
    let eps = f64::from(d.epsilon);
    let mut y = Tensor::zeros(&x.shape);
    for i in indices(&x.shape) {
        let c = [i[1]];
        let v =
            (x.at(&i) - mean.at(&c)) / (variance.at(&c) + eps).sqrt() * scale.at(&c) + bias.at(&c);
        y.set(&i, v);
    }
    Ok(y)
}

/// `ElementwiseUnary`: each function as [`UnaryOperation`] names it.
pub fn elementwise_unary(x: &Tensor, op: UnaryOperation) -> Tensor {
    let f = |v: f64| match op {
        UnaryOperation::Abs => v.abs(),
        UnaryOperation::Neg => -v,
        UnaryOperation::Exp => v.exp(),
        UnaryOperation::Log => v.ln(),
        UnaryOperation::Sqrt => v.sqrt(),
        UnaryOperation::Rsqrt => 1.0 / v.sqrt(),
        UnaryOperation::Reciprocal => 1.0 / v,
        UnaryOperation::Sin => v.sin(),
        UnaryOperation::Cos => v.cos(),
        UnaryOperation::Erf => erf(v),
        UnaryOperation::Ceil => v.ceil(),
        UnaryOperation::Floor => v.floor(),
    };
    Tensor::new(&x.shape, x.data.iter().map(|&v| f(v)).collect())
}

/// `Normalization` (ONNX `LRN`, NCHW): for channel `c` of `C`, with
/// `lo = max(0, c - (size - 1) / 2)` and `hi = min(C - 1, c + size / 2)`,
/// `y = x / (k + alpha / size * sum over lo..=hi of x^2) ^ beta`.
pub fn local_response_normalization(
    x: &Tensor,
    d: &NormalizationDescriptor,
) -> Result<Tensor, String> {
    let [_, channels, _, _] = dims4(x, "input")?;
    let size = d.size as usize;
    let (alpha, beta, k) = (f64::from(d.alpha), f64::from(d.beta), f64::from(d.k));
    let mut y = Tensor::zeros(&x.shape);
    for i in indices(&x.shape) {
        let c = i[1];
        let lo = c.saturating_sub((size - 1) / 2);
        let hi = (c + size / 2).min(channels - 1);
        let mut sum = 0.0;
        for j in lo..=hi {
            let v = x.at(&[i[0], j, i[2], i[3]]);
            sum += v * v;
        }
        y.set(&i, x.at(&i) / (k + alpha / size as f64 * sum).powf(beta));
    }
    Ok(y)
}

/// `BatchMatMul`: `y[batch.., i, j] = sum over k of A[batch.., i, k] * B[batch.., k, j]`, the
/// batch dimensions broadcast as numpy does; `A` is `a` or, with `transpose_a`, `a`'s matrices
/// transposed (so `a` is `[.., K, M]`), and the same for `B`.
pub fn batch_matmul(a: &Tensor, b: &Tensor, d: &BatchMatMulDescriptor) -> Result<Tensor, String> {
    let (ra, rb) = (a.shape.len(), b.shape.len());
    if ra < 2 || rb < 2 {
        return Err("BatchMatMul operands have rank 2 or more".into());
    }
    let (m, k) = if d.transpose_a {
        (a.shape[ra - 1], a.shape[ra - 2])
    } else {
        (a.shape[ra - 2], a.shape[ra - 1])
    };
    let n = if d.transpose_b {
        b.shape[rb - 2]
    } else {
        b.shape[rb - 1]
    };
    let batch = broadcast_shape(&a.shape[..ra - 2], &b.shape[..rb - 2])?;
    // The batch part of an operand's index for output batch index `o`.
    let batch_index = |shape: &[usize], o: &[usize]| -> Vec<usize> {
        let skip = o.len() - shape.len();
        shape
            .iter()
            .zip(&o[skip..])
            .map(|(&d, &i)| if d == 1 { 0 } else { i })
            .collect()
    };
    let mut shape = batch.clone();
    shape.extend([m, n]);
    let mut y = Tensor::zeros(&shape);
    for o in indices(&batch) {
        let ab = batch_index(&a.shape[..ra - 2], &o);
        let bb = batch_index(&b.shape[..rb - 2], &o);
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0.0;
                for kk in 0..k {
                    let mut ai = ab.clone();
                    ai.extend(if d.transpose_a { [kk, i] } else { [i, kk] });
                    let mut bi = bb.clone();
                    bi.extend(if d.transpose_b { [j, kk] } else { [kk, j] });
                    acc += a.at(&ai) * b.at(&bi);
                }
                let mut yi = o.clone();
                yi.extend([i, j]);
                y.set(&yi, acc);
            }
        }
    }
    Ok(y)
}

/// `Slice`: output index `o` of dimension `d` reads input index `begin[d] + o * step[d]`.
pub fn slice(x: &Tensor, d: &SliceDescriptor) -> Result<Tensor, String> {
    let shape: Vec<usize> = d.size.iter().map(|&s| s as usize).collect();
    if shape.len() != x.shape.len() || d.begin.len() != shape.len() || d.step.len() != shape.len() {
        return Err("one begin, step and size per dimension".into());
    }
    let mut y = Tensor::zeros(&shape);
    for o in indices(&shape) {
        let i: Option<Vec<usize>> = (0..o.len())
            .map(|k| {
                let at = i64::from(d.begin[k]) + o[k] as i64 * i64::from(d.step[k]);
                usize::try_from(at).ok().filter(|&at| at < x.shape[k])
            })
            .collect();
        y.set(&o, x.at(&i.ok_or("the slice reads outside the input")?));
    }
    Ok(y)
}

/// The source coordinate of output coordinate `o` along an axis of `input` → `output`
/// elements with `scale`, as [`CoordinateTransformation`] defines it.
fn resize_source(
    o: usize,
    input: usize,
    output: usize,
    scale: f64,
    mode: CoordinateTransformation,
) -> f64 {
    let o = o as f64;
    match mode {
        CoordinateTransformation::HalfPixel => (o + 0.5) / scale - 0.5,
        CoordinateTransformation::Asymmetric => o / scale,
        CoordinateTransformation::AlignCorners if output == 1 => 0.0,
        CoordinateTransformation::AlignCorners => o * (input - 1) as f64 / (output - 1) as f64,
        CoordinateTransformation::PytorchHalfPixel if output == 1 => 0.0,
        CoordinateTransformation::PytorchHalfPixel => (o + 0.5) / scale - 0.5,
    }
}

/// `Resize` (NCHW) of the height and width: each output pixel's source coordinates by the
/// coordinate transformation, then either the nearest input pixel (rounded as
/// [`NearestRounding`] says, clamped to the input), or the bilinear interpolation of the four
/// neighbours of the source point clamped to `[0, size - 1]`.
pub fn resize(x: &Tensor, d: &ResizeDescriptor) -> Result<Tensor, String> {
    let [n, c, h, w] = dims4(x, "input")?;
    let (oh, ow) = (d.height as usize, d.width as usize);
    let round = |v: f64| -> f64 {
        let half = v - v.floor() == 0.5;
        match d.nearest {
            NearestRounding::RoundPreferFloor if half => v.floor(),
            NearestRounding::RoundPreferCeil if half => v.ceil(),
            NearestRounding::RoundPreferFloor | NearestRounding::RoundPreferCeil => v.round(),
            NearestRounding::Floor => v.floor(),
            NearestRounding::Ceil => v.ceil(),
        }
    };
    let nearest = |v: f64, size: usize| round(v).clamp(0.0, (size - 1) as f64) as usize;
    let mut y = Tensor::zeros(&[n, c, oh, ow]);
    for i in indices(&[n, c, oh, ow]) {
        let sy = resize_source(i[2], h, oh, f64::from(d.scale_y), d.coordinates);
        let sx = resize_source(i[3], w, ow, f64::from(d.scale_x), d.coordinates);
        let value = match d.method {
            ResizeMethod::Nearest => x.at(&[i[0], i[1], nearest(sy, h), nearest(sx, w)]),
            ResizeMethod::Linear => {
                let sy = sy.clamp(0.0, (h - 1) as f64);
                let sx = sx.clamp(0.0, (w - 1) as f64);
                let (y0, x0) = (sy.floor() as usize, sx.floor() as usize);
                let (y1, x1) = ((y0 + 1).min(h - 1), (x0 + 1).min(w - 1));
                let (fy, fx) = (sy - y0 as f64, sx - x0 as f64);
                let p = |yy: usize, xx: usize| x.at(&[i[0], i[1], yy, xx]);
                (1.0 - fy) * ((1.0 - fx) * p(y0, x0) + fx * p(y0, x1))
                    + fy * ((1.0 - fx) * p(y1, x0) + fx * p(y1, x1))
            }
        };
        y.set(&i, value);
    }
    Ok(y)
}

/// `TransposeConvolution2d` (NCHW, ONNX `ConvTranspose`), weights
/// `[C, M / groups, kh, kw]`: input pixel `x[n, c, iy, ix]` adds `x * w[c, m', ky, kx]` to
/// output pixel `y[n, g * M / groups + m', iy * sy - top + ky * dy, ix * sx - left + kx * dx]`
/// (`g` the group of `c`) when that pixel lies in the output, whose size per axis is
/// `(in - 1) * stride - (begin + end padding) + dilation * (k - 1) + output_padding + 1`.
pub fn transpose_convolution2d(
    inputs: &[Tensor],
    d: &TransposeConvolution2dDescriptor,
) -> Result<Tensor, String> {
    let (x, w) = (input(inputs, 0)?, input(inputs, 1)?);
    let [n, c, h, wd] = dims4(x, "input")?;
    let [_, m_per_group, kh, kw] = dims4(w, "weights")?;
    let groups = d.groups as usize;
    let c_per_group = c / groups;
    let m = m_per_group * groups;
    let (sy, sx) = (d.stride_y as i64, d.stride_x as i64);
    let (dy, dx) = (d.dilation_y as i64, d.dilation_x as i64);
    let p = d.padding;
    let size = |input: usize, stride: i64, pads: i64, dil: i64, k: usize, extra: u32| {
        (input as i64 - 1) * stride - pads + dil * (k as i64 - 1) + i64::from(extra) + 1
    };
    let oh = size(
        h,
        sy,
        i64::from(p.top + p.bottom),
        dy,
        kh,
        d.output_padding_y,
    );
    let ow = size(
        wd,
        sx,
        i64::from(p.left + p.right),
        dx,
        kw,
        d.output_padding_x,
    );
    if oh < 0 || ow < 0 {
        return Err("negative output size".into());
    }
    let (oh, ow) = (oh as usize, ow as usize);
    let mut y = Tensor::zeros(&[n, m, oh, ow]);
    if d.bias_enabled {
        let bias = input(inputs, 2)?;
        for i in indices(&y.shape.clone()) {
            y.set(&i, bias.at(&[i[1]]));
        }
    }
    for b in 0..n {
        for ic in 0..c {
            let group = ic / c_per_group;
            for iy in 0..h {
                for ix in 0..wd {
                    let v = x.at(&[b, ic, iy, ix]);
                    for mg in 0..m_per_group {
                        let oc = group * m_per_group + mg;
                        for ky in 0..kh {
                            let oy = iy as i64 * sy - i64::from(p.top) + ky as i64 * dy;
                            if !(0..oh as i64).contains(&oy) {
                                continue;
                            }
                            for kx in 0..kw {
                                let ox = ix as i64 * sx - i64::from(p.left) + kx as i64 * dx;
                                if !(0..ow as i64).contains(&ox) {
                                    continue;
                                }
                                let at = [b, oc, oy as usize, ox as usize];
                                let sum = y.at(&at) + v * w.at(&[ic, mg, ky, kx]);
                                y.set(&at, sum);
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(y)
}

/// `Gather` along `axis`: `y[i.., j.., k..] = data[i.., indices[j..], k..]`, a negative index
/// counting from the end.
pub fn gather(data: &Tensor, idx: &Tensor, axis: usize) -> Result<Tensor, String> {
    let mut shape = data.shape[..axis].to_vec();
    shape.extend(&idx.shape);
    shape.extend(&data.shape[axis + 1..]);
    let d = data.shape[axis] as i64;
    let mut y = Tensor::zeros(&shape);
    for o in indices(&shape) {
        let j = &o[axis..axis + idx.shape.len()];
        let raw = idx.at(j) as i64;
        let at = if raw < 0 { raw + d } else { raw };
        if !(0..d).contains(&at) {
            return Err(format!("index {raw} outside [-{d}, {d})"));
        }
        let mut i = o[..axis].to_vec();
        i.push(at as usize);
        i.extend(&o[axis + idx.shape.len()..]);
        y.set(&o, data.at(&i));
    }
    Ok(y)
}

/// `ArgMinMax` along `axis`: the index (as a value, Signed32 in the output) of the largest or
/// smallest element, the first among equals (the last with `select_last_index`); a NaN counts
/// as larger than everything for `Max` and smaller for `Min`.
pub fn arg_min_max(x: &Tensor, d: &ArgMinMaxDescriptor) -> Result<Tensor, String> {
    let axis = d.axis as usize;
    let n = x.shape[axis];
    // A key in which "better" is "greater", NaN included.
    let key = |v: f64| -> (i8, f64) {
        match (d.function, v.is_nan()) {
            (ArgMinMaxFunction::Max, true) => (1, 0.0),
            (ArgMinMaxFunction::Max, false) => (0, v),
            (ArgMinMaxFunction::Min, true) => (1, 0.0),
            (ArgMinMaxFunction::Min, false) => (0, -v),
        }
    };
    let mut kept = x.shape.clone();
    kept[axis] = 1;
    let mut y = Tensor::zeros(&kept);
    for o in indices(&kept) {
        let at = |k: usize| {
            let mut i = o.clone();
            i[axis] = k;
            key(x.at(&i))
        };
        let mut best = 0;
        for k in 1..n {
            let better = if d.select_last_index {
                at(k) >= at(best)
            } else {
                at(k) > at(best)
            };
            if better {
                best = k;
            }
        }
        y.set(&o, best as f64);
    }
    if !d.keep_dims {
        kept.remove(axis);
        y = reshape(&y, &kept)?;
    }
    Ok(y)
}

/// The mean and the biased variance of `values`.
fn mean_variance(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    (mean, variance)
}

/// `LayerNormalization`, inputs `[x, scale, bias?]`: each group of the elements sharing their
/// indices before `axis` is normalised, `y = (x - mean) / sqrt(variance + epsilon) * scale +
/// bias` with the group's mean and biased variance, `scale` and `bias` indexed by the
/// position in the group.
pub fn layer_normalization(
    inputs: &[Tensor],
    axis: usize,
    epsilon: f64,
    bias_enabled: bool,
) -> Result<Tensor, String> {
    let (x, scale) = (input(inputs, 0)?, input(inputs, 1)?);
    let inner: usize = x.shape[axis..].iter().product();
    let mut data = Vec::with_capacity(x.len());
    for group in x.data.chunks(inner.max(1)) {
        let (mean, variance) = mean_variance(group);
        for (j, &v) in group.iter().enumerate() {
            let bias = if bias_enabled {
                input(inputs, 2)?.data[j]
            } else {
                0.0
            };
            data.push((v - mean) / (variance + epsilon).sqrt() * scale.data[j] + bias);
        }
    }
    Ok(Tensor::new(&x.shape, data))
}

/// `InstanceNormalization`, inputs `[x, scale, bias]` with `x` `[N, C, ...]`: each `x[n, c]`
/// normalised over its other dimensions as [`layer_normalization`] does, then
/// `* scale[c] + bias[c]`.
pub fn instance_normalization(inputs: &[Tensor], epsilon: f64) -> Result<Tensor, String> {
    let [x, scale, bias] = [0, 1, 2].map(|slot| input(inputs, slot));
    let (x, scale, bias) = (x?, scale?, bias?);
    let channels = x.shape[1];
    let plane: usize = x.shape[2..].iter().product();
    let mut data = Vec::with_capacity(x.len());
    for (k, group) in x.data.chunks(plane.max(1)).enumerate() {
        let c = k % channels;
        let (mean, variance) = mean_variance(group);
        for &v in group {
            data.push((v - mean) / (variance + epsilon).sqrt() * scale.data[c] + bias.data[c]);
        }
    }
    Ok(Tensor::new(&x.shape, data))
}

/// `Cast` to `to`: to Signed32, toward zero and saturated, NaN giving 0; to Boolean, 1 for
/// anything but zero (NaN too); to Float32, the value (rounded to `f32` by [`compare`]).
/// Booleans are already 0 or 1.
pub fn cast(x: &Tensor, to: DataType) -> Result<Tensor, String> {
    let f = |v: f64| -> Result<f64, String> {
        Ok(match to {
            DataType::Float32 => v,
            DataType::Signed32 if v.is_nan() => 0.0,
            DataType::Signed32 => v.trunc().clamp(f64::from(i32::MIN), f64::from(i32::MAX)),
            DataType::Boolean => f64::from(u8::from(v != 0.0)),
            other => return Err(format!("the oracle casts to no {other}")),
        })
    };
    let data = x.data.iter().map(|&v| f(v)).collect::<Result<_, _>>()?;
    Ok(Tensor::new(&x.shape, data))
}

/// `Comparison` with numpy broadcasting: 1 where `a op b`, else 0 (NaN compares unequal to
/// everything).
pub fn comparison(a: &Tensor, b: &Tensor, op: ComparisonOperation) -> Result<Tensor, String> {
    map2(a, b, |a, b| {
        let holds = match op {
            ComparisonOperation::Equal => a == b,
            ComparisonOperation::Greater => a > b,
            ComparisonOperation::GreaterOrEqual => a >= b,
            ComparisonOperation::Less => a < b,
            ComparisonOperation::LessOrEqual => a <= b,
            ComparisonOperation::NotEqual => a != b,
        };
        f64::from(u8::from(holds))
    })
}

/// `Where`: `condition ? a : b`, all three broadcast as numpy does.
pub fn select(condition: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor, String> {
    let shape = broadcast_shape(&condition.shape, &broadcast_shape(&a.shape, &b.shape)?)?;
    let data = indices(&shape)
        .iter()
        .map(|i| {
            if condition.at_broadcast(i) != 0.0 {
                a.at_broadcast(i)
            } else {
                b.at_broadcast(i)
            }
        })
        .collect();
    Ok(Tensor::new(&shape, data))
}

/// `BroadcastTo`: `x` read with numpy broadcasting at every index of `shape`.
pub fn broadcast_to(x: &Tensor, shape: &[usize]) -> Result<Tensor, String> {
    if broadcast_shape(&x.shape, shape)? != shape {
        return Err(format!("{:?} does not broadcast to {shape:?}", x.shape));
    }
    let data = indices(shape).iter().map(|i| x.at_broadcast(i)).collect();
    Ok(Tensor::new(shape, data))
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

// Inputs are written inline as `&[x.clone()]`, the same form as the cases with several.
#[allow(clippy::cloned_ref_to_slice_refs)]
#[cfg(test)]
mod tests {
    //! Each op against numbers computed by hand from its definition, on tiny inputs.

    use backplane_api::{
        ArgMinMaxFunction, ConcatDescriptor, FlattenDescriptor, GatherDescriptor,
        InstanceNormalizationDescriptor, LayerNormalizationDescriptor, MeanDescriptor, PadPair,
        Padding2d, ReduceDescriptor, ReshapeDescriptor, SoftmaxDescriptor, TransposeDescriptor,
    };

    use super::*;

    fn t(shape: &[usize], data: &[f64]) -> Tensor {
        Tensor::new(shape, data.to_vec())
    }

    /// `evaluate(layer, inputs)`'s values, checked to have `shape`.
    fn run(layer: LayerDescriptor, inputs: &[Tensor], shape: &[usize]) -> Vec<f64> {
        let y = evaluate(&layer, inputs).unwrap();
        assert_eq!(y.shape, shape, "{layer:?}");
        y.data
    }

    fn close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
        }
    }

    fn one_to(n: usize) -> Vec<f64> {
        (1..=n).map(|v| v as f64).collect()
    }

    #[test]
    fn tensor_indexing_and_broadcast_reads() {
        let x = t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(x.offset(&[1, 2]), 5);
        assert_eq!(x.at(&[1, 0]), 4.0);
        let b = t(&[2, 1], &[10.0, 20.0]);
        assert_eq!(b.at_broadcast(&[1, 2]), 20.0);
        assert_eq!(b.at_broadcast(&[7, 1, 0]), 20.0);
        assert_eq!(indices(&[2, 2]), [[0, 0], [0, 1], [1, 0], [1, 1]]);
        assert_eq!(broadcast_shape(&[2, 1, 4], &[3, 1]).unwrap(), [2, 3, 4]);
        assert!(broadcast_shape(&[2], &[3]).is_err());
    }

    #[test]
    fn constant_by_hand() {
        let c = ConstTensor::from_f32(&[2], &[1.5, -2.0]);
        close(&run(LayerDescriptor::Constant(c), &[], &[2]), &[1.5, -2.0]);
    }

    fn conv(
        padding: Padding2d,
        stride: u32,
        dilation_x: u32,
        groups: u32,
        bias: bool,
    ) -> Convolution2dDescriptor {
        Convolution2dDescriptor {
            padding,
            stride_x: stride,
            stride_y: stride,
            dilation_x,
            groups,
            bias_enabled: bias,
            ..Default::default()
        }
    }

    const PAD1: Padding2d = Padding2d {
        left: 1,
        right: 1,
        top: 1,
        bottom: 1,
    };

    #[test]
    fn convolution_by_hand() {
        let x = t(&[1, 1, 3, 3], &one_to(9));
        // A diagonal 2x2 kernel adds x[y][x] and x[y+1][x+1]; plus the bias 0.5.
        let w = t(&[1, 1, 2, 2], &[1.0, 0.0, 0.0, 1.0]);
        let d = LayerDescriptor::Convolution2d(conv(Padding2d::default(), 1, 1, 1, true));
        let y = run(d, &[x.clone(), w, t(&[1], &[0.5])], &[1, 1, 2, 2]);
        close(&y, &[6.5, 8.5, 12.5, 14.5]);
        // Padding 1, stride 2, a 2x2 kernel of ones: windows at rows/cols -1..=0 and 1..=2.
        let ones = t(&[1, 1, 2, 2], &[1.0; 4]);
        let d = LayerDescriptor::Convolution2d(conv(PAD1, 2, 1, 1, false));
        close(&run(d, &[x, ones], &[1, 1, 2, 2]), &[1.0, 5.0, 11.0, 28.0]);
        // Dilation 2 across: x[i] + x[i + 2].
        let row = t(&[1, 1, 1, 5], &one_to(5));
        let d = LayerDescriptor::Convolution2d(conv(Padding2d::default(), 1, 2, 1, false));
        let y = run(d, &[row, t(&[1, 1, 1, 2], &[1.0, 1.0])], &[1, 1, 1, 3]);
        close(&y, &[4.0, 6.0, 8.0]);
        // Two groups of one channel each: channel 0 * 10, channel 1 * 100.
        let d = LayerDescriptor::Convolution2d(conv(Padding2d::default(), 1, 1, 2, false));
        let y = run(
            d,
            &[
                t(&[1, 2, 1, 1], &[2.0, 3.0]),
                t(&[2, 1, 1, 1], &[10.0, 100.0]),
            ],
            &[1, 2, 1, 1],
        );
        close(&y, &[20.0, 300.0]);
    }

    #[test]
    fn depthwise_convolution_by_hand() {
        // Multiplier 2: output channels 0 and 1 read input channel 0, 2 and 3 read channel 1.
        let d = LayerDescriptor::DepthwiseConvolution2d(conv(Padding2d::default(), 1, 1, 1, true));
        let y = run(
            d,
            &[
                t(&[1, 2, 1, 1], &[2.0, 3.0]),
                t(&[4, 1, 1, 1], &[1.0, 2.0, 3.0, 4.0]),
                t(&[4], &[0.0, 0.0, 0.0, 1.0]),
            ],
            &[1, 4, 1, 1],
        );
        close(&y, &[2.0, 4.0, 9.0, 13.0]);
    }

    #[test]
    fn fully_connected_by_hand() {
        let x = t(&[1, 2], &[1.0, 2.0]);
        let bias = t(&[3], &[1.0, 1.0, 1.0]);
        let fc = |transpose_weights| {
            LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
                bias_enabled: true,
                transpose_weights,
            })
        };
        let w = t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        close(
            &run(fc(false), &[x.clone(), w, bias.clone()], &[1, 3]),
            &[10.0, 13.0, 16.0],
        );
        let wt = t(&[3, 2], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        close(&run(fc(true), &[x, wt, bias], &[1, 3]), &[10.0, 13.0, 16.0]);
    }

    #[test]
    fn elementwise_binary_by_hand() {
        let a = t(&[2, 1], &[1.0, 2.0]);
        let b = t(&[3], &[4.0, 2.0, 0.5]);
        let op = |op, want: &[f64]| {
            let y = run(
                LayerDescriptor::ElementwiseBinary(op),
                &[a.clone(), b.clone()],
                &[2, 3],
            );
            close(&y, want);
        };
        use BinaryOperation::*;
        op(Add, &[5.0, 3.0, 1.5, 6.0, 4.0, 2.5]);
        op(Sub, &[-3.0, -1.0, 0.5, -2.0, 0.0, 1.5]);
        op(Mul, &[4.0, 2.0, 0.5, 8.0, 4.0, 1.0]);
        op(Div, &[0.25, 0.5, 2.0, 0.5, 1.0, 4.0]);
        op(Maximum, &[4.0, 2.0, 1.0, 4.0, 2.0, 2.0]);
        op(Minimum, &[1.0, 1.0, 0.5, 2.0, 2.0, 0.5]);
        op(Power, &[1.0, 1.0, 1.0, 16.0, 4.0, 2f64.sqrt()]);
        op(SquaredDifference, &[9.0, 1.0, 0.25, 4.0, 0.0, 2.25]);
    }

    #[test]
    fn activations_by_hand() {
        let act = |function, a, b, x: f64| {
            let d = ActivationDescriptor { function, a, b };
            run(LayerDescriptor::Activation(d), &[t(&[1], &[x])], &[1])[0]
        };
        use ActivationFunction::*;
        assert_eq!(act(ReLU, 0.0, 0.0, -2.0), 0.0);
        assert_eq!(act(ReLU, 0.0, 0.0, 1.5), 1.5);
        assert_eq!(act(BoundedReLU, 6.0, 0.0, 7.0), 6.0);
        assert_eq!(act(BoundedReLU, 6.0, 0.0, -1.0), 0.0);
        assert_eq!(act(BoundedReLU, 6.0, 0.0, 2.5), 2.5);
        assert_eq!(act(Sigmoid, 0.0, 0.0, 0.0), 0.5);
        // 1 / (1 + e^-ln 3) = 1 / (1 + 1/3).
        close(&[act(Sigmoid, 0.0, 0.0, 3f64.ln())], &[0.75]);
        assert_eq!(act(TanH, 2.0, 1.0, 0.0), 0.0);
        close(&[act(LeakyReLU, 0.5, 0.0, -2.0)], &[-1.0]);
        close(&[act(HardSwish, 0.0, 0.0, 1.0)], &[4.0 / 6.0]);
        assert_eq!(act(HardSwish, 0.0, 0.0, -4.0), 0.0);
        assert_eq!(act(HardSwish, 0.0, 0.0, 4.0), 4.0);
        close(&[act(Elu, 1.0, 0.0, -1.0)], &[-0.632_120_558_828_557_7]);
        assert_eq!(act(Elu, 1.0, 0.0, 2.0), 2.0);
        // x * Phi(x) at 1: Phi(1) = 0.841344746068543 (the normal distribution's table).
        close(&[act(Gelu, 0.0, 0.0, 1.0)], &[0.841_344_746_068_542_9]);
        assert_eq!(act(Gelu, 1.0, 0.0, 0.0), 0.0);
        assert!(act(ReLU, 0.0, 0.0, f64::NAN).is_nan());
    }

    #[test]
    fn erf_by_hand() {
        // Values from Abramowitz and Stegun's table 7.1.
        assert_eq!(erf(0.0), 0.0);
        assert!((erf(0.5) - 0.520_499_877_813_046_5).abs() < 1e-15);
        assert!((erf(1.0) - 0.842_700_792_949_714_9).abs() < 1e-15);
        assert!((erf(-2.0) + 0.995_322_265_018_952_7).abs() < 1e-15);
        assert!((erf(3.5) - 0.999_999_256_901_627_6).abs() < 1e-15);
        // erfc(5) = 1.5374597944280349e-12, seen through erf's last bits.
        assert!((1.0 - erf(5.0) - 1.537_459_794_428_035e-12).abs() < 1e-15);
        assert_eq!(erf(10.0), 1.0);
    }

    fn pool(
        pool_type: PoolingType,
        padding: Padding2d,
        k: u32,
        s: u32,
        ceil: bool,
        include: bool,
    ) -> Pooling2dDescriptor {
        Pooling2dDescriptor {
            pool_type,
            padding,
            pool_width: k,
            pool_height: k,
            stride_x: s,
            stride_y: s,
            rounding: if ceil {
                OutputRounding::Ceiling
            } else {
                OutputRounding::Floor
            },
            count_include_pad: include,
            layout: DataLayout::Nchw,
        }
    }

    #[test]
    fn pooling_by_hand() {
        use PoolingType::*;
        let p = |d| LayerDescriptor::Pooling2d(d);
        let none = Padding2d::default();
        let x16 = t(&[1, 1, 4, 4], &one_to(16));
        close(
            &run(
                p(pool(Max, none, 2, 2, false, false)),
                &[x16.clone()],
                &[1, 1, 2, 2],
            ),
            &[6.0, 8.0, 14.0, 16.0],
        );
        close(
            &run(
                p(pool(Average, none, 2, 2, false, false)),
                &[x16],
                &[1, 1, 2, 2],
            ),
            &[3.5, 5.5, 11.5, 13.5],
        );
        // Ceil mode on 3x3: the second window of each axis holds one input row/column.
        let x9 = t(&[1, 1, 3, 3], &one_to(9));
        close(
            &run(
                p(pool(Max, none, 2, 2, true, false)),
                &[x9.clone()],
                &[1, 1, 2, 2],
            ),
            &[5.0, 6.0, 8.0, 9.0],
        );
        close(
            &run(
                p(pool(Average, none, 2, 2, true, false)),
                &[x9.clone()],
                &[1, 1, 2, 2],
            ),
            &[3.0, 4.5, 7.5, 9.0],
        );
        // Without ceil mode the partial windows are not there.
        close(
            &run(p(pool(Max, none, 2, 2, false, false)), &[x9], &[1, 1, 1, 1]),
            &[5.0],
        );
        // Padding 1: each 2x2 window holds one input cell and three padding cells.
        let x4 = t(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
        close(
            &run(
                p(pool(Average, PAD1, 2, 2, false, true)),
                &[x4.clone()],
                &[1, 1, 2, 2],
            ),
            &[0.25, 0.5, 0.75, 1.0],
        );
        close(
            &run(
                p(pool(Average, PAD1, 2, 2, false, false)),
                &[x4],
                &[1, 1, 2, 2],
            ),
            &[1.0, 2.0, 3.0, 4.0],
        );
        // Ceil mode with count_include_pad: a 1x4 row padded 1 on the left, window 2, stride 2:
        // padded [p 1 2 3 4]; windows [p 1], [2 3] and [4 .], the last reaching one cell past
        // the padded input, which does not count in the divisor.
        let row = t(&[1, 1, 1, 4], &[1.0, 2.0, 3.0, 4.0]);
        let d = |include| Pooling2dDescriptor {
            padding: Padding2d {
                left: 1,
                right: 0,
                top: 0,
                bottom: 0,
            },
            pool_height: 1,
            stride_y: 1,
            ..pool(Average, none, 2, 2, true, include)
        };
        close(
            &run(p(d(true)), &[row.clone()], &[1, 1, 1, 3]),
            &[0.5, 2.5, 4.0],
        );
        close(&run(p(d(false)), &[row], &[1, 1, 1, 3]), &[1.0, 2.5, 4.0]);
    }

    #[test]
    fn dilated_pooling_by_hand() {
        let row = t(&[1, 1, 1, 5], &one_to(5));
        let d = |pool_type| {
            LayerDescriptor::DilatedPooling2d(backplane_api::DilatedPooling2dDescriptor {
                pooling: Pooling2dDescriptor {
                    pool_height: 1,
                    ..pool(pool_type, Padding2d::default(), 2, 1, false, false)
                },
                dilation_x: 2,
                dilation_y: 1,
            })
        };
        close(
            &run(d(PoolingType::Max), &[row.clone()], &[1, 1, 1, 3]),
            &[3.0, 4.0, 5.0],
        );
        close(
            &run(d(PoolingType::Average), &[row], &[1, 1, 1, 3]),
            &[2.0, 3.0, 4.0],
        );
    }

    #[test]
    fn softmax_by_hand() {
        let s = |beta, axis| LayerDescriptor::Softmax(SoftmaxDescriptor { beta, axis });
        close(
            &run(s(1.0, -1), &[t(&[1, 2], &[0.0, 3f64.ln()])], &[1, 2]),
            &[0.25, 0.75],
        );
        close(
            &run(s(1.0, 0), &[t(&[2, 1], &[0.0, 3f64.ln()])], &[2, 1]),
            &[0.25, 0.75],
        );
        close(
            &run(s(2.0, 1), &[t(&[1, 2], &[0.0, 3f64.ln() / 2.0])], &[1, 2]),
            &[0.25, 0.75],
        );
    }

    #[test]
    fn data_movement_by_hand() {
        let x = t(&[2, 3], &one_to(6));
        let y = run(
            LayerDescriptor::Reshape(ReshapeDescriptor {
                target_shape: vec![3, 2].into(),
            }),
            &[x.clone()],
            &[3, 2],
        );
        close(&y, &one_to(6));
        let y = run(
            LayerDescriptor::Flatten(FlattenDescriptor { axis: 1 }),
            &[t(&[2, 1, 2], &one_to(4))],
            &[2, 2],
        );
        close(&y, &one_to(4));
        let y = run(
            LayerDescriptor::Transpose(TransposeDescriptor {
                permutation: vec![1, 0].into(),
            }),
            &[x],
            &[3, 2],
        );
        close(&y, &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        let y = run(
            LayerDescriptor::Concat(ConcatDescriptor { axis: 1 }),
            &[t(&[2, 1], &[1.0, 2.0]), t(&[2, 2], &[3.0, 4.0, 5.0, 6.0])],
            &[2, 3],
        );
        close(&y, &[1.0, 3.0, 4.0, 2.0, 5.0, 6.0]);
    }

    #[test]
    fn pad_by_hand() {
        let p = |mode| {
            LayerDescriptor::Pad(PadDescriptor {
                padding: vec![PadPair {
                    before: 2,
                    after: 1,
                }]
                .into(),
                value: 0.5,
                mode,
            })
        };
        let x = t(&[3], &[1.0, 2.0, 3.0]);
        close(
            &run(p(PadMode::Constant), &[x.clone()], &[6]),
            &[0.5, 0.5, 1.0, 2.0, 3.0, 0.5],
        );
        close(
            &run(p(PadMode::Reflect), &[x.clone()], &[6]),
            &[3.0, 2.0, 1.0, 2.0, 3.0, 2.0],
        );
        close(
            &run(p(PadMode::Edge), &[x], &[6]),
            &[1.0, 1.0, 1.0, 2.0, 3.0, 3.0],
        );
    }

    #[test]
    fn mean_and_reduce_by_hand() {
        let x = t(&[2, 2], &[1.0, 2.0, 3.0, 5.0]);
        let y = run(
            LayerDescriptor::Mean(MeanDescriptor {
                axes: vec![1].into(),
                keep_dims: true,
            }),
            &[x.clone()],
            &[2, 1],
        );
        close(&y, &[1.5, 4.0]);
        let r = |operation, want: &[f64]| {
            let d = LayerDescriptor::Reduce(ReduceDescriptor {
                operation,
                axes: vec![0].into(),
                keep_dims: false,
            });
            close(&run(d, &[x.clone()], &[2]), want);
        };
        use ReduceOperation::*;
        r(Sum, &[4.0, 7.0]);
        r(Max, &[3.0, 5.0]);
        r(Min, &[1.0, 2.0]);
        r(Mean, &[2.0, 3.5]);
        r(Prod, &[3.0, 10.0]);
        let nan = reduce(&t(&[2], &[1.0, f64::NAN]), &[0], false, Max).unwrap();
        assert!(nan.data[0].is_nan());
    }

    #[test]
    fn batch_normalization_by_hand() {
        // (3 - 1) / sqrt(3 + 1) * 2 + 1 = 3; (5 - 1) / 2 * 2 + 1 = 5.
        let d = LayerDescriptor::BatchNormalization(BatchNormalizationDescriptor {
            epsilon: 1.0,
            layout: DataLayout::Nchw,
        });
        let one = |v| t(&[1], &[v]);
        let y = run(
            d,
            &[
                t(&[1, 1, 2], &[3.0, 5.0]),
                one(2.0),
                one(1.0),
                one(1.0),
                one(3.0),
            ],
            &[1, 1, 2],
        );
        close(&y, &[3.0, 5.0]);
    }

    #[test]
    fn elementwise_unary_by_hand() {
        let u = |op, x: f64| {
            run(
                LayerDescriptor::ElementwiseUnary(op),
                &[t(&[1], &[x])],
                &[1],
            )[0]
        };
        use UnaryOperation::*;
        assert_eq!(u(Abs, -2.0), 2.0);
        assert_eq!(u(Neg, 2.0), -2.0);
        assert_eq!(u(Exp, 0.0), 1.0);
        assert_eq!(u(Log, 1.0), 0.0);
        assert!(u(Log, -1.0).is_nan());
        assert_eq!(u(Sqrt, 4.0), 2.0);
        assert_eq!(u(Rsqrt, 4.0), 0.5);
        assert_eq!(u(Reciprocal, 4.0), 0.25);
        assert_eq!(u(Sin, 0.0), 0.0);
        assert_eq!(u(Cos, 0.0), 1.0);
        close(&[u(Erf, 1.0)], &[0.842_700_792_949_714_9]);
        assert_eq!(u(Ceil, -1.5), -1.0);
        assert_eq!(u(Floor, -1.5), -2.0);
    }

    #[test]
    fn local_response_normalization_by_hand() {
        // size 3, alpha 3, beta 1, k 1: y = x / (1 + sum of squares of the window).
        let d = LayerDescriptor::Normalization(NormalizationDescriptor {
            size: 3,
            alpha: 3.0,
            beta: 1.0,
            k: 1.0,
        });
        let y = run(d, &[t(&[1, 3, 1, 1], &[1.0, 2.0, 3.0])], &[1, 3, 1, 1]);
        close(&y, &[1.0 / 6.0, 2.0 / 15.0, 3.0 / 14.0]);
        // An even window of 2 looks at c and c + 1 only: lo = c, hi = c + 1.
        let d = LayerDescriptor::Normalization(NormalizationDescriptor {
            size: 2,
            alpha: 2.0,
            beta: 1.0,
            k: 1.0,
        });
        let y = run(d, &[t(&[1, 3, 1, 1], &[1.0, 2.0, 3.0])], &[1, 3, 1, 1]);
        close(&y, &[1.0 / 6.0, 2.0 / 14.0, 3.0 / 10.0]);
    }

    #[test]
    fn batch_matmul_by_hand() {
        let a = t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let b = t(&[2, 1], &[5.0, 6.0]);
        let mm = |transpose_a, transpose_b| {
            LayerDescriptor::BatchMatMul(BatchMatMulDescriptor {
                transpose_a,
                transpose_b,
            })
        };
        close(
            &run(mm(false, false), &[a.clone(), b.clone()], &[2, 1]),
            &[17.0, 39.0],
        );
        // aᵀ = [[1, 3], [2, 4]]: [5 + 18, 10 + 24].
        close(
            &run(mm(true, false), &[a.clone(), b], &[2, 1]),
            &[23.0, 34.0],
        );
        // bᵀ given as [1, 2]: the same product as the first.
        close(
            &run(mm(false, true), &[a, t(&[1, 2], &[5.0, 6.0])], &[2, 1]),
            &[17.0, 39.0],
        );
        // A batch of two [1, 1] matrices times one broadcast [1, 2].
        let y = run(
            mm(false, false),
            &[t(&[2, 1, 1], &[2.0, 3.0]), t(&[1, 2], &[1.0, 10.0])],
            &[2, 1, 2],
        );
        close(&y, &[2.0, 20.0, 3.0, 30.0]);
    }

    #[test]
    fn slice_by_hand() {
        let d = LayerDescriptor::Slice(SliceDescriptor {
            begin: vec![3].into(),
            step: vec![-2].into(),
            size: vec![2].into(),
        });
        close(
            &run(d, &[t(&[4], &[0.0, 1.0, 2.0, 3.0])], &[2]),
            &[3.0, 1.0],
        );
    }

    fn resize_d(
        method: ResizeMethod,
        coordinates: CoordinateTransformation,
        nearest: NearestRounding,
        height: u32,
        width: u32,
        scale_y: f32,
        scale_x: f32,
    ) -> LayerDescriptor {
        LayerDescriptor::Resize(ResizeDescriptor {
            method,
            coordinates,
            nearest,
            height,
            width,
            scale_y,
            scale_x,
        })
    }

    #[test]
    fn resize_by_hand() {
        use CoordinateTransformation::*;
        use NearestRounding::*;
        use ResizeMethod::*;
        let x = t(&[1, 1, 1, 2], &[1.0, 2.0]);
        // Asymmetric, floor: sources 0, 0.5, 1, 1.5.
        let d = resize_d(Nearest, Asymmetric, Floor, 1, 4, 1.0, 2.0);
        close(&run(d, &[x.clone()], &[1, 1, 1, 4]), &[1.0, 1.0, 2.0, 2.0]);
        // Half pixel: sources -0.25, 0.25, 0.75, 1.25; round prefer ceil → 0, 0, 1, 1 (clamped).
        let d = resize_d(Nearest, HalfPixel, RoundPreferCeil, 1, 4, 1.0, 2.0);
        close(&run(d, &[x.clone()], &[1, 1, 1, 4]), &[1.0, 1.0, 2.0, 2.0]);
        // Asymmetric, rounding the ties of sources 0, 0.5, 1, 1.5 down, then up (1.5 → 2,
        // clamped to 1).
        let d = resize_d(Nearest, Asymmetric, RoundPreferFloor, 1, 4, 1.0, 2.0);
        close(&run(d, &[x.clone()], &[1, 1, 1, 4]), &[1.0, 1.0, 2.0, 2.0]);
        let d = resize_d(Nearest, Asymmetric, RoundPreferCeil, 1, 4, 1.0, 2.0);
        close(&run(d, &[x.clone()], &[1, 1, 1, 4]), &[1.0, 2.0, 2.0, 2.0]);
        // Linear, half pixel: sources clamped to 0, 0.25, 0.75, 1.
        let d = resize_d(Linear, HalfPixel, Floor, 1, 4, 1.0, 2.0);
        close(
            &run(d, &[x.clone()], &[1, 1, 1, 4]),
            &[1.0, 1.25, 1.75, 2.0],
        );
        // Linear, align corners to 3 wide: sources 0, 0.5, 1.
        let d = resize_d(Linear, AlignCorners, Floor, 1, 3, 1.0, 1.5);
        close(&run(d, &[x.clone()], &[1, 1, 1, 3]), &[1.0, 1.5, 2.0]);
        // PyTorch half pixel to 1 wide reads source 0 (half pixel would read 0.5).
        let d = resize_d(Linear, PytorchHalfPixel, Floor, 1, 1, 1.0, 0.5);
        close(&run(d, &[x.clone()], &[1, 1, 1, 1]), &[1.0]);
        let d = resize_d(Linear, HalfPixel, Floor, 1, 1, 1.0, 0.5);
        close(&run(d, &[x], &[1, 1, 1, 1]), &[1.5]);
    }

    #[test]
    fn transpose_convolution_by_hand() {
        let x = t(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let ones = t(&[1, 1, 2, 2], &[1.0; 4]);
        let d = |stride, padding| {
            LayerDescriptor::TransposeConvolution2d(TransposeConvolution2dDescriptor {
                stride_x: stride,
                stride_y: stride,
                padding,
                ..Default::default()
            })
        };
        // Stride 2: each input pixel becomes a 2x2 block.
        let y = run(
            d(2, Padding2d::default()),
            &[x.clone(), ones.clone()],
            &[1, 1, 4, 4],
        );
        close(
            &y,
            &[
                1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 3.0, 3.0, 4.0, 4.0,
            ],
        );
        // Stride 1: overlapping blocks add up.
        let y = run(
            d(1, Padding2d::default()),
            &[x.clone(), ones.clone()],
            &[1, 1, 3, 3],
        );
        close(&y, &[1.0, 3.0, 2.0, 4.0, 10.0, 6.0, 3.0, 7.0, 4.0]);
        // Padding 1 on every side takes the border off: the centre.
        close(&run(d(1, PAD1), &[x.clone(), ones], &[1, 1, 1, 1]), &[10.0]);
        // Two groups, output padding, bias: channel c scaled by w[c] into output channel c.
        let d = LayerDescriptor::TransposeConvolution2d(TransposeConvolution2dDescriptor {
            groups: 2,
            output_padding_x: 1,
            bias_enabled: true,
            ..Default::default()
        });
        let y = run(
            d,
            &[
                t(&[1, 2, 1, 1], &[2.0, 3.0]),
                t(&[2, 1, 1, 1], &[10.0, 100.0]),
                t(&[2], &[0.5, 0.25]),
            ],
            &[1, 2, 1, 2],
        );
        close(&y, &[20.5, 0.5, 300.25, 0.25]);
    }

    #[test]
    fn gather_by_hand() {
        let d = LayerDescriptor::Gather(GatherDescriptor { axis: 0 });
        let data = t(&[3, 2], &one_to(6));
        let y = run(d, &[data.clone(), t(&[2], &[2.0, -3.0])], &[2, 2]);
        close(&y, &[5.0, 6.0, 1.0, 2.0]);
        let d = LayerDescriptor::Gather(GatherDescriptor { axis: 1 });
        let y = run(d, &[data.clone(), t(&[1, 1], &[1.0])], &[3, 1, 1]);
        close(&y, &[2.0, 4.0, 6.0]);
        assert!(gather(&data, &t(&[1], &[3.0]), 0).is_err());
    }

    #[test]
    fn arg_min_max_by_hand() {
        let a = |function, select_last_index, x: &[f64]| {
            let d = LayerDescriptor::ArgMinMax(ArgMinMaxDescriptor {
                function,
                axis: 0,
                keep_dims: false,
                select_last_index,
            });
            run(d, &[t(&[x.len()], x)], &[])[0]
        };
        use ArgMinMaxFunction::*;
        assert_eq!(a(Max, false, &[1.0, 3.0, 3.0, 0.0]), 1.0);
        assert_eq!(a(Max, true, &[1.0, 3.0, 3.0, 0.0]), 2.0);
        assert_eq!(a(Min, false, &[1.0, 3.0, 3.0, 0.0]), 3.0);
        assert_eq!(a(Max, false, &[1.0, f64::NAN, 5.0]), 1.0);
        assert_eq!(a(Min, false, &[1.0, -5.0, f64::NAN]), 2.0);
        let d = LayerDescriptor::ArgMinMax(ArgMinMaxDescriptor {
            function: Max,
            axis: 1,
            keep_dims: true,
            select_last_index: false,
        });
        close(
            &run(d, &[t(&[2, 2], &[1.0, 2.0, 4.0, 3.0])], &[2, 1]),
            &[1.0, 0.0],
        );
    }

    #[test]
    fn layer_and_instance_normalization_by_hand() {
        // [1, 2, 3]: mean 2, variance 2/3, so (x - 2) / sqrt(2/3) = -1.2247.., 0, 1.2247...
        let r = 1.5f64.sqrt();
        let d = LayerDescriptor::LayerNormalization(LayerNormalizationDescriptor {
            axis: 1,
            epsilon: 0.0,
            bias_enabled: true,
        });
        let y = run(
            d,
            &[
                t(&[1, 3], &[1.0, 2.0, 3.0]),
                t(&[3], &[1.0, 1.0, 2.0]),
                t(&[3], &[0.0, 1.0, 0.0]),
            ],
            &[1, 3],
        );
        close(&y, &[-r, 1.0, 2.0 * r]);
        // [1, 3]: mean 2, variance 1: [-1, 1] * 2 + 1.
        let d = LayerDescriptor::InstanceNormalization(InstanceNormalizationDescriptor {
            epsilon: 0.0,
        });
        let y = run(
            d,
            &[t(&[1, 1, 2], &[1.0, 3.0]), t(&[1], &[2.0]), t(&[1], &[1.0])],
            &[1, 1, 2],
        );
        close(&y, &[-1.0, 3.0]);
    }

    #[test]
    fn cast_by_hand() {
        let x = t(&[4], &[-1.7, 2.9, f64::NAN, 3e10]);
        let y = run(LayerDescriptor::Cast(DataType::Signed32), &[x], &[4]);
        assert_eq!(y, [-1.0, 2.0, 0.0, 2_147_483_647.0]);
        let y = run(
            LayerDescriptor::Cast(DataType::Boolean),
            &[t(&[3], &[0.0, -0.5, f64::NAN])],
            &[3],
        );
        assert_eq!(y, [0.0, 1.0, 1.0]);
        let y = run(
            LayerDescriptor::Cast(DataType::Float32),
            &[t(&[1], &[7.0])],
            &[1],
        );
        assert_eq!(y, [7.0]);
    }

    #[test]
    fn comparison_where_and_broadcast_to_by_hand() {
        let y = run(
            LayerDescriptor::Comparison(ComparisonOperation::Less),
            &[t(&[3], &[1.0, 2.0, 3.0]), t(&[1], &[2.0])],
            &[3],
        );
        assert_eq!(y, [1.0, 0.0, 0.0]);
        let y = run(
            LayerDescriptor::Comparison(ComparisonOperation::NotEqual),
            &[t(&[2], &[f64::NAN, 1.0]), t(&[2], &[f64::NAN, 1.0])],
            &[2],
        );
        assert_eq!(y, [1.0, 0.0]);
        let y = run(
            LayerDescriptor::Where,
            &[
                t(&[2, 1], &[1.0, 0.0]),
                t(&[2], &[1.0, 2.0]),
                t(&[1], &[10.0]),
            ],
            &[2, 2],
        );
        assert_eq!(y, [1.0, 2.0, 10.0, 10.0]);
        let y = run(
            LayerDescriptor::BroadcastTo(backplane_api::BroadcastToDescriptor {
                shape: vec![2, 2].into(),
            }),
            &[t(&[2], &[1.0, 2.0])],
            &[2, 2],
        );
        assert_eq!(y, [1.0, 2.0, 1.0, 2.0]);
    }

    #[test]
    fn window_count_matches_onnx_examples() {
        // ONNX's test_maxpool_2d_ceil: 4 wide, kernel 3, stride 2: 1 floored, 2 in ceil mode.
        assert_eq!(window_count(4, (0, 0), 3, 2, 1, false), Ok(1));
        assert_eq!(window_count(4, (0, 0), 3, 2, 1, true), Ok(2));
        // A last window that would start in the trailing padding is dropped.
        assert_eq!(window_count(2, (0, 1), 1, 2, 1, true), Ok(1));
    }

    #[test]
    fn compare_uses_the_stated_tolerances() {
        let info = TensorInfo::new(&[3], DataType::Float32);
        let bytes = |v: [f32; 3]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let want = t(&[3], &[1.0, 1000.0, f64::NAN]);
        assert!(compare(&info, &bytes([1.000_05, 1000.05, f32::NAN]), &want).is_ok());
        assert!(compare(&info, &bytes([1.000_3, 1000.0, f32::NAN]), &want).is_err());
        assert!(compare(&info, &bytes([1.0, 1000.2, f32::NAN]), &want).is_err());
        assert!(compare(&info, &bytes([1.0, 1000.0, 0.0]), &want).is_err());
        let ints = TensorInfo::new(&[1], DataType::Signed32);
        assert!(compare(&ints, &2i32.to_le_bytes(), &t(&[1], &[2.0])).is_ok());
        assert!(compare(&ints, &2i32.to_le_bytes(), &t(&[1], &[1.0])).is_err());
    }
}
