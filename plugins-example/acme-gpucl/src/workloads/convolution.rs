//! Convolution2d and DepthwiseConvolution2d (NCHW; groups, strides, dilations, padding, bias),
//! one work item per output element (`conv2d` in `kernels/convolution.cl`), with an optional
//! fused activation. A depthwise convolution is the grouped one with one group per input
//! channel: its weights `[C * multiplier, 1, kh, kw]` are exactly those of that grouping.

use std::sync::Arc;

use backplane_api::{
    ActivationDescriptor, BackendResult, Convolution2dDescriptor, LayerDescriptor, TensorInfo,
    Workload, WorkloadDesc,
};

use super::{Builder, KArg, Src, count, elementwise::activation_args, invalid_layer};
use crate::device::Device;

/// The geometry of a convolution, as `conv2d`'s parameter table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConvGeometry {
    /// N C H W M OH OW KH KW sy sx dy dx pt pl groups.
    table: [usize; 16],
}

impl ConvGeometry {
    /// The geometry of a convolution of `x` by weights `w` into `y` (`depthwise`: one group
    /// per input channel).
    pub(crate) fn new(
        d: &Convolution2dDescriptor,
        depthwise: bool,
        x: &TensorInfo,
        w: &TensorInfo,
        y: &TensorInfo,
    ) -> Result<Self, String> {
        let dims = |t: &TensorInfo, what: &str| -> Result<[usize; 4], String> {
            match t.shape.as_slice() {
                &[a, b, c, d] => Ok([a as usize, b as usize, c as usize, d as usize]),
                s => Err(format!("{what} must have rank 4, got {s:?}")),
            }
        };
        let ([n, c, h, wd], [m, _, kh, kw], [_, _, oh, ow]) =
            (dims(x, "input")?, dims(w, "weights")?, dims(y, "output")?);
        let groups = if depthwise { c } else { d.groups as usize };
        if groups == 0 || c % groups != 0 || m % groups != 0 {
            return Err(format!(
                "{c} input and {m} output channels do not split into {groups} groups"
            ));
        }
        Ok(Self {
            table: [
                n,
                c,
                h,
                wd,
                m,
                oh,
                ow,
                kh,
                kw,
                d.stride_y as usize,
                d.stride_x as usize,
                d.dilation_y as usize,
                d.dilation_x as usize,
                d.padding.top as usize,
                d.padding.left as usize,
                groups,
            ],
        })
    }
}

/// Adds the `conv2d` launch: `x` by `w` (+ `bias`), then `activation`, into output 0.
pub(crate) fn add_launch(
    b: &mut Builder<'_>,
    geometry: &ConvGeometry,
    [x, w]: [Src; 2],
    bias: Option<Src>,
    activation: Option<&ActivationDescriptor>,
) -> BackendResult<()> {
    let desc = b.desc();
    let n = count(&desc.outputs[0]).map_err(|e| invalid_layer(desc, e))?;
    let p = b.upload_i32(&geometry.table)?;
    let [act, a, c] = activation_args(activation);
    b.kernel(
        "conv2d",
        vec![
            KArg::Buf(x),
            KArg::Buf(w),
            // Not read without a bias; any buffer fills the parameter.
            KArg::Buf(bias.unwrap_or(w)),
            KArg::Buf(Src::Output(0)),
            KArg::Buf(p),
            KArg::Int(n),
            KArg::Int(i32::from(bias.is_some())),
            act,
            a,
            c,
        ],
        n as usize,
    )
}

/// The workload of a Convolution2d or DepthwiseConvolution2d layer.
pub(crate) fn create(
    device: &Arc<Device>,
    desc: &WorkloadDesc<'_>,
) -> BackendResult<Box<dyn Workload>> {
    let (LayerDescriptor::Convolution2d(d) | LayerDescriptor::DepthwiseConvolution2d(d)) =
        desc.layer
    else {
        return Err(invalid_layer(desc, "not a convolution"));
    };
    let depthwise = matches!(desc.layer, LayerDescriptor::DepthwiseConvolution2d(_));
    let geometry = ConvGeometry::new(
        d,
        depthwise,
        &desc.inputs[0],
        &desc.inputs[1],
        &desc.outputs[0],
    )
    .map_err(|e| invalid_layer(desc, e))?;
    let mut b = Builder::new(device, desc);
    let x = b.input(0)?;
    let w = b.input(1)?;
    let bias = if d.bias_enabled {
        Some(b.input(2)?)
    } else {
        None
    };
    add_launch(&mut b, &geometry, [x, w], bias, None)?;
    Ok(b.build())
}

/// The workload of a fused convolution chain (a GpuCl `PreCompiled` layer, already checked
/// against its tensors): a batch normalisation is folded into the weights and bias here,
/// `w' = w · k`, `b' = (b - mean) · k + bn_bias` with `k = scale / sqrt(variance + epsilon)`
/// per output channel; the activation runs in the kernel.
pub(crate) fn create_fused(
    device: &Arc<Device>,
    desc: &WorkloadDesc<'_>,
    op: &crate::fused_op::FusedOp,
) -> BackendResult<Box<dyn Workload>> {
    use super::elementwise::constant_f32;
    let slot = |s: u32| s as usize;
    let w_info = &desc.inputs[slot(op.weights)];
    let geometry = ConvGeometry::new(
        &op.conv,
        op.depthwise,
        &desc.inputs[0],
        w_info,
        &desc.outputs[0],
    )
    .map_err(|e| invalid_layer(desc, e))?;
    let mut b = Builder::new(device, desc);
    let x = b.input(0)?;
    let (w, bias) = match &op.batch_norm {
        None => {
            let w = b.input(slot(op.weights))?;
            let bias = op.bias.map(|s| b.input(slot(s))).transpose()?;
            (w, bias)
        }
        Some(bn) => {
            let mut weights = constant_f32(desc, slot(op.weights))?;
            let channels = w_info.shape[0] as usize;
            let mut bias = match op.bias {
                Some(s) => constant_f32(desc, slot(s))?,
                None => vec![0.0; channels],
            };
            let [scale, shift, mean, var] = bn.slots.map(|s| constant_f32(desc, slot(s)));
            let (scale, shift, mean, var) = (scale?, shift?, mean?, var?);
            let per_channel = weights.len() / channels.max(1);
            for m in 0..channels {
                let k = scale[m] / (var[m] + bn.epsilon).sqrt();
                for v in &mut weights[m * per_channel..(m + 1) * per_channel] {
                    *v *= k;
                }
                bias[m] = (bias[m] - mean[m]) * k + shift[m];
            }
            (b.upload_f32(&weights)?, Some(b.upload_f32(&bias)?))
        }
    };
    add_launch(&mut b, &geometry, [x, w], bias, op.activation.as_ref())?;
    Ok(b.build())
}
