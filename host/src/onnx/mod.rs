//! # ONNX front end
//!
//! Imports `.onnx` models (ai.onnx operator sets 6 to 27) into a [`Network`](crate::Network)
//! of v1 layers:
//!
//! ```no_run
//! use std::path::Path;
//! use backplane::onnx::{ImportOptions, import_file};
//!
//! let network = import_file(Path::new("mobilenet_v3.onnx"), &ImportOptions::default())?;
//! for (name, info) in network.inputs() {
//!     println!("input {name}: {info}");
//! }
//! # Ok::<(), backplane::onnx::ImportError>(())
//! ```
//!
//! - [`proto`]: the ONNX protobuf messages read (a subset of `onnx.proto`, `prost` derive).
//! - [`ModelMetadata`]: the producer, versions, descriptions and named strings a model
//!   carries ([`read_model`] reads a file once for the import and the metadata).
//! - Graph inputs keep their names, and so do graph outputs; initializers and
//!   [`ImportOptions::constant_inputs`] are constants. Activations are float32.
//! - Each node becomes zero or more layers named after the node (`<op_type>_<index>` when
//!   unnamed; suffixed to stay unique). Shape sub-graphs (`Shape`, `Gather`, `Slice`,
//!   `Concat`, `Unsqueeze`, `Squeeze`, `Cast`, arithmetic on constants, ...) are folded into
//!   constants, so that for example `Reshape` gets a fixed target shape.
//! - A node that needs a value computed at run time (a `Reshape` by a computed shape, an
//!   `If` on a computed condition) ends a segment when a session imports the model
//!   ([`Model::instantiate_dynamic`], [`Instance`], [`Resume`]); a static import reports it
//!   unsupported.
//! - Every unsupported node is reported at once ([`ImportError::Unsupported`]); malformed
//!   input of any kind is an error, never a panic.
//!
//! Imports: `graph` (the network the importer builds), `memory` (the load's memory budget).

mod fold;
pub use fold::{half_bytes, integer_bytes, narrow_to_i32};
mod import;
mod metadata;
pub mod proto;
#[cfg(test)]
mod tests;

pub use import::{
    DeclaredTensor, Dim, ImportError, ImportOptions, Instance, MAX_CONSTANT_BYTES,
    MAX_DECIDING_ELEMENTS, Model, Resume, SUPPORTED_OPSETS, TensorValues, UnsupportedNode,
    decode_tensor, import_bytes, import_file, import_model,
};
pub use metadata::{ModelMetadata, read_model};
