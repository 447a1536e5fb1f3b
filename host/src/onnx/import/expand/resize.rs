//! `Resize` in the forms Backend API 1.1's `Resize` layer does not have (cubic, antialiased,
//! over chosen axes, with a kept aspect ratio, `tf_crop_and_resize` or `half_pixel_symmetric`
//! coordinates, another rank than 4, N or C resized), as one step per resized axis, the
//! interpolation being separable: nearest neighbours a `Gather` of the chosen positions; linear
//! and cubic a `MatMul` by the axis's interpolation matrix (computed here, in f64, from the
//! operator's definition of each output position's source coordinate, neighbours and
//! coefficients, with `exclude_outside` renormalising and the antialiased filters widened
//! by the scale), the axis moved last around it; `tf_crop_and_resize`'s positions outside the
//! input take `extrapolation_value`.

use super::{Expansion, int, rearrange::first_output};
use crate::onnx::import::{
    Importer, NResult, Node, NodeError, Value,
    attributes::{attr_float, attr_int, attr_ints, attr_string},
    invalid,
    queue::Pending,
    unsupported,
};

/// The interpolation of one resize.
#[derive(Debug, Clone)]
struct Interpolation {
    mode: String,
    coordinates: String,
    nearest: String,
    cubic_a: f64,
    exclude_outside: bool,
    antialias: bool,
}

impl Interpolation {
    /// The source coordinate of output position `y` and whether it lies outside the input
    /// (`tf_crop_and_resize` only).
    fn source(&self, y: f64, scale: f64, input: f64, output: f64, roi: (f64, f64)) -> (f64, bool) {
        let out_float = scale * input;
        match self.coordinates.as_str() {
            "align_corners" => {
                if out_float == 1.0 {
                    (0.0, false)
                } else {
                    (y * (input - 1.0) / (out_float - 1.0), false)
                }
            }
            "asymmetric" => (y / scale, false),
            "tf_crop_and_resize" => {
                let x = if out_float == 1.0 {
                    (roi.1 - roi.0) * (input - 1.0) / 2.0
                } else {
                    y * (roi.1 - roi.0) * (input - 1.0) / (out_float - 1.0)
                } + roi.0 * (input - 1.0);
                (x, x < 0.0 || x > input - 1.0)
            }
            "pytorch_half_pixel" => {
                if out_float == 1.0 {
                    (-0.5, false)
                } else {
                    ((y + 0.5) / scale - 0.5, false)
                }
            }
            "half_pixel_symmetric" => {
                let adjustment = output / out_float;
                let offset = input / 2.0 * (1.0 - adjustment);
                (offset + (y + 0.5) / scale - 0.5, false)
            }
            // "half_pixel", the default.
            _ => ((y + 0.5) / scale - 0.5, false),
        }
    }

    /// The coefficients of the neighbours at fractional position `ratio` (1 at an integer).
    fn coefficients(&self, ratio: f64, scale: f64) -> Vec<f64> {
        let a = self.cubic_a;
        match self.mode.as_str() {
            "nearest" => {
                if ratio == 1.0 {
                    return vec![0.0, 1.0];
                }
                let up = match self.nearest.as_str() {
                    "round_prefer_ceil" => ratio >= 0.5,
                    "floor" => false,
                    "ceil" => true,
                    _ => ratio > 0.5,
                };
                if up { vec![0.0, 1.0] } else { vec![1.0, 0.0] }
            }
            "linear" if self.antialias => {
                let s = scale.min(1.0);
                let start = (-1.0 / s).floor() as i64 + 1;
                let c: Vec<f64> = (start..start + 2 - 2 * start)
                    .map(|i| (1.0 - ((i as f64 - ratio) * s).abs()).clamp(0.0, 1.0))
                    .collect();
                let sum: f64 = c.iter().sum();
                c.into_iter().map(|v| v / sum).collect()
            }
            "linear" => vec![1.0 - ratio, ratio],
            _ if self.antialias => {
                let s = scale.min(1.0);
                let k = |x: f64| {
                    let x = x.abs();
                    if x <= 1.0 {
                        (a + 2.0) * x * x * x - (a + 3.0) * x * x + 1.0
                    } else if x < 2.0 {
                        a * x * x * x - 5.0 * a * x * x + 8.0 * a * x - 4.0 * a
                    } else {
                        0.0
                    }
                };
                let start = (-2.0 / s).floor() as i64 + 1;
                let c: Vec<f64> = (start..2 - start)
                    .map(|i| k(s * (i as f64 - ratio)))
                    .collect();
                let sum: f64 = c.iter().sum();
                c.into_iter().map(|v| v / sum).collect()
            }
            _ => {
                let r = ratio;
                let q = 1.0 - r;
                vec![
                    ((a * (r + 1.0) - 5.0 * a) * (r + 1.0) + 8.0 * a) * (r + 1.0) - 4.0 * a,
                    ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0,
                    ((a + 2.0) * q - (a + 3.0)) * q * q + 1.0,
                    ((a * (q + 1.0) - 5.0 * a) * (q + 1.0) + 8.0 * a) * (q + 1.0) - 4.0 * a,
                ]
            }
        }
    }

    /// The `[input, output]` weights of one axis, and the outputs that take the
    /// extrapolation value.
    fn matrix(
        &self,
        input: i64,
        output: i64,
        scale: f64,
        roi: (f64, f64),
    ) -> (Vec<f64>, Vec<bool>) {
        let mut m = vec![0.0; (input * output) as usize];
        let mut outside = vec![false; output as usize];
        for y in 0..output {
            let (x, extrapolated) = self.source(y as f64, scale, input as f64, output as f64, roi);
            if extrapolated {
                outside[y as usize] = true;
                continue;
            }
            let base = x.floor();
            let frac = x - base;
            let ratio = if frac == 0.0 { 1.0 } else { frac };
            let mut c = self.coefficients(ratio, scale);
            let n = c.len() as i64;
            let offset = if n % 2 == 0 {
                if frac == 0.0 { -(n / 2) } else { -(n / 2) + 1 }
            } else if frac <= 0.5 {
                -((n - 1) / 2)
            } else {
                -((n - 1) / 2) + 1
            };
            let idx: Vec<i64> = (0..n).map(|i| base as i64 + offset + i).collect();
            if self.exclude_outside {
                for (ci, &i) in c.iter_mut().zip(&idx) {
                    if i < 0 || i >= input {
                        *ci = 0.0;
                    }
                }
                let sum: f64 = c.iter().sum();
                if sum != 0.0 {
                    c.iter_mut().for_each(|v| *v /= sum);
                }
            }
            for (&ci, &i) in c.iter().zip(&idx) {
                let i = i.clamp(0, input - 1);
                m[(i * output + y) as usize] += ci;
            }
        }
        (m, outside)
    }
}

/// Whether node `n` (a `Resize`) needs this expansion: a form the `Resize` layer lacks.
pub(in crate::onnx::import) fn needs_general_resize(im: &Importer, n: &Node<'_>) -> bool {
    if im.opset < 11 {
        return false;
    }
    let text = |name: &str, default: &str| {
        attr_string(n, name)
            .ok()
            .flatten()
            .unwrap_or_else(|| default.to_owned())
    };
    let rank = im
        .values
        .get(n.proto.input.first().map(String::as_str).unwrap_or(""))
        .and_then(|v| im.shape(v).ok())
        .map_or(0, |s| s.len());
    let leading_changed = [2usize, 3].iter().any(|&i| {
        n.proto
            .input
            .get(i)
            .and_then(|name| im.values.get(name))
            .is_some_and(|v| match v {
                Value::F32(c) if c.data.len() >= 2 => c.data[0] != 1.0 || c.data[1] != 1.0,
                Value::I64(c) if c.data.len() >= 2 => n
                    .proto
                    .input
                    .first()
                    .and_then(|x| im.values.get(x))
                    .and_then(|x| im.shape(x).ok())
                    .is_some_and(|s| {
                        s.len() >= 2
                            && (c.data[0] != i64::from(s[0]) || c.data[1] != i64::from(s[1]))
                    }),
                _ => false,
            })
    });
    !matches!(text("mode", "nearest").as_str(), "nearest" | "linear")
        || !matches!(
            text("coordinate_transformation_mode", "half_pixel").as_str(),
            "half_pixel" | "asymmetric" | "align_corners" | "pytorch_half_pixel"
        )
        || attr_int(n, "antialias").ok().flatten().unwrap_or(0) != 0
        || attr_ints(n, "axes").ok().flatten().is_some()
        || text("keep_aspect_ratio_policy", "stretch") != "stretch"
        || (rank != 4 && rank != 0)
        || leading_changed
}

/// Input `i` as a constant float list (`None` when absent or empty).
fn floats_input(im: &Importer, n: &Node<'_>, i: usize, what: &str) -> NResult<Option<Vec<f64>>> {
    match im.arg(n, i)? {
        None => Ok(None),
        Some((_, Value::F32(c))) if c.data.is_empty() => Ok(None),
        Some((_, Value::F32(c))) => Ok(Some(c.data.iter().map(|&v| f64::from(v)).collect())),
        Some((name, Value::Tensor(_))) => Err(NodeError::NeedsValue {
            message: format!("Resize {what} ({name}) must be a constant"),
            names: vec![name],
        }),
        Some((name, _)) => Err(unsupported(format!(
            "Resize {what} ({name}) must be a constant"
        ))),
    }
}

impl Importer {
    /// `Resize` in the forms [`needs_general_resize`] picks.
    pub(in crate::onnx::import) fn resize_general(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let xs: Vec<i64> = self.shape(&xv)?.iter().map(|&d| i64::from(d)).collect();
        let r = xs.len();
        let text = |name: &str, default: &str| -> NResult<String> {
            Ok(attr_string(n, name)?.unwrap_or_else(|| default.to_owned()))
        };
        let interp = Interpolation {
            mode: text("mode", "nearest")?,
            coordinates: text("coordinate_transformation_mode", "half_pixel")?,
            nearest: text("nearest_mode", "round_prefer_floor")?,
            cubic_a: f64::from(attr_float(n, "cubic_coeff_a")?.unwrap_or(-0.75)),
            exclude_outside: attr_int(n, "exclude_outside")?.unwrap_or(0) != 0,
            antialias: attr_int(n, "antialias")?.unwrap_or(0) != 0,
        };
        if !matches!(interp.mode.as_str(), "nearest" | "linear" | "cubic") {
            return Err(invalid(format!("Resize mode {}", interp.mode)));
        }
        let extrapolation = attr_float(n, "extrapolation_value")?.unwrap_or(0.0);
        let policy = text("keep_aspect_ratio_policy", "stretch")?;
        let axes: Vec<usize> = match attr_ints(n, "axes")? {
            Some(a) => a
                .iter()
                .map(|&v| crate::onnx::import::attributes::normalize_axis(v, r))
                .collect::<NResult<_>>()?,
            None => (0..r).collect(),
        };
        let roi = floats_input(self, n, 1, "roi")?;
        let scales = floats_input(self, n, 2, "scales")?;
        let sizes = self.const_ints(n, 3, "sizes")?.map(|c| c.data.clone());
        // Per axis of the input: its scale, output size and region of interest.
        let mut scale = vec![1.0f64; r];
        let mut out: Vec<i64> = xs.clone();
        let mut rois = vec![(0.0f64, 1.0f64); r];
        if let Some(roi) = &roi {
            if roi.len() != 2 * axes.len() {
                return Err(invalid(format!(
                    "roi has {} values for {} axes",
                    roi.len(),
                    axes.len()
                )));
            }
            for (k, &a) in axes.iter().enumerate() {
                rois[a] = (roi[k], roi[axes.len() + k]);
            }
        }
        match (scales, sizes) {
            (Some(s), None) if s.len() == axes.len() => {
                for (k, &a) in axes.iter().enumerate() {
                    scale[a] = s[k];
                    // In f32, as onnxruntime computes it (5 × 1.4f rounds to 7 there).
                    out[a] = (s[k] as f32 * xs[a] as f32).floor() as i64;
                }
            }
            (None, Some(z)) if z.len() == axes.len() => {
                for (k, &a) in axes.iter().enumerate() {
                    out[a] = z[k];
                    scale[a] = z[k] as f64 / xs[a] as f64;
                }
                if policy != "stretch" {
                    let chosen = axes.iter().map(|&a| scale[a]);
                    let s = if policy == "not_larger" {
                        chosen.fold(f64::INFINITY, f64::min)
                    } else {
                        chosen.fold(f64::NEG_INFINITY, f64::max)
                    };
                    for &a in &axes {
                        scale[a] = s;
                        out[a] = (s * xs[a] as f64 + 0.5) as i64;
                    }
                }
            }
            _ => {
                return Err(invalid(
                    "Resize needs exactly one of scales and sizes, one value per axis",
                ));
            }
        }
        if out.iter().any(|&o| o <= 0) || scale.iter().any(|&s| !(s.is_finite() && s > 0.0)) {
            return Err(unsupported(format!("Resize of {xs:?} to {out:?}")));
        }
        let elem = self.data_type(&xv)?.onnx_code();
        let y_name = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let mut y = xn.clone();
        let mut shape = xs.clone();
        for &a in &axes {
            let default_roi = (rois[a].0 - 0.0).abs() < 1e-12 && (rois[a].1 - 1.0).abs() < 1e-12;
            if (scale[a] - 1.0).abs() < 1e-9 && out[a] == shape[a] && default_roi {
                continue;
            }
            if interp.mode == "nearest" && interp.coordinates != "tf_crop_and_resize" {
                // One source per output: a Gather, exact.
                super::check_elements(shape[a] * out[a], "a Resize interpolation matrix")?;
                let (m, _) = interp.matrix(shape[a], out[a], scale[a], rois[a]);
                let picks: Vec<i64> = (0..out[a])
                    .map(|o| {
                        (0..shape[a])
                            .find(|&i| m[(i * out[a] + o) as usize] != 0.0)
                            .unwrap_or(0)
                    })
                    .collect();
                let idx = e.i64v(&picks);
                y = e.op("Gather", &[&y, &idx], vec![int("axis", a as i64)]);
            } else {
                super::check_elements(shape[a] * out[a], "a Resize interpolation matrix")?;
                let (m, outside) = interp.matrix(shape[a], out[a], scale[a], rois[a]);
                let (perm, back) = super::axis_last(r, a);
                let last = a == r - 1;
                let moved = if last {
                    y.clone()
                } else {
                    e.transpose(&y, &perm)
                };
                let values: Vec<f32> = m.iter().map(|&v| v as f32).collect();
                let w = e.f32s_like(&values, &[shape[a], out[a]], &xn, elem);
                let mut z = e.op("MatMul", &[&moved, &w], Vec::new());
                if outside.iter().any(|&o| o) {
                    let b: Vec<f32> = outside
                        .iter()
                        .map(|&o| if o { extrapolation } else { 0.0 })
                        .collect();
                    let b = e.f32s_like(&b, &[out[a]], &xn, elem);
                    z = e.op("Add", &[&z, &b], Vec::new());
                }
                y = if last { z } else { e.transpose(&z, &back) };
            }
            shape[a] = out[a];
        }
        e.bind(&y, &y_name);
        Ok(e.finish())
    }
}
