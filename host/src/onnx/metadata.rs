//! A model's metadata: who wrote it, its version, and the named strings it carries (what
//! onnxruntime's `InferenceSession.get_modelmeta()` shows; PaddleOCR's recogniser keeps its
//! character list there).

use std::path::Path;

use prost::Message;

use super::{ImportError, proto::ModelProto};

/// The metadata of an ONNX model, as written in it (empty strings and 0 where it says nothing).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ModelMetadata {
    /// The tool that wrote the model (`producer_name`).
    pub producer_name: String,
    /// That tool's version.
    pub producer_version: String,
    /// The model's namespace.
    pub domain: String,
    /// The model's own version.
    pub model_version: i64,
    /// Free text about the model.
    pub doc_string: String,
    /// The graph's name.
    pub graph_name: String,
    /// The graph's description.
    pub graph_doc_string: String,
    /// The named strings (`metadata_props`), in the model's order.
    pub custom: Vec<(String, String)>,
}

impl ModelMetadata {
    /// The metadata of a decoded model.
    pub fn of(model: &ModelProto) -> Self {
        let graph = model.graph.as_ref();
        Self {
            producer_name: model.producer_name.clone(),
            producer_version: model.producer_version.clone(),
            domain: model.domain.clone(),
            model_version: model.model_version,
            doc_string: model.doc_string.clone(),
            graph_name: graph.map(|g| g.name.clone()).unwrap_or_default(),
            graph_doc_string: graph.map(|g| g.doc_string.clone()).unwrap_or_default(),
            custom: model
                .metadata_props
                .iter()
                .map(|e| (e.key.clone(), e.value.clone()))
                .collect(),
        }
    }

    /// The value of the named string `key`, if the model has it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.custom
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads an `.onnx` file: the decoded model, for [`super::import_model`] and
/// [`ModelMetadata::of`] alike.
///
/// # Errors
/// [`ImportError::Io`] when the file cannot be read, [`ImportError::Malformed`] when it is
/// not an ONNX model.
pub fn read_model(path: &Path) -> Result<ModelProto, ImportError> {
    let bytes = std::fs::read(path).map_err(|e| ImportError::Io {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    ModelProto::decode(bytes.as_slice()).map_err(|e| ImportError::Malformed(format!("{e}")))
}
