//! The CpuFast [`WorkloadFactory`]: checks layer support again (the host may ask for
//! anything), then builds the workload of the layer's kind. Convolutions, fully connected
//! layers, batch matmuls and fused `PreCompiled` layers share the chain workload.

use std::sync::Arc;

use backplane_api::{
    BackendError, BackendResult, LayerDescriptor, PreparedBlob, PreparedWorkload, Support,
    Workload, WorkloadDesc, WorkloadFactory,
};

use crate::{
    fused_op::FusedOp,
    int8,
    layer_support::is_layer_supported,
    memory::Arena,
    prepared,
    workloads::{
        activation, batch_norm,
        chain::{self, Parameters},
        elementwise, invalid_layer, layer_norm, mean, pooling, reshape, softmax,
        transpose_convolution,
    },
};

/// Creates CpuFast workloads; they take scratch memory from one arena.
#[derive(Debug)]
pub struct CpuFastWorkloadFactory {
    arena: Arc<Arena>,
    threads: usize,
}

impl CpuFastWorkloadFactory {
    /// A factory whose workloads borrow scratch from `arena` and use up to `threads` threads.
    pub fn new(arena: Arc<Arena>, threads: usize) -> Self {
        Self { arena, threads }
    }
}

impl WorkloadFactory for CpuFastWorkloadFactory {
    /// The weights this workload prepares (Winograd's transformed filters, packed panels,
    /// folded weights), recorded while it is created: restoring them skips the transforms
    /// and the digests that find shared ones. `None` for a workload that prepares nothing.
    fn prepare_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Option<PreparedWorkload>> {
        let (made, blob) = prepared::record(|| self.create_workload(desc));
        made?;
        Ok(blob.map(|bytes| PreparedWorkload {
            version: prepared::BLOB_VERSION,
            bytes: bytes.into(),
        }))
    }

    fn restore_workload(
        &self,
        desc: &WorkloadDesc<'_>,
        blob: PreparedBlob<'_>,
    ) -> BackendResult<Box<dyn Workload>> {
        if blob.version != prepared::BLOB_VERSION {
            return Err(BackendError::unsupported(format!(
                "layer {}: prepared workload of format {}, CpuFast reads format {}",
                desc.name,
                blob.version,
                prepared::BLOB_VERSION
            )));
        }
        prepared::replay(blob.bytes.as_slice(), || self.create_workload(desc))
            .map_err(|e| BackendError::invalid_argument(format!("layer {}: {e}", desc.name)))?
    }

    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
        if let Support::Unsupported(reason) =
            is_layer_supported(desc.layer, &desc.inputs, &desc.outputs)
        {
            return Err(BackendError::unsupported(format!(
                "layer {}: {reason}",
                desc.name
            )));
        }
        let chain = |op: &FusedOp, parameters| {
            chain::create(desc, op, parameters, Arc::clone(&self.arena), self.threads)
        };
        if let LayerDescriptor::PreCompiled(p) = desc.layer
            && int8::island::is_island(&p.payload)
        {
            return int8::island::create_any(desc, p, self.threads)
                .map_err(|e| crate::workloads::invalid_layer(desc, e));
        }
        if int8::is_quantized(&desc.inputs, &desc.outputs)
            && !matches!(desc.layer, LayerDescriptor::PreCompiled(_))
        {
            return int8::create(desc, desc.layer, None, self.threads);
        }
        match desc.layer {
            LayerDescriptor::PreCompiled(p) => {
                let op = FusedOp::decode(&p.payload).map_err(|e| invalid_layer(desc, e))?;
                if int8::is_quantized(&desc.inputs, &desc.outputs) {
                    return int8::clamp::create(desc, &op, self.threads);
                }
                chain(&op, Parameters::Folded)
            }
            LayerDescriptor::Activation(_) => activation::create(desc, self.threads),
            LayerDescriptor::Pooling2d(_) => pooling::create(desc, self.threads),
            LayerDescriptor::ElementwiseBinary(_) => elementwise::create(desc, self.threads),
            LayerDescriptor::BatchNormalization(_) => batch_norm::create(desc),
            LayerDescriptor::LayerNormalization(_) => layer_norm::create(desc),
            LayerDescriptor::Mean(_) => mean::create(desc),
            LayerDescriptor::Softmax(_) => softmax::create(desc),
            LayerDescriptor::Reshape(_) => reshape::create(desc),
            LayerDescriptor::TransposeConvolution2d(_) => {
                transpose_convolution::create(desc, Arc::clone(&self.arena), self.threads)
            }
            other => match FusedOp::plain(other) {
                Some(op) => chain(&op, Parameters::AtExecution),
                None => Err(BackendError::unsupported(format!(
                    "layer {}: CpuFast has no workload for {}",
                    desc.name,
                    other.kind()
                ))),
            },
        }
    }
}
