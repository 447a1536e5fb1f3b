//! Output shapes of every v1 layer, from its descriptor and input tensors: the one definition
//! the host (shape inference, validation) and backends (layer support) share. The rules are
//! ONNX's operators of the same name. Errors say what is wrong, for a person.
//!
//! Conventions (see [`layers`](crate::layers)): activations are NCHW unless a descriptor says
//! NHWC; convolution weights are always `[out, in / groups, kh, kw]`.

use crate::{
    ActivationFunction, BatchMatMulDescriptor, BinaryOperation, DataLayout, DataType,
    LayerDescriptor, OutputRounding, PadMode, Padding2d, Pooling2dDescriptor, SliceDescriptor,
    TensorInfo, TransposeConvolution2dDescriptor,
};

type Shape = Vec<u32>;

fn rank(what: &str, t: &TensorInfo, n: usize) -> Result<(), String> {
    if t.shape.len() != n {
        return Err(format!(
            "{what} must have rank {n}, got shape {:?}",
            t.shape.as_slice()
        ));
    }
    Ok(())
}

fn count(inputs: &[TensorInfo], allowed: &[usize]) -> Result<(), String> {
    if !allowed.contains(&inputs.len()) {
        return Err(format!("expects {allowed:?} inputs, got {}", inputs.len()));
    }
    Ok(())
}

/// `(c, h, w)` positions of a 4-D activation in `layout`.
fn chw(layout: DataLayout) -> (usize, usize, usize) {
    match layout {
        DataLayout::Nchw => (1, 2, 3),
        DataLayout::Nhwc => (3, 1, 2),
    }
}

/// Output length of a sliding window (ONNX `Conv`/`MaxPool`/`AveragePool`).
pub fn window_output(
    input: u32,
    pad_begin: u32,
    pad_end: u32,
    kernel: u32,
    stride: u32,
    dilation: u32,
    rounding: OutputRounding,
) -> Result<u32, String> {
    if stride == 0 || dilation == 0 || kernel == 0 {
        return Err("kernel, stride and dilation must be at least 1".to_owned());
    }
    let padded = i64::from(input) + i64::from(pad_begin) + i64::from(pad_end);
    let span = i64::from(dilation) * (i64::from(kernel) - 1) + 1;
    if padded < span {
        return Err(format!(
            "window of {span} does not fit the padded input of {padded}"
        ));
    }
    let stride = i64::from(stride);
    let mut out = match rounding {
        OutputRounding::Floor => (padded - span) / stride + 1,
        OutputRounding::Ceiling => (padded - span + stride - 1) / stride + 1,
    };
    // Ceil mode: the last window must start inside the input or its leading padding.
    if rounding == OutputRounding::Ceiling
        && (out - 1) * stride >= i64::from(input) + i64::from(pad_begin)
    {
        out -= 1;
    }
    u32::try_from(out).map_err(|_| "output size overflows".to_owned())
}

fn spatial(
    x: &TensorInfo,
    layout: DataLayout,
    padding: Padding2d,
    (kh, kw): (u32, u32),
    (sy, sx): (u32, u32),
    (dy, dx): (u32, u32),
    rounding: OutputRounding,
) -> Result<(u32, u32), String> {
    let (_, h, w) = chw(layout);
    Ok((
        window_output(
            x.shape[h],
            padding.top,
            padding.bottom,
            kh,
            sy,
            dy,
            rounding,
        )?,
        window_output(
            x.shape[w],
            padding.left,
            padding.right,
            kw,
            sx,
            dx,
            rounding,
        )?,
    ))
}

/// The output shape of a `Pooling2d` of `x` whose window cells are `(dy, dx)` apart.
fn pooling(d: &Pooling2dDescriptor, (dy, dx): (u32, u32), x: &TensorInfo) -> Result<Shape, String> {
    rank("input", x, 4)?;
    // As ONNX Runtime requires: every window holds at least one input cell.
    let extent = |k: u32, dil: u32| match k {
        0 => 0,
        k => u64::from(k - 1) * u64::from(dil) + 1,
    };
    let p = d.padding;
    let (eh, ew) = (extent(d.pool_height, dy), extent(d.pool_width, dx));
    if u64::from(p.left.max(p.right)) >= ew || u64::from(p.top.max(p.bottom)) >= eh {
        return Err(format!(
            "padding {p:?} must be smaller than the {}x{} window on every side",
            d.pool_height, d.pool_width
        ));
    }
    let (oh, ow) = spatial(
        x,
        d.layout,
        d.padding,
        (d.pool_height, d.pool_width),
        (d.stride_y, d.stride_x),
        (dy, dx),
        d.rounding,
    )?;
    let (ci, _, _) = chw(d.layout);
    Ok(activation_shape(d.layout, x.shape[0], x.shape[ci], oh, ow))
}

fn activation_shape(layout: DataLayout, n: u32, c: u32, h: u32, w: u32) -> Shape {
    match layout {
        DataLayout::Nchw => vec![n, c, h, w],
        DataLayout::Nhwc => vec![n, h, w, c],
    }
}

/// The output shape of a `TransposeConvolution2d` of an NCHW input `x` with weights `w`
/// (`[in_channels, out_channels / groups, kh, kw]`).
pub fn transpose_convolution(
    d: &TransposeConvolution2dDescriptor,
    x: &[u32],
    w: &[u32],
) -> Result<Shape, String> {
    let ([n, c, h, wd], [wc, mg, kh, kw]) = (
        <[u32; 4]>::try_from(x).map_err(|_| format!("input {x:?} is not 4-D"))?,
        <[u32; 4]>::try_from(w).map_err(|_| format!("weights {w:?} are not 4-D"))?,
    );
    if d.groups == 0 || c % d.groups != 0 || wc != c {
        return Err(format!(
            "weights {w:?} do not fit {c} input channels in {} groups",
            d.groups
        ));
    }
    if d.stride_x == 0 || d.stride_y == 0 || d.dilation_x == 0 || d.dilation_y == 0 {
        return Err("a stride or dilation of 0".to_owned());
    }
    if d.output_padding_x >= d.stride_x.max(d.dilation_x)
        || d.output_padding_y >= d.stride_y.max(d.dilation_y)
    {
        return Err("output padding must be smaller than the stride or the dilation".to_owned());
    }
    let side = |len: u32, stride: u32, before: u32, after: u32, dil: u32, k: u32, extra: u32| {
        // In i128: every term is below 2^64, so the sum cannot overflow.
        let full = i128::from(len.max(1) - 1) * i128::from(stride)
            + i128::from(dil) * (i128::from(k) - 1)
            + i128::from(extra)
            + 1;
        let out = if len == 0 {
            0
        } else {
            full - i128::from(before) - i128::from(after)
        };
        u32::try_from(out).map_err(|_| format!("padding leaves an output of {out}"))
    };
    let p = &d.padding;
    let oh = side(
        h,
        d.stride_y,
        p.top,
        p.bottom,
        d.dilation_y,
        kh,
        d.output_padding_y,
    )?;
    let ow = side(
        wd,
        d.stride_x,
        p.left,
        p.right,
        d.dilation_x,
        kw,
        d.output_padding_x,
    )?;
    let m = mg
        .checked_mul(d.groups)
        .ok_or_else(|| format!("{mg} x {} output channels overflow", d.groups))?;
    Ok(vec![n, m, oh, ow])
}

/// The output shape of a `Slice` of a tensor of shape `x` (see [`SliceDescriptor`]): every
/// index it reads must lie inside `x`.
pub fn slice(d: &SliceDescriptor, x: &[u32]) -> Result<Shape, String> {
    let r = x.len();
    if d.begin.len() != r || d.step.len() != r || d.size.len() != r {
        return Err(format!(
            "Slice of a rank-{r} tensor with {} begins, {} steps and {} sizes",
            d.begin.len(),
            d.step.len(),
            d.size.len()
        ));
    }
    for (axis, &dim) in x.iter().enumerate() {
        let (b, s, n, dim) = (
            i64::from(d.begin[axis]),
            i64::from(d.step[axis]),
            i64::from(d.size[axis]),
            i64::from(dim),
        );
        if s == 0 {
            return Err(format!("Slice step 0 on axis {axis}"));
        }
        let last = b + (n - 1) * s;
        let inside = (0..dim).contains(&b) && (0..dim).contains(&last);
        if n > 0 && !inside {
            return Err(format!(
                "Slice of axis {axis} ({dim} long) from {b}, step {s}, {n} indices reads outside it"
            ));
        }
    }
    Ok(d.size.to_vec())
}

/// The output shape of a `BatchMatMul` of `a` and `b` (see [`BatchMatMulDescriptor`]).
pub fn batch_matmul(d: &BatchMatMulDescriptor, a: &[u32], b: &[u32]) -> Result<Shape, String> {
    let (Some(ra), Some(rb)) = (a.len().checked_sub(2), b.len().checked_sub(2)) else {
        return Err(format!(
            "BatchMatMul needs inputs of rank 2 or more, got {a:?} and {b:?}"
        ));
    };
    let (m, ka) = if d.transpose_a {
        (a[ra + 1], a[ra])
    } else {
        (a[ra], a[ra + 1])
    };
    let (kb, n) = if d.transpose_b {
        (b[rb + 1], b[rb])
    } else {
        (b[rb], b[rb + 1])
    };
    if ka != kb {
        return Err(format!(
            "BatchMatMul of {a:?} and {b:?}: inner dimensions {ka} and {kb} differ"
        ));
    }
    let mut out = broadcast(&a[..ra], &b[..rb])?;
    out.extend([m, n]);
    Ok(out)
}

/// `shape` reduced over `axes` (distinct, each below the rank): the reduced dimensions dropped,
/// or kept as 1 with `keep_dims`.
pub fn reduced(shape: &[u32], axes: &[u32], keep_dims: bool) -> Result<Shape, String> {
    let mut seen = vec![false; shape.len()];
    for &a in axes {
        if a as usize >= shape.len() || std::mem::replace(&mut seen[a as usize], true) {
            return Err(format!(
                "axes {axes:?} are not distinct axes of rank {}",
                shape.len()
            ));
        }
    }
    Ok(shape
        .iter()
        .enumerate()
        .filter_map(|(i, &dim)| match (seen[i], keep_dims) {
            (false, _) => Some(dim),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect())
}

/// The data type of each output of `layer` given its inputs, after checking the types its
/// definition fixes: `Gather`'s indices are Signed32; `Where`'s condition is Boolean; the
/// inputs of `ElementwiseBinary`, `Comparison`, `BatchMatMul` and `Concat` (and `Where`'s
/// two values) share one type. The output is Signed32 for `ArgMinMax`, Boolean for
/// `Comparison`, the descriptor's for `Cast` and `Constant`, and the first input's otherwise
/// (the second's for `Where`). Which types a layer actually runs in is each backend's answer.
pub fn output_data_types(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
) -> Result<Vec<DataType>, String> {
    let same = |from: usize| -> Result<(), String> {
        match inputs[from..]
            .iter()
            .skip(1)
            .find(|t| t.data_type != inputs[from].data_type)
        {
            Some(t) => Err(format!(
                "inputs must share one data type, got {} and {}",
                inputs[from].data_type, t.data_type
            )),
            None => Ok(()),
        }
    };
    let first = || {
        inputs
            .first()
            .map(|t| t.data_type)
            .ok_or_else(|| "expects at least 1 input".to_owned())
    };
    Ok(vec![match layer {
        LayerDescriptor::Constant(c) => c.info.data_type,
        LayerDescriptor::Cast(to) => *to,
        LayerDescriptor::Quantize(to) | LayerDescriptor::Requantize(to) => {
            count(inputs, &[1])?;
            let from = inputs[0].data_type;
            let wanted_input = matches!(layer, LayerDescriptor::Quantize(_));
            if !to.is_quantized() {
                return Err(format!("the output type must be quantized, got {to}"));
            }
            if wanted_input == from.is_quantized() || (wanted_input && from != DataType::Float32) {
                return Err(format!(
                    "the input must be {}, got {from}",
                    if wanted_input { "Float32" } else { "quantized" }
                ));
            }
            *to
        }
        LayerDescriptor::Dequantize => {
            count(inputs, &[1])?;
            if !inputs[0].data_type.is_quantized() {
                return Err(format!(
                    "the input must be quantized, got {}",
                    inputs[0].data_type
                ));
            }
            DataType::Float32
        }
        LayerDescriptor::BatchMatMul(_)
            if inputs.len() == 2 && inputs.iter().all(|t| t.data_type.is_quantized()) =>
        {
            // Quantised operands may differ in signedness (u8 activations, s8 weights).
            inputs[0].data_type
        }
        LayerDescriptor::BatchMatMul(_)
            if inputs.len() == 2
                && inputs[0].data_type == DataType::Float32
                && inputs[1].data_type.is_quantized() =>
        {
            // Dynamically quantised (the layers' documentation): a Float32 result.
            DataType::Float32
        }
        LayerDescriptor::ArgMinMax(_) => DataType::Signed32,
        LayerDescriptor::NonZero => {
            count(inputs, &[1])?;
            if inputs[0].data_type.is_quantized() {
                return Err(format!(
                    "the input must be of a plain type, got {}",
                    inputs[0].data_type
                ));
            }
            DataType::Signed64
        }
        LayerDescriptor::BitCast(to) => {
            count(inputs, &[1])?;
            let from = inputs[0].data_type;
            if from.is_quantized() || to.is_quantized() {
                return Err(format!(
                    "BitCast reads and writes plain types, got {from} to {to}"
                ));
            }
            if from.size_in_bytes() != to.size_in_bytes() {
                return Err(format!(
                    "BitCast needs types of one width, got {from} ({} bytes) to {to} ({} bytes)",
                    from.size_in_bytes(),
                    to.size_in_bytes()
                ));
            }
            *to
        }
        LayerDescriptor::DeformableConvolution2d(d) => {
            let want = 3 + usize::from(d.convolution.bias_enabled) + usize::from(d.mask_enabled);
            count(inputs, &[want])?;
            let t = first()?;
            if !matches!(t, DataType::Float32 | DataType::Float64) {
                return Err(format!("DeformConv needs Float32 or Float64, got {t}"));
            }
            same(0)?;
            t
        }
        LayerDescriptor::Unique(_) => {
            count(inputs, &[1])?;
            if inputs[0].data_type.is_quantized() {
                return Err(format!(
                    "the input must be of a plain type, got {}",
                    inputs[0].data_type
                ));
            }
            DataType::Signed64
        }
        LayerDescriptor::Determinant => {
            count(inputs, &[1])?;
            let t = inputs[0].data_type;
            if !matches!(t, DataType::Float32 | DataType::Float64) {
                return Err(format!("Det needs Float32 or Float64, got {t}"));
            }
            t
        }
        LayerDescriptor::Lstm(_) => {
            count(inputs, &[6])?;
            let t = first()?;
            if !matches!(t, DataType::Float32 | DataType::Float64) {
                return Err(format!("Lstm needs Float32 or Float64, got {t}"));
            }
            same(0)?;
            t
        }
        LayerDescriptor::NonMaxSuppression(_) => {
            count(inputs, &[2])?;
            for (what, t) in [("boxes", &inputs[0]), ("scores", &inputs[1])] {
                if t.data_type != DataType::Float32 {
                    return Err(format!("{what} must be Float32, got {}", t.data_type));
                }
            }
            DataType::Signed64
        }
        LayerDescriptor::RoiAlign(_) => {
            count(inputs, &[3])?;
            let t = first()?;
            if !matches!(t, DataType::Float32 | DataType::Float64) {
                return Err(format!("x must be Float32 or Float64, got {t}"));
            }
            if inputs[1].data_type != t {
                return Err(format!(
                    "rois must be x's type {t}, got {}",
                    inputs[1].data_type
                ));
            }
            if !matches!(inputs[2].data_type, DataType::Signed32 | DataType::Signed64) {
                return Err(format!(
                    "batch_indices must be Signed32 or Signed64, got {}",
                    inputs[2].data_type
                ));
            }
            t
        }
        LayerDescriptor::ScatterElements(_) | LayerDescriptor::ScatterNd(_) => {
            count(inputs, &[3])?;
            if !matches!(inputs[1].data_type, DataType::Signed32 | DataType::Signed64) {
                return Err(format!(
                    "indices must be Signed32 or Signed64, got {}",
                    inputs[1].data_type
                ));
            }
            if inputs[2].data_type != inputs[0].data_type {
                return Err(format!(
                    "updates must be {} as the data, got {}",
                    inputs[0].data_type, inputs[2].data_type
                ));
            }
            inputs[0].data_type
        }
        LayerDescriptor::Gather(_) => {
            count(inputs, &[2])?;
            if !matches!(inputs[1].data_type, DataType::Signed32 | DataType::Signed64) {
                return Err(format!(
                    "indices must be Signed32 or Signed64, got {}",
                    inputs[1].data_type
                ));
            }
            inputs[0].data_type
        }
        LayerDescriptor::Comparison(_) => {
            count(inputs, &[2])?;
            same(0)?;
            DataType::Boolean
        }
        LayerDescriptor::Where => {
            count(inputs, &[3])?;
            if inputs[0].data_type != DataType::Boolean {
                return Err(format!(
                    "the condition must be Boolean, got {}",
                    inputs[0].data_type
                ));
            }
            same(1)?;
            inputs[1].data_type
        }
        LayerDescriptor::ElementwiseBinary(op) if op.is_integer_only() => {
            let t = first()?;
            same(0)?;
            let shift = matches!(op, BinaryOperation::ShiftLeft | BinaryOperation::ShiftRight);
            if !t.is_integer() || (shift && t.is_signed_integer()) {
                let want = if shift { "unsigned integer" } else { "integer" };
                return Err(format!("{op:?} needs {want} tensors, got {t}"));
            }
            t
        }
        LayerDescriptor::ElementwiseBinary(_)
        | LayerDescriptor::BatchMatMul(_)
        | LayerDescriptor::Concat(_) => {
            let t = first()?;
            same(0)?;
            t
        }
        _ => first()?,
    }])
}

/// The output tensors of `layer` given its inputs: [`output_shapes`] with
/// [`output_data_types`]. A `Constant`'s output is its tensor's info; any other output of the
/// first input's data type keeps that input's quantisation.
pub fn output_infos(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
) -> Result<Vec<TensorInfo>, String> {
    if let LayerDescriptor::Constant(c) = layer {
        output_shapes(layer, inputs)?;
        return Ok(vec![c.info.clone()]);
    }
    let shapes = output_shapes(layer, inputs)?;
    let types = output_data_types(layer, inputs)?;
    Ok(shapes
        .iter()
        .zip(types)
        .map(|(s, data_type)| {
            let mut t = TensorInfo::new(s, data_type);
            if let Some(first) = inputs.first().filter(|i| i.data_type == data_type) {
                t.quantization = first.quantization.clone();
            }
            t
        })
        .collect())
}

/// The numpy broadcast of two shapes.
pub fn broadcast(a: &[u32], b: &[u32]) -> Result<Shape, String> {
    let rank = a.len().max(b.len());
    let dim = |s: &[u32], i: usize| {
        if i + s.len() < rank {
            1
        } else {
            s[i + s.len() - rank]
        }
    };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y => Ok(x),
            (1, y) => Ok(y),
            (x, 1) => Ok(x),
            _ => Err(format!("shapes {a:?} and {b:?} do not broadcast")),
        })
        .collect()
}

/// Normalises a possibly negative axis against `rank`.
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r).contains(&a) {
        Ok(a as usize)
    } else {
        Err(format!("axis {axis} is out of range for rank {rank}"))
    }
}

/// The output shapes of `layer` given its inputs.
pub fn output_shapes(layer: &LayerDescriptor, inputs: &[TensorInfo]) -> Result<Vec<Shape>, String> {
    let same = |inputs: &[TensorInfo]| -> Result<Vec<Shape>, String> {
        count(inputs, &[1])?;
        Ok(vec![inputs[0].shape.to_vec()])
    };
    Ok(match layer {
        LayerDescriptor::Activation(d)
            if d.function == ActivationFunction::Gelu && d.a != 0.0 && d.a != 1.0 =>
        {
            return Err(format!(
                "Gelu takes a = 0 (erf) or a = 1 (tanh approximation), got {}",
                d.a
            ));
        }
        LayerDescriptor::Input(_)
        | LayerDescriptor::Output(_)
        | LayerDescriptor::Activation(_)
        | LayerDescriptor::ElementwiseUnary(_)
        | LayerDescriptor::MemCopy => same(inputs)?,
        LayerDescriptor::Normalization(d) => {
            count(inputs, &[1])?;
            rank("input", &inputs[0], 4)?;
            if d.size == 0 {
                return Err("a window of 0 channels".to_owned());
            }
            vec![inputs[0].shape.to_vec()]
        }
        LayerDescriptor::Constant(c) => {
            count(inputs, &[0])?;
            if c.info.num_bytes() != Some(c.data.len()) {
                return Err(format!("constant {} holds {} bytes", c.info, c.data.len()));
            }
            vec![c.info.shape.to_vec()]
        }
        LayerDescriptor::Convolution2d(d) | LayerDescriptor::DepthwiseConvolution2d(d) => {
            let depthwise = matches!(layer, LayerDescriptor::DepthwiseConvolution2d(_));
            count(inputs, if d.bias_enabled { &[3] } else { &[2] })?;
            let (x, w) = (&inputs[0], &inputs[1]);
            rank("input", x, 4)?;
            rank("weights", w, 4)?;
            let (ci, _, _) = chw(d.layout);
            let c = x.shape[ci];
            let (m, wc) = (w.shape[0], w.shape[1]);
            let groups = if depthwise { c } else { d.groups };
            if groups == 0 || c % groups != 0 || m % groups != 0 {
                return Err(format!(
                    "{c} input and {m} output channels do not split into {groups} groups"
                ));
            }
            // Checked: a crafted network's weights may expect more channels than u32 holds.
            let expected = wc.checked_mul(groups);
            if expected != Some(c) {
                return Err(format!(
                    "weights {:?} expect {} input channels, the input has {c}",
                    w.shape.as_slice(),
                    expected.map_or_else(|| format!("{wc} x {groups}"), |n| n.to_string())
                ));
            }
            if d.bias_enabled && inputs[2].shape.as_slice() != [m] {
                return Err(format!(
                    "bias must have shape [{m}], got {:?}",
                    inputs[2].shape.as_slice()
                ));
            }
            let (oh, ow) = spatial(
                x,
                d.layout,
                d.padding,
                (w.shape[2], w.shape[3]),
                (d.stride_y, d.stride_x),
                (d.dilation_y, d.dilation_x),
                OutputRounding::Floor,
            )?;
            vec![activation_shape(d.layout, x.shape[0], m, oh, ow)]
        }
        LayerDescriptor::FullyConnected(d) => {
            count(inputs, if d.bias_enabled { &[3] } else { &[2] })?;
            let (x, w) = (&inputs[0], &inputs[1]);
            rank("input", x, 2)?;
            rank("weights", w, 2)?;
            let (k, m) = if d.transpose_weights {
                (w.shape[1], w.shape[0])
            } else {
                (w.shape[0], w.shape[1])
            };
            if x.shape[1] != k {
                return Err(format!(
                    "input {:?} has {} features, the weights {:?} expect {k}",
                    x.shape.as_slice(),
                    x.shape[1],
                    w.shape.as_slice()
                ));
            }
            if d.bias_enabled && inputs[2].shape.as_slice() != [m] {
                return Err(format!(
                    "bias must have shape [{m}], got {:?}",
                    inputs[2].shape.as_slice()
                ));
            }
            vec![vec![x.shape[0], m]]
        }
        LayerDescriptor::ElementwiseBinary(_) => {
            count(inputs, &[2])?;
            vec![broadcast(&inputs[0].shape, &inputs[1].shape)?]
        }
        LayerDescriptor::BatchMatMul(d) => {
            count(inputs, &[2])?;
            vec![batch_matmul(d, &inputs[0].shape, &inputs[1].shape)?]
        }
        LayerDescriptor::Slice(d) => {
            count(inputs, &[1])?;
            vec![slice(d, &inputs[0].shape)?]
        }
        LayerDescriptor::Resize(d) => {
            count(inputs, &[1])?;
            let x = &inputs[0];
            rank("input", x, 4)?;
            let scales_ok = d.scale_y.is_finite()
                && d.scale_x.is_finite()
                && d.scale_y > 0.0
                && d.scale_x > 0.0;
            if !scales_ok {
                return Err(format!(
                    "Resize scales {} and {} must be positive",
                    d.scale_y, d.scale_x
                ));
            }
            if (d.height > 0 || d.width > 0) && (x.shape[2] == 0 || x.shape[3] == 0) {
                return Err(format!("Resize of an empty image {:?}", x.shape.as_slice()));
            }
            vec![vec![x.shape[0], x.shape[1], d.height, d.width]]
        }
        LayerDescriptor::TransposeConvolution2d(d) => {
            count(inputs, if d.bias_enabled { &[3] } else { &[2] })?;
            let out = transpose_convolution(d, &inputs[0].shape, &inputs[1].shape)?;
            if d.bias_enabled && inputs[2].shape.as_slice() != [out[1]] {
                return Err(format!(
                    "bias must have shape [{}], got {:?}",
                    out[1],
                    inputs[2].shape.as_slice()
                ));
            }
            vec![out]
        }
        LayerDescriptor::Pooling2d(d) => {
            count(inputs, &[1])?;
            vec![pooling(d, (1, 1), &inputs[0])?]
        }
        LayerDescriptor::DilatedPooling2d(d) => {
            count(inputs, &[1])?;
            if d.dilation_x == 0 || d.dilation_y == 0 {
                return Err("dilations must be at least 1".to_owned());
            }
            vec![pooling(
                &d.pooling,
                (d.dilation_y, d.dilation_x),
                &inputs[0],
            )?]
        }
        LayerDescriptor::Softmax(d) => {
            count(inputs, &[1])?;
            normalize_axis(i64::from(d.axis), inputs[0].shape.len())?;
            vec![inputs[0].shape.to_vec()]
        }
        LayerDescriptor::Reshape(d) => {
            count(inputs, &[1])?;
            let target = TensorInfo::new(&d.target_shape, inputs[0].data_type);
            if target.num_elements() != inputs[0].num_elements() {
                return Err(format!(
                    "cannot reshape {:?} into {:?}: element counts differ",
                    inputs[0].shape.as_slice(),
                    d.target_shape.as_slice()
                ));
            }
            vec![d.target_shape.to_vec()]
        }
        LayerDescriptor::Flatten(d) => {
            count(inputs, &[1])?;
            let s = &inputs[0].shape;
            let axis = d.axis as usize;
            if axis > s.len() {
                return Err(format!("axis {axis} is out of range for rank {}", s.len()));
            }
            let product = |d: &[u32]| d.iter().try_fold(1u32, |acc, &x| acc.checked_mul(x));
            match (product(&s[..axis]), product(&s[axis..])) {
                (Some(outer), Some(inner)) => vec![vec![outer, inner]],
                _ => return Err(format!("flattening {:?} overflows u32", s.as_slice())),
            }
        }
        LayerDescriptor::Concat(d) => {
            if inputs.is_empty() {
                return Err("expects at least 1 input".to_owned());
            }
            let first = &inputs[0].shape;
            let axis = d.axis as usize;
            if axis >= first.len() {
                return Err(format!(
                    "axis {axis} is out of range for rank {}",
                    first.len()
                ));
            }
            let mut out = first.to_vec();
            for (i, t) in inputs.iter().enumerate().skip(1) {
                let ok = t.shape.len() == first.len()
                    && t.shape
                        .iter()
                        .zip(first.iter())
                        .enumerate()
                        .all(|(k, (a, b))| k == axis || a == b);
                if !ok {
                    return Err(format!(
                        "input {i} {:?} does not match input 0 {:?} outside axis {axis}",
                        t.shape.as_slice(),
                        first.as_slice()
                    ));
                }
                out[axis] = out[axis]
                    .checked_add(t.shape[axis])
                    .ok_or_else(|| format!("the concatenated axis {axis} overflows u32"))?;
            }
            vec![out]
        }
        LayerDescriptor::Transpose(d) => {
            count(inputs, &[1])?;
            let s = &inputs[0].shape;
            let mut seen = vec![false; s.len()];
            let valid = d.permutation.len() == s.len()
                && d.permutation.iter().all(|&p| {
                    (p as usize) < s.len() && !std::mem::replace(&mut seen[p as usize], true)
                });
            if !valid {
                return Err(format!(
                    "{:?} is not a permutation of rank {}",
                    d.permutation.as_slice(),
                    s.len()
                ));
            }
            vec![d.permutation.iter().map(|&p| s[p as usize]).collect()]
        }
        LayerDescriptor::Pad(d) => {
            count(inputs, &[1])?;
            let s = &inputs[0].shape;
            if d.padding.len() != s.len() {
                return Err(format!(
                    "{} padding pairs for rank {}",
                    d.padding.len(),
                    s.len()
                ));
            }
            for (i, (p, &dim)) in d.padding.iter().zip(s.iter()).enumerate() {
                if d.mode == PadMode::Reflect && (p.before >= dim || p.after >= dim) {
                    return Err(format!(
                        "reflect padding of dimension {i} must be smaller than its size {dim}"
                    ));
                }
                if d.mode == PadMode::Edge && dim == 0 && (p.before, p.after) != (0, 0) {
                    return Err(format!("edge padding of the empty dimension {i}"));
                }
            }
            let padded: Option<Shape> = s
                .iter()
                .zip(d.padding.iter())
                .map(|(&dim, p)| dim.checked_add(p.before)?.checked_add(p.after))
                .collect();
            vec![padded.ok_or_else(|| format!("padding {:?} overflows u32", s.as_slice()))?]
        }
        LayerDescriptor::Mean(d) => {
            count(inputs, &[1])?;
            vec![reduced(&inputs[0].shape, &d.axes, d.keep_dims)?]
        }
        LayerDescriptor::Reduce(d) => {
            count(inputs, &[1])?;
            vec![reduced(&inputs[0].shape, &d.axes, d.keep_dims)?]
        }
        LayerDescriptor::ArgMinMax(d) => {
            count(inputs, &[1])?;
            let s = &inputs[0].shape;
            if s.get(d.axis as usize) == Some(&0) {
                return Err(format!("axis {} of {:?} is empty", d.axis, s.as_slice()));
            }
            vec![reduced(s, &[d.axis], d.keep_dims)?]
        }
        LayerDescriptor::ScatterElements(d) => {
            count(inputs, &[3])?;
            let (data, indices, updates) = (&inputs[0].shape, &inputs[1].shape, &inputs[2].shape);
            let axis = d.axis as usize;
            if axis >= data.len() {
                return Err(format!(
                    "axis {axis} is out of range for rank {}",
                    data.len()
                ));
            }
            if indices != updates {
                return Err(format!(
                    "indices {:?} and updates {:?} must have one shape",
                    indices.as_slice(),
                    updates.as_slice()
                ));
            }
            let fits = indices.len() == data.len()
                && indices
                    .iter()
                    .zip(data.iter())
                    .enumerate()
                    .all(|(a, (&i, &d))| a == axis || i <= d);
            if !fits {
                return Err(format!(
                    "indices {:?} do not fit data {:?} along axis {axis}",
                    indices.as_slice(),
                    data.as_slice()
                ));
            }
            vec![data.to_vec()]
        }
        LayerDescriptor::BitCast(_) => same(inputs)?,
        LayerDescriptor::DeformableConvolution2d(d) => {
            let c = &d.convolution;
            let want = 3 + usize::from(c.bias_enabled) + usize::from(d.mask_enabled);
            count(inputs, &[want])?;
            if c.layout != DataLayout::Nchw {
                return Err("DeformConv needs NCHW activations".to_owned());
            }
            let (x, w, off) = (&inputs[0].shape, &inputs[1].shape, &inputs[2].shape);
            let (&[n, ch, h, wd], &[m, cg, kh, kw]) = (x.as_slice(), w.as_slice()) else {
                return Err(format!(
                    "x {:?} and weights {:?} must be 4-D",
                    x.as_slice(),
                    w.as_slice()
                ));
            };
            let groups = c.groups.max(1);
            let og = d.offset_groups;
            if og == 0 || ch % og != 0 || cg * groups != ch || m % groups != 0 {
                return Err(format!(
                    "channels {ch}, weights {:?}, groups {groups}, offset groups {og} do not fit",
                    w.as_slice()
                ));
            }
            let oh = window_output(
                h,
                c.padding.top,
                c.padding.bottom,
                kh,
                c.stride_y,
                c.dilation_y,
                OutputRounding::Floor,
            )?;
            let ow = window_output(
                wd,
                c.padding.left,
                c.padding.right,
                kw,
                c.stride_x,
                c.dilation_x,
                OutputRounding::Floor,
            )?;
            let taps = kh * kw;
            if off.as_slice() != [n, og * 2 * taps, oh, ow] {
                return Err(format!(
                    "offset must be {:?}, got {:?}",
                    [n, og * 2 * taps, oh, ow],
                    off.as_slice()
                ));
            }
            let mut next = 3;
            if c.bias_enabled {
                if inputs[next].shape.as_slice() != [m] {
                    return Err(format!(
                        "bias must be [{m}], got {:?}",
                        inputs[next].shape.as_slice()
                    ));
                }
                next += 1;
            }
            if d.mask_enabled && inputs[next].shape.as_slice() != [n, og * taps, oh, ow] {
                return Err(format!(
                    "mask must be {:?}, got {:?}",
                    [n, og * taps, oh, ow],
                    inputs[next].shape.as_slice()
                ));
            }
            vec![vec![n, m, oh, ow]]
        }
        LayerDescriptor::Unique(d) => {
            count(inputs, &[1])?;
            let x = &inputs[0].shape;
            if x.is_empty() {
                return Err("Unique needs rank >= 1, got a scalar".to_owned());
            }
            let n = if d.flatten {
                x.iter().try_fold(1u32, |a, &b| a.checked_mul(b))
            } else {
                x.get(d.axis as usize).copied()
            };
            let n = n.filter(|&n| n > 0).ok_or_else(|| {
                format!(
                    "Unique of {:?} along {d:?}: 1 to 2^32 - 1 items",
                    x.as_slice()
                )
            })?;
            vec![vec![4, n]]
        }
        LayerDescriptor::Lstm(d) => {
            count(inputs, &[6])?;
            let dirs = d.direction.count() as u32;
            let h = d.hidden_size;
            let [seq, batch, input] = inputs[0].shape.as_slice() else {
                return Err(format!(
                    "x must be [seq, batch, input], got {:?}",
                    inputs[0].shape.as_slice()
                ));
            };
            let gates = h.checked_mul(4).ok_or("hidden_size too large")?;
            let want: [(&str, Vec<u32>); 5] = [
                ("w", vec![dirs, gates, *input]),
                ("r", vec![dirs, gates, h]),
                ("b", vec![dirs, gates * 2]),
                ("initial_h", vec![dirs, *batch, h]),
                ("initial_c", vec![dirs, *batch, h]),
            ];
            for ((what, shape), t) in want.iter().zip(&inputs[1..]) {
                if t.shape.as_slice() != shape.as_slice() {
                    return Err(format!(
                        "{what} must be {shape:?}, got {:?}",
                        t.shape.as_slice()
                    ));
                }
            }
            if h == 0 {
                return Err("hidden_size must be at least 1".to_owned());
            }
            vec![vec![*seq, dirs, *batch, h]]
        }
        LayerDescriptor::Determinant => {
            count(inputs, &[1])?;
            let x = &inputs[0].shape;
            match x.as_slice() {
                [batch @ .., m, n] if m == n => vec![batch.to_vec()],
                s => return Err(format!("Det needs [..., m, m], got {s:?}")),
            }
        }
        LayerDescriptor::NonMaxSuppression(d) => {
            count(inputs, &[2])?;
            let (boxes, scores) = (&inputs[0].shape, &inputs[1].shape);
            let [b, n, 4] = boxes.as_slice() else {
                return Err(format!(
                    "boxes must be [batches, n, 4], got {:?}",
                    boxes.as_slice()
                ));
            };
            let [sb, classes, sn] = scores.as_slice() else {
                return Err(format!(
                    "scores must be [batches, classes, n], got {:?}",
                    scores.as_slice()
                ));
            };
            if (sb, sn) != (b, n) {
                return Err(format!(
                    "scores {:?} do not match boxes {:?}",
                    scores.as_slice(),
                    boxes.as_slice()
                ));
            }
            let m = u64::from(*b)
                * u64::from(*classes)
                * u64::from(d.max_output_boxes_per_class.min(*n));
            let m = u32::try_from(m)
                .ok()
                .filter(|&m| m > 0)
                .ok_or_else(|| format!("{m} kept boxes at most: the output needs 1 to 2^32 - 1"))?;
            vec![vec![4, m]]
        }
        LayerDescriptor::RoiAlign(d) => {
            count(inputs, &[3])?;
            let (x, rois, indices) = (&inputs[0].shape, &inputs[1].shape, &inputs[2].shape);
            let [_, c, _, _] = x.as_slice() else {
                return Err(format!("x must be [n, c, h, w], got {:?}", x.as_slice()));
            };
            let [r, 4] = rois.as_slice() else {
                return Err(format!("rois must be [r, 4], got {:?}", rois.as_slice()));
            };
            if indices.as_slice() != [*r] {
                return Err(format!(
                    "batch_indices must be [{r}], got {:?}",
                    indices.as_slice()
                ));
            }
            if d.output_height == 0 || d.output_width == 0 {
                return Err("the output height and width must be at least 1".to_owned());
            }
            vec![vec![*r, *c, d.output_height, d.output_width]]
        }
        LayerDescriptor::ScatterNd(_) => {
            count(inputs, &[3])?;
            let (data, indices, updates) = (&inputs[0].shape, &inputs[1].shape, &inputs[2].shape);
            let k = *indices
                .last()
                .ok_or_else(|| "indices must have rank >= 1".to_owned())?
                as usize;
            if k == 0 || k > data.len() {
                return Err(format!(
                    "index tuples of {k} for data of rank {}",
                    data.len()
                ));
            }
            let mut want = indices[..indices.len() - 1].to_vec();
            want.extend(&data[k..]);
            if updates.as_slice() != want {
                return Err(format!(
                    "updates must have shape {want:?}, got {:?}",
                    updates.as_slice()
                ));
            }
            vec![data.to_vec()]
        }
        LayerDescriptor::Gather(d) => {
            count(inputs, &[2])?;
            let (data, indices) = (&inputs[0].shape, &inputs[1].shape);
            let axis = d.axis as usize;
            if axis >= data.len() {
                return Err(format!(
                    "axis {axis} is out of range for rank {}",
                    data.len()
                ));
            }
            let mut out = data[..axis].to_vec();
            out.extend(indices.iter());
            out.extend(&data[axis + 1..]);
            vec![out]
        }
        LayerDescriptor::LayerNormalization(d) => {
            count(inputs, if d.bias_enabled { &[3] } else { &[2] })?;
            let x = &inputs[0].shape;
            let axis = d.axis as usize;
            if axis >= x.len() {
                return Err(format!("axis {axis} is out of range for rank {}", x.len()));
            }
            for (i, name) in [(1, "scale"), (2, "bias")]
                .into_iter()
                .take(inputs.len() - 1)
            {
                if inputs[i].shape.as_slice() != &x[axis..] {
                    return Err(format!(
                        "{name} must have shape {:?}, got {:?}",
                        &x[axis..],
                        inputs[i].shape.as_slice()
                    ));
                }
            }
            vec![x.to_vec()]
        }
        LayerDescriptor::InstanceNormalization(_) => {
            count(inputs, &[3])?;
            let x = &inputs[0].shape;
            if x.len() < 3 {
                return Err(format!("input must have rank >= 3, got {:?}", x.as_slice()));
            }
            for (i, name) in [(1, "scale"), (2, "bias")] {
                if inputs[i].shape.as_slice() != [x[1]] {
                    return Err(format!(
                        "{name} must have shape [{}], got {:?}",
                        x[1],
                        inputs[i].shape.as_slice()
                    ));
                }
            }
            vec![x.to_vec()]
        }
        LayerDescriptor::Cast(_)
        | LayerDescriptor::Quantize(_)
        | LayerDescriptor::Dequantize
        | LayerDescriptor::Requantize(_) => same(inputs)?,
        LayerDescriptor::Comparison(_) => {
            count(inputs, &[2])?;
            vec![broadcast(&inputs[0].shape, &inputs[1].shape)?]
        }
        LayerDescriptor::NonZero => {
            count(inputs, &[1])?;
            let x = &inputs[0];
            if x.shape.is_empty() {
                return Err("the input must have rank >= 1, got a scalar".to_owned());
            }
            let n = x
                .num_elements()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| {
                    format!(
                        "the input {:?} must have between 1 and {} elements",
                        x.shape.as_slice(),
                        u32::MAX
                    )
                })?;
            let rows = u32::try_from(x.shape.len() + 1).map_err(|_| "rank too large".to_owned())?;
            vec![vec![rows, n]]
        }
        LayerDescriptor::Where => {
            count(inputs, &[3])?;
            let ab = broadcast(&inputs[1].shape, &inputs[2].shape)?;
            vec![broadcast(&inputs[0].shape, &ab)?]
        }
        LayerDescriptor::BroadcastTo(d) => {
            count(inputs, &[1])?;
            let to = broadcast(&inputs[0].shape, &d.shape)?;
            if to != d.shape.as_slice() {
                return Err(format!(
                    "{:?} broadcasts with {:?} to {to:?}, not to the target",
                    inputs[0].shape.as_slice(),
                    d.shape.as_slice()
                ));
            }
            vec![to]
        }
        LayerDescriptor::BatchNormalization(d) => {
            count(inputs, &[5])?;
            let x = &inputs[0];
            if x.shape.len() < 2 {
                return Err(format!(
                    "input must have rank >= 2, got {:?}",
                    x.shape.as_slice()
                ));
            }
            let c = match d.layout {
                DataLayout::Nchw => x.shape[1],
                DataLayout::Nhwc => x.shape[x.shape.len() - 1],
            };
            for (i, name) in [(1, "scale"), (2, "bias"), (3, "mean"), (4, "variance")] {
                if inputs[i].shape.as_slice() != [c] {
                    return Err(format!(
                        "{name} must have shape [{c}], got {:?}",
                        inputs[i].shape.as_slice()
                    ));
                }
            }
            vec![x.shape.to_vec()]
        }
        LayerDescriptor::PreCompiled(p) => {
            return Err(format!(
                "the shapes of backend-specific layer {} are known only to {}",
                p.operation, p.backend
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::*;

    #[test]
    fn transpose_convolution_sizes_match_onnx() {
        let d = TransposeConvolution2dDescriptor {
            stride_x: 2,
            stride_y: 2,
            ..Default::default()
        };
        // PP-OCRv4 det's 2x2 stride 2: doubles.
        assert_eq!(
            transpose_convolution(&d, &[1, 64, 20, 20], &[64, 16, 2, 2]),
            Ok(vec![1, 16, 40, 40])
        );
        // ONNX's test_convtranspose_pads: [1,1,3,3] x [1,2,3,3], strides 3,2, pads 1,2,1,2,
        // output [1, 2, 7, 3].
        let padded = TransposeConvolution2dDescriptor {
            padding: Padding2d {
                top: 1,
                left: 2,
                bottom: 1,
                right: 2,
            },
            stride_y: 3,
            ..d.clone()
        };
        assert_eq!(
            transpose_convolution(&padded, &[1, 1, 3, 3], &[1, 2, 3, 3]),
            Ok(vec![1, 2, 7, 3])
        );
        assert!(transpose_convolution(&d, &[1, 3, 4, 4], &[4, 2, 2, 2]).is_err());
        // A bias must have one value per output channel.
        let with_bias = TransposeConvolution2dDescriptor {
            bias_enabled: true,
            ..d.clone()
        };
        let layer = LayerDescriptor::TransposeConvolution2d(with_bias);
        assert_eq!(
            output_shapes(&layer, &[t(&[1, 4, 3, 3]), t(&[4, 2, 2, 2]), t(&[1])]),
            Err("bias must have shape [2], got [1]".to_owned())
        );
        // Shape arithmetic that would overflow is an error, not a wrap.
        let huge = TransposeConvolution2dDescriptor {
            stride_y: u32::MAX,
            ..d.clone()
        };
        assert!(transpose_convolution(&huge, &[1, 4, u32::MAX, 3], &[4, 2, 2, 2]).is_err());
    }

    #[test]
    fn slice_reads_only_inside() {
        let d = |begin: &[u32], step: &[i32], size: &[u32]| SliceDescriptor {
            begin: begin.iter().copied().collect(),
            step: step.iter().copied().collect(),
            size: size.iter().copied().collect(),
        };
        assert_eq!(
            slice(&d(&[1, 4], &[2, -1], &[2, 5]), &[5, 5]),
            Ok(vec![2, 5])
        );
        assert_eq!(slice(&d(&[9], &[1], &[0]), &[5]), Ok(vec![0]));
        assert_eq!(
            slice(&d(&[3], &[2], &[2]), &[5]),
            Err("Slice of axis 0 (5 long) from 3, step 2, 2 indices reads outside it".to_owned())
        );
        assert_eq!(
            slice(&d(&[0], &[0], &[1]), &[5]),
            Err("Slice step 0 on axis 0".to_owned())
        );
        assert!(slice(&d(&[0], &[1], &[1]), &[5, 5]).is_err());
    }

    #[test]
    fn batch_matmul_broadcasts_batches_and_checks_the_inner_dimension() {
        let plain = BatchMatMulDescriptor::default();
        assert_eq!(batch_matmul(&plain, &[2, 3], &[3, 4]), Ok(vec![2, 4]));
        assert_eq!(
            batch_matmul(&plain, &[5, 1, 2, 3], &[7, 3, 4]),
            Ok(vec![5, 7, 2, 4])
        );
        let tb = BatchMatMulDescriptor {
            transpose_a: true,
            transpose_b: true,
        };
        assert_eq!(batch_matmul(&tb, &[8, 3, 2], &[4, 3]), Ok(vec![8, 2, 4]));
        assert_eq!(
            batch_matmul(&plain, &[2, 3], &[4, 5]),
            Err("BatchMatMul of [2, 3] and [4, 5]: inner dimensions 3 and 4 differ".to_owned())
        );
        assert_eq!(
            batch_matmul(&plain, &[3], &[3, 4]),
            Err("BatchMatMul needs inputs of rank 2 or more, got [3] and [3, 4]".to_owned())
        );
        assert!(batch_matmul(&plain, &[2, 2, 3], &[3, 3, 4]).is_err());
    }

    fn t(s: &[u32]) -> TensorInfo {
        TensorInfo::new(s, DataType::Float32)
    }

    #[test]
    fn window_sizes_match_onnx() {
        // 5 wide, kernel 3, stride 2, pad 1+1: floor((7-3)/2)+1 = 3.
        assert_eq!(
            window_output(5, 1, 1, 3, 2, 1, OutputRounding::Floor),
            Ok(3)
        );
        // 6 wide, kernel 3, stride 2: floor 2, ceil 3.
        assert_eq!(
            window_output(6, 0, 0, 3, 2, 1, OutputRounding::Floor),
            Ok(2)
        );
        assert_eq!(
            window_output(6, 0, 0, 3, 2, 1, OutputRounding::Ceiling),
            Ok(3)
        );
        // Ceil mode never starts a window in the trailing padding: 5 wide, k 2, s 2, pad 0+1.
        assert_eq!(
            window_output(5, 0, 1, 2, 2, 1, OutputRounding::Ceiling),
            Ok(3)
        );
        assert_eq!(
            window_output(4, 0, 1, 2, 2, 1, OutputRounding::Ceiling),
            Ok(2)
        );
        // Dilation 2 of a 3-kernel spans 5.
        assert_eq!(
            window_output(7, 0, 0, 3, 1, 2, OutputRounding::Floor),
            Ok(3)
        );
        assert!(window_output(2, 0, 0, 3, 1, 1, OutputRounding::Floor).is_err());
    }

    #[test]
    fn convolution_shapes_and_errors() {
        let d = Convolution2dDescriptor {
            padding: Padding2d {
                left: 1,
                right: 1,
                top: 1,
                bottom: 1,
            },
            bias_enabled: true,
            ..Default::default()
        };
        let conv = LayerDescriptor::Convolution2d(d.clone());
        assert_eq!(
            output_shapes(&conv, &[t(&[1, 3, 8, 8]), t(&[16, 3, 3, 3]), t(&[16])]),
            Ok(vec![vec![1, 16, 8, 8]])
        );
        assert_eq!(
            output_shapes(&conv, &[t(&[1, 4, 8, 8]), t(&[16, 3, 3, 3]), t(&[16])]),
            Err("weights [16, 3, 3, 3] expect 3 input channels, the input has 4".to_owned())
        );
        let grouped = LayerDescriptor::Convolution2d(Convolution2dDescriptor {
            groups: 2,
            ..d.clone()
        });
        assert_eq!(
            output_shapes(&grouped, &[t(&[1, 4, 8, 8]), t(&[6, 2, 3, 3]), t(&[6])]),
            Ok(vec![vec![1, 6, 8, 8]])
        );
        let dw = LayerDescriptor::DepthwiseConvolution2d(d.clone());
        assert_eq!(
            output_shapes(&dw, &[t(&[1, 4, 8, 8]), t(&[8, 1, 3, 3]), t(&[8])]),
            Ok(vec![vec![1, 8, 8, 8]])
        );
        // Weights of 2^16 channels per group in 2^16 groups: the channels they expect
        // overflow u32 (a crafted compiled network; no panic, and no product that wraps to
        // the input's 0 channels).
        let many = LayerDescriptor::Convolution2d(Convolution2dDescriptor {
            groups: 1 << 16,
            bias_enabled: false,
            ..d
        });
        assert_eq!(
            output_shapes(&many, &[t(&[1, 0, 8, 8]), t(&[0, 1 << 16, 3, 3])]),
            Err(
                "weights [0, 65536, 3, 3] expect 65536 x 65536 input channels, the input has 0"
                    .to_owned()
            )
        );
    }

    #[test]
    fn other_layers() {
        let fc = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
            bias_enabled: false,
            transpose_weights: true,
        });
        assert_eq!(
            output_shapes(&fc, &[t(&[2, 8]), t(&[4, 8])]),
            Ok(vec![vec![2, 4]])
        );
        let cat = LayerDescriptor::Concat(ConcatDescriptor { axis: 1 });
        assert_eq!(
            output_shapes(&cat, &[t(&[1, 2, 3]), t(&[1, 5, 3])]),
            Ok(vec![vec![1, 7, 3]])
        );
        assert!(output_shapes(&cat, &[t(&[1, 2, 3]), t(&[2, 5, 3])]).is_err());
        let tr = LayerDescriptor::Transpose(TransposeDescriptor {
            permutation: vec![0, 2, 1].into(),
        });
        assert_eq!(
            output_shapes(&tr, &[t(&[1, 2, 3])]),
            Ok(vec![vec![1, 3, 2]])
        );
        let bad = LayerDescriptor::Transpose(TransposeDescriptor {
            permutation: vec![0, 0, 1].into(),
        });
        assert!(output_shapes(&bad, &[t(&[1, 2, 3])]).is_err());
        let mean = LayerDescriptor::Mean(MeanDescriptor {
            axes: vec![2, 3].into(),
            keep_dims: false,
        });
        assert_eq!(
            output_shapes(&mean, &[t(&[1, 8, 4, 4])]),
            Ok(vec![vec![1, 8]])
        );
        let flat = LayerDescriptor::Flatten(FlattenDescriptor { axis: 1 });
        assert_eq!(
            output_shapes(&flat, &[t(&[2, 3, 4])]),
            Ok(vec![vec![2, 12]])
        );
        let pad = LayerDescriptor::Pad(PadDescriptor {
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
            value: 0.0,
            mode: PadMode::Reflect,
        });
        assert_eq!(output_shapes(&pad, &[t(&[1, 3])]), Ok(vec![vec![1, 6]]));
        assert!(output_shapes(&pad, &[t(&[1, 2])]).is_err());
        let add = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
        assert_eq!(
            output_shapes(&add, &[t(&[4, 1, 5]), t(&[3, 1])]),
            Ok(vec![vec![4, 3, 5]])
        );
        assert_eq!(normalize_axis(-1, 4), Ok(3));
        // Hostile sizes are errors, not overflows.
        let huge = LayerDescriptor::Pad(PadDescriptor {
            padding: vec![PadPair {
                before: u32::MAX,
                after: 1,
            }]
            .into(),
            value: 0.0,
            mode: PadMode::Constant,
        });
        assert!(output_shapes(&huge, &[t(&[2])]).is_err());
        assert!(output_shapes(&cat, &[t(&[1, u32::MAX, 3]), t(&[1, 5, 3])]).is_err());
        assert!(output_shapes(&flat, &[t(&[2, u32::MAX, 4])]).is_err());
        assert_eq!(
            output_shapes(&flat, &[t(&[u32::MAX, 3, 4])]),
            Ok(vec![vec![u32::MAX, 12]])
        );
        assert!(normalize_axis(4, 4).is_err());
    }
}
