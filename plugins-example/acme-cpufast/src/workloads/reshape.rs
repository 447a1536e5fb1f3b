//! Reshape: the same elements in the same order under another shape (the descriptor's
//! `target_shape`, fully resolved; layer support checks that the element counts agree).
//! The workload copies the input into the output: the host gives every layer its own output
//! buffer, so there is nothing to alias.

use backplane_api::{
    BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::{Signature, invalid_layer};

/// A stand-alone Reshape layer.
#[derive(Debug)]
pub(crate) struct ReshapeWorkload {
    signature: Signature,
}

/// Creates the workload of a `Reshape` layer (one input, one output of as many elements).
pub(crate) fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let (LayerDescriptor::Reshape(_), [x], [y]) =
        (desc.layer, desc.inputs.as_slice(), desc.outputs.as_slice())
    else {
        return Err(invalid_layer(desc, "not a Reshape of one input"));
    };
    if x.num_elements() != y.num_elements() {
        return Err(invalid_layer(
            desc,
            format_args!("cannot reshape {x} into {y}"),
        ));
    }
    Ok(Box::new(ReshapeWorkload {
        signature: Signature::of(desc),
    }))
}

impl Workload for ReshapeWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        outputs[0]
            .as_f32_mut()?
            .copy_from_slice(inputs[0].as_f32()?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{ReshapeDescriptor, Support};

    use super::*;
    use crate::{
        layer_support::is_layer_supported,
        workloads::test_support::{Lcg, f32t, numel, run},
    };

    fn reshape(target: &[u32]) -> LayerDescriptor {
        LayerDescriptor::Reshape(ReshapeDescriptor {
            target_shape: target.to_vec().into(),
        })
    }

    /// The output holds the input's elements, bit for bit, in order (the classifier's
    /// `[1, C, 1, 1] -> [1, C]`, a split and a flatten, NaN and -0 included); a target of
    /// another element count is refused.
    #[test]
    fn elements_are_kept_in_order() {
        let mut rng = Lcg(9);
        for (from, to) in [
            (&[1u32, 200, 1, 1][..], &[1u32, 200][..]),
            (&[2, 3, 4], &[4, 6]),
            (&[24], &[2, 1, 3, 4]),
            (&[0, 3], &[3, 0]),
        ] {
            let mut x = rng.vec(numel(from));
            if x.len() > 2 {
                x[0] = f32::NAN;
                x[1] = -0.0;
            }
            let got = run(&reshape(to), &[(from, &x)], to);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&x), "{from:?} -> {to:?}");
        }
        let refused = is_layer_supported(&reshape(&[5]), &[f32t(&[2, 3])], &[f32t(&[5])]);
        assert!(
            matches!(&refused, Support::Unsupported(r) if r.to_string().contains("element counts differ")),
            "{refused:?}"
        );
    }
}
