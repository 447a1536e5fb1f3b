//! The workloads: every GpuCl workload is a [`GpuWorkload`], a short list of [`Step`]s
//! (kernel launches and buffer copies) made once, when the workload is created, by the file
//! of its operation:
//!
//! - `elementwise.rs`: Activation, ElementwiseUnary, ElementwiseBinary (numpy broadcasting)
//!   and BatchNormalization (folded into a per-channel affine on the host);
//! - `convolution.rs`: Convolution2d and DepthwiseConvolution2d, alone or fused (`fused_op.rs`);
//! - `matmul.rs`: FullyConnected and BatchMatMul;
//! - `pooling.rs`: Pooling2d;
//! - `reduce.rs`: Mean, Reduce, Softmax and LayerNormalization;
//! - `movement.rs`: Reshape, Flatten, MemCopy (device copies), Transpose and Concat.
//!
//! Constant inputs (weights, biases) are uploaded into the workload's own buffers when it is
//! created ([`Builder::input`]); the other inputs and the outputs are the device tensors
//! `execute_device` hands over. A constant slot's device tensor, when given, is not looked at:
//! its buffer is `NO_BUFFER` (0) or, from an older host, a buffer that is ignored. Before every launch the workload checks each buffer against
//! the tensor it was created for (shape, type, size), so a kernel never indexes past a buffer.
//!
//! This folder uses `cl.rs` and `device.rs`, never the backend or the factory.

pub(crate) mod convolution;
pub(crate) mod elementwise;
pub(crate) mod matmul;
pub(crate) mod movement;
pub(crate) mod pooling;
pub(crate) mod reduce;

#[cfg(test)]
pub(crate) mod test_support;

use std::{fmt::Display, sync::Arc};

use backplane_api::{
    BackendError, BackendResult, DeviceTensor, TensorInfo, TensorView, TensorViewMut, Workload,
    WorkloadDesc,
};

use crate::{
    cl::{Arg, DeviceBuffer, GpuKernel},
    device::{Device, NO_BUFFER},
};

/// The highest rank of the kernels that index through dimension tables (`MAX_RANK` in the
/// OpenCL sources).
pub(crate) const MAX_RANK: usize = 6;

/// An invalid-argument error about the layer `desc` describes: `GpuCl: layer <name>: <message>`.
pub(crate) fn invalid_layer(desc: &WorkloadDesc<'_>, message: impl Display) -> BackendError {
    BackendError::invalid_argument(format!("GpuCl: layer {}: {message}", desc.name))
}

/// Where a kernel argument's buffer comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Src {
    /// The device tensor of input slot `n`.
    Input(usize),
    /// The device tensor of output slot `n`.
    Output(usize),
    /// The workload's own buffer `n` (a constant uploaded at creation, or parameters).
    Own(usize),
}

/// A kernel argument, as the workload stores it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum KArg {
    /// A buffer.
    Buf(Src),
    /// An `int`.
    Int(i32),
    /// A `float`.
    Float(f32),
}

/// One command of a workload.
#[derive(Debug)]
pub(crate) enum Step {
    /// A kernel over `global` work items.
    Kernel {
        kernel: GpuKernel,
        args: Vec<KArg>,
        global: usize,
    },
    /// A copy of `bytes` bytes between two buffers.
    Copy { from: Src, to: Src, bytes: usize },
}

/// An element count or index as a kernel's `int`.
pub(crate) fn int(what: &str, v: usize) -> Result<i32, String> {
    i32::try_from(v).map_err(|_| format!("{what} {v} exceeds the kernels' 32-bit indices"))
}

/// `shape`'s element count as an `int`.
pub(crate) fn count(t: &TensorInfo) -> Result<i32, String> {
    let n = t
        .num_elements()
        .ok_or_else(|| format!("{t} has too many elements"))?;
    int("element count", n)
}

/// Row-major strides of `shape`.
pub(crate) fn strides(shape: &[u32]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1] as usize;
    }
    s
}

/// `values` (one per dimension, outermost first) right-aligned in `MAX_RANK` entries, `fill`
/// in front.
pub(crate) fn padded(values: &[usize], fill: usize) -> Result<[usize; MAX_RANK], String> {
    if values.len() > MAX_RANK {
        return Err(format!(
            "rank {} exceeds the kernels' {MAX_RANK}",
            values.len()
        ));
    }
    let mut out = [fill; MAX_RANK];
    out[MAX_RANK - values.len()..].copy_from_slice(values);
    Ok(out)
}

/// The strides with which a tensor of `shape` is read at the indices of `out` (numpy
/// broadcasting: 0 along a dimension of 1 that `out` broadcasts), right-aligned to `out`.
pub(crate) fn broadcast_strides(shape: &[u32], out: &[u32]) -> Vec<usize> {
    let own = strides(shape);
    let lead = out.len() - shape.len();
    (0..out.len())
        .map(|d| match d.checked_sub(lead) {
            Some(k) if shape[k] != 1 || out[d] == 1 => own[k],
            _ => 0,
        })
        .collect()
}

/// Makes a [`GpuWorkload`]: uploads constants, keeps parameter buffers and steps.
pub(crate) struct Builder<'d> {
    device: &'d Arc<Device>,
    desc: &'d WorkloadDesc<'d>,
    own: Vec<Arc<DeviceBuffer>>,
    /// For each input slot, the own buffer its constant was uploaded to.
    uploaded: Vec<Option<usize>>,
    steps: Vec<Step>,
}

impl<'d> Builder<'d> {
    /// A builder for the workload of `desc` on `device`.
    pub(crate) fn new(device: &'d Arc<Device>, desc: &'d WorkloadDesc<'d>) -> Self {
        Self {
            device,
            desc,
            own: Vec::new(),
            uploaded: vec![None; desc.inputs.len()],
            steps: Vec::new(),
        }
    }

    /// The layer's description.
    pub(crate) fn desc(&self) -> &WorkloadDesc<'d> {
        self.desc
    }

    /// A new own buffer holding `bytes`.
    fn upload(&mut self, bytes: &[u8]) -> BackendResult<Src> {
        let gpu = self.device.gpu();
        let buffer = gpu.create_buffer(bytes.len()).map_err(|e| {
            let code = if crate::cl::is_out_of_memory(&e) {
                backplane_api::ErrorCode::OutOfMemory
            } else {
                backplane_api::ErrorCode::Failed
            };
            BackendError::new(
                code,
                format!(
                    "GpuCl: layer {}: cannot allocate {} bytes: {}",
                    self.desc.name,
                    bytes.len(),
                    crate::cl::describe(&e)
                ),
            )
        })?;
        gpu.write(&buffer, 0, bytes)
            .map_err(|e| invalid_layer(self.desc, e))?;
        self.own.push(Arc::new(buffer));
        Ok(Src::Own(self.own.len() - 1))
    }

    /// A new own buffer holding `values`.
    pub(crate) fn upload_f32(&mut self, values: &[f32]) -> BackendResult<Src> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.upload(&bytes)
    }

    /// A new own buffer holding `values` (kernel parameters).
    pub(crate) fn upload_i32(&mut self, values: &[usize]) -> BackendResult<Src> {
        let mut bytes = Vec::with_capacity(values.len() * 4);
        for &v in values {
            let v = int("parameter", v).map_err(|e| invalid_layer(self.desc, e))?;
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        self.upload(&bytes)
    }

    /// Input `slot`: its constant, uploaded once into an own buffer, or the device tensor
    /// given at execution.
    pub(crate) fn input(&mut self, slot: usize) -> BackendResult<Src> {
        if let Some(own) = self.uploaded[slot] {
            return Ok(Src::Own(own));
        }
        let Some(view) = self.desc.constant(slot) else {
            return Ok(Src::Input(slot));
        };
        if Some(view.data.len()) != view.info.num_bytes() {
            return Err(invalid_layer(
                self.desc,
                format_args!(
                    "constant input {slot} holds {} bytes for {}",
                    view.data.len(),
                    view.info
                ),
            ));
        }
        let src = self.upload(view.data.as_slice())?;
        if let Src::Own(k) = src {
            self.uploaded[slot] = Some(k);
        }
        Ok(src)
    }

    /// A step running kernel `name` over `global` work items.
    pub(crate) fn kernel(
        &mut self,
        name: &str,
        args: Vec<KArg>,
        global: usize,
    ) -> BackendResult<()> {
        let kernel = self.device.kernel(name)?;
        self.steps.push(Step::Kernel {
            kernel,
            args,
            global,
        });
        Ok(())
    }

    /// A step copying `bytes` bytes.
    pub(crate) fn copy(&mut self, from: Src, to: Src, bytes: usize) {
        self.steps.push(Step::Copy { from, to, bytes });
    }

    /// The workload.
    pub(crate) fn build(self) -> Box<dyn Workload> {
        let desc = self.desc;
        Box::new(GpuWorkload {
            name: desc.name.to_string(),
            device: Arc::clone(self.device),
            inputs: desc.inputs.to_vec(),
            constant: (0..desc.inputs.len())
                .map(|s| desc.constant(s).is_some())
                .collect(),
            outputs: desc.outputs.to_vec(),
            own: self.own,
            steps: self.steps,
        })
    }
}

/// The workload of one layer (see the module documentation).
#[derive(Debug)]
pub(crate) struct GpuWorkload {
    name: String,
    device: Arc<Device>,
    inputs: Vec<TensorInfo>,
    /// Which input slots are constant (given at creation).
    constant: Vec<bool>,
    outputs: Vec<TensorInfo>,
    own: Vec<Arc<DeviceBuffer>>,
    steps: Vec<Step>,
}

impl GpuWorkload {
    fn invalid(&self, message: impl Display) -> BackendError {
        BackendError::invalid_argument(format!("GpuCl: layer {}: {message}", self.name))
    }

    /// The buffer of `tensor`, checked against `expected` (the tensor the workload was made
    /// for).
    fn bind(
        &self,
        what: &str,
        tensor: &DeviceTensor<'_>,
        expected: &TensorInfo,
    ) -> BackendResult<Arc<DeviceBuffer>> {
        if tensor.info.shape != expected.shape || tensor.info.data_type != expected.data_type {
            return Err(self.invalid(format_args!(
                "{what} is {}, the workload was created for {expected}",
                tensor.info
            )));
        }
        if tensor.buffer == NO_BUFFER {
            return Err(self.invalid(format_args!(
                "{what} has no buffer (NO_BUFFER), which only a constant input may have"
            )));
        }
        let buffer = self.device.buffer(tensor.buffer)?;
        let needed = expected.num_bytes().unwrap_or(usize::MAX);
        if buffer.bytes() < needed {
            return Err(self.invalid(format_args!(
                "{what} needs {needed} bytes, buffer {} holds {}",
                tensor.buffer,
                buffer.bytes()
            )));
        }
        Ok(buffer)
    }

    /// The buffers of the input slots (`None` for constants, which the workload holds).
    /// `inputs` has one tensor per slot, or one per non-constant slot. The buffer of a constant
    /// slot is never looked up: it is [`NO_BUFFER`] (Backend API 1.3's hosts) or any id (older
    /// hosts gave the constant's copy in device memory), and the workload uses its own copy,
    /// uploaded at creation. A non-constant slot needs a buffer of this backend instance.
    fn bind_inputs(
        &self,
        inputs: &[DeviceTensor<'_>],
    ) -> BackendResult<Vec<Option<Arc<DeviceBuffer>>>> {
        let live: Vec<usize> = (0..self.inputs.len())
            .filter(|&s| !self.constant[s])
            .collect();
        let slots: Vec<(usize, &DeviceTensor<'_>)> = if inputs.len() == self.inputs.len() {
            inputs
                .iter()
                .enumerate()
                .filter(|(s, _)| !self.constant[*s])
                .collect()
        } else if inputs.len() == live.len() {
            live.iter().copied().zip(inputs).collect()
        } else {
            return Err(self.invalid(format_args!(
                "{} inputs, expected {} (or the {} that are not constant)",
                inputs.len(),
                self.inputs.len(),
                live.len()
            )));
        };
        let mut bound = vec![None; self.inputs.len()];
        for (s, t) in slots {
            bound[s] = Some(self.bind(&format!("input {s}"), t, &self.inputs[s])?);
        }
        Ok(bound)
    }
}

impl Workload for GpuWorkload {
    fn execute(
        &self,
        _inputs: &[TensorView<'_>],
        _outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        Err(BackendError::unsupported(format!(
            "GpuCl: layer {} computes in device memory: the host runs it through execute_device \
             (Backend API 1.3, capability DeviceMemory)",
            self.name
        )))
    }

    fn execute_device(
        &self,
        inputs: &[DeviceTensor<'_>],
        outputs: &[DeviceTensor<'_>],
    ) -> BackendResult<()> {
        let ins = self.bind_inputs(inputs)?;
        if outputs.len() != self.outputs.len() {
            return Err(self.invalid(format_args!(
                "{} outputs, expected {}",
                outputs.len(),
                self.outputs.len()
            )));
        }
        let outs = outputs
            .iter()
            .zip(&self.outputs)
            .enumerate()
            .map(|(s, (t, e))| {
                let b = self.bind(&format!("output {s}"), t, e)?;
                if b.is_imported() {
                    return Err(
                        self.invalid(format_args!("output {s} is an imported (read-only) buffer"))
                    );
                }
                Ok(b)
            })
            .collect::<BackendResult<Vec<_>>>()?;
        let resolve = |src: Src| -> BackendResult<&DeviceBuffer> {
            match src {
                Src::Input(s) => ins.get(s).and_then(Option::as_deref),
                Src::Output(s) => outs.get(s).map(|b| &**b),
                Src::Own(k) => self.own.get(k).map(|b| &**b),
            }
            .ok_or_else(|| self.invalid(format_args!("no buffer for {src:?}")))
        };
        let gpu = self.device.gpu();
        let failed = |e: String| BackendError::failed(format!("GpuCl: layer {}: {e}", self.name));
        for step in &self.steps {
            match step {
                Step::Kernel {
                    kernel,
                    args,
                    global,
                } => {
                    let args = args
                        .iter()
                        .map(|a| {
                            Ok(match *a {
                                KArg::Buf(src) => Arg::Buffer(resolve(src)?),
                                KArg::Int(v) => Arg::Int(v),
                                KArg::Float(v) => Arg::Float(v),
                            })
                        })
                        .collect::<BackendResult<Vec<_>>>()?;
                    // SAFETY: every buffer in `args` was bound above with its size checked
                    // against the tensor of that slot (`bind`, `bind_inputs`; the workload's
                    // own buffers were made for their tensors), and the step's integer
                    // arguments and `global` were computed at creation from those same
                    // tensors' shapes, by the plan the kernel was written for: the kernel
                    // indexes inside its buffers.
                    #[allow(unsafe_code, reason = "the one call of the unsafe `Gpu::launch`")]
                    unsafe { gpu.launch(kernel, &args, *global) }.map_err(failed)?;
                }
                Step::Copy { from, to, bytes } => {
                    gpu.copy(resolve(*from)?, resolve(*to)?, *bytes)
                        .map_err(failed)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use backplane_api::{
        Backend, DeviceTensor, ErrorCode, FullyConnectedDescriptor, LayerDescriptor, ROption,
        RSlice, RStr, WorkloadDesc,
    };

    use super::NO_BUFFER;
    use crate::workloads::test_support::{backend, f32t};

    /// Only a constant slot may come without a buffer; a constant slot's buffer is never
    /// looked up, whatever it is.
    #[test]
    fn no_buffer_is_for_constant_slots_only() {
        let b = backend();
        let memory = b.create_memory_manager().unwrap().unwrap();
        let factory = b
            .create_workload_factory(Some(Arc::clone(&memory)))
            .unwrap();
        let layer = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
            bias_enabled: false,
            transpose_weights: false,
        });
        let infos = [f32t(&[1, 2]), f32t(&[2, 3]).constant()];
        let out_info = [f32t(&[1, 3])];
        let weights: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let constants = [ROption::RNone, ROption::RSome(RSlice::from_slice(&weights))];
        let desc = WorkloadDesc {
            name: RStr::from_str("fc"),
            layer: &layer,
            inputs: RSlice::from_slice(&infos),
            outputs: RSlice::from_slice(&out_info),
            constants: RSlice::from_slice(&constants),
        };
        let w = factory.create_workload(&desc).unwrap();
        let x = memory.allocate_buffer(8).unwrap();
        let y = memory.allocate_buffer(12).unwrap();
        assert!(x != NO_BUFFER && y != NO_BUFFER);
        memory
            .copy_to_device(x, &[1.0f32, 1.0].map(f32::to_le_bytes).concat())
            .unwrap();
        let t = |i: usize, buffer| DeviceTensor {
            info: &infos[i],
            buffer,
        };
        let out = |buffer| DeviceTensor {
            info: &out_info[0],
            buffer,
        };
        // NO_BUFFER where a buffer is needed: every slot given, only the live ones, an output.
        for (inputs, outputs) in [
            (vec![t(0, NO_BUFFER), t(1, NO_BUFFER)], [out(y)]),
            (vec![t(0, NO_BUFFER)], [out(y)]),
            (vec![t(0, x), t(1, NO_BUFFER)], [out(NO_BUFFER)]),
        ] {
            let e = w.execute_device(&inputs, &outputs).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidArgument, "{e}");
            assert!(
                e.message.contains("has no buffer (NO_BUFFER)"),
                "{}",
                e.message
            );
        }
        // The constant slot: NO_BUFFER, a real buffer (of the wrong size, even) or an id nobody
        // gave; it is never looked up.
        for constant in [NO_BUFFER, x, u64::MAX] {
            w.execute_device(&[t(0, x), t(1, constant)], &[out(y)])
                .unwrap();
            memory.finish().unwrap();
            let mut back = [0u8; 12];
            memory.copy_to_host(y, &mut back).unwrap();
            assert_eq!(back, [5.0f32, 7.0, 9.0].map(f32::to_le_bytes).concat()[..]);
        }
        memory.release().unwrap();
    }
}
