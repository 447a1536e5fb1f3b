//! `Conv` and `ConvTranspose` on a 4-D NCHW input (a 3-D input through
//! [`Importer::as_2d`]). `Conv` is a `Convolution2d` layer, or a `DepthwiseConvolution2d`
//! one when each group is one input channel; `ConvTranspose` is Backend API 1.1's
//! `TransposeConvolution2d`; `DeformConv` is Backend API 1.5's `DeformableConvolution2d`.
//! Weights and bias are layer inputs.

use backplane_api::{
    Convolution2dDescriptor, DataLayout, LayerDescriptor, Padding2d,
    TransposeConvolution2dDescriptor,
};

use super::{
    Importer, NResult, Node, Value,
    attributes::{attr_int, attr_ints, attr_string, pair, positive_u32, to_u32},
    invalid, unsupported,
    window::window_padding,
};

/// A Conv or ConvTranspose `kernel_shape`, when given, must be the weights' last two
/// dimensions.
fn check_kernel_shape(n: &Node<'_>, ws: &[u32]) -> NResult<()> {
    match attr_ints(n, "kernel_shape")? {
        Some(k) if k != [i64::from(ws[2]), i64::from(ws[3])] => Err(invalid(format!(
            "kernel_shape {k:?} does not match the weights {ws:?}"
        ))),
        _ => Ok(()),
    }
}

/// The convolution of `Conv` and `DeformConv` node `n` of a 4-D input of shape `xs` with
/// weights of shape `ws`: `kernel_shape` checked, strides, dilations, group and the padding
/// `pads` or `auto_pad` give, NCHW.
pub(super) fn conv_descriptor(
    n: &Node<'_>,
    xs: &[u32],
    ws: &[u32],
    bias_enabled: bool,
) -> NResult<Convolution2dDescriptor> {
    check_kernel_shape(n, ws)?;
    let strides = pair(n, "strides")?;
    let dilations = pair(n, "dilations")?;
    let groups = positive_u32(attr_int(n, "group")?.unwrap_or(1), "group")?;
    let (padding, _) = window_padding(n, [xs[2], xs[3]], [ws[2], ws[3]], strides, dilations)?;
    Ok(Convolution2dDescriptor {
        padding,
        stride_x: strides[1],
        stride_y: strides[0],
        dilation_x: dilations[1],
        dilation_y: dilations[0],
        groups,
        bias_enabled,
        layout: DataLayout::Nchw,
    })
}

impl Importer {
    /// `Conv`: a 3-D input is a 1-D convolution, run as the 2-D one.
    pub(super) fn conv_1d_or_2d(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        if self.rank_of_input(n)? == 3 {
            self.as_2d(n, Self::conv)
        } else {
            self.conv(n)
        }
    }

    /// `ConvTranspose`: a 3-D input is a 1-D transposed convolution, run as the 2-D one.
    pub(super) fn conv_transpose_1d_or_2d(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        if self.rank_of_input(n)? == 3 {
            self.as_2d(n, Self::conv_transpose)
        } else {
            self.conv_transpose(n)
        }
    }

    fn conv(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let (wn, wv) = self.req(n, 1)?;
        let bias = self.arg(n, 2)?;
        let xs = self.shape(&xv)?;
        let ws = self.shape(&wv)?;
        if xs.len() != 4 || ws.len() != 4 {
            return Err(unsupported(format!(
                "only 2-D convolution of a 4-D NCHW input is supported (input {xs:?}, weights {ws:?})"
            )));
        }
        let desc = conv_descriptor(n, &xs, &ws, bias.is_some())?;
        let group = desc.groups;
        let depthwise = group != 1 && group == xs[1] && ws[1] == 1;
        let mut inputs = vec![self.tensor(&xn, &xv)?, self.tensor(&wn, &wv)?];
        if let Some((bn, bv)) = bias {
            inputs.push(self.tensor(&bn, &bv)?);
        }
        let d = if depthwise {
            LayerDescriptor::DepthwiseConvolution2d(desc)
        } else {
            LayerDescriptor::Convolution2d(desc)
        };
        Ok(vec![Value::Tensor(self.layer(n, None, d, &inputs)?)])
    }

    /// `DeformConv` (opset 19) of a 4-D NCHW input: Backend API 1.5's
    /// `DeformableConvolution2d` (inputs `X, W, offset, B?, mask?`; explicit pads).
    pub(super) fn deform_conv(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let (wn, wv) = self.req(n, 1)?;
        let (on, ov) = self.req(n, 2)?;
        let bias = self.arg(n, 3)?;
        let mask = self.arg(n, 4)?;
        let xs = self.shape(&xv)?;
        let ws = self.shape(&wv)?;
        if xs.len() != 4 || ws.len() != 4 {
            return Err(unsupported(format!(
                "only 2-D DeformConv of a 4-D NCHW input is supported (input {xs:?}, weights {ws:?})"
            )));
        }
        let offset_groups =
            positive_u32(attr_int(n, "offset_group")?.unwrap_or(1), "offset_group")?;
        let d = backplane_api::DeformableConvolution2dDescriptor {
            convolution: conv_descriptor(n, &xs, &ws, bias.is_some())?,
            offset_groups,
            mask_enabled: mask.is_some(),
        };
        let mut inputs = vec![
            self.tensor(&xn, &xv)?,
            self.tensor(&wn, &wv)?,
            self.tensor(&on, &ov)?,
        ];
        for (name, v) in bias.into_iter().chain(mask) {
            inputs.push(self.tensor(&name, &v)?);
        }
        let y = self.layer(
            n,
            None,
            LayerDescriptor::DeformableConvolution2d(d),
            &inputs,
        )?;
        Ok(vec![Value::Tensor(y)])
    }

    /// `ConvTranspose` on a 4-D NCHW input: Backend API 1.1's `TransposeConvolution2d`, with
    /// explicit pads, or the pads `auto_pad` or `output_shape` give.
    fn conv_transpose(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let (wn, wv) = self.req(n, 1)?;
        let bias = self.arg(n, 2)?;
        let xs = self.shape(&xv)?;
        let ws = self.shape(&wv)?;
        if xs.len() != 4 || ws.len() != 4 {
            return Err(unsupported(format!(
                "only 2-D ConvTranspose of a 4-D NCHW input is supported (input {xs:?}, weights {ws:?})"
            )));
        }
        check_kernel_shape(n, &ws)?;
        let auto = attr_string(n, "auto_pad")?.unwrap_or_default();
        let output_shape = attr_ints(n, "output_shape")?;
        let strides = pair(n, "strides")?;
        let dilations = pair(n, "dilations")?;
        let mut output_padding = match attr_ints(n, "output_padding")? {
            None => [0, 0],
            Some(v) if v.len() == 2 => [
                to_u32(v[0], "output_padding")?,
                to_u32(v[1], "output_padding")?,
            ],
            Some(v) => {
                return Err(invalid(format!(
                    "output_padding must have 2 values, got {v:?}"
                )));
            }
        };
        let padding = match (auto.as_str(), output_shape) {
            ("" | "NOTSET", None) => {
                window_padding(n, [xs[2], xs[3]], [ws[2], ws[3]], strides, dilations)?.0
            }
            ("VALID", None) => Padding2d::default(),
            (mode, shape) => {
                // ONNX's rule: the padding that gives the output shape (SAME_*: the input's
                // times the stride), split evenly, the odd one at the end for SAME_UPPER and
                // at the start otherwise; a negative total is more output padding.
                let upper = mode == "SAME_UPPER";
                if !matches!(mode, "" | "NOTSET" | "SAME_UPPER" | "SAME_LOWER") {
                    return Err(invalid(format!("auto_pad {mode:?} with output_shape")));
                }
                let shape = match shape {
                    Some(s) if s.len() == 2 => s,
                    Some(s) if s.len() == 4 => s[2..].to_vec(),
                    Some(s) => {
                        return Err(invalid(format!(
                            "output_shape {s:?} of a 2-D ConvTranspose"
                        )));
                    }
                    None => vec![
                        i64::from(xs[2]) * i64::from(strides[0]),
                        i64::from(xs[3]) * i64::from(strides[1]),
                    ],
                };
                let mut pads = [(0u32, 0u32); 2];
                for d in 0..2 {
                    let total = i64::from(strides[d]) * (i64::from(xs[2 + d]) - 1)
                        + i64::from(output_padding[d])
                        + (i64::from(ws[2 + d]) - 1) * i64::from(dilations[d])
                        + 1
                        - shape[d];
                    if total < 0 {
                        output_padding[d] =
                            to_u32(i64::from(output_padding[d]) - total, "output padding")?;
                        continue;
                    }
                    let (small, big) = (total / 2, total - total / 2);
                    let (begin, end) = if upper { (small, big) } else { (big, small) };
                    pads[d] = (to_u32(begin, "pads")?, to_u32(end, "pads")?);
                }
                Padding2d {
                    top: pads[0].0,
                    bottom: pads[0].1,
                    left: pads[1].0,
                    right: pads[1].1,
                }
            }
        };
        let d = LayerDescriptor::TransposeConvolution2d(TransposeConvolution2dDescriptor {
            padding,
            stride_x: strides[1],
            stride_y: strides[0],
            dilation_x: dilations[1],
            dilation_y: dilations[0],
            groups: positive_u32(attr_int(n, "group")?.unwrap_or(1), "group")?,
            output_padding_x: output_padding[1],
            output_padding_y: output_padding[0],
            bias_enabled: bias.is_some(),
        });
        let mut inputs = vec![self.tensor(&xn, &xv)?, self.tensor(&wn, &wv)?];
        if let Some((bn, bv)) = bias {
            inputs.push(self.tensor(&bn, &bv)?);
        }
        Ok(vec![Value::Tensor(self.layer(n, None, d, &inputs)?)])
    }
}
