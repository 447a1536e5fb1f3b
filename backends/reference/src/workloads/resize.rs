//! Resize (Backend API 1.1): the height and width of an NCHW tensor resized, nearest or
//! bilinear, with ONNX `Resize`'s coordinate transformations and nearest roundings. The source
//! coordinate of each output row and column is computed once, in f32 (in f64 for Float64
//! tensors). With a scale that does
//! not divide the length evenly, `AlignCorners` and `PytorchHalfPixel` follow ONNX's reference
//! (resized length `in * scale`, unrounded), which ONNX's node tests check; onnxruntime may
//! differ there.

use backplane_api::{
    BackendResult, CoordinateTransformation, LayerDescriptor, NearestRounding, ResizeDescriptor,
    ResizeMethod, TensorView, TensorViewMut, Workload, WorkloadDesc, shapes,
};

use super::{ExpectedShapes, checked_num_elements, expect_counts, float_workload, invalid_layer};

/// The source coordinate of output coordinate `x` (ONNX's coordinate transformations). As in
/// ONNX's reference, the resized length they use is `in_len * scale`, not rounded (it differs
/// from the output length when a scale does not divide evenly).
/// The arithmetic is `F`'s: f32 for a Float32 tensor (as onnxruntime computes it), f64 for a
/// Float64 one (as ONNX's reference does; onnxruntime resizes no doubles).
pub fn source<F: num_traits::Float + From<f32>>(
    d: &ResizeDescriptor,
    x: usize,
    scale: f32,
    in_len: usize,
) -> F {
    let f = |v: f32| <F as From<f32>>::from(v);
    let count = |v: usize| <F as num_traits::NumCast>::from(v).unwrap_or_else(F::nan);
    let (x, scale, half) = (count(x), f(scale), f(0.5));
    let resized = count(in_len) * scale;
    match d.coordinates {
        CoordinateTransformation::HalfPixel => (x + half) / scale - half,
        CoordinateTransformation::Asymmetric => x / scale,
        CoordinateTransformation::AlignCorners if resized == F::one() => F::zero(),
        CoordinateTransformation::AlignCorners => {
            x * (count(in_len) - F::one()) / (resized - F::one())
        }
        CoordinateTransformation::PytorchHalfPixel if resized <= F::one() => F::zero(),
        CoordinateTransformation::PytorchHalfPixel => (x + half) / scale - half,
    }
}

/// One output coordinate's inputs: `(lower index, upper index, weight of the upper)`, the
/// weight in the coordinates' precision `F`.
type Tap<F> = (usize, usize, F);

fn taps<F: num_traits::Float + From<f32>>(
    d: &ResizeDescriptor,
    scale: f32,
    out_len: usize,
    in_len: usize,
) -> Vec<Tap<F>> {
    let last = <F as num_traits::NumCast>::from(in_len.saturating_sub(1)).unwrap_or_else(F::nan);
    let half = <F as From<f32>>::from(0.5);
    (0..out_len)
        .map(|o| {
            let s: F = source(d, o, scale, in_len);
            match d.method {
                ResizeMethod::Nearest => {
                    let r = match d.nearest {
                        NearestRounding::RoundPreferFloor if s.fract() == half => s.floor(),
                        NearestRounding::RoundPreferCeil if s.fract() == half => s.ceil(),
                        NearestRounding::RoundPreferFloor | NearestRounding::RoundPreferCeil => {
                            s.round()
                        }
                        NearestRounding::Floor => s.floor(),
                        NearestRounding::Ceil => s.ceil(),
                    };
                    let i = r.max(F::zero()).min(last).to_usize().unwrap_or(0);
                    (i, i, F::zero())
                }
                ResizeMethod::Linear => {
                    let s = s.max(F::zero()).min(last);
                    let lo = s.floor();
                    let hi = (lo + F::one()).min(last);
                    let index = |v: F| v.to_usize().unwrap_or(0);
                    (index(lo), index(hi), s - lo)
                }
            }
        })
        .collect()
}

/// Creates the workload of a `Resize` layer.
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Resize(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a Resize layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    let (x, out) = (&desc.inputs[0], &desc.outputs[0]);
    let expected =
        shapes::output_shapes(desc.layer, &desc.inputs).map_err(|e| invalid_layer(desc, e))?;
    if expected.first().map(Vec::as_slice) != Some(out.shape.as_slice()) {
        return Err(invalid_layer(
            desc,
            format_args!("Resize of {x} into {out}"),
        ));
    }
    checked_num_elements(desc, x)?;
    checked_num_elements(desc, out)?;
    let [n, c, h, w] = [x.shape[0], x.shape[1], x.shape[2], x.shape[3]].map(|v| v as usize);
    let (oh, ow) = (d.height as usize, d.width as usize);
    Ok(Box::new(ResizeWorkload {
        images: n * c,
        in_hw: (h, w),
        out_hw: (oh, ow),
        taps32: (taps(d, d.scale_y, oh, h), taps(d, d.scale_x, ow, w)),
        taps64: (taps(d, d.scale_y, oh, h), taps(d, d.scale_x, ow, w)),
        nearest: d.method == ResizeMethod::Nearest,
        shapes: ExpectedShapes::of(desc),
    }))
}

/// Resizes every image of the batch with the precomputed row and column taps. An output row
/// whose taps equal the previous row's is copied from it (an upscale computes each distinct
/// row once).
#[derive(Debug)]
pub struct ResizeWorkload {
    images: usize,
    in_hw: (usize, usize),
    out_hw: (usize, usize),
    /// The rows' and columns' taps for Float32 tensors (coordinates in f32).
    taps32: (Vec<Tap<f32>>, Vec<Tap<f32>>),
    /// The same for Float64 tensors (coordinates in f64).
    taps64: (Vec<Tap<f64>>, Vec<Tap<f64>>),
    /// Nearest: each output element is its one source element (no interpolation, so an
    /// infinity stays one instead of becoming `inf · 0 = NaN`).
    nearest: bool,
    shapes: ExpectedShapes,
}

impl ResizeWorkload {
    /// The resize of `T` (`f32` or `f64`, the tensors' type) elements, with the taps of its
    /// precision.
    fn run<T: Precision>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let src = inputs[0].as_slice::<T>()?;
        let dst = outputs[0].as_mut_slice::<T>()?;
        let (rows, cols) = T::taps(self);
        let ((h, w), (oh, ow)) = (self.in_hw, self.out_hw);
        if oh * ow == 0 {
            return Ok(());
        }
        for (img, out) in src
            .chunks_exact(h * w)
            .zip(dst.chunks_exact_mut(oh * ow))
            .take(self.images)
        {
            for (y, &(y0, y1, fy)) in rows.iter().enumerate() {
                let (done, rest) = out.split_at_mut(y * ow);
                let out_row = &mut rest[..ow];
                // An output row with the same taps as the one before (an upscale) is a copy.
                if y > 0 && rows[y - 1] == (y0, y1, fy) {
                    out_row.copy_from_slice(&done[(y - 1) * ow..]);
                    continue;
                }
                let (r0, r1) = (&img[y0 * w..][..w], &img[y1 * w..][..w]);
                if self.nearest {
                    for (&(x0, _, _), o) in cols.iter().zip(out_row.iter_mut()) {
                        *o = r0[x0];
                    }
                    continue;
                }
                for (&(x0, x1, fx), o) in cols.iter().zip(out_row.iter_mut()) {
                    let top = r0[x0] + (r0[x1] - r0[x0]) * fx;
                    let bottom = r1[x0] + (r1[x1] - r1[x0]) * fx;
                    *o = top + (bottom - top) * fy;
                }
            }
        }
        Ok(())
    }
}

float_workload!(ResizeWorkload);

/// The element types a resize computes in, each with its taps.
trait Precision: backplane_api::Element + num_traits::Float {
    /// The rows' and columns' taps of this precision.
    fn taps(w: &ResizeWorkload) -> (&[Tap<Self>], &[Tap<Self>]);
}

impl Precision for f32 {
    fn taps(w: &ResizeWorkload) -> (&[Tap<f32>], &[Tap<f32>]) {
        (&w.taps32.0, &w.taps32.1)
    }
}

impl Precision for f64 {
    fn taps(w: &ResizeWorkload) -> (&[Tap<f64>], &[Tap<f64>]) {
        (&w.taps64.0, &w.taps64.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, run};

    fn desc(method: ResizeMethod, coordinates: CoordinateTransformation) -> ResizeDescriptor {
        ResizeDescriptor {
            method,
            coordinates,
            nearest: NearestRounding::RoundPreferFloor,
            height: 0,
            width: 0,
            scale_y: 1.0,
            scale_x: 1.0,
        }
    }

    /// Values worked out by hand from ONNX's definitions (its reference tests' inputs).
    #[test]
    fn onnx_examples() {
        // test_resize_upsample_scales_nearest: 2x2 -> 4x6, asymmetric... default half_pixel
        // with round_prefer_floor: rows 0,0,1,1; columns 0,0,0,1,1,1.
        let x = [1.0, 2.0, 3.0, 4.0];
        let mut d = desc(ResizeMethod::Nearest, CoordinateTransformation::HalfPixel);
        (d.height, d.width, d.scale_y, d.scale_x) = (4, 6, 2.0, 3.0);
        let got = run(
            &LayerDescriptor::Resize(d),
            &[(&[1, 1, 2, 2], &x)],
            &[1, 1, 4, 6],
        );
        let row = |a: f32, b: f32| [a, a, a, b, b, b];
        let want: Vec<f32> = [row(1.0, 2.0), row(1.0, 2.0), row(3.0, 4.0), row(3.0, 4.0)].concat();
        assert_eq!(got, want);
        // Bilinear 2x2 -> 4x4, align_corners: the corners stay, thirds between.
        let mut d = desc(ResizeMethod::Linear, CoordinateTransformation::AlignCorners);
        (d.height, d.width, d.scale_y, d.scale_x) = (4, 4, 2.0, 2.0);
        let got = run(
            &LayerDescriptor::Resize(d),
            &[(&[1, 1, 2, 2], &x)],
            &[1, 1, 4, 4],
        );
        let want = [
            1.0,
            4.0 / 3.0,
            5.0 / 3.0,
            2.0, //
            5.0 / 3.0,
            2.0,
            7.0 / 3.0,
            8.0 / 3.0, //
            7.0 / 3.0,
            8.0 / 3.0,
            3.0,
            10.0 / 3.0, //
            3.0,
            10.0 / 3.0,
            11.0 / 3.0,
            4.0,
        ];
        assert_close(&got, &want.map(f64::from), 1e-6, "align_corners");
    }

    /// Nearest upscaling copies values, infinities included (interpolating with a zero weight
    /// would turn them into NaN); repeated rows are the same as computed ones.
    #[test]
    fn nearest_keeps_infinities() {
        let x = [f32::INFINITY, f32::NEG_INFINITY, 1.0, 2.0];
        let mut d = desc(ResizeMethod::Nearest, CoordinateTransformation::Asymmetric);
        (d.height, d.width, d.scale_y, d.scale_x) = (4, 4, 2.0, 2.0);
        let got = run(
            &LayerDescriptor::Resize(d),
            &[(&[1, 1, 2, 2], &x)],
            &[1, 1, 4, 4],
        );
        let (inf, ninf) = (f32::INFINITY, f32::NEG_INFINITY);
        let top = [inf, inf, ninf, ninf];
        let bottom = [1.0, 1.0, 2.0, 2.0];
        assert_eq!(got, [top, top, bottom, bottom].concat());
    }

    /// The oracle for every mode: each output element from its own source coordinates in f64,
    /// interpolated from the four neighbours by area weights.
    #[test]
    fn every_mode_matches_an_f64_oracle() {
        let (h, w, oh, ow) = (5usize, 7usize, 8usize, 3usize);
        let x = Lcg(3).vec(2 * h * w);
        for method in [ResizeMethod::Nearest, ResizeMethod::Linear] {
            for coordinates in [
                CoordinateTransformation::HalfPixel,
                CoordinateTransformation::Asymmetric,
                CoordinateTransformation::AlignCorners,
                CoordinateTransformation::PytorchHalfPixel,
            ] {
                for nearest in [
                    NearestRounding::Floor,
                    NearestRounding::Ceil,
                    NearestRounding::RoundPreferCeil,
                ] {
                    let d = ResizeDescriptor {
                        method,
                        coordinates,
                        nearest,
                        height: oh as u32,
                        width: ow as u32,
                        scale_y: oh as f32 / h as f32,
                        scale_x: ow as f32 / w as f32,
                    };
                    let got = run(
                        &LayerDescriptor::Resize(d),
                        &[(&[1, 2, h as u32, w as u32], &x)],
                        &[1, 2, oh as u32, ow as u32],
                    );
                    // Source coordinates in f32, as onnxruntime computes them (a nearest
                    // index is a rounding decision, which f64 could take differently at a
                    // boundary); the interpolation is in f64.
                    let coord = |o: usize, scale: f32, inp: usize| -> f64 {
                        let o = o as f32;
                        f64::from(match coordinates {
                            CoordinateTransformation::HalfPixel
                            | CoordinateTransformation::PytorchHalfPixel => (o + 0.5) / scale - 0.5,
                            CoordinateTransformation::Asymmetric => o / scale,
                            CoordinateTransformation::AlignCorners => {
                                o * (inp as f32 - 1.0) / (inp as f32 * scale - 1.0)
                            }
                        })
                    };
                    let mut want = vec![];
                    for img in 0..2 {
                        for oy in 0..oh {
                            for ox in 0..ow {
                                let sy = coord(oy, d.scale_y, h);
                                let sx = coord(ox, d.scale_x, w);
                                let at =
                                    |y: usize, xx: usize| f64::from(x[img * h * w + y * w + xx]);
                                let v = match method {
                                    ResizeMethod::Nearest => {
                                        let pick = |s: f64, len: usize| {
                                            let r = match nearest {
                                                NearestRounding::Floor => s.floor(),
                                                NearestRounding::Ceil => s.ceil(),
                                                _ if s - s.floor() == 0.5 => s.ceil(),
                                                _ => s.round(),
                                            };
                                            r.clamp(0.0, len as f64 - 1.0) as usize
                                        };
                                        at(pick(sy, h), pick(sx, w))
                                    }
                                    ResizeMethod::Linear => {
                                        let (sy, sx) = (
                                            sy.clamp(0.0, h as f64 - 1.0),
                                            sx.clamp(0.0, w as f64 - 1.0),
                                        );
                                        let (y0, x0) = (sy.floor() as usize, sx.floor() as usize);
                                        let (y1, x1) = ((y0 + 1).min(h - 1), (x0 + 1).min(w - 1));
                                        let (fy, fx) = (sy - y0 as f64, sx - x0 as f64);
                                        at(y0, x0) * (1.0 - fy) * (1.0 - fx)
                                            + at(y0, x1) * (1.0 - fy) * fx
                                            + at(y1, x0) * fy * (1.0 - fx)
                                            + at(y1, x1) * fy * fx
                                    }
                                };
                                want.push(v);
                            }
                        }
                    }
                    assert_close(
                        &got,
                        &want,
                        1e-5,
                        &format!("{method:?} {coordinates:?} {nearest:?}"),
                    );
                }
            }
        }
    }
}
