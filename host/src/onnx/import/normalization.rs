//! `BatchNormalization` (inference mode, constant statistics) as a `BatchNormalization`
//! layer; `LRN` as Backend API 1.1's `Normalization` across channels; `LayerNormalization`
//! and `InstanceNormalization` as the 1.1 layers of the same names.

use backplane_api::{
    BatchNormalizationDescriptor, BinaryOperation, DataLayout, InstanceNormalizationDescriptor,
    LayerDescriptor, LayerNormalizationDescriptor, NormalizationDescriptor, ReduceDescriptor,
    ReduceOperation, UnaryOperation,
};

use super::{
    Importer, NResult, Node, Value,
    attributes::{attr_flag, attr_float, attr_int, normalize_axis},
    invalid, unsupported,
};
use crate::onnx::fold::Const;

impl Importer {
    /// `LayerNormalization` (opset 17), with scale and bias of the normalised dimensions'
    /// shape; its optional `Mean` and `InvStdDev` outputs are computed beside the layer.
    pub(super) fn layer_norm(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        if attr_int(n, "stash_type")?.unwrap_or(1) != 1 {
            return Err(unsupported("stash_type other than float"));
        }
        let epsilon = attr_float(n, "epsilon")?.unwrap_or(1e-5);
        let (xn, xv) = self.req(n, 0)?;
        let xs = self.shape(&xv)?;
        let axis = normalize_axis(attr_int(n, "axis")?.unwrap_or(-1), xs.len())?;
        let x = self.tensor(&xn, &xv)?;
        let mut inputs = vec![x];
        let params = &xs[axis..];
        for i in [1, 2] {
            let Some((name, v)) = self.arg(n, i)? else {
                if i == 1 {
                    return Err(invalid("input 1 (Scale) is required"));
                }
                continue;
            };
            let v = if self.shape(&v)?.as_slice() == params {
                v
            } else {
                self.reshaped(n, &v, params.to_vec()).map_err(|_| {
                    unsupported(format!(
                        "{name} does not have the normalised shape {params:?}"
                    ))
                })?
            };
            inputs.push(self.tensor(&name, &v)?);
        }
        let d = LayerDescriptor::LayerNormalization(LayerNormalizationDescriptor {
            axis: axis as u32,
            epsilon,
            bias_enabled: inputs.len() == 3,
        });
        let y = Value::Tensor(self.layer(n, None, d, &inputs)?);
        let wanted = |i: usize| n.proto.output.get(i).is_some_and(|o| !o.is_empty());
        if !wanted(1) && !wanted(2) {
            return Ok(vec![y]);
        }
        // The training outputs `Mean` and `InvStdDev` (kept dimensions), computed by their
        // definition beside the layer: mean, then 1 / sqrt(mean((x - mean)^2) + epsilon).
        let reduce_mean = || {
            LayerDescriptor::Reduce(ReduceDescriptor {
                operation: ReduceOperation::Mean,
                axes: (axis as u32..xs.len() as u32).collect(),
                keep_dims: true,
            })
        };
        let binary = LayerDescriptor::ElementwiseBinary;
        let mean = self.layer(n, Some("mean"), reduce_mean(), &[x])?;
        let centred = self.layer(n, Some("centred"), binary(BinaryOperation::Sub), &[x, mean])?;
        let square = binary(BinaryOperation::Mul);
        let squared = self.layer(n, Some("squared"), square, &[centred, centred])?;
        let variance = self.layer(n, Some("variance"), reduce_mean(), &[squared])?;
        let eps = self.new_constant(&format!("{}/epsilon", n.name), &Const::scalar(epsilon))?;
        let shifted = self.layer(
            n,
            Some("shifted"),
            binary(BinaryOperation::Add),
            &[variance, eps],
        )?;
        let rsqrt = LayerDescriptor::ElementwiseUnary(UnaryOperation::Rsqrt);
        let inv_std = self.layer(n, Some("inv_std_dev"), rsqrt, &[shifted])?;
        Ok(vec![y, Value::Tensor(mean), Value::Tensor(inv_std)])
    }

    pub(super) fn instance_norm(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let epsilon = attr_float(n, "epsilon")?.unwrap_or(1e-5);
        let mut inputs = Vec::new();
        for i in 0..3 {
            let (name, v) = self.req(n, i)?;
            inputs.push(self.tensor(&name, &v)?);
        }
        let d = LayerDescriptor::InstanceNormalization(InstanceNormalizationDescriptor { epsilon });
        Ok(vec![Value::Tensor(self.layer(n, None, d, &inputs)?)])
    }

    pub(super) fn batch_norm(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        if self.opset >= 14 && attr_flag(n, "training_mode", false)? {
            return Err(unsupported("training_mode = 1"));
        }
        if self.opset < 9 && !attr_flag(n, "spatial", true)? {
            return Err(unsupported("spatial = 0 (per-element statistics)"));
        }
        let epsilon = attr_float(n, "epsilon")?.unwrap_or(1e-5);
        let (xn, xv) = self.req(n, 0)?;
        let mut inputs = vec![self.tensor(&xn, &xv)?];
        for (i, what) in [(1, "scale"), (2, "B"), (3, "mean"), (4, "var")] {
            let (name, v) = self.req(n, i)?;
            if !matches!(v, Value::F32(_)) {
                return Err(unsupported(format!(
                    "{what} ({name}) must be a float constant"
                )));
            }
            inputs.push(self.tensor(&name, &v)?);
        }
        let d = LayerDescriptor::BatchNormalization(BatchNormalizationDescriptor {
            epsilon,
            layout: DataLayout::Nchw,
        });
        Ok(vec![Value::Tensor(self.layer(n, None, d, &inputs)?)])
    }

    /// `LRN` (Backend API 1.1's `Normalization`): across the channels of a 4-D NCHW tensor.
    pub(super) fn lrn(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let rank = self.shape(&xv)?.len();
        if rank != 4 {
            return Err(unsupported(format!(
                "LRN of a {rank}-D tensor (only 4-D NCHW)"
            )));
        }
        let size = attr_int(n, "size")?.ok_or_else(|| invalid("the size attribute is required"))?;
        let size = u32::try_from(size)
            .ok()
            .filter(|s| *s > 0)
            .ok_or_else(|| invalid(format!("size {size} is not a positive window")))?;
        let d = LayerDescriptor::Normalization(NormalizationDescriptor {
            size,
            alpha: attr_float(n, "alpha")?.unwrap_or(1e-4),
            beta: attr_float(n, "beta")?.unwrap_or(0.75),
            k: attr_float(n, "bias")?.unwrap_or(1.0),
        });
        let x = self.tensor(&xn, &xv)?;
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)])
    }
}
