//! Activations as `Activation` layers: `Relu`, `Sigmoid`, `Tanh`, `HardSwish`, `LeakyRelu`,
//! `Elu`, `Gelu` (Backend API 1.1), and `Clip` as `BoundedReLU`; `HardSigmoid` as `Mul`, `Add`
//! and `BoundedReLU`.

use backplane_api::{ActivationDescriptor, ActivationFunction, BinaryOperation, LayerDescriptor};

use super::{
    Importer, NResult, Node, Value,
    attributes::{attr_float, attr_string},
    invalid,
};
use crate::onnx::fold::Const;

impl Importer {
    pub(super) fn activation(
        &mut self,
        n: &Node<'_>,
        function: ActivationFunction,
        a: f32,
        b: f32,
    ) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let x = self.tensor(&xn, &xv)?;
        let d = LayerDescriptor::Activation(ActivationDescriptor { function, a, b });
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)])
    }

    /// `Gelu` (opset 20): `approximate` "none" (erf) or "tanh".
    pub(super) fn gelu(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        if self.opset < 20 {
            return Err(super::unsupported(format!(
                "Gelu is an opset 20 operator; the model imports opset {}",
                self.opset
            )));
        }
        let a = match attr_string(n, "approximate")?.as_deref() {
            None | Some("none") => 0.0,
            Some("tanh") => 1.0,
            Some(other) => return Err(invalid(format!("approximate = {other:?}"))),
        };
        self.activation(n, ActivationFunction::Gelu, a, 0.0)
    }

    /// onnxruntime's `com.microsoft` GELUs: `Gelu` (erf), `BiasGelu` (erf of `x + bias`),
    /// `FastGelu` (the tanh approximation, of `x + bias` when a bias is given) and `QuickGelu`
    /// (`x · sigmoid(alpha · x)`, `alpha` 1.702 unless given).
    pub(super) fn ms_gelu(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let mut x = self.tensor(&xn, &xv)?;
        if let Some((bn, bv)) = self.arg(n, 1)? {
            let b = self.tensor(&bn, &bv)?;
            let d = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
            x = self.layer(n, Some("biased"), d, &[x, b])?;
        }
        let act = |function, a| {
            LayerDescriptor::Activation(ActivationDescriptor {
                function,
                a,
                b: 0.0,
            })
        };
        let y = match n.op() {
            "QuickGelu" => {
                let alpha = attr_float(n, "alpha")?.unwrap_or(1.702);
                let c =
                    self.float_scalar_as(n, "alpha", alpha, backplane_api::DataType::Float32)?;
                let mul = LayerDescriptor::ElementwiseBinary(BinaryOperation::Mul);
                let ax = self.layer(n, Some("scaled"), mul.clone(), &[x, c])?;
                let s = self.layer(
                    n,
                    Some("sigmoid"),
                    act(ActivationFunction::Sigmoid, 0.0),
                    &[ax],
                )?;
                self.layer(n, None, mul, &[x, s])?
            }
            "FastGelu" => self.layer(n, None, act(ActivationFunction::Gelu, 1.0), &[x])?,
            _ => self.layer(n, None, act(ActivationFunction::Gelu, 0.0), &[x])?,
        };
        Ok(vec![Value::Tensor(y)])
    }

    /// `LeakyRelu` (`alpha` 0.01 unless given).
    pub(super) fn leaky_relu(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let alpha = attr_float(n, "alpha")?.unwrap_or(0.01);
        self.activation(n, ActivationFunction::LeakyReLU, alpha, 0.0)
    }

    /// `Elu` (`alpha` 1 unless given).
    pub(super) fn elu(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let alpha = attr_float(n, "alpha")?.unwrap_or(1.0);
        self.activation(n, ActivationFunction::Elu, alpha, 0.0)
    }

    pub(super) fn clip(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        if self.opset >= 11 && matches!(xv, Value::Tensor(_)) && self.data_type(&xv)?.is_integer() {
            return self.clip_integers(n, &xn, &xv);
        }
        let (min, max) = if self.opset < 11 {
            (
                attr_float(n, "min")?.unwrap_or(f32::MIN),
                attr_float(n, "max")?.unwrap_or(f32::MAX),
            )
        } else {
            (
                self.const_scalar(n, 1, "min")?.unwrap_or(f32::NEG_INFINITY),
                self.const_scalar(n, 2, "max")?.unwrap_or(f32::INFINITY),
            )
        };
        self.activation(n, ActivationFunction::BoundedReLU, max, min)
    }

    /// `Clip` of an integer tensor: `Maximum` and `Minimum` with the bounds in its type
    /// (exact; the `Activation` layer's bounds are f32).
    fn clip_integers(&mut self, n: &Node<'_>, xn: &str, xv: &Value) -> NResult<Vec<Value>> {
        let dt = self.data_type(xv)?;
        let mut y = self.tensor(xn, xv)?;
        for (i, op, what) in [
            (1, BinaryOperation::Maximum, "min"),
            (2, BinaryOperation::Minimum, "max"),
        ] {
            let Some((bn, bv)) = self.arg(n, i)? else {
                continue;
            };
            let bound = match &bv {
                Value::I64(c) => self.integer_tensor_as(&bn, c, dt)?,
                Value::Tensor(_) => self.tensor(&bn, &bv)?,
                _ => {
                    return Err(invalid(format!(
                        "Clip {what} ({bn}) of an integer tensor must be an integer"
                    )));
                }
            };
            let d = LayerDescriptor::ElementwiseBinary(op);
            y = self.layer(n, Some(what), d, &[y, bound])?;
        }
        Ok(vec![Value::Tensor(y)])
    }

    /// `max(0, min(1, alpha * x + beta))` as Mul, Add and BoundedReLU(1, 0).
    pub(super) fn hard_sigmoid(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let alpha = attr_float(n, "alpha")?.unwrap_or(0.2);
        let beta = attr_float(n, "beta")?.unwrap_or(0.5);
        let (xn, xv) = self.req(n, 0)?;
        let x = self.tensor(&xn, &xv)?;
        let a = self.new_constant(&format!("{}/alpha", n.name), &Const::scalar(alpha))?;
        let mul = LayerDescriptor::ElementwiseBinary(BinaryOperation::Mul);
        let m = self.layer(n, Some("mul"), mul, &[x, a])?;
        let b = self.new_constant(&format!("{}/beta", n.name), &Const::scalar(beta))?;
        let add = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
        let s = self.layer(n, Some("add"), add, &[m, b])?;
        let clamp = LayerDescriptor::Activation(ActivationDescriptor {
            function: ActivationFunction::BoundedReLU,
            a: 1.0,
            b: 0.0,
        });
        Ok(vec![Value::Tensor(self.layer(n, None, clamp, &[s])?)])
    }
}
