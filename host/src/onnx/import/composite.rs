//! Operators imported as exact compositions of existing layers, so that every backend that
//! runs those layers runs them too (issue 39 allows such rewrites where they are exact):
//!
//! - activations on Float32: `Softplus` `log(exp(x) + 1)`, `Softsign` `x / (1 + |x|)`, `Selu`
//!   `gamma * elu(x, alpha)`, `Celu` `alpha * elu(x / alpha)`, `ThresholdedRelu`
//!   `x > alpha ? x : 0`, `Mish` `x * tanh(softplus(x))`, `Shrink`, `Sign`, `Swish`
//!   `x * sigmoid(alpha * x)`, `PRelu` `x < 0 ? slope * x : x`, `LogSoftmax` `log(softmax(x))`;
//! - `CumSum` and `CumProd` (a running `Add` or `Mul` over `Slice`s, every numeric type), `Hardmax` (an `ArgMinMax`
//!   compared with the positions), `LpNormalization` (p 1 or 2), `TopK` (unrolled `ArgMinMax`
//!   and `Reduce` steps, each taken element masked for the next);
//! - `Mod` (a truncating division's remainder, with Python's sign rule for `fmod = 0`);
//! - `IsNaN` (`x != x`) and `IsInf` (`|x| == inf`, or one sign), on every float type;
//! - `RMSNormalization` `x / sqrt(mean(x * x) + epsilon) * scale` over the trailing axes;
//! - `Trilu` (a `Where` with a triangular mask fixed at import), `EyeLike` (folded) and
//!   `Tile` (a `Reshape` that inserts a unit dimension before each, a `BroadcastTo` of the
//!   repeats, and a `Reshape` that merges them).
//!
//! Each is as exact as its layers; where onnxruntime computes more carefully (`Softplus` as
//! `log1p(exp(x))`, shifted for large `x`), the results agree within the node tests'
//! tolerances on their data, and would overflow where `exp(x)` does in f32.

use backplane_api::{
    ActivationDescriptor, ActivationFunction, BinaryOperation as B, BroadcastToDescriptor,
    ComparisonOperation as C, DataType, LayerDescriptor, MeanDescriptor, ReshapeDescriptor,
    UnaryOperation as U,
};

use super::{
    Importer, NResult, Node, Value,
    attributes::{attr_float, attr_int, normalize_axis},
    invalid,
    logic::Logic,
    unsupported,
};
use crate::{graph::network::TensorRef, onnx::fold::Const};

/// The longest axis `CumSum` is unrolled along.
pub const MAX_CUMSUM: usize = 256;

/// The largest `k` `TopK` is unrolled to.
pub const MAX_TOP_K: usize = 256;

impl Importer {
    /// Input `i` as a Float32 tensor (these rewrites' constants are Float32).
    fn float_input(&mut self, n: &Node<'_>, i: usize) -> NResult<TensorRef> {
        let (name, v) = self.req(n, i)?;
        if self.data_type(&v)? != DataType::Float32 {
            return Err(unsupported(format!(
                "{} of a {} tensor (imported as Float32 layers)",
                n.op(),
                self.data_type(&v)?
            )));
        }
        self.tensor(&name, &v)
    }

    /// A Float32 scalar constant, broadcast by the layers that read it.
    fn scalar(&mut self, n: &Node<'_>, what: &str, v: f32) -> NResult<TensorRef> {
        self.float_scalar_as(n, what, v, DataType::Float32)
    }

    fn un(&mut self, n: &Node<'_>, s: Option<&str>, op: U, x: TensorRef) -> NResult<TensorRef> {
        self.layer(n, s, LayerDescriptor::ElementwiseUnary(op), &[x])
    }

    fn bin(
        &mut self,
        n: &Node<'_>,
        s: Option<&str>,
        op: B,
        a: TensorRef,
        b: TensorRef,
    ) -> NResult<TensorRef> {
        self.layer(n, s, LayerDescriptor::ElementwiseBinary(op), &[a, b])
    }

    fn cmp(
        &mut self,
        n: &Node<'_>,
        s: Option<&str>,
        op: C,
        a: TensorRef,
        b: TensorRef,
    ) -> NResult<TensorRef> {
        self.layer(n, s, LayerDescriptor::Comparison(op), &[a, b])
    }

    /// An `Activation` layer of `function` with parameters `a` and `b`.
    fn act(
        &mut self,
        n: &Node<'_>,
        s: Option<&str>,
        function: ActivationFunction,
        (a, b): (f32, f32),
        x: TensorRef,
    ) -> NResult<TensorRef> {
        let d = LayerDescriptor::Activation(ActivationDescriptor { function, a, b });
        self.layer(n, s, d, &[x])
    }

    fn select(
        &mut self,
        n: &Node<'_>,
        s: Option<&str>,
        c: TensorRef,
        a: TensorRef,
        b: TensorRef,
    ) -> NResult<TensorRef> {
        self.layer(n, s, LayerDescriptor::Where, &[c, a, b])
    }

    /// `log(exp(x) + 1)`, the last layer named after the node with `last`.
    fn softplus_of(
        &mut self,
        n: &Node<'_>,
        x: TensorRef,
        last: Option<&str>,
    ) -> NResult<TensorRef> {
        let e = self.un(n, Some("exp"), U::Exp, x)?;
        let one = self.scalar(n, "one", 1.0)?;
        let e1 = self.bin(n, Some("plus_one"), B::Add, e, one)?;
        self.un(n, last, U::Log, e1)
    }

    /// A scalar constant of the float type `dt` (Float32, Float64 or a 16-bit float; `v` is
    /// exact in each for the values used here: 0, 1, infinities, NaN).
    pub(super) fn float_scalar_as(
        &mut self,
        n: &Node<'_>,
        what: &str,
        v: f32,
        dt: DataType,
    ) -> NResult<TensorRef> {
        let data: Vec<u8> = match dt {
            DataType::Float32 => v.to_le_bytes().to_vec(),
            DataType::Float64 => f64::from(v).to_le_bytes().to_vec(),
            DataType::Float16 | DataType::BFloat16 => crate::onnx::fold::half_bytes(&[v], dt)
                .ok_or_else(|| invalid(format!("{dt} is not a 16-bit float")))?,
            other => return Err(unsupported(format!("{} of a {other} tensor", n.op()))),
        };
        let name = self.unique(&format!("{}/{what}", n.name));
        let constant = backplane_api::ConstTensor {
            info: backplane_api::TensorInfo::new(&[], dt).constant(),
            data: data.into(),
        };
        Ok(self.builder.add_constant(&name, constant)?)
    }

    /// `IsNaN` (`x != x`) and `IsInf` on any float type.
    fn float_predicate(&mut self, n: &Node<'_>) -> NResult<TensorRef> {
        let (name, v) = self.req(n, 0)?;
        let dt = self.data_type(&v)?;
        if !dt.is_float() {
            return Err(unsupported(format!("{} of a {dt} tensor", n.op())));
        }
        let x = self.tensor(&name, &v)?;
        if n.op() == "IsNaN" {
            return self.cmp(n, None, C::NotEqual, x, x);
        }
        let pos = attr_int(n, "detect_positive")?.unwrap_or(1) != 0;
        let neg = attr_int(n, "detect_negative")?.unwrap_or(1) != 0;
        match (pos, neg) {
            (true, true) => {
                let a = self.un(n, Some("abs"), U::Abs, x)?;
                let inf = self.float_scalar_as(n, "inf", f32::INFINITY, dt)?;
                self.cmp(n, None, C::Equal, a, inf)
            }
            (true, false) | (false, true) => {
                let v = if pos {
                    f32::INFINITY
                } else {
                    f32::NEG_INFINITY
                };
                let inf = self.float_scalar_as(n, "inf", v, dt)?;
                self.cmp(n, None, C::Equal, x, inf)
            }
            (false, false) => {
                // Nothing is detected: NaN equals nothing, so this is false everywhere.
                let nan = self.float_scalar_as(n, "nothing", f32::NAN, dt)?;
                self.cmp(n, None, C::Equal, x, nan)
            }
        }
    }

    /// The float activations and predicates listed in the module doc.
    pub(super) fn composite_activation(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        if matches!(n.op(), "IsNaN" | "IsInf") {
            return Ok(vec![Value::Tensor(self.float_predicate(n)?)]);
        }
        let x = self.float_input(n, 0)?;
        let f = |name: &str, default: f32| -> NResult<f32> {
            Ok(attr_float(n, name)?.unwrap_or(default))
        };
        let out = match n.op() {
            "Softplus" => self.softplus_of(n, x, None)?,
            "Softsign" => {
                let a = self.un(n, Some("abs"), U::Abs, x)?;
                let one = self.scalar(n, "one", 1.0)?;
                let d = self.bin(n, Some("plus_one"), B::Add, a, one)?;
                self.bin(n, None, B::Div, x, d)?
            }
            "Selu" => {
                let alpha = f("alpha", 1.673_263_2)?;
                let gamma = f("gamma", 1.050_701)?;
                let e = self.act(n, Some("elu"), ActivationFunction::Elu, (alpha, 0.0), x)?;
                let g = self.scalar(n, "gamma", gamma)?;
                self.bin(n, None, B::Mul, e, g)?
            }
            "Celu" => {
                let alpha = f("alpha", 1.0)?;
                let a = self.scalar(n, "alpha", alpha)?;
                let scaled = self.bin(n, Some("scaled"), B::Div, x, a)?;
                let e = self.act(n, Some("elu"), ActivationFunction::Elu, (1.0, 0.0), scaled)?;
                self.bin(n, None, B::Mul, e, a)?
            }
            "ThresholdedRelu" => {
                let alpha = self.scalar(n, "alpha", f("alpha", 1.0)?)?;
                let above = self.cmp(n, Some("above"), C::Greater, x, alpha)?;
                let zero = self.scalar(n, "zero", 0.0)?;
                self.select(n, None, above, x, zero)?
            }
            "Mish" => {
                let sp = self.softplus_of(n, x, Some("softplus"))?;
                let t = self.act(n, Some("tanh"), ActivationFunction::TanH, (1.0, 1.0), sp)?;
                self.bin(n, None, B::Mul, x, t)?
            }
            "Shrink" => {
                let lambd = f("lambd", 0.5)?;
                let bias = f("bias", 0.0)?;
                let lo = self.scalar(n, "minus_lambd", -lambd)?;
                let hi = self.scalar(n, "lambd", lambd)?;
                let b = self.scalar(n, "bias", bias)?;
                let zero = self.scalar(n, "zero", 0.0)?;
                let below = self.cmp(n, Some("below"), C::Less, x, lo)?;
                let above = self.cmp(n, Some("above"), C::Greater, x, hi)?;
                let plus = self.bin(n, Some("plus_bias"), B::Add, x, b)?;
                let minus = self.bin(n, Some("minus_bias"), B::Sub, x, b)?;
                let upper = self.select(n, Some("upper"), above, minus, zero)?;
                self.select(n, None, below, plus, upper)?
            }
            "Sign" => {
                let zero = self.scalar(n, "zero", 0.0)?;
                let pos = self.cmp(n, Some("positive"), C::Greater, x, zero)?;
                let neg = self.cmp(n, Some("negative"), C::Less, x, zero)?;
                let cast = LayerDescriptor::Cast(DataType::Float32);
                let p = self.layer(n, Some("positive_f"), cast.clone(), &[pos])?;
                let q = self.layer(n, Some("negative_f"), cast, &[neg])?;
                let d = self.bin(n, Some("difference"), B::Sub, p, q)?;
                // NaN stays NaN: neither comparison holds for it, so it is taken from x.
                let isnan = self.cmp(n, Some("is_nan"), C::NotEqual, x, x)?;
                self.select(n, None, isnan, x, d)?
            }
            "Swish" => {
                let alpha = self.scalar(n, "alpha", f("alpha", 1.0)?)?;
                let ax = self.bin(n, Some("scaled"), B::Mul, x, alpha)?;
                let s = self.act(
                    n,
                    Some("sigmoid"),
                    ActivationFunction::Sigmoid,
                    (0.0, 0.0),
                    ax,
                )?;
                self.bin(n, None, B::Mul, x, s)?
            }
            "PRelu" => {
                let mut slope = self.float_input(n, 1)?;
                // A slope per channel given as [C] for an input [N, C, ...] (as PyTorch's
                // exports of PReLU(num_parameters = C) write it, which numpy's broadcast would
                // align with the last dimension): shaped [C, 1, ...] to apply along axis 1.
                let xs = self
                    .builder
                    .tensor_info(x)
                    .map(|i| i.shape.to_vec())
                    .unwrap_or_default();
                let ss = self
                    .builder
                    .tensor_info(slope)
                    .map(|i| i.shape.to_vec())
                    .unwrap_or_default();
                if backplane_api::shapes::broadcast(&xs, &ss).is_err()
                    && ss.len() == 1
                    && xs.len() >= 2
                    && xs[1] == ss[0]
                {
                    let mut per_channel = vec![ss[0]];
                    per_channel.resize(xs.len() - 1, 1);
                    let d = LayerDescriptor::Reshape(ReshapeDescriptor {
                        target_shape: per_channel.into(),
                    });
                    slope = self.layer(n, Some("per_channel"), d, &[slope])?;
                }
                let zero = self.scalar(n, "zero", 0.0)?;
                let neg = self.cmp(n, Some("negative"), C::Less, x, zero)?;
                let scaled = self.bin(n, Some("scaled"), B::Mul, x, slope)?;
                self.select(n, None, neg, scaled, x)?
            }
            op => return Err(unsupported(format!("{op} is not a composite activation"))),
        };
        Ok(vec![Value::Tensor(out)])
    }

    /// `Mod`: folded on integer constants; on tensors, the remainder of a truncating
    /// division `r = a - b * (a / b)` (exact for integers, whose `Div` truncates toward zero),
    /// and for `fmod = 0` (Python's sign rule) `r + b` where `r` is not 0 and its sign differs
    /// from `b`'s. On floats (`fmod = 1`, as ONNX requires) the quotient is truncated with
    /// `Where(q < 0, Ceil(q), Floor(q))`: within f32 rounding of C's `fmod`, not bit-exact.
    pub(super) fn modulo(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let fmod = attr_int(n, "fmod")?.unwrap_or(0) != 0;
        let (an, av) = self.req(n, 0)?;
        let (bn, bv) = self.req(n, 1)?;
        if let (Value::I64(a), Value::I64(b)) = (&av, &bv) {
            let c = Const::binary(a, b, |x, y| {
                if y == 0 {
                    return Err("Mod by zero".to_owned());
                }
                let r = x.wrapping_rem(y);
                Ok(if !fmod && r != 0 && ((r < 0) != (y < 0)) {
                    r + y
                } else {
                    r
                })
            })
            .map_err(invalid)?;
            return Ok(vec![self.store_i64(c)?]);
        }
        let dt = self.data_type(&av)?;
        if dt.is_float() && !fmod {
            return Err(invalid("Mod of floats needs fmod = 1"));
        }
        if !(dt.is_float() || dt.is_integer()) {
            return Err(unsupported(format!("Mod of {dt} tensors")));
        }
        let a = self.typed_tensor(&an, &av, dt)?;
        let b = self.typed_tensor(&bn, &bv, dt)?;
        let q = self.bin(n, Some("quotient"), B::Div, a, b)?;
        let q = if dt.is_float() {
            let zero = self.float_scalar_as(n, "zero", 0.0, dt)?;
            let neg = self.cmp(n, Some("quotient_negative"), C::Less, q, zero)?;
            let up = self.un(n, Some("ceil"), U::Ceil, q)?;
            let down = self.un(n, Some("floor"), U::Floor, q)?;
            self.select(n, Some("truncated"), neg, up, down)?
        } else {
            q
        };
        let bq = self.bin(n, Some("product"), B::Mul, b, q)?;
        if fmod {
            return Ok(vec![Value::Tensor(self.bin(n, None, B::Sub, a, bq)?)]);
        }
        let r = self.bin(n, Some("remainder"), B::Sub, a, bq)?;
        let zero =
            self.integer_tensor_as(&format!("{}\u{0}zero", n.name), &Const::scalar(0), dt)?;
        let nonzero = self.cmp(n, Some("nonzero"), C::NotEqual, r, zero)?;
        let r_neg = self.cmp(n, Some("remainder_negative"), C::Less, r, zero)?;
        let b_neg = self.cmp(n, Some("divisor_negative"), C::Less, b, zero)?;
        let differ = self.logic_of(n, Logic::Xor, r_neg, b_neg, Some("signs_differ"))?;
        let adjust = self.logic_of(n, Logic::And, nonzero, differ, Some("adjust"))?;
        let shifted = self.bin(n, Some("shifted"), B::Add, r, b)?;
        Ok(vec![Value::Tensor(
            self.select(n, None, adjust, shifted, r)?,
        )])
    }

    /// A value as a tensor of type `dt` (an integer constant in that type, beside tensors of
    /// it).
    fn typed_tensor(&mut self, name: &str, v: &Value, dt: DataType) -> NResult<TensorRef> {
        match v {
            Value::I64(c) if dt.is_integer() => self.integer_tensor_as(name, c, dt),
            v => self.tensor(name, v),
        }
    }

    /// `CumSum` and `CumProd` along a constant axis: one `Slice` per position, a running `Add`
    /// (`Mul`), and a `Concat` of the partial results (`exclusive` starts from 0 (1), `reverse`
    /// runs backwards): exact in every numeric type, as the operations are the same ones in the
    /// same order. At most [`MAX_CUMSUM`] positions (the network grows with the axis).
    pub(super) fn cumulative(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let product = n.op() == "CumProd";
        let (xn, xv) = self.req(n, 0)?;
        let shape = self.shape(&xv)?;
        let axis = self
            .const_ints(n, 1, "axis")?
            .ok_or_else(|| invalid("axis is required"))?;
        let axis = normalize_axis(
            *axis
                .data
                .first()
                .ok_or_else(|| invalid("axis must hold one value"))?,
            shape.len(),
        )?;
        let len = shape[axis] as usize;
        if len > MAX_CUMSUM {
            return Err(unsupported(format!(
                "{} along an axis of {len} (more than {MAX_CUMSUM}: it is unrolled)",
                n.op()
            )));
        }
        let exclusive = attr_int(n, "exclusive")?.unwrap_or(0) != 0;
        let reverse = attr_int(n, "reverse")?.unwrap_or(0) != 0;
        let dt = self.data_type(&xv)?;
        let x = self.tensor(&xn, &xv)?;
        let mut size = shape.clone();
        size[axis] = 1;
        let slice = |k: usize| {
            let mut begin = vec![0u32; shape.len()];
            begin[axis] = k as u32;
            LayerDescriptor::Slice(backplane_api::SliceDescriptor {
                begin: begin.into(),
                step: vec![1; shape.len()].into(),
                size: size.clone().into(),
            })
        };
        let order: Vec<usize> = if reverse {
            (0..len).rev().collect()
        } else {
            (0..len).collect()
        };
        let zero = if exclusive {
            // The identity in the input's type: every numeric type's 0 is all-zero bytes.
            let info = backplane_api::TensorInfo::new(&size, dt).constant();
            let count = info
                .num_elements()
                .ok_or_else(|| invalid("the slice's size overflows"))?;
            let data = if product {
                one_bytes(dt)
                    .ok_or_else(|| unsupported(format!("CumProd of {dt} data")))?
                    .repeat(count)
            } else {
                vec![0u8; count * dt.size_in_bytes()]
            };
            let name = self.unique(&format!("{}/identity", n.name));
            let constant = backplane_api::ConstTensor {
                info,
                data: data.into(),
            };
            Some(self.builder.add_constant(&name, constant)?)
        } else {
            None
        };
        let op = if product { B::Mul } else { B::Add };
        let mut sums: Vec<(usize, TensorRef)> = Vec::with_capacity(len);
        let mut running: Option<TensorRef> = None;
        for (step, &k) in order.iter().enumerate() {
            let part = self.layer(n, Some(&format!("part_{k}")), slice(k), &[x])?;
            let next = match running {
                None => part,
                Some(r) => self.bin(n, Some(&format!("running_{k}")), op, r, part)?,
            };
            let out = if exclusive {
                match (step, running) {
                    (0, _) | (_, None) => zero.ok_or_else(|| invalid("no zero"))?,
                    (_, Some(r)) => r,
                }
            } else {
                next
            };
            sums.push((k, out));
            running = Some(next);
        }
        sums.sort_by_key(|(k, _)| *k);
        let parts: Vec<TensorRef> = sums.into_iter().map(|(_, t)| t).collect();
        let d = LayerDescriptor::Concat(backplane_api::ConcatDescriptor { axis: axis as u32 });
        Ok(vec![Value::Tensor(self.layer(n, None, d, &parts)?)])
    }

    /// `TopK` (opset 10 and later, `k` an input) of Float32 or integer data (the integers in
    /// Float64, exact to 2^53, and cast back), unrolled `k` times: the
    /// first largest (or smallest) element's index (`ArgMinMax`) and value (`Reduce`), then
    /// that element replaced by -inf (+inf) for the next step; the values and the indices
    /// (cast to Signed64) concatenated along the axis. Sorted, ties by the lower index, as
    /// onnxruntime returns them. At most [`MAX_TOP_K`] steps. (Inputs holding infinities of
    /// the replacing sign can give an index twice: such data is refused nowhere, and noted.)
    pub(super) fn top_k(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        if self.opset < 10 {
            return Err(unsupported("TopK before opset 10 (k an attribute)"));
        }
        let (xn, xv) = self.req(n, 0)?;
        let dt = self.data_type(&xv)?;
        let original = self.typed_tensor(&xn, &xv, dt)?;
        // Integers are ordered in Float64 (exact to 2^53), where -inf can mark a taken
        // element, and their values cast back.
        let integer = dt.is_integer();
        let x = if integer {
            self.layer(
                n,
                Some("ordered"),
                LayerDescriptor::Cast(DataType::Float64),
                &[original],
            )?
        } else if dt == DataType::Float32 {
            original
        } else {
            return Err(unsupported(format!(
                "TopK of a {dt} tensor (imported as Float32 layers)"
            )));
        };
        let shape = self
            .builder
            .tensor_info(x)
            .map(|i| i.shape.to_vec())
            .unwrap_or_default();
        let axis = normalize_axis(attr_int(n, "axis")?.unwrap_or(-1), shape.len())?;
        let k = self
            .const_ints(n, 1, "k")?
            .ok_or_else(|| invalid("k is required"))?;
        let k = *k
            .data
            .first()
            .ok_or_else(|| invalid("k must hold one value"))?;
        let k = usize::try_from(k).map_err(|_| invalid(format!("k = {k}")))?;
        if k == 0 || k > shape[axis] as usize {
            return Err(if k == 0 {
                unsupported("TopK with k = 0 (empty outputs)")
            } else {
                invalid(format!("k = {k} exceeds the axis's {}", shape[axis]))
            });
        }
        if k > MAX_TOP_K {
            return Err(unsupported(format!(
                "TopK with k = {k} (more than {MAX_TOP_K}: it is unrolled)"
            )));
        }
        let largest = attr_int(n, "largest")?.unwrap_or(1) != 0;
        let (arg, reduce, fill) = if largest {
            (
                backplane_api::ArgMinMaxFunction::Max,
                backplane_api::ReduceOperation::Max,
                f32::NEG_INFINITY,
            )
        } else {
            (
                backplane_api::ArgMinMaxFunction::Min,
                backplane_api::ReduceOperation::Min,
                f32::INFINITY,
            )
        };
        let mut positions = vec![1u32; shape.len()];
        positions[axis] = shape[axis];
        let iota = Const::new(positions, (0..i64::from(shape[axis])).collect()).map_err(invalid)?;
        let iota = self.integer_tensor_as(
            &format!("{}\u{0}positions", n.name),
            &iota,
            DataType::Signed32,
        )?;
        let fill = if integer {
            self.float_scalar_as(n, "taken", fill, DataType::Float64)?
        } else {
            self.scalar(n, "taken", fill)?
        };
        let (mut values, mut indices) = (Vec::with_capacity(k), Vec::with_capacity(k));
        let mut rest = x;
        for step in 0..k {
            let d = LayerDescriptor::ArgMinMax(backplane_api::ArgMinMaxDescriptor {
                function: arg,
                axis: axis as u32,
                keep_dims: true,
                select_last_index: false,
            });
            let index = self.layer(n, Some(&format!("index_{step}")), d, &[rest])?;
            let d = LayerDescriptor::Reduce(backplane_api::ReduceDescriptor {
                operation: reduce,
                axes: vec![axis as u32].into(),
                keep_dims: true,
            });
            values.push(self.layer(n, Some(&format!("value_{step}")), d, &[rest])?);
            indices.push(index);
            if step + 1 < k {
                let hit = self.cmp(n, Some(&format!("hit_{step}")), C::Equal, index, iota)?;
                rest = self.select(n, Some(&format!("rest_{step}")), hit, fill, rest)?;
            }
        }
        let join = LayerDescriptor::Concat(backplane_api::ConcatDescriptor { axis: axis as u32 });
        let indices = self.layer(n, Some("indices_i32"), join.clone(), &indices)?;
        let d = LayerDescriptor::Cast(DataType::Signed64);
        let indices = self.layer(n, Some("indices"), d, &[indices])?;
        let values = if integer {
            let v = self.layer(n, Some("values_f64"), join, &values)?;
            self.layer(n, Some("values"), LayerDescriptor::Cast(dt), &[v])?
        } else {
            self.layer(n, Some("values"), join, &values)?
        };
        Ok(vec![Value::Tensor(values), Value::Tensor(indices)])
    }

    /// `Hardmax` (opset 13, along one axis): 1 at the first largest element, 0 elsewhere; an
    /// `ArgMinMax` (Max, first index) compared with the positions along the axis.
    pub(super) fn hardmax(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        if self.opset < 13 {
            return Err(unsupported(
                "Hardmax before opset 13 (its input coerced to 2-D)",
            ));
        }
        let x = self.float_input(n, 0)?;
        let shape = self
            .builder
            .tensor_info(x)
            .map(|i| i.shape.to_vec())
            .unwrap_or_default();
        let axis = normalize_axis(attr_int(n, "axis")?.unwrap_or(-1), shape.len())?;
        let d = LayerDescriptor::ArgMinMax(backplane_api::ArgMinMaxDescriptor {
            function: backplane_api::ArgMinMaxFunction::Max,
            axis: axis as u32,
            keep_dims: true,
            select_last_index: false,
        });
        let arg = self.layer(n, Some("argmax"), d, &[x])?;
        let mut iota_shape = vec![1u32; shape.len()];
        iota_shape[axis] = shape[axis];
        let iota =
            Const::new(iota_shape, (0..i64::from(shape[axis])).collect()).map_err(invalid)?;
        let iota = self.integer_tensor_as(
            &format!("{}\u{0}positions", n.name),
            &iota,
            DataType::Signed32,
        )?;
        let hit = self.cmp(n, Some("hit"), C::Equal, arg, iota)?;
        let d = LayerDescriptor::Cast(DataType::Float32);
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[hit])?)])
    }

    /// `LpNormalization` (p 1 or 2) along one axis: `x / sum(|x|)` or `x / sqrt(sum(x * x))`,
    /// 0 where the norm is 0.
    pub(super) fn lp_normalization(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let x = self.float_input(n, 0)?;
        let rank = self.builder.tensor_info(x).map_or(0, |i| i.shape.len());
        let axis = normalize_axis(attr_int(n, "axis")?.unwrap_or(-1), rank)?;
        let p = attr_int(n, "p")?.unwrap_or(2);
        let summed = match p {
            1 => self.un(n, Some("abs"), U::Abs, x)?,
            2 => self.bin(n, Some("square"), B::Mul, x, x)?,
            p => return Err(invalid(format!("p = {p} (1 or 2)"))),
        };
        let d = LayerDescriptor::Reduce(backplane_api::ReduceDescriptor {
            operation: backplane_api::ReduceOperation::Sum,
            axes: vec![axis as u32].into(),
            keep_dims: true,
        });
        let mut norm = self.layer(n, Some("sum"), d, &[summed])?;
        if p == 2 {
            norm = self.un(n, Some("norm"), U::Sqrt, norm)?;
        }
        // A zero norm gives 0, as onnxruntime computes it (not 0/0).
        let divided = self.bin(n, Some("divided"), B::Div, x, norm)?;
        let zero = self.scalar(n, "zero", 0.0)?;
        let null = self.cmp(n, Some("zero_norm"), C::Equal, norm, zero)?;
        Ok(vec![Value::Tensor(
            self.select(n, None, null, zero, divided)?,
        )])
    }

    /// `LogSoftmax`: the `Softmax` import, then `Log`.
    pub(super) fn log_softmax(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        self.float_input(n, 0)?;
        let Some(Value::Tensor(s)) = self.softmax_named(n, Some("softmax"))?.pop() else {
            return Err(invalid("Softmax gave no tensor"));
        };
        Ok(vec![Value::Tensor(self.un(n, None, U::Log, s)?)])
    }

    /// `RMSNormalization` (opset 23) over the axes from `axis` on, in Float32
    /// (`stash_type` 1, the default).
    pub(super) fn rms_normalization(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        if attr_int(n, "stash_type")?.is_some_and(|t| t != 1) {
            return Err(unsupported("RMSNormalization with stash_type other than 1"));
        }
        let x = self.float_input(n, 0)?;
        let scale = self.float_input(n, 1)?;
        let rank = self.builder.tensor_info(x).map_or(0, |i| i.shape.len());
        let axis = normalize_axis(attr_int(n, "axis")?.unwrap_or(-1), rank)?;
        let epsilon = attr_float(n, "epsilon")?.unwrap_or(1e-5);
        let sq = self.bin(n, Some("square"), B::Mul, x, x)?;
        let mean = LayerDescriptor::Mean(MeanDescriptor {
            axes: (axis..rank).map(|a| a as u32).collect(),
            keep_dims: true,
        });
        let m = self.layer(n, Some("mean"), mean, &[sq])?;
        let eps = self.scalar(n, "epsilon", epsilon)?;
        let me = self.bin(n, Some("plus_epsilon"), B::Add, m, eps)?;
        let root = self.un(n, Some("rms"), U::Sqrt, me)?;
        let normed = self.bin(n, Some("normalized"), B::Div, x, root)?;
        Ok(vec![Value::Tensor(self.bin(
            n,
            None,
            B::Mul,
            normed,
            scale,
        )?)])
    }

    /// `Trilu`: `Where(mask, x, 0)` with the lower (`upper = 0`) or upper triangle from the
    /// `k`-th diagonal of the last two dimensions, the mask fixed at import.
    pub(super) fn trilu(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let shape = self.shape(&xv)?;
        let [.., rows, cols] = shape.as_slice() else {
            return Err(invalid("Trilu's input must have rank >= 2"));
        };
        let (rows, cols) = (*rows as usize, *cols as usize);
        let k = match self.const_ints(n, 1, "k")? {
            None => 0,
            Some(c) => *c
                .data
                .first()
                .ok_or_else(|| invalid("k must hold one value"))?,
        };
        let upper = attr_int(n, "upper")?.unwrap_or(1) != 0;
        let mask: Vec<i64> = (0..rows)
            .flat_map(|i| {
                (0..cols).map(move |j| {
                    let d = j as i64 - i as i64;
                    i64::from(if upper { d >= k } else { d <= k })
                })
            })
            .collect();
        let mask = Const::new(vec![rows as u32, cols as u32], mask).map_err(invalid)?;
        let mask =
            self.integer_tensor_as(&format!("{}\u{0}mask", n.name), &mask, DataType::Boolean)?;
        let dt = self.data_type(&xv)?;
        let x = self.tensor(&xn, &xv)?;
        let zero = if dt == DataType::Float32 {
            self.scalar(n, "zero", 0.0)?
        } else if dt.is_integer() || dt == DataType::Boolean {
            self.integer_tensor_as(&format!("{}\u{0}zero", n.name), &Const::scalar(0), dt)?
        } else {
            return Err(unsupported(format!("Trilu of a {dt} tensor")));
        };
        Ok(vec![Value::Tensor(self.select(n, None, mask, x, zero)?)])
    }

    /// `EyeLike`: folded (the input's shape is known), of the `dtype` attribute's type or the
    /// input's.
    pub(super) fn eye_like(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (_, xv) = self.req(n, 0)?;
        let shape = self.shape(&xv)?;
        let [rows, cols] = shape.as_slice() else {
            return Err(invalid("EyeLike's input must be 2-D"));
        };
        let (rows, cols) = (*rows as usize, *cols as usize);
        let k = attr_int(n, "k")?.unwrap_or(0);
        let ones = (0..rows).flat_map(|i| (0..cols).map(move |j| j as i64 - i as i64 == k));
        let to = match attr_int(n, "dtype")? {
            Some(t) => i32::try_from(t).map_err(|_| invalid("dtype out of range"))?,
            None => self.data_type(&xv)?.onnx_code(),
        };
        let out = n.proto.output.first().cloned().unwrap_or_default();
        let dt = crate::onnx::proto::data_type::plain(to)
            .ok_or_else(|| unsupported(format!("EyeLike of type {to}")))?;
        self.local_types.insert(out, to);
        let shape = vec![rows as u32, cols as u32];
        if dt.is_float() {
            let data = ones.map(|b| if b { 1.0 } else { 0.0 }).collect();
            Ok(vec![
                self.store_f32(Const::new(shape, data).map_err(invalid)?)?,
            ])
        } else {
            let data = ones.map(i64::from).collect();
            Ok(vec![
                self.store_i64(Const::new(shape, data).map_err(invalid)?)?,
            ])
        }
    }

    /// `Tile`: `x` reshaped with a unit dimension before each of its own, broadcast to the
    /// repeats there, and reshaped to the tiled shape; every type (the layers move elements).
    pub(super) fn tile(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let shape = self.shape(&xv)?;
        let repeats = self
            .const_ints(n, 1, "repeats")?
            .ok_or_else(|| invalid("repeats are required"))?;
        if repeats.data.len() != shape.len() {
            return Err(invalid(format!(
                "{} repeats for rank {}",
                repeats.data.len(),
                shape.len()
            )));
        }
        let reps = repeats
            .data
            .iter()
            .map(|&r| u32::try_from(r).map_err(|_| invalid(format!("repeat {r}"))))
            .collect::<NResult<Vec<u32>>>()?;
        if reps.contains(&0) {
            return Err(unsupported("Tile with a repeat of 0 (an empty tensor)"));
        }
        let x = self.tensor(&xn, &xv)?;
        let spread: Vec<u32> = shape.iter().flat_map(|&d| [1, d]).collect();
        let wide: Vec<u32> = shape
            .iter()
            .zip(&reps)
            .flat_map(|(&d, &r)| [r, d])
            .collect();
        let tiled = shape
            .iter()
            .zip(&reps)
            .map(|(&d, &r)| d.checked_mul(r).ok_or_else(|| invalid("Tile too large")))
            .collect::<NResult<Vec<u32>>>()?;
        let a = self.layer(
            n,
            Some("spread"),
            LayerDescriptor::Reshape(ReshapeDescriptor {
                target_shape: spread.into(),
            }),
            &[x],
        )?;
        let b = self.layer(
            n,
            Some("repeat"),
            LayerDescriptor::BroadcastTo(BroadcastToDescriptor { shape: wide.into() }),
            &[a],
        )?;
        let c = self.layer(
            n,
            None,
            LayerDescriptor::Reshape(ReshapeDescriptor {
                target_shape: tiled.into(),
            }),
            &[b],
        )?;
        Ok(vec![Value::Tensor(c)])
    }
}

/// The bytes of 1 in the numeric type `dt` (`None` for Boolean and the quantised types).
fn one_bytes(dt: DataType) -> Option<Vec<u8>> {
    Some(match dt {
        DataType::Float32 => 1f32.to_le_bytes().to_vec(),
        DataType::Float64 => 1f64.to_le_bytes().to_vec(),
        DataType::Float16 => 0x3C00u16.to_le_bytes().to_vec(),
        DataType::BFloat16 => 0x3F80u16.to_le_bytes().to_vec(),
        dt if dt.is_integer() => {
            let mut v = vec![0u8; dt.size_in_bytes()];
            v[0] = 1;
            v
        }
        _ => return None,
    })
}
