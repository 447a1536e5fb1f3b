//! The container of a compiled network file: a fixed header, a table of sections, and the
//! sections, each at a 64-byte aligned offset with its own CRC-32. This layer knows nothing of
//! networks: it writes byte sections and, reading, checks every bound and every checksum
//! before it hands a section out. Everything in it reads untrusted bytes.
//!
//! ```text
//! offset  size  field (little-endian)
//!      0     8  magic "BPNET\r\n\x1a" (a text-mode transfer or a truncated first line shows)
//!      8     4  container version (2; version 1 files, without seals, are read too)
//!     12     4  number of sections n (at most MAX_SECTIONS)
//!     16     4  CRC-32 of the section table
//!     20     4  0
//!     24  32*n  the table: per section kind u32, 0 u32, offset u64, length u64, CRC-32 u32, 0 u32
//!      …        the sections, each at a multiple of 64, zero padding between
//! ```

use std::ops::Range;

/// The first bytes of every compiled network file.
pub const MAGIC: &[u8; 8] = b"BPNET\r\n\x1a";

/// The container version this host writes. Version 2 added the seals section; the network
/// section is as in version 1, whose files this host reads too (their prepared workloads,
/// unsealed, are not used).
pub const CONTAINER_VERSION: u32 = 2;

/// The oldest container version this host reads.
pub const OLDEST_READ: u32 = 1;

/// Sections start at multiples of this (and constants and blobs inside their sections too):
/// enough for any element type and for the widest vector loads.
pub const ALIGN: usize = 64;

/// The most sections a file may have (a network, its constants, one blob section per backend).
pub const MAX_SECTIONS: u32 = 256;

const HEADER: usize = 24;
const ENTRY: usize = 32;

/// What a section holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum SectionKind {
    /// The optimised network, serialised (postcard).
    Network = 1,
    /// The constants' bytes, each at a multiple of [`ALIGN`].
    Constants = 2,
    /// One backend's prepared workloads, each at a multiple of [`ALIGN`].
    Blobs = 3,
    /// The seal of each prepared workload (container version 2).
    Seals = 4,
}

impl SectionKind {
    fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(Self::Network),
            2 => Some(Self::Constants),
            3 => Some(Self::Blobs),
            4 => Some(Self::Seals),
            _ => None,
        }
    }
}

/// Why a file is not a readable compiled network: each names what is wrong and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContainerError {
    /// Too short for the header, or another file type.
    #[error("not a compiled network (no BPNET header)")]
    NotCompiled,
    /// Written by a host with another container version.
    #[error(
        "container version {found}, this host reads versions {OLDEST_READ} to \
         {CONTAINER_VERSION}"
    )]
    Version {
        /// The file's version.
        found: u32,
    },
    /// The table does not fit the file, or its checksum does not match.
    #[error("the section table is damaged: {0}")]
    Table(String),
    /// A section is out of bounds, misaligned, of an unknown kind, or its checksum differs.
    #[error("section {index} ({kind}): {reason}")]
    Section {
        /// The section's place in the table.
        index: usize,
        /// Its kind as written.
        kind: String,
        /// What is wrong.
        reason: String,
    },
}

/// One section as read: its kind and the byte range it covers in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// What it holds.
    pub kind: SectionKind,
    /// Where it is in the file.
    pub range: Range<usize>,
}

/// `n` rounded up to a multiple of [`ALIGN`]; `None` on overflow.
pub fn aligned(n: usize) -> Option<usize> {
    n.checked_next_multiple_of(ALIGN)
}

/// The CRC-32 (IEEE) of `bytes`.
pub fn checksum(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// Writes the sections `(kind, bytes)` in order as one file's bytes.
pub fn write(sections: &[(SectionKind, &[u8])]) -> Vec<u8> {
    let table_end = HEADER + ENTRY * sections.len();
    let mut offsets = Vec::with_capacity(sections.len());
    let mut at = aligned(table_end).expect("a table fits in memory");
    let mut end = table_end;
    for (_, bytes) in sections {
        offsets.push(at);
        end = at + bytes.len();
        at = aligned(end).expect("the sections fit in memory");
    }
    // The file ends where its last section does (no padding after it), so that a file cut
    // short by any byte is missing part of a section.
    let mut out = vec![0u8; end];
    let mut table = Vec::with_capacity(ENTRY * sections.len());
    for ((kind, bytes), &offset) in sections.iter().zip(&offsets) {
        table.extend_from_slice(&(*kind as u32).to_le_bytes());
        table.extend_from_slice(&0u32.to_le_bytes());
        table.extend_from_slice(&(offset as u64).to_le_bytes());
        table.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        table.extend_from_slice(&checksum(bytes).to_le_bytes());
        table.extend_from_slice(&0u32.to_le_bytes());
        out[offset..offset + bytes.len()].copy_from_slice(bytes);
    }
    out[..8].copy_from_slice(MAGIC);
    out[8..12].copy_from_slice(&CONTAINER_VERSION.to_le_bytes());
    out[12..16].copy_from_slice(&(sections.len() as u32).to_le_bytes());
    out[16..20].copy_from_slice(&checksum(&table).to_le_bytes());
    out[HEADER..table_end].copy_from_slice(&table);
    out
}

/// `true` when `bytes` starts like a compiled network (the magic only).
pub fn looks_compiled(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// Reads the header and the table of `file` (the whole file's bytes) and checks every
/// section: in bounds, aligned, of a known kind, not overlapping the table or each other, and
/// with the checksum written for it. Nothing is allocated beyond the list of sections, whose
/// length the file's own size bounds.
///
/// # Errors
/// [`ContainerError`] naming what is wrong.
pub fn read(file: &[u8]) -> Result<Vec<Section>, ContainerError> {
    if file.len() < HEADER || !looks_compiled(file) {
        return Err(ContainerError::NotCompiled);
    }
    let version = u32_at(file, 8);
    if !(OLDEST_READ..=CONTAINER_VERSION).contains(&version) {
        return Err(ContainerError::Version { found: version });
    }
    let count = u32_at(file, 12);
    if count > MAX_SECTIONS {
        return Err(ContainerError::Table(format!(
            "{count} sections (at most {MAX_SECTIONS})"
        )));
    }
    let table_end = HEADER + ENTRY * count as usize;
    let table = file.get(HEADER..table_end).ok_or_else(|| {
        ContainerError::Table(format!(
            "{count} sections need a table up to byte {table_end}, the file has {}",
            file.len()
        ))
    })?;
    if checksum(table) != u32_at(file, 16) {
        return Err(ContainerError::Table("checksum mismatch".to_owned()));
    }
    let mut sections: Vec<Section> = Vec::with_capacity(count as usize);
    for index in 0..count as usize {
        let e = &table[index * ENTRY..(index + 1) * ENTRY];
        let raw_kind = u32_at(e, 0);
        let fail = |reason: String| ContainerError::Section {
            index,
            kind: SectionKind::from_u32(raw_kind)
                .map_or_else(|| format!("unknown kind {raw_kind}"), |k| format!("{k:?}")),
            reason,
        };
        let kind = SectionKind::from_u32(raw_kind).ok_or_else(|| fail("unknown kind".into()))?;
        let (offset, length) = (u64_at(e, 8), u64_at(e, 16));
        let range = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(length).ok())
            .and_then(|(o, l)| Some(o..o.checked_add(l)?))
            .filter(|r| r.end <= file.len())
            .ok_or_else(|| {
                fail(format!(
                    "bytes {offset}+{length} are past the end of the file ({} bytes)",
                    file.len()
                ))
            })?;
        if range.start % ALIGN != 0 {
            return Err(fail(format!(
                "offset {offset} is not a multiple of {ALIGN}"
            )));
        }
        if range.start < table_end {
            return Err(fail(format!(
                "offset {offset} overlaps the header and table"
            )));
        }
        if let Some(other) = sections
            .iter()
            .position(|s| s.range.start < range.end && range.start < s.range.end)
        {
            return Err(fail(format!("overlaps section {other}")));
        }
        if checksum(&file[range.clone()]) != u32_at(e, 24) {
            return Err(fail("checksum mismatch: the file is damaged".to_owned()));
        }
        sections.push(Section { kind, range });
    }
    Ok(sections)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_round_trip_aligned() {
        let a = [1u8, 2, 3];
        let b = vec![7u8; 100];
        let file = write(&[(SectionKind::Network, &a), (SectionKind::Constants, &b)]);
        let sections = read(&file).unwrap();
        assert_eq!(sections.len(), 2);
        assert_eq!(&file[sections[0].range.clone()], &a);
        assert_eq!(&file[sections[1].range.clone()], &b[..]);
        for s in &sections {
            assert_eq!(s.range.start % ALIGN, 0);
        }
        assert_eq!(file.len(), sections[1].range.end);
    }

    #[test]
    fn every_damage_is_an_error() {
        let b = vec![7u8; 100];
        let file = write(&[(SectionKind::Constants, &b)]);
        assert_eq!(read(b"ONNX"), Err(ContainerError::NotCompiled));
        assert_eq!(read(&file[..20]), Err(ContainerError::NotCompiled));
        // Truncated: the section runs past the end.
        let cut = &file[..file.len() - 50];
        assert!(
            matches!(read(cut), Err(ContainerError::Section { ref reason, .. }) if reason.contains("past the end")),
            "{:?}",
            read(cut)
        );
        // One flipped bit in a section's bytes.
        let mut flipped = file.clone();
        let at = read(&file).unwrap()[0].range.start + 10;
        flipped[at] ^= 1;
        assert!(
            matches!(read(&flipped), Err(ContainerError::Section { ref reason, .. }) if reason.contains("checksum")),
        );
        // A damaged table.
        let mut table = file.clone();
        table[HEADER + 9] ^= 0x40;
        assert_eq!(
            read(&table),
            Err(ContainerError::Table("checksum mismatch".into()))
        );
        // Another container version.
        let mut v = file.clone();
        v[8] = 9;
        assert_eq!(read(&v), Err(ContainerError::Version { found: 9 }));
        // More sections than allowed.
        let mut many = file;
        many[12..16].copy_from_slice(&(MAX_SECTIONS + 1).to_le_bytes());
        assert!(matches!(read(&many), Err(ContainerError::Table(_))));
    }

    /// A table whose entries are forged consistently (checksums recomputed) is still refused
    /// when a section overlaps the table or another section, or is misaligned.
    #[test]
    fn forged_tables_are_refused() {
        let b = vec![5u8; 128];
        let file = write(&[(SectionKind::Constants, &b), (SectionKind::Blobs, &b)]);
        let forge = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut f = file.clone();
            edit(&mut f);
            let table = f[HEADER..HEADER + 2 * ENTRY].to_vec();
            f[16..20].copy_from_slice(&checksum(&table).to_le_bytes());
            read(&f)
        };
        // The second section placed on the first.
        let first = u64_at(&file, HEADER + 8);
        let overlap = forge(&|f| {
            f[HEADER + ENTRY + 8..HEADER + ENTRY + 16].copy_from_slice(&first.to_le_bytes())
        });
        assert!(
            matches!(overlap, Err(ContainerError::Section { index: 1, ref reason, .. }) if reason.contains("overlaps section 0")),
            "{overlap:?}"
        );
        let odd =
            forge(&|f| f[HEADER + 8..HEADER + 16].copy_from_slice(&(first + 1).to_le_bytes()));
        assert!(
            matches!(odd, Err(ContainerError::Section { index: 0, ref reason, .. }) if reason.contains("multiple of 64")),
            "{odd:?}"
        );
        let on_table = forge(&|f| f[HEADER + 8..HEADER + 16].copy_from_slice(&0u64.to_le_bytes()));
        assert!(
            matches!(on_table, Err(ContainerError::Section { index: 0, ref reason, .. }) if reason.contains("overlaps the header")),
            "{on_table:?}"
        );
        let huge = forge(&|f| f[HEADER + 16..HEADER + 24].copy_from_slice(&u64::MAX.to_le_bytes()));
        assert!(
            matches!(huge, Err(ContainerError::Section { index: 0, ref reason, .. }) if reason.contains("past the end")),
            "{huge:?}"
        );
    }
}
