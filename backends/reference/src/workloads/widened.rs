//! Float16 and BFloat16 (Backend API 1.5) for the layers CpuRef computes in Float32 only
//! (convolutions, products, activations, pooling, normalisations, softmax, …): the layer's
//! Float32 workload, made from the same description with every tensor widened to Float32,
//! runs between a widening of each input (exact) and a rounding of each output to nearest
//! even. So each layer rounds once, as onnxruntime's CPU provider does for a float16 node it
//! has no float16 kernel for (it runs it in float32 between casts).

use backplane_api::{
    BackendResult, DataType, ROption, RSlice, RStr, TensorInfo, TensorView, TensorViewMut,
    Workload, WorkloadDesc,
};

use super::expect_counts;
use super::numeric::{narrow_half, widen_half};

/// `info` with its type replaced by Float32.
pub(crate) fn as_f32(info: &TensorInfo) -> TensorInfo {
    let mut wide = info.clone();
    wide.data_type = DataType::Float32;
    wide
}

/// The Float32 workload of `desc` (whose tensors are all of the 16-bit type `dt`), made by
/// `create`, behind the widening and rounding.
pub fn create(
    desc: &WorkloadDesc<'_>,
    dt: DataType,
    create: impl Fn(&WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>>,
) -> BackendResult<Box<dyn Workload>> {
    let inputs: Vec<TensorInfo> = desc.inputs.iter().map(as_f32).collect();
    let outputs: Vec<TensorInfo> = desc.outputs.iter().map(as_f32).collect();
    // Constant inputs (weights, biases) widened once, for the Float32 workload to keep.
    let constants: Vec<Option<Vec<u8>>> = desc
        .constants
        .iter()
        .map(|c| {
            c.as_ref().into_option().map(|bytes| {
                let bits: Vec<u16> = bytes
                    .as_slice()
                    .chunks_exact(2)
                    .map(|b| u16::from_le_bytes([b[0], b[1]]))
                    .collect();
                widen_half(dt, &bits)
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect()
            })
        })
        .collect();
    let constant_views: Vec<ROption<RSlice<'_, u8>>> = constants
        .iter()
        .map(|c| match c {
            Some(bytes) => ROption::RSome(RSlice::from_slice(bytes)),
            None => ROption::RNone,
        })
        .collect();
    let wide = WorkloadDesc {
        name: RStr::from_str(desc.name.as_str()),
        layer: desc.layer,
        inputs: RSlice::from_slice(&inputs),
        outputs: RSlice::from_slice(&outputs),
        constants: RSlice::from_slice(&constant_views),
    };
    let inner = create(&wide)?;
    Ok(Box::new(Widened {
        inner,
        dt,
        inputs,
        outputs,
    }))
}

/// A Float32 workload run on 16-bit floats.
struct Widened {
    inner: Box<dyn Workload>,
    dt: DataType,
    inputs: Vec<TensorInfo>,
    outputs: Vec<TensorInfo>,
}

impl Workload for Widened {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        expect_counts(
            inputs.len(),
            outputs.len(),
            self.inputs.len(),
            self.outputs.len(),
        )?;
        let wide_in: Vec<Vec<u8>> = inputs
            .iter()
            .map(|v| {
                Ok(widen_half(self.dt, v.as_slice::<u16>()?)
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect())
            })
            .collect::<BackendResult<_>>()?;
        let views: Vec<TensorView<'_>> = self
            .inputs
            .iter()
            .zip(&wide_in)
            .map(|(info, bytes)| TensorView::new(info, bytes))
            .collect();
        let mut wide_out: Vec<Vec<u8>> =
            outputs.iter().map(|o| vec![0; o.data.len() * 2]).collect();
        let mut out_views: Vec<TensorViewMut<'_>> = self
            .outputs
            .iter()
            .zip(&mut wide_out)
            .map(|(info, bytes)| TensorViewMut::new(info, bytes))
            .collect();
        self.inner.execute(&views, &mut out_views)?;
        drop(out_views);
        for (o, bytes) in outputs.iter_mut().zip(&wide_out) {
            let values: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            narrow_half(self.dt, &values, o.as_mut_slice::<u16>()?);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{
        ActivationDescriptor, ActivationFunction, DataLayout, LayerDescriptor, OutputRounding,
        Padding2d, Pooling2dDescriptor, PoolingType, Support,
    };

    use super::*;
    use crate::layer_support::is_layer_supported;
    use crate::workloads::test_support::{Bytes, try_run_typed, typed};

    fn average_2x2() -> LayerDescriptor {
        LayerDescriptor::Pooling2d(Pooling2dDescriptor {
            pool_type: PoolingType::Average,
            padding: Padding2d::default(),
            pool_width: 2,
            pool_height: 2,
            stride_x: 2,
            stride_y: 2,
            rounding: OutputRounding::Floor,
            count_include_pad: false,
            layout: DataLayout::Nchw,
        })
    }

    /// Values worked out by hand: the mean of 1, 2, 3, 4 is 2.5 (binary16 0x4100, bfloat16
    /// 0x4020); the mean of 1, 1, 1 and 1 + 2^-9 is 1 + 2^-11, a tie between two binary16
    /// values that rounds to the even one, 1.0 (0x3c00): rounded once, from f32.
    #[test]
    fn average_pooling_on_16_bit_floats_rounds_once() {
        let run = |dt, bits: &[u16]| {
            try_run_typed(
                &average_2x2(),
                &[(typed(&[1, 1, 2, 2], dt), Bytes::of(bits))],
                &typed(&[1, 1, 1, 1], dt),
            )
            .unwrap()
            .to_vec::<u16>()
        };
        // binary16: 1.0 0x3c00, 2.0 0x4000, 3.0 0x4200, 4.0 0x4400; 1 + 2^-9 is 0x3c02.
        assert_eq!(
            run(DataType::Float16, &[0x3c00, 0x4000, 0x4200, 0x4400]),
            [0x4100]
        );
        assert_eq!(
            run(DataType::Float16, &[0x3c00, 0x3c00, 0x3c00, 0x3c02]),
            [0x3c00]
        );
        // bfloat16: 1.0 0x3f80, 2.0 0x4000, 3.0 0x4040, 4.0 0x4080.
        assert_eq!(
            run(DataType::BFloat16, &[0x3f80, 0x4000, 0x4040, 0x4080]),
            [0x4020]
        );
    }

    #[test]
    fn support_takes_one_16_bit_type_for_every_tensor() {
        let relu = LayerDescriptor::Activation(ActivationDescriptor {
            function: ActivationFunction::ReLU,
            a: 0.0,
            b: 0.0,
        });
        let h = typed(&[4], DataType::Float16);
        let f = typed(&[4], DataType::Float32);
        let b = typed(&[4], DataType::BFloat16);
        assert_eq!(
            is_layer_supported(&relu, std::slice::from_ref(&h), std::slice::from_ref(&h)),
            Support::Supported
        );
        assert_eq!(
            is_layer_supported(&relu, std::slice::from_ref(&b), std::slice::from_ref(&b)),
            Support::Supported
        );
        assert_eq!(
            is_layer_supported(&relu, std::slice::from_ref(&h), std::slice::from_ref(&f)),
            Support::unsupported("CpuRef supports only Float32; input 0 is Float16")
        );
        // Float64 runs in its own precision (activation.rs), not through a 16-bit widening;
        // a Float64 input with a Float32 output is refused.
        let d = typed(&[4], DataType::Float64);
        assert_eq!(
            is_layer_supported(&relu, std::slice::from_ref(&d), std::slice::from_ref(&d)),
            Support::Supported
        );
        assert_eq!(
            is_layer_supported(&relu, std::slice::from_ref(&d), std::slice::from_ref(&f)),
            Support::unsupported("CpuRef supports only Float32; input 0 is Float64")
        );
    }
}
