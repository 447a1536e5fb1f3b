//! The thin wrapper over OpenCL (through `opencl3`): the crate's only `unsafe` code.
//!
//! It holds what OpenCL calls unsafe and what every other module may use safely:
//! - [`Gpu::find`] picks a platform and a device (under a process-wide lock), [`Gpu::open`]
//!   makes a context and an in-order command queue on it;
//! - [`Gpu::create_buffer`], [`Gpu::import_host`]: buffers ([`DeviceBuffer`], which knows its
//!   size);
//! - [`Gpu::write`], [`Gpu::read`] (both blocking), [`Gpu::copy`] (queued) and
//!   [`Gpu::finish`];
//! - [`Gpu::build_program`] and [`Gpu::launch`]: kernels run over a 1-D range with buffer,
//!   integer and float arguments.
//!
//! [`Gpu::launch`] is an `unsafe fn`: it is sound only when every index a kernel computes
//! from its integer arguments lies inside the buffers it is given, which nothing here can
//! check. Its one caller (`workloads::GpuWorkload::execute`) checks each buffer's size
//! against the tensors the workload was created for before every launch, and the kernels
//! (`kernels/*.cl`) index only inside those tensors. Transfers check their byte ranges here.

use std::{
    ffi::c_void,
    mem::ManuallyDrop,
    ptr,
    sync::{Mutex, PoisonError},
};

use backplane_api::HostRegion;
use opencl3::{
    command_queue::CommandQueue,
    context::Context,
    device::{CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_GPU, Device},
    error_codes::{
        CL_INVALID_BUFFER_SIZE, CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_HOST_MEMORY,
        CL_OUT_OF_RESOURCES, CL_PLATFORM_NOT_FOUND_KHR, ClError, DLOPEN_RUNTIME_LOAD_FAILED,
    },
    kernel::Kernel,
    memory::{Buffer, CL_MEM_READ_ONLY, CL_MEM_READ_WRITE, CL_MEM_USE_HOST_PTR, ClMem},
    platform::get_platforms,
    program::Program,
    types::{CL_BLOCKING, cl_float, cl_int, cl_mem},
};

/// An OpenCL error as text: the code's name and number (`CL_OUT_OF_RESOURCES (-5)`).
pub(crate) fn describe(e: &ClError) -> String {
    format!("{e} ({})", e.0)
}

/// Whether an OpenCL error means the device ran out of memory.
pub(crate) fn is_out_of_memory(e: &ClError) -> bool {
    matches!(
        e.0,
        CL_MEM_OBJECT_ALLOCATION_FAILURE
            | CL_OUT_OF_RESOURCES
            | CL_OUT_OF_HOST_MEMORY
            | CL_INVALID_BUFFER_SIZE
    )
}

/// A buffer in the device's memory, with its size.
#[derive(Debug)]
pub(crate) struct DeviceBuffer {
    mem: Buffer<u8>,
    bytes: usize,
    imported: bool,
}

impl DeviceBuffer {
    /// Its size in bytes (what was asked for: a request of 0 bytes holds one byte).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// `true` for a buffer over a caller's host memory ([`Gpu::import_host`]).
    pub(crate) fn is_imported(&self) -> bool {
        self.imported
    }

    /// A second handle on the same memory object, for opencl3's calls that take
    /// `&mut Buffer` to write into it. It must never be released, hence `ManuallyDrop`.
    fn alias(&self) -> ManuallyDrop<Buffer<u8>> {
        ManuallyDrop::new(Buffer::new(self.mem.get()))
    }
}

/// One kernel argument.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    /// A `__global` pointer.
    Buffer(&'a DeviceBuffer),
    /// An `int`.
    Int(i32),
    /// A `float`.
    Float(f32),
}

/// A kernel of the backend's program. Setting arguments and enqueueing happen under its lock:
/// an OpenCL kernel object holds one set of arguments.
#[derive(Debug)]
pub(crate) struct GpuKernel {
    kernel: Mutex<Kernel>,
    name: String,
}

/// A device [`Gpu::find`] chose, not opened yet.
#[derive(Debug)]
pub(crate) struct Found {
    platform: String,
    device: Device,
    name: String,
}

impl Found {
    /// The platform's name.
    pub(crate) fn platform(&self) -> &str {
        &self.platform
    }

    /// The device's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

/// An OpenCL device opened for computing: its context and one in-order command queue.
///
/// Every call here may come from several threads at once (OpenCL's calls are thread-safe,
/// except setting a kernel's arguments, which [`Gpu::launch`] does under the kernel's lock).
#[derive(Debug)]
pub(crate) struct Gpu {
    platform: String,
    name: String,
    max_alloc: u64,
    context: Context,
    queue: CommandQueue,
}

impl Gpu {
    /// Finds a device: the first whose name contains `selector` when given, else the first
    /// GPU, else the first device of any type, over every platform in order. Nothing is
    /// opened yet ([`Gpu::open`] does that).
    ///
    /// # Errors
    /// A sentence naming what is missing: the library, a platform, a device.
    pub(crate) fn find(selector: Option<&str>) -> Result<Found, String> {
        // One discovery at a time in the process: pocl's first platform and device queries
        // race with each other (seen: two threads each find no device, or crash).
        static DISCOVERY: Mutex<()> = Mutex::new(());
        let _one_at_a_time = DISCOVERY.lock().unwrap_or_else(PoisonError::into_inner);
        let platforms = match get_platforms() {
            Ok(p) if !p.is_empty() => p,
            Ok(_) => return Err(no_platform("the OpenCL loader lists none")),
            Err(e) if e.0 == DLOPEN_RUNTIME_LOAD_FAILED => {
                return Err(no_platform("libOpenCL.so.1 could not be loaded"));
            }
            Err(e) if e.0 == CL_PLATFORM_NOT_FOUND_KHR => {
                return Err(no_platform(
                    "the OpenCL loader found no installed driver (ICD)",
                ));
            }
            Err(e) => return Err(no_platform(&describe(&e))),
        };
        // (platform name, device, device name, is a GPU), in platform then device order.
        let mut candidates = Vec::new();
        let mut platform_names = Vec::new();
        for platform in &platforms {
            let pname = platform.name().unwrap_or_else(|e| describe(&e));
            let ids = platform.get_devices(CL_DEVICE_TYPE_ALL).unwrap_or_default();
            for id in ids {
                let device = Device::new(id);
                let name = device.name().unwrap_or_else(|e| describe(&e));
                let gpu = device.dev_type().is_ok_and(|t| t & CL_DEVICE_TYPE_GPU != 0);
                candidates.push((pname.clone(), device, name, gpu));
            }
            platform_names.push(pname);
        }
        if candidates.is_empty() {
            return Err(format!(
                "no OpenCL device on platform {}",
                platform_names.join(", ")
            ));
        }
        let chosen = match selector {
            Some(s) => candidates.iter().find(|c| c.2.contains(s)).ok_or_else(|| {
                let names: Vec<&str> = candidates.iter().map(|c| c.2.as_str()).collect();
                format!(
                    "no OpenCL device whose name contains {s:?} (devices: {})",
                    names.join(", ")
                )
            })?,
            None => candidates.iter().find(|c| c.3).unwrap_or(&candidates[0]),
        };
        Ok(Found {
            platform: chosen.0.clone(),
            device: chosen.1,
            name: chosen.2.clone(),
        })
    }

    /// Opens the device `found`: a context and an in-order command queue on it.
    ///
    /// # Errors
    /// A sentence naming the device and what failed.
    pub(crate) fn open(found: Found) -> Result<Gpu, String> {
        let Found {
            platform,
            device,
            name,
        } = found;
        let fail =
            |what: &str, e: ClError| format!("OpenCL device {name}: {what}: {}", describe(&e));
        let context = Context::from_device(&device).map_err(|e| fail("no context", e))?;
        // Properties 0: an in-order queue (the OpenCL 1.2 call, which every driver has).
        let queue =
            CommandQueue::create_default(&context, 0).map_err(|e| fail("no command queue", e))?;
        let max_alloc = device.max_mem_alloc_size().unwrap_or(u64::MAX);
        Ok(Gpu {
            platform,
            name,
            max_alloc,
            context,
            queue,
        })
    }

    /// The platform's name.
    pub(crate) fn platform(&self) -> &str {
        &self.platform
    }

    /// The device's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The largest buffer the device allocates (`CL_DEVICE_MAX_MEM_ALLOC_SIZE`).
    pub(crate) fn max_alloc(&self) -> u64 {
        self.max_alloc
    }

    /// A read-write buffer of `bytes` bytes (uninitialised).
    pub(crate) fn create_buffer(&self, bytes: usize) -> Result<DeviceBuffer, ClError> {
        // SAFETY: no host pointer is given (null with flags that do not read one), and the
        // context is alive for the call.
        let mem = unsafe {
            Buffer::<u8>::create(
                &self.context,
                CL_MEM_READ_WRITE,
                bytes.max(1),
                ptr::null_mut(),
            )
        }?;
        Ok(DeviceBuffer {
            mem,
            bytes,
            imported: false,
        })
    }

    /// A read-only buffer that uses the host memory of `region` (`CL_MEM_USE_HOST_PTR`).
    /// `region` must stay valid and unchanged until the buffer is dropped and the work that
    /// reads it has finished; the backend's caller (the host) promises that
    /// ([`HostRegion`]'s contract).
    pub(crate) fn import_host(&self, region: HostRegion) -> Result<DeviceBuffer, ClError> {
        // SAFETY: `region` is valid for reading `len` bytes until the host releases the
        // buffer (HostRegion's contract), and the memory manager waits for the queue before it
        // drops an imported buffer. CL_MEM_READ_ONLY: kernels never write through it, so the
        // mutable pointer the API takes is never written to.
        let mem = unsafe {
            Buffer::<u8>::create(
                &self.context,
                CL_MEM_USE_HOST_PTR | CL_MEM_READ_ONLY,
                region.len(),
                region.as_ptr().cast_mut().cast::<c_void>(),
            )
        }?;
        Ok(DeviceBuffer {
            mem,
            bytes: region.len(),
            imported: true,
        })
    }

    /// Writes `data` at `offset` into `buffer` and waits until it is there.
    pub(crate) fn write(
        &self,
        buffer: &DeviceBuffer,
        offset: usize,
        data: &[u8],
    ) -> Result<(), String> {
        check_range("write", buffer, offset, data.len())?;
        if buffer.imported {
            return Err("write into an imported (read-only) buffer".to_owned());
        }
        if data.is_empty() {
            return Ok(());
        }
        let mut alias = buffer.alias();
        // SAFETY: the range is inside the buffer (checked above); the write is blocking, so
        // `data` is only read during the call.
        unsafe {
            self.queue
                .enqueue_write_buffer(&mut alias, CL_BLOCKING, offset, data, &[])
        }
        .map(drop)
        .map_err(|e| describe(&e))
    }

    /// Reads the first `data.len()` bytes of `buffer` into `data`, after the work queued
    /// before, and waits until they are there.
    pub(crate) fn read(&self, buffer: &DeviceBuffer, data: &mut [u8]) -> Result<(), String> {
        check_range("read", buffer, 0, data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        // SAFETY: the range is inside the buffer (checked above); the read is blocking, so
        // `data` is only written during the call.
        unsafe {
            self.queue
                .enqueue_read_buffer(&buffer.mem, CL_BLOCKING, 0, data, &[])
        }
        .map(drop)
        .map_err(|e| describe(&e))
    }

    /// Queues a copy of the first `bytes` bytes of `from` to the start of `to`.
    pub(crate) fn copy(
        &self,
        from: &DeviceBuffer,
        to: &DeviceBuffer,
        bytes: usize,
    ) -> Result<(), String> {
        check_range("copy from", from, 0, bytes)?;
        check_range("copy to", to, 0, bytes)?;
        if to.imported {
            return Err("copy into an imported (read-only) buffer".to_owned());
        }
        if bytes == 0 || from.mem.get() == to.mem.get() {
            return Ok(());
        }
        let mut alias = to.alias();
        // SAFETY: both ranges lie inside their buffers (checked above) and the buffers are
        // distinct memory objects, so the regions do not overlap.
        unsafe {
            self.queue
                .enqueue_copy_buffer(&from.mem, &mut alias, 0, 0, bytes, &[])
        }
        .map(drop)
        .map_err(|e| describe(&e))
    }

    /// Waits until every command queued so far has finished.
    pub(crate) fn finish(&self) -> Result<(), String> {
        self.queue.finish().map_err(|e| describe(&e))
    }

    /// Builds a program from OpenCL C `sources` for this device.
    ///
    /// # Errors
    /// The compiler's log when the build fails.
    pub(crate) fn build_program(&self, sources: &[&str]) -> Result<Program, String> {
        // One string: opencl3 0.12's `create_and_build_from_sources` hands OpenCL the `&str`
        // fat pointers as if they were C string pointers, which reads garbage past the first.
        let source = sources.join("\n");
        Program::create_and_build_from_source(&self.context, &source, "")
    }

    /// The kernel `name` of `program` (a program built by this device's
    /// [`build_program`](Self::build_program)).
    pub(crate) fn kernel(&self, program: &Program, name: &str) -> Result<GpuKernel, String> {
        let kernel = Kernel::create(program, name)
            .map_err(|e| format!("kernel {name}: {}", describe(&e)))?;
        Ok(GpuKernel {
            kernel: Mutex::new(kernel),
            name: name.to_owned(),
        })
    }

    /// Queues `kernel` over `global` work items (one dimension; nothing for 0) with `args`.
    ///
    /// # Safety
    /// Every index the kernel computes for `global` work items from the integer arguments in
    /// `args` lies inside the buffer arguments it reads and writes (see the module
    /// documentation): OpenCL does not check it, and an index past a buffer reads or writes
    /// device (for pocl, host) memory that is not the buffer's.
    pub(crate) unsafe fn launch(
        &self,
        kernel: &GpuKernel,
        args: &[Arg<'_>],
        global: usize,
    ) -> Result<(), String> {
        let fail = |e: ClError| format!("kernel {}: {}", kernel.name, describe(&e));
        // Only arguments are set under the lock; a panic cannot leave it inconsistent.
        let k = kernel.kernel.lock().unwrap_or_else(PoisonError::into_inner);
        for (i, arg) in args.iter().enumerate() {
            let i = i as u32;
            // SAFETY: each value has the size and type of the kernel parameter it is set for
            // (a `cl_mem` for a `__global` pointer, `cl_int` for `int`, `cl_float` for
            // `float`; a mismatch is an OpenCL error, not undefined behaviour), and the
            // memory objects outlive the enqueued command (OpenCL retains them).
            unsafe {
                match *arg {
                    Arg::Buffer(b) => k.set_arg(i, &(b.mem.get() as cl_mem)),
                    Arg::Int(v) => k.set_arg(i, &(v as cl_int)),
                    Arg::Float(v) => k.set_arg(i, &(v as cl_float)),
                }
            }
            .map_err(fail)?;
        }
        if global == 0 {
            return Ok(());
        }
        let sizes = [global];
        // SAFETY: one dimension with its global size in `sizes` (alive for the call), no
        // offset and no local size (the driver picks one); the kernel reads and writes inside
        // its buffers, as this function's caller promises.
        unsafe {
            self.queue.enqueue_nd_range_kernel(
                k.get(),
                1,
                ptr::null(),
                sizes.as_ptr(),
                ptr::null(),
                &[],
            )
        }
        .map(drop)
        .map_err(fail)
    }
}

/// `no OpenCL platform: <why>`.
fn no_platform(why: &str) -> String {
    format!("no OpenCL platform: {why}")
}

/// Checks that `offset..offset + len` lies in `buffer`.
fn check_range(what: &str, buffer: &DeviceBuffer, offset: usize, len: usize) -> Result<(), String> {
    match offset.checked_add(len) {
        Some(end) if end <= buffer.bytes => Ok(()),
        _ => Err(format!(
            "{what}: bytes {offset}..{} do not fit a buffer of {} bytes",
            offset as u128 + len as u128,
            buffer.bytes
        )),
    }
}
