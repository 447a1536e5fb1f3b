//! `Resize`: nearest and linear interpolation under each coordinate transformation.

use backplane_api::{CoordinateTransformation, NearestRounding, ResizeDescriptor, ResizeMethod};

use super::{Tensor, dims4, indices};

/// The source coordinate of output coordinate `o` along an axis of `input` → `output`
/// elements with `scale`, as [`CoordinateTransformation`] defines it.
fn resize_source(
    o: usize,
    input: usize,
    output: usize,
    scale: f64,
    mode: CoordinateTransformation,
) -> f64 {
    let o = o as f64;
    match mode {
        CoordinateTransformation::HalfPixel => (o + 0.5) / scale - 0.5,
        CoordinateTransformation::Asymmetric => o / scale,
        CoordinateTransformation::AlignCorners if output == 1 => 0.0,
        CoordinateTransformation::AlignCorners => o * (input - 1) as f64 / (output - 1) as f64,
        CoordinateTransformation::PytorchHalfPixel if output == 1 => 0.0,
        CoordinateTransformation::PytorchHalfPixel => (o + 0.5) / scale - 0.5,
    }
}

/// `Resize` (NCHW) of the height and width: each output pixel's source coordinates by the
/// coordinate transformation, then either the nearest input pixel (rounded as
/// [`NearestRounding`] says, clamped to the input), or the bilinear interpolation of the four
/// neighbours of the source point clamped to `[0, size - 1]`.
pub fn resize(x: &Tensor, d: &ResizeDescriptor) -> Result<Tensor, String> {
    let [n, c, h, w] = dims4(x, "input")?;
    let (oh, ow) = (d.height as usize, d.width as usize);
    let round = |v: f64| -> f64 {
        let half = v - v.floor() == 0.5;
        match d.nearest {
            NearestRounding::RoundPreferFloor if half => v.floor(),
            NearestRounding::RoundPreferCeil if half => v.ceil(),
            NearestRounding::RoundPreferFloor | NearestRounding::RoundPreferCeil => v.round(),
            NearestRounding::Floor => v.floor(),
            NearestRounding::Ceil => v.ceil(),
        }
    };
    let nearest = |v: f64, size: usize| round(v).clamp(0.0, (size - 1) as f64) as usize;
    let mut y = Tensor::zeros(&[n, c, oh, ow]);
    for i in indices(&[n, c, oh, ow]) {
        let sy = resize_source(i[2], h, oh, f64::from(d.scale_y), d.coordinates);
        let sx = resize_source(i[3], w, ow, f64::from(d.scale_x), d.coordinates);
        let value = match d.method {
            ResizeMethod::Nearest => x.at(&[i[0], i[1], nearest(sy, h), nearest(sx, w)]),
            ResizeMethod::Linear => {
                let sy = sy.clamp(0.0, (h - 1) as f64);
                let sx = sx.clamp(0.0, (w - 1) as f64);
                let (y0, x0) = (sy.floor() as usize, sx.floor() as usize);
                let (y1, x1) = ((y0 + 1).min(h - 1), (x0 + 1).min(w - 1));
                let (fy, fx) = (sy - y0 as f64, sx - x0 as f64);
                let p = |yy: usize, xx: usize| x.at(&[i[0], i[1], yy, xx]);
                (1.0 - fy) * ((1.0 - fx) * p(y0, x0) + fx * p(y0, x1))
                    + fy * ((1.0 - fx) * p(y1, x0) + fx * p(y1, x1))
            }
        };
        y.set(&i, value);
    }
    Ok(y)
}
