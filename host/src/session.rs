//! A session: one ONNX model imported, optimised for backend preferences and loaded in a
//! [`Runtime`], ready to run (onnxruntime's `InferenceSession`).
//!
//! This is the one path from a model file to results that the CLI's `run`/`bench` and the
//! Python and C bindings share:
//! 1. [`Session::load`] imports the file ([`crate::onnx`]), with the input shapes given;
//! 2. optimises it for the preferences (none given: [`Runtime::default_preferences`]) and the
//!    per-backend options;
//! 3. loads it ([`Runtime::load_network`]);
//! 4. [`Session::run`] checks and binds the inputs and outputs, then runs once;
//! 5. dropping the session unloads the network. The session holds its runtime (`Arc`), so the
//!    runtime lives as long as any of its sessions.
//!
//! Imports: `runtime`, `onnx`, `exec`, `graph`, `plugins`, `npy`.

use std::{collections::BTreeMap, collections::HashMap, path::Path, sync::Arc};

use backplane_api::TensorInfo;

use crate::{
    exec::loaded_network::{ExecuteError, InputTensor, LayerProfile, NetworkId, OutputTensor},
    graph::network::Network,
    graph::optimizer::{OptimizeError, OptimizedNetwork, OptimizerOptions},
    npy::NpyData,
    onnx::{self, ImportError, ModelMetadata},
    runtime::Runtime,
};

/// How a [`Session`] is made.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// Backend ids in order of preference; empty: [`Runtime::default_preferences`].
    pub backends: Vec<String>,
    /// Fusion switch and per-backend options (Backend API 1.1).
    pub optimizer: OptimizerOptions,
    /// Shapes of graph inputs by name, replacing the model's declared (or symbolic) ones.
    pub input_shapes: HashMap<String, Vec<u32>>,
}

/// The most elements an input shape given in [`SessionOptions`] may have (2³¹ − 1, as many as
/// an `int32` index reaches): a larger shape is refused when it is given, with its name,
/// before anything is imported or allocated.
pub const MAX_INPUT_ELEMENTS: u64 = i32::MAX as u64;

/// Building a [`SessionOptions`]: the one place where the CLI's flags, the C API's arguments
/// and the Python package's keywords become options, each checked as it is given.
impl SessionOptions {
    /// The backend preferences, first preferred first: each id trimmed, empty ones dropped
    /// (so `"CpuFast, CpuRef"` split at commas and `["CpuFast", "CpuRef"]` give the same).
    pub fn set_backends<S: AsRef<str>>(&mut self, ids: impl IntoIterator<Item = S>) -> &mut Self {
        self.backends = ids
            .into_iter()
            .map(|s| s.as_ref().trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        self
    }

    /// Turns fusion (the graph rewrites and every backend's `optimize_subgraph`) on or off.
    pub fn set_fusion(&mut self, on: bool) -> &mut Self {
        self.optimizer.no_subgraph_optimization = !on;
        self
    }

    /// Sets option `key` of `backend` to a typed value (the Python package's keywords).
    ///
    /// # Errors
    /// An empty backend id or key.
    pub fn set_backend_option(
        &mut self,
        backend: &str,
        key: &str,
        value: backplane_api::Value,
    ) -> Result<&mut Self, String> {
        self.optimizer.set_backend_option(backend, key, value)?;
        Ok(self)
    }

    /// Adds an option written `ID:KEY=VALUE` (the CLI's `--backend-option`, the C API's
    /// strings); the value is typed by [`backplane_api::Value::parse`].
    ///
    /// # Errors
    /// Text that is not `ID:KEY=VALUE` with a non-empty id and key.
    pub fn add_backend_option_text(&mut self, spec: &str) -> Result<&mut Self, String> {
        self.optimizer.add_backend_option(spec)?;
        Ok(self)
    }

    /// Fixes the shape of input `name`.
    ///
    /// # Errors
    /// An empty name, or a shape of more than [`MAX_INPUT_ELEMENTS`] elements.
    pub fn set_input_shape(&mut self, name: &str, dims: &[u32]) -> Result<&mut Self, String> {
        if name.is_empty() {
            return Err(format!("input shape {dims:?}: the input name is empty"));
        }
        let elements = dims
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(u64::from(d)))
            .filter(|&n| n <= MAX_INPUT_ELEMENTS);
        if elements.is_none() {
            return Err(format!(
                "input {name}: shape {dims:?} has more than {MAX_INPUT_ELEMENTS} elements"
            ));
        }
        self.input_shapes.insert(name.to_owned(), dims.to_vec());
        Ok(self)
    }

    /// Fixes a shape written `NAME=D1,D2,...` (the CLI's `--shape`).
    ///
    /// # Errors
    /// Text of another form, a dimension that is not a whole number in `0..=4294967295`, or
    /// what [`SessionOptions::set_input_shape`] refuses.
    pub fn add_input_shape_text(&mut self, spec: &str) -> Result<&mut Self, String> {
        let (name, dims) = spec
            .split_once('=')
            .ok_or_else(|| format!("shape {spec:?} is not NAME=D1,D2,..."))?;
        let dims = dims
            .split(',')
            .map(|d| d.trim().parse::<u32>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| {
                format!("shape {spec:?}: each dimension must be a whole number in 0..=4294967295")
            })?;
        self.set_input_shape(name, &dims)
    }
}

/// Why a session could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The model could not be read or imported.
    #[error(transparent)]
    Import(#[from] ImportError),
    /// No assignment of the layers to the preferred backends exists.
    #[error(transparent)]
    Optimize(#[from] OptimizeError),
    /// The optimised network could not be loaded.
    #[error(transparent)]
    Load(#[from] ExecuteError),
}

/// A loaded network with its runtime, inputs and outputs; unloaded when dropped.
#[derive(Debug)]
pub struct Session {
    runtime: Arc<Runtime>,
    optimized: OptimizedNetwork,
    id: NetworkId,
    inputs: Vec<(String, TensorInfo)>,
    outputs: Vec<(String, TensorInfo)>,
    /// The model's metadata (empty for a network not read from a file).
    metadata: ModelMetadata,
    /// Set by [`Session::unload`], so that `drop` does not unload again.
    unloaded: bool,
}

impl Session {
    /// Imports the ONNX file `model` and loads it in `runtime` (see the module doc).
    ///
    /// # Errors
    /// [`SessionError`] for the stage that failed.
    pub fn load(
        runtime: Arc<Runtime>,
        model: &Path,
        options: &SessionOptions,
    ) -> Result<Self, SessionError> {
        let import = onnx::ImportOptions {
            input_shapes: options.input_shapes.clone(),
            ..onnx::ImportOptions::default()
        };
        let model = onnx::read_model(model)?;
        let network = onnx::import_model(&model, &import)?;
        let mut session = Self::from_network(runtime, &network, options)?;
        session.metadata = ModelMetadata::of(&model);
        Ok(session)
    }

    /// Optimises and loads a network already built or imported; `options.input_shapes` is
    /// not used (the network's shapes are fixed).
    ///
    /// # Errors
    /// [`SessionError::Optimize`] or [`SessionError::Load`].
    pub fn from_network(
        runtime: Arc<Runtime>,
        network: &Network,
        options: &SessionOptions,
    ) -> Result<Self, SessionError> {
        let preferences = if options.backends.is_empty() {
            runtime.default_preferences()
        } else {
            options.backends.clone()
        };
        let prefs: Vec<&str> = preferences.iter().map(String::as_str).collect();
        let optimized = runtime.optimize(network, &prefs, &options.optimizer)?;
        let id = runtime.load_network(&optimized)?;
        let named = |list: Vec<(&str, &TensorInfo)>| {
            list.into_iter()
                .map(|(n, i)| (n.to_owned(), i.clone()))
                .collect()
        };
        Ok(Self {
            inputs: named(network.inputs()),
            outputs: named(network.outputs()),
            runtime,
            optimized,
            id,
            metadata: ModelMetadata::default(),
            unloaded: false,
        })
    }

    /// The runtime the network is loaded in.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The network's id in its runtime.
    pub fn id(&self) -> NetworkId {
        self.id
    }

    /// The model's metadata: producer, versions, descriptions and named strings
    /// (onnxruntime's `get_modelmeta()`).
    pub fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    /// The graph inputs, in the model's order, with the shape and type `run` expects.
    pub fn inputs(&self) -> &[(String, TensorInfo)] {
        &self.inputs
    }

    /// The graph outputs, in the model's order.
    pub fn outputs(&self) -> &[(String, TensorInfo)] {
        &self.outputs
    }

    /// The optimised network: per layer, the backend and why.
    pub fn optimized(&self) -> &OptimizedNetwork {
        &self.optimized
    }

    /// The per-layer assignment as text ([`OptimizedNetwork::explain`]).
    pub fn explain(&self) -> String {
        self.optimized.explain()
    }

    /// How many layers each backend runs.
    pub fn layers_per_backend(&self) -> BTreeMap<String, usize> {
        self.optimized
            .assignments()
            .iter()
            .fold(BTreeMap::new(), |mut m, a| {
                *m.entry(a.backend.clone()).or_default() += 1;
                m
            })
    }

    /// Optimises the network again with its preferences and options, without the backends
    /// that faulted since ([`Runtime::reoptimize`]), loads it, and unloads the old one: how to
    /// go on after an out-of-process backend crashed.
    ///
    /// # Errors
    /// [`SessionError::Optimize`] or [`SessionError::Load`]; the session then keeps its old
    /// network.
    pub fn reoptimize(&mut self) -> Result<(), SessionError> {
        let optimized = self.runtime.reoptimize(&self.optimized)?;
        let id = self.runtime.load_network(&optimized)?;
        let old = std::mem::replace(&mut self.id, id);
        self.optimized = optimized;
        if let Err(e) = self.runtime.unload_network(old) {
            log::warn!("network {old}: unloading it after optimising again: {e}");
        }
        Ok(())
    }

    /// Runs once with caller-provided buffers ([`Runtime::enqueue`]: every binding is checked
    /// first and nothing runs on a mismatch; runs of one session are serialised).
    ///
    /// # Errors
    /// [`ExecuteError::Binding`] for a wrong name, shape, type or size; the backend's error.
    pub fn run(
        &self,
        inputs: &[InputTensor<'_>],
        outputs: &mut [OutputTensor<'_>],
    ) -> Result<(), ExecuteError> {
        self.runtime.enqueue(self.id, inputs, outputs)
    }

    /// Turns per-layer timing on (from zero) or off ([`Runtime::set_profiling`]).
    pub fn set_profiling(&self, on: bool) {
        self.runtime.set_profiling(self.id, on);
    }

    /// Per-layer times since profiling was turned on, in the order the layers run; `None`
    /// while it is off ([`Runtime::profile`]).
    pub fn profile(&self) -> Option<Vec<LayerProfile>> {
        self.runtime.profile(self.id)
    }

    /// One zeroed buffer per output, of its size, in the order of [`Session::outputs`]: what
    /// [`Session::run`] writes into, and can write into again run after run.
    ///
    /// # Errors
    /// [`ExecuteError::Binding`] for an output whose size cannot be addressed.
    pub fn output_buffers(&self) -> Result<Vec<Vec<u8>>, ExecuteError> {
        self.outputs
            .iter()
            .map(|(name, info)| {
                info.num_bytes().map(|n| vec![0u8; n]).ok_or_else(|| {
                    ExecuteError::Binding(format!("output {name}: {info} has no byte size"))
                })
            })
            .collect()
    }

    /// Runs once and returns every output's bytes, in the order of [`Session::outputs`].
    ///
    /// # Errors
    /// As [`Session::run`].
    pub fn run_to_vec(&self, inputs: &[InputTensor<'_>]) -> Result<Vec<Vec<u8>>, ExecuteError> {
        let mut buffers = self.output_buffers()?;
        let mut bound: Vec<OutputTensor<'_>> = self
            .outputs
            .iter()
            .zip(buffers.iter_mut())
            .map(|((name, info), data)| OutputTensor { name, info, data })
            .collect();
        self.run(inputs, &mut bound)?;
        drop(bound);
        Ok(buffers)
    }
}

/// The bytes an input of `info` takes from `.npy` values of the input called `name`: float32
/// for a Float32 input; int32, or int64 narrowed with a range check, for a Signed32 input
/// (ONNX int64 inputs are Signed32 in the network); bool for a Boolean input.
///
/// # Errors
/// A message naming the input when the file's type does not fit the input's or an int64
/// value lies outside Signed32's range.
pub fn input_bytes(name: &str, info: &TensorInfo, data: &NpyData) -> Result<Vec<u8>, String> {
    use backplane_api::DataType;
    Ok(match (info.data_type, data) {
        (DataType::Float32, NpyData::F32(v)) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        (DataType::Signed32, NpyData::I32(v)) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        (DataType::Signed32, NpyData::I64(v)) => onnx::narrow_to_i32(v)
            .map_err(|bad| {
                format!(
                    "input {name}: {bad} is outside the range of Signed32, to which the host \
                     narrows int64"
                )
            })?
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        (DataType::Boolean, NpyData::Bool(v)) => v.clone(),
        (t, d) => {
            return Err(format!(
                "input {name} is {t} in the network, the file holds {}",
                d.dtype()
            ));
        }
    })
}

/// An output's bytes as `.npy` values of its type: Float32 as float32, Signed32 as int32,
/// Boolean as bool.
///
/// # Errors
/// A message naming the output for any other data type.
pub fn output_values(name: &str, info: &TensorInfo, bytes: &[u8]) -> Result<NpyData, String> {
    use backplane_api::DataType;
    let words = || bytes.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]);
    Ok(match info.data_type {
        DataType::Float32 => NpyData::F32(words().map(f32::from_le_bytes).collect()),
        DataType::Signed32 => NpyData::I32(words().map(i32::from_le_bytes).collect()),
        DataType::Boolean => NpyData::Bool(bytes.to_vec()),
        other => {
            return Err(format!(
                "output {name} is {other}, which .npy output does not take"
            ));
        }
    })
}

impl Session {
    /// Unloads the network now and returns what went wrong (dropping the session unloads
    /// too, and logs the error instead).
    ///
    /// # Errors
    /// As [`Runtime::unload_network`]; after [`ExecuteError::UnloadRefused`] the network
    /// stays loaded until the runtime is dropped.
    pub fn unload(mut self) -> Result<(), ExecuteError> {
        self.unloaded = true;
        self.runtime.unload_network(self.id)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.unloaded {
            return;
        }
        if let Err(e) = self.runtime.unload_network(self.id) {
            log::error!("network {}: unload failed: {e}", self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{graph::network::NetworkBuilder, runtime::CreationOptions};
    use backplane_api::{ActivationDescriptor, ActivationFunction, DataType, LayerDescriptor};

    fn relu_network() -> Network {
        let mut b = NetworkBuilder::new();
        let x = b
            .add_input("x", TensorInfo::new(&[1, 4], DataType::Float32))
            .unwrap();
        let relu = ActivationDescriptor {
            function: ActivationFunction::ReLU,
            a: 0.0,
            b: 0.0,
        };
        let y = b
            .add_layer("relu", LayerDescriptor::Activation(relu), &[x])
            .unwrap();
        b.add_output("y", y).unwrap();
        b.build().unwrap()
    }

    fn cpu_ref_only() -> Arc<Runtime> {
        Arc::new(Runtime::with_path_list(
            CreationOptions::default(),
            crate::plugins::paths::PathSource::Option,
            "",
        ))
    }

    #[test]
    fn runs_and_unloads_when_dropped() {
        let runtime = cpu_ref_only();
        let session =
            Session::from_network(runtime.clone(), &relu_network(), &SessionOptions::default())
                .unwrap();
        assert_eq!(session.layers_per_backend().get("CpuRef"), Some(&3));
        let info = TensorInfo::new(&[1, 4], DataType::Float32);
        let data: Vec<u8> = [-1.0f32, 2.0, -3.0, 4.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let out = session
            .run_to_vec(&[InputTensor {
                name: "x",
                info: &info,
                data: &data,
            }])
            .unwrap();
        let values: Vec<f32> = out[0]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(values, [0.0, 2.0, 0.0, 4.0]);
        let id = session.id();
        drop(session);
        assert_eq!(runtime.network_memory(id), None);
    }

    #[test]
    fn a_wrong_shape_runs_nothing() {
        let session =
            Session::from_network(cpu_ref_only(), &relu_network(), &SessionOptions::default())
                .unwrap();
        let info = TensorInfo::new(&[1, 3], DataType::Float32);
        let err = session
            .run_to_vec(&[InputTensor {
                name: "x",
                info: &info,
                data: &[0; 12],
            }])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "input x: expected [1, 4] Float32, got [1, 3] Float32"
        );
    }

    /// The builder the CLI, C and Python share: each kind of option, how text is read, and
    /// what is refused (exact messages).
    #[test]
    fn options_are_built_and_checked_in_one_place() {
        use backplane_api::Value;
        let mut o = SessionOptions::default();
        o.set_backends(" CpuFast, ,CpuRef ".split(','))
            .set_fusion(false);
        assert_eq!(o.backends, ["CpuFast", "CpuRef"]);
        assert!(o.optimizer.no_subgraph_optimization);
        o.add_backend_option_text("CpuFast:Threads=2").unwrap();
        assert_eq!(
            o.optimizer.options_for("CpuFast").get("Threads"),
            Some(&Value::Int(2))
        );
        // A typed value is kept as given: text "2" stays text.
        o.set_backend_option("CpuFast", "Threads", Value::Str("2".into()))
            .unwrap();
        assert_eq!(
            o.optimizer.options_for("CpuFast").get("Threads"),
            Some(&Value::Str("2".into()))
        );
        assert_eq!(o.optimizer.options_for("CpuFast").entries.len(), 1);
        assert_eq!(
            o.add_backend_option_text("CpuFast").unwrap_err(),
            "backend option \"CpuFast\" is not ID:KEY=VALUE"
        );
        assert_eq!(
            o.set_backend_option("", "K", Value::Bool(true))
                .unwrap_err(),
            "backend option \"\":\"K\": the backend id and the key must not be empty"
        );
        o.add_input_shape_text("x=1, 3,48,192").unwrap();
        assert_eq!(o.input_shapes["x"], [1, 3, 48, 192]);
        assert_eq!(
            o.add_input_shape_text("x=1,-3").unwrap_err(),
            "shape \"x=1,-3\": each dimension must be a whole number in 0..=4294967295"
        );
        assert_eq!(
            o.add_input_shape_text("x").unwrap_err(),
            "shape \"x\" is not NAME=D1,D2,..."
        );
        assert_eq!(
            o.set_input_shape("y", &[65536, 32768]).unwrap_err(),
            "input y: shape [65536, 32768] has more than 2147483647 elements"
        );
        o.set_input_shape("y", &[65536, 32767]).unwrap();
        o.set_input_shape("z", &[0, 7]).unwrap();
        assert_eq!(
            o.set_input_shape("", &[1]).unwrap_err(),
            "input shape [1]: the input name is empty"
        );
    }

    /// A layer whose output has more bytes than a `usize` holds (here `BroadcastTo` a
    /// 2^32-per-side cube of floats) fails the load with an error naming it, where its size
    /// used to be read as 0 bytes.
    #[test]
    fn an_output_too_large_to_address_fails_the_load() {
        let mut b = NetworkBuilder::new();
        let x = b
            .add_input("x", TensorInfo::new(&[1], DataType::Float32))
            .unwrap();
        let huge = b
            .add_layer(
                "huge",
                LayerDescriptor::BroadcastTo(backplane_api::BroadcastToDescriptor {
                    shape: vec![u32::MAX; 3].into(),
                }),
                &[x],
            )
            .expect("shape inference takes it: only the size overflows");
        b.add_output("y", huge).unwrap();
        let err = Session::from_network(
            cpu_ref_only(),
            &b.build().unwrap(),
            &SessionOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.ends_with(
                "layer huge: its output [4294967295, 4294967295, 4294967295] Float32 has more \
                 bytes than this machine can address"
            ),
            "{err}"
        );
    }
}
