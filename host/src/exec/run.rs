//! Running: one inference over the units in order (a workload in this process, a device
//! workload on its buffers, a MemCopy the host runs across a memory boundary, or a segment of
//! an out-of-process backend per round trip), then the device fence and `after_enqueue`.

use smallvec::SmallVec;
use std::{
    sync::MutexGuard,
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use backplane_api::{BufferId, DeviceTensor, LayerKind, NO_BUFFER, ffi::WorkloadHandle};

use super::{
    Held, LoadedNetwork, Scratch, Step, TensorSlot, Unit,
    bind::{InputTensor, OutputTensor},
    device::Transfer,
    error::{ExecuteError, arena_error, backend_error},
};
use crate::{memory::arena, remote::protocol::Hook};

/// Runs one in-process workload: inputs found in `external` (the caller's input buffers, by
/// tensor; empty or short when there are none) are read from there and the others from the
/// arena; the output goes to `out` (the caller's buffer) when given, else to the arena.
pub(super) fn execute_local(
    arena: &mut [u8],
    tensors: &[TensorSlot],
    external: &[Option<&[u8]>],
    step: &Step,
    workload: &WorkloadHandle,
    out: Option<&mut [u8]>,
) -> Result<(), ExecuteError> {
    let inputs: SmallVec<[arena::Source<'_>; 4]> = step
        .inputs
        .iter()
        .map(|&t| match external.get(t).copied().flatten() {
            Some(data) => arena::Source::Caller(data, &tensors[t].info),
            None => arena::Source::Arena(tensors[t].place()),
        })
        .collect();
    let slot = &tensors[step.output];
    let output = match out {
        Some(data) => arena::Sink::Caller(data, &slot.info),
        None => arena::Sink::Arena(slot.place()),
    };
    arena::execute(arena, &inputs, output, workload)
        .ok_or_else(|| arena_error(&step.layer))?
        .map_err(backend_error(&step.label))
}

/// The state one run's units share (the run's half of [`LoadedNetwork::enqueue`]).
struct Run<'r, 'o> {
    /// The arena's bytes.
    arena: &'r mut [u8],
    /// Per tensor: its bytes outside the arena (a caller's input used in place, a constant).
    external_in: &'r [Option<&'r [u8]>],
    /// Per tensor: the caller's output buffer (an index into `outputs`) it is written into.
    external_out: &'r [Option<usize>],
    outputs: &'r mut [OutputTensor<'o>],
    /// While profiling: per unit run so far, its time.
    times: Option<Vec<Duration>>,
    /// Per backend: its `after_enqueue` ran with its last segment.
    hooked: Vec<bool>,
}

impl LoadedNetwork {
    /// Runs the network once. Checks every binding first: nothing runs on a mismatch.
    pub fn enqueue(
        &self,
        inputs: &[InputTensor<'_>],
        outputs: &mut [OutputTensor<'_>],
    ) -> Result<(), ExecuteError> {
        let (bound_in, bound_out) = self.bind(inputs, outputs)?;
        // Without out-of-process backends (which read the shared arena), the caller's buffers
        // are used in place where their alignment allows: workloads read the network's inputs
        // from them and the last layer of an output writes straight into its buffer.
        let direct = self.units.iter().all(|u| matches!(u, Unit::Local(_)));
        let (_serial, mut held) = self.hold_arena()?;
        let arena = held.arena();
        let external_in = self.stage_inputs(inputs, &bound_in, arena, direct);
        let external_out = self.direct_outputs(outputs, &bound_out, direct);
        let pending = self.pending_imports(&external_in);
        let (epoch, times) = self.start_timing();
        let mut run = Run {
            arena: arena.bytes_mut(),
            external_in: &external_in,
            external_out: &external_out,
            outputs: &mut *outputs,
            times,
            hooked: vec![false; self.backends.len()],
        };
        self.with_imports(&pending, &mut Vec::new(), &mut |in_place_of| {
            self.run_units(&mut run, in_place_of)
        })?;
        let Run { times, hooked, .. } = run;
        self.copy_out(
            outputs,
            &bound_out,
            &external_in,
            &external_out,
            arena.bytes(),
        );
        drop(held);
        for (b, done) in self.backends.iter().zip(hooked) {
            if done {
                continue;
            }
            if let Some(r) = b.hook(Hook::AfterEnqueue) {
                r.map_err(backend_error("<network>"))?;
            }
        }
        // The run succeeded: its times count.
        self.record_times(epoch, times);
        Ok(())
    }

    /// The arena a run uses: its own (locked), or one taken from the pool, with the lock that
    /// keeps this network's runs one at a time.
    fn hold_arena(&self) -> Result<(Option<MutexGuard<'_, ()>>, Held<'_>), ExecuteError> {
        Ok(match &self.scratch {
            Scratch::Own(arena) => (
                None,
                Held::Own(arena.lock().unwrap_or_else(|e| e.into_inner())),
            ),
            Scratch::Pooled {
                pool,
                bytes,
                serial,
            } => {
                let serial = serial.lock().unwrap_or_else(|e| e.into_inner());
                let arena = pool.take(*bytes).map_err(|e| {
                    ExecuteError::Binding(format!(
                        "network {}: {bytes} bytes of tensor memory could not be allocated: {e}",
                        self.id
                    ))
                })?;
                (Some(serial), Held::Pooled(pool, Some(arena)))
            }
        })
    }

    /// Runs the units of one run in order (the body of [`LoadedNetwork::enqueue`]), then
    /// waits for every device backend's queued work (the fence). `in_place_of`: the device
    /// buffers that stand for imported network inputs.
    fn run_units(
        &self,
        run: &mut Run<'_, '_>,
        in_place_of: &[(usize, BufferId)],
    ) -> Result<(), ExecuteError> {
        let Run {
            arena,
            external_in,
            external_out,
            outputs,
            times,
            hooked,
        } = run;
        let external_in: &[Option<&[u8]>] = external_in;
        for unit in &self.units {
            let start = times.is_some().then(Instant::now);
            match unit {
                Unit::Local(i) => {
                    let step = &self.steps[*i];
                    let out = external_out[step.output].map(|k| &mut *outputs[k].data);
                    if let Some(t) = step.transfer {
                        // An imported input needs no copy.
                        if !in_place_of.iter().any(|(x, _)| *x == step.output) {
                            self.transfer(step, t, arena, external_in, out)?;
                            self.copies.fetch_add(1, Ordering::Relaxed);
                        }
                    } else if let Some(b) = step.backend.filter(|&b| self.backends[b].device) {
                        let w = step
                            .workload
                            .as_ref()
                            .expect("a device step has a workload");
                        let buffer = |t: usize| {
                            if self.steps[t].kind == LayerKind::Constant {
                                return Ok(NO_BUFFER);
                            }
                            in_place_of
                                .iter()
                                .find(|(x, _)| *x == t)
                                .map(|(_, id)| *id)
                                .or(self.buffers.of[t])
                                .ok_or_else(|| arena_error(&step.layer))
                        };
                        let device = |t: usize| -> Result<DeviceTensor<'_>, ExecuteError> {
                            Ok(DeviceTensor {
                                info: &self.tensors[t].info,
                                buffer: buffer(t)?,
                            })
                        };
                        let ins = step.inputs.iter().map(|&t| device(t)).collect::<Result<
                            SmallVec<[_; 4]>,
                            _,
                        >>(
                        )?;
                        w.execute_device(&ins, &[device(step.output)?])
                            .map_err(backend_error(&step.label))?;
                        // While profiling, each device workload is fenced, so that its time
                        // is its own and not the next copy's (the work is queued otherwise).
                        if times.is_some()
                            && let Some(m) = self.backends[b].device_memory()
                        {
                            m.finish().map_err(backend_error(&step.label))?;
                        }
                    } else {
                        let w = step.workload.as_ref().expect("a local step has a workload");
                        execute_local(arena, &self.tensors, external_in, step, w, out)?;
                    }
                }
                Unit::Remote {
                    backend,
                    segment,
                    steps,
                    after_enqueue,
                } => {
                    let server = self.backends[*backend]
                        .remote()
                        .expect("a remote unit's backend");
                    // No reference into the shared arena is held across the call.
                    server
                        .run(self.id, *segment, *after_enqueue)
                        .map_err(|(position, e)| {
                            let layer = match position.and_then(|p| steps.get(p as usize)) {
                                Some(&s) => self.steps[s].layer.clone(),
                                None => self.segment_name(steps),
                            };
                            ExecuteError::Backend { layer, error: e }
                        })?;
                    hooked[*backend] |= *after_enqueue;
                }
            }
            if let (Some(times), Some(start)) = (times.as_mut(), start) {
                times.push(start.elapsed());
            }
        }
        // The fence: every device backend's queued work is done before the run returns.
        for b in self.backends.iter().filter(|b| b.device) {
            if let Some(m) = b.device_memory() {
                m.finish().map_err(backend_error("<network>"))?;
            }
        }
        Ok(())
    }

    /// Runs a MemCopy across a memory boundary by copying: from host memory (the caller's
    /// buffer or the arena) into a device buffer, from a device buffer into host memory (`out`,
    /// the caller's buffer, when given), or between two device backends through host memory.
    fn transfer(
        &self,
        step: &Step,
        t: Transfer,
        arena: &mut [u8],
        external_in: &[Option<&[u8]>],
        out: Option<&mut [u8]>,
    ) -> Result<(), ExecuteError> {
        let (src, dst) = (step.inputs[0], step.output);
        let memory = |b: usize| {
            self.backends[b]
                .device_memory()
                .ok_or_else(|| arena_error(&step.layer))
        };
        let buffer = |x: usize| self.buffers.of[x].ok_or_else(|| arena_error(&step.layer));
        let host = |x: usize| {
            self.tensors[x]
                .place()
                .range()
                .ok_or_else(|| arena_error(&step.layer))
        };
        let failed = backend_error(&step.label);
        match (t.from, t.to) {
            (None, Some(to)) => {
                let data = match external_in[src] {
                    Some(data) => data,
                    None => arena
                        .get(host(src)?)
                        .ok_or_else(|| arena_error(&step.layer))?,
                };
                memory(to)?
                    .copy_to_device(buffer(dst)?, data)
                    .map_err(failed)
            }
            (Some(from), None) => {
                let data = match out {
                    Some(data) => data,
                    None => arena
                        .get_mut(host(dst)?)
                        .ok_or_else(|| arena_error(&step.layer))?,
                };
                memory(from)?
                    .copy_to_host(buffer(src)?, data)
                    .map_err(failed)
            }
            (Some(from), Some(to)) => {
                let mut staging = vec![0u8; self.tensors[src].bytes];
                memory(from)?
                    .copy_to_host(buffer(src)?, &mut staging)
                    .map_err(backend_error(&step.label))?;
                memory(to)?
                    .copy_to_device(buffer(dst)?, &staging)
                    .map_err(failed)
            }
            (None, None) => Err(arena_error(&step.layer)),
        }
    }
}
