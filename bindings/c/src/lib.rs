//! # The C API of the backplane inference host
//!
//! `libbackplane.so`, its header `backplane.h` (generated from this file by cbindgen) and
//! `backplane.pc`, installed by `scripts/install-c.sh PREFIX`. It wraps [`backplane::Runtime`]
//! and [`backplane::Session`]: discover backends, read the discovery report, load an ONNX
//! model for backend preferences, run it, and ask which backend ran each layer.
//!
//! ## Conventions (those of onnxruntime's C API)
//! 1. Objects are opaque handles: `bp_runtime` (from [`bp_runtime_new`]) and `bp_network`
//!    (from [`bp_network_load`]). Each is freed by its `*_free` function, which accepts NULL.
//!    A network holds its runtime: freeing the runtime first is allowed.
//! 2. Every function returns a status ([`BP_OK`] = 0, a negative `BP_ERROR_*` otherwise) or
//!    a pointer (NULL on error). After an error, [`bp_last_error`] gives the calling thread's
//!    message.
//! 3. A `char *` returned to the caller is the caller's, freed with [`bp_string_free`]; a
//!    `const char *` or `const int64_t *` belongs to the handle it came from and lives as
//!    long as the handle.
//! 4. No Rust panic crosses into C: each entry point catches it and returns
//!    [`BP_ERROR_INTERNAL`] (or NULL).
//! 5. Threads: handles may be used from several threads at once. Runs of one network are
//!    serialised; different networks run concurrently.
//! 6. Data types are ONNX's element types ([`BP_FLOAT32`], [`BP_INT32`], ...), as in
//!    onnxruntime's `ONNXTensorElementDataType`.

#![allow(
    non_camel_case_types,
    reason = "the C names of the API: bp_runtime, bp_network, bp_tensor"
)]

use std::{
    cell::RefCell,
    ffi::{CStr, CString, c_char, c_void},
    panic::{AssertUnwindSafe, catch_unwind},
    path::Path,
    sync::Arc,
};

use backplane::{
    CreationOptions, ExecuteError, InputTensor, OutputTensor, Runtime, Session, SessionError,
    SessionOptions, api::TensorInfo, compiled::CompiledError, onnx::proto::data_type,
    plugins::isolation::Isolation,
};

/// Success.
pub const BP_OK: i32 = 0;
/// A NULL handle or pointer, a string that is not UTF-8, an unknown flag, an index out of
/// range, or a malformed option or shape.
pub const BP_ERROR_INVALID_ARGUMENT: i32 = -1;
/// The model file could not be read or imported.
pub const BP_ERROR_MODEL: i32 = -2;
/// No assignment of the network's layers to the preferred backends exists.
pub const BP_ERROR_UNSUPPORTED: i32 = -3;
/// The network could not be loaded (a backend failed while setting it up).
pub const BP_ERROR_LOAD: i32 = -4;
/// The tensors given to [`bp_network_run`] do not match the network's inputs or outputs
/// (name, data type, shape or byte size); nothing ran.
pub const BP_ERROR_BINDING: i32 = -5;
/// A backend failed or faulted while running; a backend that faulted is not used again.
pub const BP_ERROR_BACKEND: i32 = -6;
/// An internal error of the library (a caught panic).
pub const BP_ERROR_INTERNAL: i32 = -7;

/// [`bp_runtime_new`] flag: register no built-in backend (CpuRef).
pub const BP_NO_BUILTIN: u32 = 1;
/// [`bp_runtime_new`] flag: load each plugin in a child process first (the `backplane` CLI
/// named by `BACKPLANE_PROBE`, else found on `PATH`); one that crashes or hangs there is
/// rejected as `crashed`.
pub const BP_ISOLATE: u32 = 2;

/// [`bp_network_load_ex`] flag: no fusion (no graph rewrites, no subgraph optimisation).
pub const BP_NO_FUSION: u32 = 1;

/// [`bp_network_load_ex`] flag: a compiled network (`.bpn`) made for backends that differ from
/// those registered here is optimised again from its stored layers instead of failing with
/// `BP_ERROR_UNSUPPORTED`.
pub const BP_REOPTIMIZE: u32 = 2;

/// ONNX element type `FLOAT`: IEEE 754 binary32.
pub const BP_FLOAT32: i32 = 1;
/// ONNX element type `UINT8` (also the storage of QAsymmU8 tensors).
pub const BP_UINT8: i32 = 2;
/// ONNX element type `INT8` (also the storage of QAsymmS8 and QSymmS8 tensors).
pub const BP_INT8: i32 = 3;
/// ONNX element type `INT32`.
pub const BP_INT32: i32 = 6;
/// ONNX element type `BOOL`: one byte, 0 or 1.
pub const BP_BOOL: i32 = 9;
/// ONNX element type `FLOAT16`: IEEE 754 binary16.
pub const BP_FLOAT16: i32 = 10;
/// ONNX element type `UINT16` (Backend API 1.5).
pub const BP_UINT16: i32 = 4;
/// ONNX element type `INT16` (Backend API 1.5).
pub const BP_INT16: i32 = 5;
/// ONNX element type `INT64` (Backend API 1.5).
pub const BP_INT64: i32 = 7;
/// ONNX element type `DOUBLE`: IEEE 754 binary64 (Backend API 1.5).
pub const BP_DOUBLE: i32 = 11;
/// ONNX element type `UINT32` (Backend API 1.5).
pub const BP_UINT32: i32 = 12;
/// ONNX element type `UINT64` (Backend API 1.5).
pub const BP_UINT64: i32 = 13;
/// ONNX element type `BFLOAT16`: the upper half of an IEEE 754 binary32 (Backend API 1.5).
pub const BP_BFLOAT16: i32 = 16;

/// A runtime: its registry of backends and the report of how it was filled.
pub struct bp_runtime {
    runtime: Arc<Runtime>,
    /// The memory budget of each load from this runtime, in bytes (0: physical memory).
    max_memory: std::sync::atomic::AtomicU64,
}

/// One graph input or output as C reads it.
struct Io {
    name: CString,
    shape: Vec<i64>,
    dtype: i32,
}

impl Io {
    /// A tensor of a fixed shape (an output of the plan made at load).
    fn fixed(name: &str, info: &TensorInfo) -> Self {
        Self {
            name: c_name(name),
            shape: info.shape.iter().map(|&d| i64::from(d)).collect(),
            dtype: data_type::of(info.data_type),
        }
    }

    /// A declared input or output: a symbolic or dynamic dimension is -1, an element type the
    /// host does not take 0.
    fn new(t: &backplane::onnx::DeclaredTensor) -> Self {
        use backplane::onnx::Dim;
        Self {
            name: c_name(&t.name),
            shape: t
                .dims
                .iter()
                .flatten()
                .map(|d| match d {
                    Dim::Fixed(v) => i64::from(*v),
                    Dim::Named(_) | Dim::Any => -1,
                })
                .collect(),
            dtype: t.data_type.map_or(0, data_type::of),
        }
    }
}

/// A name from the model as C reads it: an interior NUL is cut there.
fn c_name(name: &str) -> CString {
    CString::new(name.split('\0').next().unwrap_or_default()).unwrap_or_default()
}

/// A loaded network: a model read once, run at any input shapes that fit it (a plan per set
/// of shapes, optimised for the preferences, loaded in a runtime and cached).
pub struct bp_network {
    session: Session,
    inputs: Vec<Io>,
    outputs: Vec<Io>,
    /// Each input's name and data type (its shape is the caller's, checked by the session).
    input_types: Vec<(String, TensorInfo)>,
    /// The outputs' names and types as the model declares them (how a dynamic plan's outputs
    /// are bound: their shapes are known only after a run).
    output_types: Vec<(String, TensorInfo)>,
}

/// A tensor handed to [`bp_network_run`]: an input to read or an output buffer to fill.
#[repr(C)]
pub struct bp_tensor {
    /// The graph input's or output's name; NULL: the one at this position.
    pub name: *const c_char,
    /// Its ONNX element type (`BP_FLOAT32`, ...).
    pub dtype: i32,
    /// Its dimensions, outermost first (`rank` of them).
    pub shape: *const i64,
    /// How many dimensions.
    pub rank: usize,
    /// The densely packed, row-major, native-endian elements. Inputs are only read. Buffers
    /// must not overlap one another.
    pub data: *mut c_void,
    /// The size of `data` in bytes: exactly the tensor's size.
    pub bytes: usize,
}

/// An input shape for [`bp_network_load_ex`], replacing a model's symbolic dimensions.
#[repr(C)]
pub struct bp_input_shape {
    /// The graph input's name.
    pub name: *const c_char,
    /// Its dimensions (`rank` of them), each at least 0.
    pub shape: *const i64,
    /// How many dimensions.
    pub rank: usize,
}

/// Why a call failed: a status and a message.
struct Failure {
    code: i32,
    message: String,
}

impl Failure {
    fn invalid(message: impl Into<String>) -> Self {
        Self {
            code: BP_ERROR_INVALID_ARGUMENT,
            message: message.into(),
        }
    }
}

impl From<SessionError> for Failure {
    fn from(e: SessionError) -> Self {
        let code = match &e {
            SessionError::Import(_) => BP_ERROR_MODEL,
            // A compiled network made for other backends (or not optimisable for these).
            SessionError::Compiled(CompiledError::Mismatch(_) | CompiledError::Optimize(_)) => {
                BP_ERROR_UNSUPPORTED
            }
            // A damaged or unreadable compiled network.
            SessionError::Compiled(_) => BP_ERROR_MODEL,
            SessionError::Compile(_) => BP_ERROR_BACKEND,
            SessionError::Optimize(_) => BP_ERROR_UNSUPPORTED,
            SessionError::Load(_) => BP_ERROR_LOAD,
            SessionError::Input(_) | SessionError::Shape { .. } => BP_ERROR_BINDING,
            SessionError::Run(e) => return Failure::from(e.clone()),
        };
        Self {
            code,
            message: e.to_string(),
        }
    }
}

impl From<ExecuteError> for Failure {
    fn from(e: ExecuteError) -> Self {
        let code = match &e {
            ExecuteError::Binding(_) => BP_ERROR_BINDING,
            _ => BP_ERROR_BACKEND,
        };
        Self {
            code,
            message: e.to_string(),
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    let message = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // During thread teardown the slot may be gone: the message is then dropped, not a panic.
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = message);
}

/// Runs `f`, catching a panic; a failure's message becomes the thread's last error.
fn guarded<T>(f: impl FnOnce() -> Result<T, Failure>) -> Result<T, i32> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(failure)) => {
            set_last_error(&failure.message);
            Err(failure.code)
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned());
            set_last_error(&format!("internal error in libbackplane: {what}"));
            Err(BP_ERROR_INTERNAL)
        }
    }
}

/// A status-returning entry point.
fn status(f: impl FnOnce() -> Result<(), Failure>) -> i32 {
    guarded(f).err().unwrap_or(BP_OK)
}

/// A pointer-returning entry point (NULL on failure).
fn pointer<T>(f: impl FnOnce() -> Result<*const T, Failure>) -> *const T {
    guarded(f).unwrap_or(std::ptr::null())
}

/// An owned string for C, freed with [`bp_string_free`].
fn owned_string(s: String) -> *mut c_char {
    CString::new(s.replace('\0', "\\0"))
        .unwrap_or_default()
        .into_raw()
}

/// Reads an optional C string.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that outlives `'a`.
unsafe fn opt_str<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>, Failure> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller guarantees a NUL-terminated string that lives for 'a.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map(Some)
        .map_err(|_| Failure::invalid(format!("{what} is not UTF-8")))
}

/// Reads a required C string.
///
/// # Safety
/// As [`opt_str`].
unsafe fn req_str<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    // SAFETY: forwarded from the caller.
    unsafe { opt_str(p, what) }?.ok_or_else(|| Failure::invalid(format!("{what} is NULL")))
}

/// A slice from a C pointer and a length; NULL is the empty slice when `len` is 0.
///
/// # Safety
/// `p` is NULL or points to `len` initialised `T`s that outlive `'a`.
unsafe fn slice<'a, T>(p: *const T, len: usize, what: &str) -> Result<&'a [T], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-null, and the caller guarantees `len` initialised elements.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// Dimensions from C (`int64_t`), each in `0..=u32::MAX`.
fn dims(shape: &[i64], what: &str) -> Result<Vec<u32>, Failure> {
    shape
        .iter()
        .map(|&d| {
            u32::try_from(d).map_err(|_| {
                Failure::invalid(format!("{what}: dimension {d} is not in 0..=4294967295"))
            })
        })
        .collect()
}

/// A handle from C.
///
/// # Safety
/// `p` is NULL or a live handle of this library.
unsafe fn handle<'a, T>(p: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: the caller guarantees NULL or a live handle made by this library.
    unsafe { p.as_ref() }.ok_or_else(|| Failure::invalid(format!("{what} is NULL")))
}

/// The Backend API version of this host, `"MAJOR.MINOR"` (static; do not free).
#[unsafe(no_mangle)]
pub extern "C" fn bp_api_version() -> *const c_char {
    static VERSION: std::sync::OnceLock<CString> = std::sync::OnceLock::new();
    VERSION
        .get_or_init(|| {
            CString::new(backplane::api::ApiVersion::CURRENT.to_string()).unwrap_or_default()
        })
        .as_ptr()
}

/// The calling thread's last error message; `""` when no call on this thread has failed.
/// Valid until the next failing call on this thread; do not free.
#[unsafe(no_mangle)]
pub extern "C" fn bp_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// Frees a string returned by this library (NULL is accepted).
///
/// # Safety
/// `s` is NULL or a `char *` returned by this library, not yet freed, and not modified (its
/// length must be the one it was returned with).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bp_string_free(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: `s` came from `CString::into_raw` in `owned_string` and is freed once.
        drop(unsafe { CString::from_raw(s) });
    }
}

/// Creates a runtime: registers the built-in backends (unless `BP_NO_BUILTIN`), then
/// discovers, validates and registers the plugins of the search path. `paths` is a
/// `:`-separated list of absolute directories, or NULL for `DYNAMIC_BACKEND_PATHS` (then the
/// build-time default). Files that are rejected do not make this fail: the report says why.
///
/// # Safety
/// `paths` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bp_runtime_new(paths: *const c_char, flags: u32) -> *mut bp_runtime {
    // SAFETY: forwarded from the caller; no backend runs out of process.
    unsafe { bp_runtime_new_ex(paths, flags, std::ptr::null()) }
}

/// [`bp_runtime_new`], with `out_of_process` a comma-separated list of backend ids that run
/// in a child process each (NULL or "" for none): a crash or hang in such a backend fails
/// that run with `BP_ERROR_BACKEND`, naming the signal or deadline, and faults the backend;
/// loading the model again runs it on the remaining backends. The child is the `backplane`
/// CLI named by `BACKPLANE_PROBE`, else the first on `PATH`.
///
/// # Safety
/// `paths` and `out_of_process` are NULL or NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bp_runtime_new_ex(
    paths: *const c_char,
    flags: u32,
    out_of_process: *const c_char,
) -> *mut bp_runtime {
    pointer(|| {
        // SAFETY: forwarded from the caller.
        let paths = unsafe { opt_str(paths, "paths") }?;
        // SAFETY: forwarded from the caller.
        let ids = unsafe { opt_str(out_of_process, "out_of_process") }?;
        if flags & !(BP_NO_BUILTIN | BP_ISOLATE) != 0 {
            return Err(Failure::invalid(format!("unknown flags {flags:#x}")));
        }
        let ids: Vec<String> = ids
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|id| !id.is_empty())
            .map(str::to_owned)
            .collect();
        let options = CreationOptions {
            dynamic_backends_path: paths.map(Into::into),
            register_builtins: flags & BP_NO_BUILTIN == 0,
            isolation: if flags & BP_ISOLATE != 0 {
                Some(Isolation::from_environment().map_err(Failure::invalid)?)
            } else {
                None
            },
            out_of_process: if ids.is_empty() {
                None
            } else {
                Some(backplane::OutOfProcess::from_environment(ids).map_err(Failure::invalid)?)
            },
            ..CreationOptions::default()
        };
        let runtime = Arc::new(Runtime::new(options));
        Ok(Box::into_raw(Box::new(bp_runtime {
            runtime,
            max_memory: std::sync::atomic::AtomicU64::new(0),
        }))
        .cast_const())
    })
    .cast_mut()
}

/// Frees a runtime (NULL is accepted). Networks loaded from it stay usable.
///
/// # Safety
/// `rt` is NULL or a runtime from [`bp_runtime_new`], not yet freed and not in use on
/// another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bp_runtime_free(rt: *mut bp_runtime) {
    if !rt.is_null() {
        let _ = guarded(|| {
            // SAFETY: `rt` came from `Box::into_raw` in `bp_runtime_new` and is freed once.
            drop(unsafe { Box::from_raw(rt) });
            Ok(())
        });
    }
}

/// The discovery report as one JSON object (`backplane backends --json`): the search paths,
/// every directory entry with its verdict, and the registered backends. Free it with
/// [`bp_string_free`].
///
/// # Safety
/// `rt` is NULL or a live runtime.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bp_runtime_report_json(rt: *const bp_runtime) -> *mut c_char {
    pointer(|| {
        // SAFETY: forwarded from the caller.
        let rt = unsafe { handle(rt, "runtime") }?;
        Ok(owned_string(rt.runtime.report().to_json()).cast_const())
    })
    .cast_mut()
}

/// Sets the memory budget of every later load from `rt`, in bytes (0: this machine's physical
/// memory, the default): the constants the importer folds and copies, then each plan's
/// constants, planned tensors and outputs are charged to it before they are allocated; a
/// model over it fails to load ([`BP_ERROR_LOAD`], or [`BP_ERROR_MODEL`] when an imported
/// constant is over it) with [`bp_last_error`] naming the largest tensor and the sizes.
///
/// # Safety
/// `rt` is NULL or a live runtime.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bp_runtime_set_max_memory(rt: *const bp_runtime, bytes: u64) -> i32 {
    status(|| {
        // SAFETY: forwarded from the caller.
        let rt = unsafe { handle(rt, "runtime") }?;
        rt.max_memory
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    })
}

/// Loads an ONNX model (or a compiled network, `.bpn`) for the backends of `backends_csv`
/// (ids, first preferred first; NULL or empty: every registered plugin, then CpuRef). The
/// model is read and checked now. When every input shape is known (fixed in the model, or a
/// symbolic leading batch dimension, taken as 1), the network is also optimised and loaded
/// now, so a model that cannot run fails here (NULL, and [`bp_last_error`] says why);
/// otherwise each set of input shapes is optimised and loaded at its first [`bp_network_run`]
/// and kept in the network's cache of plans. [`bp_network_load_ex`] also takes input shapes
/// (planned at load) and backend options.
///
/// # Safety
/// `rt` is NULL or a live runtime; the strings are NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bp_network_load(
    rt: *const bp_runtime,
    model_path: *const c_char,
    backends_csv: *const c_char,
) -> *mut bp_network {
    // SAFETY: forwarded from the caller; no options and no shapes.
    unsafe {
        bp_network_load_ex(
            rt,
            model_path,
            backends_csv,
            std::ptr::null(),
            0,
            std::ptr::null(),
            0,
            0,
        )
    }
}

/// [`bp_network_load`] with backend options (`option_count` strings `"ID:KEY=VALUE"`, for
/// example `"CpuFast:Threads=2"`, Backend API 1.1), input shapes (`shape_count` of them) and
/// flags (`BP_NO_FUSION`, `BP_REOPTIMIZE`).
///
/// # Safety
/// `rt` is NULL or a live runtime; the strings are NULL or NUL-terminated; `options` points
/// to `option_count` strings and `shapes` to `shape_count` shapes (either may be NULL when
/// its count is 0).
#[unsafe(no_mangle)]
#[allow(
    clippy::too_many_arguments,
    reason = "a C entry point: one argument per part of the load"
)]
pub unsafe extern "C" fn bp_network_load_ex(
    rt: *const bp_runtime,
    model_path: *const c_char,
    backends_csv: *const c_char,
    options: *const *const c_char,
    option_count: usize,
    shapes: *const bp_input_shape,
    shape_count: usize,
    flags: u32,
) -> *mut bp_network {
    pointer(|| {
        // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
        let rt = unsafe { handle(rt, "runtime") }?;
        // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
        let model = unsafe { req_str(model_path, "model_path") }?;
        // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
        let backends = unsafe { opt_str(backends_csv, "backends_csv") }?.unwrap_or("");
        if flags & !(BP_NO_FUSION | BP_REOPTIMIZE) != 0 {
            return Err(Failure::invalid(format!("unknown flags {flags:#x}")));
        }
        let mut session_options = SessionOptions::default();
        session_options
            .set_backends(backends.split(','))
            .set_fusion(flags & BP_NO_FUSION == 0)
            .set_reoptimize(flags & BP_REOPTIMIZE != 0);
        let max_memory = rt.max_memory.load(std::sync::atomic::Ordering::Relaxed);
        session_options.max_memory = (max_memory != 0).then_some(max_memory);
        // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
        for &spec in unsafe { slice(options, option_count, "options") }? {
            // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
            let spec = unsafe { req_str(spec, "an option") }?;
            session_options
                .add_backend_option_text(spec)
                .map_err(Failure::invalid)?;
        }
        // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
        for s in unsafe { slice(shapes, shape_count, "shapes") }? {
            // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
            let name = unsafe { req_str(s.name, "a shape's name") }?;
            // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
            let shape = unsafe { slice(s.shape, s.rank, "a shape's dimensions") }?;
            let shape = dims(shape, &format!("shape of {name}"))?;
            session_options
                .set_input_shape(name, &shape)
                .map_err(Failure::invalid)?;
        }
        let session = Session::load(rt.runtime.clone(), Path::new(model), &session_options)?;
        let list = |l: &[backplane::onnx::DeclaredTensor]| l.iter().map(Io::new).collect();
        // With a plan made at load (every shape known), the outputs' shapes are its shapes;
        // otherwise they are the declared ones, -1 where a run decides.
        let outputs = match session.current().filter(|p| !p.is_dynamic()) {
            Some(plan) => plan
                .outputs()
                .iter()
                .map(|(name, info)| Io::fixed(name, info))
                .collect(),
            None => list(session.outputs()),
        };
        let types = |list: &[backplane::onnx::DeclaredTensor]| {
            list.iter()
                .filter_map(|i| {
                    let t = i.data_type?;
                    Some((i.name.clone(), TensorInfo::new(&[], t)))
                })
                .collect()
        };
        let network = bp_network {
            inputs: list(session.inputs()),
            outputs,
            input_types: types(session.inputs()),
            output_types: types(session.outputs()),
            session,
        };
        Ok(Box::into_raw(Box::new(network)).cast_const())
    })
    .cast_mut()
}

/// Unloads and frees a network (NULL is accepted).
///
/// # Safety
/// `net` is NULL or a network from [`bp_network_load`], not yet freed and not in use on
/// another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bp_network_free(net: *mut bp_network) {
    if !net.is_null() {
        let _ = guarded(|| {
            // SAFETY: `net` came from `Box::into_raw` in `bp_network_load_ex`, freed once.
            let net = unsafe { Box::from_raw(net) };
            net.session.unload().map_err(Failure::from)
        });
    }
}

/// Which list of a network's tensors.
#[derive(Clone, Copy)]
enum Side {
    Input,
    Output,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Input => "input",
            Side::Output => "output",
        }
    }

    fn list(self, net: &bp_network) -> &[Io] {
        match self {
            Side::Input => &net.inputs,
            Side::Output => &net.outputs,
        }
    }
}

/// One input or output of a live network.
///
/// # Safety
/// `net` is NULL or a live network.
unsafe fn io<'a>(net: *const bp_network, side: Side, index: usize) -> Result<&'a Io, Failure> {
    // SAFETY: forwarded from the caller.
    let net = unsafe { handle(net, "network") }?;
    let list = side.list(net);
    list.get(index).ok_or_else(|| {
        Failure::invalid(format!(
            "{} index {index} is out of range (the network has {})",
            side.name(),
            list.len()
        ))
    })
}

/// Writes `value` through an out-pointer.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
unsafe fn write_out<T>(out: *mut T, value: T, what: &str) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-null, and the caller guarantees it is valid for a write.
    unsafe { out.write(value) };
    Ok(())
}

/// The count of a network's inputs or outputs.
///
/// # Safety
/// As the public functions that call it.
unsafe fn count(net: *const bp_network, side: Side, out: *mut usize) -> i32 {
    status(|| {
        // SAFETY: forwarded from the caller.
        let net = unsafe { handle(net, "network") }?;
        // SAFETY: forwarded from the caller.
        unsafe { write_out(out, side.list(net).len(), "count") }
    })
}

/// A name of a network's input or output.
///
/// # Safety
/// As the public functions that call it.
unsafe fn name(net: *const bp_network, side: Side, index: usize) -> *const c_char {
    // SAFETY: forwarded from the caller.
    pointer(|| Ok(unsafe { io(net, side, index) }?.name.as_ptr()))
}

/// The shape and data type of a network's input or output.
///
/// # Safety
/// As the public functions that call it.
unsafe fn shape(
    net: *const bp_network,
    side: Side,
    index: usize,
    shape: *mut *const i64,
    rank: *mut usize,
    dtype: *mut i32,
) -> i32 {
    status(|| {
        // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
        let io = unsafe { io(net, side, index) }?;
        // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
        unsafe { write_out(shape, io.shape.as_ptr(), "shape") }?;
        // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
        unsafe { write_out(rank, io.shape.len(), "rank") }?;
        if !dtype.is_null() {
            // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
            unsafe { write_out(dtype, io.dtype, "dtype") }?;
        }
        Ok(())
    })
}

/// How many inputs the network has, in `*count`.
///
/// # Safety
/// `net` is NULL or a live network; `count` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bp_network_input_count(net: *const bp_network, count: *mut usize) -> i32 {
    // SAFETY: forwarded from the caller.
    unsafe { self::count(net, Side::Input, count) }
}

/// The name of input `index` (owned by the network).
///
/// # Safety
/// `net` is NULL or a live network.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bp_network_input_name(
    net: *const bp_network,
    index: usize,
) -> *const c_char {
    // SAFETY: forwarded from the caller.
    unsafe { name(net, Side::Input, index) }
}

/// The shape of input `index`: `*shape` points to `*rank` dimensions owned by the network;
/// `*dtype` (when `dtype` is not NULL) is its ONNX element type.
///
/// # Safety
/// `net` is NULL or a live network; `shape` and `rank` are NULL or writable; `dtype` is NULL
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bp_network_input_shape(
    net: *const bp_network,
    index: usize,
    shape: *mut *const i64,
    rank: *mut usize,
    dtype: *mut i32,
) -> i32 {
    // SAFETY: forwarded from the caller.
    unsafe { self::shape(net, Side::Input, index, shape, rank, dtype) }
}

/// How many outputs the network has, in `*count`.
///
/// # Safety
/// As [`bp_network_input_count`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bp_network_output_count(net: *const bp_network, count: *mut usize) -> i32 {
    // SAFETY: forwarded from the caller.
    unsafe { self::count(net, Side::Output, count) }
}

/// The name of output `index` (owned by the network).
///
/// # Safety
/// As [`bp_network_input_name`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bp_network_output_name(
    net: *const bp_network,
    index: usize,
) -> *const c_char {
    // SAFETY: forwarded from the caller.
    unsafe { name(net, Side::Output, index) }
}

/// The shape of output `index`, as [`bp_network_input_shape`].
///
/// # Safety
/// As [`bp_network_input_shape`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bp_network_output_shape(
    net: *const bp_network,
    index: usize,
    shape: *mut *const i64,
    rank: *mut usize,
    dtype: *mut i32,
) -> i32 {
    // SAFETY: forwarded from the caller.
    unsafe { self::shape(net, Side::Output, index, shape, rank, dtype) }
}

/// The name, shape, type and bytes of one `bp_tensor`, checked against the network's
/// tensor of that name (or position). The returned info carries the network's data type
/// when the ONNX element types agree, so that the host's own check compares the shapes.
///
/// # Safety
/// `t`'s pointers are as [`bp_tensor`] says.
unsafe fn bind<'a>(
    network_list: &'a [(String, TensorInfo)],
    side: Side,
    position: usize,
    t: &bp_tensor,
) -> Result<(&'a str, TensorInfo, usize), Failure> {
    let what = side.name();
    // SAFETY: forwarded from the caller.
    let name = match unsafe { opt_str(t.name, "a tensor's name") }? {
        Some(n) => n,
        None => network_list
            .get(position)
            .map(|(n, _)| n.as_str())
            .ok_or_else(|| {
                Failure::invalid(format!(
                    "{what} {position} has no name and the network has {} {what}s",
                    network_list.len()
                ))
            })?,
    };
    // SAFETY: forwarded from the caller.
    let shape = unsafe { slice(t.shape, t.rank, "a tensor's shape") }?;
    let shape = dims(shape, &format!("{what} {name}"))?;
    let Some((_, expected)) = network_list.iter().find(|(n, _)| n == name) else {
        // Unknown name: the host's check names it and lists the network's tensors. No byte
        // of its buffer is looked at.
        let unknown = TensorInfo::new(&shape, backplane::api::DataType::Float32);
        return Ok((name, unknown, 0));
    };
    let wanted = data_type::of(expected.data_type);
    if t.dtype != wanted {
        return Err(Failure {
            code: BP_ERROR_BINDING,
            message: format!(
                "{what} {name}: data type {} ({}), the network needs {wanted} ({})",
                t.dtype,
                data_type::name(t.dtype),
                data_type::name(wanted)
            ),
        });
    }
    let mut info = TensorInfo::new(&shape, expected.data_type);
    info.quantization = expected.quantization.clone();
    // The size is checked before any slice is made over the caller's buffer.
    if info.num_bytes() != Some(t.bytes) {
        return Err(Failure {
            code: BP_ERROR_BINDING,
            message: format!(
                "{what} {name}: {info} needs {} bytes, got {}",
                info.num_bytes()
                    .map_or_else(|| "too many".to_owned(), |n| n.to_string()),
                t.bytes
            ),
        });
    }
    Ok((name, info, t.bytes))
}

/// Runs the network once: reads `n` inputs and writes `m` outputs, each matched by name (or
/// by position when its name is NULL) and checked for data type, shape and byte size before
/// anything runs. Every input and output must be given exactly once; an output buffer that
/// overlaps another buffer of the call is refused.
///
/// # Safety
/// `net` is NULL or a live network; `inputs` points to `n` and `outputs` to `m` tensors
/// whose pointers are as [`bp_tensor`] says (either may be NULL when its count is 0); no
/// other thread writes the input buffers or touches the output buffers during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bp_network_run(
    net: *const bp_network,
    inputs: *const bp_tensor,
    n: usize,
    outputs: *const bp_tensor,
    m: usize,
) -> i32 {
    status(|| {
        // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
        let net = unsafe { handle(net, "network") }?;
        // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
        let given_in = unsafe { slice(inputs, n, "inputs") }?;
        // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
        let given_out = unsafe { slice(outputs, m, "outputs") }?;
        // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
        let infos_in = unsafe { bind_inputs(net, given_in) }?;
        let bound_in = input_tensors(&infos_in);
        // The plan for these shapes says what the outputs are.
        let plan = net.session.plan_for(&bound_in)?;
        let out_list = if plan.is_dynamic() {
            &net.output_types
        } else {
            plan.outputs()
        };
        let mut infos_out = Vec::with_capacity(m);
        for (k, t) in given_out.iter().enumerate() {
            // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
            infos_out.push(unsafe { bind(out_list, Side::Output, k, t) }?);
        }
        // An output may not share a byte with any other buffer of the call: the slices made
        // below would alias.
        let ranges: Vec<(&str, &str, usize, usize)> = infos_in
            .iter()
            .map(|(name, _, data)| ("input", *name, data.as_ptr() as usize, data.len()))
            .chain(
                infos_out
                    .iter()
                    .zip(given_out)
                    .map(|((name, _, bytes), t)| ("output", *name, t.data as usize, *bytes)),
            )
            .filter(|r| r.3 > 0)
            .collect();
        for (i, a) in ranges.iter().enumerate().filter(|(_, r)| r.0 == "output") {
            for (j, b) in ranges.iter().enumerate() {
                let overlap = a.2 < b.2.saturating_add(b.3) && b.2 < a.2.saturating_add(a.3);
                if i != j && overlap {
                    return Err(Failure::invalid(format!(
                        "the buffer of {} {} overlaps that of {} {}",
                        a.0, a.1, b.0, b.1
                    )));
                }
            }
        }
        let mut bound_out = Vec::with_capacity(m);
        for ((name, info, bytes), t) in infos_out.iter().zip(given_out) {
            let data: &mut [u8] = if *bytes == 0 {
                &mut []
            } else if t.data.is_null() {
                return Err(Failure::invalid(format!("output {name}: data is NULL")));
            } else {
                // SAFETY: non-null; the caller guarantees `bytes` writable bytes, checked above
                // to overlap no other buffer of this call.
                unsafe { std::slice::from_raw_parts_mut(t.data.cast::<u8>(), *bytes) }
            };
            bound_out.push(OutputTensor { name, info, data });
        }
        plan.run(&bound_in, &mut bound_out).map_err(Failure::from)
    })
}

/// An input of a call: its name, its shape and type as given, and its bytes.
type BoundInput<'a> = (&'a str, TensorInfo, &'a [u8]);

/// Binds the inputs of a call: each by name (or position), its data type and byte size
/// checked; its shape is checked by the session.
///
/// # Safety
/// `given`'s pointers are as [`bp_tensor`] says.
unsafe fn bind_inputs<'a>(
    net: &'a bp_network,
    given: &'a [bp_tensor],
) -> Result<Vec<BoundInput<'a>>, Failure> {
    given
        .iter()
        .enumerate()
        .map(|(k, t)| {
            // SAFETY: forwarded from the caller.
            let (name, info, bytes) = unsafe { bind(&net.input_types, Side::Input, k, t) }?;
            // SAFETY: forwarded from the caller; `bytes` was checked against the tensor's size.
            let data = unsafe { slice(t.data.cast_const().cast::<u8>(), bytes, "input data") }?;
            Ok((name, info, data))
        })
        .collect()
}

/// The host's view of inputs [`bind_inputs`] bound.
fn input_tensors<'a>(bound: &'a [BoundInput<'a>]) -> Vec<InputTensor<'a>> {
    bound
        .iter()
        .map(|(name, info, data)| InputTensor { name, info, data })
        .collect()
}

/// Runs the network once on `n` inputs (as [`bp_network_run`] takes them, of any shape that
/// fits the model) and returns every output, allocated by the library: `*outputs` points to
/// `*m` tensors, in the model's order, each with its name, data type, shape and bytes. Free
/// them with one call to [`bp_tensors_free`]. On failure `*outputs` is NULL and `*m` is 0.
///
/// # Safety
/// `net` is NULL or a live network; `inputs` points to `n` tensors whose pointers are as
/// [`bp_tensor`] says (NULL when `n` is 0); `outputs` and `m` are writable; no other thread
/// writes the input buffers during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bp_network_run_alloc(
    net: *const bp_network,
    inputs: *const bp_tensor,
    n: usize,
    outputs: *mut *mut bp_tensor,
    m: *mut usize,
) -> i32 {
    status(|| {
        // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
        unsafe { write_out(outputs, std::ptr::null_mut(), "outputs") }?;
        // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
        unsafe { write_out(m, 0, "m") }?;
        // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
        let net = unsafe { handle(net, "network") }?;
        // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
        let given_in = unsafe { slice(inputs, n, "inputs") }?;
        // SAFETY: this pointer is covered by the entry point's `# Safety` contract.
        let infos_in = unsafe { bind_inputs(net, given_in) }?;
        let bound_in = input_tensors(&infos_in);
        let results = net.session.run_alloc(&bound_in)?;
        let tensors: Box<[bp_tensor]> = results
            .into_iter()
            .map(|o| {
                let shape: Box<[i64]> = o.info.shape.iter().map(|&d| i64::from(d)).collect();
                let data: Box<[u8]> = o.data.into_boxed_slice();
                let (rank, bytes) = (shape.len(), data.len());
                bp_tensor {
                    name: c_name(&o.name).into_raw(),
                    dtype: data_type::of(o.info.data_type),
                    shape: Box::into_raw(shape).cast::<i64>(),
                    rank,
                    data: Box::into_raw(data).cast::<c_void>(),
                    bytes,
                }
            })
            .collect();
        let count = tensors.len();
        let list = Box::into_raw(tensors).cast::<bp_tensor>();
        // SAFETY: checked writable above.
        unsafe {
            outputs.write(list);
            m.write(count);
        }
        Ok(())
    })
}

/// Frees the `m` tensors [`bp_network_run_alloc`] returned, with their names, shapes and
/// data (NULL is accepted).
///
/// # Safety
/// `tensors` is NULL or the `*outputs` of a [`bp_network_run_alloc`] call that returned
/// [`BP_OK`], with its `*m`, not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bp_tensors_free(tensors: *mut bp_tensor, m: usize) {
    if tensors.is_null() {
        return;
    }
    let _ = guarded(|| {
        // SAFETY: made by `Box::into_raw` of a boxed slice of `m` tensors in
        // `bp_network_run_alloc`, freed once.
        let list = unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(tensors, m)) };
        for t in list.iter() {
            // SAFETY: each pointer was made by `into_raw` of the owner of that length above.
            unsafe {
                drop(CString::from_raw(t.name.cast_mut()));
                drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    t.shape.cast_mut(),
                    t.rank,
                )));
                drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    t.data.cast::<u8>(),
                    t.bytes,
                )));
            }
        }
        Ok(())
    });
}

/// Which backend runs each layer, and why (the text of `backplane run --explain=all`). Free it
/// with [`bp_string_free`].
///
/// # Safety
/// `net` is NULL or a live network.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bp_network_explain(net: *const bp_network) -> *mut c_char {
    pointer(|| {
        // SAFETY: forwarded from the caller.
        let net = unsafe { handle(net, "network") }?;
        let plan = net.session.current_or_shapes_needed()?;
        Ok(owned_string(plan.explain()).cast_const())
    })
    .cast_mut()
}

/// How many layers each backend runs, as a JSON object (`{"CpuFast": 84, "CpuRef": 233}`).
/// Free it with [`bp_string_free`].
///
/// # Safety
/// `net` is NULL or a live network.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bp_network_layers_per_backend_json(net: *const bp_network) -> *mut c_char {
    pointer(|| {
        // SAFETY: forwarded from the caller.
        let net = unsafe { handle(net, "network") }?;
        let plan = net.session.current_or_shapes_needed()?;
        let json = serde_json::to_string(&plan.layers_per_backend())
            .map_err(|e| Failure::invalid(e.to_string()))?;
        Ok(owned_string(json).cast_const())
    })
    .cast_mut()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_types_are_onnx_codes() {
        assert_eq!(BP_FLOAT32, data_type::FLOAT);
        assert_eq!(BP_UINT8, data_type::UINT8);
        assert_eq!(BP_INT8, data_type::INT8);
        assert_eq!(BP_INT32, data_type::INT32);
        assert_eq!(BP_BOOL, data_type::BOOL);
        assert_eq!(BP_FLOAT16, data_type::FLOAT16);
        assert_eq!(BP_UINT16, data_type::UINT16);
        assert_eq!(BP_INT16, data_type::INT16);
        assert_eq!(BP_INT64, data_type::INT64);
        assert_eq!(BP_DOUBLE, data_type::DOUBLE);
        assert_eq!(BP_UINT32, data_type::UINT32);
        assert_eq!(BP_UINT64, data_type::UINT64);
        assert_eq!(BP_BFLOAT16, data_type::BFLOAT16);
    }

    #[test]
    fn errors_and_panics_become_statuses_and_messages() {
        assert_eq!(status(|| Err(Failure::invalid("bad thing"))), -1);
        // SAFETY: bp_last_error returns this thread's NUL-terminated message.
        let msg = unsafe { CStr::from_ptr(bp_last_error()) };
        assert_eq!(msg.to_str().unwrap(), "bad thing");
        assert_eq!(status(|| panic!("boom")), BP_ERROR_INTERNAL);
        // SAFETY: as above.
        let msg = unsafe { CStr::from_ptr(bp_last_error()) };
        assert_eq!(
            msg.to_str().unwrap(),
            "internal error in libbackplane: boom"
        );
    }
}
