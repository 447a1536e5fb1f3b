//! `Gemm` and `MatMul`. `Gemm` is a `FullyConnected` layer (a `Transpose` for `transA`,
//! `alpha` and `beta` folded into constant operands, a bias the layer cannot take added
//! after it); `MatMul` is `FullyConnected` for a 2-D input times constant 2-D weights and
//! Backend API 1.1's `BatchMatMul` otherwise.

use backplane_api::{
    BatchMatMulDescriptor, BinaryOperation, DataType, FullyConnectedDescriptor, LayerDescriptor,
    ReshapeDescriptor, TransposeDescriptor,
};

use super::{
    Importer, NResult, Node, Value,
    attributes::{attr_flag, attr_float},
    constants::charge,
    invalid, unsupported,
};

impl Importer {
    pub(super) fn gemm(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let alpha = attr_float(n, "alpha")?.unwrap_or(1.0);
        let beta = attr_float(n, "beta")?.unwrap_or(1.0);
        let trans_a = attr_flag(n, "transA", false)?;
        let trans_b = attr_flag(n, "transB", false)?;
        let (an, av) = self.req(n, 0)?;
        let (bn, bv) = self.req(n, 1)?;
        let c = self.arg(n, 2)?;
        let a = self.tensor(&an, &av)?;
        let a = if trans_a {
            let rank = self.shape(&av)?.len();
            if rank != 2 {
                return Err(invalid(format!("A must be 2-D, got rank {rank}")));
            }
            let d = LayerDescriptor::Transpose(TransposeDescriptor {
                permutation: vec![1, 0].into(),
            });
            self.layer(n, Some("transposeA"), d, &[a])?
        } else {
            a
        };
        let bs = self.shape(&bv)?;
        if bs.len() != 2 {
            return Err(invalid(format!("B must be 2-D, got {bs:?}")));
        }
        let w = match &bv {
            Value::F32(b) if alpha != 1.0 => {
                let scaled = b.try_map(|v| Ok(v * alpha)).map_err(invalid)?;
                charge(&mut self.budget, scaled.data.len(), 4).map_err(invalid)?;
                self.new_constant(&format!("{}/weights", n.name), &scaled)?
            }
            Value::F32(_) => self.tensor(&bn, &bv)?,
            _ if alpha != 1.0 => {
                return Err(unsupported("alpha != 1 with a non-constant B"));
            }
            _ => self.tensor(&bn, &bv)?,
        };
        let out = if trans_b { bs[0] } else { bs[1] };
        let mut bias = None;
        let mut add_after = None;
        if let Some((cn, cv)) = c
            && beta != 0.0
        {
            match &cv {
                Value::F32(cc) => {
                    let vector = cc.shape == [out] || cc.shape == [1, out];
                    if vector && beta == 1.0 && cc.shape.len() == 1 {
                        bias = Some(self.tensor(&cn, &cv)?);
                    } else {
                        let scaled = cc.try_map(|v| Ok(v * beta)).map_err(invalid)?;
                        charge(&mut self.budget, scaled.data.len(), 4).map_err(invalid)?;
                        if vector {
                            let flat = scaled.reshape(vec![out]).map_err(invalid)?;
                            bias = Some(self.new_constant(&format!("{}/bias", n.name), &flat)?);
                        } else {
                            add_after =
                                Some(self.new_constant(&format!("{}/bias", n.name), &scaled)?);
                        }
                    }
                }
                Value::Tensor(t) if beta == 1.0 => {
                    // A constant vector (a quantised bias made a `Constant` layer) is the
                    // layer's bias; anything else is added after.
                    let vector = self
                        .builder
                        .tensor_info(*t)
                        .is_some_and(|i| i.is_constant && i.shape.as_slice() == [out]);
                    if vector {
                        bias = Some(*t);
                    } else {
                        add_after = Some(*t);
                    }
                }
                Value::Tensor(_) => return Err(unsupported("beta != 1 with a non-constant C")),
                _ => return Err(invalid("C must be a float tensor")),
            }
        }
        let fc = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
            bias_enabled: bias.is_some(),
            transpose_weights: trans_b,
        });
        let mut inputs = vec![a, w];
        inputs.extend(bias);
        let y = match add_after {
            None => self.layer(n, None, fc, &inputs)?,
            Some(c) => {
                let y = self.layer(n, Some("matmul"), fc, &inputs)?;
                let add = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
                self.layer(n, None, add, &[y, c])?
            }
        };
        Ok(vec![Value::Tensor(y)])
    }

    /// `MatMul`: a 2-D input times constant 2-D weights is a `FullyConnected` layer (which
    /// backends fuse with a bias and an activation); every other form is numpy's matmul, a
    /// Backend API 1.1 `BatchMatMul`, with a 1-D operand given a unit dimension (in front for
    /// `a`, behind for `b`) that the result loses again (and so is a double product).
    pub(super) fn matmul(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (an, av) = self.req(n, 0)?;
        let (bn, bv) = self.req(n, 1)?;
        let a_shape = self.shape(&av)?;
        let b_shape = self.shape(&bv)?;
        // A double product stays a `BatchMatMul` (the layer computed in Float64).
        if a_shape.len() == 2
            && matches!(&bv, Value::F32(b) if b.shape.len() == 2)
            && self.data_type(&av)? != DataType::Float64
        {
            let a = self.tensor(&an, &av)?;
            let w = self.tensor(&bn, &bv)?;
            let fc = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
                bias_enabled: false,
                transpose_weights: false,
            });
            return Ok(vec![Value::Tensor(self.layer(n, None, fc, &[a, w])?)]);
        }
        if a_shape.is_empty() || b_shape.is_empty() {
            return Err(invalid(format!(
                "MatMul of a scalar ({a_shape:?} and {b_shape:?})"
            )));
        }
        let mut a = self.tensor(&an, &av)?;
        let mut b = self.tensor(&bn, &bv)?;
        let reshape = |im: &mut Self, t, shape: Vec<u32>, suffix: &str| {
            let d = LayerDescriptor::Reshape(ReshapeDescriptor {
                target_shape: shape.into(),
            });
            im.layer(n, Some(suffix), d, &[t])
        };
        if a_shape.len() == 1 {
            a = reshape(self, a, vec![1, a_shape[0]], "a_2d")?;
        }
        if b_shape.len() == 1 {
            b = reshape(self, b, vec![b_shape[0], 1], "b_2d")?;
        }
        let d = LayerDescriptor::BatchMatMul(BatchMatMulDescriptor::default());
        let mut y = self.layer(n, None, d, &[a, b])?;
        if a_shape.len() == 1 || b_shape.len() == 1 {
            let mut shape = self
                .builder
                .tensor_info(y)
                .map(|i| i.shape.to_vec())
                .unwrap_or_default();
            let r = shape.len();
            if b_shape.len() == 1 {
                shape.remove(r - 1);
            }
            if a_shape.len() == 1 {
                shape.remove(r - 2);
            }
            y = reshape(self, y, shape, "squeeze")?;
        }
        Ok(vec![Value::Tensor(y)])
    }

    /// `Det`: Backend API 1.5's `Determinant` layer.
    pub(super) fn det(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (name, v) = self.req(n, 0)?;
        let x = self.tensor(&name, &v)?;
        let y = self.layer(n, None, LayerDescriptor::Determinant, &[x])?;
        Ok(vec![Value::Tensor(y)])
    }
}
