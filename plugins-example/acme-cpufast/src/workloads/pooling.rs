//! Pooling2d (max and average), NCHW, with CpuRef's semantics: explicit padding, strides,
//! floor or ceil rounding (the output size is `shapes::output_shapes`'), padding cells never
//! in a maximum, and the average's divisor:
//! - without `count_include_pad`: the real input cells of the window;
//! - with it: the window's cells inside the padded input (ceil mode's overhang excluded).
//!
//! A window with no input cell has no maximum and, without `count_include_pad`, no average:
//! such a pooling is refused when the geometry is built. [`PoolGeometry::run`] is also the
//! last stage of a fused convolution chain.

use std::ops::Range;

use backplane_api::{
    BackendResult, DataLayout, LayerDescriptor, Pooling2dDescriptor, PoolingType, TensorInfo,
    TensorView, TensorViewMut, Workload, WorkloadDesc, shapes,
};

use backplane_backend_kit::geometry::Geometry2d;

use super::{MIN_PARALLEL_ELEMENTS, Signature, invalid_layer};
use crate::gemm::{for_each_part, worth};

/// One output's window along one axis.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Window {
    /// The real input cells.
    cells: Range<usize>,
    /// Cells inside the padded input (the divisor with `count_include_pad`).
    padded: usize,
}

/// The windows of `out_len` outputs over `in_len` inputs.
fn windows(
    out_len: usize,
    in_len: usize,
    pad: (usize, usize),
    kernel: usize,
    stride: usize,
) -> Vec<Window> {
    let (in_len, pad_begin, pad_end) = (in_len as i64, pad.0 as i64, pad.1 as i64);
    (0..out_len as i64)
        .map(|o| {
            let begin = o * stride as i64 - pad_begin;
            let end = begin + kernel as i64;
            let start = begin.clamp(0, in_len) as usize;
            Window {
                cells: start..(end.clamp(0, in_len) as usize).max(start),
                padded: (end.min(in_len + pad_end) - begin).max(0) as usize,
            }
        })
        .collect()
}

/// Everything about one pooling fixed when it is created.
#[derive(Debug, Clone)]
pub(crate) struct PoolGeometry {
    pool_type: PoolingType,
    count_include_pad: bool,
    /// Planes (`n * c`).
    planes: usize,
    /// Input plane width.
    width: usize,
    /// Input plane size.
    plane: usize,
    rows: Vec<Window>,
    cols: Vec<Window>,
    /// The outputs of a row whose windows lie wholly inside the input (windows of
    /// `pool_width` columns, `stride_x` apart, the first at `first_col`).
    inner: Range<usize>,
    first_col: usize,
    pool_width: usize,
    stride_x: usize,
}

impl PoolGeometry {
    /// The geometry of pooling `input` into `output` as `d` says, or why CpuFast cannot.
    pub(crate) fn new(
        d: &Pooling2dDescriptor,
        input: &TensorInfo,
        output: &TensorInfo,
    ) -> Result<Self, String> {
        if d.layout != DataLayout::Nchw {
            return Err("only NCHW pooling".to_owned());
        }
        let expected = shapes::output_shapes(
            &LayerDescriptor::Pooling2d(d.clone()),
            std::slice::from_ref(input),
        )?;
        if [output.shape.to_vec()] != expected.as_slice() {
            return Err(format!(
                "pooling output {:?} differs from the expected {:?}",
                output.shape.as_slice(),
                expected[0]
            ));
        }
        let g = Geometry2d::pooling(d, input, output)?;
        let rows = windows(
            g.out_height,
            g.height,
            (g.pad_top, g.pad_bottom),
            g.kernel_h,
            g.stride_y,
        );
        let cols = windows(
            g.out_width,
            g.width,
            (g.pad_left, g.pad_right),
            g.kernel_w,
            g.stride_x,
        );
        let planes = g.batch * g.channels;
        let empty_ok = d.pool_type == PoolingType::Average && d.count_include_pad;
        let empty = rows.iter().chain(&cols).any(|w| w.cells.is_empty());
        if empty && !empty_ok && planes > 0 {
            return Err(format!(
                "a {:?} pooling window holds only padding (padding must be smaller than the window)",
                d.pool_type
            ));
        }
        let (pool_width, stride_x) = (g.kernel_w, g.stride_x);
        let whole = |wx: &Window| wx.cells.len() == pool_width && wx.padded == pool_width;
        let start = cols.iter().position(whole).unwrap_or(0);
        let len = cols[start..].iter().take_while(|wx| whole(wx)).count();
        let first_col = cols.get(start).map_or(0, |wx| wx.cells.start);
        Ok(Self {
            pool_type: d.pool_type,
            count_include_pad: d.count_include_pad,
            planes,
            width: g.width,
            plane: g.in_plane(),
            rows,
            cols,
            inner: start..start + len,
            first_col,
            pool_width,
            stride_x,
        })
    }

    /// Pools `x` (the whole input) into `out` (the whole output) on up to `threads` threads
    /// (each a range of the planes, from [`MIN_PARALLEL_ELEMENTS`] input elements).
    pub(crate) fn run(&self, x: &[f32], out: &mut [f32], threads: usize) {
        let out_plane = self.rows.len() * self.cols.len();
        if out_plane == 0 {
            return;
        }
        let workers = worth(self.planes * self.plane, MIN_PARALLEL_ELEMENTS, threads)
            .min(self.planes)
            .max(1);
        let (x, out) = (
            &x[..self.planes * self.plane],
            &mut out[..self.planes * out_plane],
        );
        if workers == 1 || self.plane == 0 {
            // Also empty input planes (padding only): no chunks of `x` to split by.
            return self.run_planes(x, out);
        }
        let per = self.planes.div_ceil(workers);
        for_each_part(
            workers,
            x.chunks(per * self.plane)
                .zip(out.chunks_mut(per * out_plane)),
            |(x, out)| self.run_planes(x, out),
        );
    }

    /// Pools the planes of `x` into those of `out`, on this thread.
    ///
    /// Row by row of the output: the input rows of the window are first combined column by
    /// column (a maximum or a sum over whole rows, which the compiler vectorises), then each
    /// output takes the maximum or sum of its window's columns of that combination.
    fn run_planes(&self, x: &[f32], out: &mut [f32]) {
        let out_plane = self.rows.len() * self.cols.len();
        let (w, max) = (self.width, self.pool_type == PoolingType::Max);
        let mut acc = vec![0.0f32; w];
        for (p, out_p) in out.chunks_exact_mut(out_plane).enumerate() {
            let x_p = &x[p * self.plane..][..self.plane];
            for (wy, out_row) in self
                .rows
                .iter()
                .zip(out_p.chunks_exact_mut(self.cols.len()))
            {
                let mut cells = wy.cells.clone();
                match cells.next() {
                    // Only padding in this window row (an average that counts it): sums of 0.
                    None => acc.fill(0.0),
                    Some(first) => {
                        acc.copy_from_slice(&x_p[first * w..][..w]);
                        for iy in cells {
                            let row = &x_p[iy * w..][..w];
                            if max {
                                for (a, &v) in acc.iter_mut().zip(row) {
                                    *a = a.max(v);
                                }
                            } else {
                                for (a, &v) in acc.iter_mut().zip(row) {
                                    *a += v;
                                }
                            }
                        }
                    }
                }
                let (before, rest) = out_row.split_at_mut(self.inner.start);
                let (inner, after) = rest.split_at_mut(self.inner.len());
                if max {
                    self.inner_windows(&acc, inner, f32::NEG_INFINITY, f32::max);
                } else {
                    let divisor = (wy.padded * self.pool_width) as f32;
                    let divisor = if self.count_include_pad {
                        divisor
                    } else {
                        (wy.cells.len() * self.pool_width) as f32
                    };
                    self.inner_windows(&acc, inner, 0.0, |x, y| x + y);
                    inner.iter_mut().for_each(|o| *o /= divisor);
                }
                let edges = self.cols[..self.inner.start]
                    .iter()
                    .zip(before)
                    .chain(self.cols[self.inner.end..].iter().zip(after));
                for (wx, o) in edges {
                    let part = &acc[wx.cells.clone()];
                    *o = if max {
                        part.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v))
                    } else {
                        let cells = if self.count_include_pad {
                            wy.padded * wx.padded
                        } else {
                            wy.cells.len() * wx.cells.len()
                        };
                        part.iter().sum::<f32>() / cells as f32
                    };
                }
            }
        }
    }
}

impl PoolGeometry {
    /// `combine` folded over each inner window of one output row of the combined rows `acc`,
    /// from `init` (a maximum or a sum).
    fn inner_windows(
        &self,
        acc: &[f32],
        out: &mut [f32],
        init: f32,
        combine: impl Fn(f32, f32) -> f32,
    ) {
        let acc = &acc[self.first_col..];
        match (self.pool_width, self.stride_x) {
            (2, 2) => {
                for (o, pair) in out.iter_mut().zip(acc.chunks_exact(2)) {
                    *o = combine(pair[0], pair[1]);
                }
            }
            (k, s) => {
                for (i, o) in out.iter_mut().enumerate() {
                    *o = acc[i * s..][..k].iter().fold(init, |m, &v| combine(m, v));
                }
            }
        }
    }
}

/// A stand-alone pooling layer.
#[derive(Debug)]
pub(crate) struct PoolingWorkload {
    geometry: PoolGeometry,
    signature: Signature,
    threads: usize,
}

/// Creates the workload of a `Pooling2d` layer.
pub(crate) fn create(desc: &WorkloadDesc<'_>, threads: usize) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Pooling2d(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a Pooling2d layer"));
    };
    let ([input], [output]) = (desc.inputs.as_slice(), desc.outputs.as_slice()) else {
        return Err(invalid_layer(
            desc,
            "pooling takes one input and one output",
        ));
    };
    Ok(Box::new(PoolingWorkload {
        geometry: PoolGeometry::new(d, input, output).map_err(|e| invalid_layer(desc, e))?,
        signature: Signature::of(desc),
        threads,
    }))
}

impl Workload for PoolingWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        self.geometry
            .run(inputs[0].as_f32()?, outputs[0].as_f32_mut()?, self.threads);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{OutputRounding, Padding2d};

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, f32t, run, u32s};

    /// Relative tolerance against the f64 oracle.
    const REL_TOL: f64 = 1e-6;

    /// One pooling configuration over an NCHW input.
    struct Case {
        dims: [usize; 4],
        kernel: (usize, usize),
        stride: (usize, usize),
        /// Top, bottom, left, right.
        pads: (usize, usize, usize, usize),
        ceil: bool,
        include_pad: bool,
    }

    impl Case {
        fn descriptor(&self, pool_type: PoolingType) -> Pooling2dDescriptor {
            let u = |v: usize| v as u32;
            Pooling2dDescriptor {
                pool_type,
                padding: Padding2d {
                    top: u(self.pads.0),
                    bottom: u(self.pads.1),
                    left: u(self.pads.2),
                    right: u(self.pads.3),
                },
                pool_height: u(self.kernel.0),
                pool_width: u(self.kernel.1),
                stride_y: u(self.stride.0),
                stride_x: u(self.stride.1),
                rounding: if self.ceil {
                    OutputRounding::Ceiling
                } else {
                    OutputRounding::Floor
                },
                count_include_pad: self.include_pad,
                layout: DataLayout::Nchw,
            }
        }
    }

    /// ONNX MaxPool / AveragePool from the definition, given the output size: a window
    /// starts at `o * stride - pad`; padding cells are skipped (max) or counted when
    /// `count_include_pad` and inside the padded input (average).
    fn oracle(c: &Case, pool_type: PoolingType, x: &[f32], (oh, ow): (usize, usize)) -> Vec<f64> {
        let [n, ch, h, w] = c.dims;
        let (pt, pb, pl, pr) = c.pads;
        let mut y = Vec::new();
        for plane in 0..n * ch {
            for oy in 0..oh {
                for ox in 0..ow {
                    let (mut max, mut sum, mut real, mut padded) =
                        (f64::NEG_INFINITY, 0.0, 0usize, 0usize);
                    for ky in 0..c.kernel.0 {
                        for kx in 0..c.kernel.1 {
                            let py = (oy * c.stride.0 + ky) as i64 - pt as i64;
                            let px = (ox * c.stride.1 + kx) as i64 - pl as i64;
                            if py < (h + pb) as i64 && px < (w + pr) as i64 {
                                padded += 1;
                            }
                            if (0..h as i64).contains(&py) && (0..w as i64).contains(&px) {
                                let v = f64::from(x[(plane * h + py as usize) * w + px as usize]);
                                max = max.max(v);
                                sum += v;
                                real += 1;
                            }
                        }
                    }
                    y.push(match pool_type {
                        PoolingType::Max => max,
                        PoolingType::Average => {
                            sum / if c.include_pad { padded } else { real } as f64
                        }
                    });
                }
            }
        }
        y
    }

    fn check(c: &Case, seed: u64) {
        let x = Lcg(seed).vec(c.dims.iter().product());
        let shape: Vec<u32> = c.dims.iter().map(|&d| d as u32).collect();
        for pool_type in [PoolingType::Max, PoolingType::Average] {
            let layer = LayerDescriptor::Pooling2d(c.descriptor(pool_type));
            let out = shapes::output_shapes(&layer, &[f32t(&shape)])
                .unwrap()
                .swap_remove(0);
            let got = run(&layer, &[(&shape, &x)], &out);
            let want = oracle(c, pool_type, &x, (out[2] as usize, out[3] as usize));
            assert_close(&got, &want, REL_TOL, &format!("{pool_type:?} {:?}", c.dims));
        }
    }

    /// Floor and ceil rounding, asymmetric padding, with and without `count_include_pad`,
    /// rectangular windows and strides.
    #[test]
    fn variants_match_the_definition() {
        let mut seed = 0;
        for ceil in [false, true] {
            for include_pad in [false, true] {
                for (dims, kernel, stride, pads) in [
                    ([1, 2, 6, 6], (3, 3), (2, 2), (1, 1, 1, 1)),
                    ([2, 3, 7, 5], (2, 3), (2, 1), (0, 1, 2, 0)),
                    ([1, 1, 5, 8], (3, 2), (3, 2), (0, 0, 1, 1)),
                    ([1, 2, 4, 4], (2, 2), (2, 2), (0, 0, 0, 0)),
                ] {
                    seed += 1;
                    check(
                        &Case {
                            dims,
                            kernel,
                            stride,
                            pads,
                            ceil,
                            include_pad,
                        },
                        seed,
                    );
                }
            }
        }
    }

    /// Empty tensors: no planes (batch 0) and empty planes (height 0, padding only, an
    /// average that counts the padding: zeros), on one and two threads.
    #[test]
    fn empty_tensors() {
        for (dims, pads, want) in [
            ([0, 3, 4, 4], (0, 0, 0, 0), &[0usize, 3, 2, 2]),
            ([1, 1, 0, 2], (1, 1, 1, 1), &[1, 1, 1, 2]),
        ] {
            let c = Case {
                dims,
                kernel: (2, 2),
                stride: (2, 2),
                pads,
                ceil: false,
                include_pad: true,
            };
            let shape = u32s(&dims);
            let d = c.descriptor(PoolingType::Average);
            let out_shape =
                shapes::output_shapes(&LayerDescriptor::Pooling2d(d.clone()), &[f32t(&shape)])
                    .unwrap()
                    .swap_remove(0);
            assert_eq!(out_shape, u32s(want));
            let g = PoolGeometry::new(&d, &f32t(&shape), &f32t(&out_shape)).unwrap();
            for threads in [1, 2] {
                let mut out = vec![f32::NAN; want.iter().product()];
                g.run(&[], &mut out, threads);
                assert!(out.iter().all(|&v| v == 0.0), "{dims:?}: {out:?}");
            }
        }
    }

    /// A window of padding only (trailing padding as wide as the window) is refused for max
    /// pooling; with `count_include_pad` an average is defined (0).
    #[test]
    fn windows_of_padding_only() {
        let case = Case {
            dims: [1, 1, 2, 2],
            kernel: (2, 2),
            stride: (2, 2),
            pads: (0, 2, 0, 0),
            ceil: false,
            include_pad: false,
        };
        let input = f32t(&[1, 1, 2, 2]);
        let output = f32t(&[1, 1, 2, 1]);
        // `shapes` itself refuses padding as wide as the window.
        assert!(PoolGeometry::new(&case.descriptor(PoolingType::Max), &input, &output).is_err());
        let w = windows(2, 2, (0, 2), 2, 2);
        assert_eq!(
            w[1],
            Window {
                cells: 2..2,
                padded: 2
            }
        );
    }
}
