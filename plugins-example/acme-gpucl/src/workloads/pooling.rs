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
    let (&[n, c, h, w], &[_, _, oh, ow]) = (x.shape.as_slice(), y.shape.as_slice()) else {
        return Err("pooling takes rank-4 tensors".to_owned());
    };
    let p = d.padding;
    // Only the last window can lie wholly past the input (in ceil mode, over the padding).
    let empty = |o: u32, s: u32, pad: u32, len: u32| o > 0 && (o - 1) * s >= len + pad;
    let averages_zero = d.pool_type == PoolingType::Average && d.count_include_pad;
    if !averages_zero && (empty(oh, d.stride_y, p.top, h) || empty(ow, d.stride_x, p.left, w)) {
        return Err("a window holds no input cell".to_owned());
    }
    Ok([
        n as usize,
        c as usize,
        h as usize,
        w as usize,
        oh as usize,
        ow as usize,
        d.pool_height as usize,
        d.pool_width as usize,
        d.stride_y as usize,
        d.stride_x as usize,
        p.top as usize,
        p.left as usize,
        p.bottom as usize,
        p.right as usize,
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
