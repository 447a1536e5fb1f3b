//! Errors a backend reports, and how they cross the ABI.

use std::fmt;

use abi_stable::{StableAbi, std_types::RString};

/// What kind of failure a plugin call reports.
#[repr(u8)]
#[derive(
    StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash,
)]
pub enum ErrorCode {
    /// The backend tried and failed; the message says why.
    Failed,
    /// The caller passed something the backend cannot use (wrong shape, type, object).
    InvalidArgument,
    /// The backend does not support what was asked.
    Unsupported,
    /// The backend's code panicked; the export layer caught it inside the plugin.
    Panicked,
    /// Out of memory (including a custom allocator that refused).
    OutOfMemory,
}

impl ErrorCode {
    /// A stable lower-case name for reports.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Failed => "failed",
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::Unsupported => "unsupported",
            ErrorCode::Panicked => "panicked",
            ErrorCode::OutOfMemory => "out_of_memory",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error returned by a backend method: a status code plus a human message.
///
/// This is both what vendors return from their trait methods and what crosses the ABI.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct BackendError {
    /// The kind of failure.
    pub code: ErrorCode,
    /// What went wrong, for a person.
    pub message: RString,
}

impl BackendError {
    /// Builds an error of any kind.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: RString::from(message.into()),
        }
    }
    /// A plain failure.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Failed, message)
    }
    /// A bad argument (shape, type, foreign object).
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }
    /// Something the backend does not support.
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unsupported, message)
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for BackendError {}

/// The result type of every backend trait method.
pub type BackendResult<T> = Result<T, BackendError>;
