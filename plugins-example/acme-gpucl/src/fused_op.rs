//! The description of a fused chain, [`FusedOp`]: a convolution (plain or depthwise, NCHW,
//! constant weights and bias), then optionally a batch normalisation (folded into the weights
//! and bias when the workload is made), then optionally an activation (applied in the
//! convolution kernel). `fusion.rs` makes them; the payload of a GpuCl `PreCompiled` layer is
//! its versioned binary form.
//!
//! A payload is untrusted (a compiled network file may carry one): [`FusedOp::decode`]
//! checks every byte and [`FusedOp::check`] checks the tensors against it before a workload
//! is made from it.
//!
//! Format, version 1, little-endian: `u8` version; `u8` head (0 convolution, 1 depthwise);
//! padding left, right, top, bottom, stride x, stride y, dilation x, dilation y and groups
//! (`u32` each); `u8` bias flag; `u32` weights slot; an optional `u32` bias slot; an optional
//! batch norm (`f32` epsilon, `u32` scale, bias, mean and variance slots); an optional
//! activation (`u8` function, `f32` a, `f32` b). An optional value is a `u8` flag (0 or 1)
//! followed by the value when 1. Nothing may follow.

use backplane_api::{
    ActivationDescriptor, ActivationFunction, Convolution2dDescriptor, DataLayout, DataType,
    LayerDescriptor, Padding2d, TensorInfo, shapes,
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
        let mut w = Vec::new();
        let u32 = |w: &mut Vec<u8>, v: u32| w.extend_from_slice(&v.to_le_bytes());
        let f32 = |w: &mut Vec<u8>, v: f32| w.extend_from_slice(&v.to_le_bytes());
        w.push(PAYLOAD_VERSION);
        w.push(u8::from(self.depthwise));
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
            u32(&mut w, v);
        }
        w.push(u8::from(c.bias_enabled));
        u32(&mut w, self.weights);
        w.push(u8::from(self.bias.is_some()));
        if let Some(b) = self.bias {
            u32(&mut w, b);
        }
        w.push(u8::from(self.batch_norm.is_some()));
        if let Some(bn) = &self.batch_norm {
            f32(&mut w, bn.epsilon);
            for s in bn.slots {
                u32(&mut w, s);
            }
        }
        w.push(u8::from(self.activation.is_some()));
        if let Some(a) = &self.activation {
            w.push(a.function as u8);
            f32(&mut w, a.a);
            f32(&mut w, a.b);
        }
        w
    }

    /// Reads a payload, checking every byte.
    pub(crate) fn decode(bytes: &[u8]) -> Result<FusedOp, String> {
        let mut r = Reader(bytes);
        let version = r.u8()?;
        if version != PAYLOAD_VERSION {
            return Err(format!(
                "payload version {version}, this build reads {PAYLOAD_VERSION}"
            ));
        }
        let depthwise = r.flag()?;
        let mut v = [0u32; 9];
        for x in &mut v {
            *x = r.u32()?;
        }
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
        ] = v;
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
        let bias = if r.flag()? { Some(r.u32()?) } else { None };
        let batch_norm = if r.flag()? {
            let epsilon = r.f32()?;
            let mut slots = [0u32; 4];
            for s in &mut slots {
                *s = r.u32()?;
            }
            Some(BatchNormStage { epsilon, slots })
        } else {
            None
        };
        let activation = if r.flag()? {
            let f = r.u8()?;
            let function = *ActivationFunction::ALL
                .get(usize::from(f))
                .ok_or_else(|| format!("unknown activation function {f}"))?;
            Some(ActivationDescriptor {
                function,
                a: r.f32()?,
                b: r.f32()?,
            })
        } else {
            None
        };
        if !r.0.is_empty() {
            return Err(format!("{} trailing bytes", r.0.len()));
        }
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
        if let Some(t) = inputs
            .iter()
            .chain(outputs)
            .find(|t| t.data_type != DataType::Float32)
        {
            return Err(format!("only Float32, got {}", t.data_type));
        }
        let slot = |s: u32| -> Result<&TensorInfo, String> {
            match inputs.get(s as usize) {
                Some(t) if s != 0 && t.is_constant => Ok(t),
                Some(_) if s != 0 => Err(format!("parameter slot {s} is not constant")),
                _ => Err(format!(
                    "parameter slot {s} is not one of the {} inputs after the data input",
                    inputs.len().saturating_sub(1)
                )),
            }
        };
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

/// Reads a payload; every read checks the length.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or_else(|| "the payload is truncated".to_owned())?;
        self.0 = rest;
        Ok(*head)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take::<1>()?[0])
    }
    fn flag(&mut self) -> Result<bool, String> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(format!("{v} is not a flag")),
        }
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn f32(&mut self) -> Result<f32, String> {
        Ok(f32::from_le_bytes(self.take()?))
    }
}
