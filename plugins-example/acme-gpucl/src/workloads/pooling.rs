//! Pooling2d (NCHW; max or average, padding, strides, ceil mode, `count_include_pad`), one
//! work item per output element (`pool2d` in `kernels/convolution.cl`). Windows are clipped
//! to the input; padding cells never enter a maximum; an average divides by the window's real
//! cells, or with `count_include_pad` by its cells inside the padded input (so the cells that
//! ceil mode adds past the padding never count), as ONNX `AveragePool` does.

use std::sync::Arc;

use backplane_api::{
    BackendResult, DataLayout, LayerDescriptor, Pooling2dDescriptor, PoolingType, TensorInfo,
    Workload, WorkloadDesc,
};

use backplane_backend_kit::geometry::Geometry2d;

use super::{Builder, KArg, Src, count, invalid_layer};
use crate::device::Device;

/// `pool2d`'s parameter table for pooling `x` into `y`.
pub(crate) fn table(
    d: &Pooling2dDescriptor,
    x: &TensorInfo,
    y: &TensorInfo,
) -> Result<[usize; 16], String> {
    if d.layout != DataLayout::Nchw {
        return Err("only NCHW pooling".to_owned());
    }
    let g = Geometry2d::pooling(d, x, y)?;
    // Only the last window can lie wholly past the input (in ceil mode, over the padding).
    let empty = |o: usize, s: usize, pad: usize, len: usize| o > 0 && (o - 1) * s >= len + pad;
    let averages_zero = d.pool_type == PoolingType::Average && d.count_include_pad;
    if !averages_zero
        && (empty(g.out_height, g.stride_y, g.pad_top, g.height)
            || empty(g.out_width, g.stride_x, g.pad_left, g.width))
    {
        return Err("a window holds no input cell".to_owned());
    }
    Ok([
        g.batch,
        g.channels,
        g.height,
        g.width,
        g.out_height,
        g.out_width,
        g.kernel_h,
        g.kernel_w,
        g.stride_y,
        g.stride_x,
        g.pad_top,
        g.pad_left,
        g.pad_bottom,
        g.pad_right,
        usize::from(d.pool_type == PoolingType::Max),
        usize::from(d.count_include_pad),
    ])
}

/// The workload of a Pooling2d layer.
pub(crate) fn create(
    device: &Arc<Device>,
    desc: &WorkloadDesc<'_>,
) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Pooling2d(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a pooling layer"));
    };
    let t = table(d, &desc.inputs[0], &desc.outputs[0]).map_err(|e| invalid_layer(desc, e))?;
    let n = count(&desc.outputs[0]).map_err(|e| invalid_layer(desc, e))?;
    let mut b = Builder::new(device, desc);
    let x = b.input(0)?;
    let p = b.upload_i32(&t)?;
    b.kernel(
        "pool2d",
        vec![
            KArg::Buf(x),
            KArg::Buf(Src::Output(0)),
            KArg::Buf(p),
            KArg::Int(n),
        ],
        n as usize,
    )?;
    Ok(b.build())
}

#[cfg(test)]
mod tests {
    use backplane_api::{OutputRounding, Padding2d, shapes};

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, numel, run1, var};

    /// Max and average, padding, strides, floor and ceil mode, count_include_pad, against
    /// ONNX's definition (the divisor: real cells, or cells inside the padded input).
    #[test]
    fn pooling_matches_onnx() {
        let x_shape = [2u32, 3, 9, 11];
        let x = Lcg(30).vec(numel(&x_shape));
        let (h, w) = (9i64, 11i64);
        for pool_type in [PoolingType::Max, PoolingType::Average] {
            for rounding in [OutputRounding::Floor, OutputRounding::Ceiling] {
                for count_include_pad in [false, true] {
                    for (k, s, p) in [
                        (
                            (3, 3),
                            (2, 2),
                            Padding2d {
                                left: 1,
                                right: 1,
                                top: 1,
                                bottom: 1,
                            },
                        ),
                        (
                            (2, 3),
                            (2, 3),
                            Padding2d {
                                left: 0,
                                right: 2,
                                top: 1,
                                bottom: 0,
                            },
                        ),
                        ((9, 11), (1, 1), Padding2d::default()),
                    ] {
                        let d = Pooling2dDescriptor {
                            pool_type,
                            padding: p,
                            pool_height: k.0,
                            pool_width: k.1,
                            stride_y: s.0,
                            stride_x: s.1,
                            rounding,
                            count_include_pad,
                            layout: DataLayout::Nchw,
                        };
                        let layer = LayerDescriptor::Pooling2d(d.clone());
                        let out = shapes::output_shapes(
                            &layer,
                            &[var(&x_shape, vec![0.0; numel(&x_shape)]).info],
                        )
                        .unwrap()
                        .swap_remove(0);
                        let got = run1(&layer, &[var(&x_shape, x.clone())], &out);
                        let (oh, ow) = (out[2] as i64, out[3] as i64);
                        let mut want = Vec::new();
                        for nc in 0..6 {
                            for oy in 0..oh {
                                for ox in 0..ow {
                                    let y0 = oy * i64::from(s.0) - i64::from(p.top);
                                    let x0 = ox * i64::from(s.1) - i64::from(p.left);
                                    let (mut m, mut sum, mut real, mut padded) =
                                        (f64::NEG_INFINITY, 0.0, 0, 0);
                                    for iy in y0..y0 + i64::from(k.0) {
                                        for ix in x0..x0 + i64::from(k.1) {
                                            let in_pad = iy < h + i64::from(p.bottom)
                                                && ix < w + i64::from(p.right);
                                            if in_pad {
                                                padded += 1;
                                            }
                                            if iy >= 0 && ix >= 0 && iy < h && ix < w {
                                                let v = f64::from(
                                                    x[(nc * 9 + iy as usize) * 11 + ix as usize],
                                                );
                                                m = m.max(v);
                                                sum += v;
                                                real += 1;
                                            }
                                        }
                                    }
                                    want.push(match (pool_type, count_include_pad) {
                                        (PoolingType::Max, _) => m,
                                        (_, false) => sum / f64::from(real),
                                        (_, true) => sum / f64::from(padded),
                                    });
                                }
                            }
                        }
                        assert_close(&got, &want, &format!("{d:?}"));
                    }
                }
            }
        }
    }
}
