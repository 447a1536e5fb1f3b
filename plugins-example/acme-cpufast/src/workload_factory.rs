//! The CpuFast [`WorkloadFactory`]: routes the layer again (the host may ask for anything)
//! with the routing function that also answers layer support (`layer_support.rs`), then
//! builds the workload the route names. Convolutions, fully connected layers, batch matmuls
//! and fused `PreCompiled` layers share the chain workload.

use std::sync::Arc;

use backplane_api::{
    BackendError, BackendResult, LayerDescriptor, PreparedBlob, PreparedWorkload, Workload,
    WorkloadDesc, WorkloadFactory,
};
use backplane_backend_kit::support::Route;

use crate::{
    int8,
    layer_support::CpuFastRoute,
    memory::Arena,
    prepared,
    workloads::{
        activation, batch_norm, chain, elementwise, invalid_layer, layer_norm, mean, pooling,
        recurrent, reshape, softmax, transpose_convolution,
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
        let threads = self.threads;
        match CpuFastRoute::for_workload(&(), desc)? {
            CpuFastRoute::Island => {
                let LayerDescriptor::PreCompiled(p) = desc.layer else {
                    return Err(invalid_layer(desc, "an island is a PreCompiled layer"));
                };
                int8::island::create_any(desc, p, threads).map_err(|e| invalid_layer(desc, e))
            }
            CpuFastRoute::Quantized => int8::create(desc, desc.layer, None, threads),
            CpuFastRoute::QuantizedClamp(op) => int8::clamp::create(desc, &op, threads),
            CpuFastRoute::Chain(op, parameters) => {
                chain::create(desc, &op, parameters, Arc::clone(&self.arena), threads)
            }
            CpuFastRoute::Activation => activation::create(desc, threads),
            CpuFastRoute::Pooling => pooling::create(desc, threads),
            CpuFastRoute::Elementwise => elementwise::create(desc, threads),
            CpuFastRoute::BatchNorm => batch_norm::create(desc),
            CpuFastRoute::LayerNorm => layer_norm::create(desc),
            CpuFastRoute::Mean => mean::create(desc),
            CpuFastRoute::Softmax => softmax::create(desc),
            CpuFastRoute::Reshape => reshape::create(desc),
            CpuFastRoute::Lstm => recurrent::create(desc, threads),
            CpuFastRoute::TransposeConvolution => {
                transpose_convolution::create(desc, Arc::clone(&self.arena), threads)
            }
        }
    }
}
