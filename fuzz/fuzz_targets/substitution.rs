//! Fuzz target: whatever a backend hands back from `optimize_subgraph` (substitutions over any
//! layer ids, with any inputs, outputs, names and descriptors; failed ids; no answer at all),
//! the host's round validates it without panicking, and everything it accepts applies to the
//! network: the rewritten network builds, has the expected number of layers, and every failed
//! layer it hands back was given to that backend.
#![no_main]

use std::cell::Cell;

use backplane::{
    NetworkBuilder,
    api::{
        ActivationDescriptor, ActivationFunction, BinaryOperation, DataType, LayerDescriptor,
        OptimizationViews, PreCompiledDescriptor, SubgraphLayer, SubgraphView, Substitution,
        TensorInfo,
    },
    graph::substitution::{self, NoAnswer, SubgraphJudge},
};
use libfuzzer_sys::fuzz_target;

/// Reads the fuzz input a byte at a time (zeros once it runs out).
struct Bytes<'a> {
    data: &'a [u8],
    at: Cell<usize>,
}

impl Bytes<'_> {
    fn next(&self) -> u8 {
        let i = self.at.get();
        self.at.set(i + 1);
        self.data.get(i).copied().unwrap_or(0)
    }
    fn below(&self, n: usize) -> usize {
        usize::from(self.next()) % n.max(1)
    }
    fn ids(&self) -> Vec<u32> {
        (0..self.below(5)).map(|_| u32::from(self.next() % 24)).collect()
    }
}

const BACKENDS: [&str; 2] = ["Fz", "Other"];

/// A backend whose answers come from the fuzz input.
struct Judge<'a>(&'a Bytes<'a>);

impl SubgraphJudge for Judge<'_> {
    fn optimize(
        &self,
        _: &str,
        subgraph: &SubgraphView<'_>,
        _: &backplane_api::BackendOptions,
    ) -> Result<OptimizationViews, NoAnswer> {
        let b = self.0;
        if b.below(8) == 0 {
            return Err(NoAnswer {
                message: "no answer".into(),
                give_back: b.next() % 2 == 0,
            });
        }
        let names = ["f0", "f1", "in", "", "a3"];
        let substitutions = (0..b.below(4))
            .map(|_| {
                // Mostly layers of this subgraph, sometimes anything.
                let mut replaced = b.ids();
                if b.next() % 2 == 0 && !subgraph.layers.is_empty() {
                    let from = b.below(subgraph.layers.len());
                    let len = 1 + b.below(subgraph.layers.len() - from);
                    replaced = subgraph.layers[from..from + len].iter().map(|l| l.id).collect();
                }
                let descriptor = match b.below(3) {
                    0 => LayerDescriptor::Activation(ActivationDescriptor {
                        function: ActivationFunction::ReLU,
                        a: 0.0,
                        b: 0.0,
                    }),
                    k => LayerDescriptor::PreCompiled(PreCompiledDescriptor {
                        backend: BACKENDS[k - 1].into(),
                        operation: "Fused".into(),
                        payload: vec![b.next()].into(),
                    }),
                };
                let (inputs, outputs) = if b.next() % 2 == 0 {
                    (subgraph.inputs.clone(), subgraph.outputs.clone())
                } else {
                    (b.ids().into(), b.ids().into())
                };
                Substitution {
                    replaced: replaced.into(),
                    replacement: SubgraphLayer {
                        id: u32::from(b.next()),
                        name: names[b.below(names.len())].into(),
                        descriptor,
                        inputs,
                        outputs,
                    },
                }
            })
            .collect();
        Ok(OptimizationViews {
            substitutions,
            failed: b.ids().into(),
            untouched: b.ids().into(),
        })
    }

    fn supports(
        &self,
        _: &str,
        _: &LayerDescriptor,
        _: &[TensorInfo],
        _: &[TensorInfo],
    ) -> Result<(), String> {
        if self.0.below(6) == 0 { Err("no".into()) } else { Ok(()) }
    }
}

fuzz_target!(|data: &[u8]| {
    let b = Bytes { data, at: Cell::new(0) };
    // A random DAG of Add and ReLU layers over one [4] input.
    let mut builder = NetworkBuilder::new();
    let mut tensors = vec![builder
        .add_input("in", TensorInfo::new(&[4], DataType::Float32))
        .expect("input")];
    for i in 0..1 + b.below(12) {
        let pick = |b: &Bytes<'_>| tensors[tensors.len() - 1 - b.below(tensors.len())];
        let (descriptor, inputs) = if b.next() % 2 == 0 {
            (LayerDescriptor::ElementwiseBinary(BinaryOperation::Add), vec![pick(&b), pick(&b)])
        } else {
            (
                LayerDescriptor::Activation(ActivationDescriptor {
                    function: ActivationFunction::ReLU,
                    a: 0.0,
                    b: 0.0,
                }),
                vec![pick(&b)],
            )
        };
        tensors.push(builder.add_layer(&format!("l{i}"), descriptor, &inputs).expect("layer"));
    }
    let last = *tensors.last().expect("non-empty");
    builder.add_output("out", last).expect("output");
    if b.next() % 2 == 0 && tensors.len() > 2 {
        builder.add_output("out2", tensors[1 + b.below(tensors.len() - 2)]).expect("output");
    }
    let network = builder.build().expect("network");
    let backends: Vec<String> = (0..network.layers().len())
        .map(|_| BACKENDS[b.below(4).min(1)].to_owned())
        .collect();

    let result = substitution::round(&network, &backends, &Judge(&b), &Default::default());
    for (layer, backend) in &result.failed {
        assert_eq!(&backends[*layer], backend, "layer {layer} handed back by a backend it was not given to");
    }
    for a in &result.accepted {
        assert!(a.replaced.iter().all(|&i| backends[i] == a.backend));
    }
    if result.accepted.is_empty() {
        return;
    }
    let (rewritten, origin) =
        substitution::apply(&network, &result.accepted).expect("accepted substitutions apply");
    let replaced: usize = result.accepted.iter().map(|a| a.replaced.len()).sum();
    assert_eq!(
        rewritten.layers().len(),
        network.layers().len() - replaced + result.accepted.len()
    );
    assert_eq!(origin.len(), rewritten.layers().len());
});
