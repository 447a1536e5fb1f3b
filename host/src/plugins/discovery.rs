//! Scanning search directories for plugin candidates (DESIGN §4.3).
//!
//! Deterministic and loud: directories in the given order, entries in byte order of their
//! names, non-recursively; every entry gets a verdict in the report.
//!
//! How a scan stays near the cost of a bare `readdir` (docs/PERFORMANCE.md):
//!
//! 1. Each directory is opened once and listed with `getdents64` (rustix's [`RawDir`]) into
//!    one buffer, reused for every directory.
//! 2. Names are copied into one arena per scan; an entry is a directory index and a range in
//!    it. Its path is built only when asked ([`Scan::file`]).
//! 3. The names that match the rule are sorted and decided at once; the others are sorted
//!    (a radix sort of 12-byte prefixes, the whole name breaking ties) into discovery order
//!    only when [`Scan::entries`] is first called (the report, the `info` log).
//! 4. Only names that match are `stat`ed, relative to the open directory; the resolved
//!    file's mode and owner travel with the candidate, so the trust check does not `stat` it
//!    again.

use std::{
    ffi::{OsStr, OsString},
    ops::Range,
    os::{
        fd::OwnedFd,
        unix::ffi::{OsStrExt, OsStringExt},
    },
    path::{Path, PathBuf},
    sync::OnceLock,
};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RawDir};

use crate::{
    plugins::trust::FileMode,
    report::{NAME_MISMATCH_MESSAGE, ReasonCode, Rejection},
};

/// The file-name rule as a regular expression (the unit tests check [`is_plugin_file_name`]
/// against it).
pub const FILE_NAME_PATTERN: &str = r"^[A-Za-z0-9]+_[A-Za-z0-9]+_backend\.so(\.[0-9]+)*$";

/// `true` iff `name` (an entry's own name, not its link target) is a plugin file name:
/// `<Vendor>_<Name>_backend.so[.N...]`, i.e. [`FILE_NAME_PATTERN`].
///
/// Written out rather than compiled from the pattern: compiling a regex costs ~0.2 ms per
/// process, more than scanning a directory of 64 plugins (see docs/PERFORMANCE.md). Vendor and
/// name cannot contain `_`, so one left-to-right pass decides.
pub fn is_plugin_file_name(name: &[u8]) -> bool {
    // A match ends in `.so` or in a digit: most other names are refused by their last byte
    // (a crowded directory's `notes.txt`, `lib.a`, …), before the pass below.
    if !matches!(name.last(), Some(b'o' | b'0'..=b'9')) {
        return false;
    }
    fn run(s: &[u8], class: fn(&u8) -> bool) -> Option<&[u8]> {
        let n = s.iter().take_while(|b| class(b)).count();
        (n > 0).then(|| &s[n..])
    }
    let parts = run(name, u8::is_ascii_alphanumeric)
        .and_then(|r| r.strip_prefix(b"_"))
        .and_then(|r| run(r, u8::is_ascii_alphanumeric))
        .and_then(|r| r.strip_prefix(b"_backend.so"));
    let Some(mut rest) = parts else { return false };
    while !rest.is_empty() {
        match rest
            .strip_prefix(b".")
            .and_then(|r| run(r, u8::is_ascii_digit))
        {
            Some(r) => rest = r,
            None => return false,
        }
    }
    true
}

/// The `<Name>` part of a plugin file name.
pub fn name_part(name: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(name).ok()?;
    s.split('_').nth(1)
}

/// Why a name that does not match the rule is not a candidate (`name_mismatch`).
pub fn name_mismatch() -> Rejection {
    Rejection::new(ReasonCode::NameMismatch, NAME_MISMATCH_MESSAGE)
}

/// A directory entry: which listed directory, and where its name is in the scan's arena.
/// See [`Scan::file`], [`Scan::name`], [`Scan::dir`] and [`Scan::candidate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    dir: u32,
    start: u32,
    end: u32,
    /// Index in [`Scan::candidates`] when the name matches the rule, else
    /// [`NOT_A_CANDIDATE`] (not an `Option`: 16 bytes an entry, not 20).
    candidate: u32,
}

/// [`Entry::candidate`] of a name that does not match the rule.
const NOT_A_CANDIDATE: u32 = u32::MAX;

/// An entry whose name matches the rule, and what the scan decided before loading.
#[derive(Debug, Clone)]
pub struct Candidate {
    entry: Entry,
    /// The resolved path, when it resolves to something.
    pub canonical: Option<PathBuf>,
    /// For a file to load, its mode and owner (from the scan's `stat`); otherwise why not.
    pub verdict: Result<FileMode, Rejection>,
}

impl Candidate {
    /// The directory entry.
    pub fn entry(&self) -> &Entry {
        &self.entry
    }
}

/// A listed directory: its path as given, its canonical path when it resolves, and where its
/// entries are in the scan.
#[derive(Debug, Clone)]
struct ListedDir {
    path: PathBuf,
    canonical: Option<PathBuf>,
    /// Its names that do not match, in `Scan::others`.
    others: Range<usize>,
    /// Its candidates, in `Scan::candidates`.
    candidates: Range<usize>,
}

/// Everything a scan saw: the entries whose names match the rule (decided and in byte order
/// at once), every entry in discovery order (sorted when first asked), and the directories
/// that could not be listed.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    dirs: Vec<ListedDir>,
    /// Every entry's name, back to back.
    names: Vec<u8>,
    /// The names that do not match (arena ranges), each directory's in listing order.
    others: Vec<(u32, u32)>,
    candidates: Vec<Candidate>,
    /// Every entry in discovery order, built on first use: loading needs only the
    /// candidates, so the sort of the other names is paid by whoever asks for them (the
    /// report, the `info` log).
    entries: OnceLock<Vec<Entry>>,
    unreadable: Vec<(PathBuf, String)>,
}

impl Scan {
    /// Every directory entry in discovery order: directories in the given order, each one's
    /// entries in byte order of their names. Sorted on the first call.
    pub fn entries(&self) -> &[Entry] {
        self.entries.get_or_init(|| {
            let mut all = Vec::with_capacity(self.others.len() + self.candidates.len());
            for (index, dir) in self.dirs.iter().enumerate() {
                let index = u32::try_from(index).expect("checked when listed");
                let others = &self.others[dir.others.clone()];
                // Sorted as small keys, the entries made afterwards.
                let mut keys: Vec<SortKey> = others
                    .iter()
                    .enumerate()
                    .map(|(i, &(start, end))| {
                        let (hi, lo) = sort_key(&self.names[start as usize..end as usize]);
                        SortKey {
                            hi,
                            lo,
                            at: u32::try_from(i).expect("fewer than 2^32 entries"),
                        }
                    })
                    .collect();
                let name_of = |k: &SortKey| {
                    let (start, end) = others[k.at as usize];
                    &self.names[start as usize..end as usize]
                };
                sort_keys(&mut keys, name_of);
                let others = keys.iter().map(|k| {
                    let (start, end) = others[k.at as usize];
                    Entry {
                        dir: index,
                        start,
                        end,
                        candidate: NOT_A_CANDIDATE,
                    }
                });
                // Merge with the candidates, already in byte order; names in one directory
                // are distinct.
                let mut candidates = self.candidates[dir.candidates.clone()].iter().peekable();
                for other in others {
                    while let Some(c) =
                        candidates.next_if(|c| self.name(&c.entry) < self.name(&other))
                    {
                        all.push(c.entry);
                    }
                    all.push(other);
                }
                all.extend(candidates.map(|c| c.entry));
            }
            all
        })
    }

    /// The entries whose names match the rule, in discovery order.
    pub fn candidates(&self) -> &[Candidate] {
        &self.candidates
    }

    /// The entry's scan verdict when its name matches the rule; `None` for `name_mismatch`.
    pub fn candidate(&self, entry: &Entry) -> Option<&Candidate> {
        (entry.candidate != NOT_A_CANDIDATE).then(|| &self.candidates[entry.candidate as usize])
    }

    /// Each directory that could not be listed, and why.
    pub fn unreadable(&self) -> &[(PathBuf, String)] {
        &self.unreadable
    }

    /// The entry's own name.
    pub fn name(&self, entry: &Entry) -> &[u8] {
        &self.names[entry.start as usize..entry.end as usize]
    }

    /// The directory the entry was listed in (as given).
    pub fn dir(&self, entry: &Entry) -> &Path {
        &self.dirs[entry.dir as usize].path
    }

    /// The entry's path as listed: its directory joined with its name (built on each call).
    pub fn file(&self, entry: &Entry) -> PathBuf {
        join(self.dir(entry), self.name(entry))
    }
}

/// `dir.join(name)` for a name without `/`, in one allocation of the exact size.
pub(crate) fn join(dir: &Path, name: &[u8]) -> PathBuf {
    let dir = dir.as_os_str().as_bytes();
    let mut path = Vec::with_capacity(dir.len() + 1 + name.len());
    path.extend_from_slice(dir);
    if !dir.ends_with(b"/") {
        path.push(b'/');
    }
    path.extend_from_slice(name);
    PathBuf::from(OsString::from_vec(path))
}

/// A name's sort key (16 bytes): its first 12 bytes, big-endian, zero-padded, as two
/// integers, and where the name is (an index in its directory's names).
#[derive(Debug, Clone, Copy)]
struct SortKey {
    hi: u64,
    lo: u32,
    at: u32,
}

/// Bytes of a name in its sort key.
const KEY_BYTES: u32 = 12;

/// Below this many names, a comparison sort; from it on, a radix sort.
const RADIX_SORT_FROM: usize = 64;

/// Sorts `keys` into byte order of their names (`name_of`). Many names: a radix sort (least
/// significant byte first, stable) over the bytes of the 12-byte prefixes that are not the
/// same in every key, then each run of equal prefixes by whole name. A comparison sort of
/// 10,000 names cost ~0.6 ms, most of it branches mispredicted on random keys; the radix
/// sort moves each key once per byte that differs (4 passes for `noise_00000.txt`…).
fn sort_keys<'n>(keys: &mut Vec<SortKey>, name_of: impl Fn(&SortKey) -> &'n [u8]) {
    let by_name = |a: &SortKey, b: &SortKey| {
        (a.hi, a.lo)
            .cmp(&(b.hi, b.lo))
            .then_with(|| name_of(a).cmp(name_of(b)))
    };
    if keys.len() < RADIX_SORT_FROM {
        keys.sort_unstable_by(by_name);
        return;
    }
    let first = keys[0];
    let (differ_hi, differ_lo) = keys.iter().fold((0u64, 0u32), |(h, l), k| {
        (h | (k.hi ^ first.hi), l | (k.lo ^ first.lo))
    });
    let mut scratch = vec![first; keys.len()];
    // Byte 11 (the lowest of `lo`) first, byte 0 (the highest of `hi`) last.
    for byte in (0..KEY_BYTES).rev() {
        let (differ, shift) = if byte >= 8 {
            (u64::from(differ_lo), (KEY_BYTES - 1 - byte) * 8)
        } else {
            (differ_hi, (7 - byte) * 8)
        };
        if (differ >> shift) & 0xff == 0 {
            continue;
        }
        let digit = |k: &SortKey| {
            let word = if byte >= 8 { u64::from(k.lo) } else { k.hi };
            ((word >> shift) & 0xff) as usize
        };
        let mut starts = [0usize; 256];
        for k in keys.iter() {
            starts[digit(k)] += 1;
        }
        let mut sum = 0;
        for s in starts.iter_mut() {
            let n = *s;
            *s = sum;
            sum += n;
        }
        for k in keys.iter() {
            let d = digit(k);
            scratch[starts[d]] = *k;
            starts[d] += 1;
        }
        std::mem::swap(keys, &mut scratch);
    }
    // Names longer than 12 bytes can share a prefix: each such run by whole name.
    let mut run = 0;
    while run < keys.len() {
        let end = run
            + keys[run..]
                .iter()
                .take_while(|k| (k.hi, k.lo) == (keys[run].hi, keys[run].lo))
                .count();
        if end - run > 1 {
            keys[run..end].sort_unstable_by(by_name);
        }
        run = end;
    }
}

/// A name's first 12 bytes, big-endian, zero-padded, as two integers. Names hold no NUL byte,
/// so comparing keys and then (on a tie) whole names is byte order, with most comparisons on
/// integers.
fn sort_key(name: &[u8]) -> (u64, u32) {
    let mut prefix = [0u8; KEY_BYTES as usize];
    let n = name.len().min(prefix.len());
    prefix[..n].copy_from_slice(&name[..n]);
    let (hi, lo) = prefix.split_at(8);
    (
        u64::from_be_bytes(hi.try_into().expect("8 bytes")),
        u32::from_be_bytes(lo.try_into().expect("4 bytes")),
    )
}

/// Bytes read by one `getdents64`.
const LISTING_BUFFER: usize = 64 * 1024;

/// Lists `dirs` in order; each directory's candidates in byte order of their names.
/// Identical files (by canonical path) are candidates once; later sightings are
/// `duplicate_file`.
///
/// # Panics
/// When the names of one scan exceed 4 GiB.
pub fn scan(dirs: &[PathBuf]) -> Scan {
    let mut scan = Scan::default();
    let mut buffer: Vec<u8> = Vec::with_capacity(LISTING_BUFFER);
    let mut matching: Vec<(u32, u32)> = Vec::new();
    for dir in dirs {
        matching.clear();
        let others_start = scan.others.len();
        let fd = match list(dir, &mut buffer, &mut scan, &mut matching) {
            Ok(fd) => fd,
            Err(err) => {
                scan.others.truncate(others_start);
                log::warn!("cannot list {}: {err}", dir.display());
                let why = format!("cannot be listed: {err}");
                scan.unreadable.push((dir.clone(), why));
                continue;
            }
        };
        let names = &scan.names;
        matching.sort_unstable_by(|a, b| {
            names[a.0 as usize..a.1 as usize].cmp(&names[b.0 as usize..b.1 as usize])
        });
        let index = u32::try_from(scan.dirs.len()).expect("fewer than 2^32 directories");
        let candidates_start = scan.candidates.len();
        scan.dirs.push(ListedDir {
            path: dir.clone(),
            canonical: std::fs::canonicalize(dir).ok(),
            others: others_start..scan.others.len(),
            candidates: candidates_start..candidates_start,
        });
        for &(start, end) in &matching {
            let entry = Entry {
                dir: index,
                start,
                end,
                candidate: u32::try_from(scan.candidates.len())
                    .ok()
                    .filter(|&i| i != NOT_A_CANDIDATE)
                    .expect("fewer than 2^32 - 1 candidates"),
            };
            let (canonical, verdict) = match resolve(&scan, &fd, &entry) {
                Ok((canonical, file)) => (Some(canonical), Ok(file)),
                Err((canonical, rejection)) => (canonical, Err(rejection)),
            };
            scan.candidates.push(Candidate {
                entry,
                canonical,
                verdict,
            });
        }
        let last = scan.dirs.len() - 1;
        scan.dirs[last].candidates.end = scan.candidates.len();
    }
    scan
}

/// Reads the names of `dir` into the scan's arena with `getdents64` (`.` and `..` left out):
/// those that match the rule into `matching`, the others into `scan.others`. Returns the open
/// directory for the `stat`s that follow.
fn list(
    dir: &Path,
    buffer: &mut Vec<u8>,
    scan: &mut Scan,
    matching: &mut Vec<(u32, u32)>,
) -> std::io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let fd = rustix::fs::open(dir, flags, Mode::empty())?;
    let mut entries = RawDir::new(&fd, buffer.spare_capacity_mut());
    let offset = |n: usize| u32::try_from(n).expect("names of one scan under 4 GiB");
    while let Some(item) = entries.next() {
        let name = match &item {
            Ok(e) => e.file_name().to_bytes(),
            Err(err) => {
                // Nothing more can be read from this directory; what was read is kept.
                let err = std::io::Error::from(*err);
                log::warn!("cannot list the rest of {}: {err}", dir.display());
                break;
            }
        };
        if name == b"." || name == b".." {
            continue;
        }
        let start = offset(scan.names.len());
        scan.names.extend_from_slice(name);
        let range = (start, offset(scan.names.len()));
        if is_plugin_file_name(name) {
            matching.push(range);
        } else {
            scan.others.push(range);
        }
    }
    Ok(fd)
}

/// The canonical path of an entry whose name matches, and its mode and owner; or why it is
/// not a file to load, with the canonical path when known. A plain file's canonical path is
/// its canonical directory joined with its name (one `lstat` relative to the open
/// directory); only links are resolved.
fn resolve(
    scan: &Scan,
    fd: &OwnedFd,
    entry: &Entry,
) -> Result<(PathBuf, FileMode), (Option<PathBuf>, Rejection)> {
    let name = OsStr::from_bytes(scan.name(entry));
    let cannot_stat = |e: rustix::io::Errno| {
        let e = std::io::Error::from(e);
        (
            None,
            Rejection::new(ReasonCode::OpenFailed, format!("cannot stat: {e}")),
        )
    };
    let own = rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW).map_err(cannot_stat)?;
    let is_link = FileType::from_raw_mode(own.st_mode) == FileType::Symlink;
    let (meta, canonical) = match &scan.dirs[entry.dir as usize].canonical {
        Some(dir) if !is_link => (own, dir.join(name)),
        _ => {
            let unresolved = |e: std::io::Error| {
                let message = format!("symbolic link does not resolve: {e}");
                (None, Rejection::new(ReasonCode::DanglingLink, message))
            };
            let meta =
                rustix::fs::statat(fd, name, AtFlags::empty()).map_err(|e| unresolved(e.into()))?;
            (
                meta,
                std::fs::canonicalize(scan.file(entry)).map_err(unresolved)?,
            )
        }
    };
    match FileType::from_raw_mode(meta.st_mode) {
        FileType::RegularFile => {}
        kind => {
            let what = if kind == FileType::Directory {
                "resolves to a directory"
            } else {
                "resolves to a non-regular file"
            };
            return Err((Some(canonical), Rejection::new(ReasonCode::NotAFile, what)));
        }
    }
    // Canonical paths are normal, so equal bytes are the same path (and unequal bytes
    // compare faster than `Path`'s components).
    let first = scan.candidates.iter().find(|c| {
        c.verdict.is_ok()
            && c.canonical
                .as_ref()
                .is_some_and(|c| c.as_os_str() == canonical.as_os_str())
    });
    if let Some(first) = first {
        let first = scan.file(&first.entry);
        let message = format!("same file as {} (already a candidate)", first.display());
        return Err((
            Some(canonical),
            Rejection::new(ReasonCode::DuplicateFile, message),
        ));
    }
    Ok((
        canonical,
        FileMode {
            mode: meta.st_mode,
            uid: meta.st_uid,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file-name table of DESIGN §4.3.
    #[test]
    fn file_name_table() {
        let valid = [
            "Arm_GpuAcc_backend.so",
            "Arm_GpuAcc_backend.so.1",
            "Arm_GpuAcc_backend.so.1.2",
            "Arm_GpuAcc_backend.so.1.2.3",
            "Arm_GpuAcc_backend.so.10.1.27",
            "Arm123_GpuAcc_backend.so",
            "Arm_GpuAcc456_backend.so",
        ];
        let invalid = [
            "Arm_GpuAcc_backend.so.10.1.33.",
            "Arm_GpuAcc_backend.so.3.4..5",
            "Arm_GpuAcc_backend.so.1,1.1",
            "Arm%Co_GpuAcc_backend.so",
            "Arm_Gpu.Acc_backend.so",
            "GpuAcc_backend.so",
            "_GpuAcc_backend.so",
            "Arm__backend.so",
            "Arm_GpuAcc.so",
            "__backend.so",
            "__.so",
            "Arm_GpuAcc_backend",
            "Arm_GpuAcc_backend_v1.2.so",
        ];
        for n in valid {
            assert!(is_plugin_file_name(n.as_bytes()), "{n} should be valid");
        }
        for n in invalid {
            assert!(!is_plugin_file_name(n.as_bytes()), "{n} should be invalid");
        }
        assert!(!is_plugin_file_name(b"Arm_Gpu\xffAcc_backend.so"));
        assert!(!is_plugin_file_name(b""));
        assert_eq!(name_part(b"Arm_GpuAcc_backend.so.1"), Some("GpuAcc"));
    }

    /// Entries come in byte order of their names, including names that share the 12 bytes of
    /// the sort key and names that are not UTF-8; paths are the directory joined with the name;
    /// another name of a candidate is `duplicate_file`.
    #[test]
    fn scan_lists_in_byte_order() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let names: [&[u8]; 12] = [
            b"b",
            b"a",
            b"ab",
            b"aaaaaaaaaaaaaaaa",
            b"aaaaaaaaaaaaaaaaX",
            b"aaaaaaaaaaaaaaaaA",
            b"aaaaaaaaaaaaaaaaA0",
            b"Z",
            b"\xff\x01",
            b"a.b",
            b"Acme_X_backend.so",
            b"Acme_X_backend.so.1",
        ];
        for n in &names[..11] {
            std::fs::write(dir.path().join(OsStr::from_bytes(n)), b"").unwrap();
        }
        std::os::unix::fs::symlink("Acme_X_backend.so", dir.path().join("Acme_X_backend.so.1"))
            .unwrap();
        let mut expected: Vec<&[u8]> = names.to_vec();
        expected.sort();
        let listed = dir.path().to_path_buf();
        let found = scan(std::slice::from_ref(&listed));
        let got: Vec<&[u8]> = found.entries().iter().map(|e| found.name(e)).collect();
        assert_eq!(got, expected);
        for e in found.entries() {
            assert_eq!(found.file(e), listed.join(OsStr::from_bytes(found.name(e))));
        }
        let verdicts: Vec<Option<ReasonCode>> = found
            .candidates()
            .iter()
            .map(|c| c.verdict.as_ref().err().map(|r| r.reason))
            .collect();
        assert_eq!(verdicts, vec![None, Some(ReasonCode::DuplicateFile)]);
        let canonical = std::fs::canonicalize(&listed)
            .unwrap()
            .join("Acme_X_backend.so");
        assert!(
            found
                .candidates()
                .iter()
                .all(|c| c.canonical.as_ref() == Some(&canonical))
        );
        // A directory that cannot be listed is reported, not fatal.
        let missing = listed.join("missing");
        let unlisted = scan(std::slice::from_ref(&missing));
        assert!(unlisted.entries().is_empty());
        assert_eq!(unlisted.unreadable()[0].0, missing);
        assert!(unlisted.unreadable()[0].1.starts_with("cannot be listed: "));
    }

    /// A xorshift64 generator from `seed`: reproducible names for the tests below.
    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    /// Enough names for the radix sort: generated names with long shared prefixes (longer
    /// than the sort key), bytes above 0x7f, every length from 1 to 40, and plugin names
    /// among them, come in byte order, the plugin names merged in.
    #[test]
    fn radix_sorted_listing_is_byte_order() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let alphabet = b"aAzZ09._-~\x01\x7f\x80\xc3\xff";
        let mut next = xorshift(0x2545_F491_4F6C_DD1D);
        let mut names: Vec<Vec<u8>> = Vec::new();
        for i in 0..3000 {
            let len = 1 + (next() % 40) as usize;
            let mut name: Vec<u8> = match i % 3 {
                0 => b"shared_prefix_of_many_".to_vec(),
                1 => b"shared_pre".to_vec(),
                _ => Vec::new(),
            };
            name.extend((0..len).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]));
            name.truncate(255);
            if name == b"." || name == b".." || name.contains(&b'/') {
                continue;
            }
            names.push(name);
        }
        for n in 0..20 {
            names.push(format!("Acme_P{n}_backend.so").into_bytes());
        }
        names.sort();
        names.dedup();
        for n in &names {
            std::fs::write(dir.path().join(OsStr::from_bytes(n)), b"").unwrap();
        }
        let listed = dir.path().to_path_buf();
        let found = scan(std::slice::from_ref(&listed));
        let got: Vec<&[u8]> = found.entries().iter().map(|e| found.name(e)).collect();
        let want: Vec<&[u8]> = names.iter().map(Vec::as_slice).collect();
        assert_eq!(got, want);
        assert_eq!(found.candidates().len(), 20);
        for e in found.entries() {
            let is_candidate = found.candidate(e).is_some();
            assert_eq!(is_candidate, is_plugin_file_name(found.name(e)));
        }
    }

    /// The hand-written matcher agrees with the regular expression on generated names.
    #[test]
    fn matcher_agrees_with_the_pattern() {
        let re = regex::bytes::Regex::new(FILE_NAME_PATTERN).unwrap();
        let alphabet = b"Aa09_.%backendso\xff";
        let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
        let mut accepted = 0;
        for _ in 0..200_000 {
            let len = (next() % 24) as usize;
            let mut name: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            if next().is_multiple_of(3) {
                // Splice in the fixed part so that valid names are common too.
                let at = (next() as usize) % (name.len() + 1);
                name.splice(at..at, b"_backend.so".iter().copied());
            }
            let expected = re.is_match(&name);
            accepted += usize::from(expected);
            assert_eq!(
                is_plugin_file_name(&name),
                expected,
                "{:?}",
                String::from_utf8_lossy(&name)
            );
        }
        assert!(accepted > 100, "only {accepted} generated names were valid");
    }
}
