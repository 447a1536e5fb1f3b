//! The 2-D window that convolutions and pooling share: ONNX `pads` / `auto_pad` as a
//! [`Padding2d`], and a 1-D `Conv`, `ConvTranspose`, `MaxPool` or `AveragePool` (a 3-D
//! `[N, C, L]` input) run as the 2-D operator on a unit height ([`Importer::as_2d`]).

use backplane_api::{LayerDescriptor, Padding2d, ReshapeDescriptor};

use super::{
    Importer, NResult, Node, Value,
    attributes::{attr_ints, attr_string, to_u32},
    invalid, unsupported,
};

/// Output size of ONNX `auto_pad = SAME_*` padding for one axis: `(begin, end)`.
fn same_padding(
    input: u32,
    kernel: u32,
    stride: u32,
    dilation: u32,
    upper: bool,
) -> NResult<(u32, u32)> {
    let (input, kernel, stride, dilation) = (
        i128::from(input),
        i128::from(kernel),
        i128::from(stride),
        i128::from(dilation),
    );
    let out = (input + stride - 1) / stride;
    let span = dilation * (kernel - 1) + 1;
    let total = ((out - 1).max(0) * stride + span - input).max(0);
    let (small, large) = (total / 2, total - total / 2);
    let (begin, end) = if upper {
        (small, large)
    } else {
        (large, small)
    };
    let fit =
        |v: i128| u32::try_from(v).map_err(|_| invalid(format!("padding {v} is out of range")));
    Ok((fit(begin)?, fit(end)?))
}

/// Explicit padding of a 2-D window from `pads` / `auto_pad`, and whether it was automatic.
pub(super) fn window_padding(
    n: &Node<'_>,
    spatial: [u32; 2],
    kernel: [u32; 2],
    strides: [u32; 2],
    dilations: [u32; 2],
) -> NResult<(Padding2d, bool)> {
    let auto = attr_string(n, "auto_pad")?.unwrap_or_else(|| "NOTSET".to_owned());
    match auto.as_str() {
        "NOTSET" | "" => {
            let pads = attr_ints(n, "pads")?.unwrap_or_else(|| vec![0; 4]);
            if pads.len() != 4 {
                return Err(invalid(format!(
                    "pads must have 4 values for a 2-D window, got {pads:?}"
                )));
            }
            Ok((
                Padding2d {
                    top: to_u32(pads[0], "pad")?,
                    left: to_u32(pads[1], "pad")?,
                    bottom: to_u32(pads[2], "pad")?,
                    right: to_u32(pads[3], "pad")?,
                },
                false,
            ))
        }
        "VALID" => Ok((Padding2d::default(), true)),
        "SAME_UPPER" | "SAME_LOWER" => {
            let upper = auto == "SAME_UPPER";
            let (top, bottom) =
                same_padding(spatial[0], kernel[0], strides[0], dilations[0], upper)?;
            let (left, right) =
                same_padding(spatial[1], kernel[1], strides[1], dilations[1], upper)?;
            Ok((
                Padding2d {
                    left,
                    right,
                    top,
                    bottom,
                },
                true,
            ))
        }
        other => Err(invalid(format!("unknown auto_pad {other:?}"))),
    }
}

impl Importer {
    /// The rank of node `n`'s first input.
    pub(super) fn rank_of_input(&self, n: &Node<'_>) -> NResult<usize> {
        let (_, v) = self.req(n, 0)?;
        Ok(self.shape(&v)?.len())
    }

    /// A 1-D convolution or pooling (`[N, C, L]` input) as the 2-D one with a unit height:
    /// the input (and a convolution's weights) gain a height of 1, the window attributes a
    /// leading 1 (pads a leading 0 at both ends), and the 2-D operator's output loses the
    /// height again. `op` is the 2-D importer, called with a node that reads the reshaped
    /// values.
    pub(super) fn as_2d(
        &mut self,
        n: &Node<'_>,
        op: impl FnOnce(&mut Self, &Node<'_>) -> NResult<Vec<Value>>,
    ) -> NResult<Vec<Value>> {
        let mut proto = n.proto.clone();
        for a in &mut proto.attribute {
            match a.name.as_str() {
                "kernel_shape" | "strides" | "dilations" if a.ints.len() == 1 => {
                    a.ints.insert(0, 1);
                }
                "output_padding" if a.ints.len() == 1 => a.ints.insert(0, 0),
                "pads" if a.ints.len() == 2 => a.ints = vec![0, a.ints[0], 0, a.ints[1]],
                _ => {}
            }
        }
        // The input and, for Conv, the weights get a unit height under names of their own.
        let reshaped_inputs = if n.op().starts_with("Conv") { 2 } else { 1 };
        for i in 0..reshaped_inputs.min(proto.input.len()) {
            let (_, v) = self.req(n, i)?;
            let mut shape = self.shape(&v)?;
            if shape.len() != 3 {
                return Err(unsupported(format!(
                    "a 1-D {} with a {}-D input {i}",
                    n.op(),
                    shape.len()
                )));
            }
            shape.insert(2, 1);
            let v = match v {
                Value::Tensor(t) => {
                    let d = LayerDescriptor::Reshape(ReshapeDescriptor {
                        target_shape: shape.into(),
                    });
                    Value::Tensor(self.layer(n, Some(&format!("as_2d_{i}")), d, &[t])?)
                }
                other => self.reshaped(n, &other, shape)?,
            };
            let name = format!("{}\u{0}as_2d_{i}", n.name);
            self.values.insert(name.clone(), v);
            proto.input[i] = name;
        }
        let node_2d = Node {
            proto: &proto,
            name: n.name.clone(),
        };
        let mut outputs = op(self, &node_2d)?;
        if let Some(Value::Tensor(t)) = outputs.first().cloned() {
            let mut shape = self
                .builder
                .tensor_info(t)
                .map(|i| i.shape.to_vec())
                .unwrap_or_default();
            if shape.len() == 4 && shape[2] == 1 {
                shape.remove(2);
            }
            let d = LayerDescriptor::Reshape(ReshapeDescriptor {
                target_shape: shape.into(),
            });
            outputs[0] = Value::Tensor(self.layer(n, Some("as_1d"), d, &[t])?);
        }
        Ok(outputs)
    }
}
