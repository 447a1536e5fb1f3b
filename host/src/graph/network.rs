//! Networks: a builder for every v1 layer with named inputs and outputs, constant tensors,
//! and shape and type inference. Every error names the layer and says what is wrong, before
//! anything runs.
//!
//! Layers are added in order and refer to tensors returned by earlier calls, so a network is
//! acyclic and every input is connected by construction; a [`TensorRef`] from another builder
//! is refused.

use std::{
    collections::HashSet,
    fmt,
    ops::Range,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use backplane_api::{
    ConstTensor, LayerDescriptor, LayerKind, Quantization, ROption, RSlice, RStr, TensorInfo,
    WorkloadDesc, shapes,
};

/// Index of a layer in its network.
pub type LayerIndex = usize;

/// A tensor: output `slot` of layer `layer` of the builder `network`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TensorRef {
    network: u64,
    /// The producing layer.
    pub layer: LayerIndex,
    /// Its output slot.
    pub slot: usize,
}

/// Bytes held by another owner and shared, never copied: a constant's section of a mapped
/// compiled network file ([`crate::compiled`]).
#[derive(Clone)]
pub struct SharedBytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    range: Range<usize>,
}

impl SharedBytes {
    /// The bytes `range` of `owner`; `None` when the range is not inside it.
    pub fn new(owner: Arc<dyn AsRef<[u8]> + Send + Sync>, range: Range<usize>) -> Option<Self> {
        (range.start <= range.end && range.end <= (*owner).as_ref().len())
            .then_some(Self { owner, range })
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.range.clone()]
    }
}

impl fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedBytes({:?})", self.range)
    }
}

impl PartialEq for SharedBytes {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}

/// A layer's workload description's parts ([`Network::workload_inputs`]).
#[derive(Debug)]
pub struct WorkloadInputs<'a> {
    layer: &'a Layer,
    /// The input tensors, in slot order.
    pub infos: Vec<TensorInfo>,
    /// The value of each input that is constant, in slot order.
    pub values: Vec<Option<&'a [u8]>>,
    constants: Vec<ROption<RSlice<'a, u8>>>,
}

impl WorkloadInputs<'_> {
    /// The description a workload factory takes.
    pub fn desc(&self) -> WorkloadDesc<'_> {
        WorkloadDesc {
            name: RStr::from_str(&self.layer.name),
            layer: &self.layer.descriptor,
            inputs: RSlice::from_slice(&self.infos),
            outputs: RSlice::from_slice(&self.layer.outputs),
            constants: RSlice::from_slice(&self.constants),
        }
    }
}

/// One layer of a network.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    /// Its name, unique in the network.
    pub name: String,
    /// Kind and parameters, shared: cloning a network (as the optimizer's rebuilds do)
    /// shares every layer's descriptor, constants' bytes included, instead of copying them.
    pub descriptor: Arc<LayerDescriptor>,
    /// The tensors it reads, in slot order.
    pub inputs: Vec<TensorRef>,
    /// The tensors it writes (inferred).
    pub outputs: Vec<TensorInfo>,
    /// For a Constant whose value is held outside its descriptor (a section of a mapped
    /// compiled network): its bytes; the descriptor's `data` is then empty. Read a
    /// constant's value with [`Layer::constant_bytes`].
    pub shared: Option<SharedBytes>,
}

impl Layer {
    /// The layer's kind.
    pub fn kind(&self) -> LayerKind {
        self.descriptor.kind()
    }

    /// A Constant's value, wherever it is held; `None` for other layers.
    pub fn constant_bytes(&self) -> Option<&[u8]> {
        match (&*self.descriptor, &self.shared) {
            (LayerDescriptor::Constant(_), Some(shared)) => Some(shared.bytes()),
            (LayerDescriptor::Constant(c), None) => Some(c.data.as_slice()),
            _ => None,
        }
    }

    /// A Constant's descriptor with its value in it: the descriptor itself, or, for a value
    /// held outside it, a copy with the bytes (for a backend that needs them in the
    /// descriptor: one that runs out of process).
    pub fn full_descriptor(&self) -> LayerDescriptor {
        match (&*self.descriptor, &self.shared) {
            (LayerDescriptor::Constant(c), Some(shared)) => {
                LayerDescriptor::Constant(ConstTensor {
                    info: c.info.clone(),
                    data: shared.bytes().to_vec().into(),
                })
            }
            (d, _) => d.clone(),
        }
    }

    /// Whether the layer computes something: not an Input, Output or Constant, nor a MemCopy
    /// the optimizer inserted.
    pub fn computes(&self) -> bool {
        !matches!(
            self.kind(),
            LayerKind::Input | LayerKind::Output | LayerKind::Constant | LayerKind::MemCopy
        )
    }
}

/// Why a network could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetworkError {
    /// A layer's inputs do not fit its descriptor (shape inference failed).
    #[error("layer {layer} ({kind}): {reason}")]
    InvalidLayer {
        /// The layer's name.
        layer: String,
        /// Its kind.
        kind: LayerKind,
        /// What is wrong.
        reason: String,
    },
    /// Two layers share a name.
    #[error("layer name {0:?} is used twice")]
    DuplicateName(String),
    /// An input refers to a tensor of another builder, or to a slot that does not exist.
    #[error("layer {layer}: input {slot} is not a tensor of this network")]
    DanglingInput {
        /// The layer's name.
        layer: String,
        /// The input slot.
        slot: usize,
    },
    /// Input and Output layers are added with `add_input` / `add_output`.
    #[error("layer {0}: add Input and Output layers with add_input and add_output")]
    MisplacedIo(String),
    /// The network has no output.
    #[error("the network has no output")]
    NoOutputs,
}

static NEXT_NETWORK: AtomicU64 = AtomicU64::new(1);

/// Builds a [`Network`].
#[derive(Debug)]
pub struct NetworkBuilder {
    id: u64,
    layers: Vec<Layer>,
    names: HashSet<String>,
}

impl Default for NetworkBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl NetworkBuilder {
    /// An empty network.
    pub fn new() -> Self {
        Self {
            id: NEXT_NETWORK.fetch_add(1, Ordering::Relaxed),
            layers: Vec::new(),
            names: HashSet::new(),
        }
    }

    fn info(&self, t: TensorRef) -> Option<&TensorInfo> {
        (t.network == self.id)
            .then(|| self.layers.get(t.layer)?.outputs.get(t.slot))
            .flatten()
    }

    fn push(
        &mut self,
        name: &str,
        descriptor: Arc<LayerDescriptor>,
        inputs: &[TensorRef],
        quantization: Option<Quantization>,
    ) -> Result<LayerIndex, NetworkError> {
        if self.names.contains(name) {
            return Err(NetworkError::DuplicateName(name.to_owned()));
        }
        let mut infos = Vec::with_capacity(inputs.len());
        for (slot, &t) in inputs.iter().enumerate() {
            let info = self.info(t).ok_or_else(|| NetworkError::DanglingInput {
                layer: name.to_owned(),
                slot,
            })?;
            infos.push(info.clone());
        }
        let invalid = |reason: String| NetworkError::InvalidLayer {
            layer: name.to_owned(),
            kind: descriptor.kind(),
            reason,
        };
        let mut outputs = shapes::output_infos(&descriptor, &infos).map_err(invalid)?;
        // A MemCopy's output is its input in another memory: a copy of a constant (into a
        // device backend's memory) is still a constant to the layer that reads it.
        if let (LayerDescriptor::MemCopy, [input], [out]) =
            (&*descriptor, infos.as_slice(), outputs.as_mut_slice())
        {
            out.is_constant = input.is_constant;
        }
        if let Some(q) = quantization {
            match outputs.first_mut() {
                Some(out) if out.data_type.is_quantized() => out.quantization = Some(q).into(),
                _ => {
                    return Err(invalid(format!(
                        "quantization parameters given for a {} output",
                        outputs
                            .first()
                            .map_or("missing".to_owned(), |o| o.data_type.to_string())
                    )));
                }
            }
        }
        for out in &outputs {
            out.check_quantization().map_err(invalid)?;
        }
        self.names.insert(name.to_owned());
        self.layers.push(Layer {
            name: name.to_owned(),
            descriptor,
            inputs: inputs.to_vec(),
            outputs,
            shared: None,
        });
        Ok(self.layers.len() - 1)
    }

    fn output(&self, layer: LayerIndex) -> TensorRef {
        TensorRef {
            network: self.id,
            layer,
            slot: 0,
        }
    }

    /// Adds a network input called `name` (also the layer's name).
    pub fn add_input(&mut self, name: &str, info: TensorInfo) -> Result<TensorRef, NetworkError> {
        if self.names.contains(name) {
            return Err(NetworkError::DuplicateName(name.to_owned()));
        }
        info.check_quantization()
            .map_err(|reason| NetworkError::InvalidLayer {
                layer: name.to_owned(),
                kind: LayerKind::Input,
                reason,
            })?;
        self.names.insert(name.to_owned());
        self.layers.push(Layer {
            name: name.to_owned(),
            descriptor: Arc::new(LayerDescriptor::Input(name.into())),
            inputs: vec![],
            outputs: vec![info],
            shared: None,
        });
        Ok(self.output(self.layers.len() - 1))
    }

    /// Adds a constant tensor (weights, biases).
    pub fn add_constant(
        &mut self,
        name: &str,
        value: ConstTensor,
    ) -> Result<TensorRef, NetworkError> {
        let i = self.push(name, Arc::new(LayerDescriptor::Constant(value)), &[], None)?;
        Ok(self.output(i))
    }

    /// [`NetworkBuilder::add_constant`] with a `Constant` descriptor other networks may hold
    /// too (an importer's shared weights).
    pub(crate) fn add_shared_constant(
        &mut self,
        name: &str,
        descriptor: Arc<LayerDescriptor>,
    ) -> Result<TensorRef, NetworkError> {
        if !matches!(*descriptor, LayerDescriptor::Constant(_)) {
            return Err(NetworkError::MisplacedIo(name.to_owned()));
        }
        let i = self.push(name, descriptor, &[], None)?;
        Ok(self.output(i))
    }

    /// Adds a layer reading `inputs`; returns its (single) output.
    pub fn add_layer(
        &mut self,
        name: &str,
        descriptor: LayerDescriptor,
        inputs: &[TensorRef],
    ) -> Result<TensorRef, NetworkError> {
        self.add_shared_layer(name, Arc::new(descriptor), inputs, None)
    }

    /// Adds a layer whose output is quantised with `output` (Backend API 1.2): a `Quantize`,
    /// `Requantize`, or a computing layer on quantised inputs, whose output parameters are the
    /// network's choice, not inferred. Refused when the output is not of a quantised type or
    /// the parameters do not fit it ([`TensorInfo::check_quantization`]).
    pub fn add_quantized_layer(
        &mut self,
        name: &str,
        descriptor: LayerDescriptor,
        inputs: &[TensorRef],
        output: Quantization,
    ) -> Result<TensorRef, NetworkError> {
        self.add_shared_layer(name, Arc::new(descriptor), inputs, Some(output))
    }

    /// [`NetworkBuilder::add_layer`] with a descriptor another network may hold too.
    fn add_shared_layer(
        &mut self,
        name: &str,
        descriptor: Arc<LayerDescriptor>,
        inputs: &[TensorRef],
        quantization: Option<Quantization>,
    ) -> Result<TensorRef, NetworkError> {
        if matches!(
            *descriptor,
            LayerDescriptor::Input(_) | LayerDescriptor::Output(_) | LayerDescriptor::Constant(_)
        ) {
            return Err(NetworkError::MisplacedIo(name.to_owned()));
        }
        let i = self.push(name, descriptor, inputs, quantization)?;
        Ok(self.output(i))
    }

    /// Adds a backend-specific layer (made by the optimizer from a substitution) whose output
    /// shapes only its backend knows.
    pub(crate) fn add_precompiled(
        &mut self,
        name: &str,
        descriptor: Arc<LayerDescriptor>,
        inputs: &[TensorRef],
        output: TensorInfo,
    ) -> Result<TensorRef, NetworkError> {
        if self.names.contains(name) {
            return Err(NetworkError::DuplicateName(name.to_owned()));
        }
        for (slot, &t) in inputs.iter().enumerate() {
            self.info(t).ok_or_else(|| NetworkError::DanglingInput {
                layer: name.to_owned(),
                slot,
            })?;
        }
        self.names.insert(name.to_owned());
        self.layers.push(Layer {
            name: name.to_owned(),
            descriptor,
            inputs: inputs.to_vec(),
            outputs: vec![output],
            shared: None,
        });
        Ok(self.output(self.layers.len() - 1))
    }

    /// Adds `layer` (from another network) reading `inputs`, sharing its descriptor (a
    /// constant's bytes are not copied): how the optimizer rebuilds a network after rewriting
    /// it.
    pub(crate) fn re_add(
        &mut self,
        layer: &Layer,
        inputs: &[TensorRef],
    ) -> Result<TensorRef, NetworkError> {
        match &*layer.descriptor {
            LayerDescriptor::Input(_) => self.add_input(&layer.name, layer.outputs[0].clone()),
            LayerDescriptor::Constant(c) => {
                let Some(shared) = &layer.shared else {
                    let i = self.push(&layer.name, Arc::clone(&layer.descriptor), &[], None)?;
                    return Ok(self.output(i));
                };
                // Its value is held outside its descriptor: the checks `push` makes of a
                // descriptor's bytes, made of the shared ones.
                let invalid = |reason: String| NetworkError::InvalidLayer {
                    layer: layer.name.clone(),
                    kind: LayerKind::Constant,
                    reason,
                };
                if self.names.contains(&layer.name) {
                    return Err(NetworkError::DuplicateName(layer.name.clone()));
                }
                if c.info.num_bytes() != Some(shared.bytes().len()) || !c.data.is_empty() {
                    return Err(invalid(format!(
                        "constant {} holds {} bytes",
                        c.info,
                        shared.bytes().len()
                    )));
                }
                c.info.check_quantization().map_err(invalid)?;
                self.names.insert(layer.name.clone());
                self.layers.push(Layer {
                    name: layer.name.clone(),
                    descriptor: Arc::clone(&layer.descriptor),
                    inputs: vec![],
                    outputs: vec![c.info.clone().constant()],
                    shared: Some(shared.clone()),
                });
                Ok(self.output(self.layers.len() - 1))
            }
            LayerDescriptor::Output(_) => {
                self.add_output(&layer.name, inputs[0]).map(|()| inputs[0])
            }
            LayerDescriptor::PreCompiled(_) => self.add_precompiled(
                &layer.name,
                Arc::clone(&layer.descriptor),
                inputs,
                layer.outputs[0].clone(),
            ),
            _ => {
                // A quantised output keeps the parameters the network gave it.
                let quantization = layer.outputs[0]
                    .data_type
                    .is_quantized()
                    .then(|| layer.outputs[0].quantization.clone().into_option())
                    .flatten();
                self.add_shared_layer(
                    &layer.name,
                    Arc::clone(&layer.descriptor),
                    inputs,
                    quantization,
                )
            }
        }
    }

    /// Output `slot` of layer `layer` of this builder, if it has one.
    pub(crate) fn tensor(&self, layer: LayerIndex, slot: usize) -> Option<TensorRef> {
        let t = TensorRef {
            network: self.id,
            layer,
            slot,
        };
        self.info(t).is_some().then_some(t)
    }

    /// Marks `tensor` as the network output called `name` (also the layer's name).
    pub fn add_output(&mut self, name: &str, tensor: TensorRef) -> Result<(), NetworkError> {
        self.push(
            name,
            Arc::new(LayerDescriptor::Output(name.into())),
            &[tensor],
            None,
        )?;
        Ok(())
    }

    /// The shape and type of a tensor added so far.
    pub fn tensor_info(&self, tensor: TensorRef) -> Option<&TensorInfo> {
        self.info(tensor)
    }

    /// Finishes the network.
    pub fn build(self) -> Result<Network, NetworkError> {
        if !self.layers.iter().any(|l| l.kind() == LayerKind::Output) {
            return Err(NetworkError::NoOutputs);
        }
        Ok(Network {
            id: self.id,
            layers: self.layers,
        })
    }
}

/// A validated network: layers in a topological order (the order they were added).
#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    id: u64,
    layers: Vec<Layer>,
}

impl Network {
    /// The layers, in topological order.
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// The shape and type of a tensor.
    pub fn tensor_info(&self, t: TensorRef) -> &TensorInfo {
        &self.layers[t.layer].outputs[t.slot]
    }

    /// The network's inputs: `(name, info)` in the order they were added.
    pub fn inputs(&self) -> Vec<(&str, &TensorInfo)> {
        self.io(LayerKind::Input)
            .map(|l| (l.name.as_str(), &l.outputs[0]))
            .collect()
    }

    /// The network's outputs: `(name, info)` in the order they were added.
    pub fn outputs(&self) -> Vec<(&str, &TensorInfo)> {
        self.io(LayerKind::Output)
            .map(|l| (l.name.as_str(), &l.outputs[0]))
            .collect()
    }

    fn io(&self, kind: LayerKind) -> impl Iterator<Item = &Layer> {
        self.layers.iter().filter(move |l| l.kind() == kind)
    }

    /// The tensor layer `layer` writes.
    pub fn output_of(&self, layer: LayerIndex) -> TensorRef {
        TensorRef {
            network: self.id,
            layer,
            slot: 0,
        }
    }

    /// The value of tensor `t` when it is constant: the bytes of the Constant layer that
    /// writes it, through any MemCopy between them (a copy of a constant into a device
    /// backend's memory, or for a backend that does not share host memory, is still a
    /// constant to the layer that reads it).
    pub fn constant_value(&self, t: TensorRef) -> Option<&[u8]> {
        let mut at = t.layer;
        while self.layers.get(at)?.kind() == LayerKind::MemCopy {
            at = self.layers[at].inputs.first()?.layer;
        }
        self.layers[at].constant_bytes()
    }

    /// What a backend is handed to make (or prepare) the workload of `layer`, a layer of this
    /// network: its input tensors and the value of each that is constant
    /// ([`Network::constant_value`]).
    pub fn workload_inputs<'a>(&'a self, layer: &'a Layer) -> WorkloadInputs<'a> {
        let values: Vec<Option<&[u8]>> = layer
            .inputs
            .iter()
            .map(|&t| self.constant_value(t))
            .collect();
        WorkloadInputs {
            layer,
            infos: layer
                .inputs
                .iter()
                .map(|&t| self.tensor_info(t).clone())
                .collect(),
            constants: values
                .iter()
                .map(|v| v.map(RSlice::from_slice).into())
                .collect(),
            values,
        }
    }

    /// The layers that read output `slot` of layer `layer`.
    pub fn consumers(&self, t: TensorRef) -> impl Iterator<Item = (LayerIndex, usize)> + '_ {
        self.layers.iter().enumerate().flat_map(move |(i, l)| {
            l.inputs
                .iter()
                .enumerate()
                .filter(move |(_, x)| **x == t)
                .map(move |(slot, _)| (i, slot))
        })
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for l in &self.layers {
            let ins: Vec<String> = l
                .inputs
                .iter()
                .map(|t| self.layers[t.layer].name.clone())
                .collect();
            writeln!(
                f,
                "{} {} <- [{}] -> {}",
                l.kind(),
                l.name,
                ins.join(", "),
                l.outputs[0]
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{
        BinaryOperation, ConcatDescriptor, Convolution2dDescriptor, DataType, SoftmaxDescriptor,
    };

    use super::*;

    fn f32t(s: &[u32]) -> TensorInfo {
        TensorInfo::new(s, DataType::Float32)
    }

    #[test]
    fn builds_and_infers_shapes() {
        let mut b = NetworkBuilder::new();
        let x = b.add_input("x", f32t(&[1, 3, 8, 8])).unwrap();
        let w = b
            .add_constant("w", ConstTensor::from_f32(&[4, 3, 3, 3], &[0.5; 108]))
            .unwrap();
        let conv = LayerDescriptor::Convolution2d(Convolution2dDescriptor::default());
        let y = b.add_layer("conv", conv, &[x, w]).unwrap();
        assert_eq!(b.tensor_info(y).unwrap().shape.as_slice(), [1, 4, 6, 6]);
        b.add_output("y", y).unwrap();
        let n = b.build().unwrap();
        assert_eq!(n.inputs(), vec![("x", &f32t(&[1, 3, 8, 8]))]);
        assert_eq!(n.outputs()[0].1.shape.as_slice(), [1, 4, 6, 6]);
        assert_eq!(n.consumers(x).collect::<Vec<_>>(), vec![(2, 0)]);
    }

    #[test]
    fn errors_name_the_layer() {
        let mut b = NetworkBuilder::new();
        let x = b.add_input("x", f32t(&[1, 3, 8, 8])).unwrap();
        let w = b
            .add_constant("w", ConstTensor::from_f32(&[4, 2, 3, 3], &[0.5; 72]))
            .unwrap();
        let conv = LayerDescriptor::Convolution2d(Convolution2dDescriptor::default());
        assert_eq!(
            b.add_layer("conv", conv, &[x, w]).unwrap_err().to_string(),
            "layer conv (Convolution2d): weights [4, 2, 3, 3] expect 2 input channels, the input has 3"
        );
        let sm = LayerDescriptor::Softmax(SoftmaxDescriptor { beta: 1.0, axis: 4 });
        assert_eq!(
            b.add_layer("sm", sm, &[x]).unwrap_err().to_string(),
            "layer sm (Softmax): axis 4 is out of range for rank 4"
        );
        let cat = LayerDescriptor::Concat(ConcatDescriptor { axis: 1 });
        let y = b.add_input("y", f32t(&[2, 3, 8, 8])).unwrap();
        assert!(matches!(
            b.add_layer("cat", cat, &[x, y]),
            Err(NetworkError::InvalidLayer { .. })
        ));
        assert_eq!(
            b.add_input("x", f32t(&[1])).unwrap_err(),
            NetworkError::DuplicateName("x".into())
        );

        let mut other = NetworkBuilder::new();
        let foreign = other.add_input("z", f32t(&[1, 3, 8, 8])).unwrap();
        let add = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
        assert_eq!(
            b.add_layer("add", add, &[x, foreign]).unwrap_err(),
            NetworkError::DanglingInput {
                layer: "add".into(),
                slot: 1
            }
        );
        assert_eq!(b.build().unwrap_err(), NetworkError::NoOutputs);
    }

    /// Rebuilding a network (as the optimizer does after every rewrite) shares each layer's
    /// descriptor: a constant's bytes are not copied, and neither is any other layer's.
    #[test]
    fn re_add_shares_descriptors() {
        let mut b = NetworkBuilder::new();
        let x = b
            .add_input("x", TensorInfo::new(&[1, 4], DataType::Float32))
            .unwrap();
        let w = b
            .add_constant("w", ConstTensor::from_f32(&[1, 4], &[1.0, 2.0, 3.0, 4.0]))
            .unwrap();
        let y = b
            .add_layer(
                "add",
                LayerDescriptor::ElementwiseBinary(backplane_api::BinaryOperation::Add),
                &[x, w],
            )
            .unwrap();
        b.add_output("y", y).unwrap();
        let first = b.build().unwrap();
        let mut again = NetworkBuilder::new();
        let mut outs: Vec<TensorRef> = Vec::new();
        for layer in first.layers() {
            let inputs: Vec<TensorRef> = layer.inputs.iter().map(|t| outs[t.layer]).collect();
            outs.push(again.re_add(layer, &inputs).unwrap());
        }
        let second = again.build().unwrap();
        for (a, b) in first.layers().iter().zip(second.layers()) {
            let shared = Arc::ptr_eq(&a.descriptor, &b.descriptor);
            let expected = !matches!(
                *a.descriptor,
                LayerDescriptor::Input(_) | LayerDescriptor::Output(_)
            );
            assert_eq!(shared, expected, "{}", a.name);
        }
        let cloned = second.clone();
        assert!(Arc::ptr_eq(
            &cloned.layers()[1].descriptor,
            &first.layers()[1].descriptor
        ));
    }

    /// A quantized output's parameters are the network's: given with `add_quantized_layer`,
    /// checked, refused for a float output or without them, and kept when the network is
    /// rebuilt (the optimizer's `re_add`).
    #[test]
    fn quantized_outputs_take_given_parameters() {
        let q = |scale, offset| Quantization::per_tensor(scale, offset);
        let mut b = NetworkBuilder::new();
        let x = b.add_input("x", f32t(&[2, 3])).unwrap();
        let quantize = LayerDescriptor::Quantize(DataType::QAsymmU8);
        // A Quantize without parameters has an output no backend could read.
        assert_eq!(
            b.add_layer("bare", quantize.clone(), &[x]),
            Err(NetworkError::InvalidLayer {
                layer: "bare".into(),
                kind: LayerKind::Quantize,
                reason: "[2, 3] QAsymmU8 has no quantization parameters".into(),
            })
        );
        assert_eq!(
            b.add_quantized_layer("zp", quantize.clone(), &[x], q(0.5, 300)),
            Err(NetworkError::InvalidLayer {
                layer: "zp".into(),
                kind: LayerKind::Quantize,
                reason: "[2, 3] QAsymmU8: zero point 300 is outside 0..=255".into(),
            })
        );
        let relu = LayerDescriptor::Activation(backplane_api::ActivationDescriptor {
            function: backplane_api::ActivationFunction::ReLU,
            a: 0.0,
            b: 0.0,
        });
        assert_eq!(
            b.add_quantized_layer("float", relu.clone(), &[x], q(0.5, 0)),
            Err(NetworkError::InvalidLayer {
                layer: "float".into(),
                kind: LayerKind::Activation,
                reason: "quantization parameters given for a Float32 output".into(),
            })
        );
        let xq = b
            .add_quantized_layer("xq", quantize, &[x], q(0.5, 128))
            .unwrap();
        // An element-wise layer on it inherits the input's parameters unless given others.
        let same = b.add_layer("same", relu.clone(), &[xq]).unwrap();
        let other = b
            .add_quantized_layer("other", relu, &[xq], q(0.25, 0))
            .unwrap();
        let y = b
            .add_layer("y", LayerDescriptor::Dequantize, &[other])
            .unwrap();
        b.add_output("out", y).unwrap();
        b.add_output("same_out", same).unwrap();
        let first = b.build().unwrap();
        let params = |n: &Network, layer: &str| {
            n.layers()
                .iter()
                .find(|l| l.name == layer)
                .and_then(|l| l.outputs[0].quantization.clone().into_option())
        };
        assert_eq!(params(&first, "same"), Some(q(0.5, 128)));
        assert_eq!(params(&first, "other"), Some(q(0.25, 0)));
        let mut again = NetworkBuilder::new();
        let mut outs: Vec<TensorRef> = Vec::new();
        for layer in first.layers() {
            let inputs: Vec<TensorRef> = layer.inputs.iter().map(|t| outs[t.layer]).collect();
            outs.push(again.re_add(layer, &inputs).unwrap());
        }
        let second = again.build().unwrap();
        for layer in ["xq", "same", "other"] {
            assert_eq!(params(&second, layer), params(&first, layer), "{layer}");
        }
    }
}
