//! Pooling2d and DilatedPooling2d (ONNX `MaxPool` and `AveragePool`, with `dilations` for
//! the second): explicit padding, strides, window size, dilation and floor or ceil output
//! rounding, with NCHW or NHWC activations, in Float32 or Float64.
//!
//! The output size is [`shapes::window_output`](backplane_api::shapes::window_output)'s. In ceil
//! mode the last windows may run past the padded input; they are clipped. Padding cells never
//! take part in a maximum. The divisor of an average is, as ONNX `AveragePool` defines it:
//! - `count_include_pad = false`: the number of real input cells in the window;
//! - `count_include_pad = true`: the number of window cells inside the padded input (the input
//!   plus its explicit padding), so padding cells count but the cells past the padded input
//!   that ceil mode adds do not.
//!
//! A window holding no input cell (possible only when the trailing padding is at least the
//! window size) has no maximum and, without `count_include_pad`, no average: such layers are
//! refused when the workload is created. With `count_include_pad` its average is 0.

use backplane_api::{
    BackendResult, DataLayout, LayerDescriptor, PoolingType, TensorView, TensorViewMut, Workload,
    WorkloadDesc,
};

use super::{ExpectedShapes, expect_counts, float_workload, invalid_layer, nchw_dims};

/// One window along one spatial axis: its input cells are `start`, `start + step`, ... below
/// `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    /// First input index of the window inside the input.
    start: usize,
    /// Bound of the window's input indices inside the input (`end <= start` when the window
    /// holds no input cell).
    end: usize,
    /// Distance between the window's cells (the dilation).
    step: usize,
    /// Cells of the window inside the padded input (input and explicit padding).
    padded: usize,
}

impl Window {
    /// Number of real input cells.
    fn len(&self) -> usize {
        self.end.saturating_sub(self.start).div_ceil(self.step)
    }

    /// The input indices of the window's cells.
    fn cells(&self) -> std::iter::StepBy<std::ops::Range<usize>> {
        (self.start..self.end.max(self.start)).step_by(self.step)
    }
}

/// The windows of `out_len` outputs over an input of `in_len` with the given padding, each of
/// `kernel` cells `dilation` apart.
fn windows(
    out_len: usize,
    in_len: usize,
    (pad_begin, pad_end): (usize, usize),
    kernel: usize,
    stride: usize,
    dilation: usize,
) -> Vec<Window> {
    let d = dilation as i64;
    (0..out_len)
        .map(|o| {
            // Cells begin + j * d for j in 0..kernel, with begin >= -pad_begin.
            let begin = (o * stride) as i64 - pad_begin as i64;
            // The first cell at or after index 0 and one past the last cell.
            let first_j = if begin < 0 { (-begin + d - 1) / d } else { 0 };
            let last = begin + (kernel as i64 - 1) * d;
            let padded_end = (in_len + pad_end) as i64;
            // Cells below the padded input's end: j < (padded_end - begin) / d, rounded up.
            let padded = ((padded_end - begin + d - 1) / d).clamp(0, kernel as i64);
            Window {
                start: (begin + first_j * d).max(0) as usize,
                end: (last + 1).clamp(0, in_len as i64) as usize,
                step: dilation,
                padded: padded as usize,
            }
        })
        .collect()
}

/// Max or average pooling over 2-D windows.
#[derive(Debug)]
pub struct PoolingWorkload {
    pool_type: PoolingType,
    count_include_pad: bool,
    layout: DataLayout,
    /// `[n, c, h, w]` of the input, whatever the layout.
    dims: [usize; 4],
    rows: Vec<Window>,
    cols: Vec<Window>,
    shapes: ExpectedShapes,
}

/// Creates the workload of a `Pooling2d` layer.
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let (d, (dil_y, dil_x)) = match desc.layer {
        LayerDescriptor::Pooling2d(d) => (d, (1, 1)),
        LayerDescriptor::DilatedPooling2d(d) => (&d.pooling, (d.dilation_y, d.dilation_x)),
        other => {
            return Err(invalid_layer(
                desc,
                format_args!("{} is not Pooling2d", other.kind()),
            ));
        }
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    let (x, y) = (
        desc.inputs[0].shape.as_slice(),
        desc.outputs[0].shape.as_slice(),
    );
    let (&[x0, x1, x2, x3], &[y0, y1, y2, y3]) = (x, y) else {
        return Err(invalid_layer(
            desc,
            format_args!("input and output must have rank 4, got {x:?} and {y:?}"),
        ));
    };
    let u = |v: u32| v as usize;
    let dims = nchw_dims(d.layout, [u(x0), u(x1), u(x2), u(x3)]);
    let [yn, oc, oh, ow] = nchw_dims(d.layout, [u(y0), u(y1), u(y2), u(y3)]);
    if yn != dims[0]
        || oc != dims[1]
        || d.pool_height == 0
        || d.pool_width == 0
        || d.stride_y == 0
        || d.stride_x == 0
        || dil_y == 0
        || dil_x == 0
    {
        return Err(invalid_layer(
            desc,
            format_args!("inconsistent pooling of {x:?} into {y:?}"),
        ));
    }
    let p = d.padding;
    let rows = windows(
        oh,
        dims[2],
        (u(p.top), u(p.bottom)),
        u(d.pool_height),
        u(d.stride_y),
        u(dil_y),
    );
    let cols = windows(
        ow,
        dims[3],
        (u(p.left), u(p.right)),
        u(d.pool_width),
        u(d.stride_x),
        u(dil_x),
    );
    let defined_without_input = d.pool_type == PoolingType::Average && d.count_include_pad;
    let empty = |ws: &[Window]| ws.iter().position(|w| w.len() == 0);
    let empty = empty(&rows)
        .map(|o| ("row", o))
        .or(empty(&cols).map(|o| ("column", o)));
    if let Some((axis, o)) = empty.filter(|_| !defined_without_input && dims[0] * dims[1] > 0) {
        return Err(invalid_layer(
            desc,
            format_args!(
                "output {axis} {o} pools only padding ({:?} of {x:?}): padding must be smaller than the window",
                d.pool_type
            ),
        ));
    }
    Ok(Box::new(PoolingWorkload {
        pool_type: d.pool_type,
        count_include_pad: d.count_include_pad,
        layout: d.layout,
        dims,
        rows,
        cols,
        shapes: ExpectedShapes::of(desc),
    }))
}

/// The element types pooling computes in: `f32` and `f64`.
trait Real:
    backplane_api::Element + num_traits::Float + std::ops::AddAssign + std::ops::DivAssign
{
}

impl<T> Real for T where
    T: backplane_api::Element + num_traits::Float + std::ops::AddAssign + std::ops::DivAssign
{
}

impl PoolingWorkload {
    fn divisor<T: Real>(&self, wy: &Window, wx: &Window) -> T {
        let cells = if self.count_include_pad {
            wy.padded * wx.padded
        } else {
            wy.len() * wx.len()
        };
        T::from(cells).unwrap_or_else(T::nan)
    }

    /// NCHW: each output reads its window row by row, contiguous along a row.
    fn run_nchw<T: Real>(&self, x: &[T], out: &mut [T]) {
        let [n, c, h, w] = self.dims;
        let (in_plane, out_plane) = (h * w, self.rows.len() * self.cols.len());
        for p in 0..n * c {
            let x_p = &x[p * in_plane..][..in_plane];
            let mut out_p = out[p * out_plane..][..out_plane].iter_mut();
            for wy in &self.rows {
                for wx in &self.cols {
                    let cells = wy
                        .cells()
                        .flat_map(|iy| wx.cells().map(move |ix| &x_p[iy * w + ix]));
                    let value = match self.pool_type {
                        PoolingType::Max => cells.fold(T::neg_infinity(), |m, &v| m.max(v)),
                        PoolingType::Average => {
                            cells.fold(T::zero(), |s, &v| s + v) / self.divisor::<T>(wy, wx)
                        }
                    };
                    if let Some(o) = out_p.next() {
                        *o = value;
                    }
                }
            }
        }
    }

    /// NHWC: each output pixel combines its window's input pixels, contiguous over channels.
    fn run_nhwc<T: Real>(&self, x: &[T], out: &mut [T]) {
        let [n, c, h, w] = self.dims;
        let (in_image, out_pixels) = (h * w * c, self.rows.len() * self.cols.len());
        for b in 0..n {
            let x_n = &x[b * in_image..][..in_image];
            let mut pixel = b * out_pixels;
            for wy in &self.rows {
                for wx in &self.cols {
                    let acc = &mut out[pixel * c..][..c];
                    pixel += 1;
                    let init = match self.pool_type {
                        PoolingType::Max => T::neg_infinity(),
                        PoolingType::Average => T::zero(),
                    };
                    acc.fill(init);
                    for iy in wy.cells() {
                        for ix in wx.cells() {
                            let px = &x_n[(iy * w + ix) * c..][..c];
                            match self.pool_type {
                                PoolingType::Max => {
                                    acc.iter_mut().zip(px).for_each(|(a, &v)| *a = a.max(v))
                                }
                                PoolingType::Average => {
                                    acc.iter_mut().zip(px).for_each(|(a, &v)| *a += v)
                                }
                            }
                        }
                    }
                    if self.pool_type == PoolingType::Average {
                        let divisor = self.divisor::<T>(wy, wx);
                        acc.iter_mut().for_each(|a| *a /= divisor);
                    }
                }
            }
        }
    }
}

impl PoolingWorkload {
    /// The pooling in `T` (`f32` or `f64`, the tensors' type).
    fn run<T: Real>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let x = inputs[0].as_slice::<T>()?;
        let out = outputs[0].as_mut_slice::<T>()?;
        match self.layout {
            DataLayout::Nchw => self.run_nchw(x, out),
            DataLayout::Nhwc => self.run_nhwc(x, out),
        }
        Ok(())
    }
}

float_workload!(PoolingWorkload);

#[cfg(test)]
#[path = "pooling_tests.rs"]
mod tests;
