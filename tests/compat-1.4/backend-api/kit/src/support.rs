//! Deciding whether a backend runs a layer: the checks every backend makes first (the
//! preamble) and [`Route`], the pattern in which one function both answers
//! `is_layer_supported` and chooses the workload `create_workload` makes, so that the two
//! cannot drift apart.
//!
//! A backend writes `route(cx, layer, inputs, outputs) -> Result<MyRoute, String>`, where
//! `MyRoute` names the workload to make (and carries what was decoded or planned on the way,
//! such as a fused layer's description). Its `Backend::is_layer_supported` is
//! [`Route::support`], and its factory's `create_workload` starts with
//! [`Route::for_workload`] and matches on the route: a layer is created exactly when it is
//! supported, by the maker the same decision named. Each reason is a sentence without the
//! backend's id; [`Route::support`] and [`Route::for_workload`] put `<id>: ` in front, so the
//! optimizer's explanation says who refused.
//!
//! ```
//! use backplane_api::{ActivationFunction, DataType, LayerDescriptor, TensorInfo};
//! use backplane_backend_kit::support::{Route, not_supported, require_float32};
//!
//! /// What the Acme backend makes for a layer it runs.
//! enum AcmeRoute {
//!     Relu,
//! }
//!
//! impl Route for AcmeRoute {
//!     const BACKEND_ID: &'static str = "Acme";
//!     type Context = ();
//!
//!     fn route(
//!         _: &(),
//!         layer: &LayerDescriptor,
//!         inputs: &[TensorInfo],
//!         outputs: &[TensorInfo],
//!     ) -> Result<Self, String> {
//!         match layer {
//!             LayerDescriptor::Activation(a) if a.function == ActivationFunction::ReLU => {
//!                 require_float32(inputs, outputs)?;
//!                 Ok(AcmeRoute::Relu)
//!             }
//!             other => Err(not_supported(other)),
//!         }
//!     }
//! }
//!
//! // `Backend::is_layer_supported` returns `AcmeRoute::support(&(), layer, inputs, outputs)`;
//! // `WorkloadFactory::create_workload` does `match AcmeRoute::for_workload(&(), desc)? {...}`.
//! let x = [TensorInfo::new(&[4], DataType::Float32)];
//! let verdict = AcmeRoute::support(&(), &LayerDescriptor::MemCopy, &x, &x);
//! assert_eq!(
//!     verdict,
//!     backplane_api::Support::unsupported("Acme: MemCopy is not supported (falls back)")
//! );
//! ```

use backplane_api::{
    BackendError, BackendResult, DataType, LayerDescriptor, PreCompiledDescriptor, Support,
    TensorInfo, WorkloadDesc, shapes,
};

/// The Float32 gate: every input and output is Float32.
///
/// # Errors
/// `only Float32, got {type}`, naming the first tensor of another type.
pub fn require_float32(inputs: &[TensorInfo], outputs: &[TensorInfo]) -> Result<(), String> {
    match inputs
        .iter()
        .chain(outputs)
        .find(|t| t.data_type != DataType::Float32)
    {
        Some(t) => Err(format!("only Float32, got {}", t.data_type)),
        None => Ok(()),
    }
}

/// Refuses another backend's `PreCompiled` layer: `p` must name `backend_id`.
///
/// # Errors
/// `{operation} is a layer of backend {backend}, not of {backend_id}`.
pub fn require_own(p: &PreCompiledDescriptor, backend_id: &str) -> Result<(), String> {
    if p.backend.as_str() == backend_id {
        Ok(())
    } else {
        Err(format!(
            "{} is a layer of backend {}, not of {backend_id}",
            p.operation, p.backend
        ))
    }
}

/// The refusal of a layer kind the backend does not run at all.
pub fn not_supported(layer: &LayerDescriptor) -> String {
    format!("{} is not supported (falls back)", layer.kind())
}

/// Checks `outputs` against the shapes [`shapes::output_shapes`] gives the layer.
///
/// # Errors
/// The shape rule's own reason, or `output shapes {got:?} differ from the expected
/// {expected:?}`.
pub fn require_output_shapes(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
    let expected = shapes::output_shapes(layer, inputs)?;
    let got: Vec<&[u32]> = outputs.iter().map(|t| t.shape.as_slice()).collect();
    if got != expected.iter().map(Vec::as_slice).collect::<Vec<_>>() {
        return Err(format!(
            "output shapes {got:?} differ from the expected {expected:?}"
        ));
    }
    Ok(())
}

/// `Ok` as supported, a refusal as unsupported with the reason after `backend_id: `.
pub fn with_id(backend_id: &str, verdict: Result<(), String>) -> Support {
    match verdict {
        Ok(()) => Support::Supported,
        Err(reason) => Support::unsupported(format!("{backend_id}: {reason}")),
    }
}

/// A backend's routing decision for one layer (see the module documentation).
pub trait Route: Sized {
    /// The backend's id, put in front of every reason.
    const BACKEND_ID: &'static str;

    /// What the decision may look at besides the layer and its tensors: the backend's device
    /// or settings, handed to every call; `()` for a backend whose answers depend on the
    /// layer alone.
    type Context: ?Sized;

    /// What to make for `layer` with these tensors, or why the backend cannot run it
    /// (without the id).
    ///
    /// # Errors
    /// The reason for a refusal.
    fn route(
        cx: &Self::Context,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Result<Self, String>;

    /// The answer to `Backend::is_layer_supported`.
    fn support(
        cx: &Self::Context,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Support {
        with_id(
            Self::BACKEND_ID,
            Self::route(cx, layer, inputs, outputs).map(drop),
        )
    }

    /// The route of the layer `desc` describes, for `create_workload` (the host may ask for
    /// any layer: support is decided again).
    ///
    /// # Errors
    /// `Unsupported`: `layer {name}: {id}: {reason}`.
    fn for_workload(cx: &Self::Context, desc: &WorkloadDesc<'_>) -> BackendResult<Self> {
        Self::route(cx, desc.layer, &desc.inputs, &desc.outputs).map_err(|reason| {
            BackendError::unsupported(format!(
                "layer {}: {}: {reason}",
                desc.name,
                Self::BACKEND_ID
            ))
        })
    }
}

#[cfg(test)]
#[path = "support_tests.rs"]
mod tests;
