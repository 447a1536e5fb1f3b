//! Compiled networks (`.bpn`, ExecuTorch's ahead-of-time split): a network optimised once,
//! with each backend's prepared workloads, saved as one file that loads without the ONNX
//! importer, the optimizer or the backends' preparation.
//!
//! 1. [`compile`] takes an optimised network (a session's plan) and writes: the network as it
//!    runs (every layer, its assignment, refusals and the layers each fused layer replaced:
//!    the debug handles), the network as given to the optimizer (to optimise again), the
//!    constants once each, 64-byte aligned, and per backend of Backend API 1.4 or later the
//!    blobs of its `prepare_workload` with the backend's id, release, API version and blob
//!    format version ([`container`] for the file's layout; a CRC-32 per section).
//! 2. [`CompiledNetwork::open`] maps the file read-only, checks the container (bounds,
//!    alignment, every checksum) and rebuilds both networks through the network builder,
//!    each constant a view of the mapping ([`SharedBytes`]): no constant is copied.
//! 3. [`CompiledNetwork::bind`] checks every backend against this runtime's registry: an
//!    absent backend, another release, another Backend API version or another blob format is
//!    an error naming the backend and both versions ([`CompiledError::Mismatch`]), or, when
//!    asked to re-optimise, the stored source network is optimised again for the backends
//!    present and a note says why. Bound, the network loads like any other: each workload
//!    with a blob is restored from it (`restore_workload`), the others created.
//!
//! Imports: `sys`, `graph`, `plugins`, `onnx`, `runtime`.

pub mod container;
mod stored;

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    sync::Arc,
};

use backplane_api::{ApiVersion, LayerKind, Value, capabilities::names, ffi::CallError};

use self::{
    container::SectionKind,
    stored::{StoredAssignment, StoredBackend, StoredLayer, StoredNetwork},
};
use crate::{
    graph::network::{Network, SharedBytes},
    graph::optimizer::{
        Assignment, OptimizeError, OptimizedNetwork, OptimizerOptions, Source, StoredBlob,
    },
    onnx::{DeclaredTensor, ModelMetadata},
    plugins::registry::BackendRegistry,
    runtime::Runtime,
};
pub use container::{ContainerError, looks_compiled};

/// What a compiled network carries besides the network: the model's metadata and its declared
/// inputs and outputs (what a session shows of a model). [`compile`] stores the network's own
/// inputs and outputs at its shapes, with the element type names given here.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelFacts {
    /// The model's metadata.
    pub metadata: ModelMetadata,
    /// The graph inputs, as declared (shapes fixed at compile time).
    pub inputs: Vec<DeclaredTensor>,
    /// The graph outputs.
    pub outputs: Vec<DeclaredTensor>,
}

/// Why a network could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// A backend could not be set up to prepare its workloads.
    #[error("backend {backend}: {message}")]
    Instance {
        /// The backend.
        backend: String,
        /// What failed.
        message: String,
    },
    /// A backend's `prepare_workload` failed.
    #[error("backend {backend}: preparing layer {layer}: {error}")]
    Prepare {
        /// The backend.
        backend: String,
        /// The layer (with the layers it replaced).
        layer: String,
        /// The backend's error.
        #[source]
        error: CallError,
    },
    /// The network was not made by the optimizer: nothing to optimise again from.
    #[error("the network was not made by the optimizer (it has no source to store)")]
    NoSource,
    /// A backend prepared a blob of another format version than it declares.
    #[error(
        "backend {backend}: layer {layer}: prepared a blob of format {blob}, the backend \
         declares PreparedWorkloadVersion {declared}"
    )]
    BlobVersion {
        /// The backend.
        backend: String,
        /// The layer.
        layer: String,
        /// The blob's version.
        blob: u32,
        /// The backend's capability.
        declared: u32,
    },
    /// The file could not be written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// Why a compiled network could not be read or used here.
#[derive(Debug, thiserror::Error)]
pub enum CompiledError {
    /// The file could not be opened or mapped.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The container is damaged or not a compiled network.
    #[error("compiled network: {0}")]
    Container(#[from] ContainerError),
    /// The network section is missing, damaged or inconsistent (a truncated, corrupted or
    /// crafted file).
    #[error("compiled network: {0}")]
    Invalid(String),
    /// A backend the network was compiled for is absent here or not the same.
    #[error(
        "compiled network: {0}; give --reoptimize (SessionOptions::reoptimize) to optimise the \
         stored layers again for the backends registered here"
    )]
    Mismatch(Mismatch),
    /// Optimising the stored layers again failed.
    #[error(transparent)]
    Optimize(#[from] OptimizeError),
}

/// How a backend differs from the one a network was compiled for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// The backend is not registered.
    #[error(
        "compiled for backend {backend} (release {release}, Backend API {api}), which is not \
         registered here"
    )]
    Absent {
        /// The backend id.
        backend: String,
        /// Its release when compiled.
        release: String,
        /// Its Backend API version when compiled.
        api: ApiVersion,
    },
    /// The backend is registered but faulted (it panicked or crashed in this runtime).
    #[error("compiled for backend {backend}, which is faulted here ({reason})")]
    Faulted {
        /// The backend id.
        backend: String,
        /// Why it is faulted.
        reason: String,
    },
    /// The backend computed in memory of its own when compiled and does not here (it runs out
    /// of process now), or the other way round: the file's memory copies do not fit.
    #[error(
        "compiled for backend {backend} computing in {}; here it computes in {}",
        if *device_then { "its own memory" } else { "host memory" },
        if *device_then { "host memory (out of process, or without DeviceMemory)" } else { "its own memory" }
    )]
    Memory {
        /// The backend id.
        backend: String,
        /// Whether it computed in its own memory when compiled.
        device_then: bool,
    },
    /// The backend here refuses a layer the file assigns to it.
    #[error("backend {backend} refuses layer {layer} here: {reason}")]
    Refused {
        /// The backend id.
        backend: String,
        /// The layer.
        layer: String,
        /// Its reason.
        reason: String,
    },
    /// Another version of something the network depends on.
    #[error("compiled for backend {backend} with {what} {compiled}; this runtime has {present}")]
    Version {
        /// The backend id.
        backend: String,
        /// What differs: `release`, `Backend API`, `prepared-workload format`.
        what: &'static str,
        /// The version when compiled.
        compiled: String,
        /// The version here.
        present: String,
    },
}

/// `true` when the file at `path` starts like a compiled network (its first 8 bytes); `false`
/// for any other file, or one that cannot be read (opening it as a model then says why).
pub fn is_compiled_file(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| looks_compiled(&head))
}

fn invalid(what: impl Into<String>) -> CompiledError {
    CompiledError::Invalid(what.into())
}

/// The format version of the prepared workloads `backend` declares
/// ([`names::PREPARED_WORKLOAD_VERSION`]), if it declares one.
fn blob_version(registry: &BackendRegistry, backend: &str) -> Option<u32> {
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
            .map(|(name, info)| DeclaredTensor {
                name: name.to_owned(),
                element: given
                    .iter()
                    .find(|d| d.name == name)
                    .map(|d| d.element.clone())
                    .unwrap_or_default(),
                data_type: Some(info.data_type),
                dims: Some(
                    info.shape
                        .iter()
                        .map(|&v| crate::onnx::Dim::Fixed(v))
                        .collect(),
                ),
            })
            .collect()
    };
    let network = StoredNetwork {
        producer: format!("backplane {}", env!("CARGO_PKG_VERSION")),
        api: ApiVersion::CURRENT,
        metadata: facts.metadata.clone(),
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
    Ok(container::write(&all))
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
    // Written beside and renamed over: a process that has the old file mapped keeps its
    // pages (a file rewritten in place would change or vanish under its mapping).
    let io = |source| CompileError::Io {
        path: path.to_owned(),
        source,
    };
    let mut partial = path.as_os_str().to_owned();
    partial.push(format!(".partial-{}", std::process::id()));
    let partial = PathBuf::from(partial);
    let written = (|| {
        use std::io::Write;
        let mut f = std::fs::File::create(&partial)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&partial, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&partial);
        return Err(io(e));
    }
    Ok(bytes.len() as u64)
}

/// Bytes copied into 16-byte aligned memory (a `u128` buffer).
struct Aligned {
    words: Vec<u128>,
    len: usize,
}

impl Aligned {
    fn copy(bytes: &[u8]) -> Self {
        let mut words = vec![0u128; bytes.len().div_ceil(16)];
        backplane_api::bytemuck::cast_slice_mut::<u128, u8>(&mut words)[..bytes.len()]
            .copy_from_slice(bytes);
        Self {
            words,
            len: bytes.len(),
        }
    }
}

impl AsRef<[u8]> for Aligned {
    fn as_ref(&self) -> &[u8] {
        &backplane_api::bytemuck::cast_slice::<u128, u8>(&self.words)[..self.len]
    }
}

/// A compiled network read and checked: its networks rebuilt on the mapped file, ready to be
/// bound to a runtime.
#[derive(Debug)]
pub struct CompiledNetwork {
    facts: ModelFacts,
    producer: String,
    backends: Vec<StoredBackend>,
    network: Network,
    assignments: Vec<Assignment>,
    prepared: Vec<Option<StoredBlob>>,
    notes: Vec<String>,
    backend_options: BTreeMap<String, backplane_api::BackendOptions>,
    source: Network,
    preferences: Vec<String>,
    options: OptimizerOptions,
    bytes: usize,
}

impl CompiledNetwork {
    /// Maps `path` read-only and reads it ([`CompiledNetwork::from_shared`]).
    ///
    /// # Errors
    /// [`CompiledError::Io`], or as [`CompiledNetwork::from_shared`].
    pub fn open(path: &Path) -> Result<Self, CompiledError> {
        let io = |source| CompiledError::Io {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let map = crate::sys::mapped::map_read_only(&file).map_err(io)?;
        Self::from_shared(Arc::new(map))
    }

    /// Reads a compiled network from its bytes (copied once into memory the network keeps,
    /// aligned for 16 bytes: a mapped file's sections are aligned for 64).
    ///
    /// # Errors
    /// As [`CompiledNetwork::from_shared`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, CompiledError> {
        Self::from_shared(Arc::new(Aligned::copy(bytes)))
    }

    /// Reads a compiled network held by `file` (a mapping or a buffer, kept as long as any
    /// network made from it): the container and every checksum, then the network section,
    /// each layer checked as it is rebuilt. Constants and blobs stay in `file`.
    ///
    /// # Errors
    /// [`CompiledError::Container`] or [`CompiledError::Invalid`], naming what is wrong.
    pub fn from_shared(file: Arc<dyn AsRef<[u8]> + Send + Sync>) -> Result<Self, CompiledError> {
        let start = std::time::Instant::now();
        let bytes = (*file).as_ref();
        let sections = container::read(bytes)?;
        let checked = start.elapsed();
        let one = |kind: SectionKind| {
            let mut found = sections.iter().filter(|s| s.kind == kind);
            match (found.next(), found.next()) {
                (Some(s), None) => Ok(s.range.clone()),
                (None, _) => Err(invalid(format!("no {kind:?} section"))),
                (Some(_), Some(_)) => Err(invalid(format!("two {kind:?} sections"))),
            }
        };
        let network_range = one(SectionKind::Network)?;
        let constants = one(SectionKind::Constants)?;
        let section = &bytes[network_range];
        let stored: StoredNetwork = postcard::from_bytes(section).map_err(|e| {
            // The section starts with who wrote it: a file of another host version says so.
            let writer = postcard::take_from_bytes::<String>(section)
                .ok()
                .map(|(producer, rest)| {
                    let api = postcard::take_from_bytes::<ApiVersion>(rest)
                        .map_or_else(|_| "?".to_owned(), |(a, _)| a.to_string());
                    format!(
                        " (written by {producer}, Backend API {api}; this is backplane {})",
                        env!("CARGO_PKG_VERSION")
                    )
                })
                .unwrap_or_default();
            invalid(format!("the network section does not decode{writer}: {e}"))
        })?;
        let network = stored::rebuild(&stored.layers, &file, &constants).map_err(invalid)?;
        let source = stored::rebuild(&stored.source, &file, &constants)
            .map_err(|e| invalid(format!("source network: {e}")))?;
        // What a session shows of the model must be the network's own inputs and outputs.
        for (what, declared, actual) in [
            ("inputs", &stored.inputs, network.inputs()),
            ("outputs", &stored.outputs, network.outputs()),
        ] {
            let fits = declared.len() == actual.len()
                && declared.iter().zip(&actual).all(|(d, (name, info))| {
                    d.name == *name
                        && d.data_type == Some(info.data_type)
                        && d.dims.as_ref().is_some_and(|dims| {
                            dims.len() == info.shape.len()
                                && dims
                                    .iter()
                                    .zip(info.shape.iter())
                                    .all(|(d, &v)| *d == crate::onnx::Dim::Fixed(v))
                        })
                });
            if !fits {
                return Err(invalid(format!(
                    "the declared {what} are not the network's"
                )));
            }
        }
        let mut listed: HashMap<&str, &StoredBackend> = HashMap::new();
        for b in &stored.backends {
            if listed.insert(b.id.as_str(), b).is_some() {
                return Err(invalid(format!("backend {:?} is listed twice", b.id)));
            }
        }
        let mut assignments = Vec::with_capacity(stored.layers.len());
        let mut prepared = Vec::with_capacity(stored.layers.len());
        for (i, l) in stored.layers.iter().enumerate() {
            let a = l
                .assignment
                .as_ref()
                .ok_or_else(|| invalid(format!("layer {i} ({:?}) has no assignment", l.name)))?;
            let backend = listed.get(a.backend.as_str()).ok_or_else(|| {
                invalid(format!(
                    "layer {i} ({:?}) runs on {:?}, which the file does not list",
                    l.name, a.backend
                ))
            })?;
            // Only the backend that made a PreCompiled layer is asked to run it, and only a
            // MemCopy crosses a memory boundary.
            if let backplane_api::LayerDescriptor::PreCompiled(p) = &l.descriptor
                && p.backend.as_str() != a.backend
            {
                return Err(invalid(format!(
                    "layer {i} ({:?}) is {}'s PreCompiled layer, assigned to {}",
                    l.name, p.backend, a.backend
                )));
            }
            if let Some((from, to, _)) = &a.boundary
                && (l.descriptor.kind() != LayerKind::MemCopy || from == to)
            {
                return Err(invalid(format!(
                    "layer {i} ({:?}) is a {}, not a copy between two memories ({from} -> {to})",
                    l.name,
                    l.descriptor.kind()
                )));
            }
            let blob = match (l.blob, backend.blob_section, backend.blob_version) {
                (None, _, _) => None,
                (Some(at), Some(k), Some(version)) => {
                    let section = sections
                        .get(k as usize)
                        .filter(|s| s.kind == SectionKind::Blobs)
                        .ok_or_else(|| {
                            invalid(format!(
                                "backend {} names section {k}, not blobs",
                                a.backend
                            ))
                        })?;
                    let r = stored::range_in(at, section.range.len()).map_err(|e| {
                        invalid(format!("layer {i} ({:?})'s prepared workload: {e}", l.name))
                    })?;
                    let bytes = SharedBytes::new(
                        Arc::clone(&file),
                        section.range.start + r.start..section.range.start + r.end,
                    )
                    .ok_or_else(|| invalid("a blob out of the file"))?;
                    Some(StoredBlob { version, bytes })
                }
                (Some(_), _, _) => {
                    return Err(invalid(format!(
                        "layer {i} ({:?}) has a prepared workload but backend {} has no blob \
                         section",
                        l.name, a.backend
                    )));
                }
            };
            assignments.push(a.assignment());
            prepared.push(blob);
        }
        log::debug!(
            "compiled network of {} bytes read: sections checked in {:.1} ms, network decoded \
             and rebuilt in {:.1} ms",
            bytes.len(),
            checked.as_secs_f64() * 1e3,
            (start.elapsed() - checked).as_secs_f64() * 1e3
        );
        Ok(Self {
            facts: ModelFacts {
                metadata: stored.metadata,
                inputs: stored.inputs,
                outputs: stored.outputs,
            },
            producer: stored.producer,
            backends: stored.backends,
            network,
            assignments,
            prepared,
            notes: stored.notes,
            backend_options: stored.backend_options.into_iter().collect(),
            source,
            preferences: stored.preferences,
            options: OptimizerOptions {
                no_fallback: stored.no_fallback,
                pins: stored.pins,
                no_subgraph_optimization: stored.no_subgraph_optimization,
                backend_options: BTreeMap::new(),
            },
            bytes: bytes.len(),
        })
    }

    /// The model's metadata and declared inputs and outputs.
    pub fn facts(&self) -> &ModelFacts {
        &self.facts
    }

    /// The host that wrote the file (`backplane 0.1.0`).
    pub fn producer(&self) -> &str {
        &self.producer
    }

    /// The file's size in bytes.
    pub fn file_bytes(&self) -> usize {
        self.bytes
    }

    /// How many workloads the file holds prepared ahead of time.
    pub fn prepared_workloads(&self) -> usize {
        self.prepared.iter().flatten().count()
    }

    /// The backend preferences the network was compiled for.
    pub fn preferences(&self) -> &[String] {
        &self.preferences
    }

    /// Every way this runtime's backends differ from those the network was compiled for
    /// (none: the network can be loaded as stored).
    pub fn mismatches(&self, registry: &BackendRegistry) -> Vec<Mismatch> {
        let mut found = self.backend_mismatches(registry);
        if found.is_empty() {
            // The file's assignments are not taken on trust: each backend here is asked
            // again about every layer the file gives it (a refusal names the layer).
            let network = &self.network;
            for (l, a) in network.layers().iter().zip(&self.assignments) {
                if a.boundary.is_some()
                    || matches!(
                        l.kind(),
                        LayerKind::Input | LayerKind::Output | LayerKind::Constant
                    )
                {
                    continue;
                }
                let Some(entry) = registry.get(&a.backend) else {
                    continue;
                };
                let inputs: Vec<_> = l
                    .inputs
                    .iter()
                    .map(|&t| network.tensor_info(t).clone())
                    .collect();
                if let Err(reason) = entry.supports(&l.descriptor, &inputs, &l.outputs) {
                    found.push(Mismatch::Refused {
                        backend: a.backend.clone(),
                        layer: l.name.clone(),
                        reason,
                    });
                    break;
                }
            }
        }
        found
    }

    fn backend_mismatches(&self, registry: &BackendRegistry) -> Vec<Mismatch> {
        let mut found = Vec::new();
        for b in &self.backends {
            let release = b.release.clone().unwrap_or_else(|| "unknown".to_owned());
            let Some(entry) = registry.get(&b.id) else {
                found.push(Mismatch::Absent {
                    backend: b.id.clone(),
                    release,
                    api: b.api,
                });
                continue;
            };
            if entry.is_faulted() {
                found.push(Mismatch::Faulted {
                    backend: b.id.clone(),
                    reason: entry.fault_reason().unwrap_or_default(),
                });
                continue;
            }
            let version = |what, compiled: String, present: String| Mismatch::Version {
                backend: b.id.clone(),
                what,
                compiled,
                present,
            };
            // The memory boundaries were planned for where the backend's tensors lived: in
            // its own memory (a device backend in this process) or in host memory.
            let had_device = self.assignments.iter().any(|a| {
                a.boundary
                    .as_ref()
                    .is_some_and(|x| x.from == b.id || x.to == b.id)
            });
            if had_device != entry.is_device() {
                found.push(Mismatch::Memory {
                    backend: b.id.clone(),
                    device_then: had_device,
                });
            }
            if entry.version() != b.api {
                found.push(version(
                    "Backend API",
                    b.api.to_string(),
                    entry.version().to_string(),
                ));
            }
            if let (Some(then), Some(now)) = (&b.release, entry.release())
                && *then != now
            {
                found.push(version("release", then.clone(), now));
            }
            if let Some(then) = b.blob_version {
                let now = blob_version(registry, &b.id);
                if now != Some(then) && entry.remote().is_none() {
                    found.push(version(
                        "prepared-workload format",
                        then.to_string(),
                        now.map_or_else(|| "none".to_owned(), |v| v.to_string()),
                    ));
                }
            }
        }
        found
    }

    /// The network ready to load in `runtime`: as stored when every backend matches
    /// ([`CompiledNetwork::mismatches`]); else, with `reoptimize`, the stored source network
    /// optimised again for the stored preferences among the backends registered here (the
    /// notes say why), or the first mismatch as an error.
    ///
    /// # Errors
    /// [`CompiledError::Mismatch`], or [`CompiledError::Optimize`] when optimising again fails.
    pub fn bind(
        &self,
        runtime: &Runtime,
        reoptimize: bool,
    ) -> Result<OptimizedNetwork, CompiledError> {
        let mismatches = self.mismatches(runtime.registry());
        let source = Source {
            network: self.source.clone(),
            preferences: self.preferences.clone(),
            options: OptimizerOptions {
                backend_options: self.backend_options.clone(),
                ..self.options.clone()
            },
        };
        if mismatches.is_empty() {
            // A backend now out of process restores nothing: its server makes its workloads.
            let prepared = self
                .prepared
                .iter()
                .zip(&self.assignments)
                .map(|(p, a)| {
                    p.clone().filter(|_| {
                        runtime
                            .registry()
                            .get(&a.backend)
                            .is_some_and(|e| e.remote().is_none())
                    })
                })
                .collect();
            return Ok(OptimizedNetwork::from_parts(
                self.network.clone(),
                self.assignments.clone(),
                self.notes.clone(),
                self.backend_options.clone(),
                Some(source),
                prepared,
            ));
        }
        if !reoptimize {
            return Err(CompiledError::Mismatch(mismatches[0].clone()));
        }
        let preferences: Vec<&str> = self.preferences.iter().map(String::as_str).collect();
        let mut optimized = runtime.optimize(&source.network, &preferences, &source.options)?;
        for m in &mismatches {
            log::warn!("{m}: optimising the stored layers again");
            optimized.add_note(format!("compiled network: {m}; optimised again"));
        }
        Ok(optimized)
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{ActivationDescriptor, ActivationFunction, DataType, LayerDescriptor};

    use super::*;
    use crate::{
        graph::network::NetworkBuilder, plugins::paths::PathSource, runtime::CreationOptions,
    };

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
            relu.assignment.as_mut().unwrap().boundary =
                Some(("host".into(), "CpuRef".into(), false));
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
        assert!(
            e.starts_with("compiled network: compiled for backend CpuRef with Backend API 1.2")
        );
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

    /// Every truncation that cuts into a section is an error (the padding after the last may
    /// go), and so is every changed byte the container covers (header, table, sections); a
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
}
