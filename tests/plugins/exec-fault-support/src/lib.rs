//! The backend shared by the execute-fault test plugins (`exec-segfaults`, `exec-aborts`,
//! `exec-exits`, `exec-hangs`, `heap-corrupts`): [`ExecFault`] runs `Activation(ReLU)` on
//! Float32 (any shape, output of the input's shape) and refuses everything else with a reason.
//!
//! Its workloads count `execute` calls in a process-wide counter (one per plugin library).
//! Calls 1 and 2 compute `max(x, 0)`; from call [`FAULTY_CALL`] on, `execute` prints
//! `"<Id>: execute call <n>: <what>"` on stderr and calls the plugin's fault, which is meant
//! to end (or stall) the process. Each plugin is one line: [`exec_fault_plugin!`].

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

pub use backplane_api;
use backplane_api::{
    ActivationFunction, Backend, BackendError, BackendResult, DataType, LayerDescriptor,
    MemoryManager, Support, TensorInfo, TensorView, TensorViewMut, Workload, WorkloadDesc,
    WorkloadFactory,
};

/// The first `execute` call (counting from 1 in the process) that faults.
pub const FAULTY_CALL: usize = 3;

/// `execute` calls so far in this process, across every workload of the plugin.
static EXECUTE_CALLS: AtomicUsize = AtomicUsize::new(0);

/// A plugin's fault: its id, what the stderr line says it does, and the fault itself.
#[derive(Debug, Clone, Copy)]
pub struct ExecFault {
    /// The backend id the plugin exports.
    pub id: &'static str,
    /// The end of the stderr line printed before the fault (`"aborting"`).
    pub what: &'static str,
    /// The fault. Should it return, `execute` fails with an error saying so.
    pub fault: fn(),
}

impl ExecFault {
    /// Why `layer` with these tensors is not ReLU on one Float32 tensor of one shape.
    fn refusal(
        self,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Option<String> {
        match layer {
            LayerDescriptor::Activation(a) if a.function == ActivationFunction::ReLU => {}
            LayerDescriptor::Activation(a) => {
                return Some(format!(
                    "{} runs only Activation ReLU, not {:?}",
                    self.id, a.function
                ));
            }
            other => {
                return Some(format!(
                    "{} runs only Activation ReLU, not {}",
                    self.id,
                    other.kind()
                ));
            }
        }
        match (inputs, outputs) {
            ([i], [_]) if i.data_type != DataType::Float32 => Some(format!(
                "{} runs ReLU on Float32 only, not {}",
                self.id, i.data_type
            )),
            ([i], [o]) if i != o => Some(format!(
                "{}: ReLU output must have the input's shape and type",
                self.id
            )),
            ([_], [_]) => None,
            _ => Some(format!(
                "{}: ReLU takes 1 input and 1 output, got {} and {}",
                self.id,
                inputs.len(),
                outputs.len()
            )),
        }
    }
}

impl Backend for ExecFault {
    fn is_layer_supported(
        &self,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Support {
        self.refusal(layer, inputs, outputs)
            .map_or(Support::Supported, Support::unsupported)
    }

    fn create_workload_factory(
        &self,
        _: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        Ok(Box::new(*self))
    }
}

impl WorkloadFactory for ExecFault {
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
        match self.refusal(desc.layer, desc.inputs.as_slice(), desc.outputs.as_slice()) {
            Some(reason) => Err(BackendError::unsupported(format!(
                "layer {}: {reason}",
                desc.name
            ))),
            None => Ok(Box::new(*self)),
        }
    }
}

impl Workload for ExecFault {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let call = EXECUTE_CALLS.fetch_add(1, Ordering::SeqCst) + 1;
        if call >= FAULTY_CALL {
            eprintln!("{}: execute call {call}: {}", self.id, self.what);
            (self.fault)();
            return Err(BackendError::failed(format!(
                "{}: the fault of execute call {call} did not end the process",
                self.id
            )));
        }
        let ([input], [output]) = (inputs, outputs) else {
            return Err(BackendError::invalid_argument(
                "ReLU takes 1 input and 1 output",
            ));
        };
        let (src, dst) = (input.as_f32()?, output.as_f32_mut()?);
        if src.len() != dst.len() {
            return Err(BackendError::invalid_argument(
                "ReLU: input and output sizes differ",
            ));
        }
        for (d, s) in dst.iter_mut().zip(src) {
            *d = if *s < 0.0 { 0.0 } else { *s };
        }
        Ok(())
    }
}

/// Exports an [`ExecFault`] backend (vendor `Test`):
/// `exec_fault_plugin!("ExecAbort", "aborting", std::process::abort);`.
#[macro_export]
macro_rules! exec_fault_plugin {
    ($id:literal, $what:literal, $fault:expr $(,)?) => {
        $crate::backplane_api::export_backend!(id: $id, vendor: "Test", backend: || {
            $crate::ExecFault {
                id: $id,
                what: $what,
                fault: $fault,
            }
        });
    };
}
