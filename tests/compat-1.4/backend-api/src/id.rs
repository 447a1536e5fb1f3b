//! The backend id rule (DESIGN §3.3), shared by the host and the export macro's users.

/// Longest accepted backend id, in bytes.
pub const MAX_BACKEND_ID_LEN: usize = 64;

/// The id reserved for "no backend"; never a valid backend id.
pub const RESERVED_BACKEND_ID: &str = "Unknown";

/// Why a backend id was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InvalidId {
    /// `GetBackendId` returned a null pointer.
    Null,
    /// The id's bytes are not UTF-8.
    NotUtf8,
    /// The id is the empty string.
    Empty,
    /// The id is longer than [`MAX_BACKEND_ID_LEN`] bytes (the length is carried).
    TooLong(usize),
    /// The id holds a character outside `[A-Za-z0-9]` (the first such one is carried).
    BadCharacter(char),
    /// The id is the reserved `Unknown`.
    Reserved,
}

impl std::fmt::Display for InvalidId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InvalidId::Null => write!(f, "GetBackendId returned a null pointer"),
            InvalidId::NotUtf8 => write!(f, "backend id is not valid UTF-8"),
            InvalidId::Empty => write!(f, "backend id is empty"),
            InvalidId::TooLong(n) => {
                write!(
                    f,
                    "backend id is {n} bytes long, the limit is {MAX_BACKEND_ID_LEN}"
                )
            }
            InvalidId::BadCharacter(c) => {
                write!(
                    f,
                    "backend id contains {c:?}; only ASCII letters and digits are allowed"
                )
            }
            InvalidId::Reserved => write!(f, "backend id \"{RESERVED_BACKEND_ID}\" is reserved"),
        }
    }
}

impl std::error::Error for InvalidId {}

/// Checks raw id bytes (as read through `GetBackendId`, without the NUL) and returns the id.
pub fn validate_backend_id_bytes(bytes: &[u8]) -> Result<&str, InvalidId> {
    let id = std::str::from_utf8(bytes).map_err(|_| InvalidId::NotUtf8)?;
    validate_backend_id(id)?;
    Ok(id)
}

/// Checks an id against DESIGN §3.3: 1–64 ASCII letters and digits, not `Unknown`.
pub fn validate_backend_id(id: &str) -> Result<(), InvalidId> {
    if id.is_empty() {
        return Err(InvalidId::Empty);
    }
    if let Some(c) = id.chars().find(|c| !c.is_ascii_alphanumeric()) {
        return Err(InvalidId::BadCharacter(c));
    }
    if id.len() > MAX_BACKEND_ID_LEN {
        return Err(InvalidId::TooLong(id.len()));
    }
    if id == RESERVED_BACKEND_ID {
        return Err(InvalidId::Reserved);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_rule() {
        assert_eq!(validate_backend_id("CpuRef"), Ok(()));
        assert_eq!(validate_backend_id(&"a".repeat(64)), Ok(()));
        assert_eq!(
            validate_backend_id(&"a".repeat(65)),
            Err(InvalidId::TooLong(65))
        );
        assert_eq!(validate_backend_id(""), Err(InvalidId::Empty));
        assert_eq!(validate_backend_id("Unknown"), Err(InvalidId::Reserved));
        assert_eq!(validate_backend_id("unknown"), Ok(()));
        assert_eq!(
            validate_backend_id("Gpu_Acc"),
            Err(InvalidId::BadCharacter('_'))
        );
        assert_eq!(
            validate_backend_id("Gpu Acc"),
            Err(InvalidId::BadCharacter(' '))
        );
        assert_eq!(
            validate_backend_id("Gpuä"),
            Err(InvalidId::BadCharacter('ä'))
        );
        assert_eq!(
            validate_backend_id_bytes(b"\xff\xfe"),
            Err(InvalidId::NotUtf8)
        );
        assert_eq!(validate_backend_id_bytes(b"Npu1"), Ok("Npu1"));
    }
}
