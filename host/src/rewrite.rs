//! Backend-independent graph rewrites, applied by the optimizer before layers are assigned
//! (as Arm NN's optimizer passes and onnxruntime's basic graph transformers are).
//!
//! One rewrite today: **HardSwish folding.** Exporters that predate ONNX's `HardSwish`
//! (opset 14) spell it `Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6)`, which the importer turns into
//! four layers (Add, BoundedReLU, Mul, Div) and two constants. The rewrite replaces each such
//! chain with one `Activation(HardSwish)` on `x`, which every backend can then run or fuse
//! into the convolution before it. It computes `x * clamp(x + 3, 0, 6) / 6`, the same
//! operations in the same order as the chain, so results do not change.
//!
//! A chain is folded only when every intermediate result has no other reader (and is no
//! network output), both constants hold exactly one element (3 and 6), and every layer of
//! the chain keeps `x`'s shape and type. Constants read by nothing else go with the chain.

use std::collections::BTreeSet;

use backplane_api::{
    ActivationDescriptor, ActivationFunction, BinaryOperation, DataType, LayerDescriptor,
};

use crate::{
    network::{Layer, Network, TensorRef},
    substitution::{self, Accepted},
};

/// The value of a one-element Float32 constant layer.
fn scalar(layer: &Layer) -> Option<f32> {
    match &layer.descriptor {
        LayerDescriptor::Constant(c)
            if c.info.data_type == DataType::Float32 && c.data.len() == 4 =>
        {
            Some(f32::from_le_bytes(c.data[..].try_into().ok()?))
        }
        _ => None,
    }
}

/// The layers that read layer `i`'s output.
fn readers(network: &Network, i: usize) -> Vec<usize> {
    network
        .consumers(network.output_of(i))
        .map(|(layer, _)| layer)
        .collect()
}

/// The two inputs of binary layer `i` if it is `op`.
fn binary(network: &Network, i: usize, op: BinaryOperation) -> Option<[TensorRef; 2]> {
    let layer = &network.layers()[i];
    match (&layer.descriptor, layer.inputs.as_slice()) {
        (LayerDescriptor::ElementwiseBinary(o), &[a, b]) if *o == op => Some([a, b]),
        _ => None,
    }
}

/// The HardSwish chain ending at Div layer `div`: `(x, replaced layers)`.
fn hard_swish_at(network: &Network, div: usize) -> Option<(TensorRef, Vec<usize>)> {
    let layers = network.layers();
    let is_scalar = |t: TensorRef, v: f32| scalar(&layers[t.layer]) == Some(v);
    let only_reader = |i: usize, reader: usize| readers(network, i) == [reader];
    let [product, six] = binary(network, div, BinaryOperation::Div)?;
    let mul = product.layer;
    if !is_scalar(six, 6.0) || !only_reader(mul, div) {
        return None;
    }
    let [p, q] = binary(network, mul, BinaryOperation::Mul)?;
    // Mul(x, clip) or Mul(clip, x).
    let (x, clip) = [(p, q.layer), (q, p.layer)].into_iter().find(|&(_, c)| {
        matches!(
            &layers[c].descriptor,
            LayerDescriptor::Activation(ActivationDescriptor {
                function: ActivationFunction::BoundedReLU,
                a,
                b,
            }) if *a == 6.0 && *b == 0.0
        ) && layers[c].inputs.len() == 1
    })?;
    let add = layers[clip].inputs[0].layer;
    if !only_reader(clip, mul) || !only_reader(add, clip) {
        return None;
    }
    let [s, t] = binary(network, add, BinaryOperation::Add)?;
    let three = match (s == x, t == x) {
        (true, false) => t,
        (false, true) => s,
        _ => return None,
    };
    if !is_scalar(three, 3.0) || x.slot != 0 {
        return None;
    }
    let info = network.tensor_info(x);
    if info.data_type != DataType::Float32
        || [add, clip, mul, div]
            .iter()
            .any(|&i| &layers[i].outputs[0] != info)
    {
        return None;
    }
    let mut replaced = vec![add, clip, mul, div];
    for (constant, reader) in [(three.layer, add), (six.layer, div)] {
        if only_reader(constant, reader) {
            replaced.push(constant);
        }
    }
    replaced.sort_unstable();
    Some((x, replaced))
}

/// Folds every HardSwish chain of `network` into one `Activation(HardSwish)` layer named after
/// the chain's Div. Returns the rewritten network and the number of chains folded, or `None`
/// when there is none.
pub fn fold_hard_swish(network: &Network) -> Option<(Network, usize)> {
    let mut taken = BTreeSet::new();
    let mut accepted = Vec::new();
    for div in 0..network.layers().len() {
        let Some((x, replaced)) = hard_swish_at(network, div) else {
            continue;
        };
        if replaced.iter().any(|i| taken.contains(i)) {
            continue;
        }
        taken.extend(replaced.iter().copied());
        accepted.push(Accepted {
            backend: String::new(),
            descriptor: LayerDescriptor::Activation(ActivationDescriptor {
                function: ActivationFunction::HardSwish,
                a: 0.0,
                b: 0.0,
            }),
            name: network.layers()[div].name.clone(),
            inputs: vec![x.layer],
            output: div,
            replaced,
        });
    }
    if accepted.is_empty() {
        return None;
    }
    match substitution::apply(network, &accepted) {
        Ok((rewritten, _)) => Some((rewritten, accepted.len())),
        Err(why) => {
            log::warn!("HardSwish folding not applied: {why}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{ConstTensor, TensorInfo};

    use super::*;
    use crate::network::NetworkBuilder;

    fn relu6() -> LayerDescriptor {
        LayerDescriptor::Activation(ActivationDescriptor {
            function: ActivationFunction::BoundedReLU,
            a: 6.0,
            b: 0.0,
        })
    }

    fn bin(op: BinaryOperation) -> LayerDescriptor {
        LayerDescriptor::ElementwiseBinary(op)
    }

    /// `x -> HardSwish chain -> y`, with the Mul's operands in either order, and optionally a
    /// second reader of the Mul (which must stop the folding).
    fn chain(swap: bool, leak: bool, three: f32) -> Network {
        let mut b = NetworkBuilder::new();
        let x = b
            .add_input("x", TensorInfo::new(&[1, 2, 3, 3], DataType::Float32))
            .unwrap();
        let c3 = b
            .add_constant("three", ConstTensor::from_f32(&[1], &[three]))
            .unwrap();
        let c6 = b
            .add_constant("six", ConstTensor::from_f32(&[], &[6.0]))
            .unwrap();
        let add = b
            .add_layer("add", bin(BinaryOperation::Add), &[c3, x])
            .unwrap();
        let clip = b.add_layer("clip", relu6(), &[add]).unwrap();
        let ins = if swap { [clip, x] } else { [x, clip] };
        let mul = b.add_layer("mul", bin(BinaryOperation::Mul), &ins).unwrap();
        let div = b
            .add_layer("div", bin(BinaryOperation::Div), &[mul, c6])
            .unwrap();
        b.add_output("y", div).unwrap();
        if leak {
            b.add_output("m", mul).unwrap();
        }
        b.build().unwrap()
    }

    #[test]
    fn folds_the_chain_either_way_round() {
        for swap in [false, true] {
            let (n, count) = fold_hard_swish(&chain(swap, false, 3.0)).unwrap();
            assert_eq!(count, 1);
            let names: Vec<&str> = n.layers().iter().map(|l| l.name.as_str()).collect();
            assert_eq!(names, ["x", "div", "y"]);
            assert!(matches!(
                n.layers()[1].descriptor,
                LayerDescriptor::Activation(ActivationDescriptor {
                    function: ActivationFunction::HardSwish,
                    ..
                })
            ));
            assert_eq!(n.layers()[1].outputs[0].shape.as_slice(), [1, 2, 3, 3]);
        }
    }

    #[test]
    fn leaves_near_misses_alone() {
        assert!(fold_hard_swish(&chain(false, true, 3.0)).is_none());
        assert!(fold_hard_swish(&chain(false, false, 2.0)).is_none());
    }
}
