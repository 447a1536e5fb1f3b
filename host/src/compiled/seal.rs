//! Seals: what binds a prepared workload to the layer and constants it was made from.
//!
//! A backend's blob is opaque to the host, and a checksum proves nothing (anyone can write a
//! CRC-32 or a SHA-256 again). So each blob is sealed with a key only its compiler holds: an
//! HMAC-SHA256 over the layer (its index, descriptor and tensors), the bytes of every constant
//! the workload is given, the backend's id, the blob's format version and the blob. Loading
//! checks each seal with the runtime's key ([`SealKey`]) before a blob reaches its backend; a
//! blob whose seal does not hold (another key, a changed blob, changed constants, a changed
//! layer, no seal at all) is not used: the workload is created from the layer instead, as if
//! nothing had been prepared, and the network's notes say so. A forger who changes the floats
//! of a prepared weight and re-seals every checksum changes nothing the network computes.
//!
//! The key is 32 random bytes in a file of the user's (`BACKPLANE_SEAL_KEY`, else
//! `$XDG_CONFIG_HOME/backplane/seal.key`, else `~/.config/backplane/seal.key`), written as 64
//! hexadecimal digits, readable by its owner only; compiling creates it when it is missing.
//! A file compiled with another key (on another machine, by another user) loads and computes
//! the same answers, with its workloads prepared at load. To share prepared workloads between
//! machines, give them the same key file.
//!
//! The seals travel in a section of their own ([`SectionKind::Seals`](super::container::SectionKind)):
//! per sealed layer its index (u32, little-endian), four zero bytes and the 32-byte tag.

use std::{
    io::{Read, Write},
    os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt},
    path::{Path, PathBuf},
};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::{
    graph::network::{Layer, Network},
    plugins::trust::{parse_sha256, to_hex},
    sys::loader::effective_uid,
};

/// One seal: an HMAC-SHA256 tag.
pub type Seal = [u8; 32];

/// Bytes per entry of the seals section: layer index, four zero bytes, tag.
const ENTRY: usize = 40;

/// What goes first into every seal: the format of what follows.
const DOMAIN: &[u8] = b"backplane prepared-workload seal 1\0";

/// Why the seal key could not be read or made.
#[derive(Debug, thiserror::Error)]
pub enum SealKeyError {
    /// The file could not be read, created or written.
    #[error("seal key {}: {source}", path.display())]
    Io {
        /// The key file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a key only its owner can use, or does not hold one.
    #[error("seal key {}: {reason}", path.display())]
    Unusable {
        /// The key file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// A prepared workload and what it was made for: what a seal covers.
#[derive(Debug, Clone, Copy)]
pub struct Prepared<'a> {
    /// The network that holds the layer.
    pub network: &'a Network,
    /// The layer's index in it.
    pub layer: usize,
    /// The backend that prepared it.
    pub backend: &'a str,
    /// Its format version.
    pub version: u32,
    /// Its bytes.
    pub blob: &'a [u8],
}

/// The key that seals prepared workloads: 32 secret bytes.
#[derive(Clone)]
pub struct SealKey([u8; 32]);

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(..)")
    }
}

impl SealKey {
    /// A key of these bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The key in `path`: a regular file of this process's user, readable and writable by
    /// that user only (mode `0600` or stricter, as `ssh` asks of its keys), holding 64
    /// hexadecimal digits (a final newline allowed).
    ///
    /// # Errors
    /// [`SealKeyError`] naming the file and what is wrong with it.
    pub fn read(path: &Path) -> Result<Self, SealKeyError> {
        let io = |source| SealKeyError::Io {
            path: path.to_owned(),
            source,
        };
        let unusable = |reason: String| SealKeyError::Unusable {
            path: path.to_owned(),
            reason,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(unusable("not a regular file".to_owned()));
        }
        if meta.uid() != effective_uid() {
            return Err(unusable(format!(
                "owned by uid {}, not by this user (uid {})",
                meta.uid(),
                effective_uid()
            )));
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(unusable(format!(
                "group or others may use it (mode {mode:o}); `chmod 600` it"
            )));
        }
        let mut text = String::new();
        file.take(80).read_to_string(&mut text).map_err(io)?;
        parse_sha256(&text)
            .map(Self)
            .ok_or_else(|| unusable("does not hold 64 hexadecimal digits".to_owned()))
    }

    /// The key in `path`, made first when the file does not exist: 32 bytes from the
    /// operating system's random source, written to a new file (mode `0600`, its folder made
    /// `0700` when missing) that is linked to `path` only if nothing is there yet, so two
    /// processes making it at once end with one key.
    ///
    /// # Errors
    /// As [`SealKey::read`]; [`SealKeyError::Io`] when the key cannot be made.
    pub fn read_or_create(path: &Path) -> Result<Self, SealKeyError> {
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            _ => return Self::read(path),
        }
        let io = |source| SealKeyError::Io {
            path: path.to_owned(),
            source,
        };
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io)?;
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| io(std::io::Error::other(e.to_string())))?;
        let mut new = tempfile::Builder::new()
            .prefix(".seal-key-")
            .permissions(std::fs::Permissions::from_mode(0o600))
            .tempfile_in(dir)
            .map_err(io)?;
        writeln!(new, "{}", to_hex(&key)).map_err(io)?;
        new.as_file().sync_all().map_err(io)?;
        match new.persist_noclobber(path) {
            Ok(_) => {
                log::info!("seal key made: {}", path.display());
                Ok(Self(key))
            }
            // Another process made it first: use that one.
            Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => Self::read(path),
            Err(e) => Err(io(e.error)),
        }
    }

    /// The seal of `prepared`: over its layer's descriptor, input and output tensors, the
    /// bytes of each constant input, the backend, the format version and the blob.
    pub fn seal(&self, prepared: &Prepared<'_>) -> Seal {
        self.mac(prepared).finalize().into_bytes().into()
    }

    /// `true` when `seal` is [`SealKey::seal`]'s for `prepared`, compared in a time that
    /// does not depend on where they differ.
    pub fn verify(&self, prepared: &Prepared<'_>, seal: &Seal) -> bool {
        self.mac(prepared).verify_slice(seal).is_ok()
    }

    fn mac(&self, prepared: &Prepared<'_>) -> Hmac<Sha256> {
        let Prepared {
            network,
            layer: index,
            backend,
            version,
            blob,
        } = *prepared;
        let layer: &Layer = &network.layers()[index];
        let parts = network.workload_inputs(layer);
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        // Every part with its length first, so that no two different inputs make one stream.
        fn chunk(mac: &mut Hmac<Sha256>, bytes: &[u8]) {
            mac.update(&(bytes.len() as u64).to_le_bytes());
            mac.update(bytes);
        }
        chunk(&mut mac, DOMAIN);
        chunk(&mut mac, backend.as_bytes());
        chunk(&mut mac, &version.to_le_bytes());
        chunk(&mut mac, &(index as u64).to_le_bytes());
        let shape = postcard::to_allocvec(&(&*layer.descriptor, &parts.infos, &layer.outputs))
            .expect("a layer serialises");
        chunk(&mut mac, &shape);
        for value in &parts.values {
            match value {
                Some(bytes) => {
                    mac.update(&[1]);
                    chunk(&mut mac, bytes);
                }
                None => mac.update(&[0]),
            }
        }
        chunk(&mut mac, blob);
        mac
    }
}

/// The seals section's bytes: `(layer, seal)` in layer order.
pub(super) fn encode(seals: &[(usize, Seal)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(seals.len() * ENTRY);
    for (layer, seal) in seals {
        out.extend_from_slice(&(*layer as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(seal);
    }
    out
}

/// Per layer of a network of `layers` layers, its seal, from a seals section.
///
/// # Errors
/// What is wrong with the section: a length that is not a whole number of entries, a layer
/// out of range or sealed twice, nonzero padding.
pub(super) fn decode(bytes: &[u8], layers: usize) -> Result<Vec<Option<Seal>>, String> {
    if !bytes.len().is_multiple_of(ENTRY) {
        return Err(format!(
            "the seals section has {} bytes, not a multiple of {ENTRY}",
            bytes.len()
        ));
    }
    let mut seals = vec![None; layers];
    for entry in bytes.chunks_exact(ENTRY) {
        let layer = u32::from_le_bytes(entry[..4].try_into().expect("4 bytes")) as usize;
        if entry[4..8] != [0; 4] {
            return Err(format!("the seal of layer {layer} has nonzero padding"));
        }
        let slot = seals
            .get_mut(layer)
            .ok_or_else(|| format!("a seal for layer {layer}, of {layers}"))?;
        if slot.is_some() {
            return Err(format!("layer {layer} is sealed twice"));
        }
        *slot = Some(entry[8..].try_into().expect("32 bytes"));
    }
    Ok(seals)
}

#[cfg(test)]
#[path = "seal_tests.rs"]
mod tests;
