//! Fuzz target: the example plugin CpuFast's readers of untrusted bytes, through its safe
//! Backend API as the host calls it: a prepared blob restored for a layer
//! (`restore_workload`, what a compiled network's blob section feeds it) and a fused layer's
//! `PreCompiled` payload (`create_workload`, what a compiled network's network section
//! feeds it). The layer is a 3×3 convolution of a 1×16×16×16 input to 16 channels (enough
//! channels and output tiles for CpuFast's Winograd path, whose transformed filters it
//! prepares) with constant weights, bias
//! and batch-normalisation parameters. Any bytes give a workload or an error, never a panic,
//! a hang or an allocation the bytes do not justify; a workload that is made runs once on
//! zeros. (In a plugin a panic would reach the host as `panicked`; here it is a crash.)
//!
//! The first byte picks what the rest is, by its value modulo 3: 0, a blob of CpuFast's blob
//! format 1 for the plain convolution; 1, the payload of a fused `PreCompiled` layer over the
//! same inputs, named by the byte's next bits among CpuFast's convolution chains; 2, changes
//! to the blob CpuFast prepares for that convolution (three bytes each: a little-endian
//! offset into the blob and a byte to XOR there), so that runs start from a valid blob
//! (header, entry count, tags, dimensions, lengths) and reach the checks of each field.
#![no_main]

use std::sync::OnceLock;

use acme_cpufast::CpuFast;
use backplane_api::{
    Backend, ConstTensor, Convolution2dDescriptor, DataType, LayerDescriptor, Padding2d,
    PreCompiledDescriptor, PreparedBlob, RSlice, RStr, TensorInfo, TensorView, TensorViewMut,
    WorkloadDesc, WorkloadFactory,
};
use libfuzzer_sys::fuzz_target;

/// Input and output channels.
const C: u32 = 16;

const OPERATIONS: [&str; 4] = [
    "Conv2dBiasReLU",
    "Conv2dBatchNormReLU",
    "Conv2dBatchNormHardSwish",
    "Conv2dBiasAffine",
];

/// The inputs every case uses: the image, then weights, bias and four batch-normalisation
/// vectors (constant), with their values.
struct Inputs {
    infos: Vec<TensorInfo>,
    values: Vec<Option<Vec<u8>>>,
    output: TensorInfo,
}

fn inputs() -> &'static Inputs {
    static INPUTS: OnceLock<Inputs> = OnceLock::new();
    INPUTS.get_or_init(|| {
        let weights: Vec<f32> = (0..C * C * 9).map(|i| ((i % 13) as f32 - 6.0) / 8.0).collect();
        let vector = |base: f32| -> Vec<f32> { (0..C).map(|i| base + i as f32 / 16.0).collect() };
        let mut infos = vec![TensorInfo::new(&[1, C, 16, 16], DataType::Float32)];
        let mut values = vec![None];
        let mut constant = |shape: &[u32], v: &[f32]| {
            let c = ConstTensor::from_f32(shape, v);
            infos.push(c.info.clone());
            values.push(Some(c.data.to_vec()));
        };
        constant(&[C, C, 3, 3], &weights);
        for base in [0.1, 1.0, 0.0, 0.5, 1.5] {
            constant(&[C], &vector(base));
        }
        Inputs {
            infos,
            values,
            output: TensorInfo::new(&[1, C, 16, 16], DataType::Float32),
        }
    })
}

fn factory() -> &'static dyn WorkloadFactory {
    static FACTORY: OnceLock<Box<dyn WorkloadFactory>> = OnceLock::new();
    FACTORY
        .get_or_init(|| {
            let backend = CpuFast::from_env();
            let memory = backend.create_memory_manager().expect("a memory manager");
            backend
                .create_workload_factory(memory)
                .expect("a workload factory")
        })
        .as_ref()
}

/// Runs `layer` over the first `n` inputs with the workload `make` gives, once, on zeros.
fn run(
    layer: &LayerDescriptor,
    n: usize,
    make: impl FnOnce(&WorkloadDesc<'_>) -> backplane_api::BackendResult<Box<dyn backplane_api::Workload>>,
) {
    let ins = inputs();
    let constants: Vec<_> = ins.values[..n]
        .iter()
        .map(|v| v.as_deref().map(RSlice::from_slice).into())
        .collect();
    let outputs = [ins.output.clone()];
    let desc = WorkloadDesc {
        name: RStr::from_str("fuzzed"),
        layer,
        inputs: RSlice::from_slice(&ins.infos[..n]),
        outputs: RSlice::from_slice(&outputs),
        constants: RSlice::from_slice(&constants),
    };
    let Ok(workload) = make(&desc) else {
        return;
    };
    let zeros = vec![0u8; C as usize * 16 * 16 * 4];
    let views: Vec<TensorView<'_>> = ins.infos[..n]
        .iter()
        .zip(&ins.values)
        .map(|(info, v)| TensorView {
            info,
            data: RSlice::from_slice(v.as_deref().unwrap_or(&zeros)),
        })
        .collect();
    let mut out = vec![0u8; C as usize * 16 * 16 * 4];
    let mut outs = [TensorViewMut {
        info: &outputs[0],
        data: out.as_mut_slice().into(),
    }];
    let _ = workload.execute(&views, &mut outs);
}

/// The plain 3×3 convolution (padding 1, bias) over the first three inputs.
fn convolution() -> &'static LayerDescriptor {
    static CONV: OnceLock<LayerDescriptor> = OnceLock::new();
    CONV.get_or_init(|| {
        LayerDescriptor::Convolution2d(Convolution2dDescriptor {
            padding: Padding2d {
                left: 1,
                right: 1,
                top: 1,
                bottom: 1,
            },
            bias_enabled: true,
            ..Convolution2dDescriptor::default()
        })
    })
}

/// The blob CpuFast prepares for [`convolution`].
fn valid_blob() -> &'static [u8] {
    static BLOB: OnceLock<Vec<u8>> = OnceLock::new();
    BLOB.get_or_init(|| {
        let mut blob = Vec::new();
        run(convolution(), 3, |desc| {
            let prepared = factory()
                .prepare_workload(desc)?
                .expect("CpuFast prepares a 3x3 convolution of 16 output tiles");
            blob = prepared.bytes.to_vec();
            factory().create_workload(desc)
        });
        blob
    })
}

fn restore(blob: &[u8]) {
    run(convolution(), 3, |desc| {
        factory().restore_workload(
            desc,
            PreparedBlob {
                version: 1,
                bytes: RSlice::from_slice(blob),
            },
        )
    });
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    match pick % 3 {
        0 => restore(rest),
        1 => {
            let fused = LayerDescriptor::PreCompiled(PreCompiledDescriptor {
                backend: "CpuFast".into(),
                operation: OPERATIONS[usize::from(pick / 3) % OPERATIONS.len()].into(),
                payload: rest.to_vec().into(),
            });
            run(&fused, 7, |desc| factory().create_workload(desc));
        }
        _ => {
            let mut blob = valid_blob().to_vec();
            for change in rest.chunks_exact(3) {
                let at = usize::from(u16::from_le_bytes([change[0], change[1]])) % blob.len();
                blob[at] ^= change[2];
            }
            restore(&blob);
        }
    }
});
