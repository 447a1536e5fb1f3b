//! Named values: backend capabilities and backend options.

use std::fmt;

use abi_stable::{
    StableAbi,
    std_types::{RString, RVec},
};

/// Well-known capability names (Arm NN's `BackendCapabilities`).
pub mod names {
    /// The backend accepts weights that are not constant.
    pub const NON_CONST_WEIGHTS: &str = "NonConstWeights";
    /// The backend can allocate protected memory.
    pub const PROTECTED_CONTENT_ALLOCATION: &str = "ProtectedContentAllocation";
    /// The backend can import input/output tensors before execution.
    pub const PRE_IMPORT_IO_TENSORS: &str = "PreImportIOTensors";
    /// The backend's memory may be managed by the application.
    pub const EXTERNALLY_MANAGED_MEMORY: &str = "ExternallyManagedMemory";
    /// The backend computes in half precision.
    pub const HAS_FP16: &str = "HasFp16";
    /// The backend's tensors live in host memory and can be shared with other CPU backends
    /// without a MemCopy.
    pub const HOST_MEMORY: &str = "HostMemory";
    /// Backend API 1.3: the backend computes in memory of its own (a GPU's, an NPU's). Its
    /// memory manager allocates, copies and fences its buffers and its workloads run through
    /// `execute_device` ([`crate::device`]). Ignored for a plugin built against an older
    /// minor, and ignored beside [`HOST_MEMORY`].
    pub const DEVICE_MEMORY: &str = "DeviceMemory";
    /// Backend API 1.3, with [`DEVICE_MEMORY`]: the backend can use a caller's host buffer
    /// as a device buffer without a copy (`MemoryManager::import_host`), so the optimizer
    /// plans network inputs it reads as imports.
    pub const HOST_MEMORY_IMPORT: &str = "HostMemoryImport";
    /// Backend API 1.4: a whole number, the format version of the blobs the backend's
    /// workload factory prepares and restores (`WorkloadFactory::prepare_workload`). A
    /// compiled network stores it beside each blob, and a host refuses a blob of another
    /// version before handing it to the backend. Absent: the backend prepares nothing.
    pub const PREPARED_WORKLOAD_VERSION: &str = "PreparedWorkloadVersion";
}

/// The value of a capability or an option.
#[repr(u8)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
pub enum Value {
    /// A flag.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A real number.
    Float(f64),
    /// Text.
    Str(RString),
}

impl Value {
    /// Reads a value typed as text (a command line's `KEY=VALUE`): `true`/`false` as a flag,
    /// then a whole number, then a real number, else the text itself.
    pub fn parse(text: &str) -> Value {
        match text {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => text
                .parse::<i64>()
                .map(Value::Int)
                .or_else(|_| text.parse::<f64>().map(Value::Float))
                .unwrap_or_else(|_| Value::Str(text.into())),
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// One named value.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
pub struct NamedValue {
    /// The name (for capabilities, see [`names`]).
    pub name: RString,
    /// The value.
    pub value: Value,
}

/// An ordered list of named values; the first entry of a name wins.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Default)]
pub struct NamedValues {
    /// The entries, in the order they were added.
    pub entries: RVec<NamedValue>,
}

/// What a backend offers (see [`names`]); unknown names read as false.
pub type Capabilities = NamedValues;

/// Backend options (Arm NN's `BackendOptions` in `ModelOptions`): what an application gives
/// one backend for one network. The host hands them to `create_backend_context` and, from
/// Backend API 1.1, to `create_workload_factory_with_options` and
/// `optimize_subgraph_with_options`.
pub type BackendOptions = NamedValues;

impl NamedValues {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an entry (builder style).
    pub fn with(mut self, name: &str, value: Value) -> Self {
        self.entries.push(NamedValue {
            name: name.into(),
            value,
        });
        self
    }

    /// Adds a flag (builder style).
    pub fn with_bool(self, name: &str, value: bool) -> Self {
        self.with(name, Value::Bool(value))
    }

    /// The value of `name`, if present.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.entries
            .iter()
            .find(|e| e.name.as_str() == name)
            .map(|e| &e.value)
    }

    /// `true` only if `name` is present and is `Bool(true)` or a non-zero number.
    pub fn is_enabled(&self, name: &str) -> bool {
        match self.get(name) {
            Some(Value::Bool(b)) => *b,
            Some(Value::Int(i)) => *i != 0,
            Some(Value::Float(x)) => *x != 0.0,
            Some(Value::Str(_)) | None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_read_false() {
        let caps = Capabilities::new()
            .with_bool(names::HAS_FP16, true)
            .with("Threads", Value::Int(0));
        assert!(caps.is_enabled(names::HAS_FP16));
        assert!(!caps.is_enabled("Threads"));
        assert!(!caps.is_enabled("NoSuchCapability"));
        assert_eq!(caps.get("Threads"), Some(&Value::Int(0)));
    }

    #[test]
    fn values_parse_from_text() {
        assert_eq!(Value::parse("2"), Value::Int(2));
        assert_eq!(Value::parse("-7"), Value::Int(-7));
        assert_eq!(Value::parse("0.5"), Value::Float(0.5));
        assert_eq!(Value::parse("true"), Value::Bool(true));
        assert_eq!(Value::parse("False"), Value::Str("False".into()));
        assert_eq!(Value::parse(""), Value::Str("".into()));
    }
}
