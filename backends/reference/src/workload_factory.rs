//! The CpuRef [`WorkloadFactory`]: one workload module per layer kind.

use backplane_api::{
    BackendError, BackendResult, LayerDescriptor, Support, Workload, WorkloadDesc, WorkloadFactory,
};

use crate::{
    layer_support::{computes_in_f32_only, half_of, is_layer_supported},
    workloads,
};

/// Creates CpuRef workloads.
#[derive(Debug)]
pub struct CpuRefWorkloadFactory;

impl WorkloadFactory for CpuRefWorkloadFactory {
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
        if let Support::Unsupported(reason) =
            is_layer_supported(desc.layer, &desc.inputs, &desc.outputs)
        {
            return Err(BackendError::unsupported(format!(
                "layer {}: {reason}",
                desc.name
            )));
        }
        let quantized = |t: &backplane_api::TensorInfo| t.data_type.is_quantized();
        if desc.inputs.iter().chain(desc.outputs.iter()).any(quantized) {
            return workloads::quantized::create(desc, create_unquantized);
        }
        if computes_in_f32_only(desc.layer)
            && let Some(dt) = half_of(&desc.inputs, &desc.outputs)
        {
            return workloads::widened::create(desc, dt, create_unquantized);
        }
        create_unquantized(desc)
    }
}

/// The workload of a layer without quantised tensors (and of the byte-moving and Float32
/// parts of the quantised ones), support already checked.
fn create_unquantized(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    match desc.layer {
        LayerDescriptor::Input(_)
        | LayerDescriptor::Output(_)
        | LayerDescriptor::MemCopy
        | LayerDescriptor::Reshape(_)
        | LayerDescriptor::Flatten(_) => Ok(Box::new(workloads::copy::CopyWorkload)),
        LayerDescriptor::ElementwiseBinary(op) => {
            Ok(Box::new(workloads::elementwise::ElementwiseWorkload::new(
                *op,
                &desc.inputs[0],
                &desc.inputs[1],
                &desc.outputs[0],
            )))
        }
        LayerDescriptor::ElementwiseUnary(_) => workloads::unary::create(desc),
        LayerDescriptor::Normalization(_) => workloads::normalization::create(desc),
        LayerDescriptor::BatchMatMul(_) => workloads::batch_matmul::create(desc),
        LayerDescriptor::Slice(_) => workloads::slice::create(desc),
        LayerDescriptor::Resize(_) => workloads::resize::create(desc),
        LayerDescriptor::TransposeConvolution2d(_) => {
            workloads::transpose_convolution::create(desc)
        }
        LayerDescriptor::Constant(_) => workloads::constant::create(desc),
        LayerDescriptor::Convolution2d(_) | LayerDescriptor::DepthwiseConvolution2d(_) => {
            workloads::convolution::create(desc)
        }
        LayerDescriptor::FullyConnected(_) => workloads::fully_connected::create(desc),
        LayerDescriptor::Activation(_) => workloads::activation::create(desc),
        LayerDescriptor::Pooling2d(_) | LayerDescriptor::DilatedPooling2d(_) => {
            workloads::pooling::create(desc)
        }
        LayerDescriptor::Softmax(_) => workloads::softmax::create(desc),
        LayerDescriptor::Concat(_) => workloads::concat::create(desc),
        LayerDescriptor::Transpose(_) => workloads::transpose::create(desc),
        LayerDescriptor::Pad(_) => workloads::pad::create(desc),
        LayerDescriptor::Mean(_) => workloads::mean::create(desc),
        LayerDescriptor::BatchNormalization(_) => workloads::batch_norm::create(desc),
        LayerDescriptor::Gather(_) => workloads::gather::create(desc),
        LayerDescriptor::Reduce(_) => workloads::reduce::create(desc),
        LayerDescriptor::ArgMinMax(_) => workloads::arg_min_max::create(desc),
        LayerDescriptor::LayerNormalization(_) => workloads::layer_norm::create(desc),
        LayerDescriptor::InstanceNormalization(_) => workloads::instance_norm::create(desc),
        LayerDescriptor::Cast(_) => workloads::cast::create(desc),
        LayerDescriptor::Comparison(_) => workloads::comparison::create(desc),
        LayerDescriptor::Where => workloads::select::create(desc),
        LayerDescriptor::NonZero => workloads::non_zero::create(desc),
        LayerDescriptor::ScatterElements(_) | LayerDescriptor::ScatterNd(_) => {
            workloads::scatter::create(desc)
        }
        LayerDescriptor::NonMaxSuppression(_) | LayerDescriptor::RoiAlign(_) => {
            workloads::detection::create(desc)
        }
        LayerDescriptor::BitCast(_) => workloads::bit_cast::create(desc),
        LayerDescriptor::Determinant => workloads::determinant::create(desc),
        LayerDescriptor::Lstm(_) => workloads::recurrent::create(desc),
        LayerDescriptor::Unique(_) => workloads::unique::create(desc),
        LayerDescriptor::DeformableConvolution2d(_) => {
            workloads::deformable_convolution::create(desc)
        }
        LayerDescriptor::BroadcastTo(_) => workloads::broadcast_to::create(desc),
        LayerDescriptor::PreCompiled(_) => Err(BackendError::unsupported(
            "CpuRef runs no backend-specific layers",
        )),
        LayerDescriptor::Quantize(_)
        | LayerDescriptor::Dequantize
        | LayerDescriptor::Requantize(_) => workloads::quantized::convert::create(desc),
    }
}
