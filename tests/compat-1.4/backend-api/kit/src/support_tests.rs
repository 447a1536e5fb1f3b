use backplane_api::{
    ActivationDescriptor, ActivationFunction, ErrorCode, RSlice, TransposeDescriptor,
};

use super::*;

fn f32t(shape: &[u32]) -> TensorInfo {
    TensorInfo::new(shape, DataType::Float32)
}

#[test]
fn preamble_reasons() {
    let half = TensorInfo::new(&[2], DataType::Float16);
    assert_eq!(require_float32(&[f32t(&[2])], &[f32t(&[2])]), Ok(()));
    assert_eq!(
        require_float32(&[f32t(&[2])], std::slice::from_ref(&half)),
        Err("only Float32, got Float16".to_owned())
    );
    let p = PreCompiledDescriptor {
        backend: "GpuAcc".into(),
        operation: "Thing".into(),
        payload: Default::default(),
    };
    assert_eq!(require_own(&p, "GpuAcc"), Ok(()));
    assert_eq!(
        require_own(&p, "Acme"),
        Err("Thing is a layer of backend GpuAcc, not of Acme".to_owned())
    );
    let transpose = LayerDescriptor::Transpose(TransposeDescriptor {
        permutation: vec![1, 0].into(),
    });
    assert_eq!(
        not_supported(&transpose),
        "Transpose is not supported (falls back)"
    );
    assert_eq!(
        require_output_shapes(&transpose, &[f32t(&[2, 3])], &[f32t(&[3, 2])]),
        Ok(())
    );
    assert_eq!(
        require_output_shapes(&transpose, &[f32t(&[2, 3])], &[f32t(&[2, 3])]),
        Err("output shapes [[2, 3]] differ from the expected [[3, 2]]".to_owned())
    );
    assert_eq!(with_id("Acme", Ok(())), Support::Supported);
    assert_eq!(
        with_id("Acme", Err("no".to_owned())),
        Support::unsupported("Acme: no")
    );
}

/// A backend that runs ReLU only.
#[derive(Debug, PartialEq)]
struct ReluOnly;

impl Route for ReluOnly {
    const BACKEND_ID: &'static str = "Acme";
    /// The smallest rank it runs.
    type Context = usize;
    fn route(
        min_rank: &usize,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Result<Self, String> {
        match layer {
            LayerDescriptor::Activation(a) if a.function == ActivationFunction::ReLU => {
                require_float32(inputs, outputs)?;
                match inputs.first() {
                    Some(x) if x.shape.len() < *min_rank => {
                        Err(format!("rank {} is below {min_rank}", x.shape.len()))
                    }
                    _ => Ok(ReluOnly),
                }
            }
            other => Err(not_supported(other)),
        }
    }
}

#[test]
fn one_route_answers_support_and_creation() {
    let relu = LayerDescriptor::Activation(ActivationDescriptor {
        function: ActivationFunction::ReLU,
        a: 0.0,
        b: 0.0,
    });
    let x = [f32t(&[4])];
    assert_eq!(ReluOnly::support(&1, &relu, &x, &x), Support::Supported);
    assert_eq!(
        ReluOnly::support(&1, &LayerDescriptor::MemCopy, &x, &x),
        Support::unsupported("Acme: MemCopy is not supported (falls back)")
    );
    let desc = |layer| WorkloadDesc {
        name: "act".into(),
        layer,
        inputs: RSlice::from_slice(&x),
        outputs: RSlice::from_slice(&x),
        constants: RSlice::from_slice(&[]),
    };
    assert_eq!(
        ReluOnly::for_workload(&1, &desc(&relu)).ok(),
        Some(ReluOnly)
    );
    let e = ReluOnly::for_workload(&1, &desc(&LayerDescriptor::MemCopy)).unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported);
    assert_eq!(
        e.message.as_str(),
        "layer act: Acme: MemCopy is not supported (falls back)"
    );
    // The context takes part in both answers.
    assert_eq!(
        ReluOnly::support(&2, &relu, &x, &x),
        Support::unsupported("Acme: rank 1 is below 2")
    );
    assert_eq!(
        ReluOnly::for_workload(&2, &desc(&relu))
            .unwrap_err()
            .message
            .as_str(),
        "layer act: Acme: rank 1 is below 2"
    );
}
