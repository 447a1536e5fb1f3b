//! Reading a compiled network: the file read into owned, aligned memory, the container
//! checked, both networks rebuilt with every constant a view of the file; then bound to a
//! runtime's backends (or optimised again when asked).

use std::{
    collections::{BTreeMap, HashMap},
    path::Path,
    sync::Arc,
};

use backplane_api::{ApiVersion, LayerKind};

use super::{
    CompiledNetwork, ModelFacts,
    compile::blob_version,
    container,
    container::SectionKind,
    error::{CompiledError, Mismatch, invalid},
    seal::{self, SealKey},
    stored::{self, StoredBackend, StoredNetwork},
};
use crate::{
    graph::network::SharedBytes,
    graph::optimizer::{OptimizedNetwork, OptimizerOptions, Source, StoredBlob},
    plugins::registry::BackendRegistry,
    runtime::Runtime,
};

/// A compiled network's bytes in memory the network owns, starting at a multiple of 64 bytes
/// (the container's section alignment), so that every section is as aligned as in the file.
/// The buffer is never resized, so the offset found at allocation stays right.
struct Aligned {
    words: Vec<u128>,
    start: usize,
    len: usize,
}

impl Aligned {
    /// Zeroed memory for `len` bytes at a 64-byte boundary.
    fn zeroed(len: usize) -> Self {
        const LINE: usize = 64;
        let words = vec![0u128; (len + LINE).div_ceil(16)];
        let start = (LINE - words.as_ptr() as usize % LINE) % LINE;
        Self { words, start, len }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut backplane_api::bytemuck::cast_slice_mut::<u128, u8>(&mut self.words)
            [self.start..self.start + self.len]
    }

    fn copy(bytes: &[u8]) -> Self {
        let mut aligned = Self::zeroed(bytes.len());
        aligned.bytes_mut().copy_from_slice(bytes);
        aligned
    }

    /// The whole of `file` (`len` bytes, as its metadata said): a snapshot that nothing done
    /// to the file afterwards (truncated, written in place, replaced) can change.
    fn read(mut file: std::fs::File, len: u64) -> std::io::Result<Self> {
        use std::io::Read;
        let len = usize::try_from(len).map_err(std::io::Error::other)?;
        let mut aligned = Self::zeroed(len);
        file.read_exact(aligned.bytes_mut())?;
        // A file that grew while it was read is read as it was at first; one that shrank
        // fails `read_exact` (UnexpectedEof), an error like any other of reading it.
        Ok(aligned)
    }
}

/// The size of a transparent huge page on x86-64 and aarch64 (with 4 KiB base pages).
const HUGE_PAGE: usize = 2 << 20;

/// The whole of a large `file` (`len` bytes, as its metadata said) in an anonymous private
/// mapping of this process, asked for in huge pages (`MADV_HUGEPAGE`: a 150 MB file takes
/// about 80 page faults instead of 40,000), then made read-only. Nothing but this process
/// can change it; page-aligned, so every 64-byte aligned section stays so.
fn read_anonymous(mut file: std::fs::File, len: u64) -> std::io::Result<memmap2::Mmap> {
    use std::io::Read;
    let len = usize::try_from(len).map_err(std::io::Error::other)?;
    let mut memory = memmap2::MmapOptions::new().len(len).map_anon()?;
    // Advice only: where the kernel gives no huge pages, base pages serve as well.
    let _ = memory.advise(memmap2::Advice::HugePage);
    file.read_exact(&mut memory[..])?;
    memory.make_read_only()
}

impl AsRef<[u8]> for Aligned {
    fn as_ref(&self) -> &[u8] {
        &backplane_api::bytemuck::cast_slice::<u128, u8>(&self.words)
            [self.start..self.start + self.len]
    }
}

impl CompiledNetwork {
    /// Reads `path` whole into memory the network owns ([`CompiledNetwork::from_shared`]):
    /// the file is not mapped, so that truncating it or writing into it while a session
    /// holds it changes nothing the session computes (a mapping of the file would fault on
    /// lost pages, or show the new bytes after every check passed). A large file goes into
    /// anonymous memory asked for in huge pages, which halves the cost of the copy.
    ///
    /// # Errors
    /// [`CompiledError::Io`], or as [`CompiledNetwork::from_shared`].
    pub fn open(path: &Path) -> Result<Self, CompiledError> {
        let io = |source| CompiledError::Io {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < HUGE_PAGE as u64 {
            return Self::from_shared(Arc::new(Aligned::read(file, len).map_err(io)?));
        }
        Self::from_shared(Arc::new(read_anonymous(file, len).map_err(io)?))
    }

    /// Reads a compiled network from its bytes (copied once into memory the network keeps,
    /// aligned for 64 bytes, as the file's sections are).
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
        let seals_range = match one(SectionKind::Seals) {
            Ok(r) => Some(r),
            Err(_) if !sections.iter().any(|s| s.kind == SectionKind::Seals) => None,
            Err(e) => return Err(e),
        };
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
                && declared
                    .iter()
                    .zip(&actual)
                    .all(|(d, (name, info))| d.is(name, info));
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
        let seals = match seals_range {
            Some(r) => seal::decode(&bytes[r], stored.layers.len()).map_err(invalid)?,
            None => vec![None; stored.layers.len()],
        };
        if let Some(i) = (0..seals.len()).find(|&i| seals[i].is_some() && prepared[i].is_none()) {
            return Err(invalid(format!(
                "layer {i} ({:?}) is sealed but has no prepared workload",
                stored.layers[i].name
            )));
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
                metadata: stored.metadata.metadata(),
                inputs: stored.inputs.into_iter().map(|d| d.declared()).collect(),
                outputs: stored.outputs.into_iter().map(|d| d.declared()).collect(),
            },
            producer: stored.producer,
            backends: stored.backends,
            network,
            assignments,
            prepared,
            seals,
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

    /// The optimised network as stored (before binding).
    pub fn network(&self) -> &crate::graph::network::Network {
        &self.network
    }

    /// Layer `i`'s prepared workload as the file holds it, and its seal, if any (before
    /// binding checks the seal).
    pub fn prepared(&self, i: usize) -> (Option<&StoredBlob>, Option<&seal::Seal>) {
        (
            self.prepared.get(i).and_then(Option::as_ref),
            self.seals.get(i).and_then(Option::as_ref),
        )
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
            let (prepared, unused) = self.sealed_blobs(runtime);
            let mut optimized = OptimizedNetwork::from_parts(
                self.network.clone(),
                self.assignments.clone(),
                self.notes.clone(),
                self.backend_options.clone(),
                Some(source),
                prepared,
            );
            if let Some(unused) = unused {
                log::warn!("compiled network: {unused}");
                optimized.add_note(format!("compiled network: {unused}"));
            }
            return Ok(optimized);
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

    /// The prepared workloads this runtime may restore: of a backend in this process, and
    /// sealed under this runtime's key for their layer, constants and bytes (checked here,
    /// one pass over each such layer's constants and blob). With them, when some are not
    /// used, why and which: each is created from its layer instead.
    fn sealed_blobs(&self, runtime: &Runtime) -> (Vec<Option<StoredBlob>>, Option<String>) {
        let start = std::time::Instant::now();
        // A backend now out of process restores nothing: its server makes its workloads.
        let local = |i: usize| {
            runtime
                .registry()
                .get(&self.assignments[i].backend)
                .is_some_and(|e| e.remote().is_none())
        };
        let candidates: Vec<usize> = (0..self.prepared.len())
            .filter(|&i| self.prepared[i].is_some() && local(i))
            .collect();
        let mut prepared = vec![None; self.prepared.len()];
        if candidates.is_empty() {
            return (prepared, None);
        }
        let key = match runtime.seal_key_path().map(SealKey::read) {
            Some(Ok(key)) => key,
            why => {
                let why = match why {
                    Some(Err(e)) => e.to_string(),
                    _ => "sealing is off".to_owned(),
                };
                return (
                    prepared,
                    Some(format!(
                        "its {} prepared workloads are not used (no seal key: {why}); they are \
                         prepared again at load",
                        candidates.len()
                    )),
                );
            }
        };
        let holds = |i: usize| {
            let blob = self.prepared[i].as_ref().expect("a candidate has a blob");
            self.seals[i].as_ref().is_some_and(|s| {
                key.verify(
                    &seal::Prepared {
                        network: &self.network,
                        layer: i,
                        backend: &self.assignments[i].backend,
                        version: blob.version,
                        blob: blob.bytes.bytes(),
                    },
                    s,
                )
            })
        };
        // Threads pay for a large file only (ResNet-50's 158 MB: 84 → 44 ms on two cores).
        let threads = if self.bytes >= 16 << 20 {
            std::thread::available_parallelism().map_or(1, usize::from)
        } else {
            1
        };
        // In layer order, as `candidates` is.
        let mut refused = Vec::new();
        for (ok, &i) in on_threads(threads, &candidates, |&i| holds(i))
            .into_iter()
            .zip(&candidates)
        {
            if ok {
                prepared[i] = self.prepared[i].clone();
            } else {
                refused.push(i);
            }
        }
        log::debug!(
            "compiled network: {} seals checked in {:.1} ms",
            candidates.len(),
            start.elapsed().as_secs_f64() * 1e3
        );
        if refused.is_empty() {
            return (prepared, None);
        }
        const NAMED: usize = 3;
        let mut names: Vec<String> = refused
            .iter()
            .take(NAMED)
            .map(|&i| self.network.layers()[i].name.clone())
            .collect();
        if refused.len() > NAMED {
            names.push(format!("{} more", refused.len() - NAMED));
        }
        let unsealed = refused.iter().filter(|&&i| self.seals[i].is_none()).count();
        let why = if unsealed == refused.len() {
            "they are not sealed".to_owned()
        } else {
            format!(
                "their seals do not hold under this runtime's key {}: the file was compiled \
                 with another key, or changed since",
                runtime
                    .seal_key_path()
                    .map_or_else(String::new, |p| p.display().to_string())
            )
        };
        let unused = format!(
            "{} of its {} prepared workloads are not used ({}): {why}; they are prepared again \
             at load",
            refused.len(),
            candidates.len(),
            names.join(", ")
        );
        (prepared, Some(unused))
    }
}

/// `f` of each of `items`, in order, computed by up to `threads` threads (this one and
/// helpers, each taking the next item as it finishes one): the seals of a large file are one
/// pass over hundreds of megabytes, and each is independent of the others.
fn on_threads<T: Sync>(threads: usize, items: &[T], f: impl Fn(&T) -> bool + Sync) -> Vec<bool> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let threads = threads.min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let results: Vec<AtomicBool> = items.iter().map(|_| AtomicBool::new(false)).collect();
    let next = AtomicUsize::new(0);
    let work = || {
        loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(k) else { break };
            results[k].store(f(item), Ordering::Relaxed);
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..threads {
            scope.spawn(work);
        }
        work();
    });
    results.into_iter().map(AtomicBool::into_inner).collect()
}
