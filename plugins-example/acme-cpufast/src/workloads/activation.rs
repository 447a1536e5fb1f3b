//! Activation: every function (the v1 ones and the 1.1 `Gelu`, in its erf form `a = 0` and
//! its tanh form `a = 1`), element by element, with CpuRef's semantics (see
//! [`ActivationFunction`](backplane_api::ActivationFunction) for `a` and `b`). A NaN input
//! gives a NaN output for every function.
//! The kernel is [`ActivationDescriptor::apply_in_place`], the API's shared definition, which
//! works in place, so a fused chain runs it on its output buffer.

use backplane_api::{
    ActivationDescriptor, BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload,
    WorkloadDesc,
};

use super::{Signature, invalid_layer};

/// A stand-alone activation layer.
#[derive(Debug)]
pub(crate) struct ActivationWorkload {
    desc: ActivationDescriptor,
    signature: Signature,
}

/// Creates the workload of an `Activation` layer.
pub(crate) fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Activation(d) = desc.layer else {
        return Err(invalid_layer(desc, "not an Activation layer"));
    };
    if desc.inputs.len() != 1
        || desc.outputs.len() != 1
        || desc.inputs[0].shape != desc.outputs[0].shape
    {
        return Err(invalid_layer(
            desc,
            "an activation maps one tensor to one of its shape",
        ));
    }
    Ok(Box::new(ActivationWorkload {
        desc: *d,
        signature: Signature::of(desc),
    }))
}

impl Workload for ActivationWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let src = inputs[0].as_f32()?;
        let dst = outputs[0].as_f32_mut()?;
        dst.copy_from_slice(src);
        self.desc.apply_in_place(dst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::ActivationFunction;

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, run};

    /// Relative tolerance against the f64 oracle.
    const REL_TOL: f64 = 1e-6;

    fn act(function: ActivationFunction, a: f32, b: f32) -> ActivationDescriptor {
        ActivationDescriptor { function, a, b }
    }

    /// Every function, with non-default parameters (both forms of Gelu), over [-8, 8) and
    /// extremes.
    #[test]
    fn every_function_matches_its_definition() {
        let mut x = Lcg(3).vec_in(500, -8.0, 8.0);
        x.extend([0.0, -0.0, 1e-30, -1e-30, 80.0, -80.0, 3.0, -3.0, 6.0]);
        let all = [
            act(ActivationFunction::ReLU, 0.0, 0.0),
            act(ActivationFunction::BoundedReLU, 6.0, 0.0),
            act(ActivationFunction::BoundedReLU, 1.0, -1.0),
            act(ActivationFunction::Sigmoid, 0.0, 0.0),
            act(ActivationFunction::TanH, 1.0, 1.0),
            act(ActivationFunction::TanH, 1.7, 0.66),
            act(ActivationFunction::LeakyReLU, 0.1, 0.0),
            act(ActivationFunction::HardSwish, 0.0, 0.0),
            act(ActivationFunction::Elu, 1.0, 0.0),
            act(ActivationFunction::Elu, 0.5, 0.0),
            act(ActivationFunction::Gelu, 0.0, 0.0),
            act(ActivationFunction::Gelu, 1.0, 0.0),
        ];
        let shape = [x.len() as u32];
        for d in all {
            let got = run(&LayerDescriptor::Activation(d), &[(&shape, &x)], &shape);
            let want: Vec<f64> = x.iter().map(|&v| d.reference_f64(v)).collect();
            assert_close(&got, &want, REL_TOL, &format!("{d:?}"));
        }
    }

    /// NaN stays NaN through every function.
    #[test]
    fn nan_propagates() {
        for function in ActivationFunction::ALL {
            for a in [6.0, 0.0, 1.0] {
                let mut v = [f32::NAN];
                act(function, a, 0.0).apply_in_place(&mut v);
                assert!(v[0].is_nan(), "{function:?} a = {a}");
            }
        }
    }
}
