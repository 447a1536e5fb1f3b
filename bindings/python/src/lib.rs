//! `backplane._backplane`: the native part of the Python package `backplane`.
//!
//! A thin layer over [`backplane::Runtime`] and [`backplane::Session`], with onnxruntime's
//! conventions: numpy arrays in and out, a dict of inputs by name, a dict of outputs by name.
//! Contiguous input arrays are read in place; the only copy is the host's, into its own
//! buffers. Output arrays are allocated by numpy and written by the network directly. The
//! GIL is released while discovery, loading and runs go on, so threads may run networks
//! concurrently (runs of one network are serialised by the host).
//!
//! Errors are exceptions carrying the host's message: [`Error`] and its subclasses for a model
//! that cannot be imported, a network no backend can run, bad inputs, a backend's error, and
//! a backend that faulted.

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    sync::Arc,
};

use backplane::{
    CreationOptions, ExecuteError, InputTensor, OutputTensor, Session, SessionError,
    SessionOptions,
    api::{DataType, ErrorCode, TensorInfo},
    compiled::CompiledError,
    plugins::isolation::Isolation,
};
use numpy::{
    Element, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyReadwriteArrayDyn, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::{
    create_exception,
    exceptions::PyException,
    prelude::*,
    types::{PyDict, PyString},
};

create_exception!(
    backplane,
    Error,
    PyException,
    "An error of the backplane host; the message is the host's."
);
create_exception!(
    backplane,
    ModelError,
    Error,
    "The model could not be read or imported."
);
create_exception!(
    backplane,
    UnsupportedError,
    Error,
    "No assignment of the network's layers to the preferred backends exists."
);
create_exception!(
    backplane,
    InputError,
    Error,
    "The inputs given to run() do not match the network (name, dtype or shape); nothing ran."
);
create_exception!(
    backplane,
    BackendError,
    Error,
    "A backend returned an error while setting up or running the network."
);
create_exception!(
    backplane,
    BackendFaultError,
    BackendError,
    "A backend faulted (panicked) while setting up or running the network; its runtime does \
     not use it again."
);

fn session_error(e: SessionError) -> PyErr {
    match e {
        SessionError::Import(e) => ModelError::new_err(e.to_string()),
        // A compiled network made for other backends (or not optimisable for these).
        SessionError::Compiled(e @ (CompiledError::Mismatch(_) | CompiledError::Optimize(_))) => {
            UnsupportedError::new_err(e.to_string())
        }
        // A damaged or unreadable compiled network.
        SessionError::Compiled(e) => ModelError::new_err(e.to_string()),
        SessionError::Compile(e) => Error::new_err(e.to_string()),
        SessionError::Optimize(e) => UnsupportedError::new_err(e.to_string()),
        SessionError::Load(e) | SessionError::Run(e) => execute_error(e),
        // Shapes that do not fit, or that make a layer invalid: the caller's inputs.
        e @ (SessionError::Input(_) | SessionError::Shape { .. }) => {
            InputError::new_err(e.to_string())
        }
    }
}

fn execute_error(e: ExecuteError) -> PyErr {
    match e {
        ExecuteError::Binding(m) => InputError::new_err(m),
        ExecuteError::Backend { ref error, .. } if error.code == ErrorCode::Panicked => {
            BackendFaultError::new_err(e.to_string())
        }
        e @ (ExecuteError::Backend { .. } | ExecuteError::Instance { .. }) => {
            BackendError::new_err(e.to_string())
        }
        e => Error::new_err(e.to_string()),
    }
}

/// numpy's name for a tensor's element type.
fn dtype_name(t: DataType) -> &'static str {
    match t {
        DataType::Float32 => "float32",
        DataType::Float16 => "float16",
        DataType::QAsymmU8 => "uint8",
        DataType::QAsymmS8 | DataType::QSymmS8 => "int8",
        DataType::Signed32 => "int32",
        DataType::Boolean => "bool",
        DataType::Signed64 => "int64",
        DataType::Float64 => "float64",
        DataType::UnsignedInt8 => "uint8",
        DataType::Signed8 => "int8",
        DataType::Signed16 => "int16",
        DataType::UnsignedInt16 => "uint16",
        DataType::UnsignedInt32 => "uint32",
        DataType::UnsignedInt64 => "uint64",
        // numpy has no bfloat16 (ml_dtypes adds one); such tensors are refused by the binding.
        DataType::BFloat16 => "bfloat16",
    }
}

/// A backplane runtime: its registry of backends and the report of how it was filled.
///
/// `paths`: plugin directories (a list, or one `:`-separated string; relative ones are taken
/// from the current directory); `None` reads `DYNAMIC_BACKEND_PATHS`. `builtin=False`
/// registers no built-in backend (CpuRef). `isolate=True` loads each plugin in a child
/// process first (the `backplane` CLI named by `BACKPLANE_PROBE`, else found on `PATH`).
/// `out_of_process=["CpuFast", ...]` runs those backends in a child process each (the same
/// CLI, `backplane serve`): a crash or hang there raises `BackendError` for that run, naming
/// the signal or deadline, and faults the backend (the report shows it); loading the model
/// again runs it on the remaining backends.
#[pyclass(module = "backplane", frozen)]
struct Runtime {
    inner: Arc<backplane::Runtime>,
}

#[pymethods]
impl Runtime {
    #[new]
    #[pyo3(signature = (paths=None, builtin=true, isolate=false, out_of_process=None))]
    fn new(
        py: Python<'_>,
        paths: Option<Bound<'_, PyAny>>,
        builtin: bool,
        isolate: bool,
        out_of_process: Option<Vec<String>>,
    ) -> PyResult<Self> {
        let dirs: Option<Vec<PathBuf>> = match paths {
            None => None,
            Some(p) if p.is_instance_of::<PyString>() => {
                let s: String = p.extract()?;
                Some(
                    s.split(':')
                        .filter(|d| !d.is_empty())
                        .map(PathBuf::from)
                        .collect(),
                )
            }
            Some(p) => Some(p.extract()?),
        };
        let list = dirs
            .map(|d| backplane::plugins::paths::join_dirs(&d))
            .transpose()
            .map_err(|e| Error::new_err(format!("paths: {e}")))?;
        let isolation = if isolate {
            Some(Isolation::from_environment().map_err(Error::new_err)?)
        } else {
            None
        };
        let out_of_process = match out_of_process {
            Some(ids) if !ids.is_empty() => {
                Some(backplane::OutOfProcess::from_environment(ids).map_err(Error::new_err)?)
            }
            _ => None,
        };
        let options = CreationOptions {
            dynamic_backends_path: list.map(Into::into),
            register_builtins: builtin,
            isolation,
            out_of_process,
            ..CreationOptions::default()
        };
        let inner = py.detach(|| backplane::Runtime::new(options));
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// The Backend API version of this host, "MAJOR.MINOR".
    #[getter]
    fn api_version(&self) -> String {
        backplane::api::ApiVersion::CURRENT.to_string()
    }

    /// The discovery report (`backplane backends --json`) as dicts and lists: the search
    /// paths, every directory entry with its verdict, and the registered backends.
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let json = self.inner.report().to_json();
        py.import("json")?.call_method1("loads", (json,))
    }

    /// The registered backends: one dict each (id, source, file, version, capabilities, ...).
    fn backends<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.report(py)?.get_item("backends")
    }

    /// The backend ids an application that names none gets, first preferred first: every
    /// registered plugin, then CpuRef.
    fn default_preferences(&self) -> Vec<String> {
        self.inner.default_preferences()
    }

    /// Reads an ONNX model (a path, or the model's `bytes`) and loads it for the backend
    /// preferences (`None`: every registered plugin, then CpuRef). `options` maps a backend
    /// id to its options, e.g. `{"CpuFast": {"Threads": 2}}` (bool, int, float or str, passed
    /// with its type); `shapes` fixes inputs' symbolic dimensions (without it, the network
    /// runs any shape that fits); `fusion=False` turns off graph rewrites and subgraph
    /// optimisation. The network keeps loaded plans for the `cache_size` most recent sets of
    /// input shapes, within `cache_bytes` (default 512 MiB) between them. `model` may be a
    /// compiled network (`.bpn`, from `backplane compile`): loaded as compiled, at its
    /// shapes; `reoptimize=True` optimises its stored layers again when it was made for
    /// backends that differ from those here (else `UnsupportedError`). `max_memory` (bytes,
    /// or text such as `"4G"`; default: physical memory) is the memory budget of each load:
    /// a model whose constants, tensors and outputs need more fails to load naming the
    /// largest tensor, before anything of it is allocated.
    #[pyo3(signature = (model, backends=None, options=None, shapes=None, fusion=true, cache_size=8, cache_bytes=None, reoptimize=false, max_memory=None))]
    #[allow(clippy::too_many_arguments)] // reason: Python keywords, each optional
    fn load(
        &self,
        py: Python<'_>,
        model: &Bound<'_, PyAny>,
        backends: Option<Vec<String>>,
        options: Option<HashMap<String, HashMap<String, Bound<'_, PyAny>>>>,
        shapes: Option<HashMap<String, Vec<u32>>>,
        fusion: bool,
        cache_size: usize,
        cache_bytes: Option<u64>,
        reoptimize: bool,
        max_memory: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Network> {
        let mut session_options = SessionOptions::default();
        session_options
            .set_backends(backends.unwrap_or_default())
            .set_fusion(fusion)
            .set_reoptimize(reoptimize)
            .set_cache_limits(
                cache_size,
                cache_bytes.unwrap_or(backplane::CacheLimits::default().bytes),
            );
        if let Some(m) = max_memory {
            let text = match m.extract::<u64>() {
                Ok(bytes) => bytes.to_string(),
                Err(_) => m.extract::<String>().map_err(|_| {
                    pyo3::exceptions::PyTypeError::new_err(
                        "max_memory: a number of bytes or text such as \"4G\"",
                    )
                })?,
            };
            session_options
                .set_max_memory(&text)
                .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("max_memory: {e}")))?;
        }
        for (name, dims) in shapes.unwrap_or_default() {
            session_options
                .set_input_shape(&name, &dims)
                .map_err(Error::new_err)?;
        }
        for (backend, values) in options.unwrap_or_default() {
            for (key, value) in values {
                session_options
                    .set_backend_option(&backend, &key, option_value(&value)?)
                    .map_err(Error::new_err)?;
            }
        }
        let runtime = self.inner.clone();
        let session = if let Ok(bytes) = model.cast::<pyo3::types::PyBytes>() {
            let bytes = bytes.as_bytes().to_vec();
            py.detach(|| Session::load_bytes(runtime, &bytes, &session_options))
        } else {
            let path: PathBuf = model.extract()?;
            py.detach(|| Session::load(runtime, &path, &session_options))
        }
        .map_err(session_error)?;
        Ok(Network { session })
    }

    fn __repr__(&self) -> String {
        format!(
            "backplane.Runtime(backends={:?}, api_version={:?})",
            self.inner.registry().ids(),
            self.api_version()
        )
    }
}

/// A backend option's Python value as the host's typed value: `bool` (checked first: a
/// Python bool is also an int), `int` and `float` keep their type; a `str` is read as the
/// CLI's `--backend-option` text is (`true`/`false`, a whole number, a real number, else
/// text: onnxruntime's provider options are always strings); anything else is a `TypeError`
/// naming the type.
fn option_value(value: &Bound<'_, PyAny>) -> PyResult<backplane::api::Value> {
    use backplane::api::Value;
    if value.is_instance_of::<pyo3::types::PyBool>() {
        Ok(Value::Bool(value.extract()?))
    } else if value.is_instance_of::<pyo3::types::PyInt>() {
        value.extract::<i64>().map(Value::Int).map_err(|_| {
            pyo3::exceptions::PyOverflowError::new_err(format!(
                "backend option {value}: an integer must fit in 64 bits"
            ))
        })
    } else if value.is_instance_of::<pyo3::types::PyFloat>() {
        Ok(Value::Float(value.extract()?))
    } else if value.is_instance_of::<pyo3::types::PyString>() {
        Ok(Value::parse(&value.extract::<String>()?))
    } else {
        Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "backend option values are bool, int, float or str, not {}",
            value.get_type().name()?
        )))
    }
}

/// A loaded network: run it with a dict of numpy arrays; it returns a dict of numpy arrays.
#[pyclass(module = "backplane", frozen)]
struct Network {
    session: Session,
}

/// `(name, shape, numpy dtype)`: how `Network.inputs` and `Network.outputs` describe a
/// tensor; a shape's items are `int` (fixed), `str` (a symbolic dimension's name) or `None`
/// (a dynamic dimension without a name), and the shape is `None` when the model declares none.
type TensorDesc<'py> = (String, Option<Vec<Bound<'py, PyAny>>>, Bound<'py, PyAny>);

/// One input array held for a run: the numpy borrow, and its bytes when they are used in
/// place.
enum Feed<'py> {
    F32(PyReadonlyArrayDyn<'py, f32>),
    I32(PyReadonlyArrayDyn<'py, i32>),
    U8(PyReadonlyArrayDyn<'py, u8>),
    I8(PyReadonlyArrayDyn<'py, i8>),
    I64(PyReadonlyArrayDyn<'py, i64>),
    F64(PyReadonlyArrayDyn<'py, f64>),
    I16(PyReadonlyArrayDyn<'py, i16>),
    U16(PyReadonlyArrayDyn<'py, u16>),
    U32(PyReadonlyArrayDyn<'py, u32>),
    U64(PyReadonlyArrayDyn<'py, u64>),
    F16(PyReadonlyArrayDyn<'py, half::f16>),
    /// Bytes made for the run: numpy's bools, or int64 narrowed for a Signed32 input.
    Owned(Vec<u8>),
}

impl Feed<'_> {
    fn bytes(&self) -> &[u8] {
        fn of<'a, T: Element + bytemuck::Pod>(a: &'a PyReadonlyArrayDyn<'_, T>) -> &'a [u8] {
            // Contiguity was established when the feed was made.
            bytemuck::cast_slice(a.as_slice().unwrap_or_default())
        }
        match self {
            Feed::F32(a) => of(a),
            Feed::I32(a) => of(a),
            Feed::U8(a) => of(a),
            Feed::I8(a) => of(a),
            Feed::I64(a) => of(a),
            Feed::F64(a) => of(a),
            Feed::I16(a) => of(a),
            Feed::U16(a) => of(a),
            Feed::U32(a) => of(a),
            Feed::U64(a) => of(a),
            Feed::F16(a) => of(a),
            Feed::Owned(v) => v,
        }
    }
}

/// A C-contiguous array of `T`, or an `InputError` naming the input.
fn contiguous<'py, T: Element>(
    name: &str,
    array: &Bound<'py, PyAny>,
    wanted: &str,
) -> PyResult<PyReadonlyArrayDyn<'py, T>> {
    // `asarray(order="C")` copies only what is not C-contiguous, and keeps 0-d arrays 0-d.
    let numpy = array.py().import("numpy")?;
    let kwargs = PyDict::new(array.py());
    kwargs.set_item("order", "C")?;
    let array = numpy.call_method("asarray", (array,), Some(&kwargs))?;
    let typed = array.cast::<PyArrayDyn<T>>().map_err(|_| {
        let got = array
            .getattr("dtype")
            .and_then(|d| d.str())
            .map(|s| s.to_string())
            .unwrap_or_else(|_| "unknown".into());
        InputError::new_err(format!(
            "input {name}: dtype {got}, the network needs {wanted}"
        ))
    })?;
    typed.try_readonly().map_err(|e| {
        InputError::new_err(format!("input {name}: the array cannot be read now: {e}"))
    })
}

impl Network {
    fn feed<'py>(
        &self,
        name: &str,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<(Feed<'py>, TensorInfo)> {
        if !value.is_instance_of::<PyUntypedArray>() {
            return Err(InputError::new_err(format!(
                "input {name}: a numpy array is needed, got {}",
                value.get_type().name()?
            )));
        }
        let inputs = self.session.inputs();
        let Some(expected) = inputs.iter().find(|i| i.name == name) else {
            let known: Vec<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
            return Err(InputError::new_err(format!(
                "no network input named {name:?} (the network has {known:?})"
            )));
        };
        let data_type = expected.data_type.ok_or_else(|| {
            Error::new_err(format!(
                "input {name}: its element type {:?} is not supported",
                expected.element
            ))
        })?;
        let wanted = dtype_name(data_type);
        let (feed, shape): (Feed<'py>, Vec<usize>) = match data_type {
            DataType::Float32 => {
                let a = contiguous::<f32>(name, value, wanted)?;
                let s = a.shape().to_vec();
                (Feed::F32(a), s)
            }
            // An int64 array for an int32 input is narrowed, each value range-checked (ONNX
            // int64 inputs were Signed32 before Backend API 1.5; they are Signed64 now).
            DataType::Signed32 if value.getattr("dtype")?.str()? == "int64" => {
                let a = contiguous::<i64>(name, value, wanted)?;
                let s = a.shape().to_vec();
                let wide: Vec<i64> = a.as_array().iter().copied().collect();
                let narrow = backplane::onnx::narrow_to_i32(&wide).map_err(|bad| {
                    InputError::new_err(format!(
                        "input {name}: {bad} is outside the range of int32, to which backplane \
                         narrows int64"
                    ))
                })?;
                let bytes = narrow.iter().flat_map(|v| v.to_le_bytes()).collect();
                (Feed::Owned(bytes), s)
            }
            DataType::Signed32 => {
                let a = contiguous::<i32>(name, value, wanted)?;
                let s = a.shape().to_vec();
                (Feed::I32(a), s)
            }
            DataType::QAsymmU8 | DataType::UnsignedInt8 => {
                let a = contiguous::<u8>(name, value, wanted)?;
                let s = a.shape().to_vec();
                (Feed::U8(a), s)
            }
            DataType::QAsymmS8 | DataType::QSymmS8 | DataType::Signed8 => {
                let a = contiguous::<i8>(name, value, wanted)?;
                let s = a.shape().to_vec();
                (Feed::I8(a), s)
            }
            DataType::Signed64 => {
                let a = contiguous::<i64>(name, value, wanted)?;
                let s = a.shape().to_vec();
                (Feed::I64(a), s)
            }
            DataType::Float64 => {
                let a = contiguous::<f64>(name, value, wanted)?;
                let s = a.shape().to_vec();
                (Feed::F64(a), s)
            }
            DataType::Signed16 => {
                let a = contiguous::<i16>(name, value, wanted)?;
                let s = a.shape().to_vec();
                (Feed::I16(a), s)
            }
            DataType::UnsignedInt16 => {
                let a = contiguous::<u16>(name, value, wanted)?;
                let s = a.shape().to_vec();
                (Feed::U16(a), s)
            }
            DataType::UnsignedInt32 => {
                let a = contiguous::<u32>(name, value, wanted)?;
                let s = a.shape().to_vec();
                (Feed::U32(a), s)
            }
            DataType::UnsignedInt64 => {
                let a = contiguous::<u64>(name, value, wanted)?;
                let s = a.shape().to_vec();
                (Feed::U64(a), s)
            }
            DataType::Float16 => {
                let a = contiguous::<half::f16>(name, value, wanted)?;
                let s = a.shape().to_vec();
                (Feed::F16(a), s)
            }
            DataType::Boolean => {
                let a = contiguous::<bool>(name, value, wanted)?;
                let s = a.shape().to_vec();
                let bytes = a.as_array().iter().map(|&b| u8::from(b)).collect();
                (Feed::Owned(bytes), s)
            }
            DataType::BFloat16 => {
                return Err(Error::new_err(format!(
                    "input {name}: bfloat16 tensors are not supported by the Python binding \
                     (numpy has no bfloat16 type)"
                )));
            }
        };
        let dims = shape
            .iter()
            .map(|&d| u32::try_from(d))
            .collect::<Result<Vec<u32>, _>>()
            .map_err(|_| InputError::new_err(format!("input {name}: a dimension is too large")))?;
        Ok((feed, TensorInfo::new(&dims, data_type)))
    }

    fn tensors<'py>(
        py: Python<'py>,
        list: &[backplane::onnx::DeclaredTensor],
    ) -> PyResult<Vec<TensorDesc<'py>>> {
        use backplane::onnx::Dim;
        let dtype = py.import("numpy")?.getattr("dtype")?;
        list.iter()
            .map(|t| {
                let shape = t
                    .dims
                    .as_ref()
                    .map(|dims| {
                        dims.iter()
                            .map(|d| {
                                Ok(match d {
                                    Dim::Fixed(v) => v.into_pyobject(py)?.into_any(),
                                    Dim::Named(n) => PyString::new(py, n).into_any(),
                                    Dim::Any => py.None().into_bound(py),
                                })
                            })
                            .collect::<PyResult<Vec<_>>>()
                    })
                    .transpose()?;
                let name = t.data_type.map_or("object", dtype_name);
                Ok((t.name.clone(), shape, dtype.call1((name,))?))
            })
            .collect()
    }

    /// The plan of the latest run, or an error saying which shapes it needs first.
    fn current(&self) -> PyResult<Arc<backplane::Plan>> {
        self.session
            .current_or_shapes_needed()
            .map_err(session_error)
    }
}

/// One output array and its writable borrow.
enum Sink<'py> {
    F32(PyReadwriteArrayDyn<'py, f32>),
    I32(PyReadwriteArrayDyn<'py, i32>),
    U8(PyReadwriteArrayDyn<'py, u8>),
    I8(PyReadwriteArrayDyn<'py, i8>),
    I64(PyReadwriteArrayDyn<'py, i64>),
    F64(PyReadwriteArrayDyn<'py, f64>),
    I16(PyReadwriteArrayDyn<'py, i16>),
    U16(PyReadwriteArrayDyn<'py, u16>),
    U32(PyReadwriteArrayDyn<'py, u32>),
    U64(PyReadwriteArrayDyn<'py, u64>),
    F16(PyReadwriteArrayDyn<'py, half::f16>),
}

impl<'py> Sink<'py> {
    fn new(py: Python<'py>, name: &str, info: &TensorInfo) -> PyResult<Self> {
        fn zeros<'py, T: Element>(py: Python<'py>, shape: &[usize]) -> PyReadwriteArrayDyn<'py, T> {
            PyArrayDyn::<T>::zeros(py, shape, false).readwrite()
        }
        let shape: Vec<usize> = info.shape.iter().map(|&d| d as usize).collect();
        Ok(match info.data_type {
            DataType::Float32 => Sink::F32(zeros(py, &shape)),
            DataType::Signed32 => Sink::I32(zeros(py, &shape)),
            // Booleans are one byte, 0 or 1: written as uint8, viewed as bool afterwards.
            DataType::QAsymmU8 | DataType::Boolean | DataType::UnsignedInt8 => {
                Sink::U8(zeros(py, &shape))
            }
            DataType::QAsymmS8 | DataType::QSymmS8 | DataType::Signed8 => {
                Sink::I8(zeros(py, &shape))
            }
            DataType::Signed64 => Sink::I64(zeros(py, &shape)),
            DataType::Float64 => Sink::F64(zeros(py, &shape)),
            DataType::Signed16 => Sink::I16(zeros(py, &shape)),
            DataType::UnsignedInt16 => Sink::U16(zeros(py, &shape)),
            DataType::UnsignedInt32 => Sink::U32(zeros(py, &shape)),
            DataType::UnsignedInt64 => Sink::U64(zeros(py, &shape)),
            DataType::Float16 => Sink::F16(zeros(py, &shape)),
            DataType::BFloat16 => {
                return Err(Error::new_err(format!(
                    "output {name}: bfloat16 tensors are not supported by the Python binding \
                     (numpy has no bfloat16 type)"
                )));
            }
        })
    }

    fn bytes(&mut self) -> &mut [u8] {
        fn of<'a, T: Element + bytemuck::Pod>(
            a: &'a mut PyReadwriteArrayDyn<'_, T>,
        ) -> &'a mut [u8] {
            // Arrays made by `zeros` are contiguous.
            bytemuck::cast_slice_mut(a.as_slice_mut().unwrap_or_default())
        }
        match self {
            Sink::F32(a) => of(a),
            Sink::I32(a) => of(a),
            Sink::U8(a) => of(a),
            Sink::I8(a) => of(a),
            Sink::I64(a) => of(a),
            Sink::F64(a) => of(a),
            Sink::I16(a) => of(a),
            Sink::U16(a) => of(a),
            Sink::U32(a) => of(a),
            Sink::U64(a) => of(a),
            Sink::F16(a) => of(a),
        }
    }

    fn into_array(self, info: &TensorInfo) -> PyResult<Bound<'py, PyAny>> {
        let array = match self {
            Sink::F32(a) => (**a).clone().into_any(),
            Sink::I32(a) => (**a).clone().into_any(),
            Sink::U8(a) => (**a).clone().into_any(),
            Sink::I8(a) => (**a).clone().into_any(),
            Sink::I64(a) => (**a).clone().into_any(),
            Sink::F64(a) => (**a).clone().into_any(),
            Sink::I16(a) => (**a).clone().into_any(),
            Sink::U16(a) => (**a).clone().into_any(),
            Sink::U32(a) => (**a).clone().into_any(),
            Sink::U64(a) => (**a).clone().into_any(),
            Sink::F16(a) => (**a).clone().into_any(),
        };
        if info.data_type == DataType::Boolean {
            return array.call_method1("view", ("bool",));
        }
        Ok(array)
    }
}

#[pymethods]
impl Network {
    /// The graph inputs: `[(name, shape, numpy dtype)]`, in the model's order, as declared:
    /// a symbolic dimension is its name (`str`), an unnamed dynamic one `None`.
    #[getter]
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<TensorDesc<'py>>> {
        Self::tensors(py, self.session.inputs())
    }

    /// The graph outputs: `[(name, shape, numpy dtype)]`, in the model's order, as declared.
    #[getter]
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<TensorDesc<'py>>> {
        Self::tensors(py, self.session.outputs())
    }

    /// Runs once: `inputs` maps every input name to a numpy array of the input's dtype, of
    /// any shape that fits the model; returns `{output name: numpy array}`. A new set of
    /// shapes is imported, optimised and loaded first, and its plan cached. The GIL is
    /// released while it runs, so other threads must not modify the input arrays meanwhile.
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: HashMap<String, Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mut feeds = Vec::with_capacity(inputs.len());
        for (name, value) in &inputs {
            let (feed, info) = self.feed(name, value)?;
            feeds.push((name.as_str(), feed, info));
        }
        let shapes: Vec<(&str, &[u32])> = feeds
            .iter()
            .map(|(name, _, info)| (*name, info.shape.as_slice()))
            .collect();
        let plan = py
            .detach(|| self.session.plan(&shapes))
            .map_err(session_error)?;
        let bound_in: Vec<InputTensor<'_>> = feeds
            .iter()
            .map(|(name, feed, info)| InputTensor {
                name,
                info,
                data: feed.bytes(),
            })
            .collect();
        if plan.is_dynamic() {
            // The outputs' shapes are known only after the run: the host allocates them.
            let got = py
                .detach(|| plan.run_alloc(&bound_in))
                .map_err(execute_error)?;
            let result = PyDict::new(py);
            for t in got {
                let mut sink = Sink::new(py, &t.name, &t.info)?;
                sink.bytes().copy_from_slice(&t.data);
                result.set_item(&t.name, sink.into_array(&t.info)?)?;
            }
            return Ok(result);
        }
        let outputs = plan.outputs();
        let mut sinks = outputs
            .iter()
            .map(|(name, info)| Sink::new(py, name, info))
            .collect::<PyResult<Vec<_>>>()?;
        let mut bound_out: Vec<OutputTensor<'_>> = outputs
            .iter()
            .zip(sinks.iter_mut())
            .map(|((name, info), sink)| OutputTensor {
                name,
                info,
                data: sink.bytes(),
            })
            .collect();
        py.detach(|| plan.run(&bound_in, &mut bound_out))
            .map_err(execute_error)?;
        drop(bound_out);
        let result = PyDict::new(py);
        for ((name, info), sink) in outputs.iter().zip(sinks) {
            result.set_item(name, sink.into_array(info)?)?;
        }
        Ok(result)
    }

    /// Which backend runs each layer, and why: the text of `backplane run --explain=DETAIL`,
    /// `detail` one of "summary", "layers" and "all" (the default: every layer).
    #[pyo3(signature = (detail="all"))]
    fn explain(&self, detail: &str) -> PyResult<String> {
        let detail = detail
            .parse::<backplane::graph::optimizer::ExplainDetail>()
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("detail: {e}")))?;
        Ok(self.current()?.explain_at(detail))
    }

    /// What the plan cache holds: `{"entries", "bytes", "capacity", "byte_capacity",
    /// "shapes": [{input name: shape}, ...]}`, most recently used first.
    fn cache_info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let stats = self.session.cache_stats();
        let d = PyDict::new(py);
        d.set_item("entries", stats.entries)?;
        d.set_item("bytes", stats.bytes)?;
        d.set_item("capacity", stats.limits.entries)?;
        d.set_item("byte_capacity", stats.limits.bytes)?;
        let shapes = stats
            .shapes
            .iter()
            .map(|set| {
                let m = PyDict::new(py);
                for (name, dims) in set {
                    m.set_item(name, dims)?;
                }
                Ok(m)
            })
            .collect::<PyResult<Vec<_>>>()?;
        d.set_item("shapes", shapes)?;
        Ok(d)
    }

    /// The model's metadata, with onnxruntime's `ModelMetadata` names: `producer_name`,
    /// `graph_name`, `graph_description`, `domain`, `description`, `version` and
    /// `custom_metadata_map` (the model's named strings).
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = self.session.metadata();
        let d = PyDict::new(py);
        d.set_item("producer_name", &m.producer_name)?;
        d.set_item("graph_name", &m.graph_name)?;
        d.set_item("graph_description", &m.graph_doc_string)?;
        d.set_item("domain", &m.domain)?;
        d.set_item("description", &m.doc_string)?;
        d.set_item("version", m.model_version)?;
        let custom = PyDict::new(py);
        for (k, v) in &m.custom {
            custom.set_item(k, v)?;
        }
        d.set_item("custom_metadata_map", custom)?;
        Ok(d)
    }

    /// How many layers each backend runs in the plan of the latest run: `{backend id: count}`.
    fn layers_per_backend(&self) -> PyResult<BTreeMap<String, usize>> {
        Ok(self.current()?.layers_per_backend())
    }

    /// The backend that runs layer `name` in the plan of the latest run, or `None` when it
    /// has no such layer.
    fn backend_of(&self, name: &str) -> PyResult<Option<String>> {
        Ok(self
            .current()?
            .optimized()
            .backend_of(name)
            .map(str::to_owned))
    }

    fn __repr__(&self) -> String {
        format!(
            "backplane.Network(inputs={:?}, outputs={:?}, layers_per_backend={:?})",
            self.session
                .inputs()
                .iter()
                .map(|i| &i.name)
                .collect::<Vec<_>>(),
            self.session
                .outputs()
                .iter()
                .map(|o| &o.name)
                .collect::<Vec<_>>(),
            self.session
                .current()
                .map(|p| p.layers_per_backend())
                .unwrap_or_default()
        )
    }
}

/// The native module `backplane._backplane`; `backplane/__init__.py` re-exports it.
#[pymodule]
fn _backplane(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Runtime>()?;
    m.add_class::<Network>()?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("ModelError", py.get_type::<ModelError>())?;
    m.add("UnsupportedError", py.get_type::<UnsupportedError>())?;
    m.add("InputError", py.get_type::<InputError>())?;
    m.add("BackendError", py.get_type::<BackendError>())?;
    m.add("BackendFaultError", py.get_type::<BackendFaultError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
