//! The host's side of an out-of-process backend: starts its server, holds the proxy the
//! registry registers ([`RemoteBackend`]), and forwards every call, one round trip each.

use std::{
    io,
    os::{
        fd::{BorrowedFd, OwnedFd},
        unix::{net::UnixStream, process::ExitStatusExt},
    },
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex, mpsc},
    time::{Duration, Instant},
};

use backplane_api::{
    ApiVersion, BackendError, BackendOptions, BackendResult, Capabilities, ErrorCode,
    LayerDescriptor, OptimizationViews, SubgraphView, Support, TensorInfo,
    ffi::{BackendHandle, CallError, FaultState},
};

use super::protocol::{self, Answer, Hook, MemoryOp, Request, Target, WireError, WireStep};
use crate::{
    child::{deadline_after, signal_name, stderr_note, wait_until},
    report::{ReasonCode, Rejection},
    sys::shm::SharedMemory,
};

/// How long the host polls for a server's answer before it sleeps in a blocking read.
pub const SPIN: Duration = Duration::from_micros(50);

/// Which backends run out of process, and how their servers are started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfProcess {
    /// The backend ids. A plugin file is chosen by its name's `<Name>` part (by convention its
    /// id) before anything of it runs; a built-in by its id.
    pub backends: Vec<String>,
    /// The server program: the `backplane` CLI; it is given `args`, then the target.
    pub program: PathBuf,
    /// Arguments before the target (`serve`).
    pub args: Vec<String>,
    /// How long one call may take before the server is killed and the backend faulted.
    pub call_timeout: Duration,
    /// How long the server may take to start and load the backend.
    pub start_timeout: Duration,
}

impl OutOfProcess {
    /// The default deadline of one call (generous: a slow backend's first inference).
    pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
    /// The default time a server may take to start and load its backend.
    pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(10);

    /// The running executable's hidden `serve` command: what the `backplane` CLI uses.
    ///
    /// # Errors
    /// The executable's path is unknown.
    pub fn current_exe(backends: Vec<String>) -> io::Result<Self> {
        Ok(Self::with_program(std::env::current_exe()?, backends))
    }

    /// For embedders (the Python and C bindings): the `backplane` CLI named by
    /// `BACKPLANE_PROBE`, else the first on `PATH`.
    ///
    /// # Errors
    /// Where it looked, when neither gives a file.
    pub fn from_environment(backends: Vec<String>) -> Result<Self, String> {
        Ok(Self::with_program(
            crate::child::cli_from_environment("out-of-process backends")?,
            backends,
        ))
    }

    /// `program serve ...` with the default deadlines.
    pub fn with_program(program: PathBuf, backends: Vec<String>) -> Self {
        Self {
            backends,
            program,
            args: vec!["serve".to_owned()],
            call_timeout: Self::DEFAULT_CALL_TIMEOUT,
            start_timeout: Self::DEFAULT_START_TIMEOUT,
        }
    }

    /// `true` when backend `id` runs out of process.
    pub fn wants(&self, id: &str) -> bool {
        self.backends.iter().any(|b| b == id)
    }
}

/// The child process and its socket.
struct Connection {
    stream: UnixStream,
    child: Child,
    /// Set once the child is gone (reaped).
    dead: bool,
}

/// The end of the child's stderr (and stdout), and a signal when the pipe closed.
struct StderrTail {
    lines: Arc<Mutex<Vec<String>>>,
    closed: Mutex<mpsc::Receiver<()>>,
}

impl StderrTail {
    /// Forwards the child's output to this process's stderr, keeping the last lines.
    fn follow(pipe: io::PipeReader, backend: &str) -> Self {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (sender, closed) = mpsc::channel();
        let keep = lines.clone();
        let name = format!("backplane-oop-{backend}");
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            bounded_lines(io::BufReader::new(pipe), MAX_LINE, |text| {
                eprintln!("{text}");
                let mut l = keep.lock().unwrap_or_else(|e| e.into_inner());
                l.push(text);
                if l.len() > 16 {
                    l.remove(0);
                }
            });
            let _ = sender.send(());
        });
        if let Err(e) = spawned {
            log::warn!("out-of-process backend: following its stderr: {e}");
        }
        Self {
            lines,
            closed: Mutex::new(closed),
        }
    }

    /// `"; its stderr ended with: ..."`, after waiting briefly for the pipe to close.
    fn describe(&self) -> String {
        let _ = self
            .closed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .recv_timeout(Duration::from_millis(300));
        let text = self
            .lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .join("\n");
        stderr_note(&text)
    }
}

/// The longest line of a server's output kept whole; the rest of a longer line is dropped
/// (and the line marked), so a server writing without newlines cannot grow the host's memory.
const MAX_LINE: usize = 4096;

/// Calls `each` with every line of `reader` (at most `max` bytes of it, then `" [cut]"`) as
/// [`printable`] text, until the end or an error of the stream.
fn bounded_lines(mut reader: impl io::BufRead, max: usize, mut each: impl FnMut(String)) {
    let mut line = Vec::new();
    let mut cut = false;
    loop {
        let (taken, ended) = match reader.fill_buf() {
            Ok([]) | Err(_) => {
                if !line.is_empty() || cut {
                    each(printable(&line, cut));
                }
                return;
            }
            Ok(buf) => {
                let end = buf.iter().position(|&b| b == b'\n');
                let part = &buf[..end.unwrap_or(buf.len())];
                let room = max - line.len();
                cut |= part.len() > room;
                line.extend_from_slice(&part[..part.len().min(room)]);
                (end.map_or(buf.len(), |e| e + 1), end.is_some())
            }
        };
        reader.consume(taken);
        if ended {
            each(printable(&line, cut));
            line.clear();
            cut = false;
        }
    }
}

/// A server's line as text safe to print on the host's terminal: invalid UTF-8 replaced,
/// every control character but tab escaped (`\u{1b}`), so no escape sequence of the server's
/// reaches the terminal.
fn printable(line: &[u8], cut: bool) -> String {
    let mut text = String::with_capacity(line.len());
    for c in String::from_utf8_lossy(line).chars() {
        if c.is_control() && c != '\t' {
            text.extend(c.escape_unicode());
        } else {
            text.push(c);
        }
    }
    if cut {
        text.push_str(" [cut]");
    }
    text
}

/// A backend running in a child process: the host's side of its connection.
pub struct RemoteBackend {
    id: String,
    version: ApiVersion,
    capabilities: Capabilities,
    fault: Arc<FaultState>,
    call_timeout: Duration,
    pid: u32,
    connection: Mutex<Connection>,
    stderr: StderrTail,
    /// Round trips made so far.
    round_trips: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for RemoteBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RemoteBackend({} in pid {})", self.id, self.pid)
    }
}

/// What ended a call: the words for a message.
fn ending(status: Option<std::process::ExitStatus>) -> String {
    match status {
        None => "did not end".to_owned(),
        Some(s) => match (s.code(), s.signal()) {
            (_, Some(signal)) => format!("was killed by signal {signal} ({})", signal_name(signal)),
            (Some(code), _) => format!("exited with status {code}"),
            _ => "ended".to_owned(),
        },
    }
}

impl RemoteBackend {
    /// Starts a server for `target` and asks who it is. A server that cannot start, dies or
    /// hangs while loading is `crashed`; a file it refuses keeps the loader's reason.
    ///
    /// # Errors
    /// The rejection, with the id and version when they were read.
    pub fn start(
        options: &OutOfProcess,
        target: &Target,
    ) -> Result<Self, (Rejection, Option<String>, Option<ApiVersion>)> {
        let crashed = |m: String| (Rejection::new(ReasonCode::Crashed, m), None, None);
        let (host_end, child_end) = UnixStream::pair()
            .map_err(|e| crashed(format!("out-of-process server: socket pair: {e}")))?;
        let (reader, writer) =
            io::pipe().map_err(|e| crashed(format!("out-of-process server: pipe: {e}")))?;
        let writer2 = writer
            .try_clone()
            .map_err(|e| crashed(format!("out-of-process server: pipe: {e}")))?;
        let mut command = Command::new(&options.program);
        command.args(&options.args);
        match target {
            Target::File(f) => command.arg("--file").arg(f),
            Target::Builtin(id) => command.arg("--builtin").arg(id),
        };
        command
            .arg("--parent")
            .arg(std::process::id().to_string())
            .env_clear()
            .stdin(Stdio::from(OwnedFd::from(child_end)))
            .stdout(Stdio::from(writer))
            .stderr(Stdio::from(writer2));
        // The server's environment is the host's logging and library path, and what a
        // device driver needs to work in it (an OpenCL driver runs a compiler and linker
        // found through PATH, keeps a kernel cache under HOME or TMPDIR, and is chosen by the
        // ICD loader's variables and its own POCL_*/BACKPLANE_* settings); nothing else, so
        // that DYNAMIC_BACKEND_PATHS and the like do not reach it.
        for (name, value) in std::env::vars_os() {
            let keep = name.to_str().is_some_and(|n| {
                matches!(
                    n,
                    "RUST_LOG"
                        | "LD_LIBRARY_PATH"
                        | "PATH"
                        | "HOME"
                        | "TMPDIR"
                        | "OCL_ICD_VENDORS"
                        | "OCL_ICD_FILENAMES"
                ) || n.starts_with("POCL_")
                    || n.starts_with("BACKPLANE_")
            });
            if keep {
                command.env(name, value);
            }
        }
        let child = command.spawn().map_err(|e| {
            crashed(format!(
                "the out-of-process server {} could not be started: {e}",
                options.program.display()
            ))
        })?;
        drop(command);
        let label = match target {
            Target::File(f) => f
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
            Target::Builtin(id) => id.clone(),
        };
        let pid = child.id();
        let stderr = StderrTail::follow(reader, &label);
        let mut remote = Self {
            id: label,
            version: ApiVersion::CURRENT,
            capabilities: Capabilities::new(),
            fault: FaultState::new(),
            call_timeout: options.start_timeout,
            pid,
            connection: Mutex::new(Connection {
                stream: host_end,
                child,
                dead: false,
            }),
            stderr,
            round_trips: std::sync::atomic::AtomicU64::new(0),
        };
        remote
            .set_call_timeout(options.start_timeout)
            .map_err(|e| crashed(format!("out-of-process server: socket: {e}")))?;
        match remote.call("load", &Request::Hello, None) {
            Ok(Answer::Hello(Ok(hello))) => {
                // The server's word is checked as a plugin's would be: a valid id, the one
                // it was started for when that is known, a version this host accepts.
                let refuse = |reason, message: String| {
                    (
                        Rejection::new(reason, format!("out-of-process server: {message}")),
                        None,
                        None,
                    )
                };
                if let Err(e) = backplane_api::validate_backend_id(&hello.id) {
                    return Err(refuse(
                        ReasonCode::InvalidId,
                        format!("it answered with {:?}: {e}", hello.id),
                    ));
                }
                if let Target::Builtin(id) = target
                    && hello.id != *id
                {
                    return Err(refuse(
                        ReasonCode::InvalidId,
                        format!(
                            "started for built-in backend {id}, it answered as {}",
                            hello.id
                        ),
                    ));
                }
                if let Some(message) = ApiVersion::CURRENT.incompatibility(&hello.id, hello.version)
                {
                    return Err((
                        Rejection::new(ReasonCode::IncompatibleVersion, message),
                        Some(hello.id),
                        Some(hello.version),
                    ));
                }
                remote.id = hello.id;
                remote.version = hello.version;
                remote.capabilities = hello.capabilities;
                remote
                    .set_call_timeout(options.call_timeout)
                    .map_err(|e| crashed(format!("out-of-process server: socket: {e}")))?;
                log::info!(
                    "backend {} runs out of process (pid {pid}, Backend API {})",
                    remote.id,
                    remote.version
                );
                Ok(remote)
            }
            Ok(Answer::Hello(Err(refused))) => Err((
                Rejection::new(refused.reason, refused.message),
                refused.id,
                refused.version,
            )),
            Ok(other) => Err(crashed(format!(
                "the out-of-process server answered its start with {other:?}"
            ))),
            Err(e) => Err(crashed(e.message)),
        }
    }

    /// Sets the deadline of each call; a send blocked that long (the socket's write timeout,
    /// set here once rather than per call) fails too.
    fn set_call_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        self.call_timeout = timeout;
        let c = self.connection.get_mut().unwrap_or_else(|e| e.into_inner());
        c.stream.set_write_timeout(Some(timeout))
    }

    /// The backend's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The Backend API version it was built against.
    pub fn version(&self) -> ApiVersion {
        self.version
    }

    /// Its capabilities, as read at start.
    pub fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// How many requests the host has sent this server so far (each is one round trip).
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The fault state shared with the registry's proxy.
    pub fn fault_state(&self) -> &Arc<FaultState> {
        &self.fault
    }

    /// A handle the registry uses for queries (support, `optimize_subgraph`, capabilities):
    /// a host-made backend object forwarding to the server, gated as a plugin of the
    /// server's version.
    pub fn query_handle(self: &Arc<Self>) -> BackendHandle {
        BackendHandle::from_host_object(
            Queries(self.clone()),
            &self.id,
            self.version,
            self.fault.clone(),
        )
    }

    fn error(&self, method: &'static str, code: ErrorCode, message: String) -> CallError {
        CallError {
            backend: self.id.clone(),
            method,
            code,
            message,
        }
    }

    /// One round trip. A dead, hung or garbling server is killed and reaped, the backend
    /// faulted, and the call fails naming what happened.
    pub fn call(
        &self,
        method: &'static str,
        request: &Request,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<Answer, CallError> {
        let mut c = self.connection.lock().unwrap_or_else(|e| e.into_inner());
        if self.fault.is_faulted() || c.dead {
            let why = self.fault.reason().unwrap_or_default();
            return Err(self.error(
                method,
                ErrorCode::Failed,
                format!("backend is faulted ({why})"),
            ));
        }
        self.round_trips
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let started = Instant::now();
        let timeout = self.call_timeout;
        let exchange = (|| {
            protocol::send(&mut c.stream, request, fd)?;
            protocol::spin_until_readable(&c.stream, SPIN);
            // One deadline for the whole answer, across every read of it.
            let limits = protocol::Limits {
                max: protocol::MAX_ANSWER,
                deadline: Some(started + timeout),
            };
            protocol::receive::<Answer>(&mut c.stream, &mut Vec::new(), limits)
        })();
        let failure = match exchange {
            Ok(Some(answer)) => return Ok(answer),
            Ok(None) => None,
            Err(e) => Some(e),
        };
        // The server is gone or cannot be trusted to answer: end it (at once when it is
        // still there: late, or garbling).
        let timed_out = matches!(
            failure.as_ref().map(io::Error::kind),
            Some(io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
        );
        let garbled = failure
            .as_ref()
            .filter(|e| e.kind() == io::ErrorKind::InvalidData);
        let status = if timed_out || garbled.is_some() {
            let _ = c.child.kill();
            c.child.wait().ok()
        } else {
            reap(&mut c.child, Duration::from_secs(2))
        };
        c.dead = true;
        drop(c);
        let what = if timed_out {
            format!(
                "did not answer within {:.1} s and was killed",
                timeout.as_secs_f64()
            )
        } else if let Some(e) = garbled {
            format!("sent an unreadable answer ({e}) and was killed")
        } else {
            ending(status)
        };
        let message = format!(
            "the out-of-process server (pid {}) {what} during {method}{}",
            self.pid,
            self.stderr.describe()
        );
        log::error!("backend {}: {message}; backend marked faulted", self.id);
        self.fault.mark(&format!("{method}: {message}"));
        Err(self.error(method, ErrorCode::Failed, message))
    }

    fn expect_done(&self, method: &'static str, answer: Answer) -> Result<(), CallError> {
        match answer {
            Answer::Done | Answer::Bytes(_) => Ok(()),
            other => Err(self.unexpected(method, other)),
        }
    }

    /// The server's error as a call error (a panic there faults the backend here too), or a
    /// protocol violation.
    fn unexpected(&self, method: &'static str, answer: Answer) -> CallError {
        match answer {
            Answer::Failed(w) => self.wire_error(method, w),
            other => self.error(
                method,
                ErrorCode::Failed,
                format!("the out-of-process server answered {other:?}"),
            ),
        }
    }

    fn wire_error(&self, method: &'static str, w: WireError) -> CallError {
        let method = match protocol::method_name(&w.method) {
            "call" => method,
            m => m,
        };
        let e = self.error(method, w.code, w.message);
        if e.code == ErrorCode::Panicked {
            log::error!("{e}; backend marked faulted");
            self.fault
                .mark(&format!("{} {}: {}", e.method, e.code, e.message));
        }
        e
    }

    /// `is_layer_supported`.
    ///
    /// # Errors
    /// The call's.
    pub fn is_layer_supported(
        &self,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Result<Support, CallError> {
        const M: &str = "is_layer_supported";
        let request = Request::IsLayerSupported {
            layer: layer.clone(),
            inputs: inputs.to_vec(),
            outputs: outputs.to_vec(),
        };
        match self.call(M, &request, None)? {
            Answer::Support(s) => Ok(s),
            other => Err(self.unexpected(M, other)),
        }
    }

    /// `optimize_subgraph` with the network's options.
    ///
    /// # Errors
    /// The call's.
    pub fn optimize_subgraph(
        &self,
        subgraph: &SubgraphView<'_>,
        options: &BackendOptions,
    ) -> Result<OptimizationViews, CallError> {
        const M: &str = "optimize_subgraph";
        let request = Request::OptimizeSubgraph {
            subgraph: protocol::WireSubgraph::from_view(subgraph),
            options: options.clone(),
        };
        match self.call(M, &request, None)? {
            Answer::Views(v) => Ok(v),
            other => Err(self.unexpected(M, other)),
        }
    }

    /// Makes network `network`'s instance, memory manager, factory and context in the
    /// server: whether it has a memory manager and a context.
    ///
    /// # Errors
    /// The first failed call's.
    pub fn create_network(
        &self,
        network: u64,
        options: &BackendOptions,
    ) -> Result<(bool, bool), CallError> {
        const M: &str = "create_workload_factory";
        let request = Request::CreateNetwork {
            network,
            options: options.clone(),
        };
        match self.call(M, &request, None)? {
            Answer::Created { memory, context } => Ok((memory, context)),
            other => Err(self.unexpected(M, other)),
        }
    }

    /// A context hook of network `network`.
    ///
    /// # Errors
    /// The hook's.
    pub fn hook(&self, network: u64, hook: Hook) -> Result<(), CallError> {
        let m = hook.method();
        let answer = self.call(m, &Request::Hook { network, hook }, None)?;
        self.expect_done(m, answer)
    }

    /// A memory-manager call of network `network` (the bytes for `AllocatedBytes`).
    ///
    /// # Errors
    /// The call's.
    pub fn memory(&self, network: u64, op: MemoryOp) -> Result<u64, CallError> {
        let m = op.method();
        match self.call(m, &Request::Memory { network, op }, None)? {
            Answer::Bytes(b) => Ok(b),
            other => Err(self.unexpected(m, other)),
        }
    }

    /// Hands network `network`'s arena to the server.
    ///
    /// # Errors
    /// The call's.
    pub fn map_arena(&self, network: u64, arena: &SharedMemory) -> Result<(), CallError> {
        const M: &str = "create_workload";
        let request = Request::MapArena {
            network,
            bytes: arena.len() as u64,
        };
        let answer = self.call(M, &request, Some(arena.fd()))?;
        self.expect_done(M, answer)
    }

    /// Creates workload number `workload` in the server.
    ///
    /// # Errors
    /// The call's.
    pub fn create_workload(&self, request: &Request) -> Result<(), CallError> {
        const M: &str = "create_workload";
        let answer = self.call(M, request, None)?;
        self.expect_done(M, answer)
    }

    /// Sets network `network`'s segments.
    ///
    /// # Errors
    /// The call's.
    pub fn set_segments(
        &self,
        network: u64,
        segments: Vec<Vec<WireStep>>,
    ) -> Result<(), CallError> {
        const M: &str = "create_workload";
        let answer = self.call(M, &Request::SetSegments { network, segments }, None)?;
        self.expect_done(M, answer)
    }

    /// Runs one segment (then `after_enqueue`, if asked): on failure, the position of the step
    /// that failed, when the server said.
    ///
    /// # Errors
    /// The call's.
    pub fn run(
        &self,
        network: u64,
        segment: u32,
        after_enqueue: bool,
    ) -> Result<(), (Option<u32>, CallError)> {
        const M: &str = "execute";
        let request = Request::Run {
            network,
            segment,
            after_enqueue,
        };
        match self.call(M, &request, None) {
            Ok(Answer::Done) => Ok(()),
            Ok(Answer::Failed(w)) => {
                let step = w.step;
                Err((step, self.wire_error(M, w)))
            }
            Ok(other) => Err((None, self.unexpected(M, other))),
            Err(e) => Err((None, e)),
        }
    }

    /// Tells the server to drop network `network`'s workloads, or everything of it (errors
    /// are logged).
    pub fn drop_network(&self, network: u64, workloads_only: bool) {
        if self.fault.is_faulted() {
            return;
        }
        const M: &str = "release";
        let request = Request::DropNetwork {
            network,
            workloads_only,
        };
        if let Err(e) = self
            .call(M, &request, None)
            .and_then(|a| self.expect_done(M, a))
        {
            log::warn!("network {network}: dropping it in the out-of-process server: {e}");
        }
    }
}

/// Waits up to `patience` for `child` to end by itself, then kills it; its status.
fn reap(child: &mut Child, patience: Duration) -> Option<std::process::ExitStatus> {
    match wait_until(child, deadline_after(patience)) {
        Ok(Some(status)) => Some(status),
        _ => {
            let _ = child.kill();
            child.wait().ok()
        }
    }
}

impl Drop for RemoteBackend {
    /// Closes the socket (the server exits at its end) and reaps the child.
    fn drop(&mut self) {
        let c = self.connection.get_mut().unwrap_or_else(|e| e.into_inner());
        if !c.dead {
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
            let _ = reap(&mut c.child, Duration::from_secs(2));
            c.dead = true;
        }
    }
}

/// The registry's view of a remote backend: queries forwarded to the server.
struct Queries(Arc<RemoteBackend>);

fn to_backend_error(e: CallError) -> BackendError {
    BackendError::new(e.code, e.message)
}

impl backplane_api::Backend for Queries {
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities.clone()
    }

    fn is_layer_supported(
        &self,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Support {
        self.0
            .is_layer_supported(layer, inputs, outputs)
            .unwrap_or_else(|e| Support::Unsupported(e.to_string().into()))
    }

    fn create_workload_factory(
        &self,
        _memory: Option<Arc<dyn backplane_api::MemoryManager>>,
    ) -> BackendResult<Box<dyn backplane_api::WorkloadFactory>> {
        Err(BackendError::new(
            ErrorCode::Unsupported,
            "an out-of-process backend's workloads are made in its server, through the runtime",
        ))
    }

    fn optimize_subgraph(&self, subgraph: &SubgraphView<'_>) -> BackendResult<OptimizationViews> {
        self.0
            .optimize_subgraph(subgraph, &BackendOptions::default())
            .map_err(to_backend_error)
    }

    fn optimize_subgraph_with_options(
        &self,
        subgraph: &SubgraphView<'_>,
        options: &BackendOptions,
    ) -> BackendResult<OptimizationViews> {
        self.0
            .optimize_subgraph(subgraph, options)
            .map_err(to_backend_error)
    }

    fn use_custom_allocator(&self, _allocator: backplane_api::CustomAllocator) -> bool {
        log::warn!(
            "backend {} runs out of process: it cannot use the application's allocator",
            self.0.id
        );
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(bytes: &[u8], max: usize) -> Vec<String> {
        let mut out = Vec::new();
        bounded_lines(io::BufReader::with_capacity(7, bytes), max, |l| out.push(l));
        out
    }

    /// A server's output as the host prints it: lines cut at the cap (the rest of the line
    /// dropped, not carried into the next), escape sequences and other control characters
    /// escaped, invalid UTF-8 replaced, a last line without a newline kept.
    #[test]
    fn server_lines_are_capped_and_escaped() {
        let long = [b"x".repeat(40), b"\nnext\n".to_vec()].concat();
        assert_eq!(
            lines_of(&long, 16),
            [format!("{} [cut]", "x".repeat(16)), "next".into()]
        );
        assert_eq!(
            lines_of(b"\x1b[2J\x1b]0;owned\x07red\tok\n\xff\xfeend", 64),
            [
                "\\u{1b}[2J\\u{1b}]0;owned\\u{7}red\tok",
                "\u{fffd}\u{fffd}end"
            ]
        );
        assert_eq!(lines_of(b"", 8), Vec::<String>::new());
        assert_eq!(lines_of(b"\n\n", 8), ["", ""]);
        // Without any newline at all, memory stays at the cap.
        let endless = vec![b'a'; 1 << 20];
        assert_eq!(
            lines_of(&endless, 4096),
            [format!("{} [cut]", "a".repeat(4096))]
        );
    }
}

#[cfg(test)]
mod servers {
    use super::*;
    use crate::remote::protocol::Hello;

    /// A "server" that is a shell writing `answers` (frames made here) to its socket, then
    /// waiting: what a server taken over by a hostile plugin could say.
    fn fake(answers: &[u8], dir: &std::path::Path) -> OutOfProcess {
        let file = dir.join("answers");
        std::fs::write(&file, answers).unwrap();
        OutOfProcess {
            backends: vec!["CpuRef".into()],
            program: "/bin/sh".into(),
            args: vec![
                "-c".into(),
                format!("cat '{}' >&0; sleep 20", file.display()),
            ],
            call_timeout: Duration::from_secs(2),
            start_timeout: Duration::from_secs(2),
        }
    }

    fn frame(answer: &Answer) -> Vec<u8> {
        let body = postcard::to_allocvec(answer).unwrap();
        [(body.len() as u32).to_le_bytes().to_vec(), body].concat()
    }

    fn hello(id: &str, version: ApiVersion) -> Vec<u8> {
        frame(&Answer::Hello(Ok(Hello {
            id: id.into(),
            version,
            capabilities: Capabilities::new(),
        })))
    }

    fn refusal(oop: &OutOfProcess) -> (ReasonCode, String, Option<String>) {
        let (r, id, _) = RemoteBackend::start(oop, &Target::Builtin("CpuRef".into())).unwrap_err();
        (r.reason, r.message.into_owned(), id)
    }

    /// The server's `Hello` is checked as a plugin's exports are: an invalid id, another id
    /// than the backend it was started for, or an incompatible version is a rejection with
    /// its reason code; an announced answer over the cap is a crash of the server, at once.
    #[test]
    fn a_lying_server_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (code, message, _) = refusal(&fake(
            &hello("Evil\u{1b}[2J", ApiVersion::CURRENT),
            dir.path(),
        ));
        assert_eq!(code, ReasonCode::InvalidId);
        assert!(
            message.starts_with("out-of-process server: it answered with \"Evil\\u{1b}[2J\""),
            "{message}"
        );
        let (code, message, _) = refusal(&fake(&hello("CpuFast", ApiVersion::CURRENT), dir.path()));
        assert_eq!(code, ReasonCode::InvalidId);
        assert_eq!(
            message,
            "out-of-process server: started for built-in backend CpuRef, it answered as CpuFast"
        );
        let newer = ApiVersion::new(ApiVersion::CURRENT.major, ApiVersion::CURRENT.minor + 1);
        let (code, message, id) = refusal(&fake(&hello("CpuRef", newer), dir.path()));
        assert_eq!(code, ReasonCode::IncompatibleVersion);
        assert!(message.starts_with(&format!("backend CpuRef built against Backend API {newer}")));
        assert_eq!(id.as_deref(), Some("CpuRef"));
        let started = Instant::now();
        let (code, message, _) = refusal(&fake(&u32::MAX.to_le_bytes(), dir.path()));
        assert_eq!(code, ReasonCode::Crashed);
        assert!(
            message.contains(
                "sent an unreadable answer (a frame of 4294967295 bytes (at most 67108864 \
                 accepted)) and was killed during load"
            ),
            "{message}"
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        // A trickle: the announced frame never completes; the start deadline ends it.
        let trickle = OutOfProcess {
            args: vec![
                "-c".into(),
                "printf '\\000\\000\\000\\001' >&0; while sleep 0.2; do printf x >&0; done".into(),
            ],
            ..fake(b"", dir.path())
        };
        let started = Instant::now();
        let (code, message, _) = refusal(&trickle);
        assert_eq!(code, ReasonCode::Crashed);
        assert!(
            message.contains("did not answer within 2.0 s and was killed"),
            "{message}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
