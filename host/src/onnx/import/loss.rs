//! The loss operators, as compositions of existing layers (Float32):
//!
//! - `NegativeLogLikelihoodLoss(input [N, C, d...], target [N, d...], weight [C]?)`: the
//!   element of each target's class is picked with a one-hot mask (`target == iota(C)` along
//!   axis 1, cast to Float32, multiplied in and summed over axis 1: exact, every other term is
//!   0), weighted by `weight[target]` (a `Gather`; 1 without weights) and by 0 where the target
//!   is `ignore_index`, negated; then `none`, `sum`, or `mean` (the sum over the sum of the
//!   weights applied, as ONNX defines it).
//! - `SoftmaxCrossEntropyLoss`: `LogSoftmax` over axis 1, then the above; its optional second
//!   output is that log-probability.

use backplane_api::{
    BinaryOperation as B, ComparisonOperation as C, DataType, GatherDescriptor, LayerDescriptor,
    ReduceDescriptor, ReduceOperation, ReshapeDescriptor, SoftmaxDescriptor, UnaryOperation as U,
};

use super::{
    Importer, NResult, Node, Value,
    attributes::{attr_int, attr_string},
    invalid, unsupported,
};
use crate::{graph::network::TensorRef, onnx::fold::Const};

impl Importer {
    /// `NegativeLogLikelihoodLoss` (opset 12).
    pub(super) fn nll_loss(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        if self.data_type(&xv)? != DataType::Float32 {
            return Err(unsupported(format!(
                "NegativeLogLikelihoodLoss of {} (imported as Float32 layers)",
                self.data_type(&xv)?
            )));
        }
        let x = self.tensor(&xn, &xv)?;
        Ok(vec![Value::Tensor(self.nll_of(n, x, None)?)])
    }

    /// `SoftmaxCrossEntropyLoss` (opset 12): the loss, and the log-probabilities when the node
    /// names a second output.
    pub(super) fn softmax_cross_entropy(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        if self.data_type(&xv)? != DataType::Float32 {
            return Err(unsupported(format!(
                "SoftmaxCrossEntropyLoss of {} (imported as Float32 layers)",
                self.data_type(&xv)?
            )));
        }
        let x = self.tensor(&xn, &xv)?;
        let rank = self.shape(&xv)?.len();
        if rank < 2 {
            return Err(invalid("the scores must have rank >= 2"));
        }
        let softmax = LayerDescriptor::Softmax(SoftmaxDescriptor { beta: 1.0, axis: 1 });
        let s = self.layer(n, Some("softmax"), softmax, &[x])?;
        let log_prob = self.layer(
            n,
            Some("log_prob"),
            LayerDescriptor::ElementwiseUnary(U::Log),
            &[s],
        )?;
        let loss = self.nll_of(n, log_prob, Some("loss"))?;
        Ok(vec![Value::Tensor(loss), Value::Tensor(log_prob)])
    }

    /// The loss of `x` (`[N, C, d...]`, Float32) for the node's target (input 1) and weights
    /// (input 2), its last layer named after the node with `last`.
    fn nll_of(&mut self, n: &Node<'_>, x: TensorRef, last: Option<&str>) -> NResult<TensorRef> {
        let shape = self
            .builder
            .tensor_info(x)
            .map(|i| i.shape.to_vec())
            .ok_or_else(|| invalid("the input is not a tensor of the network"))?;
        if shape.len() < 2 {
            return Err(invalid("the input must have rank >= 2"));
        }
        let classes = shape[1];
        let (tn, tv) = self.req(n, 1)?;
        let target_type = self.data_type(&tv)?;
        if !target_type.is_integer() {
            return Err(invalid(format!(
                "the target is {target_type}, not an integer type"
            )));
        }
        let mut target = match &tv {
            Value::I64(c) => self.integer_tensor_as(&tn, c, DataType::Signed64)?,
            v => self.tensor(&tn, v)?,
        };
        if target_type != DataType::Signed64 {
            let d = LayerDescriptor::Cast(DataType::Signed64);
            target = self.layer(n, Some("target"), d, &[target])?;
        }
        let target_shape: Vec<u32> = shape
            .iter()
            .enumerate()
            .filter(|&(k, _)| k != 1)
            .map(|(_, &d)| d)
            .collect();
        let reduction = attr_string(n, "reduction")?.unwrap_or_else(|| "mean".to_owned());
        if !matches!(reduction.as_str(), "none" | "sum" | "mean") {
            return Err(invalid(format!("reduction {reduction:?}")));
        }
        let ignore = attr_int(n, "ignore_index")?;

        // One-hot of the target along axis 1: [N, 1, d...] == iota [1, C, 1...].
        let mut unsqueezed = target_shape.clone();
        unsqueezed.insert(1, 1);
        let tu = self.layer(
            n,
            Some("target_unsqueezed"),
            LayerDescriptor::Reshape(ReshapeDescriptor {
                target_shape: unsqueezed.into(),
            }),
            &[target],
        )?;
        let mut iota_shape = vec![1u32; shape.len()];
        iota_shape[1] = classes;
        let iota = Const::new(iota_shape, (0..i64::from(classes)).collect()).map_err(invalid)?;
        let iota = self.integer_tensor_as(
            &format!("{}\u{0}classes", n.name),
            &iota,
            DataType::Signed64,
        )?;
        let hot = self.layer(
            n,
            Some("one_hot"),
            LayerDescriptor::Comparison(C::Equal),
            &[tu, iota],
        )?;
        let hot = self.layer(
            n,
            Some("one_hot_f"),
            LayerDescriptor::Cast(DataType::Float32),
            &[hot],
        )?;
        let masked = self.layer(
            n,
            Some("masked"),
            LayerDescriptor::ElementwiseBinary(B::Mul),
            &[x, hot],
        )?;
        let picked = self.layer(
            n,
            Some("picked"),
            LayerDescriptor::Reduce(ReduceDescriptor {
                operation: ReduceOperation::Sum,
                axes: vec![1].into(),
                keep_dims: false,
            }),
            &[masked],
        )?;

        // The weight of each element: weight[target] (1 without weights), 0 where ignored.
        let valid = match ignore {
            None => None,
            Some(i) => {
                let i = self.integer_tensor_as(
                    &format!("{}\u{0}ignore_index", n.name),
                    &Const::scalar(i),
                    DataType::Signed64,
                )?;
                Some(self.layer(
                    n,
                    Some("kept"),
                    LayerDescriptor::Comparison(C::NotEqual),
                    &[target, i],
                )?)
            }
        };
        let weight = match self.arg(n, 2)? {
            None => None,
            Some((wn, wv)) => {
                let w = self.tensor(&wn, &wv)?;
                // An ignored target may be out of range: gather at class 0 there instead.
                let index = match valid {
                    None => target,
                    Some(kept) => {
                        let zero = self.integer_tensor_as(
                            &format!("{}\u{0}zero", n.name),
                            &Const::scalar(0),
                            DataType::Signed64,
                        )?;
                        self.layer(
                            n,
                            Some("safe_target"),
                            LayerDescriptor::Where,
                            &[kept, target, zero],
                        )?
                    }
                };
                Some(self.layer(
                    n,
                    Some("weight"),
                    LayerDescriptor::Gather(GatherDescriptor { axis: 0 }),
                    &[w, index],
                )?)
            }
        };
        let kept_f = match valid {
            None => None,
            Some(kept) => Some(self.layer(
                n,
                Some("kept_f"),
                LayerDescriptor::Cast(DataType::Float32),
                &[kept],
            )?),
        };
        let w = match (weight, kept_f) {
            (Some(w), Some(k)) => Some(self.layer(
                n,
                Some("applied_weight"),
                LayerDescriptor::ElementwiseBinary(B::Mul),
                &[w, k],
            )?),
            (w, k) => w.or(k),
        };
        let weighted = match w {
            Some(w) => self.layer(
                n,
                Some("weighted"),
                LayerDescriptor::ElementwiseBinary(B::Mul),
                &[picked, w],
            )?,
            None => picked,
        };
        let is_last = |r: &str| {
            if reduction == r {
                last
            } else {
                Some("per_element")
            }
        };
        let loss = self.layer(
            n,
            is_last("none"),
            LayerDescriptor::ElementwiseUnary(U::Neg),
            &[weighted],
        )?;
        if reduction == "none" {
            return Ok(loss);
        }
        let all: Vec<u32> = (0..target_shape.len() as u32).collect();
        let sum_of = |im: &mut Self, what: Option<&str>, t: TensorRef| {
            im.layer(
                n,
                what,
                LayerDescriptor::Reduce(ReduceDescriptor {
                    operation: ReduceOperation::Sum,
                    axes: all.clone().into(),
                    keep_dims: false,
                }),
                &[t],
            )
        };
        if reduction == "sum" {
            return sum_of(self, last, loss);
        }
        let total = sum_of(self, Some("total"), loss)?;
        let count = match w {
            Some(w) => sum_of(self, Some("weight_total"), w)?,
            None => {
                let elements: u32 = target_shape.iter().product();
                #[allow(clippy::cast_precision_loss)]
                // reason: an element count, exact in f32 below 2^24 (tensors here are far smaller)
                let c = Const::scalar(elements as f32);
                self.new_constant(&format!("{}/count", n.name), &c)?
            }
        };
        self.layer(
            n,
            last,
            LayerDescriptor::ElementwiseBinary(B::Div),
            &[total, count],
        )
    }
}
