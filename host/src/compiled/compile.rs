//! Writing a compiled network: the optimised network, its source, its constants once each
//! (aligned), and per backend of Backend API 1.4 or later the blobs of `prepare_workload`.

use std::{collections::HashMap, path::Path};

use backplane_api::{ApiVersion, LayerKind, Value, capabilities::names};

use super::{
    ModelFacts, container,
    container::SectionKind,
    error::CompileError,
    seal::{self, SealKey},
    stored::{
        self, StoredAssignment, StoredBackend, StoredDeclared, StoredLayer, StoredMetadata,
        StoredNetwork,
    },
};
use crate::{
    graph::network::Network,
    graph::optimizer::{Assignment, OptimizedNetwork},
    onnx::DeclaredTensor,
    plugins::registry::BackendRegistry,
    runtime::Runtime,
};

/// The format version of the prepared workloads `backend` declares
/// ([`names::PREPARED_WORKLOAD_VERSION`]), if it declares one.
pub(super) fn blob_version(registry: &BackendRegistry, backend: &str) -> Option<u32> {
    match registry
        .capabilities(backend)?
        .get(names::PREPARED_WORKLOAD_VERSION)?
    {
        Value::Int(v) => u32::try_from(*v).ok(),
        _ => None,
    }
}

/// Per layer, the blob its backend prepared (`None` for layers of backends that prepare
/// nothing, run out of process, or predate Backend API 1.4).
fn prepare(
    optimized: &OptimizedNetwork,
    registry: &BackendRegistry,
) -> Result<Vec<Option<backplane_api::PreparedWorkload>>, CompileError> {
    let network = optimized.network();
    let layers = network.layers();
    let mut blobs = vec![None; layers.len()];
    for backend in optimized.backends_used() {
        let Some(entry) = registry.get(backend) else {
            continue;
        };
        if entry.remote().is_some() || blob_version(registry, backend).is_none() {
            continue;
        }
        let failed = |message: String| CompileError::Instance {
            backend: backend.to_owned(),
            message,
        };
        let instance = entry.create_instance().map_err(|r| failed(r.to_string()))?;
        let memory = instance
            .create_memory_manager()
            .map_err(|e| failed(e.to_string()))?;
        let factory = instance
            .create_workload_factory(memory.as_ref(), optimized.backend_options(backend))
            .map_err(|e| failed(e.to_string()))?;
        if !factory.prepares_workloads() {
            continue;
        }
        let declared = blob_version(registry, backend).unwrap_or_default();
        for (i, (l, a)) in layers.iter().zip(optimized.assignments()).enumerate() {
            if a.backend != backend
                || a.boundary.is_some()
                || matches!(
                    l.kind(),
                    LayerKind::Input | LayerKind::Output | LayerKind::Constant
                )
            {
                continue;
            }
            let blob = factory
                .prepare_workload(&network.workload_inputs(l).desc())
                .map_err(|error| CompileError::Prepare {
                    backend: backend.to_owned(),
                    layer: optimized.debug_name(i),
                    error,
                })?;
            if let Some(b) = &blob
                && b.version != declared
            {
                return Err(CompileError::BlobVersion {
                    backend: backend.to_owned(),
                    layer: optimized.debug_name(i),
                    blob: b.version,
                    declared,
                });
            }
            blobs[i] = blob;
        }
    }
    Ok(blobs)
}

/// Appends `bytes` to `section` at the next multiple of [`ALIGN`]; returns where.
fn append(section: &mut Vec<u8>, bytes: &[u8]) -> (u64, u64) {
    let at = container::aligned(section.len()).expect("a section fits in memory");
    section.resize(at, 0);
    section.extend_from_slice(bytes);
    (at as u64, bytes.len() as u64)
}

/// The bytes of a compiled network file for `optimized` (a network made by the optimizer of
/// `runtime`, with its source), with the model's `facts`: the backends of Backend API 1.4 or
/// later are asked to prepare each of their workloads.
///
/// # Errors
/// [`CompileError`] when a backend cannot be set up or fails to prepare a workload, or when
/// `optimized` has no source (it was not made by the optimizer).
pub fn compile(
    runtime: &Runtime,
    optimized: &OptimizedNetwork,
    facts: &ModelFacts,
) -> Result<Vec<u8>, CompileError> {
    let registry = runtime.registry();
    let source = optimized.source().ok_or(CompileError::NoSource)?;
    let blobs = prepare(optimized, registry)?;
    let mut constants: Vec<u8> = Vec::new();
    // Each constant once: the optimised network shares most of its constants' bytes with its
    // source, by pointer.
    let mut placed: HashMap<(usize, usize), (u64, u64)> = HashMap::new();
    let mut store = |network: &Network, with: Option<&[Assignment]>| -> Vec<StoredLayer> {
        network
            .layers()
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let mut s = stored::store_layer(l);
                if let Some(bytes) = l.constant_bytes() {
                    let key = (bytes.as_ptr() as usize, bytes.len());
                    s.constant = Some(
                        *placed
                            .entry(key)
                            .or_insert_with(|| append(&mut constants, bytes)),
                    );
                }
                s.assignment = with.map(|a| StoredAssignment::of(&a[i]));
                s
            })
            .collect()
    };
    let mut layers = store(optimized.network(), Some(optimized.assignments()));
    let source_layers = store(&source.network, None);
    let mut sections: Vec<(String, Vec<u8>)> = Vec::new();
    for (i, blob) in blobs.iter().enumerate() {
        let Some(blob) = blob else { continue };
        let backend = &optimized.assignments()[i].backend;
        let k = match sections.iter().position(|(b, _)| b == backend) {
            Some(k) => k,
            None => {
                sections.push((backend.clone(), Vec::new()));
                sections.len() - 1
            }
        };
        layers[i].blob = Some(append(&mut sections[k].1, &blob.bytes));
    }
    let seals = seal_all(runtime, optimized, &blobs);
    let backends = optimized
        .backends_used()
        .into_iter()
        .map(|id| {
            let entry = registry.get(id);
            let k = sections.iter().position(|(b, _)| b == id);
            StoredBackend {
                id: id.to_owned(),
                api: entry.map_or(ApiVersion::CURRENT, |e| e.version()),
                release: entry.and_then(|e| e.release()),
                blob_version: k.and_then(|_| blob_version(registry, id)),
                blob_section: k.map(|k| 2 + k as u32),
            }
        })
        .collect();
    // The network's own inputs and outputs at its shapes, with the element type names the
    // model declared for them.
    let declared = |given: &[DeclaredTensor], actual: Vec<(&str, &backplane_api::TensorInfo)>| {
        actual
            .into_iter()
            .map(|(name, info)| {
                let element = given
                    .iter()
                    .find(|d| d.name == name)
                    .map(|d| d.element.clone())
                    .unwrap_or_default();
                StoredDeclared::fixed(name, element, info)
            })
            .collect()
    };
    let network = StoredNetwork {
        producer: format!("backplane {}", env!("CARGO_PKG_VERSION")),
        api: ApiVersion::CURRENT,
        metadata: StoredMetadata::of(&facts.metadata),
        inputs: declared(&facts.inputs, optimized.network().inputs()),
        outputs: declared(&facts.outputs, optimized.network().outputs()),
        backends,
        layers,
        notes: optimized.notes().to_vec(),
        backend_options: optimized
            .backends_used()
            .into_iter()
            .map(|b| (b.to_owned(), optimized.backend_options(b).clone()))
            .collect(),
        preferences: source.preferences.clone(),
        no_fallback: source.options.no_fallback,
        pins: source.options.pins.clone(),
        no_subgraph_optimization: source.options.no_subgraph_optimization,
        source: source_layers,
    };
    let encoded = postcard::to_allocvec(&network).expect("a network serialises");
    let mut all: Vec<(SectionKind, &[u8])> = vec![
        (SectionKind::Network, &encoded),
        (SectionKind::Constants, &constants),
    ];
    all.extend(
        sections
            .iter()
            .map(|(_, b)| (SectionKind::Blobs, b.as_slice())),
    );
    if !seals.is_empty() {
        all.push((SectionKind::Seals, &seals));
    }
    Ok(container::write(&all))
}

/// The seals section for `blobs` (one per layer) under `runtime`'s seal key, made when it is
/// missing; empty when nothing was prepared. Without a key (sealing off, no place for the
/// user's, an unusable key file) the blobs are stored unsealed, with a warning: the file
/// loads anywhere, and its workloads are prepared again at load.
fn seal_all(
    runtime: &Runtime,
    optimized: &OptimizedNetwork,
    blobs: &[Option<backplane_api::PreparedWorkload>],
) -> Vec<u8> {
    if blobs.iter().all(Option::is_none) {
        return Vec::new();
    }
    let key = match runtime.seal_key_path().map(SealKey::read_or_create) {
        Some(Ok(key)) => key,
        why => {
            let why = match why {
                Some(Err(e)) => e.to_string(),
                _ => "sealing is off".to_owned(),
            };
            log::warn!(
                "the prepared workloads are stored unsealed ({why}): loading will prepare them \
                 again"
            );
            return Vec::new();
        }
    };
    let network = optimized.network();
    let sealed: Vec<(usize, seal::Seal)> = blobs
        .iter()
        .enumerate()
        .filter_map(|(i, b)| {
            let b = b.as_ref()?;
            let backend = &optimized.assignments()[i].backend;
            let prepared = seal::Prepared {
                network,
                layer: i,
                backend,
                version: b.version,
                blob: &b.bytes,
            };
            Some((i, key.seal(&prepared)))
        })
        .collect();
    seal::encode(&sealed)
}

/// [`compile`], written to `path` (through a file beside it, renamed over `path`).
///
/// # Errors
/// As [`compile`]; [`CompileError::Io`] when the file cannot be written.
pub fn compile_to(
    runtime: &Runtime,
    optimized: &OptimizedNetwork,
    facts: &ModelFacts,
    path: &Path,
) -> Result<u64, CompileError> {
    let bytes = compile(runtime, optimized, facts)?;
    // Written to a new file beside it, then renamed over it: a reader of the old file keeps
    // what it read, and a half-written file never has the name. The new file is created
    // with O_EXCL under a random name (`tempfile`), so a symlink planted where the partial
    // file would go is never followed, and two writers never share one.
    let io = |source| CompileError::Io {
        path: path.to_owned(),
        source,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut prefix = path.file_name().unwrap_or_default().to_owned();
    prefix.push(".partial-");
    let mut partial = tempfile::Builder::new()
        .prefix(&prefix)
        // As `File::create` would: what the umask allows (tempfile's default is 0600).
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(io)?;
    {
        use std::io::Write;
        partial.write_all(&bytes).map_err(io)?;
        partial.as_file().sync_all().map_err(io)?;
    }
    // On an error the partial file is removed when `partial` drops.
    partial.persist(path).map_err(|e| io(e.error))?;
    Ok(bytes.len() as u64)
}
