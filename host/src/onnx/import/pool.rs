//! Pooling. `MaxPool` and `AveragePool` of a 4-D NCHW input are `Pooling2d` layers (a 3-D
//! input through [`Importer::as_2d`]); `GlobalAveragePool` is a `Mean` over the spatial
//! axes, `GlobalMaxPool` a `Pooling2d` whose window is the whole plane.

use backplane_api::{
    DataLayout, LayerDescriptor, MeanDescriptor, OutputRounding, Padding2d, Pooling2dDescriptor,
    PoolingType,
};

use super::{
    Importer, NResult, Node, Value,
    attributes::{attr_flag, attr_ints, pair, positive_u32},
    invalid, unsupported,
    window::window_padding,
};

impl Importer {
    /// `MaxPool` or `AveragePool`: a 3-D input is 1-D pooling, run as the 2-D one.
    pub(super) fn pool_1d_or_2d(
        &mut self,
        n: &Node<'_>,
        pool_type: PoolingType,
    ) -> NResult<Vec<Value>> {
        if self.rank_of_input(n)? == 3 {
            self.as_2d(n, |im, n| im.pool(n, pool_type))
        } else {
            self.pool(n, pool_type)
        }
    }

    pub(super) fn pool(&mut self, n: &Node<'_>, pool_type: PoolingType) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let xs = self.shape(&xv)?;
        let d = pool_descriptor(n, &xs, pool_type)?;
        let x = self.tensor(&xn, &xv)?;
        Ok(vec![
            Value::Tensor(self.layer(n, None, d, &[x])?),
            Value::Unusable("the Indices output of MaxPool is not supported".to_owned()),
        ])
    }

    pub(super) fn global_average_pool(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let rank = self.shape(&xv)?.len();
        if rank < 3 {
            return Err(invalid(format!(
                "the input must have rank >= 3, got {rank}"
            )));
        }
        let x = self.tensor(&xn, &xv)?;
        let d = LayerDescriptor::Mean(MeanDescriptor {
            axes: (2..rank as u32).collect(),
            keep_dims: true,
        });
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)])
    }

    pub(super) fn global_max_pool(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let (xn, xv) = self.req(n, 0)?;
        let xs = self.shape(&xv)?;
        let [_, _, h, w] = xs.as_slice() else {
            // Another rank (1-D or 3-D pooling): the largest element over the spatial axes.
            if xs.len() < 3 {
                return Err(invalid(format!(
                    "the input must have rank >= 3, got {xs:?}"
                )));
            }
            let x = self.tensor(&xn, &xv)?;
            let d = LayerDescriptor::Reduce(backplane_api::ReduceDescriptor {
                operation: backplane_api::ReduceOperation::Max,
                axes: (2..xs.len() as u32).collect(),
                keep_dims: true,
            });
            return Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)]);
        };
        let x = self.tensor(&xn, &xv)?;
        let d = LayerDescriptor::Pooling2d(Pooling2dDescriptor {
            pool_type: PoolingType::Max,
            padding: Padding2d::default(),
            pool_width: *w,
            pool_height: *h,
            stride_x: 1,
            stride_y: 1,
            rounding: OutputRounding::Floor,
            count_include_pad: false,
            layout: DataLayout::Nchw,
        });
        Ok(vec![Value::Tensor(self.layer(n, None, d, &[x])?)])
    }
}

/// The layer of `MaxPool` or `AveragePool` node `n` over a 4-D NCHW input of shape `xs`: a
/// `Pooling2d`, or a `DilatedPooling2d` when it has dilations.
pub(super) fn pool_descriptor(
    n: &Node<'_>,
    xs: &[u32],
    pool_type: PoolingType,
) -> NResult<LayerDescriptor> {
    if xs.len() != 4 {
        return Err(unsupported(format!(
            "only 2-D pooling of a 4-D NCHW input is supported (input {xs:?})"
        )));
    }
    let kernel =
        attr_ints(n, "kernel_shape")?.ok_or_else(|| invalid("kernel_shape is required"))?;
    let [kh, kw] = kernel.as_slice() else {
        return Err(invalid(format!(
            "kernel_shape must have 2 values for a 4-D input, got {kernel:?}"
        )));
    };
    let kernel = [
        positive_u32(*kh, "kernel_shape")?,
        positive_u32(*kw, "kernel_shape")?,
    ];
    let strides = pair(n, "strides")?;
    // Dilated windows are Backend API 1.1's DilatedPooling2d.
    let dilations = pair(n, "dilations")?;
    let ceil = attr_flag(n, "ceil_mode", false)?;
    let count_include_pad = attr_flag(n, "count_include_pad", false)?;
    let (padding, auto) = window_padding(n, [xs[2], xs[3]], kernel, strides, dilations)?;
    // With auto_pad, ONNX fixes the output size regardless of ceil_mode.
    let rounding = if ceil && !auto {
        OutputRounding::Ceiling
    } else {
        OutputRounding::Floor
    };
    let pooling = Pooling2dDescriptor {
        pool_type,
        padding,
        pool_width: kernel[1],
        pool_height: kernel[0],
        stride_x: strides[1],
        stride_y: strides[0],
        rounding,
        count_include_pad: pool_type == PoolingType::Average && count_include_pad,
        layout: DataLayout::Nchw,
    };
    let d = if dilations == [1, 1] {
        LayerDescriptor::Pooling2d(pooling)
    } else {
        LayerDescriptor::DilatedPooling2d(backplane_api::DilatedPooling2dDescriptor {
            pooling,
            dilation_y: dilations[0],
            dilation_x: dilations[1],
        })
    };
    Ok(d)
}
