//! What the convolution kernels share: [`ConvGeometry`] (CpuFast's checks around the kit's
//! `Geometry2d`), the output ranges a tap reaches ([`inside`]) and the even/odd column split
//! of stride-2 rows ([`split_columns`]).
//!
//! Used by `convolution.rs` (im2col + GEMM), `depthwise.rs` (the direct kernels),
//! `winograd.rs`, `chain.rs` and `int8/`; it imports none of them, so imports run one way:
//! `convolution.rs` → `depthwise.rs` → this file.

use std::ops::{Deref, DerefMut, Range};

use backplane_api::{Convolution2dDescriptor, DataLayout, LayerDescriptor, TensorInfo, shapes};
use backplane_backend_kit::geometry::Geometry2d;

/// Everything about one convolution fixed when it is created (NCHW dimensions): the kit's
/// [`Geometry2d`] of a layer CpuFast runs. Its fields read through [`Deref`] (tests change
/// them through [`DerefMut`]); the kernels'
/// own questions about it are methods of `convolution.rs`.
#[derive(Debug, Clone)]
pub(crate) struct ConvGeometry(pub(crate) Geometry2d);

impl Deref for ConvGeometry {
    type Target = Geometry2d;

    fn deref(&self) -> &Geometry2d {
        &self.0
    }
}

impl DerefMut for ConvGeometry {
    fn deref_mut(&mut self) -> &mut Geometry2d {
        &mut self.0
    }
}

impl ConvGeometry {
    /// The geometry of convolution `layer` (Convolution2d or DepthwiseConvolution2d) of `x`
    /// with `weights` into `y`, or why CpuFast cannot run it.
    pub(crate) fn new(
        layer: &LayerDescriptor,
        x: &TensorInfo,
        weights: &TensorInfo,
        y: &TensorInfo,
    ) -> Result<Self, String> {
        let (d, depthwise): (&Convolution2dDescriptor, bool) = match layer {
            LayerDescriptor::Convolution2d(d) => (d, false),
            LayerDescriptor::DepthwiseConvolution2d(d) => (d, true),
            other => return Err(format!("{} is not a convolution", other.kind())),
        };
        if d.layout != DataLayout::Nchw {
            return Err(format!("only NCHW convolutions, got {:?}", d.layout));
        }
        // The output shape, as the layer (without its bias) defines it.
        let plain = Convolution2dDescriptor {
            bias_enabled: false,
            ..d.clone()
        };
        let plain = match depthwise {
            true => LayerDescriptor::DepthwiseConvolution2d(plain),
            false => LayerDescriptor::Convolution2d(plain),
        };
        let expected = shapes::output_shapes(&plain, &[x.clone(), weights.clone()])?;
        if [y.shape.to_vec()] != expected.as_slice() {
            return Err(format!(
                "convolution output {:?} differs from the expected {:?}",
                y.shape.as_slice(),
                expected[0]
            ));
        }
        Geometry2d::convolution(d, depthwise, x, weights, y).map(Self)
    }
}

/// The outputs `o` in `0..out_len` whose input index `o * stride + offset` lies in
/// `0..in_len`.
pub(crate) fn inside(out_len: usize, in_len: usize, stride: usize, offset: i64) -> Range<usize> {
    let s = stride as i64;
    let lo = if offset >= 0 {
        0
    } else {
        (-offset + s - 1) / s
    };
    let room = in_len as i64 - offset;
    let hi = if room <= 0 {
        0
    } else {
        ((room + s - 1) / s).min(out_len as i64)
    };
    lo.min(hi) as usize..hi as usize
}

/// `even[j] = row[2j]` and `odd[j] = row[2j + 1]`, for as many `j` as each holds: `even` has
/// as many elements as `odd` or one more, and `row` at least `even.len() + odd.len()`.
pub(crate) fn split_columns(row: &[f32], even: &mut [f32], odd: &mut [f32]) {
    debug_assert!(
        (odd.len()..=odd.len() + 1).contains(&even.len()) && row.len() >= even.len() + odd.len()
    );
    let pairs = row.chunks_exact(2).zip(even.iter_mut().zip(odd.iter_mut()));
    for (pair, (e, o)) in pairs {
        (*e, *o) = (pair[0], pair[1]);
    }
    if even.len() > odd.len() {
        even[odd.len()] = row[2 * odd.len()];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inside_ranges() {
        // 5 outputs, stride 2, input 7: o*2 - 1 in 0..7 for o in 1..4.
        assert_eq!(inside(5, 7, 2, -1), 1..4);
        assert_eq!(inside(3, 3, 1, 0), 0..3);
        assert_eq!(inside(3, 3, 1, 3), 0..0);
        assert_eq!(inside(2, 3, 1, -5), 2..2);
    }
}
