//! Forwarding plugin log records to the host's logger.
//!
//! Each plugin has its own copy of the `log` crate's global logger. The host hands every
//! plugin a [`LogSink`] (through the optional `BackplaneInstallLogger` symbol); the plugin
//! installs a logger that forwards each record through it, and a panic hook that reports
//! panics at `debug` level instead of printing them (the call's error carries the message).

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::RwLock,
};

use abi_stable::{StableAbi, std_types::RStr};

/// A host-provided logging callback.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct LogSink {
    /// Most verbose level the host wants (0 = off, 1 = error … 5 = trace).
    pub max_level: usize,
    /// Logs one record: level (1 = error … 5 = trace), target, formatted message.
    pub log: extern "C" fn(level: usize, target: RStr<'_>, message: RStr<'_>),
}

fn level_from(n: usize) -> Option<log::Level> {
    [
        log::Level::Error,
        log::Level::Warn,
        log::Level::Info,
        log::Level::Debug,
        log::Level::Trace,
    ]
    .get(n.checked_sub(1)?)
    .copied()
}

extern "C" fn host_log(level: usize, target: RStr<'_>, message: RStr<'_>) {
    // A panic must not unwind into the plugin's frames: catch it here, in the host.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Some(level) = level_from(level) else {
            return;
        };
        log::logger().log(
            &log::Record::builder()
                .level(level)
                .target(target.as_str())
                .args(format_args!("{}", message.as_str()))
                .build(),
        );
    }));
}

/// The sink the host hands to plugins: records go to the host's `log` logger.
pub fn host_log_sink() -> LogSink {
    LogSink {
        max_level: log::max_level() as usize,
        log: host_log,
    }
}

static SINK: RwLock<Option<LogSink>> = RwLock::new(None);

struct Forwarder;

impl log::Log for Forwarder {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        SINK.read()
            .ok()
            .and_then(|s| *s)
            .is_some_and(|s| metadata.level() as usize <= s.max_level)
    }

    fn log(&self, record: &log::Record<'_>) {
        let Some(sink) = SINK.read().ok().and_then(|s| *s) else {
            return;
        };
        if record.level() as usize > sink.max_level {
            return;
        }
        let message = record.args().to_string();
        (sink.log)(
            record.level() as usize,
            record.target().into(),
            message.as_str().into(),
        );
    }

    fn flush(&self) {}
}

static FORWARDER: Forwarder = Forwarder;

/// Plugin side: start forwarding this plugin's log records to `sink`.
pub(crate) fn install(sink: LogSink) {
    if let Ok(mut s) = SINK.write() {
        *s = Some(sink);
    }
    if log::set_logger(&FORWARDER).is_ok() {
        std::panic::set_hook(Box::new(|info| {
            log::debug!(target: "backplane_api::panic", "plugin panic (caught): {info}");
        }));
    }
    log::set_max_level(match level_from(sink.max_level) {
        Some(l) => l.to_level_filter(),
        None => log::LevelFilter::Off,
    });
}
