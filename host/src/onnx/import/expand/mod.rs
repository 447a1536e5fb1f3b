//! Operators imported as graphs of simpler ONNX operators, built here and imported in the
//! node's place (as an `If`'s branch is): so every simpler operator's converter, folding, type
//! rules and run-time segments serve them too. Each family's decompositions live in a file of
//! their own ([`rearrange`], [`normalization`], [`attention`], [`recurrent`], [`einsum`], [`microsoft`], [`signal`], [`spatial`], [`volume`], [`resize`], [`grid_sample`],
//! [`quantization`], [`text`]); this file holds
//! [`Expansion`], the builder they write nodes with, which knows the model's opset (where an
//! operator's form changed, such as `ReduceMean`'s axes becoming an input in opset 18).
//!
//! The decompositions are ours, from the operators' definitions; the node tests and the Python
//! tests against onnxruntime check them.

mod attention;
mod einsum;
mod grid_sample;
mod microsoft;
mod normalization;
mod quantization;
mod rearrange;
mod recurrent;
mod resize;
mod signal;
mod spatial;
mod text;
mod volume;

pub(super) use normalization::is_training_batch_norm;
pub(super) use quantization::{is_float_quantization, is_integer_form_alone};
pub(super) use rearrange::is_wrap_pad;
pub(super) use resize::needs_general_resize;
pub(super) use spatial::has_pool_indices;
pub(super) use volume::{is_small_integer_pool, is_volume};

use super::{Importer, Node, queue::Pending};
use crate::onnx::proto::{AttributeProto, NodeProto, TensorProto, attribute_type, data_type};

/// The most elements a constant an expansion computes may have (16 Mi: 64 MiB of f32): sizes
/// that a model declares decide them, so they are bounded before anything is allocated.
pub(super) const MAX_CONSTANT_ELEMENTS: i64 = 1 << 24;

/// `Err` (unsupported, naming `what`) when a constant of `count` elements would exceed
/// [`MAX_CONSTANT_ELEMENTS`] (or `count` is negative).
pub(super) fn check_elements(count: i64, what: &str) -> super::NResult<()> {
    if (0..=MAX_CONSTANT_ELEMENTS).contains(&count) {
        Ok(())
    } else {
        Err(super::unsupported(format!(
            "{what} of {count} elements (an expansion's constants hold at most \
             {MAX_CONSTANT_ELEMENTS})"
        )))
    }
}

/// The permutation that moves `axis` of a `rank`-D tensor last (the others in order), and
/// its inverse, which moves it back.
pub(super) fn axis_last(rank: usize, axis: usize) -> (Vec<i64>, Vec<i64>) {
    let mut perm: Vec<i64> = (0..rank as i64).filter(|&d| d != axis as i64).collect();
    perm.push(axis as i64);
    let mut back = vec![0i64; rank];
    for (i, &p) in perm.iter().enumerate() {
        back[p as usize] = i as i64;
    }
    (perm, back)
}

/// An `int` attribute.
pub(super) fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: name.to_owned(),
        i: v,
        r#type: attribute_type::INT,
        ..Default::default()
    }
}

/// An `ints` attribute.
pub(super) fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.to_owned(),
        ints: v.to_vec(),
        r#type: attribute_type::INTS,
        ..Default::default()
    }
}

/// A `float` attribute.
pub(super) fn float(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: name.to_owned(),
        f: v,
        r#type: attribute_type::FLOAT,
        ..Default::default()
    }
}

/// A `string` attribute.
pub(super) fn string(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: name.to_owned(),
        s: v.as_bytes().to_vec(),
        r#type: attribute_type::STRING,
        ..Default::default()
    }
}

/// The nodes one operator stands for, under construction. Values it makes are named
/// `<first output>\0<node>\0<k>` (no model value has a NUL), its nodes `<node>/<k>_<op>`.
pub(super) struct Expansion {
    node: String,
    base: String,
    opset: i64,
    nodes: Vec<Pending>,
    k: usize,
}

impl Expansion {
    /// An empty expansion of node `n`.
    pub(super) fn new(im: &Importer, n: &Node<'_>) -> Self {
        // The node's name too: an expansion's own nodes may expand again (a
        // `DynamicQuantizeLSTM` into an `LSTM`, then its steps) and write the same output.
        let base = match n.proto.output.iter().find(|o| !o.is_empty()) {
            Some(out) => format!("{out}\u{0}{}", n.name),
            None => n.name.clone(),
        };
        Self {
            node: n.name.clone(),
            base,
            opset: im.opset,
            nodes: Vec::new(),
            k: 0,
        }
    }

    /// The model's `ai.onnx` opset.
    pub(super) fn opset(&self) -> i64 {
        self.opset
    }

    /// A new value name.
    pub(super) fn fresh(&mut self) -> String {
        self.k += 1;
        format!("{}\u{0}{}", self.base, self.k)
    }

    /// Appends node `op` (of the default domain) reading `inputs` (`""` for an absent
    /// optional one) and writing `outputs`.
    pub(super) fn node_into(
        &mut self,
        op: &str,
        inputs: &[&str],
        attrs: Vec<AttributeProto>,
        outputs: &[&str],
    ) {
        self.k += 1;
        let proto = NodeProto {
            input: inputs.iter().map(|s| (*s).to_owned()).collect(),
            output: outputs.iter().map(|s| (*s).to_owned()).collect(),
            op_type: op.to_owned(),
            attribute: attrs,
            ..Default::default()
        };
        let name = format!("{}/{}_{op}", self.node, self.k);
        self.nodes.push(Pending::node(proto, name));
    }

    /// Appends node `op` with one new output, whose name it returns.
    pub(super) fn op(&mut self, op: &str, inputs: &[&str], attrs: Vec<AttributeProto>) -> String {
        let out = self.fresh();
        self.node_into(op, inputs, attrs, &[&out]);
        out
    }

    /// `Identity` from `from` to the node's own output `to`.
    pub(super) fn bind(&mut self, from: &str, to: &str) {
        self.node_into("Identity", &[from], Vec::new(), &[to]);
    }

    fn constant(&mut self, t: TensorProto) -> String {
        let a = AttributeProto {
            name: "value".to_owned(),
            t: Some(t),
            r#type: attribute_type::TENSOR,
            ..Default::default()
        };
        self.op("Constant", &[], vec![a])
    }

    /// An int64 constant of shape `dims`.
    pub(super) fn i64s(&mut self, values: &[i64], dims: &[i64]) -> String {
        self.constant(TensorProto {
            dims: dims.to_vec(),
            data_type: data_type::INT64,
            int64_data: values.to_vec(),
            ..Default::default()
        })
    }

    /// A 1-D int64 constant.
    pub(super) fn i64v(&mut self, values: &[i64]) -> String {
        self.i64s(values, &[values.len() as i64])
    }

    /// A float32 constant of shape `dims`.
    pub(super) fn f32s(&mut self, values: &[f32], dims: &[i64]) -> String {
        self.f32s_owned(values.to_vec(), dims)
    }

    /// [`Expansion::f32s`] of values the caller gives up (no copy: large weights).
    pub(super) fn f32s_owned(&mut self, values: Vec<f32>, dims: &[i64]) -> String {
        self.constant(TensorProto {
            dims: dims.to_vec(),
            data_type: data_type::FLOAT,
            float_data: values,
            ..Default::default()
        })
    }

    /// A float32 constant of shape `dims` in `x`'s type (`elem`): cast like `x` where that is
    /// another float type.
    pub(super) fn f32s_like(&mut self, values: &[f32], dims: &[i64], x: &str, elem: i32) -> String {
        let c = self.f32s(values, dims);
        if elem == data_type::FLOAT {
            c
        } else {
            self.op("CastLike", &[&c, x], Vec::new())
        }
    }

    /// A float scalar of `x`'s type (a float32 constant, cast like `x` where its type
    /// `elem` is another).
    pub(super) fn scalar_like(&mut self, v: f32, x: &str, elem: i32) -> String {
        self.f32s_like(&[v], &[], x, elem)
    }

    /// `op` (`ReduceMean`, `ReduceSum`, `ReduceMax`, …) of `x` over `axes`, in the form the
    /// opset has (axes an attribute, or an input from opset 18; `ReduceSum`'s from 13).
    pub(super) fn reduce(&mut self, op: &str, x: &str, axes: &[i64], keepdims: bool) -> String {
        let input_from = if op == "ReduceSum" { 13 } else { 18 };
        let keep = int("keepdims", i64::from(keepdims));
        if self.opset >= input_from {
            let a = self.i64v(axes);
            self.op(op, &[x, &a], vec![keep])
        } else {
            self.op(op, &[x], vec![ints("axes", axes), keep])
        }
    }

    /// `Unsqueeze` (axes an input from opset 13).
    pub(super) fn unsqueeze(&mut self, x: &str, axes: &[i64]) -> String {
        if self.opset >= 13 {
            let a = self.i64v(axes);
            self.op("Unsqueeze", &[x, &a], Vec::new())
        } else {
            self.op("Unsqueeze", &[x], vec![ints("axes", axes)])
        }
    }

    /// `Squeeze` (axes an input from opset 13).
    pub(super) fn squeeze(&mut self, x: &str, axes: &[i64]) -> String {
        if self.opset >= 13 {
            let a = self.i64v(axes);
            self.op("Squeeze", &[x, &a], Vec::new())
        } else {
            self.op("Squeeze", &[x], vec![ints("axes", axes)])
        }
    }

    /// `Slice` of `x` from `starts` to `ends` along `axes`, step 1 (inputs from opset 10).
    pub(super) fn slice(&mut self, x: &str, starts: &[i64], ends: &[i64], axes: &[i64]) -> String {
        if self.opset >= 10 {
            let (s, e, a) = (self.i64v(starts), self.i64v(ends), self.i64v(axes));
            self.op("Slice", &[x, &s, &e, &a], Vec::new())
        } else {
            self.op(
                "Slice",
                &[x],
                vec![
                    ints("starts", starts),
                    ints("ends", ends),
                    ints("axes", axes),
                ],
            )
        }
    }

    /// `Slice` of `x` along `axis` from `start` to `end` by `step` (opset 10's steps).
    pub(super) fn slice_step(
        &mut self,
        x: &str,
        start: i64,
        end: i64,
        axis: i64,
        step: i64,
    ) -> String {
        if step == 1 {
            return self.slice(x, &[start], &[end], &[axis]);
        }
        let (s, e, a, st) = (
            self.i64v(&[start]),
            self.i64v(&[end]),
            self.i64v(&[axis]),
            self.i64v(&[step]),
        );
        self.op("Slice", &[x, &s, &e, &a, &st], Vec::new())
    }

    /// `Reshape` of `x` to `shape` (0 copies, -1 infers, as ONNX's).
    pub(super) fn reshape(&mut self, x: &str, shape: &[i64]) -> String {
        let s = self.i64v(shape);
        self.op("Reshape", &[x, &s], Vec::new())
    }

    /// `Transpose` of `x` by `perm`.
    pub(super) fn transpose(&mut self, x: &str, perm: &[i64]) -> String {
        self.op("Transpose", &[x], vec![ints("perm", perm)])
    }

    /// `Softmax` over the last axis of `x` (the same in every opset).
    pub(super) fn softmax_last(&mut self, x: &str, rank: usize) -> String {
        let axis = if self.opset >= 13 {
            -1
        } else {
            rank as i64 - 1
        };
        self.op("Softmax", &[x], vec![int("axis", axis)])
    }

    /// The nodes, in order.
    pub(super) fn finish(self) -> Vec<Pending> {
        self.nodes
    }
}
