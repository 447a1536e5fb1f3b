//! Prepared weights shared by every workload that prepares the same weights the same way,
//! in any network of this process: Winograd's transformed filters, panels packed for
//! products with few rows, and folded weights.
//!
//! A host that runs one model at several input shapes (a session's plans, one per shape)
//! creates the model's workloads once per shape; the weights are the same each time. Here
//! the second workload finds what the first prepared instead of making (and holding) its own
//! copy. Entries are keyed by what was prepared (a tag and its dimensions), the source's
//! length and a 64-bit digest of its bits under keys drawn at random by each process, and are
//! held weakly: prepared weights live as long
//! as a workload uses them, and a later load makes them again.

use std::{
    hash::Hasher,
    ops::Deref,
    sync::{Arc, Mutex, Weak},
};

/// Prepared weights, shared ([`shared`]); they deref to their elements.
#[derive(Debug)]
pub(crate) struct Prepared {
    values: Vec<f32>,
    /// The digest of `values` themselves, when it was computed (weights shared as they are,
    /// [`shared_owned`] and [`shared_bytes`]): what a later preparation of these weights
    /// ([`shared_from`]) is keyed by, without reading them again.
    digest: Option<u64>,
}

impl Deref for Prepared {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        &self.values
    }
}

impl Prepared {
    /// Weights that were not prepared (empty, or kept as they are), not shared.
    pub(crate) fn own(values: Vec<f32>) -> Arc<Self> {
        Arc::new(Self {
            values,
            digest: None,
        })
    }
}

/// What was prepared, its dimensions (unused ones 0), the source's length and digest.
type Key = (&'static str, [usize; 3], usize, u64);

/// Every entry, held weakly: the elements of prepared weights no workload holds any more are
/// freed with their last `Arc` (a `Weak` keeps only the `Arc`'s header), and their entries
/// are dropped at the next insertion. A plain list: a process holds a few hundred.
static ENTRIES: Mutex<Vec<(Key, Weak<Prepared>)>> = Mutex::new(Vec::new());

fn entries() -> std::sync::MutexGuard<'static, Vec<(Key, Weak<Prepared>)>> {
    ENTRIES.lock().unwrap_or_else(|e| e.into_inner())
}

fn find(entries: &[(Key, Weak<Prepared>)], key: &Key) -> Option<Arc<Prepared>> {
    entries
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, w)| w.upgrade())
}

/// SipHash of the bits of `source`, keyed by this process's own random keys (the standard
/// library's `RandomState`, drawn once): with keys nobody outside the process knows, no file
/// can be crafted so that other weights find these prepared ones (with fixed keys, a forger
/// could search offline for weights whose digest collides with a model's, and have a later
/// workload run with the prepared weights of the first).
fn digest(source: &[f32]) -> u64 {
    digest_bytes(backplane_api::bytemuck::cast_slice(source))
}

/// [`digest`] of the elements whose bytes are `bytes` (little-endian f32s: a constant's bytes
/// as the host hands them, and the elements' own bytes on the little-endian targets CpuFast
/// builds for, so both name the same weights alike).
pub(crate) fn digest_bytes(bytes: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    static KEYS: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
    let mut h = KEYS.get_or_init(std::hash::RandomState::new).build_hasher();
    h.write(bytes);
    h.finish()
}

/// The prepared form of `source` that `tag` with `dims` names (`len` elements): one made
/// earlier by any workload of this process and still in use, else `make()`'s, kept for later
/// ones. While a workload is prepared ahead of time ([`record`]) every prepared form is also
/// recorded; while one is restored ([`replay`]) the recorded forms are taken instead, in the
/// same order, without reading `source` at all.
pub(crate) fn shared(
    tag: &'static str,
    dims: [usize; 3],
    source: &[f32],
    len: usize,
    make: impl FnOnce() -> Vec<f32>,
) -> Arc<Prepared> {
    shared_keyed(tag, dims, source.len(), || digest(source), len, make)
}

/// [`shared`] of a source of `source_len` elements whose digest `digest()` gives (read only
/// when the form is looked up, not while a workload is restored).
pub(crate) fn shared_keyed(
    tag: &'static str,
    dims: [usize; 3],
    source_len: usize,
    digest: impl FnOnce() -> u64,
    len: usize,
    make: impl FnOnce() -> Vec<f32>,
) -> Arc<Prepared> {
    let stored = STORED.contains(&tag);
    if stored && let Some(restored) = MODE.with_borrow_mut(|m| m.take_replayed(tag, dims, len)) {
        return restored;
    }
    let made = find_or_insert((tag, dims, source_len, digest()), None, make);
    debug_assert_eq!(made.len(), len, "{tag} {dims:?}");
    if stored {
        MODE.with_borrow_mut(|m| m.record(tag, dims, &made));
    }
    made
}

/// [`shared`] of `source` when it is itself shared weights: keyed by the digest they were
/// shared under when it is known, instead of reading them again.
pub(crate) fn shared_from(
    tag: &'static str,
    dims: [usize; 3],
    source: &Prepared,
    len: usize,
    make: impl FnOnce() -> Vec<f32>,
) -> Arc<Prepared> {
    let d = || source.digest.unwrap_or_else(|| digest(source));
    shared_keyed(tag, dims, source.len(), d, len, make)
}

/// The elements of little-endian f32 `bytes` (a constant's or a tensor's, as the host hands
/// them).
pub(crate) fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The prepared forms a blob carries: those that cost more to make than to read
/// (Winograd's filter transform, the panels of packed products). Folded weights are made
/// anyway before they are shared ([`shared_owned`]), so a blob would only double them.
const STORED: [&str; 4] = [
    "winograd",
    "packed-row-major",
    "packed-transposed",
    "packed-strided",
];

/// Whether weights shared as they are (not stored in a blob) are taken as given: while a
/// workload is restored, and (noted) while one is recorded.
/// Whether this thread neither records nor replays prepared forms: only then may a workload
/// prepare forms on other threads (the recording and the replay follow this thread's order).
pub(crate) fn on_any_thread() -> bool {
    MODE.with_borrow(|m| matches!(m, Mode::Normal))
}

fn taken_as_given() -> bool {
    MODE.with_borrow_mut(|m| match m {
        Mode::Replay { .. } => true,
        Mode::Record(_, _, used) => {
            *used = true;
            false
        }
        Mode::Normal => false,
    })
}

/// [`shared`] for weights already made (folded weights), taken as they are: no copy when they
/// are not found shared.
pub(crate) fn shared_owned(tag: &'static str, dims: [usize; 3], values: Vec<f32>) -> Arc<Prepared> {
    debug_assert!(!STORED.contains(&tag), "{tag} is made, never stored");
    if taken_as_given() {
        return Prepared::own(values);
    }
    let d = digest(&values);
    find_or_insert((tag, dims, values.len(), d), Some(d), || values)
}

/// [`shared_owned`] for weights that are a constant's little-endian f32 `bytes` as they are:
/// found shared without copying them, made from them when not.
pub(crate) fn shared_bytes(tag: &'static str, dims: [usize; 3], bytes: &[u8]) -> Arc<Prepared> {
    debug_assert!(!STORED.contains(&tag), "{tag} is made, never stored");
    if taken_as_given() {
        return Prepared::own(floats(bytes));
    }
    let d = digest_bytes(bytes);
    find_or_insert((tag, dims, bytes.len() / 4, d), Some(d), || floats(bytes))
}

/// The entry of `key`, else `make()`'s, kept under `key`; `own` is the digest of the made
/// values themselves when `key`'s is.
fn find_or_insert(key: Key, own: Option<u64>, make: impl FnOnce() -> Vec<f32>) -> Arc<Prepared> {
    if let Some(found) = find(&entries(), &key) {
        return found;
    }
    let made = Arc::new(Prepared {
        values: make(),
        digest: own,
    });
    let mut entries = entries();
    if let Some(found) = find(&entries, &key) {
        return found; // made meanwhile by another thread: one copy is kept
    }
    entries.retain(|(_, w)| w.strong_count() > 0);
    entries.push((key, Arc::downgrade(&made)));
    made
}

/// The format version of CpuFast's prepared-workload blobs (its `PreparedWorkloadVersion`).
pub(crate) const BLOB_VERSION: u32 = 1;

/// A blob's first four bytes.
const BLOB_MAGIC: &[u8; 4] = b"CFPW";

/// Each entry's header: the tag (24 bytes, zero-padded), three dimensions and the length
/// (`u64` each).
const ENTRY_HEADER: usize = 24 + 4 * 8;

/// One prepared form as a blob holds it: what it is, and its elements' bytes.
#[derive(Debug)]
struct Entry<'a> {
    tag: String,
    dims: [usize; 3],
    data: &'a [u8],
}

/// What [`shared`] does besides sharing, on this thread.
#[derive(Default)]
enum Mode {
    /// Nothing.
    #[default]
    Normal,
    /// Appends every prepared form (tag, dimensions, elements) to the blob being made, counts
    /// them, and notes whether the workload prepared anything at all (then even a blob of no
    /// entries saves the digests at restore).
    Record(Vec<u8>, u32, bool),
    /// Takes prepared forms from a blob, in order; `mismatched` once one did not fit.
    Replay {
        entries: Vec<(String, [usize; 3], Vec<f32>)>,
        next: usize,
        mismatched: Option<String>,
    },
}

thread_local! {
    static MODE: std::cell::RefCell<Mode> = std::cell::RefCell::default();
}

impl Mode {
    fn record(&mut self, tag: &str, dims: [usize; 3], made: &[f32]) {
        if let Mode::Record(blob, count, used) = self {
            *used = true;
            let mut name = [0u8; 24];
            name[..tag.len()].copy_from_slice(tag.as_bytes());
            blob.extend_from_slice(&name);
            for d in dims.into_iter().chain([made.len()]) {
                blob.extend_from_slice(&(d as u64).to_le_bytes());
            }
            blob.extend_from_slice(backplane_api::bytemuck::cast_slice(made));
            *count += 1;
        }
    }

    fn take_replayed(&mut self, tag: &str, dims: [usize; 3], len: usize) -> Option<Arc<Prepared>> {
        let Mode::Replay {
            entries,
            next,
            mismatched,
        } = self
        else {
            return None;
        };
        if mismatched.is_some() {
            return None;
        }
        match entries.get_mut(*next) {
            Some((t, d, data)) if t == tag && *d == dims && data.len() == len => {
                *next += 1;
                Some(Prepared::own(std::mem::take(data)))
            }
            other => {
                *mismatched = Some(match other {
                    Some((t, d, data)) => format!(
                        "entry {next} is {t} {d:?} of {} elements, the layer prepares {tag} \
                         {dims:?} of {len}",
                        data.len()
                    ),
                    None => format!("the blob has {} entries, the layer prepares more", *next),
                });
                None
            }
        }
    }
}

/// Resets this thread's mode when dropped (on every way out, a panic included).
struct Reset;

impl Drop for Reset {
    fn drop(&mut self) {
        MODE.with_borrow_mut(|m| *m = Mode::Normal);
    }
}

/// Runs `create` (a workload's creation) recording every prepared form it makes: the blob of
/// them, or `None` when it prepared nothing at all.
pub(crate) fn record<T>(create: impl FnOnce() -> T) -> (T, Option<Vec<u8>>) {
    MODE.with_borrow_mut(|m| *m = Mode::Record(Vec::new(), 0, false));
    let _reset = Reset;
    let made = create();
    let (blob, count) = match MODE.with_borrow_mut(std::mem::take) {
        Mode::Record(blob, count, true) => (blob, count),
        _ => return (made, None),
    };
    let mut out = Vec::with_capacity(8 + blob.len());
    out.extend_from_slice(BLOB_MAGIC);
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&blob);
    (made, Some(out))
}

/// Reads a blob [`record`] made, checking every length against the blob's own size: the
/// entries, or why the blob is not one.
fn blob_entries(blob: &[u8]) -> Result<Vec<Entry<'_>>, String> {
    let rest = blob
        .strip_prefix(BLOB_MAGIC)
        .ok_or("not a CpuFast prepared workload (no CFPW header)")?;
    let (count, mut rest) = rest
        .split_first_chunk::<4>()
        .ok_or("truncated before its entry count")?;
    let count = u32::from_le_bytes(*count) as usize;
    if count > rest.len() / ENTRY_HEADER {
        return Err(format!("{count} entries in {} bytes", rest.len()));
    }
    let mut out = Vec::with_capacity(count);
    for k in 0..count {
        let (head, tail) = rest
            .split_at_checked(ENTRY_HEADER)
            .ok_or_else(|| format!("entry {k}: truncated header"))?;
        let tag = std::str::from_utf8(&head[..24])
            .map_err(|_| format!("entry {k}: the tag is not UTF-8"))?
            .trim_end_matches('\0')
            .to_owned();
        let word = |i: usize| {
            let v = u64::from_le_bytes(head[24 + 8 * i..32 + 8 * i].try_into().expect("8 bytes"));
            usize::try_from(v).map_err(|_| format!("entry {k}: {v} is too large"))
        };
        let dims = [word(0)?, word(1)?, word(2)?];
        let bytes = word(3)?
            .checked_mul(4)
            .filter(|&b| b <= tail.len())
            .ok_or_else(|| format!("entry {k}: its elements run past the blob"))?;
        let (data, tail) = tail.split_at(bytes);
        out.push(Entry { tag, dims, data });
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(format!("{} bytes after the last entry", rest.len()));
    }
    Ok(out)
}

/// Runs `create` (a workload's creation) taking the prepared forms from `blob`, checked as
/// untrusted input: an error for a blob that is not one, and for one whose entries do not
/// fit what the layer prepares (tag, dimensions or length) or are not all used.
pub(crate) fn replay<T>(blob: &[u8], create: impl FnOnce() -> T) -> Result<T, String> {
    let list = blob_entries(blob)?
        .into_iter()
        .map(|e| {
            // A blob in a mapped file is aligned for f32 (one plain copy); a blob elsewhere
            // may not be.
            let values = match backplane_api::bytemuck::try_cast_slice::<u8, f32>(e.data) {
                Ok(aligned) => aligned.to_vec(),
                Err(_) => e
                    .data
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                    .collect(),
            };
            (e.tag, e.dims, values)
        })
        .collect::<Vec<_>>();
    let count = list.len();
    MODE.with_borrow_mut(|m| {
        *m = Mode::Replay {
            entries: list,
            next: 0,
            mismatched: None,
        }
    });
    let _reset = Reset;
    let made = create();
    match MODE.with_borrow_mut(std::mem::take) {
        Mode::Replay {
            mismatched: Some(why),
            ..
        } => Err(format!(
            "the prepared workload does not fit the layer: {why}"
        )),
        Mode::Replay { next, .. } if next != count => Err(format!(
            "the prepared workload holds {count} prepared weights, the layer used {next}"
        )),
        _ => Ok(made),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_weights_are_prepared_once_while_in_use() {
        let w = [1.0f32, 2.0, 3.0];
        let mut made = 0;
        let a = shared("test-double", [3, 0, 0], &w, 3, || {
            made += 1;
            w.iter().map(|v| v * 2.0).collect()
        });
        let b = shared("test-double", [3, 0, 0], &w, 3, || {
            made += 1;
            Vec::new()
        });
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(made, 1);
        assert_eq!(&a[..], &[2.0, 4.0, 6.0]);
        // Other dimensions, another tag or other weights are another entry.
        let other = [1.0f32, 2.0, 3.5];
        assert!(!Arc::ptr_eq(
            &a,
            &shared("test-double", [3, 0, 0], &other, 3, || other.to_vec())
        ));
        assert!(!Arc::ptr_eq(
            &a,
            &shared("test-double", [1, 3, 0], &w, 3, || w.to_vec())
        ));
        assert!(!Arc::ptr_eq(
            &a,
            &shared("test-other", [3, 0, 0], &w, 3, || w.to_vec())
        ));
        // Once no workload holds it, it is made again.
        drop((a, b));
        let again = shared("test-double", [3, 0, 0], &w, 1, || vec![9.0]);
        assert_eq!(&again[..], &[9.0]);
    }

    #[test]
    fn weights_found_by_their_bytes_are_the_weights_found_by_their_values() {
        let w = [0.5f32, -1.25, 3.0, 7.75];
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let a = shared_bytes("test-as-given", [4, 0, 0], &bytes);
        assert_eq!(&a[..], &w);
        let b = shared_owned("test-as-given", [4, 0, 0], w.to_vec());
        assert!(Arc::ptr_eq(&a, &b));
        // A preparation of them keys by the digest they were shared under, as one made from
        // their bytes does, and as one that reads them again.
        let mut made = 0;
        let mut make = || {
            made += 1;
            vec![1.0]
        };
        let p = shared_from("test-from", [4, 0, 0], &a, 1, &mut make);
        let q = shared_keyed(
            "test-from",
            [4, 0, 0],
            4,
            || digest_bytes(&bytes),
            1,
            &mut make,
        );
        let r = shared("test-from", [4, 0, 0], &w, 1, &mut make);
        assert!(Arc::ptr_eq(&p, &q) && Arc::ptr_eq(&p, &r));
        assert_eq!(made, 1);
        // Other bytes are other weights.
        let other: Vec<u8> = bytes.iter().map(|b| b ^ 1).collect();
        assert!(!Arc::ptr_eq(
            &a,
            &shared_bytes("test-as-given", [4, 0, 0], &other)
        ));
    }
}
