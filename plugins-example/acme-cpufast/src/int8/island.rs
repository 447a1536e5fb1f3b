//! A float island between quantised tensors, fused: `Dequantize(a)`, `Dequantize(b)`, a
//! Float32 `Add` of the same shape, an optional `ReLU`, then `Quantize` (ResNet's residual
//! `Sum` + `Relu`, which onnxruntime's quantiser leaves in float) becomes one CpuFast
//! `PreCompiled` layer computing each step in f32 exactly as the separate layers do
//! ([`DequantAddQuant`]), so its bytes are theirs.
//!
//! A unary island — `Dequantize`, steps that are each a binary operation (Add, Sub, Mul,
//! Div) with a one-element Float32 constant or a ReLU/BoundedReLU, then `Quantize`
//! (PP-OCRv4's HardSigmoid and its Div by 6) — is a function of the input byte: it becomes a
//! 256-entry table made by applying the steps to the 256 dequantised values as the Float32
//! layers compute them.
//!
//! Payload: `[ISLAND_MAGIC, 1 (version), 0 (kind: add), relu as 0/1]`, or for a unary
//! island `[ISLAND_MAGIC, 1, 1, steps, ...]`, each step `[0, op, constant slot, constant
//! first]` or `[1, bounded, a: f32, b: f32]`. [`FusedOp`]'s payloads
//! start with their version (2), so the first byte tells them apart.
//!
//! [`FusedOp`]: crate::fused_op::FusedOp

use std::collections::BTreeSet;

use backplane_api::{
    ActivationDescriptor, ActivationFunction, BackendError, BackendResult, BinaryOperation,
    DataType, LayerDescriptor, LayerId, PreCompiledDescriptor, SubgraphLayer, SubgraphView,
    Substitution, TensorId, TensorInfo, TensorView, TensorViewMut, Workload,
};
use backplane_backend_kit::graph::Graph;

use super::{
    QTensor,
    kernels::{DequantAddQuant, Isa, dequant_add_quant_row, lookup_row},
};
use crate::{
    CPU_FAST_ID,
    gemm::{for_each_part, worth},
    workloads::{MIN_PARALLEL_ELEMENTS, Signature},
};

/// The first payload byte of an island.
pub(crate) const ISLAND_MAGIC: u8 = b'Q';

/// Whether `payload` is an island's.
pub(crate) fn is_island(payload: &[u8]) -> bool {
    payload.first() == Some(&ISLAND_MAGIC)
}

/// The island's ReLU flag from its payload, or why the payload is not one this build reads.
fn decode(payload: &[u8]) -> Result<bool, String> {
    match payload {
        [ISLAND_MAGIC, 1, 0, relu @ (0 | 1)] => Ok(*relu == 1),
        _ => Err(format!(
            "not a quantized island payload this build reads: {payload:?}"
        )),
    }
}

/// The kernel's parameters for inputs `a`, `b` and output `y`, or why CpuFast cannot.
fn plan(
    relu: bool,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<DequantAddQuant, String> {
    let ([a, b], [y]) = (inputs, outputs) else {
        return Err("an island has two inputs and one output".to_owned());
    };
    if a.shape != y.shape || b.shape != y.shape {
        return Err(format!(
            "an island adds tensors of one shape, got {a}, {b} into {y}"
        ));
    }
    let q = |t: &TensorInfo| -> Result<QTensor, String> {
        let q = QTensor::of(t)?;
        if q.axis.is_some() || t.data_type == DataType::QSymmS8 {
            return Err(format!("{t} must be QAsymmU8/QAsymmS8 per tensor"));
        }
        Ok(q)
    };
    let (qa, qb, qy) = (q(a)?, q(b)?, q(y)?);
    let side = |q: &QTensor| {
        let (flip, zp) = q.as_u8();
        (flip, zp, q.scales[0])
    };
    let (lo, hi) = qy.range();
    Ok(DequantAddQuant {
        a: side(&qa),
        b: side(&qb),
        relu,
        y_scale: qy.scales[0],
        y_zp: qy.zp,
        lo,
        hi,
    })
}

/// Why CpuFast cannot run the island `p`, or `Ok`.
pub(crate) fn check(
    p: &PreCompiledDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
    plan(decode(&p.payload)?, inputs, outputs).map(drop)
}

/// An island's workload.
#[derive(Debug)]
struct IslandWorkload {
    op: DequantAddQuant,
    len: usize,
    isa: Isa,
    signature: Signature,
    threads: usize,
}

impl Workload for IslandWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let (a, b) = (inputs[0].data.as_slice(), inputs[1].data.as_slice());
        let y = outputs[0].data.as_mut_slice();
        if a.len() != self.len || b.len() != self.len || y.len() != self.len {
            return Err(BackendError::invalid_argument("buffer sizes differ"));
        }
        let parts = worth(y.len(), MIN_PARALLEL_ELEMENTS, self.threads);
        let per = y.len().div_ceil(parts.max(1)).max(1);
        for_each_part(
            parts,
            a.chunks(per).zip(b.chunks(per)).zip(y.chunks_mut(per)),
            |((a, b), y)| dequant_add_quant_row(self.isa, &self.op, a, b, y),
        );
        Ok(())
    }
}

/// The workload of the island `p`.
pub(crate) fn create(
    p: &PreCompiledDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
    signature: Signature,
    threads: usize,
) -> Result<Box<dyn Workload>, String> {
    let op = plan(decode(&p.payload)?, inputs, outputs)?;
    Ok(Box::new(IslandWorkload {
        op,
        len: outputs[0].num_elements().unwrap_or(0),
        isa: Isa::detect(),
        signature,
        threads,
    }))
}

/// The islands of `view` (none of their layers in `taken`), as substitutions; their layers
/// are added to `taken`.
pub(crate) fn find(view: &SubgraphView<'_>, taken: &mut BTreeSet<LayerId>) -> Vec<Substitution> {
    let g = Graph::new(view);
    let (info, producer, sole) = (
        |t: TensorId| g.info(t),
        |t: TensorId| g.producer(t),
        |t: TensorId| g.sole_consumer(t),
    );
    let mut found = Vec::new();
    for quantize in &view.layers {
        let (LayerDescriptor::Quantize(_), [t], [out]) = (
            &quantize.descriptor,
            quantize.inputs.as_slice(),
            quantize.outputs.as_slice(),
        ) else {
            continue;
        };
        let Some(mut prev) = producer(*t) else {
            continue;
        };
        let mut chain = vec![quantize];
        let mut relu = false;
        if let LayerDescriptor::Activation(a) = &prev.descriptor {
            if a.function != ActivationFunction::ReLU
                || sole(prev.outputs[0]).map(|l| l.id) != Some(quantize.id)
            {
                continue;
            }
            relu = true;
            chain.push(prev);
            let Some(p) = producer(prev.inputs[0]) else {
                continue;
            };
            prev = p;
        }
        let add = prev;
        let (LayerDescriptor::ElementwiseBinary(BinaryOperation::Add), [x, y]) =
            (&add.descriptor, add.inputs.as_slice())
        else {
            continue;
        };
        let next = chain.last().map(|l| l.id);
        if x == y || sole(add.outputs[0]).map(|l| l.id) != next {
            continue;
        }
        chain.push(add);
        let mut sources = Vec::new();
        for &operand in [x, y] {
            let Some(dq) = producer(operand).filter(|l| {
                matches!(l.descriptor, LayerDescriptor::Dequantize)
                    && sole(operand).map(|c| c.id) == Some(add.id)
            }) else {
                break;
            };
            sources.push(dq.inputs[0]);
            chain.push(dq);
        }
        if sources.len() != 2 || chain.iter().any(|l| taken.contains(&l.id)) {
            continue;
        }
        let payload = vec![ISLAND_MAGIC, 1, 0, u8::from(relu)];
        let descriptor = LayerDescriptor::PreCompiled(PreCompiledDescriptor {
            backend: CPU_FAST_ID.into(),
            operation: if relu {
                "QuantizedAddRelu"
            } else {
                "QuantizedAdd"
            }
            .into(),
            payload: payload.clone().into(),
        });
        let (Some(ia), Some(ib), Some(io)) = (info(sources[0]), info(sources[1]), info(*out))
        else {
            continue;
        };
        if let Err(why) = plan(relu, &[ia.clone(), ib.clone()], std::slice::from_ref(io)) {
            log::debug!("CpuFast: not fusing the island at {}: {why}", add.name);
            continue;
        }
        log::info!("CpuFast: fusing the quantized island at {}", add.name);
        taken.extend(chain.iter().map(|l| l.id));
        found.push(Substitution {
            replaced: chain.iter().map(|l| l.id).collect(),
            replacement: SubgraphLayer {
                id: 0,
                name: format!("{}+island", add.name).into(),
                descriptor,
                inputs: sources.into(),
                outputs: vec![*out].into(),
            },
        });
    }
    found
}

/// One step of a unary island: a binary operation with a one-element Float32 constant (in
/// input slot `slot`, the left operand when `constant_first`), or a ReLU/BoundedReLU.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    Binary {
        op: BinaryOperation,
        slot: u8,
        constant_first: bool,
    },
    Activation(ActivationDescriptor),
}

const OPS: [BinaryOperation; 4] = [
    BinaryOperation::Add,
    BinaryOperation::Sub,
    BinaryOperation::Mul,
    BinaryOperation::Div,
];

fn encode_unary(steps: &[Step]) -> Vec<u8> {
    let mut p = vec![ISLAND_MAGIC, 1, 1, steps.len() as u8];
    for s in steps {
        match *s {
            Step::Binary {
                op,
                slot,
                constant_first,
            } => {
                let tag = OPS.iter().position(|&o| o == op).expect("an island op") as u8;
                p.extend([0, tag, slot, u8::from(constant_first)]);
            }
            Step::Activation(a) => {
                p.extend([1, u8::from(a.function == ActivationFunction::BoundedReLU)]);
                p.extend(a.a.to_le_bytes());
                p.extend(a.b.to_le_bytes());
            }
        }
    }
    p
}

fn decode_unary(payload: &[u8]) -> Result<Vec<Step>, String> {
    let bad = || format!("not a unary island payload this build reads: {payload:?}");
    let [ISLAND_MAGIC, 1, 1, n, rest @ ..] = payload else {
        return Err(bad());
    };
    let mut rest = rest;
    let mut steps = Vec::new();
    for _ in 0..*n {
        match rest {
            [0, tag, slot, first @ (0 | 1), tail @ ..] if usize::from(*tag) < OPS.len() => {
                steps.push(Step::Binary {
                    op: OPS[usize::from(*tag)],
                    slot: *slot,
                    constant_first: *first == 1,
                });
                rest = tail;
            }
            [1, f @ (0 | 1), a0, a1, a2, a3, b0, b1, b2, b3, tail @ ..] => {
                steps.push(Step::Activation(ActivationDescriptor {
                    function: if *f == 1 {
                        ActivationFunction::BoundedReLU
                    } else {
                        ActivationFunction::ReLU
                    },
                    a: f32::from_le_bytes([*a0, *a1, *a2, *a3]),
                    b: f32::from_le_bytes([*b0, *b1, *b2, *b3]),
                }));
                rest = tail;
            }
            _ => return Err(bad()),
        }
    }
    if rest.is_empty() {
        Ok(steps)
    } else {
        Err(bad())
    }
}

/// Checks a unary island's tensors: a quantised input and output of one shape, per tensor,
/// and a one-element Float32 constant in each slot a step names.
fn check_unary(
    steps: &[Step],
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
    let ([x, ..], [y]) = (inputs, outputs) else {
        return Err("a unary island has a data input and one output".to_owned());
    };
    if x.shape != y.shape {
        return Err(format!("a unary island keeps the shape, got {x} into {y}"));
    }
    for t in [x, y] {
        let q = QTensor::of(t)?;
        if q.axis.is_some() {
            return Err(format!("{t} must be quantized per tensor"));
        }
    }
    for s in steps {
        if let Step::Binary { slot, .. } = s {
            let c = inputs
                .get(usize::from(*slot))
                .filter(|_| *slot > 0)
                .ok_or("a step names a missing input")?;
            if c.data_type != DataType::Float32 || !c.is_constant || c.num_elements() != Some(1) {
                return Err(format!("{c} must be a one-element Float32 constant"));
            }
        }
    }
    Ok(())
}

/// A unary island's workload: a table of the output byte of every input byte.
#[derive(Debug)]
struct TableWorkload {
    table: [u8; 256],
    isa: Isa,
    signature: Signature,
    threads: usize,
}

impl Workload for TableWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let (x, y) = (inputs[0].data.as_slice(), outputs[0].data.as_mut_slice());
        if x.len() != y.len() {
            return Err(BackendError::invalid_argument("buffer sizes differ"));
        }
        let parts = worth(y.len(), MIN_PARALLEL_ELEMENTS, self.threads);
        let per = y.len().div_ceil(parts.max(1)).max(1);
        for_each_part(parts, x.chunks(per).zip(y.chunks_mut(per)), |(x, y)| {
            lookup_row(self.isa, &self.table, x, y);
        });
        Ok(())
    }
}

/// The workload of a unary island: each step applied to the 256 dequantised values as the
/// separate Float32 layers compute it, then quantised.
fn create_unary(
    desc: &backplane_api::WorkloadDesc<'_>,
    steps: &[Step],
    threads: usize,
) -> Result<Box<dyn Workload>, String> {
    check_unary(steps, &desc.inputs, &desc.outputs)?;
    let (qx, qy) = (
        QTensor::of(&desc.inputs[0])?,
        QTensor::of(&desc.outputs[0])?,
    );
    let mut v: Vec<f32> = (0..=255u8)
        .map(|b| qx.value(b) as f32 * qx.scales[0])
        .collect();
    for s in steps {
        match *s {
            Step::Binary {
                op,
                slot,
                constant_first,
            } => {
                let bytes = desc
                    .constant(usize::from(slot))
                    .map(|c| c.data.as_slice())
                    .filter(|b| b.len() == 4)
                    .ok_or("a step's constant is missing")?;
                let c = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                let f = |x: f32, y: f32| match op {
                    BinaryOperation::Add => x + y,
                    BinaryOperation::Sub => x - y,
                    BinaryOperation::Mul => x * y,
                    _ => x / y,
                };
                for x in &mut v {
                    *x = if constant_first { f(c, *x) } else { f(*x, c) };
                }
            }
            Step::Activation(a) => crate::workloads::activation::apply(&a, &mut v),
        }
    }
    let (lo, hi) = qy.range();
    let table = std::array::from_fn(|b| {
        let r = (v[b] / qy.scales[0]).round_ties_even();
        let r = if r.is_nan() { 0.0 } else { r };
        (r.clamp((lo - qy.zp) as f32, (hi - qy.zp) as f32) as i32 + qy.zp) as u8
    });
    Ok(Box::new(TableWorkload {
        table,
        isa: Isa::detect(),
        signature: Signature::of(desc),
        threads,
    }))
}

/// Why CpuFast cannot run the island `p` (either kind), or `Ok`.
pub(crate) fn check_any(
    p: &PreCompiledDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
    match p.payload.get(2) {
        Some(1) => check_unary(&decode_unary(&p.payload)?, inputs, outputs),
        _ => check(p, inputs, outputs),
    }
}

/// The workload of the island `p` (either kind).
pub(crate) fn create_any(
    desc: &backplane_api::WorkloadDesc<'_>,
    p: &PreCompiledDescriptor,
    threads: usize,
) -> Result<Box<dyn Workload>, String> {
    match p.payload.get(2) {
        Some(1) => create_unary(desc, &decode_unary(&p.payload)?, threads),
        _ => create(p, &desc.inputs, &desc.outputs, Signature::of(desc), threads),
    }
}

/// The unary islands of `view`: `Dequantize`, then steps (a binary operation with a
/// one-element Float32 constant, a ReLU or BoundedReLU), then `Quantize`, every
/// intermediate tensor read once; as substitutions, their layers added to `taken`.
pub(crate) fn find_unary(
    view: &SubgraphView<'_>,
    taken: &mut BTreeSet<LayerId>,
) -> Vec<Substitution> {
    let g = Graph::new(view);
    let (tensor, producer) = (|t: TensorId| g.tensor(t), |t: TensorId| g.producer(t));
    let sole = |t: TensorId| g.sole_consumer(t).map(|l| l.id);
    let mut found = Vec::new();
    for quantize in &view.layers {
        let (LayerDescriptor::Quantize(_), [t], [out]) = (
            &quantize.descriptor,
            quantize.inputs.as_slice(),
            quantize.outputs.as_slice(),
        ) else {
            continue;
        };
        let (mut t, mut next) = (*t, quantize.id);
        let mut chain = vec![quantize];
        // The steps from the Quantize backwards, with their constants.
        let mut back: Vec<(Step, Option<TensorId>)> = Vec::new();
        let source = loop {
            let Some(l) = producer(t).filter(|_| sole(t) == Some(next)) else {
                break None;
            };
            match (&l.descriptor, l.inputs.as_slice()) {
                (LayerDescriptor::Dequantize, [x]) => {
                    chain.push(l);
                    break Some(*x);
                }
                (LayerDescriptor::Activation(a), [x])
                    if matches!(
                        a.function,
                        ActivationFunction::ReLU | ActivationFunction::BoundedReLU
                    ) =>
                {
                    back.push((Step::Activation(*a), None));
                    (t, next) = (*x, l.id);
                }
                (LayerDescriptor::ElementwiseBinary(op), &[a, b]) if OPS.contains(op) && a != b => {
                    let (x, c, constant_first) = match (tensor(a), tensor(b)) {
                        (_, Some(cb)) if cb.value.is_some() => (a, b, false),
                        (Some(ca), _) if ca.value.is_some() => (b, a, true),
                        _ => break None,
                    };
                    let ok = tensor(c).is_some_and(|ct| {
                        ct.info.data_type == DataType::Float32 && ct.info.num_elements() == Some(1)
                    }) && tensor(x)
                        .is_some_and(|xt| xt.info.data_type == DataType::Float32);
                    if !ok {
                        break None;
                    }
                    back.push((
                        Step::Binary {
                            op: *op,
                            slot: 0,
                            constant_first,
                        },
                        Some(c),
                    ));
                    (t, next) = (x, l.id);
                }
                _ => break None,
            }
            chain.push(l);
            if back.len() > 16 {
                break None;
            }
        };
        let Some(source) = source else {
            continue;
        };
        if back.is_empty() || chain.iter().any(|l| taken.contains(&l.id)) {
            continue;
        }
        // Inputs: the quantised source, then each constant once.
        let mut inputs = vec![source];
        let steps: Vec<Step> = back
            .iter()
            .rev()
            .map(|&(s, c)| match (s, c) {
                (
                    Step::Binary {
                        op, constant_first, ..
                    },
                    Some(c),
                ) => {
                    let slot = inputs.iter().position(|&i| i == c).unwrap_or_else(|| {
                        inputs.push(c);
                        inputs.len() - 1
                    });
                    Step::Binary {
                        op,
                        slot: slot as u8,
                        constant_first,
                    }
                }
                (s, _) => s,
            })
            .collect();
        let infos: Option<Vec<TensorInfo>> = inputs
            .iter()
            .map(|&i| tensor(i).map(|t| t.info.clone()))
            .collect();
        let (Some(infos), Some(out_info)) = (infos, tensor(*out).map(|t| t.info.clone())) else {
            continue;
        };
        if inputs.len() > 255
            || check_unary(&steps, &infos, std::slice::from_ref(&out_info)).is_err()
        {
            continue;
        }
        log::info!(
            "CpuFast: fusing the quantized unary island at {}",
            quantize.name
        );
        taken.extend(chain.iter().map(|l| l.id));
        found.push(Substitution {
            replaced: chain.iter().map(|l| l.id).collect(),
            replacement: SubgraphLayer {
                id: 0,
                name: format!("{}+table", quantize.name).into(),
                descriptor: LayerDescriptor::PreCompiled(PreCompiledDescriptor {
                    backend: CPU_FAST_ID.into(),
                    operation: "QuantizedTable".into(),
                    payload: encode_unary(&steps).into(),
                }),
                inputs: inputs.into(),
                outputs: vec![*out].into(),
            },
        });
    }
    found
}
