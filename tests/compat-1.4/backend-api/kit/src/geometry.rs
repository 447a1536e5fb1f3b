//! The geometry of a sliding window over NCHW planes, one struct for convolutions, transposed
//! convolutions and pooling alike ([`Geometry2d`]): batch, channels, input and output sizes, kernel, strides,
//! dilations, padding and groups, as `usize`s ready for indexing.
//!
//! The constructors read the sizes off the tensors a layer is given and check only what the
//! struct needs (rank 4, groups that divide the channels); whether the output size is the one
//! the layer defines is [`backplane_api::shapes`]' question (`window_output` computes one
//! axis), which a backend asks first.

use backplane_api::{
    Convolution2dDescriptor, Padding2d, Pooling2dDescriptor, TensorInfo,
    TransposeConvolution2dDescriptor,
};

/// The dimensions of a rank-4 tensor.
///
/// # Errors
/// `{what} must have rank 4, got {shape:?}`.
pub fn dims4(what: &str, t: &TensorInfo) -> Result<[usize; 4], String> {
    match t.shape.as_slice() {
        &[a, b, c, d] => Ok([a as usize, b as usize, c as usize, d as usize]),
        s => Err(format!("{what} must have rank 4, got {s:?}")),
    }
}

/// A window sliding over NCHW planes: a convolution (possibly grouped or depthwise) or a
/// pooling. Output pixel `(oy, ox)`'s window starts at input row `oy * stride_y - pad_top`
/// and column `ox * stride_x - pad_left`; its taps are `dilation_y` rows and `dilation_x`
/// columns apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry2d {
    /// Images.
    pub batch: usize,
    /// Input channels.
    pub channels: usize,
    /// Input plane height.
    pub height: usize,
    /// Input plane width.
    pub width: usize,
    /// Output channels (a pooling's are its input's).
    pub out_channels: usize,
    /// Output plane height.
    pub out_height: usize,
    /// Output plane width.
    pub out_width: usize,
    /// Window height (taps).
    pub kernel_h: usize,
    /// Window width (taps).
    pub kernel_w: usize,
    /// Rows between two windows.
    pub stride_y: usize,
    /// Columns between two windows.
    pub stride_x: usize,
    /// Rows between two taps of a window.
    pub dilation_y: usize,
    /// Columns between two taps of a window.
    pub dilation_x: usize,
    /// Padding rows above the input.
    pub pad_top: usize,
    /// Padding columns left of the input.
    pub pad_left: usize,
    /// Padding rows below the input.
    pub pad_bottom: usize,
    /// Padding columns right of the input.
    pub pad_right: usize,
    /// Channel groups: a convolution's (its input channels for a depthwise one), 1 for a
    /// pooling (which keeps channels apart anyway).
    pub groups: usize,
}

impl Geometry2d {
    /// The geometry of a convolution of `x` by weights `w` (`[out, in / groups, kh, kw]`)
    /// into `y`, as `d` says; `depthwise`: one group per input channel.
    ///
    /// # Errors
    /// A tensor not of rank 4 (`input`, `weights`, `output`), or `{c} input and {m} output
    /// channels do not split into {groups} groups`.
    pub fn convolution(
        d: &Convolution2dDescriptor,
        depthwise: bool,
        x: &TensorInfo,
        w: &TensorInfo,
        y: &TensorInfo,
    ) -> Result<Self, String> {
        let [batch, channels, height, width] = dims4("input", x)?;
        let [out_channels, _, kernel_h, kernel_w] = dims4("weights", w)?;
        let [_, _, out_height, out_width] = dims4("output", y)?;
        let groups = if depthwise {
            channels
        } else {
            d.groups as usize
        };
        if groups == 0 || channels % groups != 0 || out_channels % groups != 0 {
            return Err(format!(
                "{channels} input and {out_channels} output channels do not split into {groups} groups"
            ));
        }
        Ok(Self::new(
            [batch, channels, height, width],
            [out_channels, out_height, out_width],
            [kernel_h, kernel_w],
            [d.stride_y, d.stride_x, d.dilation_y, d.dilation_x],
            d.padding,
            groups,
        ))
    }

    /// The geometry of a transposed convolution of `x` by weights `w`
    /// (`[in, out / groups, kh, kw]`) into `y`, as `d` says. The window is the convolution's
    /// seen from the output: input pixel `(iy, ix)` reaches output row
    /// `iy * stride_y - pad_top + ky * dilation_y` and column likewise; the padding crops the
    /// output.
    ///
    /// # Errors
    /// A tensor not of rank 4 (`input`, `weights`, `output`), or `{c} input and {m} output
    /// channels do not split into {groups} groups`.
    pub fn transpose_convolution(
        d: &TransposeConvolution2dDescriptor,
        x: &TensorInfo,
        w: &TensorInfo,
        y: &TensorInfo,
    ) -> Result<Self, String> {
        let [batch, channels, height, width] = dims4("input", x)?;
        let [_, group_out, kernel_h, kernel_w] = dims4("weights", w)?;
        let [_, out_channels, out_height, out_width] = dims4("output", y)?;
        let groups = d.groups as usize;
        if groups == 0
            || channels % groups != 0
            || group_out.checked_mul(groups) != Some(out_channels)
        {
            return Err(format!(
                "{channels} input and {out_channels} output channels do not split into {groups} groups"
            ));
        }
        Ok(Self::new(
            [batch, channels, height, width],
            [out_channels, out_height, out_width],
            [kernel_h, kernel_w],
            [d.stride_y, d.stride_x, d.dilation_y, d.dilation_x],
            d.padding,
            groups,
        ))
    }

    /// The geometry of pooling `x` into `y` as `d` says (no dilation, one group).
    ///
    /// # Errors
    /// `pooling input` or `pooling output` not of rank 4.
    pub fn pooling(
        d: &Pooling2dDescriptor,
        x: &TensorInfo,
        y: &TensorInfo,
    ) -> Result<Self, String> {
        let [batch, channels, height, width] = dims4("pooling input", x)?;
        let [_, _, out_height, out_width] = dims4("pooling output", y)?;
        Ok(Self::new(
            [batch, channels, height, width],
            [channels, out_height, out_width],
            [d.pool_height as usize, d.pool_width as usize],
            [d.stride_y, d.stride_x, 1, 1],
            d.padding,
            1,
        ))
    }

    /// The geometry of input `[n, c, h, w]`, output `[m, oh, ow]` (channels and plane),
    /// window `[kh, kw]`, `[stride_y, stride_x, dilation_y, dilation_x]`, `padding` and
    /// `groups`.
    fn new(
        [batch, channels, height, width]: [usize; 4],
        [out_channels, out_height, out_width]: [usize; 3],
        [kernel_h, kernel_w]: [usize; 2],
        steps: [u32; 4],
        padding: Padding2d,
        groups: usize,
    ) -> Self {
        let [stride_y, stride_x, dilation_y, dilation_x] = steps.map(|v| v as usize);
        let u = |v: u32| v as usize;
        Self {
            batch,
            channels,
            height,
            width,
            out_channels,
            out_height,
            out_width,
            kernel_h,
            kernel_w,
            stride_y,
            stride_x,
            dilation_y,
            dilation_x,
            pad_top: u(padding.top),
            pad_left: u(padding.left),
            pad_bottom: u(padding.bottom),
            pad_right: u(padding.right),
            groups,
        }
    }

    /// Input channels per group.
    pub fn group_in(&self) -> usize {
        self.channels / self.groups.max(1)
    }

    /// Output channels per group.
    pub fn group_out(&self) -> usize {
        self.out_channels / self.groups.max(1)
    }

    /// Weights per output channel of a convolution: `group_in · kernel_h · kernel_w`.
    pub fn taps(&self) -> usize {
        self.group_in() * self.kernel_h * self.kernel_w
    }

    /// Pixels of an input plane.
    pub fn in_plane(&self) -> usize {
        self.height * self.width
    }

    /// Pixels of an output plane.
    pub fn out_plane(&self) -> usize {
        self.out_height * self.out_width
    }

    /// Elements of the output.
    pub fn out_len(&self) -> usize {
        self.batch * self.out_channels * self.out_plane()
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{DataType, OutputRounding, Padding2d, PoolingType, shapes};

    use super::*;

    fn f32t(shape: &[u32]) -> TensorInfo {
        TensorInfo::new(shape, DataType::Float32)
    }

    /// A grouped, strided, dilated, unevenly padded convolution; the numbers by hand:
    /// height 10 + 1 + 2 padded = 13, kernel 3 dilated by 2 spans 5, stride 2:
    /// (13 - 5) / 2 + 1 = 5 rows; width 7 + 0 + 1 = 8, kernel 2 spans 2, stride 3:
    /// (8 - 2) / 3 + 1 = 3 columns.
    #[test]
    fn convolution_numbers() {
        let d = Convolution2dDescriptor {
            padding: Padding2d {
                left: 0,
                right: 1,
                top: 1,
                bottom: 2,
            },
            stride_x: 3,
            stride_y: 2,
            dilation_x: 1,
            dilation_y: 2,
            groups: 2,
            ..Default::default()
        };
        let (x, w, y) = (
            f32t(&[2, 4, 10, 7]),
            f32t(&[6, 2, 3, 2]),
            f32t(&[2, 6, 5, 3]),
        );
        let g = Geometry2d::convolution(&d, false, &x, &w, &y).unwrap();
        assert_eq!(
            g,
            Geometry2d {
                batch: 2,
                channels: 4,
                height: 10,
                width: 7,
                out_channels: 6,
                out_height: 5,
                out_width: 3,
                kernel_h: 3,
                kernel_w: 2,
                stride_y: 2,
                stride_x: 3,
                dilation_y: 2,
                dilation_x: 1,
                pad_top: 1,
                pad_left: 0,
                pad_bottom: 2,
                pad_right: 1,
                groups: 2,
            }
        );
        // 2 input channels per group, 3 output channels per group, 2·3·2 = 12 taps, 15
        // output pixels per plane, 2·6·15 = 180 outputs, 70 input pixels per plane.
        assert_eq!((g.group_in(), g.group_out(), g.taps()), (2, 3, 12));
        assert_eq!((g.out_plane(), g.out_len(), g.in_plane()), (15, 180, 70));
        // The output size is the one the API's shape rule gives.
        let layer = backplane_api::LayerDescriptor::Convolution2d(d.clone());
        assert_eq!(
            shapes::output_shapes(&layer, &[x.clone(), w.clone()]),
            Ok(vec![vec![2, 6, 5, 3]])
        );
        // Depthwise: one group per input channel, weights [C · multiplier, 1, kh, kw].
        let dw = Geometry2d::convolution(&d, true, &x, &f32t(&[8, 1, 3, 2]), &f32t(&[2, 8, 5, 3]))
            .unwrap();
        assert_eq!(
            (dw.groups, dw.group_in(), dw.group_out(), dw.taps()),
            (4, 1, 2, 6)
        );
    }

    #[test]
    fn convolution_refusals() {
        let d = Convolution2dDescriptor {
            groups: 3,
            ..Default::default()
        };
        let (x, w, y) = (
            f32t(&[1, 4, 5, 5]),
            f32t(&[6, 2, 3, 3]),
            f32t(&[1, 6, 3, 3]),
        );
        assert_eq!(
            Geometry2d::convolution(&d, false, &x, &w, &y),
            Err("4 input and 6 output channels do not split into 3 groups".to_owned())
        );
        let none = Convolution2dDescriptor {
            groups: 0,
            ..Default::default()
        };
        assert_eq!(
            Geometry2d::convolution(&none, false, &x, &w, &y),
            Err("4 input and 6 output channels do not split into 0 groups".to_owned())
        );
        assert_eq!(
            Geometry2d::convolution(&d, false, &f32t(&[4, 5, 5]), &w, &y),
            Err("input must have rank 4, got [4, 5, 5]".to_owned())
        );
        assert_eq!(
            Geometry2d::convolution(&d, false, &x, &f32t(&[6, 2, 3]), &y),
            Err("weights must have rank 4, got [6, 2, 3]".to_owned())
        );
        assert_eq!(
            Geometry2d::convolution(&d, false, &x, &w, &f32t(&[])),
            Err("output must have rank 4, got []".to_owned())
        );
    }

    /// A grouped transposed convolution; by hand, `(in - 1) · stride - padding + dilation ·
    /// (k - 1) + 1`: rows (3 - 1) · 2 - 1 - 0 + 1 · 2 + 1 = 6, columns (5 - 1) · 1 - 0 - 1 +
    /// 2 · 1 + 1 = 6; 2 groups of 3 output channels.
    #[test]
    fn transpose_convolution_numbers() {
        let d = TransposeConvolution2dDescriptor {
            padding: Padding2d {
                left: 0,
                right: 1,
                top: 1,
                bottom: 0,
            },
            stride_y: 2,
            dilation_x: 2,
            groups: 2,
            ..Default::default()
        };
        let (x, w, y) = (
            f32t(&[1, 4, 3, 5]),
            f32t(&[4, 3, 3, 2]),
            f32t(&[1, 6, 6, 6]),
        );
        assert_eq!(
            shapes::transpose_convolution(&d, &x.shape, &w.shape),
            Ok(vec![1, 6, 6, 6])
        );
        let g = Geometry2d::transpose_convolution(&d, &x, &w, &y).unwrap();
        assert_eq!(
            g,
            Geometry2d {
                batch: 1,
                channels: 4,
                height: 3,
                width: 5,
                out_channels: 6,
                out_height: 6,
                out_width: 6,
                kernel_h: 3,
                kernel_w: 2,
                stride_y: 2,
                stride_x: 1,
                dilation_y: 1,
                dilation_x: 2,
                pad_top: 1,
                pad_left: 0,
                pad_bottom: 0,
                pad_right: 1,
                groups: 2,
            }
        );
        assert_eq!((g.group_in(), g.group_out()), (2, 3));
        assert_eq!(
            Geometry2d::transpose_convolution(&d, &x, &w, &f32t(&[1, 5, 6, 6])),
            Err("4 input and 5 output channels do not split into 2 groups".to_owned())
        );
    }

    /// A 3x2 average pooling, stride 2 down and 1 across, padded 1 above and 1 left, ceil
    /// mode; by hand: height 6 + 1 = 7, (7 - 3 + 1) / 2 + 1 = 3 rows (the third window
    /// starts at row 3, inside the input); width 5 + 1 = 6, (6 - 2) / 1 + 1 = 5 columns.
    #[test]
    fn pooling_numbers() {
        let d = Pooling2dDescriptor {
            pool_type: PoolingType::Average,
            padding: Padding2d {
                left: 1,
                right: 0,
                top: 1,
                bottom: 0,
            },
            pool_width: 2,
            pool_height: 3,
            stride_x: 1,
            stride_y: 2,
            rounding: OutputRounding::Ceiling,
            count_include_pad: false,
            layout: Default::default(),
        };
        let (x, y) = (f32t(&[1, 3, 6, 5]), f32t(&[1, 3, 3, 5]));
        let g = Geometry2d::pooling(&d, &x, &y).unwrap();
        assert_eq!(
            (g.batch, g.channels, g.height, g.width, g.out_channels),
            (1, 3, 6, 5, 3)
        );
        assert_eq!(
            (g.out_height, g.out_width, g.kernel_h, g.kernel_w),
            (3, 5, 3, 2)
        );
        assert_eq!(
            (g.stride_y, g.stride_x, g.dilation_y, g.dilation_x),
            (2, 1, 1, 1)
        );
        assert_eq!(
            (g.pad_top, g.pad_left, g.pad_bottom, g.pad_right, g.groups),
            (1, 1, 0, 0, 1)
        );
        assert_eq!((g.out_plane(), g.out_len()), (15, 45));
        let layer = backplane_api::LayerDescriptor::Pooling2d(d.clone());
        assert_eq!(
            shapes::output_shapes(&layer, std::slice::from_ref(&x)),
            Ok(vec![vec![1, 3, 3, 5]])
        );
        assert_eq!(
            Geometry2d::pooling(&d, &x, &f32t(&[3, 3, 5])),
            Err("pooling output must have rank 4, got [3, 3, 5]".to_owned())
        );
        // One axis by the API's rule: 6 rows + 1 padded, a 3-row window, stride 2.
        assert_eq!(
            shapes::window_output(6, 1, 0, 3, 2, 1, OutputRounding::Ceiling),
            Ok(3)
        );
        assert_eq!(
            shapes::window_output(6, 1, 0, 3, 2, 1, OutputRounding::Floor),
            Ok(3)
        );
        assert_eq!(
            shapes::window_output(7, 1, 0, 3, 2, 1, OutputRounding::Ceiling),
            Ok(4)
        );
        assert_eq!(
            shapes::window_output(7, 1, 0, 3, 2, 1, OutputRounding::Floor),
            Ok(3)
        );
    }
}
