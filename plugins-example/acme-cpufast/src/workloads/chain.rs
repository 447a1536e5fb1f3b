//! The workload of Convolution2d, DepthwiseConvolution2d, FullyConnected and BatchMatMul,
//! alone or as the head of a fused chain (see `fused_op.rs`): head, then activation, then
//! pooling, in one pass over memory the arena lends.
//!
//! A stand-alone layer reads its weights and bias at every execution (so they need not be
//! constant). A fused chain folds its parameters when the workload is created: batch norm
//! into the weights and bias, the added bias into the bias; they must be constant.

use std::sync::Arc;

use backplane_api::{
    BackendResult, DataType, TensorInfo, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::{
    Signature,
    activation::{Epilogue, add_then},
    batch_matmul::BmmGeometry,
    batch_norm::affine,
    constant_f32,
    conv_geometry::ConvGeometry,
    fully_connected::FcGeometry,
    invalid_layer,
    pooling::PoolGeometry,
    winograd::Winograd,
};
use crate::{
    fused_op::{FusedOp, Head},
    gemm::PackedB,
    memory::Arena,
    prepared::Prepared,
};

/// How a chain gets its weights and bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parameters {
    /// From the inputs at every execution (a stand-alone layer).
    AtExecution,
    /// Folded from constant inputs when the workload is created (a fused chain).
    Folded,
}

/// The weights and bias as the workload holds them.
#[derive(Debug)]
enum Params {
    AtExecution {
        weights: usize,
        bias: Option<usize>,
    },
    Folded {
        /// Empty when the kernel holds them in a form of its own (Winograd, `packed`); shared
        /// with every workload of this process folded to the same ([`crate::prepared`]).
        weights: Arc<Prepared>,
        bias: Option<Vec<f32>>,
        /// The weights packed for products with few rows (fully connected, batch matmul).
        packed: Option<PackedB>,
    },
}

/// The head's kernel.
#[derive(Debug)]
enum HeadKernel {
    Convolution(ConvGeometry),
    /// A 3×3 convolution with folded weights, transformed for Winograd's algorithm.
    Winograd(Winograd),
    FullyConnected(FcGeometry),
    BatchMatMul(BmmGeometry),
}

impl HeadKernel {
    fn out_len(&self) -> usize {
        match self {
            HeadKernel::Convolution(g) => g.out_len(),
            HeadKernel::Winograd(k) => k.geometry().out_len(),
            HeadKernel::FullyConnected(g) => g.out_len(),
            HeadKernel::BatchMatMul(g) => g.out_len(),
        }
    }

    fn scratch_len(&self, threads: usize) -> usize {
        match self {
            HeadKernel::Convolution(g) => g.scratch_len(threads),
            HeadKernel::Winograd(k) => k.scratch_len(),
            HeadKernel::FullyConnected(_) | HeadKernel::BatchMatMul(_) => 0,
        }
    }
}

/// A head with optional epilogue (activation, affine) and pooling.
#[derive(Debug)]
pub(crate) struct ChainWorkload {
    head: HeadKernel,
    params: Params,
    epilogue: Option<Epilogue>,
    /// The input slot of an added residual tensor.
    residual: Option<usize>,
    pool: Option<PoolGeometry>,
    signature: Signature,
    arena: Arc<Arena>,
    threads: usize,
}

/// `values` (one element or one per channel) as one value per channel.
fn per_channel(values: Vec<f32>, channels: usize) -> Vec<f32> {
    match values.as_slice() {
        &[v] => vec![v; channels],
        _ => values,
    }
}

/// Multiplies each output channel's weights (`weights` holds `channels` equal rows, one per
/// output channel) by its `factor`.
fn scale_weights(weights: &mut [f32], factor: &[f32], channels: usize) {
    let per_out = (weights.len() / channels.max(1)).max(1);
    for (row, &f) in weights.chunks_exact_mut(per_out).zip(factor) {
        row.iter_mut().for_each(|w| *w *= f);
    }
}

/// The bytes of `op`'s constant weights.
fn weight_bytes<'d>(desc: &'d WorkloadDesc<'_>, op: &FusedOp) -> BackendResult<&'d [u8]> {
    backplane_backend_kit::constants::constant_bytes(desc, op.weights as usize)
        .map_err(|e| invalid_layer(desc, e))
}

/// The bias of `op` when nothing scales its weights (no batch norm, no scale): the head's
/// plus the added one.
fn unscaled_bias(
    desc: &WorkloadDesc<'_>,
    op: &FusedOp,
    channels: usize,
) -> BackendResult<Option<Vec<f32>>> {
    let constant = |slot: u32| constant_f32(desc, slot as usize);
    let bias = op.head_bias.map(constant).transpose()?;
    Ok(match op.bias {
        None => bias,
        Some(slot) => {
            let added = per_channel(constant(slot)?, channels);
            Some(match bias {
                Some(b) => b.iter().zip(&added).map(|(x, y)| x + y).collect(),
                None => added,
            })
        }
    })
}

/// The panels of a product's weights that nothing scales, when its kernel packs them: found
/// by the constant's digest, the weights read only when no workload of this process holds
/// the panels yet.
fn packed_as_given(
    desc: &WorkloadDesc<'_>,
    op: &FusedOp,
    head: &HeadKernel,
    channels: usize,
) -> BackendResult<Option<Params>> {
    if op.batch_norm.is_some() || op.scale.is_some() {
        return Ok(None);
    }
    let packed = match head {
        HeadKernel::FullyConnected(g) => g.pack_bytes(weight_bytes(desc, op)?),
        HeadKernel::BatchMatMul(g) => g.pack_bytes(weight_bytes(desc, op)?),
        _ => None,
    };
    Ok(match packed {
        Some(packed) => Some(Params::Folded {
            weights: Prepared::own(Vec::new()),
            bias: unscaled_bias(desc, op, channels)?,
            packed: Some(packed),
        }),
        None => None,
    })
}

/// The weights and bias of `op` folded from `desc`'s constants.
fn fold(desc: &WorkloadDesc<'_>, op: &FusedOp, channels: usize) -> BackendResult<Params> {
    let constant = |slot: u32| constant_f32(desc, slot as usize);
    if op.batch_norm.is_none() && op.scale.is_none() {
        // The weights as they are: shared from the constant's bytes, copied only when no
        // workload of this process holds them yet.
        return Ok(Params::Folded {
            weights: crate::prepared::shared_bytes(
                "folded",
                [channels, 0, 0],
                weight_bytes(desc, op)?,
            ),
            bias: unscaled_bias(desc, op, channels)?,
            packed: None,
        });
    }
    let mut weights = constant(op.weights)?;
    let mut bias = op.head_bias.map(constant).transpose()?;
    if let Some(bn) = &op.batch_norm {
        let [scale, shift, mean, variance] = bn.slots.map(constant);
        let (factor, shift) = affine(&scale?, &shift?, &mean?, &variance?, bn.epsilon);
        scale_weights(&mut weights, &factor, channels);
        let old = bias.unwrap_or_else(|| vec![0.0; channels]);
        bias = Some(
            old.iter()
                .zip(&factor)
                .zip(&shift)
                .map(|((&b, &f), &s)| b * f + s)
                .collect(),
        );
    }
    if let Some(slot) = op.scale {
        let factor = per_channel(constant(slot)?, channels);
        scale_weights(&mut weights, &factor, channels);
        if let Some(b) = &mut bias {
            b.iter_mut().zip(&factor).for_each(|(b, &f)| *b *= f);
        }
    }
    if let Some(slot) = op.bias {
        let added = per_channel(constant(slot)?, channels);
        bias = Some(match bias {
            Some(b) => b.iter().zip(&added).map(|(x, y)| x + y).collect(),
            None => added,
        });
    }
    Ok(Params::Folded {
        weights: crate::prepared::shared_owned("folded", [channels, 0, 0], weights),
        bias,
        packed: None,
    })
}

/// What [`plan`] found a chain's tensors to be.
#[derive(Debug)]
pub(crate) struct Plan {
    head: HeadKernel,
    pool: Option<PoolGeometry>,
    /// Channels (or features) of the head's output.
    channels: usize,
}

/// Checks chain `op` against its tensors (layer support and workload creation both ask).
pub(crate) fn plan(
    op: &FusedOp,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<Plan, String> {
    let shapes = op.check(inputs, outputs)?;
    let head_out = TensorInfo::new(&shapes.head_out, DataType::Float32);
    let (x, w) = (&inputs[0], &inputs[op.weights as usize]);
    let head = match &op.head {
        Head::Convolution(_) | Head::Depthwise(_) => {
            ConvGeometry::new(&op.head.descriptor(), x, w, &head_out).map(HeadKernel::Convolution)
        }
        Head::FullyConnected(d) => {
            FcGeometry::new(d, x, w, &head_out).map(HeadKernel::FullyConnected)
        }
        Head::BatchMatMul(d) => BmmGeometry::new(d, x, w, &head_out).map(HeadKernel::BatchMatMul),
    }?;
    let pool = op
        .pool
        .as_ref()
        .map(|p| PoolGeometry::new(p, &head_out, &outputs[0]))
        .transpose()?;
    Ok(Plan {
        head,
        pool,
        channels: op.head.channels(&shapes.head_out) as usize,
    })
}

/// Creates the workload of chain `op` for `desc`, taking scratch from `arena`.
pub(crate) fn create(
    desc: &WorkloadDesc<'_>,
    op: &FusedOp,
    parameters: Parameters,
    arena: Arc<Arena>,
    threads: usize,
) -> BackendResult<Box<dyn Workload>> {
    let Plan {
        head,
        pool,
        channels,
    } = plan(op, &desc.inputs, &desc.outputs).map_err(|e| invalid_layer(desc, e))?;
    // A stand-alone 3×3 convolution with constant weights and bias is prepared once, as a
    // fused chain is, so that Winograd's transform of its weights is made here.
    let constant = |slot: Option<u32>| slot.is_none_or(|s| desc.constant(s as usize).is_some());
    let parameters = match &head {
        HeadKernel::Convolution(g)
            if Winograd::fits(g) && constant(Some(op.weights)) && constant(op.head_bias) =>
        {
            Parameters::Folded
        }
        _ => parameters,
    };
    let mut params = match parameters {
        Parameters::AtExecution => Params::AtExecution {
            weights: op.weights as usize,
            bias: op.head_bias.map(|s| s as usize),
        },
        Parameters::Folded => match packed_as_given(desc, op, &head, channels)? {
            Some(params) => params,
            None => fold(desc, op, channels)?,
        },
    };
    // Folded weights are prepared once, here, for the kernel that runs them: Winograd's
    // transform for a 3×3 convolution that suits it, panels for a product with few rows. The
    // prepared form replaces the weights.
    let head = match (head, &mut params) {
        (HeadKernel::Convolution(g), Params::Folded { weights, .. }) if Winograd::fits(&g) => {
            let kernel = Winograd::new(&g, weights);
            *weights = Prepared::own(Vec::new());
            HeadKernel::Winograd(kernel)
        }
        (
            head,
            Params::Folded {
                weights, packed, ..
            },
        ) if packed.is_none() => {
            *packed = match &head {
                HeadKernel::FullyConnected(g) => g.pack(weights),
                HeadKernel::BatchMatMul(g) => g.pack(weights),
                _ => None,
            };
            if packed.is_some() {
                *weights = Prepared::own(Vec::new());
            }
            head
        }
        // Stand-alone, or packed already.
        (head, _) => head,
    };
    let one = |slot: Option<u32>| -> BackendResult<Option<f32>> {
        slot.map(|s| Ok(constant_f32(desc, s as usize)?[0]))
            .transpose()
    };
    let workload = ChainWorkload {
        head,
        params,
        epilogue: Epilogue::of(op.activation, one(op.post_scale)?, one(op.post_shift)?),
        residual: op.residual.map(|s| s as usize),
        pool,
        signature: Signature::of(desc),
        arena,
        threads,
    };
    workload.arena.reserve(workload.scratch_len());
    Ok(Box::new(workload))
}

impl ChainWorkload {
    /// Scratch for one execution: the head's, then the head's output when a pooling follows.
    fn scratch_len(&self) -> usize {
        self.head.scratch_len(self.threads) + self.pool.as_ref().map_or(0, |_| self.head.out_len())
    }

    /// The head and the activation into `out`.
    #[allow(
        clippy::too_many_arguments,
        reason = "operands (raw and packed weights), bias, residual, output and scratch"
    )]
    fn run_head(
        &self,
        x: &[f32],
        w: &[f32],
        packed: Option<&PackedB>,
        bias: Option<&[f32]>,
        residual: Option<&[f32]>,
        out: &mut [f32],
        scratch: &mut [f32],
    ) {
        let epilogue = self.epilogue.as_ref();
        match &self.head {
            // The convolutions apply them themselves (the depthwise kernel per plane or per
            // band of rows, while they are in the L1 cache).
            HeadKernel::Convolution(g) => {
                return g.run(x, w, bias, residual, epilogue, out, scratch, self.threads);
            }
            HeadKernel::Winograd(k) => {
                let Some(r) = residual else {
                    return k.run(x, bias, epilogue, out, scratch, self.threads);
                };
                k.run(x, bias, None, out, scratch, self.threads);
                return add_then(out, r, epilogue);
            }
            HeadKernel::FullyConnected(g) => g.run(x, w, packed, bias, out, self.threads),
            HeadKernel::BatchMatMul(g) => g.run(x, w, packed, bias, out, self.threads),
        }
        match residual {
            Some(r) => add_then(out, r, epilogue),
            None => {
                if let Some(e) = epilogue {
                    e.apply(out);
                }
            }
        }
    }
}

impl Workload for ChainWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let x = inputs[0].as_f32()?;
        let (w, packed, bias) = match &self.params {
            Params::AtExecution { weights, bias } => (
                inputs[*weights].as_f32()?,
                None,
                bias.map(|s| inputs[s].as_f32()).transpose()?,
            ),
            Params::Folded {
                weights,
                packed,
                bias,
            } => (&weights[..], packed.as_ref(), bias.as_deref()),
        };
        let residual = self.residual.map(|s| inputs[s].as_f32()).transpose()?;
        let out = outputs[0].as_f32_mut()?;
        let len = self.scratch_len();
        let mut lent = (len > 0).then(|| self.arena.scratch(len));
        let scratch: &mut [f32] = lent.as_deref_mut().unwrap_or(&mut []);
        let (head_scratch, mid) = scratch.split_at_mut(self.head.scratch_len(self.threads));
        match &self.pool {
            None => self.run_head(x, w, packed, bias, residual, out, head_scratch),
            Some(pool) => {
                self.run_head(x, w, packed, bias, residual, mid, head_scratch);
                pool.run(mid, out, self.threads);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "chain_tests.rs"]
mod tests;
