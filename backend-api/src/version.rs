//! The Backend API version and the compatibility rule (DESIGN §3.2).

use std::fmt;

use abi_stable::StableAbi;

/// Major version of the Backend API this crate defines.
pub const API_MAJOR: u32 = 1;
/// Minor version of the Backend API this crate defines.
pub const API_MINOR: u32 = 5;

/// A Backend API version `major.minor`.
///
/// A plugin reports the version it was built against through `GetVersion`; the host accepts it
/// iff [`ApiVersion::accepts`] holds.
#[repr(C)]
#[derive(
    StableAbi,
    serde::Serialize,
    serde::Deserialize,
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
)]
pub struct ApiVersion {
    /// Incompatible changes bump this.
    pub major: u32,
    /// Append-only additions bump this.
    pub minor: u32,
}

impl ApiVersion {
    /// The version this crate implements.
    pub const CURRENT: ApiVersion = ApiVersion {
        major: API_MAJOR,
        minor: API_MINOR,
    };

    /// Builds a version.
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }

    /// `true` iff a plugin built against `plugin` can be loaded by a host at `self`:
    /// the same major, and a minor no newer than the host's.
    pub const fn accepts(self, plugin: ApiVersion) -> bool {
        plugin.major == self.major && plugin.minor <= self.minor
    }

    /// The rejection message of DESIGN §3.2, or `None` when `plugin` is accepted.
    pub fn incompatibility(self, backend: &str, plugin: ApiVersion) -> Option<String> {
        (!self.accepts(plugin)).then(|| {
            format!(
                "backend {backend} built against Backend API {plugin}, host provides {self} \
                 (needs major {}, minor <= {})",
                self.major, self.minor
            )
        })
    }
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arm_nn_version_table_for_host_2_4() {
        let host = ApiVersion::new(2, 4);
        let cases = [
            ((2, 4), true),
            ((2, 1), true),
            ((2, 3), true),
            ((2, 5), false),
            ((1, 0), false),
            ((1, 4), false),
            ((3, 0), false),
            ((3, 4), false),
        ];
        for ((major, minor), ok) in cases {
            assert_eq!(
                host.accepts(ApiVersion::new(major, minor)),
                ok,
                "{major}.{minor}"
            );
        }
    }

    #[test]
    fn rejection_names_both_versions() {
        let msg = ApiVersion::new(2, 4)
            .incompatibility("X", ApiVersion::new(2, 5))
            .unwrap();
        assert_eq!(
            msg,
            "backend X built against Backend API 2.5, host provides 2.4 (needs major 2, minor <= 4)"
        );
        assert_eq!(
            ApiVersion::new(2, 4).incompatibility("X", ApiVersion::new(2, 0)),
            None
        );
    }
}
