//! A float island between quantised tensors, fused: `Dequantize(a)`, `Dequantize(b)`, a
//! Float32 `Add` of the same shape, an optional `ReLU`, then `Quantize` (ResNet's residual
//! `Sum` + `Relu`, which onnxruntime's quantiser leaves in float) becomes one CpuFast
//! `PreCompiled` layer computing each step in f32 exactly as the separate layers do
//! ([`DequantAddQuant`]), so its bytes are theirs.
//!
//! Payload: `[ISLAND_MAGIC, 1 (version), 0 (kind: add), relu as 0/1]`. [`FusedOp`]'s payloads
//! start with their version (2), so the first byte tells them apart.
//!
//! [`FusedOp`]: crate::fused_op::FusedOp

use std::collections::BTreeSet;

use backplane_api::{
    ActivationFunction, BackendError, BackendResult, BinaryOperation, DataType, LayerDescriptor,
    LayerId, PreCompiledDescriptor, SubgraphLayer, SubgraphView, Substitution, TensorId,
    TensorInfo, TensorView, TensorViewMut, Workload,
};

use super::{
    QTensor,
    kernels::{DequantAddQuant, Isa, dequant_add_quant_row},
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
        if q.signed {
            (0x80, q.zp + 128, q.scales[0])
        } else {
            (0, q.zp, q.scales[0])
        }
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
    let info = |t: TensorId| view.tensors.iter().find(|x| x.id == t).map(|x| &x.info);
    let producer = |t: TensorId| view.layers.iter().find(|l| l.outputs.contains(&t));
    // `t`'s only reader, if it has one and is not read outside the subgraph.
    let sole = |t: TensorId| -> Option<&SubgraphLayer> {
        if view.outputs.contains(&t) {
            return None;
        }
        let mut readers = view.layers.iter().filter(|l| l.inputs.contains(&t));
        match (readers.next(), readers.next()) {
            (Some(l), None) => Some(l),
            _ => None,
        }
    };
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
