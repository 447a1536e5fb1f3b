//! The layer suite's oracle for quantised tensors (Backend API 1.2), from the definitions in
//! `backplane-api`'s layers doc ("Quantised tensors"), written apart from every backend like
//! [`oracle`] (whose `f64` layer functions it calls on integer or dequantised values).
//!
//! A quantised element `q` of a tensor with offset `o` and scale `s` stands for
//! `s * (q - o)`. Each layer falls in one of five families, and its output is compared
//! ([`compare`]) either exactly or within one quantisation step ([`Tolerance`]):
//! - **Conversions** (`Quantize`, `Dequantize`, `Requantize`): the definitions are f32
//!   formulas written step by step (`saturate(round_half_even(x / s) + o)` with the division
//!   in f32; `(q - o) as f32 * s`; a `Requantize` is one then the other). The oracle does
//!   those f32 steps: **exact**.
//! - **Products** (`Convolution2d`, `DepthwiseConvolution2d`, `FullyConnected`,
//!   `BatchMatMul` on a quantised input): `acc = bias + sum((x - x_o) * (w - w_o))` is an
//!   integer, exact in `f64` ([`oracle`]'s convolution, fully connected and matrix product on
//!   the zero-point-subtracted integers); then
//!   `saturate(round_half_even(acc as f32 * m) + y_o)` with `m = (x_s * w_s[c]) / y_s` in
//!   f32, as specified: **exact**.
//! - **Dynamic products** (`FullyConnected`, `BatchMatMul` with a Float32 input and quantised
//!   weights): `DynamicQuantizeLinear`'s f32 steps, the integer product, then
//!   `(acc as f32) * (s * w_s[c]) + bias[c]` in f32: **exact** (a Float32 output, bit for
//!   bit).
//! - **Data movement** (`Reshape`, `Flatten`, `Transpose`, `Slice`, `Gather`, `BroadcastTo`,
//!   `MemCopy`, `Concat` and `Pooling2d` `Max` when every tensor has the same parameters):
//!   the stored values move unchanged ([`oracle`]'s function on the stored integers):
//!   **exact**.
//! - **Computations on real values** (everything else: `ElementwiseBinary`, `Activation`,
//!   `Pooling2d` `Average`, `Mean`, `Softmax`, `Concat` of differing parameters, ...): the
//!   definition dequantises, computes in f32 and quantises with the output's parameters;
//!   the oracle dequantises exactly, computes in `f64` and quantises
//!   (`round_half_even(v / y_s) + y_o`, saturated). The f32 computation a backend is held to
//!   (and onnxruntime's integer and table forms of it, which CpuRef follows) is within a few
//!   f32 roundings of the `f64` value, so where that value lies near a rounding tie the two
//!   round to neighbouring integers: **within one step** there, and only there.

use backplane_api::{
    DataType, FullyConnectedDescriptor, LayerDescriptor, PoolingType, ROption, TensorInfo,
};

use crate::oracle::{self, Tensor};

/// How closely a backend's output must match the oracle's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tolerance {
    /// Equal values (quantised) or equal f32 bits (Float32, NaN for NaN).
    Exact,
    /// Quantised values at most one step apart.
    OneStep,
}

/// The oracle's output: the stored integers of a quantised output (or the f32 values of a
/// Float32 one, held in `f64`) and how they are compared.
#[derive(Debug, Clone)]
pub struct Expected {
    /// The output's values.
    pub values: Tensor,
    /// How closely the backend must match them.
    pub tolerance: Tolerance,
}

/// A quantised tensor: its stored integers and its parameters.
#[derive(Debug, Clone)]
struct QTensor {
    shape: Vec<usize>,
    q: Vec<i64>,
    params: Params,
}

/// The parameters of a quantised tensor.
#[derive(Debug, Clone, PartialEq)]
struct Params {
    data_type: DataType,
    offset: i64,
    /// One scale, or one per index of `axis`.
    scales: Vec<f32>,
    axis: Option<usize>,
}

impl Params {
    /// The parameters `info` carries (an error for a tensor without them).
    fn of(info: &TensorInfo) -> Result<Self, String> {
        let ROption::RSome(q) = &info.quantization else {
            return Err(format!("{info} has no quantization parameters"));
        };
        let (scales, axis) = match &q.per_axis {
            ROption::RSome(p) => (p.scales.to_vec(), Some(p.axis as usize)),
            ROption::RNone => (vec![q.scale], None),
        };
        Ok(Self {
            data_type: info.data_type,
            offset: i64::from(q.offset),
            scales,
            axis,
        })
    }

    /// The smallest and largest stored value.
    fn range(&self) -> (i64, i64) {
        match self.data_type {
            DataType::QAsymmU8 => (0, 255),
            _ => (-128, 127),
        }
    }

    /// The scale of element `flat` of a tensor of `shape`.
    fn scale_at(&self, shape: &[usize], flat: usize) -> f32 {
        match self.axis {
            None => self.scales[0],
            Some(axis) => {
                let inner: usize = shape[axis + 1..].iter().product();
                self.scales[(flat / inner.max(1)) % shape[axis]]
            }
        }
    }

    /// The scale of index `c` of the quantisation axis (the one scale per tensor).
    fn scale_of_index(&self, c: usize) -> f32 {
        if self.axis.is_some() {
            self.scales[c]
        } else {
            self.scales[0]
        }
    }
}

/// `saturate(round_half_even(v) + offset)` into `lo..=hi`, `v` already divided by the scale.
fn saturate(v: f64, offset: i64, (lo, hi): (i64, i64)) -> i64 {
    if v.is_nan() {
        return offset.clamp(lo, hi);
    }
    let r = v.round_ties_even();
    (r + offset as f64).clamp(lo as f64, hi as f64) as i64
}

/// ONNX `QuantizeLinear` of one f32 value, the division in f32.
fn quantize_f32(x: f32, scale: f32, offset: i64, range: (i64, i64)) -> i64 {
    saturate(f64::from(x / scale), offset, range)
}

/// ONNX `DequantizeLinear` of one value, in f32.
fn dequantize_f32(q: i64, scale: f32, offset: i64) -> f32 {
    (q - offset) as f32 * scale
}

impl QTensor {
    /// The tensor `info` describes, from its bytes.
    fn read(info: &TensorInfo, bytes: &[u8]) -> Result<Self, String> {
        let params = Params::of(info)?;
        let shape: Vec<usize> = info.shape.iter().map(|&d| d as usize).collect();
        if bytes.len() != shape.iter().product::<usize>() {
            return Err(format!("{} bytes do not hold {info}", bytes.len()));
        }
        let q = bytes
            .iter()
            .map(|&b| match info.data_type {
                DataType::QAsymmU8 => i64::from(b),
                _ => i64::from(b as i8),
            })
            .collect();
        Ok(Self { shape, q, params })
    }

    /// The stored integers.
    fn stored(&self) -> Tensor {
        Tensor::new(&self.shape, self.q.iter().map(|&v| v as f64).collect())
    }

    /// The stored integers minus the zero point.
    fn centred(&self) -> Tensor {
        let o = self.params.offset;
        Tensor::new(
            &self.shape,
            self.q.iter().map(|&v| (v - o) as f64).collect(),
        )
    }

    /// The real values `s * (q - o)`, exact in `f64`.
    fn real(&self) -> Tensor {
        let data = self
            .q
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                f64::from(self.params.scale_at(&self.shape, i)) * (v - self.params.offset) as f64
            })
            .collect();
        Tensor::new(&self.shape, data)
    }
}

/// One input of a case: a quantised tensor or a plain one (Float32, Signed32).
enum Input {
    Quantized(QTensor),
    Plain(Tensor),
}

impl Input {
    fn read(info: &TensorInfo, bytes: &[u8]) -> Result<Self, String> {
        if info.data_type.is_quantized() {
            QTensor::read(info, bytes).map(Self::Quantized)
        } else {
            Tensor::from_bytes(info, bytes).map(Self::Plain)
        }
    }

    fn quantized(&self) -> Result<&QTensor, String> {
        match self {
            Self::Quantized(q) => Ok(q),
            Self::Plain(_) => Err("expects a quantized tensor".into()),
        }
    }

    fn plain(&self) -> Result<&Tensor, String> {
        match self {
            Self::Plain(t) => Ok(t),
            Self::Quantized(_) => Err("expects a Float32 or Signed32 tensor".into()),
        }
    }

    /// The real values.
    fn real(&self) -> Tensor {
        match self {
            Self::Quantized(q) => q.real(),
            Self::Plain(t) => t.clone(),
        }
    }
}

/// The layers whose quantised form moves stored values when every tensor shares parameters.
fn moves_values(layer: &LayerDescriptor) -> bool {
    matches!(
        layer,
        LayerDescriptor::Reshape(_)
            | LayerDescriptor::Flatten(_)
            | LayerDescriptor::Transpose(_)
            | LayerDescriptor::Slice(_)
            | LayerDescriptor::Gather(_)
            | LayerDescriptor::BroadcastTo(_)
            | LayerDescriptor::MemCopy
            | LayerDescriptor::Concat(_)
    ) || matches!(layer, LayerDescriptor::Pooling2d(p) if p.pool_type == PoolingType::Max)
}

/// The expected output of `layer` on `inputs` (each its info and bytes) into `output`, a case
/// with quantised tensors. `Err` for a layer or a combination the oracle does not define.
pub fn evaluate(
    layer: &LayerDescriptor,
    inputs: &[(&TensorInfo, &[u8])],
    output: &TensorInfo,
) -> Result<Expected, String> {
    let read: Vec<Input> = inputs
        .iter()
        .map(|(info, bytes)| Input::read(info, bytes))
        .collect::<Result<_, _>>()?;
    let first = read.first().ok_or("expects an input")?;
    let out_shape: Vec<usize> = output.shape.iter().map(|&d| d as usize).collect();
    let exact = |values| {
        Ok(Expected {
            values,
            tolerance: Tolerance::Exact,
        })
    };
    match layer {
        LayerDescriptor::Quantize(_) => {
            let x = first.plain()?;
            let p = Params::of(output)?;
            let data = x
                .data
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let s = p.scale_at(&x.shape, i);
                    quantize_f32(v as f32, s, p.offset, p.range()) as f64
                })
                .collect();
            exact(Tensor::new(&x.shape, data))
        }
        LayerDescriptor::Dequantize => {
            let x = first.quantized()?;
            let data = (0..x.q.len())
                .map(|i| {
                    let s = x.params.scale_at(&x.shape, i);
                    f64::from(dequantize_f32(x.q[i], s, x.params.offset))
                })
                .collect();
            exact(Tensor::new(&x.shape, data))
        }
        LayerDescriptor::Requantize(_) => {
            let x = first.quantized()?;
            let p = Params::of(output)?;
            let data = (0..x.q.len())
                .map(|i| {
                    let real =
                        dequantize_f32(x.q[i], x.params.scale_at(&x.shape, i), x.params.offset);
                    quantize_f32(real, p.scale_at(&x.shape, i), p.offset, p.range()) as f64
                })
                .collect();
            exact(Tensor::new(&x.shape, data))
        }
        LayerDescriptor::Convolution2d(_)
        | LayerDescriptor::DepthwiseConvolution2d(_)
        | LayerDescriptor::FullyConnected(_)
        | LayerDescriptor::BatchMatMul(_)
            if matches!(first, Input::Plain(_)) =>
        {
            dynamic_product(layer, &read, output)
        }
        LayerDescriptor::Convolution2d(_)
        | LayerDescriptor::DepthwiseConvolution2d(_)
        | LayerDescriptor::FullyConnected(_)
        | LayerDescriptor::BatchMatMul(_) => product(layer, &read, output),
        _ if moves_values(layer) && same_parameters(&read, output)? => {
            let stored: Vec<Tensor> = read
                .iter()
                .map(|i| match i {
                    Input::Quantized(q) => q.stored(),
                    Input::Plain(t) => t.clone(),
                })
                .collect();
            let values = oracle::evaluate(layer, &stored)?;
            check_shape(&values, &out_shape)?;
            exact(values)
        }
        _ => {
            let real: Vec<Tensor> = read.iter().map(Input::real).collect();
            let y = oracle::evaluate(layer, &real)?;
            check_shape(&y, &out_shape)?;
            let p = Params::of(output)?;
            let data = y
                .data
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let s = f64::from(p.scale_at(&y.shape, i));
                    saturate(v / s, p.offset, p.range()) as f64
                })
                .collect();
            Ok(Expected {
                values: Tensor::new(&y.shape, data),
                tolerance: Tolerance::OneStep,
            })
        }
    }
}

fn check_shape(t: &Tensor, shape: &[usize]) -> Result<(), String> {
    if t.shape == shape {
        Ok(())
    } else {
        Err(format!(
            "the oracle's output {:?} is not the output's {shape:?}",
            t.shape
        ))
    }
}

/// Whether every quantised input shares the output's type and parameters.
fn same_parameters(inputs: &[Input], output: &TensorInfo) -> Result<bool, String> {
    let out = Params::of(output)?;
    Ok(inputs.iter().all(|i| match i {
        Input::Quantized(q) => q.params == out,
        Input::Plain(_) => true,
    }))
}

/// The index along the output-channel axis of element `flat` of a product's output: axis 1
/// of a convolution's NCHW output, the last axis of a matrix product's.
fn channel(layer: &LayerDescriptor, shape: &[usize], flat: usize) -> usize {
    let axis = match layer {
        LayerDescriptor::Convolution2d(_) | LayerDescriptor::DepthwiseConvolution2d(_) => 1,
        _ => shape.len() - 1,
    };
    let inner: usize = shape[axis + 1..].iter().product();
    (flat / inner.max(1)) % shape[axis]
}

/// The accumulators of a product of the integers `x` and `w` (zero points subtracted) plus
/// `bias` (integers, or none), exact in `f64`.
fn accumulate(
    layer: &LayerDescriptor,
    x: Tensor,
    w: Tensor,
    bias: Option<Tensor>,
) -> Result<Tensor, String> {
    let mut ins = vec![x, w];
    ins.extend(bias);
    // The sum alone when no bias is handed over (a dynamic convolution adds its own).
    let unbiased =
        |d: &backplane_api::Convolution2dDescriptor| backplane_api::Convolution2dDescriptor {
            bias_enabled: ins.len() > 2,
            ..d.clone()
        };
    match layer {
        LayerDescriptor::Convolution2d(d) => oracle::convolution2d(&ins, &unbiased(d), false),
        LayerDescriptor::DepthwiseConvolution2d(d) => {
            oracle::convolution2d(&ins, &unbiased(d), true)
        }
        LayerDescriptor::FullyConnected(d) => oracle::fully_connected(
            &ins,
            &FullyConnectedDescriptor {
                bias_enabled: ins.len() > 2,
                ..*d
            },
        ),
        LayerDescriptor::BatchMatMul(d) => oracle::batch_matmul(&ins[0], &ins[1], d),
        other => Err(format!("{} is not a product", other.kind())),
    }
}

/// A quantised product: exact integer accumulation, then `acc as f32 * m[c]` in f32 with
/// `m[c] = (x_s * w_s[c]) / y_s`, rounded half to even, offset, saturated.
fn product(
    layer: &LayerDescriptor,
    inputs: &[Input],
    output: &TensorInfo,
) -> Result<Expected, String> {
    let x = inputs[0].quantized()?;
    let w = inputs.get(1).ok_or("expects weights")?.quantized()?;
    let bias = inputs.get(2).map(Input::plain).transpose()?.cloned();
    let acc = accumulate(layer, x.centred(), w.centred(), bias)?;
    let y = Params::of(output)?;
    let data = acc
        .data
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let c = channel(layer, &acc.shape, i);
            let m = (x.params.scales[0] * w.params.scale_of_index(c)) / y.scales[0];
            saturate(f64::from(a as f32 * m), y.offset, y.range()) as f64
        })
        .collect();
    Ok(Expected {
        values: Tensor::new(&acc.shape, data),
        tolerance: Tolerance::Exact,
    })
}

/// A dynamically quantised product: `DynamicQuantizeLinear` of the Float32 input in f32
/// (`lo = min(0, min x)`, `hi = max(0, max x)`, `s = (hi - lo) / 255`,
/// `zp = saturate_u8(round_half_even(0 - lo / s))`, `q = saturate_u8(round_half_even(x / s)
/// + zp)`; `q - zp = 0` everywhere when `s = 0`), the exact integer product, then
/// `(acc as f32) * (s * w_s[c])` and `+ bias[c]` in f32. A convolution's bias (Backend API
/// 1.5) enters the sum instead: `acc + saturate_i32(floor(bias[c] / m))` in i32 (wrapping),
/// with `m = s * w_s[c]` in f32 and `s = 1` for an all-zero input.
fn dynamic_product(
    layer: &LayerDescriptor,
    inputs: &[Input],
    output: &TensorInfo,
) -> Result<Expected, String> {
    if output.data_type != DataType::Float32 {
        return Err("a dynamically quantized product has a Float32 output".into());
    }
    let x = inputs[0].plain()?;
    let w = inputs.get(1).ok_or("expects weights")?.quantized()?;
    let xs: Vec<f32> = x.data.iter().map(|&v| v as f32).collect();
    let lo = xs.iter().fold(0.0f32, |a, &v| if v < a { v } else { a });
    let hi = xs.iter().fold(0.0f32, |a, &v| if v > a { v } else { a });
    let s = (hi - lo) / 255.0;
    let centred: Vec<f64> = if s == 0.0 {
        vec![0.0; xs.len()]
    } else {
        let zp = saturate(f64::from(0.0 - lo / s), 0, (0, 255));
        xs.iter()
            .map(|&v| (quantize_f32(v, s, zp, (0, 255)) - zp) as f64)
            .collect()
    };
    let acc = accumulate(layer, Tensor::new(&x.shape, centred), w.centred(), None)?;
    let bias = inputs.get(2).map(Input::plain).transpose()?;
    let convolution = matches!(layer, LayerDescriptor::Convolution2d(_));
    let data = acc
        .data
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let c = channel(layer, &acc.shape, i);
            match bias {
                Some(b) if convolution => {
                    let m = if s == 0.0 { 1.0 } else { s } * w.params.scale_of_index(c);
                    let start = (b.data[c] as f32 / m).floor() as i32;
                    f64::from((a as i64 as i32).wrapping_add(start) as f32 * m)
                }
                Some(b) => {
                    f64::from(a as f32 * (s * w.params.scale_of_index(c)) + b.data[c] as f32)
                }
                None => f64::from(a as f32 * (s * w.params.scale_of_index(c))),
            }
        })
        .collect();
    Ok(Expected {
        values: Tensor::new(&acc.shape, data),
        tolerance: Tolerance::Exact,
    })
}

/// Compares a backend's output (`info`, `bytes`) with the oracle's: the shapes must be equal;
/// a quantised output's stored values exactly or within one step ([`Tolerance`]); a Float32
/// output bit for bit (NaN for NaN). Returns the largest difference (in steps for a quantised
/// output), or the first element out of tolerance.
pub fn compare(info: &TensorInfo, bytes: &[u8], want: &Expected) -> Result<f64, String> {
    let got = if info.data_type.is_quantized() {
        QTensor::read(info, bytes)?.stored()
    } else {
        Tensor::from_bytes(info, bytes)?
    };
    if got.shape != want.values.shape {
        return Err(format!(
            "shape {:?}, the oracle's is {:?}",
            got.shape, want.values.shape
        ));
    }
    let allowed = match want.tolerance {
        Tolerance::Exact => 0.0,
        Tolerance::OneStep => 1.0,
    };
    let mut worst = 0f64;
    for (k, (&g, &w)) in got.data.iter().zip(&want.values.data).enumerate() {
        let at = || format!("at {:?}", oracle::indices(&want.values.shape)[k]);
        if g.is_nan() && w.is_nan() {
            continue;
        }
        let diff = (g - w).abs();
        if diff.is_nan() || diff > allowed {
            return Err(format!(
                "{} {g} vs oracle {w} {} (allowed {allowed})",
                info.data_type,
                at()
            ));
        }
        worst = worst.max(diff);
    }
    Ok(worst)
}

#[cfg(test)]
mod tests {
    //! The families on values worked by hand.

    use backplane_api::{PerAxisQuantization, Quantization};

    use super::*;

    fn qt(shape: &[u32], dt: DataType, scale: f32, offset: i32) -> TensorInfo {
        TensorInfo::new(shape, dt).with_quantization(Quantization::per_tensor(scale, offset))
    }

    #[test]
    fn conversions_follow_the_f32_steps() {
        let x = TensorInfo::new(&[4], DataType::Float32);
        let xb: Vec<u8> = [0.25f32, 0.75, -1.0, 1000.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let y = qt(&[4], DataType::QAsymmU8, 0.5, 10);
        let e = evaluate(
            &LayerDescriptor::Quantize(DataType::QAsymmU8),
            &[(&x, &xb)],
            &y,
        )
        .unwrap();
        // 0.5 -> 0, 1.5 -> 2, -2, saturated.
        assert_eq!(e.values.data, [10.0, 12.0, 8.0, 255.0]);
        assert_eq!(e.tolerance, Tolerance::Exact);
        let per_axis =
            TensorInfo::new(&[2, 2], DataType::QSymmS8).with_quantization(Quantization {
                scale: 0.0,
                offset: 0,
                per_axis: ROption::RSome(PerAxisQuantization {
                    axis: 1,
                    scales: vec![1.0, 0.5].into(),
                }),
            });
        let d = evaluate(
            &LayerDescriptor::Dequantize,
            &[(&per_axis, &[2u8, 2, 0xFF, 3])],
            &TensorInfo::new(&[2, 2], DataType::Float32),
        )
        .unwrap();
        assert_eq!(d.values.data, [2.0, 1.0, -1.0, 1.5]);
    }

    #[test]
    fn products_accumulate_then_requantize() {
        // x = [130, 126] - 128 = [2, -2]; w = [[3], [1]]; bias 5: acc = 5 + 6 - 2 = 9;
        // m = (0.5 * 0.25) / 0.5 = 0.25: 2.25 -> 2, + 1.
        let x = qt(&[1, 2], DataType::QAsymmU8, 0.5, 128);
        let w = qt(&[2, 1], DataType::QSymmS8, 0.25, 0).constant();
        let b = TensorInfo::new(&[1], DataType::Signed32).constant();
        let y = qt(&[1, 1], DataType::QAsymmU8, 0.5, 1);
        let fc = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
            bias_enabled: true,
            transpose_weights: false,
        });
        let e = evaluate(
            &fc,
            &[(&x, &[130, 126]), (&w, &[3, 1]), (&b, &5i32.to_le_bytes())],
            &y,
        )
        .unwrap();
        assert_eq!(e.values.data, [3.0]);
        assert_eq!(e.tolerance, Tolerance::Exact);
    }

    #[test]
    fn real_computations_allow_one_step() {
        let t = qt(&[2], DataType::QAsymmU8, 0.5, 0);
        let y = qt(&[2], DataType::QAsymmU8, 1.0, 0);
        let add = LayerDescriptor::ElementwiseBinary(backplane_api::BinaryOperation::Add);
        // 0.5 + 1.5 = 2 (exact), 1.0 + 0.5 = 1.5 -> 2 (tie to even).
        let e = evaluate(&add, &[(&t, &[1, 2]), (&t, &[3, 1])], &y).unwrap();
        assert_eq!(e.values.data, [2.0, 2.0]);
        assert_eq!(e.tolerance, Tolerance::OneStep);
        assert!(compare(&y, &[2, 1], &e).is_ok());
        assert!(compare(&y, &[0, 2], &e).is_err());
        let exact = Expected {
            tolerance: Tolerance::Exact,
            ..e
        };
        assert!(compare(&y, &[2, 1], &exact).is_err());
    }
}
