//! The compiled-network reader against crafted, damaged and resealed files.

use backplane_api::{ActivationDescriptor, ActivationFunction, DataType, LayerDescriptor};

use backplane_api::ApiVersion;

use super::{
    container::{self, SectionKind},
    stored::{StoredLayer, StoredNetwork},
    *,
};
use crate::runtime::Runtime;
use crate::{graph::network::NetworkBuilder, plugins::paths::PathSource, runtime::CreationOptions};

/// A runtime with CpuRef built in and nothing else.
fn runtime() -> Runtime {
    Runtime::with_path_list(CreationOptions::default(), PathSource::Environment, "")
}

/// `y = relu(x + c)`, optimised for CpuRef and compiled.
fn compiled(rt: &Runtime) -> CompiledNetwork {
    let mut b = NetworkBuilder::new();
    let info = backplane_api::TensorInfo::new(&[2, 3], DataType::Float32);
    let x = b.add_input("x", info).unwrap();
    let c = b
        .add_constant(
            "c",
            backplane_api::ConstTensor::from_f32(&[2, 3], &[1.0, -2.0, 3.0, -4.0, 5.0, -6.0]),
        )
        .unwrap();
    let sum = b
        .add_layer(
            "add",
            LayerDescriptor::ElementwiseBinary(backplane_api::BinaryOperation::Add),
            &[x, c],
        )
        .unwrap();
    let y = b
        .add_layer(
            "relu",
            LayerDescriptor::Activation(ActivationDescriptor {
                function: ActivationFunction::ReLU,
                a: 0.0,
                b: 0.0,
            }),
            &[sum],
        )
        .unwrap();
    b.add_output("y", y).unwrap();
    let network = b.build().unwrap();
    let optimized = rt
        .optimize(&network, &["CpuRef"], &OptimizerOptions::default())
        .unwrap();
    let bytes = compile(rt, &optimized, &ModelFacts::default()).unwrap();
    CompiledNetwork::from_bytes(&bytes).unwrap()
}

/// The file of `x -> relu -> y` on CpuRef, with its network section replaced by what
/// `network` makes of the stored one (the checksums made valid: a crafted file, not a
/// damaged one).
fn resealed(rt: &Runtime, network: impl FnOnce(StoredNetwork, &[u8]) -> Vec<u8>) -> Vec<u8> {
    let mut b = NetworkBuilder::new();
    let info = backplane_api::TensorInfo::new(&[2, 3], DataType::Float32);
    let x = b.add_input("x", info).unwrap();
    let y = b
        .add_layer(
            "relu",
            LayerDescriptor::Activation(ActivationDescriptor {
                function: ActivationFunction::ReLU,
                a: 0.0,
                b: 0.0,
            }),
            &[x],
        )
        .unwrap();
    b.add_output("y", y).unwrap();
    resealed_of(rt, &b.build().unwrap(), network)
}

/// [`resealed`], of `given` optimised for CpuRef.
fn resealed_of(
    rt: &Runtime,
    given: &Network,
    network: impl FnOnce(StoredNetwork, &[u8]) -> Vec<u8>,
) -> Vec<u8> {
    let optimized = rt
        .optimize(given, &["CpuRef"], &OptimizerOptions::default())
        .unwrap();
    let bytes = compile(rt, &optimized, &ModelFacts::default()).unwrap();
    let sections = container::read(&bytes).unwrap();
    let section = &bytes[sections[0].range.clone()];
    let replaced = network(postcard::from_bytes(section).unwrap(), section);
    let all: Vec<(SectionKind, &[u8])> = std::iter::once((SectionKind::Network, &replaced[..]))
        .chain(
            sections[1..]
                .iter()
                .map(|s| (s.kind, &bytes[s.range.clone()])),
        )
        .collect();
    container::write(&all)
}

/// The file after `edit` changed its stored network.
fn crafted(
    rt: &Runtime,
    edit: impl FnOnce(&mut StoredNetwork),
) -> Result<CompiledNetwork, CompiledError> {
    CompiledNetwork::from_bytes(&resealed(rt, |mut stored, _| {
        edit(&mut stored);
        postcard::to_allocvec(&stored).unwrap()
    }))
}

/// What a crafted file cannot make the host do: a boundary on a layer that computes, a
/// backend listed twice, a tensor no session would accept.
#[test]
fn crafted_networks_are_refused() {
    let rt = runtime();
    assert!(crafted(&rt, |_| {}).is_ok());
    let e = crafted(&rt, |s| {
        let relu = s.layers.iter_mut().find(|l| l.name == "relu").unwrap();
        relu.assignment.as_mut().unwrap().boundary = Some(("host".into(), "CpuRef".into(), false));
    })
    .unwrap_err()
    .to_string();
    assert_eq!(
        e,
        "compiled network: layer 1 (\"relu\") is a Activation, not a copy between two memories (host -> CpuRef)"
    );
    let e = crafted(&rt, |s| s.backends.push(s.backends[0].clone()))
        .unwrap_err()
        .to_string();
    assert_eq!(e, "compiled network: backend \"CpuRef\" is listed twice");
    let e = crafted(&rt, |s| {
        for l in &mut s.layers {
            for o in &mut l.outputs {
                o.shape = vec![65536, 65536].into();
            }
        }
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.ends_with("a tensor of shape [65536, 65536] is too large"),
        "{e}"
    );
}

/// A network section that does not decode (here cut short; in practice, a file of
/// another host version) names who wrote it.
#[test]
fn an_undecodable_network_names_its_writer() {
    let rt = runtime();
    let cut = resealed(&rt, |_, section| section[..24].to_vec());
    let e = CompiledNetwork::from_bytes(&cut).unwrap_err().to_string();
    let host = env!("CARGO_PKG_VERSION");
    assert!(
        e.starts_with(&format!(
            "compiled network: the network section does not decode (written by backplane \
             {host}, Backend API {}; this is backplane {host}): ",
            ApiVersion::CURRENT
        )),
        "{e}"
    );
}

#[test]
fn a_network_round_trips_with_its_constants_in_the_file() {
    let rt = runtime();
    let c = compiled(&rt);
    assert!(c.mismatches(rt.registry()).is_empty());
    assert_eq!(c.prepared_workloads(), 0);
    let optimized = c.bind(&rt, false).unwrap();
    let layers = optimized.network().layers();
    let constant = layers.iter().find(|l| l.name == "c").unwrap();
    // The value is read from the file's bytes, not from the descriptor.
    assert!(constant.shared.is_some());
    assert_eq!(
        constant.constant_bytes().unwrap(),
        backplane_api::ConstTensor::from_f32(&[2, 3], &[1.0, -2.0, 3.0, -4.0, 5.0, -6.0])
            .data
            .as_slice()
    );
    assert_eq!(
        optimized.explain(),
        rt.reoptimize(&optimized).unwrap().explain()
    );
}

/// `compile_to` never writes through a symlink planted where its partial file used to go
/// (`<out>.partial-<pid>`, a name anyone could predict): the file it writes is new (O_EXCL,
/// random name) and renamed over the destination; nothing is left beside it.
#[test]
fn compiling_never_follows_a_planted_symlink() {
    let rt = runtime();
    let mut b = NetworkBuilder::new();
    let info = backplane_api::TensorInfo::new(&[2, 3], DataType::Float32);
    let x = b.add_input("x", info).unwrap();
    b.add_output("y", x).unwrap();
    let optimized = rt
        .optimize(
            &b.build().unwrap(),
            &["CpuRef"],
            &OptimizerOptions::default(),
        )
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"keep me").unwrap();
    let out = dir.path().join("m.bpn");
    let planted = dir
        .path()
        .join(format!("m.bpn.partial-{}", std::process::id()));
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    let n = compile_to(&rt, &optimized, &ModelFacts::default(), &out).unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    assert!(
        std::fs::symlink_metadata(&out)
            .unwrap()
            .file_type()
            .is_file()
    );
    assert_eq!(std::fs::metadata(&out).unwrap().len(), n);
    assert!(CompiledNetwork::open(&out).is_ok());
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let planted_name = planted.file_name().unwrap().to_str().unwrap().to_owned();
    assert_eq!(
        names,
        ["m.bpn".to_owned(), planted_name, "victim".to_owned()]
    );
    // Written again over itself: still one file, the old one replaced.
    compile_to(&rt, &optimized, &ModelFacts::default(), &out).unwrap();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
}

/// Each way a backend can differ, with both versions in the message.
#[test]
fn mismatches_name_the_backend_and_both_versions() {
    let rt = runtime();
    let mut c = compiled(&rt);
    let host = env!("CARGO_PKG_VERSION");
    c.backends[0].release = Some("0.0.9".into());
    c.backends[0].api = ApiVersion::new(1, 2);
    c.backends[0].blob_version = Some(7);
    let found: Vec<String> = c
        .mismatches(rt.registry())
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        found,
        [
            format!(
                "compiled for backend CpuRef with Backend API 1.2; this runtime has {}",
                ApiVersion::CURRENT
            ),
            format!("compiled for backend CpuRef with release 0.0.9; this runtime has {host}"),
            "compiled for backend CpuRef with prepared-workload format 7; this runtime has none"
                .to_owned(),
        ]
    );
    let e = c.bind(&rt, false).unwrap_err().to_string();
    assert!(e.starts_with("compiled network: compiled for backend CpuRef with Backend API 1.2"));
    assert!(e.ends_with("give --reoptimize (SessionOptions::reoptimize) to optimise the stored layers again for the backends registered here"));
    // Optimised again: the same assignment, and notes saying why.
    let again = c.bind(&rt, true).unwrap();
    assert_eq!(again.notes().len(), 3, "{:?}", again.notes());
    assert!(again.notes()[0].ends_with("; optimised again"));
    c.backends[0].id = "Gone".into();
    assert_eq!(
        c.mismatches(rt.registry())[0].to_string(),
        "compiled for backend Gone (release 0.0.9, Backend API 1.2), which is not registered here"
    );
}

/// The fuzz target's small seed (`scripts/fuzz.sh`): [`seed_network`] compiled, as written
/// by [`the_fuzz_seed_reads`].
const SEED: &[u8] = include_bytes!("../../../fuzz/seeds/compiled_network/small.bpn");

/// A small network of several kinds of layer (convolution, pooling, reshape, concat,
/// softmax), for a seed of a kilobyte or so whose every layer's descriptor the fuzzer
/// can mutate.
fn seed_network() -> Network {
    use backplane_api::{
        BinaryOperation, ConcatDescriptor, ConstTensor, Convolution2dDescriptor, DataLayout,
        OutputRounding, Padding2d, Pooling2dDescriptor, PoolingType, ReshapeDescriptor,
        SoftmaxDescriptor, TensorInfo,
    };
    let mut b = NetworkBuilder::new();
    let x = b
        .add_input("x", TensorInfo::new(&[1, 2, 4, 4], DataType::Float32))
        .unwrap();
    let weights: Vec<f32> = (0..18).map(|i| i as f32 / 8.0 - 1.0).collect();
    let w = b
        .add_constant("w", ConstTensor::from_f32(&[2, 1, 3, 3], &weights))
        .unwrap();
    let one = Padding2d {
        left: 1,
        right: 1,
        top: 1,
        bottom: 1,
    };
    let conv = LayerDescriptor::Convolution2d(Convolution2dDescriptor {
        padding: one,
        groups: 2,
        ..Default::default()
    });
    let y = b.add_layer("conv", conv, &[x, w]).unwrap();
    let c = b
        .add_constant("c", ConstTensor::from_f32(&[1, 2, 1, 1], &[0.5, -0.5]))
        .unwrap();
    let add = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
    let y = b.add_layer("add", add, &[y, c]).unwrap();
    let relu = LayerDescriptor::Activation(ActivationDescriptor {
        function: ActivationFunction::ReLU,
        a: 0.0,
        b: 0.0,
    });
    let y = b.add_layer("relu", relu, &[y]).unwrap();
    let pool = LayerDescriptor::Pooling2d(Pooling2dDescriptor {
        pool_type: PoolingType::Max,
        padding: Padding2d::default(),
        pool_width: 2,
        pool_height: 2,
        stride_x: 2,
        stride_y: 2,
        rounding: OutputRounding::Floor,
        count_include_pad: false,
        layout: DataLayout::Nchw,
    });
    let y = b.add_layer("pool", pool, &[y]).unwrap();
    let reshape = LayerDescriptor::Reshape(ReshapeDescriptor {
        target_shape: vec![1, 8].into(),
    });
    let y = b.add_layer("reshape", reshape, &[y]).unwrap();
    let concat = LayerDescriptor::Concat(ConcatDescriptor { axis: 1 });
    let y = b.add_layer("concat", concat, &[y, y]).unwrap();
    let softmax = LayerDescriptor::Softmax(SoftmaxDescriptor {
        beta: 1.0,
        axis: -1,
    });
    let y = b.add_layer("softmax", softmax, &[y]).unwrap();
    b.add_output("y", y).unwrap();
    b.build().unwrap()
}

/// [`seed_network`] optimised for CpuRef and compiled.
fn seed_file(rt: &Runtime) -> Vec<u8> {
    let optimized = rt
        .optimize(&seed_network(), &["CpuRef"], &OptimizerOptions::default())
        .unwrap();
    compile(rt, &optimized, &ModelFacts::default()).unwrap()
}

/// A convolution whose weights expect more input channels than u32 holds (2^16 per group
/// in 2^16 groups) is refused: its shape rule multiplied them unchecked (a panic with
/// debug assertions; without, a product that wraps to match the input).
#[test]
fn a_convolution_of_overflowing_channels_is_refused() {
    let rt = runtime();
    let file = resealed_of(&rt, &seed_network(), |mut s, _| {
        for l in s.layers.iter_mut().chain(&mut s.source) {
            match (l.name.as_str(), &mut l.descriptor) {
                ("x", _) => l.outputs[0].shape = vec![1, 1 << 16, 4, 4].into(),
                ("w", LayerDescriptor::Constant(c)) => {
                    c.info.shape = vec![0, 1 << 16, 3, 3].into();
                    l.outputs[0].shape = c.info.shape.clone();
                    l.constant = l.constant.map(|(at, _)| (at, 0));
                }
                ("conv", LayerDescriptor::Convolution2d(d)) => d.groups = 1 << 16,
                _ => {}
            }
        }
        postcard::to_allocvec(&s).unwrap()
    });
    let e = CompiledNetwork::from_bytes(&file).unwrap_err().to_string();
    assert!(
        e.ends_with(
            "weights [0, 65536, 3, 3] expect 65536 x 65536 input channels, the input has \
             65536"
        ),
        "{e}"
    );
}

/// One tensor of many dimensions, or of many per-axis scales, read by many Output layers
/// that store nothing of it: each layer copies the tensor, so the memory asked for would
/// grow with the square of the file's size (a file of 778 KB asked for more than 4 GB).
/// Refused once the copies outgrow the file.
#[test]
fn a_tensor_read_by_many_layers_cannot_outgrow_the_file() {
    use backplane_api::{PerAxisQuantization, Quantization, ROption};
    let wide = |o: &mut backplane_api::TensorInfo| o.shape = vec![1; 20_000].into();
    let scaled = |o: &mut backplane_api::TensorInfo| {
        o.shape = vec![20_000].into();
        o.data_type = DataType::QAsymmU8;
        o.quantization = ROption::RSome(Quantization {
            scale: 1.0,
            offset: 0,
            per_axis: ROption::RSome(PerAxisQuantization {
                axis: 0,
                scales: vec![1.0; 20_000].into(),
            }),
        });
    };
    let rt = runtime();
    for (what, tensor) in [
        ("dimensions", &wide as &dyn Fn(&mut _)),
        ("scales", &scaled),
    ] {
        let file = resealed(&rt, |mut s, _| {
            s.layers
                .iter_mut()
                .flat_map(|l| &mut l.outputs)
                .for_each(tensor);
            let y = s.layers.iter().find(|l| l.name == "y").unwrap().clone();
            for i in 0..2_000 {
                let name = format!("y{i}");
                s.layers.push(StoredLayer {
                    descriptor: LayerDescriptor::Output(name.as_str().into()),
                    name,
                    outputs: Vec::new(),
                    ..y.clone()
                });
            }
            postcard::to_allocvec(&s).unwrap()
        });
        let e = CompiledNetwork::from_bytes(&file).unwrap_err().to_string();
        assert!(
            e.contains("bytes justify") && e.contains("(\"y"),
            "{what}: {e} ({} bytes)",
            file.len()
        );
    }
}

/// The small network reads back as given, and so does the fuzz target's seed made of it.
/// After a change of the format, write the seed again:
/// `BACKPLANE_WRITE_FUZZ_SEED=1 cargo test -p backplane --lib the_fuzz_seed_reads`.
#[test]
fn the_fuzz_seed_reads() {
    let bytes = seed_file(&runtime());
    let read = CompiledNetwork::from_bytes(&bytes).unwrap();
    let given = seed_network();
    assert_eq!(read.source.layers().len(), given.layers().len());
    for (l, g) in read.source.layers().iter().zip(given.layers()) {
        assert_eq!((&l.name, &l.outputs), (&g.name, &g.outputs));
        assert_eq!(l.constant_bytes(), g.constant_bytes(), "{}", l.name);
    }
    if std::env::var_os("BACKPLANE_WRITE_FUZZ_SEED").is_some() {
        let seed = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../fuzz/seeds/compiled_network/small.bpn"
        );
        std::fs::write(seed, &bytes).unwrap();
        return;
    }
    if let Err(e) = CompiledNetwork::from_bytes(SEED) {
        panic!(
            "fuzz/seeds/compiled_network/small.bpn no longer reads ({e}): write it again \
             (see this test's documentation)"
        );
    }
}

/// Every truncation is an error (a file ends where its last section does), and so is every changed byte the container covers (header, table, sections); a
/// changed byte of the padding between them changes nothing.
#[test]
fn every_truncation_and_changed_byte_is_an_error() {
    let bytes = seed_file(&runtime());
    let sections = container::read(&bytes).unwrap();
    let end = sections.iter().map(|s| s.range.end).max().unwrap();
    for n in 0..bytes.len() {
        let read = CompiledNetwork::from_bytes(&bytes[..n]);
        assert_eq!(read.is_err(), n < end, "{n} bytes");
    }
    let covered = |i: usize| {
        i < 20
            || (24..24 + 32 * sections.len()).contains(&i)
            || sections.iter().any(|s| s.range.contains(&i))
    };
    for i in 0..bytes.len() {
        let mut changed = bytes.clone();
        changed[i] ^= 0x41;
        let read = CompiledNetwork::from_bytes(&changed);
        assert_eq!(read.is_err(), covered(i), "byte {i}");
    }
}

/// Files written by earlier versions of the format, kept as they were written: each name
/// says the container version and the Backend API of the host that wrote it. Version 2 added
/// the seals section (none here: CpuRef prepares nothing) and ends files at their last
/// section.
const GOLDEN: &[(&str, &[u8])] = &[
    (
        "container-1-api-1.5.bpn",
        include_bytes!("golden/container-1-api-1.5.bpn"),
    ),
    (
        "container-2-api-1.5.bpn",
        include_bytes!("golden/container-2-api-1.5.bpn"),
    ),
];

/// What a compiled network reads as, layer by layer, in both of its networks: name, kind,
/// descriptor, outputs and constant bytes.
fn read_as(c: &CompiledNetwork) -> Vec<String> {
    [&c.network, &c.source]
        .iter()
        .flat_map(|n| n.layers())
        .map(|l| {
            format!(
                "{} {:?} {:?} {:?}",
                l.name,
                l.descriptor,
                l.outputs,
                l.constant_bytes()
            )
        })
        .collect()
}

/// Every golden file (issue 40: a `.bpn` must never be misread) reads as the same network
/// compiled now: [`seed_network`], which must therefore not change. A change of the network
/// section's format that makes an old file decode differently, or not at all, fails here:
/// bump the container version, keep a reader for the old one, and add a golden file of the
/// new version.
#[test]
fn golden_files_read_as_written() {
    let fresh = CompiledNetwork::from_bytes(&seed_file(&runtime())).unwrap();
    for (name, bytes) in GOLDEN {
        let read = CompiledNetwork::from_bytes(bytes).unwrap_or_else(|e| {
            panic!(
                "golden/{name} no longer reads ({e}): the .bpn format changed without a new \
                 container version"
            )
        });
        assert_eq!(
            read_as(&read),
            read_as(&fresh),
            "golden/{name} reads as another network: the .bpn format changed without a new \
             container version"
        );
    }
}
