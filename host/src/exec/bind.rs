//! Binding a run's buffers: the caller's inputs and outputs checked against the network
//! (names, shapes, types, sizes; each bound once), and network inputs a device backend
//! imports for the run.

use std::sync::atomic::Ordering;

use backplane_api::{BufferId, LayerKind, TensorInfo};

use super::{
    LoadedNetwork,
    error::{ExecuteError, backend_error},
};
use crate::{graph::optimizer::Strategy, memory::arena::Arena};

/// A tensor handed to or returned from `enqueue`.
#[derive(Debug)]
pub struct InputTensor<'a> {
    /// The network input's name.
    pub name: &'a str,
    /// Its shape and type, which must match the network's.
    pub info: &'a TensorInfo,
    /// Its bytes (densely packed, row-major, little-endian).
    pub data: &'a [u8],
}

/// A buffer `enqueue` writes one network output into.
#[derive(Debug)]
pub struct OutputTensor<'a> {
    /// The network output's name.
    pub name: &'a str,
    /// Its shape and type, which must match the network's.
    pub info: &'a TensorInfo,
    /// Where the bytes go.
    pub data: &'a mut [u8],
}

/// Whether `data` is aligned for the elements of `info` (so a workload can read or write it
/// in place).
pub(super) fn aligned(data: &[u8], info: &TensorInfo) -> bool {
    let size = info.data_type.size_in_bytes().max(1);
    (data.as_ptr() as usize).is_multiple_of(size)
}

/// The rest of a run, given the device buffers that stand for imported network inputs.
pub(super) type RunWithImports<'a> =
    dyn FnMut(&[(usize, BufferId)]) -> Result<(), ExecuteError> + 'a;

/// A network input a device backend may use in the caller's buffer during one run.
pub(super) struct Import<'a> {
    /// The MemCopy's tensor the imported buffer stands for.
    pub(super) tensor: usize,
    /// The device backend (index among the network's).
    pub(super) backend: usize,
    pub(super) data: &'a [u8],
    pub(super) layer: &'a str,
}

impl LoadedNetwork {
    pub(super) fn check<'t>(
        &self,
        what: &str,
        name: &str,
        info: &TensorInfo,
        len: usize,
        list: &'t [(String, usize)],
    ) -> Result<&'t (String, usize), ExecuteError> {
        let entry = list.iter().find(|(n, _)| n == name).ok_or_else(|| {
            let known: Vec<&str> = list.iter().map(|(n, _)| n.as_str()).collect();
            ExecuteError::Binding(format!(
                "no network {what} named {name:?} (the network has {known:?})"
            ))
        })?;
        let expected = &self.tensors[entry.1].info;
        if expected.shape != info.shape || expected.data_type != info.data_type {
            return Err(ExecuteError::Binding(format!(
                "{what} {name}: expected {expected}, got {info}"
            )));
        }
        if info.num_bytes() != Some(len) {
            return Err(ExecuteError::Binding(format!(
                "{what} {name}: {info} needs {:?} bytes, got {len}",
                info.num_bytes()
            )));
        }
        Ok(entry)
    }

    /// Imports `pending` one after the other (each import wraps the rest), then runs `f` with
    /// the buffers that stand for them. A backend that declines an import leaves that input
    /// to its copy; one that fails it (or names its buffer with the reserved id) fails the
    /// run.
    pub(super) fn with_imports(
        &self,
        pending: &[Import<'_>],
        done: &mut Vec<(usize, BufferId)>,
        f: &mut RunWithImports<'_>,
    ) -> Result<(), ExecuteError> {
        let Some((first, rest)) = pending.split_first() else {
            return f(done);
        };
        let Some(m) = self.backends[first.backend].device_memory() else {
            return self.with_imports(rest, done, f);
        };
        m.with_import(first.data, |id| {
            if let Some(id) = id {
                done.push((first.tensor, id));
                self.imports.fetch_add(1, Ordering::Relaxed);
            }
            self.with_imports(rest, done, f)
        })
        .map_err(backend_error(first.layer))?
    }
    /// Checks every binding of a run (each input and output named once, with the network's
    /// shape, type and size) and returns the tensor each is bound to, in the callers' order.
    pub(super) fn bind(
        &self,
        inputs: &[InputTensor<'_>],
        outputs: &[OutputTensor<'_>],
    ) -> Result<(Vec<usize>, Vec<usize>), ExecuteError> {
        let mut bound_in = Vec::with_capacity(inputs.len());
        for t in inputs {
            bound_in.push(
                self.check("input", t.name, t.info, t.data.len(), &self.inputs)?
                    .1,
            );
        }
        let mut bound_out = Vec::with_capacity(outputs.len());
        for t in outputs {
            bound_out.push(
                self.check("output", t.name, t.info, t.data.len(), &self.outputs)?
                    .1,
            );
        }
        for (what, list, bound) in [
            ("input", &self.inputs, &bound_in),
            ("output", &self.outputs, &bound_out),
        ] {
            for (name, i) in list {
                match bound.iter().filter(|b| **b == *i).count() {
                    1 => {}
                    0 => {
                        return Err(ExecuteError::Binding(format!(
                            "network {what} {name} is not bound"
                        )));
                    }
                    _ => {
                        return Err(ExecuteError::Binding(format!(
                            "network {what} {name} is bound twice"
                        )));
                    }
                }
            }
        }
        Ok((bound_in, bound_out))
    }

    /// Per tensor, the bytes a run reads from outside the arena: the constants block, the
    /// constants read in place, and the caller's inputs when `direct` and aligned. The other
    /// inputs are copied into `arena`.
    pub(super) fn stage_inputs<'a>(
        &'a self,
        inputs: &[InputTensor<'a>],
        bound_in: &[usize],
        arena: &mut Arena,
        direct: bool,
    ) -> Vec<Option<&'a [u8]>> {
        let mut external_in: Vec<Option<&[u8]>> = vec![None; self.tensors.len()];
        for &i in &self.constant_tensors {
            let slot = &self.tensors[i];
            external_in[i] = Some(&self.constants.bytes()[slot.offset..slot.offset + slot.bytes]);
        }
        for (i, layer) in &self.in_place {
            external_in[*i] = layer.constant_bytes();
        }
        for (t, &i) in inputs.iter().zip(bound_in) {
            if direct && aligned(t.data, &self.tensors[i].info) {
                external_in[i] = Some(t.data);
                continue;
            }
            let slot = &self.tensors[i];
            arena.bytes_mut()[slot.offset..slot.offset + slot.bytes].copy_from_slice(t.data);
        }
        external_in
    }

    /// Per tensor, the caller's output buffer (an index into `outputs`) its one writer writes
    /// straight into, when `direct` and aligned.
    pub(super) fn direct_outputs(
        &self,
        outputs: &[OutputTensor<'_>],
        bound_out: &[usize],
        direct: bool,
    ) -> Vec<Option<usize>> {
        let mut external_out = vec![None; self.tensors.len()];
        for (k, (t, &i)) in outputs.iter().zip(bound_out).enumerate() {
            let source = self.steps[i].inputs[0];
            if direct && self.written_once[i] && aligned(t.data, &self.tensors[source].info) {
                external_out[source] = Some(k);
            }
        }
        external_out
    }

    /// Network inputs a device backend uses in the caller's buffer (`Strategy::Import`):
    /// imported for the whole run, and fenced and released when it is over, however it ends
    /// (`MemoryManagerHandle::with_import`).
    pub(super) fn pending_imports<'a>(
        &'a self,
        external_in: &[Option<&'a [u8]>],
    ) -> Vec<Import<'a>> {
        self.steps
            .iter()
            .filter_map(|step| {
                let t = step.transfer?;
                let input = step.inputs[0];
                let usable =
                    t.strategy == Strategy::Import && self.steps[input].kind == LayerKind::Input;
                Some(Import {
                    tensor: step.output,
                    backend: t.to.filter(|_| usable)?,
                    data: external_in[input]?,
                    layer: &step.layer,
                })
            })
            .collect()
    }

    /// Copies each output the run did not write into the caller's buffer: from outside the
    /// arena (an output that is an input or a constant) or from `arena`.
    pub(super) fn copy_out(
        &self,
        outputs: &mut [OutputTensor<'_>],
        bound_out: &[usize],
        external_in: &[Option<&[u8]>],
        external_out: &[Option<usize>],
        arena: &[u8],
    ) {
        for (t, &i) in outputs.iter_mut().zip(bound_out) {
            let source = self.steps[i].inputs[0];
            if external_out[source].is_some() {
                continue;
            }
            let slot = &self.tensors[source];
            let bytes = match external_in[source] {
                Some(data) => data,
                None => &arena[slot.offset..slot.offset + slot.bytes],
            };
            t.data.copy_from_slice(bytes);
        }
    }
}
