//! What a CpuFast `PreCompiled` layer computes, and its binary form (the descriptor's
//! `payload`).
//!
//! A fused chain is a head (Convolution2d, DepthwiseConvolution2d, FullyConnected or
//! BatchMatMul) followed, in this order, by any of: a folded BatchNormalization (convolutions
//! only), a folded constant Mul (one element or per channel; convolutions only), a bias Add
//! (per channel or one element), an Add of another tensor of the head's output shape (a
//! residual connection), an activation, a constant Mul and a constant Add of one
//! element each (a learnable affine after the activation, as PP-LCNetV3's blocks have), a
//! Pooling2d (convolutions only). Input slot 0 of the layer
//! is the chain's data input; the other slots hold its parameters, named by slot in the
//! description (a BatchMatMul's `b` is its "weights").
//!
//! The payload comes back from the host when the workload is created, so it is treated as
//! untrusted: [`FusedOp::decode`] reads it with the kit's checked reader
//! (`backplane_backend_kit::payload`: the version, every flag and tag, the length), and
//! [`FusedOp::check`] checks every slot and shape against the tensors the layer is given.
//!
//! Payload version 2, little-endian: `u8` version, `u8` head tag (0 convolution, 1 depthwise,
//! 2 fully connected, 3 batch matmul: `u8` flags `transpose_a`, `transpose_b`) and the head's
//! descriptor, `u32` weights slot, then eight optional parts each behind a `u8` flag: head
//! bias slot, batch norm (`f32` epsilon and four `u32` slots: scale, bias, mean, variance),
//! scale slot, bias slot, residual slot, activation (`u8` function, its discriminant in
//! [`ActivationFunction::ALL`](backplane_api::ActivationFunction::ALL); `f32` a, `f32` b), post-activation scale slot, post-activation
//! shift slot, pooling descriptor. Nothing may follow. (Version 1 had no scale, residual or
//! post-activation parts. Tag 3 and function 7, `Gelu`, came without a version change: they
//! only add values an older reader refuses.)

use backplane_api::{
    ActivationDescriptor, BatchMatMulDescriptor, Convolution2dDescriptor, DataLayout, DataType,
    FullyConnectedDescriptor, LayerDescriptor, Pooling2dDescriptor, PoolingType, TensorInfo,
    shapes,
};
use backplane_backend_kit::{
    payload::{self, PayloadReader, PayloadWriter},
    support::require_float32,
};

use crate::workloads::pooling::PoolGeometry;

/// The payload format version this build writes and reads.
pub(crate) const PAYLOAD_VERSION: u8 = 2;

/// The first layer of a fused chain.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Head {
    /// A (possibly grouped) convolution.
    Convolution(Convolution2dDescriptor),
    /// A depthwise convolution.
    Depthwise(Convolution2dDescriptor),
    /// A fully connected layer.
    FullyConnected(FullyConnectedDescriptor),
    /// A batched matrix product; its `b` input is the weights.
    BatchMatMul(BatchMatMulDescriptor),
}

impl Head {
    /// The head as a layer descriptor.
    pub(crate) fn descriptor(&self) -> LayerDescriptor {
        match self {
            Head::Convolution(d) => LayerDescriptor::Convolution2d(d.clone()),
            Head::Depthwise(d) => LayerDescriptor::DepthwiseConvolution2d(d.clone()),
            Head::FullyConnected(d) => LayerDescriptor::FullyConnected(d.clone()),
            Head::BatchMatMul(d) => LayerDescriptor::BatchMatMul(*d),
        }
    }

    /// The head of `layer`, if it can start a chain.
    pub(crate) fn of(layer: &LayerDescriptor) -> Option<Self> {
        match layer {
            LayerDescriptor::Convolution2d(d) => Some(Head::Convolution(d.clone())),
            LayerDescriptor::DepthwiseConvolution2d(d) => Some(Head::Depthwise(d.clone())),
            LayerDescriptor::FullyConnected(d) => Some(Head::FullyConnected(d.clone())),
            LayerDescriptor::BatchMatMul(d) => Some(Head::BatchMatMul(*d)),
            _ => None,
        }
    }

    /// `true` for the convolutions.
    pub(crate) fn is_convolution(&self) -> bool {
        matches!(self, Head::Convolution(_) | Head::Depthwise(_))
    }

    fn bias_enabled(&self) -> bool {
        match self {
            Head::Convolution(d) | Head::Depthwise(d) => d.bias_enabled,
            Head::FullyConnected(d) => d.bias_enabled,
            Head::BatchMatMul(_) => false,
        }
    }

    /// The channels of the head's output `head_out`, the dimension a bias adds along: 1 for
    /// the convolutions (NCHW), the last one for fully connected and batch matmul.
    pub(crate) fn channels(&self, head_out: &[u32]) -> u32 {
        let axis = if self.is_convolution() {
            1
        } else {
            head_out.len().saturating_sub(1)
        };
        head_out.get(axis).copied().unwrap_or(0)
    }

    /// Whether a constant of `shape` added to the head's output `head_out` is a bias per
    /// channel (see [`channels`](Self::channels)) under numpy broadcasting, leaving the shape
    /// as it is.
    ///
    /// After a convolution that is `[1, C, 1, 1]` or `[C, 1, 1]`: a `[C]` operand broadcasts
    /// along the width, so it is no bias. After a fully connected layer or a batch matmul it
    /// is `[C]` with any number of leading 1s, up to the output's rank (`[C]` or `[1, C]`
    /// after `[N, C]`; also `[1, 1, C]` after `[B, S, C]`).
    pub(crate) fn is_bias(&self, shape: &[u32], head_out: &[u32]) -> bool {
        if is_one_element(shape, head_out) {
            return true;
        }
        let c = self.channels(head_out);
        if self.is_convolution() {
            shape == [1, c, 1, 1] || shape == [c, 1, 1]
        } else {
            match shape.split_last() {
                Some((&last, lead)) => {
                    last == c && shape.len() <= head_out.len() && lead.iter().all(|&d| d == 1)
                }
                None => false,
            }
        }
    }
}

/// Whether a constant of `shape` is one element that broadcasts over `head_out` without
/// changing its shape (`[]`, `[1]`, `[1, 1]`, ... up to its rank).
pub(crate) fn is_one_element(shape: &[u32], head_out: &[u32]) -> bool {
    shape.len() <= head_out.len() && shape.iter().all(|&d| d == 1)
}

/// A batch normalisation folded into a convolution: its epsilon and parameter slots.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BatchNormStage {
    /// Added to the variance.
    pub(crate) epsilon: f32,
    /// Slots of scale, bias, mean and variance.
    pub(crate) slots: [u32; 4],
}

/// A fused chain (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FusedOp {
    /// The first layer.
    pub(crate) head: Head,
    /// Slot of the head's weights.
    pub(crate) weights: u32,
    /// Slot of the head's own bias (present iff the head has `bias_enabled`).
    pub(crate) head_bias: Option<u32>,
    /// A folded batch normalisation.
    pub(crate) batch_norm: Option<BatchNormStage>,
    /// Slot of a constant multiplier (one element or per channel) folded into the weights
    /// and bias (convolutions only).
    pub(crate) scale: Option<u32>,
    /// Slot of an added per-channel (or one-element) bias.
    pub(crate) bias: Option<u32>,
    /// Slot of a tensor of the head's output shape added after the bias (a residual
    /// connection; read at every execution).
    pub(crate) residual: Option<u32>,
    /// An activation applied after the bias.
    pub(crate) activation: Option<ActivationDescriptor>,
    /// Slot of a one-element multiplier applied after the activation.
    pub(crate) post_scale: Option<u32>,
    /// Slot of a one-element constant added after that.
    pub(crate) post_shift: Option<u32>,
    /// A pooling applied last.
    pub(crate) pool: Option<Pooling2dDescriptor>,
}

/// The shapes of a fused chain that [`FusedOp::check`] accepted.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FusedShapes {
    /// The output of the head (and of batch norm, bias and activation).
    pub(crate) head_out: Vec<u32>,
}

impl FusedOp {
    /// The one-layer chain of a stand-alone Convolution2d, DepthwiseConvolution2d,
    /// FullyConnected (inputs `[x, weights, bias?]`) or BatchMatMul (`[a, b]`) layer; `None`
    /// for other layers.
    pub(crate) fn plain(layer: &LayerDescriptor) -> Option<Self> {
        let head = Head::of(layer)?;
        let head_bias = head.bias_enabled().then_some(2);
        Some(Self::head_only(head, 1, head_bias))
    }

    /// The chain of `head` alone, its weights in slot `weights` and its own bias (if any) in
    /// slot `head_bias`; the stages are added by setting their fields.
    pub(crate) fn head_only(head: Head, weights: u32, head_bias: Option<u32>) -> Self {
        Self {
            head,
            weights,
            head_bias,
            batch_norm: None,
            scale: None,
            bias: None,
            residual: None,
            activation: None,
            post_scale: None,
            post_shift: None,
            pool: None,
        }
    }

    /// A short name for reports: `Conv2d`, `DepthwiseConv2d`, `FullyConnected` or
    /// `BatchMatMul`, then `BatchNorm`, `Scale`, `Bias`, `Residual`, the activation, `Affine`
    /// and `Pool` as present.
    pub(crate) fn operation(&self) -> String {
        let mut s = match self.head {
            Head::Convolution(_) => "Conv2d",
            Head::Depthwise(_) => "DepthwiseConv2d",
            Head::FullyConnected(_) => "FullyConnected",
            Head::BatchMatMul(_) => "BatchMatMul",
        }
        .to_owned();
        if self.batch_norm.is_some() {
            s.push_str("BatchNorm");
        }
        if self.scale.is_some() {
            s.push_str("Scale");
        }
        if self.head_bias.is_some() || self.bias.is_some() {
            s.push_str("Bias");
        }
        if self.residual.is_some() {
            s.push_str("Residual");
        }
        if let Some(a) = self.activation {
            s.push_str(&format!("{:?}", a.function));
        }
        if self.post_scale.is_some() || self.post_shift.is_some() {
            s.push_str("Affine");
        }
        if let Some(p) = &self.pool {
            s.push_str(match p.pool_type {
                PoolingType::Max => "MaxPool",
                PoolingType::Average => "AvgPool",
            });
        }
        s
    }

    /// The payload.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = PayloadWriter::new(PAYLOAD_VERSION);
        match &self.head {
            Head::Convolution(d) | Head::Depthwise(d) => {
                w.u8(if matches!(self.head, Head::Convolution(_)) {
                    0
                } else {
                    1
                });
                w.padding(d.padding);
                for v in [d.stride_x, d.stride_y, d.dilation_x, d.dilation_y, d.groups] {
                    w.u32(v);
                }
                w.flag(d.bias_enabled);
                w.layout(d.layout);
            }
            Head::FullyConnected(d) => {
                w.u8(2);
                w.flag(d.bias_enabled);
                w.flag(d.transpose_weights);
            }
            Head::BatchMatMul(d) => {
                w.u8(3);
                w.flag(d.transpose_a);
                w.flag(d.transpose_b);
            }
        }
        w.u32(self.weights);
        w.option(self.head_bias, |w, s| w.u32(s));
        w.option(self.batch_norm, |w, bn| {
            w.f32(bn.epsilon);
            bn.slots.iter().for_each(|&s| w.u32(s));
        });
        w.option(self.scale, |w, s| w.u32(s));
        w.option(self.bias, |w, s| w.u32(s));
        w.option(self.residual, |w, s| w.u32(s));
        w.option(self.activation.as_ref(), |w, a| w.activation(a));
        w.option(self.post_scale, |w, s| w.u32(s));
        w.option(self.post_shift, |w, s| w.u32(s));
        w.option(self.pool.as_ref(), |w, p| w.pooling(p));
        w.finish()
    }

    /// Reads a payload, refusing anything malformed.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut r = PayloadReader::new(bytes, PAYLOAD_VERSION)?;
        let head = match r.u8()? {
            tag @ (0 | 1) => {
                let padding = r.padding()?;
                let [stride_x, stride_y, dilation_x, dilation_y, groups] = r.u32s()?;
                let d = Convolution2dDescriptor {
                    padding,
                    stride_x,
                    stride_y,
                    dilation_x,
                    dilation_y,
                    groups,
                    bias_enabled: r.flag()?,
                    layout: r.layout()?,
                };
                if tag == 0 {
                    Head::Convolution(d)
                } else {
                    Head::Depthwise(d)
                }
            }
            2 => Head::FullyConnected(FullyConnectedDescriptor {
                bias_enabled: r.flag()?,
                transpose_weights: r.flag()?,
            }),
            3 => Head::BatchMatMul(BatchMatMulDescriptor {
                transpose_a: r.flag()?,
                transpose_b: r.flag()?,
            }),
            tag => return Err(format!("unknown head tag {tag}")),
        };
        let weights = r.u32()?;
        let head_bias = r.option(PayloadReader::u32)?;
        let batch_norm = r.option(|r| {
            Ok(BatchNormStage {
                epsilon: r.f32()?,
                slots: r.u32s()?,
            })
        })?;
        let scale = r.option(PayloadReader::u32)?;
        let bias = r.option(PayloadReader::u32)?;
        let residual = r.option(PayloadReader::u32)?;
        let activation = r.option(PayloadReader::activation)?;
        let post_scale = r.option(PayloadReader::u32)?;
        let post_shift = r.option(PayloadReader::u32)?;
        let pool = r.option(PayloadReader::pooling)?;
        r.finish()?;
        Ok(Self {
            head,
            weights,
            head_bias,
            batch_norm,
            scale,
            bias,
            residual,
            activation,
            post_scale,
            post_shift,
            pool,
        })
    }

    /// Checks the chain against the tensors its layer is given: every slot in range, every
    /// tensor Float32, every stage's shapes as its layer would require, and the last stage's
    /// output shape equal to `outputs`.
    pub(crate) fn check(
        &self,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Result<FusedShapes, String> {
        if inputs.is_empty() || outputs.len() != 1 {
            return Err(format!(
                "a fused layer has at least 1 input and exactly 1 output, got {} and {}",
                inputs.len(),
                outputs.len()
            ));
        }
        require_float32(inputs, outputs)?;
        // The residual is read at every execution: the slots need not be constant.
        let slot = |s: u32| payload::slot(inputs, s, false);
        if self.head.bias_enabled() != self.head_bias.is_some() {
            return Err("the head's bias flag and bias slot disagree".to_owned());
        }
        if let Head::Convolution(d) | Head::Depthwise(d) = &self.head
            && d.layout != DataLayout::Nchw
        {
            return Err("only NCHW convolutions".to_owned());
        }
        let mut head_inputs = vec![inputs[0].clone(), slot(self.weights)?.clone()];
        if let Some(b) = self.head_bias {
            head_inputs.push(slot(b)?.clone());
        }
        let head_out = shapes::output_shapes(&self.head.descriptor(), &head_inputs)?.swap_remove(0);
        let channels = self.head.channels(&head_out);
        if let Some(bn) = &self.batch_norm {
            if !self.head.is_convolution() {
                return Err("batch norm follows only a convolution".to_owned());
            }
            for s in bn.slots {
                let t = slot(s)?;
                if t.shape.as_slice() != [channels] {
                    return Err(format!(
                        "batch norm parameter {:?} is not [{channels}]",
                        t.shape.as_slice()
                    ));
                }
            }
        }
        if let Some(s) = self.scale {
            let t = slot(s)?;
            if !self.head.is_convolution() {
                return Err("a folded scale follows only a convolution".to_owned());
            }
            if !self.head.is_bias(&t.shape, &head_out) {
                return Err(format!(
                    "scale {:?} is neither one element nor per channel of {channels} channels",
                    t.shape.as_slice()
                ));
            }
        }
        for (what, s) in [("scale", self.post_scale), ("shift", self.post_shift)] {
            if let Some(s) = s {
                let t = slot(s)?;
                if !is_one_element(&t.shape, &head_out) {
                    return Err(format!(
                        "post-activation {what} {:?} is not one element",
                        t.shape.as_slice()
                    ));
                }
            }
        }
        if let Some(r) = self.residual {
            let t = slot(r)?;
            if t.shape.as_slice() != head_out {
                return Err(format!(
                    "residual {:?} is not of the head's output shape {head_out:?}",
                    t.shape.as_slice()
                ));
            }
        }
        if let Some(b) = self.bias {
            let t = slot(b)?;
            if !self.head.is_bias(&t.shape, &head_out) {
                return Err(format!(
                    "bias {:?} is not a per-channel bias of {channels} channels",
                    t.shape.as_slice()
                ));
            }
        }
        if let Some(a) = self.activation {
            // The activation's own rules (Gelu's `a` is 0 or 1).
            let info = TensorInfo::new(&head_out, DataType::Float32);
            shapes::output_shapes(&LayerDescriptor::Activation(a), &[info])?;
        }
        let out = match &self.pool {
            None => head_out.clone(),
            Some(_) if !self.head.is_convolution() => {
                return Err("pooling follows only a convolution".to_owned());
            }
            Some(p) => {
                let info = TensorInfo::new(&head_out, DataType::Float32);
                PoolGeometry::new(p, &info, &outputs[0])?;
                outputs[0].shape.to_vec()
            }
        };
        if outputs[0].shape.as_slice() != out {
            return Err(format!(
                "output {:?} differs from the expected {out:?}",
                outputs[0].shape.as_slice()
            ));
        }
        Ok(FusedShapes { head_out })
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{ActivationFunction, OutputRounding, Padding2d};

    use super::*;
    use crate::workloads::test_support::f32t;

    fn sample() -> FusedOp {
        FusedOp {
            head: Head::Convolution(Convolution2dDescriptor {
                padding: Padding2d {
                    left: 1,
                    right: 1,
                    top: 1,
                    bottom: 1,
                },
                bias_enabled: true,
                ..Default::default()
            }),
            weights: 1,
            head_bias: Some(2),
            batch_norm: Some(BatchNormStage {
                epsilon: 1e-5,
                slots: [3, 4, 5, 6],
            }),
            scale: Some(8),
            bias: Some(7),
            residual: Some(11),
            activation: Some(ActivationDescriptor {
                function: ActivationFunction::HardSwish,
                a: 0.0,
                b: 0.0,
            }),
            post_scale: Some(9),
            post_shift: Some(10),
            pool: Some(Pooling2dDescriptor {
                pool_type: PoolingType::Average,
                padding: Padding2d::default(),
                pool_width: 2,
                pool_height: 2,
                stride_x: 2,
                stride_y: 2,
                rounding: OutputRounding::Ceiling,
                count_include_pad: true,
                layout: DataLayout::Nchw,
            }),
        }
    }

    #[test]
    fn round_trip_and_operation_name() {
        let op = sample();
        assert_eq!(FusedOp::decode(&op.encode()), Ok(op.clone()));
        assert_eq!(
            op.operation(),
            "Conv2dBatchNormScaleBiasResidualHardSwishAffineAvgPool"
        );
        let fc = FusedOp {
            head: Head::FullyConnected(FullyConnectedDescriptor::default()),
            head_bias: None,
            batch_norm: None,
            scale: None,
            residual: None,
            pool: None,
            activation: None,
            post_scale: None,
            post_shift: None,
            ..op
        };
        assert_eq!(FusedOp::decode(&fc.encode()), Ok(fc.clone()));
        assert_eq!(fc.operation(), "FullyConnectedBias");
        for function in ActivationFunction::ALL {
            let bmm = FusedOp {
                head: Head::BatchMatMul(BatchMatMulDescriptor {
                    transpose_a: false,
                    transpose_b: true,
                }),
                activation: Some(ActivationDescriptor {
                    function,
                    a: 1.0,
                    b: 0.5,
                }),
                ..fc.clone()
            };
            assert_eq!(FusedOp::decode(&bmm.encode()), Ok(bmm.clone()));
            assert_eq!(bmm.operation(), format!("BatchMatMulBias{function:?}"));
        }
    }

    /// Every truncation, a wrong version, a bad tag and trailing bytes are refused.
    #[test]
    fn untrusted_payloads_are_refused() {
        let bytes = sample().encode();
        for n in 0..bytes.len() {
            assert!(FusedOp::decode(&bytes[..n]).is_err(), "truncated at {n}");
        }
        let mut v = bytes.clone();
        v[0] = 1;
        assert_eq!(
            FusedOp::decode(&v),
            Err("payload version 1, this build reads 2".to_owned())
        );
        let mut v = bytes.clone();
        v[1] = 9;
        assert_eq!(FusedOp::decode(&v), Err("unknown head tag 9".to_owned()));
        // The activation's function byte: after version, tag, 16 + 20 + 1 bytes of
        // convolution, the weights slot, head bias, batch norm, scale, bias and residual.
        let at = 2 + 16 + 20 + 2 + 4 + 5 + 21 + 5 + 5 + 5 + 1;
        assert_eq!(bytes[at], ActivationFunction::HardSwish as u8);
        let mut v = bytes.clone();
        v[at] = ActivationFunction::ALL.len() as u8;
        assert_eq!(
            FusedOp::decode(&v),
            Err("unknown activation function 8".to_owned())
        );
        let mut v = bytes;
        v.push(0);
        assert_eq!(FusedOp::decode(&v), Err("1 trailing bytes".to_owned()));
    }

    /// Shapes: slots in range, per-channel parameters, the pooled output.
    #[test]
    fn check_shapes() {
        let op = sample();
        let c = |s: &[u32]| f32t(s).constant();
        let mut inputs = vec![
            f32t(&[1, 2, 6, 6]),
            c(&[4, 2, 3, 3]),
            c(&[4]),
            c(&[4]),
            c(&[4]),
            c(&[4]),
            c(&[4]),
            c(&[1, 4, 1, 1]),
            c(&[1]),
            c(&[]),
            c(&[1, 1, 1, 1]),
            f32t(&[1, 4, 6, 6]),
        ];
        let out = [f32t(&[1, 4, 3, 3])];
        assert_eq!(
            op.check(&inputs, &out),
            Ok(FusedShapes {
                head_out: vec![1, 4, 6, 6]
            })
        );
        assert!(op.check(&inputs, &[f32t(&[1, 4, 6, 6])]).is_err());
        let mut wrong = inputs.clone();
        wrong[11] = f32t(&[1, 4, 3, 3]);
        assert_eq!(
            op.check(&wrong, &out),
            Err("residual [1, 4, 3, 3] is not of the head's output shape [1, 4, 6, 6]".to_owned())
        );
        // A one-element bias is a bias too; a per-channel post-activation scale is not.
        inputs[7] = c(&[1, 1]);
        assert!(op.check(&inputs, &out).is_ok());
        inputs[9] = c(&[4, 1, 1]);
        assert_eq!(
            op.check(&inputs, &out),
            Err("post-activation scale [4, 1, 1] is not one element".to_owned())
        );
        inputs[9] = c(&[]);
        inputs[8] = c(&[4]);
        assert_eq!(
            op.check(&inputs, &out),
            Err("scale [4] is neither one element nor per channel of 4 channels".to_owned())
        );
        inputs[8] = c(&[4, 1, 1]);
        inputs[7] = c(&[4, 1]);
        assert_eq!(
            op.check(&inputs, &out),
            Err("bias [4, 1] is not a per-channel bias of 4 channels".to_owned())
        );
        inputs.truncate(7);
        assert!(
            op.check(&inputs, &out)
                .unwrap_err()
                .contains("parameter slot 8")
        );
    }

    /// A batch matmul head: biases along the last dimension, up to the output's rank; the
    /// activation's own rule (Gelu's `a`).
    #[test]
    fn check_batch_matmul_chain() {
        let gelu = |a| ActivationDescriptor {
            function: ActivationFunction::Gelu,
            a,
            b: 0.0,
        };
        let op = FusedOp {
            head: Head::BatchMatMul(BatchMatMulDescriptor::default()),
            weights: 1,
            head_bias: None,
            batch_norm: None,
            scale: None,
            bias: Some(2),
            residual: None,
            activation: Some(gelu(0.0)),
            post_scale: None,
            post_shift: None,
            pool: None,
        };
        let x = f32t(&[2, 16, 8]);
        let w = f32t(&[8, 12]).constant();
        let out = [f32t(&[2, 16, 12])];
        for bias in [&[12][..], &[1, 12], &[1, 1, 12]] {
            let ins = [x.clone(), w.clone(), f32t(bias).constant()];
            assert_eq!(
                op.check(&ins, &out),
                Ok(FusedShapes {
                    head_out: vec![2, 16, 12]
                }),
                "{bias:?}"
            );
        }
        for bias in [&[1, 1, 1, 12][..], &[16, 12], &[12, 1], &[2, 1, 12]] {
            let ins = [x.clone(), w.clone(), f32t(bias).constant()];
            assert_eq!(
                op.check(&ins, &out),
                Err(format!(
                    "bias {bias:?} is not a per-channel bias of 12 channels"
                )),
            );
        }
        let ins = [x, w, f32t(&[12]).constant()];
        let tanh_form = FusedOp {
            activation: Some(gelu(1.0)),
            ..op.clone()
        };
        assert!(tanh_form.check(&ins, &out).is_ok());
        let bad = FusedOp {
            activation: Some(gelu(0.5)),
            ..op
        };
        assert_eq!(
            bad.check(&ins, &out),
            Err("Gelu takes a = 0 (erf) or a = 1 (tanh approximation), got 0.5".to_owned())
        );
    }
}
