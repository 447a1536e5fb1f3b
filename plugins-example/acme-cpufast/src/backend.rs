//! The CpuFast [`Backend`]: capabilities, layer support, and the objects it makes for each
//! network (arena, workload factory, context), plus `optimize_subgraph` (`fusion.rs`).

use std::sync::{Arc, Mutex, Weak};

use backplane_api::{
    Backend, BackendContext, BackendError, BackendOptions, BackendResult, Capabilities,
    LayerDescriptor, LayerKind, MemoryManager, OptimizationViews, SubgraphView, Support,
    TensorInfo, Value, WorkloadFactory, capabilities::names,
};
use backplane_backend_kit::capabilities;

use crate::{
    cache::{CacheSizes, L1D_BYTES, L2_BYTES},
    context::CpuFastContext,
    fusion,
    int8::kernels::Isa,
    layer_support,
    memory::Arena,
    workload_factory::CpuFastWorkloadFactory,
};

/// The environment variable that sets the default threads of a GEMM.
pub const THREADS_VAR: &str = "ACME_CPUFAST_THREADS";
/// The backend option (Backend API 1.1) that sets the threads of one network's GEMMs,
/// overriding [`THREADS_VAR`]: `--backend-option CpuFast:Threads=2`.
pub const THREADS_OPTION: &str = "Threads";
/// The most threads [`THREADS_VAR`] or [`THREADS_OPTION`] may ask for.
pub const MAX_THREADS: usize = 64;
/// The capability (text) naming the instruction set of the int8 products, picked at run
/// time: `Avx512Vnni`, `Avx2` (x86-64), `I8mm`, `DotProd`, `Neon` (aarch64) or `Scalar`.
pub const INT8_KERNELS: &str = "Int8Kernels";

/// The layer kinds CpuFast runs, each reported as a capability of its name (in Float32;
/// ElementwiseBinary with every operation, each also reported as `ElementwiseBinary<Op>`).
const KINDS: [LayerKind; 14] = [
    LayerKind::Convolution2d,
    LayerKind::DepthwiseConvolution2d,
    LayerKind::FullyConnected,
    LayerKind::Activation,
    LayerKind::Pooling2d,
    LayerKind::ElementwiseBinary,
    LayerKind::BatchNormalization,
    LayerKind::Mean,
    LayerKind::Softmax,
    LayerKind::Reshape,
    LayerKind::BatchMatMul,
    LayerKind::LayerNormalization,
    LayerKind::TransposeConvolution2d,
    LayerKind::PreCompiled,
];

/// Acme's fast CPU backend.
#[derive(Debug)]
pub struct CpuFast {
    threads: usize,
    /// The arenas this backend made, to recognise them when the host hands one back to
    /// `create_workload_factory`.
    arenas: Mutex<Vec<Weak<Arena>>>,
}

impl CpuFast {
    /// A backend whose GEMMs use up to `threads` threads (clamped to `1..=64`).
    pub fn new(threads: usize) -> Self {
        Self {
            threads: threads.clamp(1, MAX_THREADS),
            arenas: Mutex::new(Vec::new()),
        }
    }

    /// A backend configured from the environment: [`THREADS_VAR`] (default 1; a value that
    /// is not a number in `1..=64` is logged and ignored).
    pub fn from_env() -> Self {
        let threads = match std::env::var(THREADS_VAR) {
            Err(_) => 1,
            Ok(v) => match v.trim().parse::<usize>() {
                Ok(n) if (1..=MAX_THREADS).contains(&n) => n,
                _ => {
                    log::warn!(
                        "CpuFast: {THREADS_VAR}={v:?} is not a number in 1..={MAX_THREADS}; using 1 thread"
                    );
                    1
                }
            },
        };
        log::info!("CpuFast: created with {threads} thread(s)");
        Self::new(threads)
    }

    /// The thread count of [`THREADS_OPTION`] in `options`, if given.
    ///
    /// # Errors
    /// `InvalidArgument` when the value is not a whole number in `1..=64`.
    fn threads_option(options: &BackendOptions) -> BackendResult<Option<usize>> {
        let Some(value) = options.get(THREADS_OPTION) else {
            return Ok(None);
        };
        match value {
            Value::Int(n) if (1..=MAX_THREADS as i64).contains(n) => Ok(Some(*n as usize)),
            _ => Err(BackendError::invalid_argument(format!(
                "CpuFast: option {THREADS_OPTION}={value} is not a whole number in 1..={MAX_THREADS}"
            ))),
        }
    }

    /// The arena behind `memory`, if this backend made it.
    fn own_arena(&self, memory: &Arc<dyn MemoryManager>) -> Option<Arc<Arena>> {
        // Only pushed to and pruned; a panic elsewhere cannot leave the list inconsistent.
        let mut arenas = self.arenas.lock().unwrap_or_else(|e| e.into_inner());
        arenas.retain(|w| w.strong_count() > 0);
        arenas
            .iter()
            .filter_map(Weak::upgrade)
            .find(|a| std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(memory)))
    }
}

impl Backend for CpuFast {
    fn capabilities(&self) -> Capabilities {
        let caps = Capabilities::new()
            .with_bool(names::HOST_MEMORY, true)
            .with_bool(names::NON_CONST_WEIGHTS, true)
            .with_bool(names::HAS_FP16, false)
            .with_bool("Float32", true)
            .with_bool("Fusion", true)
            .with("Threads", Value::Int(self.threads as i64))
            .with(INT8_KERNELS, Value::Str(Isa::detect().name().into()))
            .with(L1D_BYTES, Value::Int(CacheSizes::get().l1d as i64))
            .with(L2_BYTES, Value::Int(CacheSizes::get().l2 as i64))
            .with(
                names::PREPARED_WORKLOAD_VERSION,
                Value::Int(i64::from(crate::prepared::BLOB_VERSION)),
            );
        capabilities::with_layer_kinds(capabilities::with_all_binary_operations(caps), &KINDS)
    }

    fn is_layer_supported(
        &self,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Support {
        layer_support::is_layer_supported(layer, inputs, outputs)
    }

    fn create_memory_manager(&self) -> BackendResult<Option<Arc<dyn MemoryManager>>> {
        let arena = Arc::new(Arena::new());
        self.arenas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&arena));
        Ok(Some(arena))
    }

    fn create_workload_factory(
        &self,
        memory: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        self.create_workload_factory_with_options(memory, &BackendOptions::new())
    }

    fn create_workload_factory_with_options(
        &self,
        memory: Option<Arc<dyn MemoryManager>>,
        options: &BackendOptions,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        let threads = match Self::threads_option(options)? {
            Some(n) => {
                log::info!(
                    "CpuFast: workload factory with {n} thread(s) (option {THREADS_OPTION})"
                );
                n
            }
            None => self.threads,
        };
        let arena = match memory.as_ref().and_then(|m| self.own_arena(m)) {
            Some(arena) => arena,
            None => {
                // No arena of ours: the factory keeps a private one, acquired for its life.
                log::debug!(
                    "CpuFast: workload factory without its memory manager; using a private arena"
                );
                let arena = Arc::new(Arena::new());
                arena.acquire()?;
                arena
            }
        };
        Ok(Box::new(CpuFastWorkloadFactory::new(arena, threads)))
    }

    fn create_backend_context(
        &self,
        options: &BackendOptions,
    ) -> BackendResult<Option<Box<dyn BackendContext>>> {
        let unknown: Vec<&str> = options
            .entries
            .iter()
            .map(|e| e.name.as_str())
            .filter(|name| *name != THREADS_OPTION)
            .collect();
        if !unknown.is_empty() {
            log::warn!("CpuFast: unknown backend option(s) {unknown:?} ignored");
        }
        Ok(Some(Box::new(CpuFastContext::new())))
    }

    fn optimize_subgraph(&self, subgraph: &SubgraphView<'_>) -> BackendResult<OptimizationViews> {
        Ok(fusion::optimize(subgraph))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_and_arena_recognition() {
        let b = CpuFast::new(3);
        let caps = b.capabilities();
        assert_eq!(caps.get("Threads"), Some(&Value::Int(3)));
        let isa = caps.get(INT8_KERNELS);
        assert!(
            Isa::ALL
                .iter()
                .any(|i| i.available() && isa == Some(&Value::Str(i.name().into()))),
            "{isa:?}"
        );
        for name in [
            "Float32",
            "Fusion",
            "HostMemory",
            "Convolution2d",
            "PreCompiled",
            "ElementwiseBinary",
            "ElementwiseBinaryAdd",
            "ElementwiseBinaryMul",
            "ElementwiseBinarySquaredDifference",
            "Mean",
            "Softmax",
            "Reshape",
            "BatchMatMul",
            "LayerNormalization",
            "TransposeConvolution2d",
        ] {
            assert!(caps.is_enabled(name), "{name}");
        }
        assert!(!caps.is_enabled("Transpose"));
        let mine = b.create_memory_manager().unwrap().unwrap();
        assert!(b.own_arena(&mine).is_some());
        let foreign: Arc<dyn MemoryManager> = Arc::new(Arena::new());
        assert!(b.own_arena(&foreign).is_none());
        assert_eq!(CpuFast::new(0).threads, 1);
    }

    #[test]
    fn threads_option_is_checked() {
        let opts = |v: Value| BackendOptions::new().with(THREADS_OPTION, v);
        assert_eq!(
            CpuFast::threads_option(&BackendOptions::new()).unwrap(),
            None
        );
        assert_eq!(
            CpuFast::threads_option(&opts(Value::Int(2))).unwrap(),
            Some(2)
        );
        assert_eq!(
            CpuFast::threads_option(&opts(Value::Int(64))).unwrap(),
            Some(64)
        );
        for bad in [
            Value::Int(0),
            Value::Int(65),
            Value::Float(2.0),
            Value::Str("two".into()),
        ] {
            let e = CpuFast::threads_option(&opts(bad.clone())).unwrap_err();
            assert_eq!(e.code, backplane_api::ErrorCode::InvalidArgument, "{bad}");
            assert_eq!(
                e.message.as_str(),
                format!("CpuFast: option Threads={bad} is not a whole number in 1..=64")
            );
        }
        // The factory takes the option over the backend's default.
        let b = CpuFast::new(1);
        assert!(
            b.create_workload_factory_with_options(None, &opts(Value::Int(2)))
                .is_ok()
        );
        assert!(
            b.create_workload_factory_with_options(None, &opts(Value::Int(0)))
                .is_err()
        );
    }
}
