//! `Resize` (opset 11 and later) of the height and width of a 4-D NCHW input, nearest or
//! linear, with constant scales or sizes: Backend API 1.1's `Resize` layer; and `Upsample`
//! (opsets 7 and 9) and opset 10's `Resize` by onnxruntime's rules for them.

use backplane_api::{
    CoordinateTransformation, LayerDescriptor, NearestRounding, ResizeDescriptor, ResizeMethod,
};

use super::{
    Importer, NResult, Node, NodeError, Value,
    attributes::{attr_floats, attr_int, attr_ints, attr_string, to_u32},
    invalid, unsupported,
};

impl Importer {
    /// `Resize` (opset 11 and later) of the height and width of a 4-D NCHW input, nearest or
    /// linear: Backend API 1.1's `Resize`. Scales or sizes must be constant, and leave N and C
    /// unchanged.
    pub(super) fn resize(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        if self.opset < 11 {
            return self.upsample(n);
        }
        let (xn, xv) = self.req(n, 0)?;
        let xs = self.shape(&xv)?;
        if xs.len() != 4 {
            return Err(unsupported(format!(
                "Resize of a {}-D input (only 4-D NCHW)",
                xs.len()
            )));
        }
        let text = |name: &str, default: &str| -> NResult<String> {
            Ok(attr_string(n, name)?.unwrap_or_else(|| default.to_owned()))
        };
        let method = match text("mode", "nearest")?.as_str() {
            "nearest" => ResizeMethod::Nearest,
            "linear" => ResizeMethod::Linear,
            other => return Err(unsupported(format!("Resize mode {other}"))),
        };
        let coordinates = match text("coordinate_transformation_mode", "half_pixel")?.as_str() {
            "half_pixel" => CoordinateTransformation::HalfPixel,
            "asymmetric" => CoordinateTransformation::Asymmetric,
            "align_corners" => CoordinateTransformation::AlignCorners,
            "pytorch_half_pixel" => CoordinateTransformation::PytorchHalfPixel,
            other => {
                return Err(unsupported(format!(
                    "Resize coordinate_transformation_mode {other}"
                )));
            }
        };
        let nearest = match text("nearest_mode", "round_prefer_floor")?.as_str() {
            "round_prefer_floor" => NearestRounding::RoundPreferFloor,
            "round_prefer_ceil" => NearestRounding::RoundPreferCeil,
            "floor" => NearestRounding::Floor,
            "ceil" => NearestRounding::Ceil,
            other => return Err(unsupported(format!("Resize nearest_mode {other}"))),
        };
        if attr_int(n, "antialias")?.unwrap_or(0) != 0 {
            return Err(unsupported("Resize with antialias"));
        }
        if attr_ints(n, "axes")?.is_some() {
            return Err(unsupported("Resize with axes"));
        }
        if !matches!(
            text("keep_aspect_ratio_policy", "stretch")?.as_str(),
            "stretch"
        ) {
            return Err(unsupported("Resize with a keep_aspect_ratio_policy"));
        }
        let scales = match self.arg(n, 2)? {
            None => None,
            Some((_, Value::F32(c))) if c.data.is_empty() => None,
            Some((_, Value::F32(c))) => Some(c.data.clone()),
            Some((name, Value::Tensor(_))) => {
                return Err(NodeError::NeedsValue {
                    message: format!("Resize scales ({name}) must be a constant"),
                    names: vec![name],
                });
            }
            Some((name, _)) => {
                return Err(unsupported(format!(
                    "Resize scales ({name}) must be a constant"
                )));
            }
        };
        let sizes = self.const_ints(n, 3, "sizes")?.map(|c| c.data.clone());
        self.resize_layer(n, (&xn, &xv), (method, coordinates, nearest), scales, sizes)
    }

    /// `Upsample` (opsets 7 and 9) and opset 10's `Resize`: scales (an attribute in opset 7,
    /// a constant input after it) of a 4-D NCHW input's height and width, by onnxruntime's
    /// rules for them: asymmetric coordinates (`x_in = x_out / scale`), nearest taking the
    /// floor when enlarging (the ceiling when shrinking), or bilinear.
    pub(super) fn upsample(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let method = match attr_string(n, "mode")?.as_deref().unwrap_or("nearest") {
            "nearest" => ResizeMethod::Nearest,
            "linear" | "bilinear" => ResizeMethod::Linear,
            other => return Err(unsupported(format!("{} mode {other}", n.op()))),
        };
        let scales = match attr_floats(n, "scales")? {
            Some(s) => s,
            None => match self.req(n, 1)? {
                (_, Value::F32(c)) => c.data.clone(),
                (name, Value::Tensor(_)) => {
                    return Err(NodeError::NeedsValue {
                        message: format!("{} scales ({name}) must be a constant", n.op()),
                        names: vec![name],
                    });
                }
                (name, _) => {
                    return Err(unsupported(format!(
                        "{} scales ({name}) must be a float constant",
                        n.op()
                    )));
                }
            },
        };
        let enlarging = scales.iter().all(|&s| s >= 1.0);
        if n.op() == "Upsample" && !enlarging {
            return Err(invalid(format!(
                "Upsample scales {scales:?}: each must be at least 1"
            )));
        }
        let shrinking = scales.iter().all(|&s| s <= 1.0);
        let nearest = match (enlarging, shrinking) {
            (true, _) => NearestRounding::Floor,
            (_, true) => NearestRounding::Ceil,
            _ if method == ResizeMethod::Linear => NearestRounding::Floor,
            _ => {
                return Err(unsupported(format!(
                    "nearest {} enlarging one axis and shrinking another ({scales:?})",
                    n.op()
                )));
            }
        };
        let xs = self.shape(&xv)?;
        if xs.len() != 4 {
            return Err(unsupported(format!(
                "{} of a {}-D input (only 4-D NCHW)",
                n.op(),
                xs.len()
            )));
        }
        let how = (method, CoordinateTransformation::Asymmetric, nearest);
        self.resize_layer(n, (&xn, &xv), how, Some(scales), None)
    }

    /// The `Resize` layer of `x` (4-D NCHW) by `scales` or `sizes` (one of them, for every
    /// axis, leaving N and C unchanged).
    fn resize_layer(
        &mut self,
        n: &Node<'_>,
        (xn, xv): (&str, &Value),
        (method, coordinates, nearest): (ResizeMethod, CoordinateTransformation, NearestRounding),
        scales: Option<Vec<f32>>,
        sizes: Option<Vec<i64>>,
    ) -> NResult<Vec<Value>> {
        let xs = self.shape(xv)?;
        let (height, width, scale_y, scale_x) = match (scales, sizes) {
            (Some(s), None) if s.len() == 4 => {
                if s[0] != 1.0 || s[1] != 1.0 {
                    return Err(unsupported(format!("Resize scales {s:?} change N or C")));
                }
                let out = |len: u32, scale: f32| -> NResult<u32> {
                    // The product in f32, as onnxruntime computes it (5 × 1.4f is 7 there).
                    let v = f64::from((len as f32 * scale).floor());
                    if !(v.is_finite() && v >= 0.0 && v <= f64::from(u32::MAX)) {
                        return Err(invalid(format!("Resize scale {scale} of {len}")));
                    }
                    Ok(v as u32)
                };
                (out(xs[2], s[2])?, out(xs[3], s[3])?, s[2], s[3])
            }
            (None, Some(z)) if z.len() == 4 => {
                if z[0] != i64::from(xs[0]) || z[1] != i64::from(xs[1]) {
                    return Err(unsupported(format!("Resize sizes {z:?} change N or C")));
                }
                let (h, w) = (to_u32(z[2], "sizes")?, to_u32(z[3], "sizes")?);
                let scale = |o: u32, i: u32| if i == 0 { 1.0 } else { o as f32 / i as f32 };
                (h, w, scale(h, xs[2]), scale(w, xs[3]))
            }
            (None, None) => return Err(invalid("Resize needs scales or sizes")),
            _ => {
                return Err(invalid(
                    "Resize needs exactly one of scales and sizes, for every axis of the input",
                ));
            }
        };
        let d = LayerDescriptor::Resize(ResizeDescriptor {
            method,
            coordinates,
            nearest,
            height,
            width,
            scale_y,
            scale_x,
        });
        let x = self.tensor(xn, xv)?;
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)])
    }
}
