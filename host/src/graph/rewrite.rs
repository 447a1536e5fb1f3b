//! Backend-independent graph rewrites, applied by the optimizer before layers are assigned
//! (as Arm NN's optimizer passes and onnxruntime's basic graph transformers are), all turned
//! off with fusion (`--no-fusion`). [`rewrite`] runs them in order:
//!
//! 1. **HardSwish folding** (bit for bit, below).
//! 2. **Layer-norm folding.** Exporters before ONNX's `LayerNormalization` (opset 17) spell it
//!    `Add(Mul(Div(Sub(x, m), Sqrt(Add(Mean(Pow(Sub(x, m), 2)), eps))), gamma), beta)` with
//!    `m = Mean(x)` over the trailing axes (torch at opset 13, PaddlePaddle). The chain
//!    becomes one `LayerNormalization` with `gamma` and `beta` as its inputs. Not bit for bit:
//!    the layer's statistics are its backend's own (CpuRef's in f64), so results move within
//!    float32 rounding (the model check's tolerance, rtol 1e-3 and atol 1e-4, holds).
//! 3. **GELU folding.** `Mul(Mul(x, Add(Erf(Div(x, √2)), 1)), 0.5)` (torch's erf form, either
//!    operand order, the 0.5 applied first or last) becomes `Activation(Gelu, a = 0)`; the tanh
//!    form `0.5 x (1 + Tanh(√(2/π) (x + 0.044715 Pow(x, 3))))` becomes `Gelu, a = 1`, also
//!    with the cube as jax2tf writes it (`x · (x · (0.044715 · x))`) and the 0.5 applied to the
//!    `1 + Tanh(…)` term (`x · (0.5 · (1 + Tanh(…)))`, Google's magika). Within float32
//!    rounding too (one expression instead of five to nine roundings).
//!
//! Every chain is folded only when its intermediate results have no reader outside it (and
//! are no network output), its constants have the expected values, and it keeps `x`'s shape
//! and Float32 type. Constants read by nothing else go with the chain.
//!
//! The HardSwish rewrite: Exporters that predate ONNX's `HardSwish`
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
    ActivationDescriptor, ActivationFunction, BinaryOperation, DataType, LayerDescriptor, LayerKind,
};

use crate::{
    graph::network::{Layer, Network, TensorRef},
    graph::substitution::{self, Accepted},
};

/// The value of a one-element Float32 constant layer.
fn scalar(layer: &Layer) -> Option<f32> {
    match (&*layer.descriptor, layer.constant_bytes()) {
        (LayerDescriptor::Constant(c), Some(data))
            if c.info.data_type == DataType::Float32 && data.len() == 4 =>
        {
            Some(f32::from_le_bytes(data.try_into().ok()?))
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
    match (&*layer.descriptor, layer.inputs.as_slice()) {
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
        matches!(&*layers[c].descriptor,
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
/// the chain's Div. Returns the rewritten network and each folded layer with the layers it
/// replaced, or `None` when there is none.
pub fn fold_hard_swish(network: &Network) -> Option<(Network, Folded)> {
    fold(network, "HardSwish", |network, div| {
        let (x, replaced) = hard_swish_at(network, div)?;
        Some(Accepted {
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
        })
    })
}

/// The constant of one-element constant layer `t`, if it is within a relative `1e-6` of `v`.
fn is_value(network: &Network, t: TensorRef, v: f32) -> bool {
    scalar(&network.layers()[t.layer]).is_some_and(|c| (c - v).abs() <= 1e-6 * v.abs().max(1.0))
}

/// Binary layer `i` as `op(other, constant)`, in either operand order when `commutes`: the
/// other operand and the constant's tensor.
fn with_constant(
    network: &Network,
    i: usize,
    op: BinaryOperation,
    commutes: bool,
) -> Option<(TensorRef, TensorRef)> {
    let [a, b] = binary(network, i, op)?;
    let is_const = |t: TensorRef| scalar(&network.layers()[t.layer]).is_some();
    if is_const(b) {
        Some((a, b))
    } else if commutes && is_const(a) {
        Some((b, a))
    } else {
        None
    }
}

/// The one input of layer `i` if its descriptor satisfies `is`.
fn unary_input(
    network: &Network,
    i: usize,
    is: impl Fn(&LayerDescriptor) -> bool,
) -> Option<TensorRef> {
    let layer = &network.layers()[i];
    match layer.inputs.as_slice() {
        &[x] if is(&layer.descriptor) => Some(x),
        _ => None,
    }
}

/// A matched chain: its input, extra inputs (producers, in slot order after `x`), the
/// layers it replaces, its constants (replaced when nothing else reads them), and the layer
/// whose output it produces.
struct Chain {
    x: TensorRef,
    extra: Vec<TensorRef>,
    layers: Vec<usize>,
    constants: Vec<TensorRef>,
    output: usize,
    descriptor: LayerDescriptor,
}

impl Chain {
    /// Checks the rules every fold keeps: intermediate results read only inside the chain,
    /// no network output among them, Float32 of `x`'s shape throughout; the replaced set.
    fn accept(self, network: &Network) -> Option<Accepted> {
        let layers = network.layers();
        let info = network.tensor_info(self.x);
        if info.data_type != DataType::Float32 || self.x.slot != 0 {
            return None;
        }
        let inside: BTreeSet<usize> = self.layers.iter().copied().collect();
        for &l in &self.layers {
            if l == self.output {
                continue;
            }
            if readers(network, l).iter().any(|r| !inside.contains(r))
                || matches!(*layers[l].descriptor, LayerDescriptor::Output(_))
            {
                return None;
            }
        }
        if layers[self.output].outputs[0] != *info {
            return None;
        }
        let mut replaced = self.layers.clone();
        for c in &self.constants {
            if readers(network, c.layer).iter().all(|r| inside.contains(r)) {
                replaced.push(c.layer);
            }
        }
        replaced.sort_unstable();
        replaced.dedup();
        let mut inputs = vec![self.x.layer];
        inputs.extend(self.extra.iter().map(|t| t.layer));
        Some(Accepted {
            backend: String::new(),
            descriptor: self.descriptor,
            name: layers[self.output].name.clone(),
            inputs,
            output: self.output,
            replaced,
        })
    }
}

/// The decomposed layer norm ending at Add layer `end` (see the module doc).
fn layer_norm_at(network: &Network, end: usize) -> Option<Accepted> {
    let layers = network.layers();
    let is_param = |t: TensorRef| {
        t.slot == 0
            && matches!(&*layers[t.layer].descriptor, LayerDescriptor::Constant(c) if c.info.data_type == DataType::Float32)
    };
    // end = Add(scaled, beta), scaled = Mul(normed, gamma): either operand order.
    let [p, q] = binary(network, end, BinaryOperation::Add)?;
    let (scaled, beta) = if is_param(q) { (p, q) } else { (q, p) };
    let [p, q] = binary(network, scaled.layer, BinaryOperation::Mul)?;
    let (normed, gamma) = if is_param(q) { (p, q) } else { (q, p) };
    if !is_param(beta) || !is_param(gamma) {
        return None;
    }
    // normed = Div(centred, Sqrt(Add(Mean(Pow(centred, 2)), eps)))
    let [centred, root] = binary(network, normed.layer, BinaryOperation::Div)?;
    let shifted = unary_input(network, root.layer, |d| {
        *d == LayerDescriptor::ElementwiseUnary(backplane_api::UnaryOperation::Sqrt)
    })?;
    let (variance, eps) = with_constant(network, shifted.layer, BinaryOperation::Add, true)?;
    let mean_of = |i: usize| match &*layers[i].descriptor {
        LayerDescriptor::Mean(m) if m.keep_dims && layers[i].inputs.len() == 1 => {
            Some((layers[i].inputs[0], m.axes.to_vec()))
        }
        _ => None,
    };
    let (squared, var_axes) = mean_of(variance.layer)?;
    let (base, two) = with_constant(network, squared.layer, BinaryOperation::Power, false)?;
    if base != centred || !is_value(network, two, 2.0) {
        return None;
    }
    let [x, mean] = binary(network, centred.layer, BinaryOperation::Sub)?;
    let (x2, axes) = mean_of(mean.layer)?;
    if x2 != x || axes != var_axes {
        return None;
    }
    // The axes are the trailing ones, in any order.
    let rank = network.tensor_info(x).shape.len();
    let mut sorted = axes.clone();
    sorted.sort_unstable();
    let first = rank.checked_sub(sorted.len())?;
    if sorted.is_empty()
        || sorted
            .iter()
            .enumerate()
            .any(|(k, &a)| a as usize != first + k)
    {
        return None;
    }
    let params = &network.tensor_info(x).shape[first..];
    if network.tensor_info(gamma).shape.as_slice() != params
        || network.tensor_info(beta).shape.as_slice() != params
    {
        return None;
    }
    let epsilon = scalar(&layers[eps.layer])?;
    Chain {
        x,
        extra: vec![gamma, beta],
        layers: vec![
            mean.layer,
            centred.layer,
            squared.layer,
            variance.layer,
            shifted.layer,
            root.layer,
            normed.layer,
            scaled.layer,
            end,
        ],
        constants: vec![two, eps],
        output: end,
        descriptor: LayerDescriptor::LayerNormalization(
            backplane_api::LayerNormalizationDescriptor {
                axis: first as u32,
                epsilon,
                bias_enabled: true,
            },
        ),
    }
    .accept(network)
}

/// `c = Add(inner, 1)` of a GELU: the erf form's `Erf(Div(x, √2))` (or `Mul(x, 1/√2)`) or
/// the tanh form's `Tanh(Mul(Add(x, Mul(Pow(x, 3), 0.044715)), √(2/π)))`. Returns `x`, the
/// layers, the constants and the form (`a`).
fn gelu_core(network: &Network, c: usize) -> Option<(TensorRef, Vec<usize>, Vec<TensorRef>, f32)> {
    let (inner, one) = with_constant(network, c, BinaryOperation::Add, true)?;
    if !is_value(network, one, 1.0) {
        return None;
    }
    if let Some(arg) = unary_input(network, inner.layer, |d| {
        *d == LayerDescriptor::ElementwiseUnary(backplane_api::UnaryOperation::Erf)
    }) {
        let (x, k) = with_constant(network, arg.layer, BinaryOperation::Div, false)
            .filter(|&(_, k)| is_value(network, k, std::f32::consts::SQRT_2))
            .or_else(|| {
                with_constant(network, arg.layer, BinaryOperation::Mul, true)
                    .filter(|&(_, k)| is_value(network, k, std::f32::consts::FRAC_1_SQRT_2))
            })?;
        return Some((x, vec![arg.layer, inner.layer, c], vec![one, k], 0.0));
    }
    let arg = unary_input(
        network,
        inner.layer,
        |d| matches!(d, LayerDescriptor::Activation(ActivationDescriptor { function: ActivationFunction::TanH, a, b }) if *a == 1.0 && *b == 1.0),
    )?;
    let (sum, k1) = with_constant(network, arg.layer, BinaryOperation::Mul, true)?;
    if !is_value(network, k1, (2.0 / std::f32::consts::PI).sqrt()) {
        return None;
    }
    let [p, q] = binary(network, sum.layer, BinaryOperation::Add)?;
    for (x, cubic) in [(p, q), (q, p)] {
        let Some((cube, k2)) = with_constant(network, cubic.layer, BinaryOperation::Mul, true)
        else {
            continue;
        };
        let Some((base, three)) = with_constant(network, cube.layer, BinaryOperation::Power, false)
        else {
            continue;
        };
        if base == x && is_value(network, k2, 0.044715) && is_value(network, three, 3.0) {
            return Some((
                x,
                vec![
                    cube.layer,
                    cubic.layer,
                    sum.layer,
                    arg.layer,
                    inner.layer,
                    c,
                ],
                vec![one, k1, k2, three],
                1.0,
            ));
        }
    }
    // jax2tf's cubic term: `Mul(x, Mul(x, Mul(x, 0.044715)))`, each product's operands in
    // either order.
    for (x, cubic) in [(p, q), (q, p)] {
        let times_x = |t: TensorRef| {
            let [u, v] = binary(network, t.layer, BinaryOperation::Mul)?;
            if u == x {
                Some(v)
            } else if v == x {
                Some(u)
            } else {
                None
            }
        };
        let Some(square) = times_x(cubic) else {
            continue;
        };
        let Some(linear) = times_x(square) else {
            continue;
        };
        let Some((base, k2)) = with_constant(network, linear.layer, BinaryOperation::Mul, true)
        else {
            continue;
        };
        if base == x && is_value(network, k2, 0.044715) {
            return Some((
                x,
                vec![
                    linear.layer,
                    square.layer,
                    cubic.layer,
                    sum.layer,
                    arg.layer,
                    inner.layer,
                    c,
                ],
                vec![one, k1, k2],
                1.0,
            ));
        }
    }
    None
}

/// The GELU ending at Mul layer `end` (see the module doc).
fn gelu_at(network: &Network, end: usize) -> Option<Accepted> {
    let [p, q] = binary(network, end, BinaryOperation::Mul)?;
    let chain = |x: TensorRef,
                 core: (TensorRef, Vec<usize>, Vec<TensorRef>, f32),
                 more: Vec<usize>,
                 half: TensorRef| {
        let (cx, mut layers, mut constants, form) = core;
        if cx != x || !is_value(network, half, 0.5) {
            return None;
        }
        layers.extend(more);
        constants.push(half);
        Chain {
            x,
            extra: Vec::new(),
            layers,
            constants,
            output: end,
            descriptor: LayerDescriptor::Activation(ActivationDescriptor {
                function: ActivationFunction::Gelu,
                a: form,
                b: 0.0,
            }),
        }
        .accept(network)
    };
    for (a, b) in [(p, q), (q, p)] {
        // 0.5 last: end = Mul(Mul(x, c), 0.5).
        if scalar(&network.layers()[b.layer]).is_some() {
            let Some([s, t]) = binary(network, a.layer, BinaryOperation::Mul) else {
                continue;
            };
            for (x, c) in [(s, t), (t, s)] {
                if let Some(core) = gelu_core(network, c.layer)
                    && let Some(done) = chain(x, core, vec![a.layer, end], b)
                {
                    return Some(done);
                }
            }
        }
        // 0.5 first: end = Mul(Mul(x, 0.5), c).
        if let Some((x, half)) = with_constant(network, a.layer, BinaryOperation::Mul, true)
            && let Some(core) = gelu_core(network, b.layer)
            && let Some(done) = chain(x, core, vec![a.layer, end], half)
        {
            return Some(done);
        }
        // 0.5 with the core (jax2tf): end = Mul(x, Mul(c, 0.5)).
        if let Some((c, half)) = with_constant(network, b.layer, BinaryOperation::Mul, true)
            && let Some(core) = gelu_core(network, c.layer)
            && let Some(done) = chain(a, core, vec![b.layer, end], half)
        {
            return Some(done);
        }
    }
    None
}

/// Applies every chain `find` matches (the first of overlapping ones).
fn fold(
    network: &Network,
    what: &str,
    find: impl Fn(&Network, usize) -> Option<Accepted>,
) -> Option<(Network, Folded)> {
    let mut taken = BTreeSet::new();
    let mut accepted = Vec::new();
    for end in 0..network.layers().len() {
        let Some(a) = find(network, end) else {
            continue;
        };
        if a.replaced.iter().any(|i| taken.contains(i)) {
            continue;
        }
        taken.extend(a.replaced.iter().copied());
        accepted.push(a);
    }
    if accepted.is_empty() {
        return None;
    }
    // Each new layer with the layers it replaced (constants aside: the nodes that computed).
    let folded = accepted
        .iter()
        .map(|a| {
            let names = a
                .replaced
                .iter()
                .map(|&i| &network.layers()[i])
                .filter(|l| l.kind() != LayerKind::Constant)
                .map(|l| l.name.clone())
                .collect();
            (a.name.clone(), names)
        })
        .collect();
    match substitution::apply(network, &accepted) {
        Ok((rewritten, _)) => Some((rewritten, folded)),
        Err(why) => {
            log::warn!("{what} folding not applied: {why}");
            None
        }
    }
}

/// One rewrite: the rewritten network and the number of chains folded, or `None`.
/// Each layer a rewrite made, by name, with the names of the layers it replaced (constants
/// aside), in order.
pub type Folded = Vec<(String, Vec<String>)>;

type Pass = fn(&Network) -> Option<(Network, Folded)>;

/// What [`rewrite`] made: the network, one note per rewrite that applied, and every layer a
/// rewrite made with the names of the layers of the given network it replaced (a rewrite of
/// a layer another rewrite made names that layer's own).
#[derive(Debug)]
pub struct Rewritten {
    /// The rewritten network.
    pub network: Network,
    /// `graph: 13 decomposed layer norm(s) folded into LayerNormalization`, …
    pub notes: Vec<String>,
    /// New layer name → the original layers' names.
    pub origins: std::collections::BTreeMap<String, Vec<String>>,
}

/// Runs every rewrite of this module in order. Returns the rewritten network and one note
/// per rewrite that applied (`graph: 13 decomposed layer norm(s) folded into
/// LayerNormalization`), or `None` when none did.
pub fn rewrite(network: &Network) -> Option<Rewritten> {
    let mut current: Option<Network> = None;
    let mut notes = Vec::new();
    let mut origins: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let passes: [(&str, &str, Pass); 3] = [
        ("Add+Clip+Mul+Div chain(s)", "HardSwish", fold_hard_swish),
        ("decomposed layer norm(s)", "LayerNormalization", |n| {
            fold(n, "layer norm", layer_norm_at)
        }),
        ("GELU chain(s)", "Gelu", |n| fold(n, "GELU", gelu_at)),
    ];
    for (what, into, pass) in passes {
        if let Some((rewritten, folded)) = pass(current.as_ref().unwrap_or(network)) {
            notes.push(format!("graph: {} {what} folded into {into}", folded.len()));
            for (name, replaced) in folded {
                let expanded = replaced
                    .into_iter()
                    .flat_map(|r| origins.get(&r).cloned().unwrap_or_else(|| vec![r]))
                    .collect();
                origins.insert(name, expanded);
            }
            current = Some(rewritten);
        }
    }
    current.map(|network| Rewritten {
        network,
        notes,
        origins,
    })
}

#[cfg(test)]
mod tests {
    use backplane_api::{ConstTensor, TensorInfo};

    use super::*;
    use crate::graph::network::NetworkBuilder;

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
            let (n, folded) = fold_hard_swish(&chain(swap, false, 3.0)).unwrap();
            assert_eq!(folded.len(), 1);
            // The debug handle: the chain's computing layers (its constants aside).
            assert_eq!(folded[0].0, "div");
            assert_eq!(folded[0].1.len(), 4, "{folded:?}");
            let names: Vec<&str> = n.layers().iter().map(|l| l.name.as_str()).collect();
            assert_eq!(names, ["x", "div", "y"]);
            assert!(matches!(
                *n.layers()[1].descriptor,
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

    fn unary(op: backplane_api::UnaryOperation) -> LayerDescriptor {
        LayerDescriptor::ElementwiseUnary(op)
    }

    fn mean_last() -> LayerDescriptor {
        LayerDescriptor::Mean(backplane_api::MeanDescriptor {
            axes: vec![2].into(),
            keep_dims: true,
        })
    }

    /// torch's opset-13 layer norm over the last axis of `[1, 4, 8]`; `leak` also outputs the
    /// variance (which must stop the folding).
    fn layer_norm_chain(leak: bool, two: f32) -> Network {
        let mut b = NetworkBuilder::new();
        let x = b
            .add_input("x", TensorInfo::new(&[1, 4, 8], DataType::Float32))
            .unwrap();
        let k = |b: &mut NetworkBuilder, name: &str, shape: &[u32], v: f32| {
            let n = shape.iter().product::<u32>() as usize;
            b.add_constant(name, ConstTensor::from_f32(shape, &vec![v; n]))
                .unwrap()
        };
        let mean = b.add_layer("mean", mean_last(), &[x]).unwrap();
        let centred = b
            .add_layer("sub", bin(BinaryOperation::Sub), &[x, mean])
            .unwrap();
        let two = k(&mut b, "two", &[], two);
        let sq = b
            .add_layer("pow", bin(BinaryOperation::Power), &[centred, two])
            .unwrap();
        let var = b.add_layer("var", mean_last(), &[sq]).unwrap();
        let eps = k(&mut b, "eps", &[], 1e-12);
        let shifted = b
            .add_layer("add_eps", bin(BinaryOperation::Add), &[var, eps])
            .unwrap();
        let root = b
            .add_layer(
                "sqrt",
                unary(backplane_api::UnaryOperation::Sqrt),
                &[shifted],
            )
            .unwrap();
        let normed = b
            .add_layer("div", bin(BinaryOperation::Div), &[centred, root])
            .unwrap();
        let gamma = k(&mut b, "gamma", &[8], 1.5);
        let beta = k(&mut b, "beta", &[8], -0.5);
        let scaled = b
            .add_layer("mul", bin(BinaryOperation::Mul), &[normed, gamma])
            .unwrap();
        let out = b
            .add_layer("add", bin(BinaryOperation::Add), &[beta, scaled])
            .unwrap();
        b.add_output("y", out).unwrap();
        if leak {
            b.add_output("v", var).unwrap();
        }
        b.build().unwrap()
    }

    #[test]
    fn folds_a_decomposed_layer_norm() {
        let Rewritten {
            network: n, notes, ..
        } = rewrite(&layer_norm_chain(false, 2.0)).unwrap();
        assert_eq!(
            notes,
            ["graph: 1 decomposed layer norm(s) folded into LayerNormalization"]
        );
        let names: Vec<&str> = n.layers().iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["x", "gamma", "beta", "add", "y"]);
        assert_eq!(
            *n.layers()[3].descriptor,
            LayerDescriptor::LayerNormalization(backplane_api::LayerNormalizationDescriptor {
                axis: 2,
                epsilon: 1e-12,
                bias_enabled: true,
            })
        );
        assert!(rewrite(&layer_norm_chain(true, 2.0)).is_none());
        assert!(rewrite(&layer_norm_chain(false, 3.0)).is_none());
    }

    /// `x -> GELU -> y` in the erf form (0.5 last or first) or the tanh form.
    fn gelu_chain(form: &str) -> Network {
        let mut b = NetworkBuilder::new();
        let x = b
            .add_input("x", TensorInfo::new(&[2, 6], DataType::Float32))
            .unwrap();
        let k = |b: &mut NetworkBuilder, name: &str, v: f32| {
            b.add_constant(name, ConstTensor::from_f32(&[], &[v]))
                .unwrap()
        };
        let one = k(&mut b, "one", 1.0);
        let half = k(&mut b, "half", 0.5);
        let core = if form == "jax" || form == "tanh" {
            let c = k(&mut b, "c", 0.044715);
            let cubic = if form == "jax" {
                // x · (x · (0.044715 · x)), as jax2tf writes it.
                let linear = b
                    .add_layer("linear", bin(BinaryOperation::Mul), &[c, x])
                    .unwrap();
                let square = b
                    .add_layer("square", bin(BinaryOperation::Mul), &[x, linear])
                    .unwrap();
                b.add_layer("cubic", bin(BinaryOperation::Mul), &[x, square])
                    .unwrap()
            } else {
                let three = k(&mut b, "three", 3.0);
                let cube = b
                    .add_layer("cube", bin(BinaryOperation::Power), &[x, three])
                    .unwrap();
                b.add_layer("cubic", bin(BinaryOperation::Mul), &[c, cube])
                    .unwrap()
            };
            let sum = b
                .add_layer("sum", bin(BinaryOperation::Add), &[x, cubic])
                .unwrap();
            let s = k(&mut b, "s", (2.0 / std::f32::consts::PI).sqrt());
            // The constant first in one form, last in the other.
            let operands = if form == "jax" { [s, sum] } else { [sum, s] };
            let arg = b
                .add_layer("arg", bin(BinaryOperation::Mul), &operands)
                .unwrap();
            let tanh = LayerDescriptor::Activation(ActivationDescriptor {
                function: ActivationFunction::TanH,
                a: 1.0,
                b: 1.0,
            });
            b.add_layer("tanh", tanh, &[arg]).unwrap()
        } else {
            let root2 = k(&mut b, "root2", std::f32::consts::SQRT_2);
            let arg = b
                .add_layer("div", bin(BinaryOperation::Div), &[x, root2])
                .unwrap();
            b.add_layer("erf", unary(backplane_api::UnaryOperation::Erf), &[arg])
                .unwrap()
        };
        let c = b
            .add_layer("plus1", bin(BinaryOperation::Add), &[core, one])
            .unwrap();
        let out = if form == "jax" {
            let h = b
                .add_layer("halve", bin(BinaryOperation::Mul), &[half, c])
                .unwrap();
            b.add_layer("end", bin(BinaryOperation::Mul), &[x, h])
                .unwrap()
        } else if form == "half_first" {
            let h = b
                .add_layer("halve", bin(BinaryOperation::Mul), &[half, x])
                .unwrap();
            b.add_layer("end", bin(BinaryOperation::Mul), &[h, c])
                .unwrap()
        } else {
            let m = b
                .add_layer("times_x", bin(BinaryOperation::Mul), &[x, c])
                .unwrap();
            b.add_layer("end", bin(BinaryOperation::Mul), &[m, half])
                .unwrap()
        };
        b.add_output("y", out).unwrap();
        b.build().unwrap()
    }

    #[test]
    fn folds_both_gelu_forms_in_either_order() {
        for (form, a) in [
            ("half_last", 0.0),
            ("half_first", 0.0),
            ("tanh", 1.0),
            ("jax", 1.0),
        ] {
            let Rewritten {
                network: n, notes, ..
            } = rewrite(&gelu_chain(form)).unwrap();
            assert_eq!(notes, ["graph: 1 GELU chain(s) folded into Gelu"], "{form}");
            let names: Vec<&str> = n.layers().iter().map(|l| l.name.as_str()).collect();
            assert_eq!(names, ["x", "end", "y"], "{form}");
            assert_eq!(
                *n.layers()[1].descriptor,
                LayerDescriptor::Activation(ActivationDescriptor {
                    function: ActivationFunction::Gelu,
                    a,
                    b: 0.0,
                }),
                "{form}"
            );
        }
    }
}
