//! `OldPrepared` (vendor `Compat`): a Backend API 1.4 plugin, built by a different compiler than
//! the host against the frozen 1.4 API and the kit released with it. It stands for a vendor who
//! shipped ahead-of-time preparation (1.4's `prepare_workload`/`restore_workload`):
//!
//! - it runs `ElementwiseBinary` `Mul` on Float32 tensors of one shape (no broadcasting), in
//!   host memory;
//! - when the second operand is a constant, `prepare_workload` stores it in a blob written with
//!   the kit's `PayloadWriter` (format 1: the element count, then the values), and
//!   `restore_workload` computes from the blob alone, after reading it with the kit's
//!   `PayloadReader` (every truncation, a wrong count or a trailing byte is an error);
//! - it refuses everything else, saying why. A 1.5 host never asks it about a tensor of a type
//!   1.5 appended: its `DataType` ends at `Boolean`.

use backplane_api::{
    Backend, BackendError, BackendResult, BinaryOperation, Capabilities, DataType, LayerDescriptor,
    PreparedBlob, PreparedWorkload, Support, TensorInfo, TensorView, TensorViewMut, Value,
    Workload, WorkloadDesc, WorkloadFactory, capabilities::names,
};
use backplane_backend_kit::payload::{PayloadReader, PayloadWriter};

/// The id this plugin exports.
pub const ID: &str = "OldPrepared";

/// The format of the blobs it prepares.
const BLOB_FORMAT: u8 = 1;

/// The backend.
#[derive(Debug, Default)]
pub struct OldPrepared;

fn check(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
    if let Some(t) = inputs
        .iter()
        .chain(outputs)
        .find(|t| t.data_type != DataType::Float32)
    {
        return Err(format!("{ID}: computes in Float32 only, got {t}"));
    }
    match layer {
        LayerDescriptor::ElementwiseBinary(BinaryOperation::Mul) => match (inputs, outputs) {
            ([a, b], [c]) if a.shape == b.shape && b.shape == c.shape => Ok(()),
            ([a, b], [c]) => Err(format!(
                "{ID}: runs Mul on tensors of one shape only (no broadcasting), got {a} * {b} -> {c}"
            )),
            _ => Err(format!("{ID}: Mul needs 2 inputs and 1 output")),
        },
        other => Err(format!(
            "{ID}: runs only a Float32 Mul, not this {}",
            other.kind()
        )),
    }
}

impl Backend for OldPrepared {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with_bool(names::HOST_MEMORY, true)
            .with(
                names::PREPARED_WORKLOAD_VERSION,
                Value::Int(BLOB_FORMAT.into()),
            )
    }

    fn is_layer_supported(
        &self,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Support {
        match check(layer, inputs, outputs) {
            Ok(()) => Support::Supported,
            Err(why) => Support::unsupported(why),
        }
    }

    fn create_workload_factory(
        &self,
        _memory: Option<std::sync::Arc<dyn backplane_api::MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        Ok(Box::new(Factory))
    }
}

struct Factory;

fn refuse(desc: &WorkloadDesc<'_>, why: String) -> BackendError {
    BackendError::unsupported(format!("layer {}: {why}", desc.name))
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

impl WorkloadFactory for Factory {
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
        check(desc.layer, &desc.inputs, &desc.outputs).map_err(|why| refuse(desc, why))?;
        let factor = desc
            .constant(1)
            .map(|c: TensorView<'_>| floats(c.data.as_slice()));
        Ok(Box::new(Mul { factor }))
    }

    fn prepare_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Option<PreparedWorkload>> {
        check(desc.layer, &desc.inputs, &desc.outputs).map_err(|why| refuse(desc, why))?;
        let Some(c) = desc.constant(1) else {
            return Ok(None);
        };
        let values = floats(c.data.as_slice());
        let mut w = PayloadWriter::new(BLOB_FORMAT);
        w.u32(values.len() as u32);
        for v in values {
            w.f32(v);
        }
        Ok(Some(PreparedWorkload {
            version: BLOB_FORMAT.into(),
            bytes: w.finish().into(),
        }))
    }

    fn restore_workload(
        &self,
        desc: &WorkloadDesc<'_>,
        blob: PreparedBlob<'_>,
    ) -> BackendResult<Box<dyn Workload>> {
        check(desc.layer, &desc.inputs, &desc.outputs).map_err(|why| refuse(desc, why))?;
        let read = || -> Result<Vec<f32>, String> {
            if blob.version != u32::from(BLOB_FORMAT) {
                return Err(format!("blob format {}, not {BLOB_FORMAT}", blob.version));
            }
            let mut r = PayloadReader::new(blob.bytes.as_slice(), BLOB_FORMAT)?;
            let n = r.u32()? as usize;
            let want = desc.outputs[0].num_elements().unwrap_or(0);
            if n != want {
                return Err(format!("the blob holds {n} values, the layer needs {want}"));
            }
            let values = (0..n).map(|_| r.f32()).collect::<Result<Vec<_>, _>>()?;
            r.finish()?;
            Ok(values)
        };
        let factor = read().map_err(|why| {
            BackendError::invalid_argument(format!("layer {}: {ID} blob: {why}", desc.name))
        })?;
        Ok(Box::new(Mul {
            factor: Some(factor),
        }))
    }
}

/// `y = a * b`, with `b` from the workload (a constant, or a restored blob) when it has one.
struct Mul {
    factor: Option<Vec<f32>>,
}

impl Workload for Mul {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let [out] = outputs else {
            return Err(BackendError::invalid_argument("expected 1 output"));
        };
        let a = floats(
            inputs
                .first()
                .ok_or_else(|| BackendError::invalid_argument("expected 2 inputs"))?
                .data
                .as_slice(),
        );
        let b = match &self.factor {
            Some(f) => f.clone(),
            None => floats(
                inputs
                    .get(1)
                    .ok_or_else(|| BackendError::invalid_argument("expected 2 inputs"))?
                    .data
                    .as_slice(),
            ),
        };
        let data = out.data.as_mut_slice();
        if a.len() != b.len() || data.len() != a.len() * 4 {
            return Err(BackendError::invalid_argument(format!(
                "{ID}: Mul of {} and {} values into {} bytes",
                a.len(),
                b.len(),
                data.len()
            )));
        }
        for ((o, x), y) in data.chunks_exact_mut(4).zip(&a).zip(&b) {
            o.copy_from_slice(&(x * y).to_le_bytes());
        }
        Ok(())
    }
}

backplane_api::export_backend!(id: "OldPrepared", vendor: "Compat", backend: OldPrepared::default);
