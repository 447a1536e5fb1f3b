//! Binding a run's buffers: the caller's inputs and outputs checked against the network
//! (names, shapes, types, sizes; each bound once), and network inputs a device backend
//! imports for the run.

use std::sync::atomic::Ordering;

use backplane_api::{BufferId, TensorInfo};

use super::{
    LoadedNetwork,
    error::{ExecuteError, backend_error},
};

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
}
