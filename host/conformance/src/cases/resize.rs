//! The cases of `Resize`.

use backplane_api::{
    CoordinateTransformation, DataType, LayerDescriptor, NearestRounding, ResizeDescriptor,
    ResizeMethod, TensorInfo,
};

use super::FloatCase;

/// `Resize`: nearest and linear, under four coordinate transformations.
pub(super) fn resize() -> Vec<FloatCase> {
    let t = |s: &[u32]| TensorInfo::new(s, DataType::Float32);
    let mut v: Vec<FloatCase> = Vec::new();
    for (name, method, coordinates, nearest) in [
        (
            "nearest_asymmetric_floor",
            ResizeMethod::Nearest,
            CoordinateTransformation::Asymmetric,
            NearestRounding::Floor,
        ),
        (
            "nearest_half_pixel",
            ResizeMethod::Nearest,
            CoordinateTransformation::HalfPixel,
            NearestRounding::RoundPreferCeil,
        ),
        (
            "linear_align_corners",
            ResizeMethod::Linear,
            CoordinateTransformation::AlignCorners,
            NearestRounding::RoundPreferFloor,
        ),
        (
            "linear_pytorch_half_pixel",
            ResizeMethod::Linear,
            CoordinateTransformation::PytorchHalfPixel,
            NearestRounding::RoundPreferFloor,
        ),
    ] {
        v.push((
            format!("layer/Resize/{name}"),
            LayerDescriptor::Resize(ResizeDescriptor {
                method,
                coordinates,
                nearest,
                height: 7,
                width: 3,
                scale_y: 7.0 / 4.0,
                scale_x: 0.5,
            }),
            vec![t(&[1, 2, 4, 6])],
        ));
    }
    v
}
