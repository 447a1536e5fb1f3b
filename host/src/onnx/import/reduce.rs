//! Reductions. `ReduceMean` is a `Mean` layer; `ReduceSum`, `ReduceMax`, `ReduceMin` and
//! `ReduceProd` are Backend API 1.1's `Reduce`; `ReduceL1`, `ReduceL2`, `ReduceSumSquare`,
//! `ReduceLogSum` and `ReduceLogSumExp` are a `Reduce` Sum between element-wise layers; `ArgMax`/`ArgMin` are `ArgMinMax` (Signed32 indices) then a `Cast` to Signed64 (ONNX's int64). Axes are
//! an attribute before opset 18 (13 for `ReduceSum`) and an input from then on.

use backplane_api::{
    ArgMinMaxDescriptor, ArgMinMaxFunction, BinaryOperation, LayerDescriptor, MeanDescriptor,
    ReduceDescriptor, ReduceOperation, UnaryOperation,
};

use super::{
    Importer, NResult, Node, Value,
    attributes::{attr_flag, attr_int, attr_ints, distinct_axes, normalize_axis},
    unsupported,
};

impl Importer {
    /// The reduced axes of a `Reduce*` node (`None` for "none, the output is the input"),
    /// with axes as an input from opset `input_from`.
    fn reduce_axes(
        &self,
        n: &Node<'_>,
        rank: usize,
        input_from: i64,
    ) -> NResult<Option<Vec<usize>>> {
        let axes = if self.opset < input_from {
            attr_ints(n, "axes")?
        } else {
            self.const_ints(n, 1, "axes")?.map(|a| a.data.clone())
        };
        Ok(match axes {
            Some(a) if !a.is_empty() => Some(distinct_axes(&a, rank)?),
            _ if self.opset >= input_from && attr_flag(n, "noop_with_empty_axes", false)? => None,
            _ => Some((0..rank).collect()),
        })
    }

    /// `ReduceSum`, `ReduceMax`, `ReduceMin`, `ReduceProd` as a `Reduce` layer.
    pub(super) fn reduce(
        &mut self,
        n: &Node<'_>,
        operation: ReduceOperation,
    ) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let rank = self.shape(&xv)?.len();
        let input_from = if n.op() == "ReduceSum" { 13 } else { 18 };
        let Some(axes) = self.reduce_axes(n, rank, input_from)? else {
            return Ok(vec![xv]);
        };
        let x = self.tensor(&xn, &xv)?;
        let d = LayerDescriptor::Reduce(ReduceDescriptor {
            operation,
            axes: axes.iter().map(|&a| a as u32).collect(),
            keep_dims: attr_flag(n, "keepdims", true)?,
        });
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)])
    }

    /// The reductions that are a `Reduce` Sum between element-wise layers: `ReduceL1`
    /// (`sum(|x|)`), `ReduceL2` (`sqrt(sum(x * x))`), `ReduceSumSquare` (`sum(x * x)`),
    /// `ReduceLogSum` (`log(sum(x))`) and `ReduceLogSumExp` (`log(sum(exp(x)))`, without
    /// onnxruntime's shift by the maximum: exact in real numbers, and overflowing where
    /// `exp(x)` does in f32). The layers are `<name>/pre`, `<name>/sum` and, last, the one
    /// named after the node. With no axes and `noop_with_empty_axes`, the element-wise parts
    /// alone.
    pub(super) fn reduce_composite(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let rank = self.shape(&xv)?.len();
        let (pre, post) = match n.op() {
            "ReduceL1" => (Some(UnaryOperation::Abs), None),
            "ReduceL2" => (None, Some(UnaryOperation::Sqrt)),
            "ReduceSumSquare" => (None, None),
            "ReduceLogSum" => (None, Some(UnaryOperation::Log)),
            "ReduceLogSumExp" => (Some(UnaryOperation::Exp), Some(UnaryOperation::Log)),
            op => return Err(unsupported(format!("{op} is not a composite reduction"))),
        };
        let square = matches!(n.op(), "ReduceL2" | "ReduceSumSquare");
        let axes = self.reduce_axes(n, rank, 18)?;
        let x = self.tensor(&xn, &xv)?;
        let mut t = x;
        if let Some(op) = pre {
            t = self.layer(n, Some("pre"), LayerDescriptor::ElementwiseUnary(op), &[t])?;
        }
        if square {
            let mul = LayerDescriptor::ElementwiseBinary(BinaryOperation::Mul);
            t = self.layer(n, Some("square"), mul, &[t, t])?;
        }
        if let Some(axes) = axes {
            let sum = LayerDescriptor::Reduce(ReduceDescriptor {
                operation: ReduceOperation::Sum,
                axes: axes.iter().map(|&a| a as u32).collect(),
                keep_dims: attr_flag(n, "keepdims", true)?,
            });
            t = self.layer(n, Some("sum"), sum, &[t])?;
        }
        if let Some(op) = post {
            t = self.layer(n, None, LayerDescriptor::ElementwiseUnary(op), &[t])?;
        }
        if t == x {
            // No layer at all (ReduceSumSquare never gets here; kept for the type's sake).
            return Ok(vec![xv]);
        }
        Ok(vec![Value::Tensor(t)])
    }

    /// `ArgMax` / `ArgMin` as an `ArgMinMax` layer (Signed32 indices) and a `Cast` of them to
    /// Signed64, ONNX's int64.
    pub(super) fn arg_min_max(
        &mut self,
        n: &Node<'_>,
        function: ArgMinMaxFunction,
    ) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let rank = self.shape(&xv)?.len();
        let axis = normalize_axis(attr_int(n, "axis")?.unwrap_or(0), rank)?;
        let x = self.tensor(&xn, &xv)?;
        if self.data_type(&xv)? != backplane_api::DataType::Float32 {
            return Err(unsupported("ArgMin/ArgMax of a non-float tensor"));
        }
        let d = LayerDescriptor::ArgMinMax(ArgMinMaxDescriptor {
            function,
            axis: axis as u32,
            keep_dims: attr_flag(n, "keepdims", true)?,
            select_last_index: attr_flag(n, "select_last_index", false)?,
        });
        // The layer's indices are Signed32; ONNX's are int64.
        let indices = self.layer(n, Some("int32"), d, &[x])?;
        Ok(vec![Value::Tensor(self.layer(
            n,
            None,
            LayerDescriptor::Cast(backplane_api::DataType::Signed64),
            &[indices],
        )?)])
    }

    pub(super) fn reduce_mean(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let r = self.shape(&xv)?.len();
        let keep_dims = attr_flag(n, "keepdims", true)?;
        let axes = if self.opset < 18 {
            attr_ints(n, "axes")?
        } else {
            self.const_ints(n, 1, "axes")?.map(|a| a.data.clone())
        };
        let axes = match axes {
            Some(a) if !a.is_empty() => distinct_axes(&a, r)?,
            _ if self.opset >= 18 && attr_flag(n, "noop_with_empty_axes", false)? => {
                return Ok(vec![xv]);
            }
            _ => (0..r).collect(),
        };
        let x = self.tensor(&xn, &xv)?;
        let d = LayerDescriptor::Mean(MeanDescriptor {
            axes: axes.iter().map(|&a| a as u32).collect(),
            keep_dims,
        });
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)])
    }
}
