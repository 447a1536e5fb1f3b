//! What the host and an out-of-process server say to each other: one request, one answer,
//! each a frame of a 4-byte little-endian length and a `postcard` body. A tensor arena's
//! descriptor travels beside its request as `SCM_RIGHTS`.

use std::{
    io::{self, IoSlice, IoSliceMut, Read, Write},
    mem::MaybeUninit,
    os::{fd::OwnedFd, unix::net::UnixStream},
};

use backplane_api::{
    ApiVersion, BackendOptions, Capabilities, ErrorCode, LayerDescriptor, OptimizationViews,
    SubgraphLayer, SubgraphTensor, SubgraphView, Support, TensorInfo,
    ffi::{BackendContextHandle, CallError, MemoryManagerHandle},
};
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::report::ReasonCode;

/// The largest request frame the server accepts (constant tensors travel in
/// `CreateWorkload`).
pub const MAX_FRAME: usize = 1 << 31;

/// The largest answer frame the host accepts. Answers carry ids, support verdicts, a
/// subgraph's substitutions (descriptors: a backend's `PreCompiled` payload is the largest
/// part) and errors, never tensors: a server that announces more is broken or hostile.
pub const MAX_ANSWER: usize = 64 << 20;

/// How much of a frame is allocated ahead of the bytes that arrive: a peer that announces a
/// large frame and sends little makes the reader hold what it sent, not what it announced.
const READ_AHEAD: usize = 1 << 20;

/// What a reader accepts of one frame.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest body.
    pub max: usize,
    /// When the whole frame must have arrived (`None`: wait as long as it takes). The same
    /// instant bounds every read of the frame, so a peer trickling bytes cannot stretch it.
    pub deadline: Option<std::time::Instant>,
}

/// A context hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Hook {
    /// `before_load_network`.
    BeforeLoad,
    /// `after_load_network`.
    AfterLoad,
    /// `before_unload_network`.
    BeforeUnload,
    /// `after_unload_network`.
    AfterUnload,
    /// `after_enqueue`.
    AfterEnqueue,
}

impl Hook {
    /// The method's name, as in-process errors give it.
    pub fn method(self) -> &'static str {
        match self {
            Hook::BeforeLoad => "before_load_network",
            Hook::AfterLoad => "after_load_network",
            Hook::BeforeUnload => "before_unload_network",
            Hook::AfterUnload => "after_unload_network",
            Hook::AfterEnqueue => "after_enqueue",
        }
    }

    /// Calls this hook of `context` for `network`.
    ///
    /// # Errors
    /// The hook's.
    pub fn call(self, context: &BackendContextHandle, network: u64) -> Result<(), CallError> {
        match self {
            Hook::BeforeLoad => context.before_load_network(network),
            Hook::AfterLoad => context.after_load_network(network),
            Hook::BeforeUnload => context.before_unload_network(network),
            Hook::AfterUnload => context.after_unload_network(network),
            Hook::AfterEnqueue => context.after_enqueue(network),
        }
    }
}

/// A memory-manager call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemoryOp {
    /// `acquire`.
    Acquire,
    /// `release`.
    Release,
    /// `allocated_bytes`.
    AllocatedBytes,
}

impl MemoryOp {
    /// The method's name.
    pub fn method(self) -> &'static str {
        match self {
            MemoryOp::Acquire => "acquire",
            MemoryOp::Release => "release",
            MemoryOp::AllocatedBytes => "allocated_bytes",
        }
    }

    /// Makes this call on `memory`: the bytes it holds for `AllocatedBytes`, else 0.
    ///
    /// # Errors
    /// The call's.
    pub fn call(self, memory: &MemoryManagerHandle) -> Result<u64, CallError> {
        match self {
            MemoryOp::Acquire => memory.acquire().map(|()| 0),
            MemoryOp::Release => memory.release().map(|()| 0),
            MemoryOp::AllocatedBytes => memory.allocated_bytes(),
        }
    }
}

/// A tensor of a subgraph, with its constant value owned.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireTensor {
    /// Its id in the subgraph.
    pub id: u32,
    /// Shape and type.
    pub info: TensorInfo,
    /// Its value, when constant.
    pub value: Option<Vec<u8>>,
}

/// A [`SubgraphView`] that owns its constants.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireSubgraph {
    /// The layers.
    pub layers: Vec<SubgraphLayer>,
    /// The tensors.
    pub tensors: Vec<WireTensor>,
    /// Tensors read from outside.
    pub inputs: Vec<u32>,
    /// Tensors read outside.
    pub outputs: Vec<u32>,
}

impl WireSubgraph {
    /// Copies `view`.
    pub fn from_view(view: &SubgraphView<'_>) -> Self {
        Self {
            layers: view.layers.to_vec(),
            tensors: view
                .tensors
                .iter()
                .map(|t| WireTensor {
                    id: t.id,
                    info: t.info.clone(),
                    value: t.value.into_option().map(|v| v.to_vec()),
                })
                .collect(),
            inputs: view.inputs.to_vec(),
            outputs: view.outputs.to_vec(),
        }
    }

    /// A view borrowing these tensors.
    pub fn view(&self) -> SubgraphView<'_> {
        SubgraphView {
            layers: self.layers.clone().into(),
            tensors: self
                .tensors
                .iter()
                .map(|t| SubgraphTensor {
                    id: t.id,
                    info: t.info.clone(),
                    value: t.value.as_deref().map(Into::into).into(),
                })
                .collect(),
            inputs: self.inputs.clone().into(),
            outputs: self.outputs.clone().into(),
        }
    }
}

/// Where one tensor of a step lives in the network's arena.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Slot {
    /// Byte offset in the arena.
    pub offset: u64,
    /// Length in bytes.
    pub bytes: u64,
    /// Shape and type.
    pub info: TensorInfo,
}

impl Slot {
    /// Where it is, as the arena takes it.
    pub fn place(&self) -> crate::memory::arena::Place<'_> {
        crate::memory::arena::Place {
            offset: self.offset as usize,
            bytes: self.bytes as usize,
            info: &self.info,
        }
    }
}

/// One workload run of a segment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireStep {
    /// The workload, as numbered in `CreateWorkload`.
    pub workload: u32,
    /// Its inputs, in slot order.
    pub inputs: Vec<Slot>,
    /// Its output.
    pub output: Slot,
}

/// What the host asks.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    /// Who are you: id, version, capabilities (or why the file is refused).
    Hello,
    /// `is_layer_supported`.
    IsLayerSupported {
        /// The layer.
        layer: LayerDescriptor,
        /// Its inputs.
        inputs: Vec<TensorInfo>,
        /// Its outputs.
        outputs: Vec<TensorInfo>,
    },
    /// `optimize_subgraph`.
    OptimizeSubgraph {
        /// The subgraph.
        subgraph: WireSubgraph,
        /// The network's options for this backend.
        options: BackendOptions,
    },
    /// A new instance for one network, with its memory manager, workload factory and context.
    CreateNetwork {
        /// The host's network id.
        network: u64,
        /// The network's options for this backend.
        options: BackendOptions,
    },
    /// A context hook of a network.
    Hook {
        /// The network.
        network: u64,
        /// Which hook.
        hook: Hook,
    },
    /// A memory-manager call of a network.
    Memory {
        /// The network.
        network: u64,
        /// Which call.
        op: MemoryOp,
    },
    /// The network's tensor arena: a memfd of `bytes` bytes comes with this request.
    MapArena {
        /// The network.
        network: u64,
        /// Its length.
        bytes: u64,
    },
    /// `create_workload` of one layer.
    CreateWorkload {
        /// The network.
        network: u64,
        /// The number the host gives this workload.
        workload: u32,
        /// The layer's name.
        name: String,
        /// The layer.
        layer: LayerDescriptor,
        /// Input infos.
        inputs: Vec<TensorInfo>,
        /// Output infos.
        outputs: Vec<TensorInfo>,
        /// Constant inputs' values, in slot order.
        constants: Vec<Option<Vec<u8>>>,
    },
    /// The network's segments: runs of workloads executed by one `Run` each.
    SetSegments {
        /// The network.
        network: u64,
        /// The segments, numbered by position.
        segments: Vec<Vec<WireStep>>,
    },
    /// Runs one segment; then, if asked, the context's `after_enqueue`.
    Run {
        /// The network.
        network: u64,
        /// The segment.
        segment: u32,
        /// Call `after_enqueue` once the segment ran.
        after_enqueue: bool,
    },
    /// Destroys what the server holds for a network: its workloads only (the unload's step
    /// between `release` and `after_unload_network`), or everything.
    DropNetwork {
        /// The network.
        network: u64,
        /// Keep the instance, memory manager and context.
        workloads_only: bool,
    },
}

/// A failed call inside the server.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireError {
    /// The method that failed.
    pub method: String,
    /// Its code.
    pub code: ErrorCode,
    /// Its message.
    pub message: String,
    /// For `Run`: the position in the segment of the step that failed.
    pub step: Option<u32>,
}

/// The server's answer to `Hello`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    /// The backend's id.
    pub id: String,
    /// The Backend API version it was built against.
    pub version: ApiVersion,
    /// Its capabilities.
    pub capabilities: Capabilities,
}

/// A file the server refused to load, as discovery would have.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Refused {
    /// The reason code.
    pub reason: ReasonCode,
    /// The message.
    pub message: String,
    /// The id, if it was read.
    pub id: Option<String>,
    /// The version, if it was read.
    pub version: Option<ApiVersion>,
}

/// What the server answers.
#[derive(Debug, Serialize, Deserialize)]
pub enum Answer {
    /// To `Hello`.
    Hello(Result<Hello, Refused>),
    /// Done, nothing to say.
    Done,
    /// To `IsLayerSupported`.
    Support(Support),
    /// To `OptimizeSubgraph`.
    Views(OptimizationViews),
    /// To `CreateNetwork`: whether the instance has a memory manager and a context.
    Created {
        /// A memory manager was made.
        memory: bool,
        /// A context was made.
        context: bool,
    },
    /// To `Memory { AllocatedBytes }`.
    Bytes(u64),
    /// A call failed.
    Failed(WireError),
}

/// Writes one frame, with `fd` attached when given.
///
/// # Errors
/// The socket's.
pub fn send<T: Serialize>(
    stream: &mut UnixStream,
    message: &T,
    fd: Option<std::os::fd::BorrowedFd<'_>>,
) -> io::Result<()> {
    let mut frame = vec![0u8; 4];
    postcard::to_io(message, &mut frame).map_err(io::Error::other)?;
    let len = u32::try_from(frame.len() - 4).map_err(io::Error::other)?;
    frame[..4].copy_from_slice(&len.to_le_bytes());
    match fd {
        None => stream.write_all(&frame),
        Some(fd) => {
            use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
            let fds = [fd];
            let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            control.push(SendAncillaryMessage::ScmRights(&fds));
            let sent = sendmsg(
                &*stream,
                &[IoSlice::new(&frame)],
                &mut control,
                SendFlags::NOSIGNAL,
            )?;
            stream.write_all(&frame[sent..])
        }
    }
}

/// Sets `stream`'s read timeout to what is left until `deadline`: `TimedOut` when nothing is.
fn arm(stream: &UnixStream, deadline: Option<std::time::Instant>) -> io::Result<()> {
    let Some(deadline) = deadline else {
        return Ok(());
    };
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the frame did not arrive in time",
        ));
    }
    stream.set_read_timeout(Some(left))
}

/// Reads one frame within `limits`; a descriptor that came with it is pushed on `fds`.
/// `Ok(None)` at a clean end of the stream (before a frame starts). The body is allocated as
/// it arrives (at most [`READ_AHEAD`] ahead), never at the announced size.
///
/// # Errors
/// The socket's; past the deadline `TimedOut` (or the socket's `WouldBlock`); a frame over
/// `limits.max` or one that does not decode is `InvalidData`.
pub fn receive<T: DeserializeOwned>(
    stream: &mut UnixStream,
    fds: &mut Vec<OwnedFd>,
    limits: Limits,
) -> io::Result<Option<T>> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
    let mut header = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        arm(stream, limits.deadline)?;
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let r = recvmsg(
            &*stream,
            &mut [IoSliceMut::new(&mut header[got..])],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        );
        let n = match r {
            Ok(m) => m.bytes,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = message {
                fds.extend(received);
            }
        }
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        got += n;
    }
    let len = u32::from_le_bytes(header) as usize;
    if len > limits.max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes (at most {} accepted)", limits.max),
        ));
    }
    let mut body = Vec::new();
    while body.len() < len {
        let start = body.len();
        body.resize(start + (len - start).min(READ_AHEAD), 0);
        // What has arrived is taken without waiting (a small answer came with its header):
        // the read timeout is set again only before a read that may block.
        let read = match rustix::net::recv(&*stream, &mut body[start..], RecvFlags::DONTWAIT) {
            Err(rustix::io::Errno::AGAIN) => {
                arm(stream, limits.deadline)?;
                stream.read(&mut body[start..])
            }
            other => other.map(|(n, _)| n).map_err(io::Error::from),
        };
        match read {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => body.truncate(start + n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => body.truncate(start),
            Err(e) => return Err(e),
        }
    }
    postcard::from_bytes(&body)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Polls `stream` for up to `spin`, yielding the core between polls: `true` as soon as bytes
/// (or the end of the stream) can be read. A round trip whose answer comes within the spin
/// costs no sleep and wake-up of this thread, about half the latency of a blocking read; the
/// yield keeps that true when the other process needs this core (a plain spin then costs
/// ten times more: docs/PERFORMANCE.md).
pub fn spin_until_readable(stream: &UnixStream, spin: std::time::Duration) -> bool {
    use rustix::net::{RecvFlags, recv};
    let start = std::time::Instant::now();
    let mut byte = [0u8; 1];
    loop {
        match recv(stream, &mut byte, RecvFlags::PEEK | RecvFlags::DONTWAIT) {
            Ok(_) => return true,
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => {}
            Err(_) => return true,
        }
        if start.elapsed() >= spin {
            return false;
        }
        std::thread::yield_now();
    }
}

/// The method name of a [`WireError`] as a static string (an unknown one reads `call`).
pub fn method_name(method: &str) -> &'static str {
    const KNOWN: [&str; 16] = [
        "capabilities",
        "is_layer_supported",
        "optimize_subgraph",
        "create_memory_manager",
        "create_workload_factory",
        "create_backend_context",
        "create_workload",
        "execute",
        "acquire",
        "release",
        "allocated_bytes",
        "before_load_network",
        "after_load_network",
        "before_unload_network",
        "after_unload_network",
        "after_enqueue",
    ];
    KNOWN.into_iter().find(|m| *m == method).unwrap_or("call")
}

/// How long a server polls for the next request after answering, before it sleeps: the
/// in-process layers between two of its segments usually take less.
pub const SERVER_SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// What the server loads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A plugin file (already through the host's trust checks).
    File(std::path::PathBuf),
    /// A backend compiled into the host, by id.
    Builtin(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames cross a socket pair, with a descriptor; a clean end reads as `None`; garbage
    /// and oversized frames are `InvalidData`.
    #[test]
    fn frames_and_descriptors_cross() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        send(
            &mut a,
            &Request::MapArena {
                network: 7,
                bytes: 64,
            },
            Some(std::os::fd::AsFd::as_fd(&file)),
        )
        .unwrap();
        send(&mut a, &Request::Hello, None).unwrap();
        let mut fds = Vec::new();
        let any = Limits {
            max: MAX_FRAME,
            deadline: None,
        };
        let r: Request = receive(&mut b, &mut fds, any).unwrap().unwrap();
        assert!(matches!(
            r,
            Request::MapArena {
                network: 7,
                bytes: 64
            }
        ));
        assert_eq!(fds.len(), 1);
        let r: Request = receive(&mut b, &mut fds, any).unwrap().unwrap();
        assert!(matches!(r, Request::Hello));
        a.write_all(&3u32.to_le_bytes()).unwrap();
        a.write_all(&[0xff, 0xff, 0xff]).unwrap();
        let e = receive::<Request>(&mut b, &mut fds, any).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        a.write_all(&u32::MAX.to_le_bytes()).unwrap();
        let e = receive::<Request>(&mut b, &mut fds, any).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        drop(a);
        assert!(receive::<Request>(&mut b, &mut fds, any).unwrap().is_none());
    }

    /// A peer that announces a large answer and then trickles it: refused above the cap at
    /// once; below it, the read ends at the one deadline however often a byte arrives, having
    /// allocated what arrived rather than what was announced.
    #[test]
    fn a_trickling_peer_meets_one_deadline() {
        use std::time::{Duration, Instant};
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let mut fds = Vec::new();
        a.write_all(&(MAX_ANSWER as u32 + 1).to_le_bytes()).unwrap();
        let answers = |deadline| Limits {
            max: MAX_ANSWER,
            deadline,
        };
        let e = receive::<Answer>(&mut b, &mut fds, answers(None)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("at most 67108864 accepted"), "{e}");
        let (mut a2, mut b2) = UnixStream::pair().unwrap();
        drop((a, b));
        let writer = std::thread::spawn(move || {
            a2.write_all(&(32u32 << 20).to_le_bytes()).unwrap();
            // One byte every 20 ms: each read would finish well within a per-read timeout.
            for _ in 0..100 {
                if a2.write_all(&[0]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let started = Instant::now();
        let deadline = started + Duration::from_millis(300);
        let e = receive::<Answer>(&mut b2, &mut fds, answers(Some(deadline))).unwrap_err();
        let took = started.elapsed();
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ),
            "{e}"
        );
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_millis(1500), "{took:?}");
        drop(b2);
        writer.join().unwrap();
    }
}
