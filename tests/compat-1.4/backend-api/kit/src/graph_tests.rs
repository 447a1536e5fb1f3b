use backplane_api::{
    ActivationDescriptor, ActivationFunction, BinaryOperation, LayerDescriptor, RSlice,
    SubgraphTensor,
};

use super::*;

static BYTES: [u8; 16] = [0; 16];

fn tensor(id: TensorId, data_type: DataType, constant: bool) -> SubgraphTensor<'static> {
    SubgraphTensor {
        id,
        info: TensorInfo::new(&[4], data_type),
        value: constant.then(|| RSlice::from_slice(&BYTES)).into(),
    }
}

fn layer(
    id: LayerId,
    descriptor: LayerDescriptor,
    inputs: &[TensorId],
    outputs: &[TensorId],
) -> SubgraphLayer {
    SubgraphLayer {
        id,
        name: format!("l{id}").into(),
        descriptor,
        inputs: inputs.to_vec().into(),
        outputs: outputs.to_vec().into(),
    }
}

fn relu() -> LayerDescriptor {
    LayerDescriptor::Activation(ActivationDescriptor {
        function: ActivationFunction::ReLU,
        a: 0.0,
        b: 0.0,
    })
}

/// `x(0) + c(1) -> t2 -> relu -> t3`, `t3` read by a relu into `t4` and by a relu into `t5`
/// (an output); `c6` an Int32 constant, `t7` unknown to the view.
fn view() -> SubgraphView<'static> {
    let add = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
    SubgraphView {
        layers: vec![
            layer(10, add, &[0, 1], &[2]),
            layer(11, relu(), &[2], &[3]),
            layer(12, relu(), &[3], &[4]),
            layer(13, relu(), &[3], &[5]),
            layer(14, relu(), &[4], &[7]),
        ]
        .into(),
        tensors: vec![
            tensor(0, DataType::Float32, false),
            tensor(1, DataType::Float32, true),
            tensor(2, DataType::Float32, false),
            tensor(3, DataType::Float32, false),
            tensor(4, DataType::Float32, false),
            tensor(5, DataType::Float32, false),
            tensor(6, DataType::Signed32, true),
        ]
        .into(),
        inputs: vec![0].into(),
        outputs: vec![5].into(),
    }
}

#[test]
fn queries() {
    let v = view();
    let g = Graph::new(&v);
    assert_eq!(g.producer(2).map(|l| l.id), Some(10));
    assert_eq!(g.producer(0).map(|l| l.id), None);
    assert_eq!(g.consumers(3).map(|l| l.id).collect::<Vec<_>>(), [12, 13]);
    assert_eq!(g.sole_consumer(2).map(|l| l.id), Some(11));
    assert_eq!(g.sole_consumer(3).map(|l| l.id), None, "two readers");
    assert_eq!(g.sole_consumer(5).map(|l| l.id), None, "an output");
    assert_eq!(g.chain_successor(4).map(|l| l.id), Some(14));
    assert!(g.float_constant(1).is_some() && g.float_constant(0).is_none());
    assert!(g.float_constant(6).is_none() && g.has_value(6) && !g.has_value(0));
    assert_eq!(g.infos(&[0, 1]).map(|v| v.len()), Some(2));
    assert_eq!(g.infos(&[0, 7]), None);
}

/// The driver: a matcher's chain is taken, a chain over a taken layer is not, the rest is
/// untouched or failed as the support function says (a layer with an unknown tensor counts
/// as supported).
#[test]
fn greedy_driver() {
    let v = view();
    let only_relu = |l: &LayerDescriptor, _: &[TensorInfo], _: &[TensorInfo]| match l {
        LayerDescriptor::Activation(_) | LayerDescriptor::PreCompiled(_) => Support::Supported,
        _ => Support::unsupported("Acme: no"),
    };
    let mut fusion = GreedyFusion::new(&v);
    let mut asked = Vec::new();
    fusion.chains(|g, head, taken| {
        asked.push(head.id);
        // A relu with the relu reading its output.
        if !matches!(head.descriptor, LayerDescriptor::Activation(_)) {
            return None;
        }
        let next = g.chain_successor(head.outputs[0])?;
        assert!(!taken.contains(&head.id));
        let chain = Chain {
            name: format!("{}+{}", head.name, next.name),
            operation: "ReluRelu".to_owned(),
            payload: vec![1],
            replaced: vec![head.id, next.id],
            inputs: head.inputs.to_vec(),
            output: next.outputs[0],
        };
        g.substitution("Acme", chain, &only_relu)
    });
    // 11 -> 12 is no chain (3 has two readers); 12 -> 14 is, but 14's output is unknown.
    assert_eq!(asked, [10, 11, 12, 13, 14]);
    assert!(fusion.taken().is_empty());
    fusion.add([Substitution {
        replaced: vec![11, 12].into(),
        replacement: layer(0, relu(), &[2], &[4]),
    }]);
    fusion.chains(|_, head, _| {
        assert!(head.id != 11 && head.id != 12, "taken layers are not asked");
        Some(Substitution {
            replaced: vec![head.id, 12].into(),
            replacement: layer(0, relu(), &[], &[]),
        })
    });
    assert_eq!(fusion.taken().iter().copied().collect::<Vec<_>>(), [11, 12]);
    let views = fusion.finish("Acme", &only_relu);
    assert_eq!(views.substitutions.len(), 1);
    assert_eq!(views.untouched.as_slice(), [13, 14]);
    assert_eq!(views.failed.as_slice(), [10]);
}

#[test]
fn substitution_is_checked_by_the_support_function() {
    let v = view();
    let g = Graph::new(&v);
    let refuse =
        |_: &LayerDescriptor, _: &[TensorInfo], _: &[TensorInfo]| Support::unsupported("Acme: no");
    let make = |supported: SupportFn<'_>| {
        let chain = Chain {
            name: "l10+l11".to_owned(),
            operation: "AddRelu".to_owned(),
            payload: vec![1, 2],
            replaced: vec![10, 11],
            inputs: vec![0, 1],
            output: 3,
        };
        g.substitution("Acme", chain, supported)
    };
    assert!(make(&refuse).is_none());
    let s = make(&|_, _, _| Support::Supported).expect("accepted");
    assert_eq!(s.replaced.as_slice(), [10, 11]);
    assert_eq!(s.replacement.name.as_str(), "l10+l11");
    assert_eq!(s.replacement.inputs.as_slice(), [0, 1]);
    assert_eq!(s.replacement.outputs.as_slice(), [3]);
    assert!(matches!(&s.replacement.descriptor,
        LayerDescriptor::PreCompiled(p) if p.backend.as_str() == "Acme" && p.operation.as_str() == "AddRelu"));
}
