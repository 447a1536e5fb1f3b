//! The description of a fused chain, [`FusedOp`]: a convolution (plain or depthwise, NCHW,
//! constant weights and bias), then optionally a batch normalisation (folded into the weights
//! and bias when the workload is made), then optionally an activation (applied in the
//! convolution kernel). `fusion.rs` makes them; the payload of a GpuCl `PreCompiled` layer is
//! its versioned binary form.
//!
//! A payload is untrusted (a compiled network file may carry one): [`FusedOp::decode`]
//! reads it with the kit's checked reader (`backplane_backend_kit::payload`), checking every
//! byte, and [`FusedOp::check`] checks the tensors against it before a workload
//! is made from it.
//!
//! Format, version 1, little-endian: `u8` version; `u8` head (0 convolution, 1 depthwise);
//! padding left, right, top, bottom, stride x, stride y, dilation x, dilation y and groups
//! (`u32` each); `u8` bias flag; `u32` weights slot; an optional `u32` bias slot; an optional
//! batch norm (`f32` epsilon, `u32` scale, bias, mean and variance slots); an optional
//! activation (`u8` function, `f32` a, `f32` b). An optional value is a `u8` flag (0 or 1)
//! followed by the value when 1. Nothing may follow.

use backplane_api::{
    ActivationDescriptor, Convolution2dDescriptor, DataLayout, DataType, LayerDescriptor,
    Padding2d, TensorInfo, shapes,
};
use backplane_backend_kit::{
    payload::{self, PayloadReader, PayloadWriter},
    support::require_float32,
};

/// The payload version this build writes and reads.
pub(crate) const PAYLOAD_VERSION: u8 = 1;

/// A folded batch normalisation: epsilon and the input slots of scale, bias, mean, variance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BatchNormStage {
    pub(crate) epsilon: f32,
    pub(crate) slots: [u32; 4],
}

/// A fused convolution chain (see the module documentation). Slot 0 is the data input.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FusedOp {
    pub(crate) conv: Convolution2dDescriptor,
    pub(crate) depthwise: bool,
    pub(crate) weights: u32,
    pub(crate) bias: Option<u32>,
    pub(crate) batch_norm: Option<BatchNormStage>,
    pub(crate) activation: Option<ActivationDescriptor>,
}

impl FusedOp {
    /// The head's layer descriptor.
    pub(crate) fn head(&self) -> LayerDescriptor {
        if self.depthwise {
            LayerDescriptor::DepthwiseConvolution2d(self.conv.clone())
        } else {
            LayerDescriptor::Convolution2d(self.conv.clone())
        }
    }

    /// A short name for reports: `Conv2dBatchNormReLU`, `DepthwiseConv2dHardSwish`...
    pub(crate) fn operation(&self) -> String {
        let mut s = String::from(if self.depthwise {
            "DepthwiseConv2d"
        } else {
            "Conv2d"
        });
        if self.bias.is_some() {
            s.push_str("Bias");
        }
        if self.batch_norm.is_some() {
            s.push_str("BatchNorm");
        }
        if let Some(a) = &self.activation {
            s.push_str(&format!("{:?}", a.function));
        }
        s
    }

    /// The binary form.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = PayloadWriter::new(PAYLOAD_VERSION);
        w.flag(self.depthwise);
        let c = &self.conv;
        let p = c.padding;
        for v in [
            p.left,
            p.right,
            p.top,
            p.bottom,
            c.stride_x,
            c.stride_y,
            c.dilation_x,
            c.dilation_y,
            c.groups,
        ] {
            w.u32(v);
        }
        w.flag(c.bias_enabled);
        w.u32(self.weights);
        w.option(self.bias, |w, b| w.u32(b));
        w.option(self.batch_norm.as_ref(), |w, bn| {
            w.f32(bn.epsilon);
            bn.slots.iter().for_each(|&s| w.u32(s));
        });
        w.option(self.activation.as_ref(), |w, a| w.activation(a));
        w.finish()
    }

    /// Reads a payload, checking every byte.
    pub(crate) fn decode(bytes: &[u8]) -> Result<FusedOp, String> {
        let mut r = PayloadReader::new(bytes, PAYLOAD_VERSION)?;
        let depthwise = r.flag()?;
        let [
            left,
            right,
            top,
            bottom,
            stride_x,
            stride_y,
            dilation_x,
            dilation_y,
            groups,
        ] = r.u32s()?;
        let conv = Convolution2dDescriptor {
            padding: Padding2d {
                left,
                right,
                top,
                bottom,
            },
            stride_x,
            stride_y,
            dilation_x,
            dilation_y,
            groups,
            bias_enabled: r.flag()?,
            layout: DataLayout::Nchw,
        };
        let weights = r.u32()?;
        let bias = r.option(PayloadReader::u32)?;
        let batch_norm = r.option(|r| {
            Ok(BatchNormStage {
                epsilon: r.f32()?,
                slots: r.u32s()?,
            })
        })?;
        let activation = r.option(PayloadReader::activation)?;
        r.finish()?;
        Ok(FusedOp {
            conv,
            depthwise,
            weights,
            bias,
            batch_norm,
            activation,
        })
    }

    /// Checks the tensors against the chain: slots in range and constant, the head's shapes,
    /// per-channel batch norm parameters, the activation's rule, the output shape.
    pub(crate) fn check(
        &self,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Result<(), String> {
        let ([x, ..], [out]) = (inputs, outputs) else {
            return Err("a fused convolution has a data input and one output".to_owned());
        };
        require_float32(inputs, outputs)?;
        let slot = |s: u32| payload::slot(inputs, s, true);
        if self.conv.bias_enabled != self.bias.is_some() {
            return Err("the bias flag and the bias slot disagree".to_owned());
        }
        let mut head_inputs = vec![x.clone(), slot(self.weights)?.clone()];
        if let Some(b) = self.bias {
            head_inputs.push(slot(b)?.clone());
        }
        let head_out = shapes::output_shapes(&self.head(), &head_inputs)?.swap_remove(0);
        let channels = head_out[1];
        if let Some(bn) = &self.batch_norm {
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
        if let Some(a) = self.activation {
            let info = TensorInfo::new(&head_out, DataType::Float32);
            shapes::output_shapes(&LayerDescriptor::Activation(a), &[info])?;
        }
        if out.shape.as_slice() != head_out {
            return Err(format!(
                "output {:?} differs from the expected {head_out:?}",
                out.shape.as_slice()
            ));
        }
        Ok(())
    }
}
