//! 3-D convolution and pooling (`Conv`, `ConvTranspose`, `MaxPool`, `AveragePool` and `LpPool` of a 5-D
//! `[N, C, D, H, W]` input) as 2-D layers along the depth:
//!
//! - `Conv`: the depth moved into the batch (`[N·D, C, H, W]`), one 2-D convolution per
//!   kernel depth `j` with the weights' slice `j`, each result padded along the depth as the
//!   node pads it and sliced from `j · dilation` with the depth stride, and the slices added
//!   (then the bias);
//! - `ConvTranspose`: the same 2-D planes, one 2-D transposed convolution per kernel depth
//!   `j` (weights' slice `j`, the node's height and width attributes), each result spread
//!   along the depth by the stride (zero planes between), shifted by `j · dilation` and
//!   summed over `j`; the sum is cut to the node's depth pads and extended by its
//!   `output_padding` (then the bias). Explicit pads only (`auto_pad` and `output_shape`
//!   refused for 3-D);
//! - pooling: the 2-D pooling of `[N, C·D, H, W]` (the depth is one more channel), then the
//!   depth windows combined the same way: `Max` of the slices (padding `-inf`), or their sum
//!   divided by each output depth's count (the padding counted or not, as
//!   `count_include_pad` says; with `ceil_mode`, positions past the padding never counted).
//!
//! `MaxPool` of 8- and 16-bit integers runs on their exact Float32 widening (cast back).
//!
//! `auto_pad` is resolved here for every axis (SAME_UPPER puts the odd padding at the end,
//! SAME_LOWER at the start), and the 2-D layers get explicit pads.

use super::{Expansion, int, ints, rearrange::first_output, string};
use crate::onnx::import::{
    Importer, NResult, Node,
    attributes::{attr_int, attr_ints, attr_string},
    invalid,
    queue::Pending,
    unsupported,
};

/// The window geometry of a 3-D node, every axis explicit.
struct Window {
    kernel: [i64; 3],
    strides: [i64; 3],
    dilations: [i64; 3],
    /// Begin pads (D, H, W), then end pads.
    pads: [i64; 6],
    ceil: bool,
}

impl Window {
    fn read(n: &Node<'_>, input: &[i64], kernel: Option<Vec<i64>>) -> NResult<Self> {
        let three = |name: &str, v: Option<Vec<i64>>, default: i64| -> NResult<[i64; 3]> {
            match v {
                None => Ok([default; 3]),
                Some(v) => <[i64; 3]>::try_from(v.as_slice())
                    .map_err(|_| invalid(format!("{name} must have 3 values, got {v:?}"))),
            }
        };
        let kernel = three(
            "kernel_shape",
            Some(kernel.ok_or_else(|| invalid("kernel_shape is required"))?),
            1,
        )?;
        let strides = three("strides", attr_ints(n, "strides")?, 1)?;
        let dilations = three("dilations", attr_ints(n, "dilations")?, 1)?;
        let ceil = attr_int(n, "ceil_mode")?.unwrap_or(0) != 0;
        let auto = attr_string(n, "auto_pad")?.unwrap_or_else(|| "NOTSET".to_owned());
        let mut pads = [0i64; 6];
        match auto.as_str() {
            "NOTSET" => {
                if let Some(p) = attr_ints(n, "pads")? {
                    pads = <[i64; 6]>::try_from(p.as_slice())
                        .map_err(|_| invalid(format!("pads must have 6 values, got {p:?}")))?;
                }
            }
            "VALID" => {}
            "SAME_UPPER" | "SAME_LOWER" => {
                for d in 0..3 {
                    let out = (input[d] + strides[d] - 1) / strides[d];
                    let span = (kernel[d] - 1) * dilations[d] + 1;
                    let total = ((out - 1) * strides[d] + span - input[d]).max(0);
                    let small = total / 2;
                    let (b, e) = if auto == "SAME_UPPER" {
                        (small, total - small)
                    } else {
                        (total - small, small)
                    };
                    pads[d] = b;
                    pads[3 + d] = e;
                }
            }
            other => return Err(invalid(format!("auto_pad {other:?}"))),
        }
        if kernel
            .iter()
            .chain(&strides)
            .chain(&dilations)
            .any(|&v| v <= 0)
            || pads.iter().any(|&p| p < 0)
        {
            return Err(invalid(
                "kernel, strides and dilations must be positive, pads >= 0",
            ));
        }
        Ok(Self {
            kernel,
            strides,
            dilations,
            pads,
            ceil,
        })
    }

    /// The output extent along axis `a` (0 depth, 1 height, 2 width) of an input of `size`.
    fn out(&self, a: usize, size: i64) -> NResult<i64> {
        let span = (self.kernel[a] - 1) * self.dilations[a] + 1;
        let room = size + self.pads[a] + self.pads[3 + a] - span;
        if room < 0 {
            return Err(invalid("the window is larger than the padded input"));
        }
        let mut out = room / self.strides[a] + 1;
        if self.ceil && room % self.strides[a] != 0 {
            out += 1;
            // The last window must start inside the input or its leading padding.
            if (out - 1) * self.strides[a] >= size + self.pads[a] {
                out -= 1;
            }
        }
        Ok(out)
    }

    /// The 2-D attributes (H and W) of the per-plane layer.
    fn planar(&self) -> Vec<crate::onnx::proto::AttributeProto> {
        vec![
            ints("kernel_shape", &self.kernel[1..]),
            ints("strides", &self.strides[1..]),
            ints("dilations", &self.dilations[1..]),
            ints(
                "pads",
                &[self.pads[1], self.pads[2], self.pads[4], self.pads[5]],
            ),
            int("ceil_mode", i64::from(self.ceil)),
        ]
    }
}

/// Whether node `n`'s first input is 5-D (a 3-D spatial node).
pub(in crate::onnx::import) fn is_volume(im: &Importer, n: &Node<'_>) -> bool {
    im.values
        .get(n.proto.input.first().map(String::as_str).unwrap_or(""))
        .and_then(|v| im.shape(v).ok())
        .is_some_and(|s| s.len() == 5)
}

/// `x` padded along axis 1 (the depth, after the layout's move) by `before` and `after`,
/// with the scalar `value` (zeros without one).
fn pad_depth(e: &mut Expansion, x: &str, before: i64, after: i64, value: Option<&str>) -> String {
    if before == 0 && after == 0 {
        return x.to_owned();
    }
    let mut pads = vec![0i64; 10];
    pads[1] = before;
    pads[6] = after;
    let p = e.i64v(&pads);
    let mut inputs = vec![x, p.as_str()];
    if let Some(v) = value {
        inputs.push(v);
    }
    e.op("Pad", &inputs, vec![string("mode", "constant")])
}

/// The slice of the padded `x` along axis 1 that kernel depth `j` reads for `count` outputs.
fn tap(e: &mut Expansion, padded: &str, w: &Window, j: i64, count: i64) -> String {
    let start = j * w.dilations[0];
    e.slice_step(
        padded,
        start,
        start + (count - 1) * w.strides[0] + 1,
        1,
        w.strides[0],
    )
}

/// The data, weights and optional bias of a 3-D convolution node, with the shapes of the
/// first two (the weights checked to be 5-D).
struct Operands {
    xn: String,
    wn: String,
    bias: Option<String>,
    xs: Vec<i64>,
    ws: Vec<i64>,
}

impl Importer {
    /// The [`Operands`] of `Conv` or `ConvTranspose` node `n`.
    fn volume_operands(&self, n: &Node<'_>) -> NResult<Operands> {
        let (xn, xv) = self.req(n, 0)?;
        let (wn, wv) = self.req(n, 1)?;
        let bias = self.arg(n, 2)?.map(|(name, _)| name);
        let xs: Vec<i64> = self.shape(&xv)?.iter().map(|&d| i64::from(d)).collect();
        let ws: Vec<i64> = self.shape(&wv)?.iter().map(|&d| i64::from(d)).collect();
        if ws.len() != 5 {
            return Err(invalid(format!("3-D weights must be 5-D, got {ws:?}")));
        }
        Ok(Operands {
            xn,
            wn,
            bias,
            xs,
            ws,
        })
    }

    /// `Conv` of a 5-D input.
    pub(in crate::onnx::import) fn conv_3d(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let Operands {
            xn,
            wn,
            bias,
            xs,
            ws,
        } = self.volume_operands(n)?;
        let kernel = attr_ints(n, "kernel_shape")?.unwrap_or_else(|| ws[2..].to_vec());
        let w = Window::read(n, &xs[2..], Some(kernel))?;
        let group = attr_int(n, "group")?.unwrap_or(1);
        let (batch, depth, m) = (xs[0], xs[2], ws[0]);
        let od = w.out(0, depth)?;
        let (oh, ow) = (w.out(1, xs[3])?, w.out(2, xs[4])?);
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let t = e.transpose(&xn, &[0, 2, 1, 3, 4]);
        let planes = e.reshape(&t, &[batch * depth, xs[1], xs[3], xs[4]]);
        let mut attrs = w.planar();
        attrs.pop(); // Conv has no ceil_mode.
        attrs.push(int("group", group));
        let mut acc: Option<String> = None;
        for j in 0..w.kernel[0] {
            let wj = e.slice(&wn, &[j], &[j + 1], &[2]);
            let wj = e.squeeze(&wj, &[2]);
            let yj = e.op("Conv", &[&planes, &wj], attrs.clone());
            // [N·D, M, OH, OW] → [N, D, M, OH, OW]
            let yj = e.reshape(&yj, &[batch, depth, m, oh, ow]);
            let padded = pad_depth(&mut e, &yj, w.pads[0], w.pads[3], None);
            let part = tap(&mut e, &padded, &w, j, od);
            acc = Some(match acc {
                Some(a) => e.op("Add", &[&a, &part], Vec::new()),
                None => part,
            });
        }
        let mut y = acc.ok_or_else(|| invalid("an empty kernel"))?;
        if let Some(b) = &bias {
            let b = e.reshape(b, &[1, 1, m, 1, 1]);
            y = e.op("Add", &[&y, &b], Vec::new());
        }
        let y = e.transpose(&y, &[0, 2, 1, 3, 4]);
        e.bind(&y, &out);
        Ok(e.finish())
    }

    /// `ConvTranspose` of a 5-D input.
    pub(in crate::onnx::import) fn conv_transpose_3d(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        let Operands {
            xn,
            wn,
            bias,
            xs,
            ws,
        } = self.volume_operands(n)?;
        let auto = attr_string(n, "auto_pad")?.unwrap_or_else(|| "NOTSET".to_owned());
        if !matches!(auto.as_str(), "NOTSET" | "") || attr_ints(n, "output_shape")?.is_some() {
            return Err(unsupported(
                "3-D ConvTranspose with auto_pad or output_shape (explicit pads only)",
            ));
        }
        let three = |name: &str, default: i64| -> NResult<Vec<i64>> {
            let v = attr_ints(n, name)?.unwrap_or_else(|| vec![default; 3]);
            if v.len() == 3 && v.iter().all(|&x| x >= 0) {
                Ok(v)
            } else {
                Err(invalid(format!(
                    "{name} must have 3 values >= 0, got {v:?}"
                )))
            }
        };
        let kernel = attr_ints(n, "kernel_shape")?.unwrap_or_else(|| ws[2..].to_vec());
        let (strides, dilations) = (three("strides", 1)?, three("dilations", 1)?);
        let extra = three("output_padding", 0)?;
        let pads = attr_ints(n, "pads")?.unwrap_or_else(|| vec![0; 6]);
        let group = attr_int(n, "group")?.unwrap_or(1);
        if kernel.len() != 3
            || pads.len() != 6
            || pads.iter().any(|&p| p < 0)
            || kernel
                .iter()
                .chain(&strides)
                .chain(&dilations)
                .any(|&v| v <= 0)
        {
            return Err(invalid(
                "kernel_shape and pads must have 3 and 6 values, kernel, strides and \
                 dilations positive, pads >= 0",
            ));
        }
        let (batch, depth, channels) = (xs[0], xs[2], xs[1]);
        let m = ws[1] * group;
        // The planes' extents: the 2-D layer's own rule.
        let planar = |a: usize| {
            (xs[2 + a] - 1) * strides[a] - pads[a] - pads[3 + a]
                + (kernel[a] - 1) * dilations[a]
                + 1
                + extra[a]
        };
        let (oh, ow) = (planar(1), planar(2));
        // The full depth before the pads are cut, and the depth after.
        let (sd, dd) = (strides[0], dilations[0]);
        let full = (depth - 1) * sd + (kernel[0] - 1) * dd + 1;
        let od = full - pads[0] - pads[3] + extra[0];
        if oh <= 0 || ow <= 0 || od <= 0 {
            return Err(invalid("the padding removes the whole output"));
        }
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let t = e.transpose(&xn, &[0, 2, 1, 3, 4]);
        let planes = e.reshape(&t, &[batch * depth, channels, xs[3], xs[4]]);
        let attrs = vec![
            ints("kernel_shape", &kernel[1..]),
            ints("strides", &strides[1..]),
            ints("dilations", &dilations[1..]),
            ints("pads", &[pads[1], pads[2], pads[4], pads[5]]),
            ints("output_padding", &extra[1..]),
            int("group", group),
        ];
        let mut acc: Option<String> = None;
        for j in 0..kernel[0] {
            let wj = e.slice(&wn, &[j], &[j + 1], &[2]);
            let wj = e.squeeze(&wj, &[2]);
            let yj = e.op("ConvTranspose", &[&planes, &wj], attrs.clone());
            // [N·D, M, OH, OW] → [N, D, M, OH, OW], then each plane followed by `sd - 1`
            // zero planes ([N, D·sd, ...], cut to the (D - 1)·sd + 1 that count).
            let mut yj = e.reshape(&yj, &[batch, depth, m, oh, ow]);
            if sd > 1 {
                let u = e.unsqueeze(&yj, &[2]);
                let grow = e.i64v(&[0, 0, 0, 0, 0, 0, 0, 0, sd - 1, 0, 0, 0]);
                let u = e.op("Pad", &[&u, &grow], vec![string("mode", "constant")]);
                let u = e.reshape(&u, &[batch, depth * sd, m, oh, ow]);
                yj = e.slice(&u, &[0], &[(depth - 1) * sd + 1], &[1]);
            }
            // Placed at depth j·dd of the full output.
            let before = j * dd;
            let after = full - before - ((depth - 1) * sd + 1);
            let part = pad_depth(&mut e, &yj, before, after, None);
            acc = Some(match acc {
                Some(a) => e.op("Add", &[&a, &part], Vec::new()),
                None => part,
            });
        }
        let mut y = acc.ok_or_else(|| invalid("an empty kernel"))?;
        // The depth pads cut, output_padding's planes added at the end (zeros: the full
        // output has none there).
        let tail = (pads[0] + od - full).max(0);
        y = pad_depth(&mut e, &y, 0, tail, None);
        y = e.slice(&y, &[pads[0]], &[pads[0] + od], &[1]);
        if let Some(b) = &bias {
            let b = e.reshape(b, &[1, 1, m, 1, 1]);
            y = e.op("Add", &[&y, &b], Vec::new());
        }
        let y = e.transpose(&y, &[0, 2, 1, 3, 4]);
        e.bind(&y, &out);
        Ok(e.finish())
    }

    /// `MaxPool`, `AveragePool` and `LpPool` of a 5-D input.
    pub(in crate::onnx::import) fn pool_3d(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        if n.proto.output.iter().skip(1).any(|o| !o.is_empty()) {
            return Err(unsupported("the Indices output of MaxPool"));
        }
        let (xn, xv) = self.req(n, 0)?;
        let xs: Vec<i64> = self.shape(&xv)?.iter().map(|&d| i64::from(d)).collect();
        let w = Window::read(n, &xs[2..], attr_ints(n, "kernel_shape")?)?;
        let (batch, channels, depth) = (xs[0], xs[1], xs[2]);
        let od = w.out(0, depth)?;
        let (oh, ow) = (w.out(1, xs[3])?, w.out(2, xs[4])?);
        let elem = self.data_type(&xv)?.onnx_code();
        let op = n.op().to_owned();
        let include_pad = attr_int(n, "count_include_pad")?.unwrap_or(0) != 0;
        let p = attr_int(n, "p")?.unwrap_or(2);
        // Positions the last (ceil-mode) window reaches past the end padding.
        let span = (w.kernel[0] - 1) * w.dilations[0] + 1;
        let extra = ((od - 1) * w.strides[0] + span - (depth + w.pads[0] + w.pads[3])).max(0);
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        // Each depth plane is one more channel of a 2-D pooling.
        let planes = e.reshape(&xn, &[batch, channels * depth, xs[3], xs[4]]);
        let mut attrs = w.planar();
        let plane_op = match op.as_str() {
            "MaxPool" => "MaxPool",
            "AveragePool" => {
                attrs.push(int("count_include_pad", i64::from(include_pad)));
                "AveragePool"
            }
            _ => {
                attrs.push(int("p", p));
                "LpPool"
            }
        };
        let y2 = e.op(plane_op, &[&planes], attrs);
        let y5 = e.reshape(&y2, &[batch, channels, depth, oh, ow]);
        // The depth axis second, as `pad_depth` and `tap` take it.
        let moved = e.transpose(&y5, &[0, 2, 1, 3, 4]);
        let y = match op.as_str() {
            "MaxPool" => {
                let low = e.scalar_like(f32::NEG_INFINITY, &xn, elem);
                let padded = pad_depth(&mut e, &moved, w.pads[0], w.pads[3] + extra, Some(&low));
                let mut acc: Option<String> = None;
                for j in 0..w.kernel[0] {
                    let part = tap(&mut e, &padded, &w, j, od);
                    acc = Some(match acc {
                        Some(a) => e.op("Max", &[&a, &part], Vec::new()),
                        None => part,
                    });
                }
                acc.ok_or_else(|| invalid("an empty kernel"))?
            }
            _ => {
                let lp = op == "LpPool";
                let padded = pad_depth(&mut e, &moved, w.pads[0], w.pads[3] + extra, None);
                let mut acc: Option<String> = None;
                for j in 0..w.kernel[0] {
                    let mut part = tap(&mut e, &padded, &w, j, od);
                    if lp {
                        let c = e.scalar_like(p as f32, &xn, elem);
                        part = e.op("Pow", &[&part, &c], Vec::new());
                    }
                    acc = Some(match acc {
                        Some(a) => e.op("Add", &[&a, &part], Vec::new()),
                        None => part,
                    });
                }
                let sum = acc.ok_or_else(|| invalid("an empty kernel"))?;
                if lp {
                    let c = e.scalar_like(1.0 / p as f32, &xn, elem);
                    e.op("Pow", &[&sum, &c], Vec::new())
                } else {
                    // Each output depth's count: the window's positions inside the input, or
                    // (counting the padding) inside the padded input.
                    let counts: Vec<f32> = (0..od)
                        .map(|o| {
                            (0..w.kernel[0])
                                .filter(|&j| {
                                    let at = o * w.strides[0] + j * w.dilations[0];
                                    if include_pad {
                                        at < depth + w.pads[0] + w.pads[3]
                                    } else {
                                        at >= w.pads[0] && at < w.pads[0] + depth
                                    }
                                })
                                .count() as f32
                        })
                        .collect();
                    let c = e.f32s_like(&counts, &[1, od, 1, 1, 1], &xn, elem);
                    e.op("Div", &[&sum, &c], Vec::new())
                }
            }
        };
        let y = e.transpose(&y, &[0, 2, 1, 3, 4]);
        e.bind(&y, &out);
        Ok(e.finish())
    }
}

/// Whether node `n` (a `MaxPool`) pools a small integer tensor (8 or 16 bits), which every
/// f32 holds exactly.
pub(in crate::onnx::import) fn is_small_integer_pool(im: &Importer, n: &Node<'_>) -> bool {
    use backplane_api::DataType as D;
    im.values
        .get(n.proto.input.first().map(String::as_str).unwrap_or(""))
        .and_then(|v| im.data_type(v).ok())
        .is_some_and(|t| {
            matches!(
                t,
                D::Signed8 | D::UnsignedInt8 | D::Signed16 | D::UnsignedInt16
            )
        })
}

impl Importer {
    /// `MaxPool` of an 8- or 16-bit integer tensor: widened to Float32 (exactly), pooled,
    /// and cast back (the maximum is one of the values, so exact too).
    pub(in crate::onnx::import) fn pool_small_integers(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        if n.proto.output.iter().skip(1).any(|o| !o.is_empty()) {
            return Err(unsupported("the Indices output of MaxPool"));
        }
        let (xn, xv) = self.req(n, 0)?;
        let code = self.data_type(&xv)?.onnx_code();
        let out = first_output(n)?;
        let attrs = n.proto.attribute.clone();
        let mut e = Expansion::new(self, n);
        let wide = e.op("Cast", &[&xn], vec![int("to", 1)]);
        let pooled = e.op("MaxPool", &[&wide], attrs);
        let y = e.op("Cast", &[&pooled], vec![int("to", i64::from(code))]);
        e.bind(&y, &out);
        Ok(e.finish())
    }
}
