//! A plan: a network loaded for one set of input shapes, what a session runs; unloaded when
//! its last holder drops it. And the conversions between a plan's tensors and `.npy` values.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Weak,
        atomic::{AtomicBool, Ordering},
    },
};

use backplane_api::TensorInfo;

use crate::memory::budget::MemoryBudget;
use crate::{
    exec::{ExecuteError, InputTensor, LayerProfile, LoadedNetwork, NetworkId, OutputTensor},
    graph::optimizer::{ExplainDetail, OptimizedNetwork},
    npy::NpyData,
    onnx,
    runtime::{Runtime, ScratchMemory},
};

/// An output a run allocated ([`Session::run_alloc`](super::Session::run_alloc)): its name, shape and type, and bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedTensor {
    /// The output's name.
    pub name: String,
    /// Its shape and type at this run.
    pub info: TensorInfo,
    /// Its bytes, densely packed, row-major, little-endian.
    pub data: Vec<u8>,
}

/// A network loaded for one set of input shapes: what a [`Session`](super::Session) runs. Unloaded when the
/// last holder drops it.
#[derive(Debug)]
pub struct Plan {
    pub(super) runtime: Arc<Runtime>,
    optimized: OptimizedNetwork,
    id: NetworkId,
    /// The loaded network, held by the runtime: a run goes to it directly, not through the
    /// runtime's map of networks. Gone once the runtime unloaded it.
    network: Weak<LoadedNetwork>,
    inputs: Vec<(String, TensorInfo)>,
    outputs: Vec<(String, TensorInfo)>,
    /// Its own memory (constants, or its arena when an out-of-process backend maps it) and
    /// the backends' memory managers' bytes at load.
    bytes: u64,
    /// Set by [`Plan::unload_now`], so that `drop` does not unload again.
    unloaded: AtomicBool,
    /// For a segment of a model whose shapes depend on run-time values: where its inputs
    /// come from and what follows it ([`super::segments`]).
    pub(super) segment: Option<super::segments::Segment>,
}

impl Plan {
    pub(super) fn load(
        runtime: Arc<Runtime>,
        optimized: OptimizedNetwork,
        scratch: &ScratchMemory,
        budget: &MemoryBudget,
    ) -> Result<Self, ExecuteError> {
        let id = runtime.load_network_within(&optimized, Some(scratch), budget)?;
        let named = |list: Vec<(&str, &TensorInfo)>| {
            list.into_iter()
                .map(|(n, i)| (n.to_owned(), i.clone()))
                .collect()
        };
        let network = runtime
            .loaded_network(id)
            .ok_or(ExecuteError::UnknownNetwork(id))?;
        let own = network.own_bytes() as u64;
        let managers: u64 = network
            .backend_memory()
            .into_iter()
            .filter_map(|(_, m)| m.ok().flatten())
            .sum();
        Ok(Self {
            inputs: named(optimized.network().inputs()),
            outputs: named(optimized.network().outputs()),
            bytes: own + managers,
            runtime,
            optimized,
            id,
            network: Arc::downgrade(&network),
            unloaded: AtomicBool::new(false),
            segment: None,
        })
    }

    /// The network's id in its runtime.
    pub fn id(&self) -> NetworkId {
        self.id
    }

    /// The memory this plan holds (see [`CacheLimits`](super::CacheLimits)).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The inputs with the shapes and types this plan runs.
    pub fn inputs(&self) -> &[(String, TensorInfo)] {
        &self.inputs
    }

    /// The outputs with their shapes and types at this plan's input shapes. For a dynamic
    /// plan ([`Plan::is_dynamic`]) these are its first segment's: the model's outputs are
    /// known only after a run ([`Plan::run_alloc`]).
    pub fn outputs(&self) -> &[(String, TensorInfo)] {
        &self.outputs
    }

    /// Whether the model's shapes depend on values computed at run time at these input
    /// shapes: this plan is its first segment, and the rest is made, per value, as runs
    /// need it. Run it with [`Plan::run_alloc`] (or [`Plan::run`] with buffers of the shapes
    /// the run will have).
    pub fn is_dynamic(&self) -> bool {
        self.segment.as_ref().is_some_and(|s| s.tail.is_some())
    }

    /// The optimised network: per layer, the backend and why.
    pub fn optimized(&self) -> &OptimizedNetwork {
        &self.optimized
    }

    /// The per-layer assignment as text ([`OptimizedNetwork::explain`]).
    pub fn explain(&self) -> String {
        self.explain_at(ExplainDetail::All)
    }

    /// The per-layer assignment as text at `detail` ([`OptimizedNetwork::explain_at`]). For a
    /// dynamic plan: each segment in order, and after a segment every plan made so far for
    /// the next one (one per set of values that decided it), indented.
    pub fn explain_at(&self, detail: ExplainDetail) -> String {
        let mut text = String::new();
        self.explain_into(detail, 0, &mut text);
        text
    }

    fn explain_into(&self, detail: ExplainDetail, depth: usize, text: &mut String) {
        use std::fmt::Write as _;
        let pad = "    ".repeat(depth);
        let dynamic = self.segment.is_some();
        if dynamic {
            let _ = writeln!(text, "{pad}segment {}:", depth + 1);
        }
        for line in self.optimized.explain_at(detail).lines() {
            let _ = writeln!(text, "{pad}{line}");
        }
        let Some(tail) = self.segment.as_ref().and_then(|s| s.tail.as_ref()) else {
            return;
        };
        let (node, op) = tail.at();
        let plans = tail.plans();
        let _ = writeln!(
            text,
            "{pad}then node {node} ({op}) needs values computed at run time: the next segment \
             is made per value ({} made so far)",
            plans.len()
        );
        for next in plans {
            next.explain_into(detail, depth + 1, text);
        }
    }

    /// How many layers each backend runs.
    pub fn layers_per_backend(&self) -> BTreeMap<String, usize> {
        self.optimized
            .assignments()
            .iter()
            .fold(BTreeMap::new(), |mut m, a| {
                *m.entry(a.backend.clone()).or_default() += 1;
                m
            })
    }

    /// Runs once with caller-provided buffers ([`Runtime::enqueue`]: every binding is checked
    /// first and nothing runs on a mismatch; runs of one plan are serialised).
    ///
    /// # Errors
    /// [`ExecuteError::Binding`] for a wrong name, shape, type or size; the backend's error.
    pub fn run(
        &self,
        inputs: &[InputTensor<'_>],
        outputs: &mut [OutputTensor<'_>],
    ) -> Result<(), ExecuteError> {
        if self.is_dynamic() {
            return self.run_segments_into(inputs, outputs);
        }
        self.network()?.enqueue(inputs, outputs)
    }

    /// Runs once and returns every output (the model's outputs, for a dynamic plan too), in
    /// the order of the model's outputs.
    ///
    /// # Errors
    /// As [`Plan::run`].
    pub fn run_alloc(&self, inputs: &[InputTensor<'_>]) -> Result<Vec<OwnedTensor>, ExecuteError> {
        if self.is_dynamic() {
            return self.run_segments(inputs);
        }
        let buffers = self.run_to_vec(inputs)?;
        Ok(self.owned(buffers))
    }

    /// This plan's outputs holding `buffers` (one per output, in order).
    pub(super) fn owned(&self, buffers: Vec<Vec<u8>>) -> Vec<OwnedTensor> {
        self.outputs
            .iter()
            .zip(buffers)
            .map(|((name, info), data)| OwnedTensor {
                name: name.clone(),
                info: info.clone(),
                data,
            })
            .collect()
    }

    /// This plan's own network run once (a segment: its outputs are the segment's).
    pub(super) fn run_network(
        &self,
        inputs: &[InputTensor<'_>],
    ) -> Result<Vec<Vec<u8>>, ExecuteError> {
        let mut buffers = self.output_buffers()?;
        let mut bound: Vec<OutputTensor<'_>> = self
            .outputs
            .iter()
            .zip(buffers.iter_mut())
            .map(|((name, info), data)| OutputTensor { name, info, data })
            .collect();
        self.network()?.enqueue(inputs, &mut bound)?;
        drop(bound);
        Ok(buffers)
    }

    /// Turns per-layer timing on (from zero) or off ([`Runtime::set_profiling`]).
    pub fn set_profiling(&self, on: bool) {
        if let Ok(network) = self.network() {
            network.set_profiling(on);
        }
    }

    /// Per-layer times since profiling was turned on, in the order the layers run; `None`
    /// while it is off ([`Runtime::profile`]).
    pub fn profile(&self) -> Option<Vec<LayerProfile>> {
        self.network().ok()?.profile()
    }

    /// One zeroed buffer per output, of its size, in the order of [`Plan::outputs`]: what
    /// [`Plan::run`] writes into, and can write into again run after run.
    ///
    /// # Errors
    /// [`ExecuteError::Binding`] for an output whose size cannot be addressed.
    pub fn output_buffers(&self) -> Result<Vec<Vec<u8>>, ExecuteError> {
        self.outputs
            .iter()
            .map(|(name, info)| {
                info.num_bytes().map(|n| vec![0u8; n]).ok_or_else(|| {
                    ExecuteError::Binding(format!("output {name}: {info} has no byte size"))
                })
            })
            .collect()
    }

    /// Runs once and returns every output's bytes, in the order of [`Plan::outputs`].
    ///
    /// # Errors
    /// As [`Plan::run`].
    pub fn run_to_vec(&self, inputs: &[InputTensor<'_>]) -> Result<Vec<Vec<u8>>, ExecuteError> {
        if self.is_dynamic() {
            return Ok(self
                .run_segments(inputs)?
                .into_iter()
                .map(|t| t.data)
                .collect());
        }
        self.run_network(inputs)
    }

    /// The loaded network, while the runtime holds it.
    fn network(&self) -> Result<Arc<LoadedNetwork>, ExecuteError> {
        self.network
            .upgrade()
            .ok_or(ExecuteError::UnknownNetwork(self.id))
    }

    /// Unloads the network now, returning what went wrong.
    pub(super) fn unload_now(&self) -> Result<(), ExecuteError> {
        if self.unloaded.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.runtime.unload_network(self.id)
    }
}

impl Drop for Plan {
    fn drop(&mut self) {
        if let Err(e) = self.unload_now() {
            log::error!("network {}: unload failed: {e}", self.id);
        }
    }
}

/// The bytes an input of `info` takes from `.npy` values of the input called `name`: the
/// file's own type for every type numpy has (float32, float64, float16, the integers, bool;
/// uint8 for QAsymmU8 and int8 for QAsymmS8 or QSymmS8, their quantized values); float64 also
/// for a Float32 input (rounded to nearest), int64 also for a Signed32 input (range-checked),
/// and float32 for a BFloat16 input (numpy has no bfloat16; rounded to nearest even).
///
/// # Errors
/// A message naming the input when the file's type does not fit the input's or an int64
/// value lies outside Signed32's range.
pub fn input_bytes(name: &str, info: &TensorInfo, data: &NpyData) -> Result<Vec<u8>, String> {
    use backplane_api::{DataType as D, bytemuck::cast_slice};
    Ok(match (info.data_type, data) {
        (D::Float32, NpyData::F32(v)) => cast_slice(v).to_vec(),
        (D::Float32, NpyData::F64(v)) => {
            let rounded: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            cast_slice(&rounded).to_vec()
        }
        (D::Float64, NpyData::F64(v)) => cast_slice(v).to_vec(),
        (D::Float16, NpyData::F16(v)) => cast_slice(v).to_vec(),
        (D::BFloat16, NpyData::F32(v)) => onnx::half_bytes(v, D::BFloat16).unwrap_or_default(),
        (D::Signed32, NpyData::I32(v)) => cast_slice(v).to_vec(),
        (D::Signed32, NpyData::I64(v)) => {
            let narrow = onnx::narrow_to_i32(v).map_err(|bad| {
                format!(
                    "input {name}: {bad} is outside the range of Signed32, to which the host \
                     narrows int64"
                )
            })?;
            cast_slice(&narrow).to_vec()
        }
        (D::Signed64, NpyData::I64(v)) => cast_slice(v).to_vec(),
        (D::Signed16, NpyData::I16(v)) => cast_slice(v).to_vec(),
        (D::UnsignedInt16, NpyData::U16(v)) => cast_slice(v).to_vec(),
        (D::UnsignedInt32, NpyData::U32(v)) => cast_slice(v).to_vec(),
        (D::UnsignedInt64, NpyData::U64(v)) => cast_slice(v).to_vec(),
        (D::Boolean, NpyData::Bool(v)) | (D::QAsymmU8 | D::UnsignedInt8, NpyData::U8(v)) => {
            v.clone()
        }
        (D::QAsymmS8 | D::QSymmS8 | D::Signed8, NpyData::I8(v)) => cast_slice(v).to_vec(),
        (t, d) => {
            return Err(format!(
                "input {name} is {t} in the network, the file holds {}",
                d.dtype()
            ));
        }
    })
}

/// An output's bytes as `.npy` values of its type: each type as numpy's own (uint8 for
/// QAsymmU8, int8 for QAsymmS8 and QSymmS8: their quantized values), and BFloat16 as float32
/// (numpy has no bfloat16; widening is exact).
///
/// # Errors
/// A message naming the output when `bytes` is not a whole number of its elements.
pub fn output_values(name: &str, info: &TensorInfo, bytes: &[u8]) -> Result<NpyData, String> {
    use backplane_api::{DataType as D, bytemuck};
    // The elements of `bytes`, copied into a vector of `T` (whatever the bytes' alignment).
    fn values<T: bytemuck::Pod>(bytes: &[u8]) -> Vec<T> {
        let mut v = vec![T::zeroed(); bytes.len() / std::mem::size_of::<T>()];
        bytemuck::cast_slice_mut(&mut v).copy_from_slice(bytes);
        v
    }
    if !bytes.len().is_multiple_of(info.data_type.size_in_bytes()) {
        return Err(format!(
            "output {name}: {} bytes are not a whole number of {} elements",
            bytes.len(),
            info.data_type
        ));
    }
    Ok(match info.data_type {
        D::Float32 => NpyData::F32(values(bytes)),
        D::Float64 => NpyData::F64(values(bytes)),
        D::Float16 => NpyData::F16(values(bytes)),
        D::BFloat16 => NpyData::F32(
            values::<u16>(bytes)
                .into_iter()
                .map(|b| half::bf16::from_bits(b).to_f32())
                .collect(),
        ),
        D::Signed16 => NpyData::I16(values(bytes)),
        D::Signed32 => NpyData::I32(values(bytes)),
        D::Signed64 => NpyData::I64(values(bytes)),
        D::UnsignedInt16 => NpyData::U16(values(bytes)),
        D::UnsignedInt32 => NpyData::U32(values(bytes)),
        D::UnsignedInt64 => NpyData::U64(values(bytes)),
        D::Boolean => NpyData::Bool(bytes.to_vec()),
        D::QAsymmU8 | D::UnsignedInt8 => NpyData::U8(bytes.to_vec()),
        D::QAsymmS8 | D::QSymmS8 | D::Signed8 => NpyData::I8(values(bytes)),
    })
}
