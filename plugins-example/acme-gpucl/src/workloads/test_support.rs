//! What the unit tests share: one backend on the machine's OpenCL device (a test without a
//! device FAILS with the factory's message: CI installs pocl), running a layer the way the
//! host does (buffers from the memory manager, inputs copied in, the workload made by the
//! factory from a real `WorkloadDesc`, `execute_device`, `finish`, outputs copied out), a
//! deterministic generator and a tolerance check. Each test keeps its own oracle, written from
//! the operator's definition with naive loops in f64.

use std::sync::{Arc, OnceLock};

use backplane_api::{
    Backend, BackendResult, DataType, DeviceTensor, LayerDescriptor, MemoryManager, ROption,
    RSlice, RStr, TensorInfo, WorkloadDesc,
};

use crate::{backend::GpuCl, device::NO_BUFFER};

/// The backend every test uses (one program build for the whole run).
pub(crate) fn backend() -> &'static GpuCl {
    static BACKEND: OnceLock<Result<GpuCl, String>> = OnceLock::new();
    match BACKEND.get_or_init(|| GpuCl::open(None).map_err(|e| e.message.to_string())) {
        Ok(b) => b,
        Err(e) => panic!(
            "the GpuCl tests need an OpenCL device (scripts/install-opencl.sh installs pocl): {e}"
        ),
    }
}

/// A deterministic generator (the kit's seeded LCG, seeded by its field).
pub(crate) use backplane_backend_kit::testing::Lcg;

/// A Float32 tensor of `shape`.
pub(crate) fn f32t(shape: &[u32]) -> TensorInfo {
    TensorInfo::new(shape, DataType::Float32)
}

/// The number of elements of `shape`.
pub(crate) fn numel(shape: &[u32]) -> usize {
    shape.iter().map(|&d| d as usize).product()
}

/// One input of a test run.
#[derive(Debug, Clone)]
pub(crate) struct In {
    pub(crate) info: TensorInfo,
    pub(crate) values: Vec<f32>,
}

/// A non-constant input.
pub(crate) fn var(shape: &[u32], values: Vec<f32>) -> In {
    assert_eq!(numel(shape), values.len(), "{shape:?}");
    In {
        info: f32t(shape),
        values,
    }
}

/// A constant input (given to `create_workload`).
pub(crate) fn cst(shape: &[u32], values: Vec<f32>) -> In {
    In {
        info: f32t(shape).constant(),
        ..var(shape, values)
    }
}

fn bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// How a test run hands the constant input slots to `execute_device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConstSlots {
    /// Left out: one device tensor per non-constant slot.
    Omitted,
    /// One tensor per slot, the constant ones with buffer `NO_BUFFER` (the 1.3 host).
    NoBuffer,
    /// One tensor per slot, the constant ones in a buffer of their own holding the constant
    /// (a host that copied constants into device memory).
    Buffer,
}

/// Runs `layer` on GpuCl as the host does and returns its outputs (of `outputs`' shapes),
/// handing constant slots over as `slots` says. Every output buffer starts filled with NaN, so
/// an element left unwritten fails every comparison.
pub(crate) fn run_with(
    layer: &LayerDescriptor,
    inputs: &[In],
    outputs: &[&[u32]],
    slots: ConstSlots,
) -> BackendResult<Vec<Vec<f32>>> {
    let b = backend();
    let memory: Arc<dyn MemoryManager> = b.create_memory_manager()?.expect("a memory manager");
    let factory = b.create_workload_factory(Some(Arc::clone(&memory)))?;
    let in_infos: Vec<TensorInfo> = inputs.iter().map(|i| i.info.clone()).collect();
    let out_infos: Vec<TensorInfo> = outputs.iter().map(|s| f32t(s)).collect();
    let const_bytes: Vec<Option<Vec<u8>>> = inputs
        .iter()
        .map(|i| i.info.is_constant.then(|| bytes(&i.values)))
        .collect();
    let constants: Vec<ROption<RSlice<'_, u8>>> = const_bytes
        .iter()
        .map(|c| c.as_deref().map(RSlice::from_slice).into())
        .collect();
    let desc = WorkloadDesc {
        name: RStr::from_str("under_test"),
        layer,
        inputs: RSlice::from_slice(&in_infos),
        outputs: RSlice::from_slice(&out_infos),
        constants: RSlice::from_slice(&constants),
    };
    let workload = factory.create_workload(&desc)?;
    memory.acquire()?;
    let mut in_tensors = Vec::new();
    for (i, info) in inputs.iter().zip(&in_infos) {
        if info.is_constant {
            match slots {
                ConstSlots::Omitted => continue,
                ConstSlots::NoBuffer => {
                    in_tensors.push(DeviceTensor {
                        info,
                        buffer: NO_BUFFER,
                    });
                    continue;
                }
                ConstSlots::Buffer => {}
            }
        }
        let data = bytes(&i.values);
        let id = memory.allocate_buffer(data.len() as u64)?;
        memory.copy_to_device(id, &data)?;
        in_tensors.push(DeviceTensor { info, buffer: id });
    }
    let mut out_tensors = Vec::new();
    for info in &out_infos {
        let n = info.num_elements().unwrap();
        let id = memory.allocate_buffer((n * 4) as u64)?;
        memory.copy_to_device(id, &bytes(&vec![f32::NAN; n]))?;
        out_tensors.push(DeviceTensor { info, buffer: id });
    }
    workload.execute_device(&in_tensors, &out_tensors)?;
    memory.finish()?;
    let mut results = Vec::new();
    for t in &out_tensors {
        let mut data = vec![0u8; t.info.num_bytes().unwrap()];
        memory.copy_to_host(t.buffer, &mut data)?;
        results.push(
            data.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        );
    }
    memory.release()?;
    assert_eq!(memory.allocated_bytes(), 0);
    Ok(results)
}

/// Runs a one-output layer and returns its output. A layer with constant inputs runs three
/// times, with the constant slots left out, given as `NO_BUFFER` and given in buffers of their
/// own: every way gives the same bits.
pub(crate) fn run1(layer: &LayerDescriptor, inputs: &[In], output: &[u32]) -> Vec<f32> {
    let once = |slots| match run_with(layer, inputs, &[output], slots) {
        Ok(mut outs) => outs.swap_remove(0),
        Err(e) => panic!("{layer:?} ({slots:?}): {e}"),
    };
    let got = once(ConstSlots::Omitted);
    if inputs.iter().any(|i| i.info.is_constant) {
        for slots in [ConstSlots::NoBuffer, ConstSlots::Buffer] {
            assert_same_bits(&once(slots), &got, &format!("{layer:?} ({slots:?})"));
        }
    }
    got
}

/// Checks that `got` and `want` hold the same bits.
#[track_caller]
pub(crate) fn assert_same_bits(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.to_bits(), w.to_bits(), "{what}: element {i}: {g} vs {w}");
    }
}

/// Checks `got` against `want` within `1e-4 + 1e-4·|want|` (NaN only where NaN is wanted).
#[track_caller]
pub(crate) fn assert_close(got: &[f32], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            f64::from(g) == w
        } else {
            (f64::from(g) - w).abs() <= 1e-4 + 1e-4 * w.abs()
        };
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}
