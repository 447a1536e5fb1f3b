//! What CpuFast runs, with a reason for every refusal (each starts with `CpuFast:`, so the
//! optimizer's explanation says who refused):
//!
//! - Convolution2d, DepthwiseConvolution2d, FullyConnected, Activation (every function, Gelu
//!   included), Pooling2d, ElementwiseBinary (every operation, numpy broadcasting),
//!   BatchNormalization, Mean (over adjacent axes), Softmax and Reshape, and the Backend API
//!   1.1 BatchMatMul, LayerNormalization and TransposeConvolution2d, and 1.5's Lstm (constant
//!   weights), in Float32 and NCHW, with the shapes
//!   `backplane_api::shapes` defines (so FullyConnected takes a rank-2 input only, as the
//!   shape rule does; a rank-3 `x · W` is a BatchMatMul, which CpuFast runs as one GEMM);
//! - its own `PreCompiled` layers, whose payload must decode and fit the tensors given;
//! - nothing else: the next preferred backend runs it.
//!
//! One routing function, [`CpuFastRoute::route`], decides both: `is_layer_supported` is its
//! verdict and the workload factory makes the workload it names (the kit's `Route`
//! pattern), so a supported layer always gets a workload and an unsupported one never does.

use backplane_api::{DataLayout, LayerDescriptor, Support, TensorInfo};
use backplane_backend_kit::support::{
    Route, not_supported, require_float32, require_output_shapes, require_own,
};

use crate::{
    CPU_FAST_ID,
    fused_op::FusedOp,
    int8,
    workloads::{
        chain::{self, Parameters},
        mean::MeanPlan,
        pooling::PoolGeometry,
        recurrent,
        transpose_convolution::TransposeGeometry,
    },
};

/// What CpuFast makes for a layer it runs.
#[derive(Debug)]
pub(crate) enum CpuFastRoute {
    /// A quantised island (`int8/island.rs`).
    Island,
    /// A quantised layer (`int8/`).
    Quantized,
    /// A quantised product fused with its clamping activation (`int8/clamp.rs`).
    QuantizedClamp(FusedOp),
    /// A convolution, fully connected layer or batch matmul, stand-alone or fused: the chain
    /// workload.
    Chain(FusedOp, Parameters),
    /// Activation.
    Activation,
    /// Pooling2d.
    Pooling,
    /// ElementwiseBinary.
    Elementwise,
    /// BatchNormalization.
    BatchNorm,
    /// LayerNormalization.
    LayerNorm,
    /// Mean.
    Mean,
    /// Softmax.
    Softmax,
    /// Reshape.
    Reshape,
    /// TransposeConvolution2d.
    TransposeConvolution,
    /// Lstm (Backend API 1.5), its weights and bias constant.
    Lstm,
}

impl Route for CpuFastRoute {
    const BACKEND_ID: &'static str = CPU_FAST_ID;
    /// CpuFast's answers depend on the layer alone.
    type Context = ();

    /// What CpuFast makes for `layer`, or why it cannot run it (without the `CpuFast:`
    /// prefix).
    fn route(
        _: &(),
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Result<Self, String> {
        if let LayerDescriptor::PreCompiled(p) = layer
            && p.backend.as_str() == CPU_FAST_ID
            && int8::island::is_island(&p.payload)
        {
            return int8::island::check_any(p, inputs, outputs).map(|()| Self::Island);
        }
        if int8::is_quantized(inputs, outputs) {
            match layer {
                LayerDescriptor::PreCompiled(p) if p.backend.as_str() == CPU_FAST_ID => {
                    let op =
                        FusedOp::decode(&p.payload).map_err(|e| format!("{}: {e}", p.operation))?;
                    int8::clamp::check(&op, inputs, outputs)?;
                    return Ok(Self::QuantizedClamp(op));
                }
                LayerDescriptor::PreCompiled(_) => {}
                _ => return int8::check(layer, inputs, outputs).map(|()| Self::Quantized),
            }
        }
        match layer {
            LayerDescriptor::Convolution2d(_)
            | LayerDescriptor::DepthwiseConvolution2d(_)
            | LayerDescriptor::FullyConnected(_)
            | LayerDescriptor::Activation(_)
            | LayerDescriptor::Pooling2d(_)
            | LayerDescriptor::ElementwiseBinary(_)
            | LayerDescriptor::BatchNormalization(_)
            | LayerDescriptor::Mean(_)
            | LayerDescriptor::Softmax(_)
            | LayerDescriptor::Reshape(_)
            | LayerDescriptor::BatchMatMul(_)
            | LayerDescriptor::LayerNormalization(_)
            | LayerDescriptor::TransposeConvolution2d(_)
            | LayerDescriptor::Lstm(_)
            | LayerDescriptor::PreCompiled(_) => {}
            other => return Err(not_supported(other)),
        }
        require_float32(inputs, outputs)?;
        match layer {
            LayerDescriptor::PreCompiled(p) => {
                require_own(p, CPU_FAST_ID)?;
                let op =
                    FusedOp::decode(&p.payload).map_err(|e| format!("{}: {e}", p.operation))?;
                chain::plan(&op, inputs, outputs)?;
                Ok(Self::Chain(op, Parameters::Folded))
            }
            LayerDescriptor::Pooling2d(d) => match (inputs, outputs) {
                ([x], [y]) => PoolGeometry::new(d, x, y).map(|_| Self::Pooling),
                _ => Err("pooling takes one input and one output".to_owned()),
            },
            LayerDescriptor::Mean(d) => match (inputs, outputs) {
                ([x], [y]) => MeanPlan::new(d, x, y).map(|_| Self::Mean),
                _ => Err("Mean takes one input and one output".to_owned()),
            },
            LayerDescriptor::TransposeConvolution2d(d) => {
                TransposeGeometry::new(d, inputs, outputs).map(|_| Self::TransposeConvolution)
            }
            LayerDescriptor::Lstm(_) => {
                require_output_shapes(layer, inputs, outputs)?;
                recurrent::check(inputs).map(|()| Self::Lstm)
            }
            LayerDescriptor::BatchNormalization(d) if d.layout != DataLayout::Nchw => {
                Err("only NCHW batch normalisation".to_owned())
            }
            _ => {
                if let Some(op) = FusedOp::plain(layer) {
                    // Convolutions, fully connected and batch matmul: the workload's own checks.
                    let expected = 2 + usize::from(op.head_bias.is_some());
                    if inputs.len() != expected {
                        return Err(format!(
                            "{} expects {expected} inputs, got {}",
                            layer.kind(),
                            inputs.len()
                        ));
                    }
                    chain::plan(&op, inputs, outputs)?;
                    return Ok(Self::Chain(op, Parameters::AtExecution));
                }
                require_output_shapes(layer, inputs, outputs)?;
                Ok(match layer {
                    LayerDescriptor::Activation(_) => Self::Activation,
                    LayerDescriptor::ElementwiseBinary(_) => Self::Elementwise,
                    LayerDescriptor::BatchNormalization(_) => Self::BatchNorm,
                    LayerDescriptor::LayerNormalization(_) => Self::LayerNorm,
                    LayerDescriptor::Softmax(_) => Self::Softmax,
                    LayerDescriptor::Reshape(_) => Self::Reshape,
                    // Every other kind of the list above returned earlier.
                    other => return Err(not_supported(other)),
                })
            }
        }
    }
}

/// CpuFast's answer for one layer: the verdict of [`CpuFastRoute::route`].
pub(crate) fn is_layer_supported(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Support {
    CpuFastRoute::support(&(), layer, inputs, outputs)
}

#[cfg(test)]
mod tests {
    use backplane_api::{
        ActivationDescriptor, ActivationFunction, BinaryOperation, Convolution2dDescriptor,
        DataType, FullyConnectedDescriptor, LayerNormalizationDescriptor, PreCompiledDescriptor,
        SoftmaxDescriptor, TransposeDescriptor, shapes,
    };

    use super::*;
    use crate::workloads::test_support::f32t;

    fn reason(s: Support) -> String {
        match s {
            Support::Supported => "supported".to_owned(),
            Support::Unsupported(r) => r.to_string(),
        }
    }

    #[test]
    fn refusals_say_why() {
        let transpose = LayerDescriptor::Transpose(TransposeDescriptor {
            permutation: vec![1, 0].into(),
        });
        assert_eq!(
            reason(is_layer_supported(
                &transpose,
                &[f32t(&[1, 4])],
                &[f32t(&[4, 1])]
            )),
            "CpuFast: Transpose is not supported (falls back)"
        );
        let softmax = LayerDescriptor::Softmax(SoftmaxDescriptor { beta: 1.0, axis: 2 });
        assert_eq!(
            reason(is_layer_supported(
                &softmax,
                &[f32t(&[1, 4])],
                &[f32t(&[1, 4])]
            )),
            "CpuFast: axis 2 is out of range for rank 2"
        );
        let sub = LayerDescriptor::ElementwiseBinary(BinaryOperation::Sub);
        assert_eq!(
            reason(is_layer_supported(
                &sub,
                &[f32t(&[2]), f32t(&[2])],
                &[f32t(&[2])]
            )),
            "supported"
        );
        let int = TensorInfo::new(&[2], DataType::Signed32);
        assert_eq!(
            reason(is_layer_supported(
                &sub,
                &[int.clone(), int.clone()],
                std::slice::from_ref(&int)
            )),
            "CpuFast: only Float32, got Signed32"
        );
        assert_eq!(
            reason(is_layer_supported(
                &sub,
                &[f32t(&[2, 3]), f32t(&[2])],
                &[f32t(&[2, 3])]
            )),
            "CpuFast: shapes [2, 3] and [2] do not broadcast"
        );
        let relu = LayerDescriptor::Activation(ActivationDescriptor {
            function: ActivationFunction::ReLU,
            a: 0.0,
            b: 0.0,
        });
        let half = TensorInfo::new(&[4], DataType::Float16);
        assert_eq!(
            reason(is_layer_supported(
                &relu,
                std::slice::from_ref(&half),
                std::slice::from_ref(&half)
            )),
            "CpuFast: only Float32, got Float16"
        );
        assert_eq!(
            reason(is_layer_supported(&relu, &[f32t(&[4])], &[f32t(&[4])])),
            "supported"
        );
        let nhwc = LayerDescriptor::Convolution2d(Convolution2dDescriptor {
            layout: DataLayout::Nhwc,
            ..Default::default()
        });
        assert_eq!(
            reason(is_layer_supported(
                &nhwc,
                &[f32t(&[1, 5, 5, 2]), f32t(&[3, 2, 3, 3])],
                &[f32t(&[1, 3, 3, 3])]
            )),
            "CpuFast: only NCHW convolutions"
        );
        let foreign = LayerDescriptor::PreCompiled(PreCompiledDescriptor {
            backend: "GpuAcc".into(),
            operation: "Thing".into(),
            payload: Default::default(),
        });
        assert_eq!(
            reason(is_layer_supported(&foreign, &[f32t(&[1])], &[f32t(&[1])])),
            "CpuFast: Thing is a layer of backend GpuAcc, not of CpuFast"
        );
        let garbage = LayerDescriptor::PreCompiled(PreCompiledDescriptor {
            backend: "CpuFast".into(),
            operation: "Conv2dBias".into(),
            payload: vec![7, 1, 2].into(),
        });
        assert_eq!(
            reason(is_layer_supported(&garbage, &[f32t(&[1])], &[f32t(&[1])])),
            "CpuFast: Conv2dBias: payload version 7, this build reads 2"
        );
    }

    /// The 1.1 layers CpuFast runs, and what it refuses of them: FullyConnected of a rank-3
    /// input is refused as the shape rule refuses it; other types than Float32; Gelu's `a`.
    #[test]
    fn transformer_layers() {
        let bmm = LayerDescriptor::BatchMatMul(Default::default());
        assert_eq!(
            reason(is_layer_supported(
                &bmm,
                &[f32t(&[1, 16, 384]), f32t(&[384, 1536]).constant()],
                &[f32t(&[1, 16, 1536])]
            )),
            "supported"
        );
        let int_a = TensorInfo::new(&[2, 3], DataType::Signed32);
        assert_eq!(
            reason(is_layer_supported(
                &bmm,
                &[int_a, f32t(&[3, 4])],
                &[f32t(&[2, 4])]
            )),
            "CpuFast: only Float32, got Signed32"
        );
        let fc = LayerDescriptor::FullyConnected(FullyConnectedDescriptor::default());
        let x3 = f32t(&[1, 16, 384]);
        let w = f32t(&[384, 1536]).constant();
        let shape_rule = shapes::output_shapes(&fc, &[x3.clone(), w.clone()]).unwrap_err();
        assert_eq!(
            reason(is_layer_supported(&fc, &[x3, w], &[f32t(&[1, 16, 1536])])),
            format!("CpuFast: {shape_rule}")
        );
        let ln = |bias_enabled| {
            LayerDescriptor::LayerNormalization(LayerNormalizationDescriptor {
                axis: 2,
                epsilon: 1e-12,
                bias_enabled,
            })
        };
        let (x, p) = (f32t(&[1, 16, 384]), f32t(&[384]));
        let y = std::slice::from_ref(&x);
        let half = TensorInfo::new(&[384], DataType::Float16);
        for (layer, inputs, verdict) in [
            (ln(true), vec![x.clone(), p.clone(), p.clone()], "supported"),
            (ln(false), vec![x.clone(), p.clone()], "supported"),
            (
                ln(false),
                vec![x.clone(), f32t(&[16, 384])],
                "CpuFast: scale must have shape [384], got [16, 384]",
            ),
            (
                ln(false),
                vec![x.clone(), half],
                "CpuFast: only Float32, got Float16",
            ),
        ] {
            assert_eq!(reason(is_layer_supported(&layer, &inputs, y)), verdict);
        }
        for (a, verdict) in [
            (0.0, "supported"),
            (1.0, "supported"),
            (
                0.5,
                "CpuFast: Gelu takes a = 0 (erf) or a = 1 (tanh approximation), got 0.5",
            ),
        ] {
            let gelu = LayerDescriptor::Activation(ActivationDescriptor {
                function: ActivationFunction::Gelu,
                a,
                b: 0.0,
            });
            assert_eq!(reason(is_layer_supported(&gelu, y, y)), verdict);
        }
    }

    #[test]
    fn convolution_shapes_are_checked() {
        let conv = LayerDescriptor::Convolution2d(Convolution2dDescriptor::default());
        let ins = [f32t(&[1, 2, 5, 5]), f32t(&[3, 2, 3, 3])];
        assert!(is_layer_supported(&conv, &ins, &[f32t(&[1, 3, 3, 3])]).is_supported());
        assert!(!is_layer_supported(&conv, &ins, &[f32t(&[1, 3, 5, 5])]).is_supported());
        assert!(!is_layer_supported(&conv, &ins[..1], &[f32t(&[1, 3, 3, 3])]).is_supported());
    }
}
