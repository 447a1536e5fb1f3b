//! Prepared weights shared by every workload that prepares the same weights the same way,
//! in any network of this process: Winograd's transformed filters, panels packed for
//! products with few rows, and folded weights.
//!
//! A host that runs one model at several input shapes (a session's plans, one per shape)
//! creates the model's workloads once per shape; the weights are the same each time. Here
//! the second workload finds what the first prepared instead of making (and holding) its own
//! copy. Entries are keyed by what was prepared (a tag and its dimensions), the source's
//! length and a 64-bit digest of its bits, and are held weakly: prepared weights live as long
//! as a workload uses them, and a later load makes them again.

use std::{
    hash::Hasher,
    ops::Deref,
    sync::{Arc, Mutex, Weak},
};

/// Prepared weights, shared ([`shared`]); they deref to their elements.
#[derive(Debug)]
pub(crate) struct Prepared(Vec<f32>);

impl Deref for Prepared {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        &self.0
    }
}

impl Prepared {
    /// Weights that were not prepared (empty, or kept as they are), not shared.
    pub(crate) fn own(values: Vec<f32>) -> Arc<Self> {
        Arc::new(Self(values))
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

/// SipHash of the bits of `source` (the standard library's, with its fixed keys).
fn digest(source: &[f32]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    h.write(backplane_api::bytemuck::cast_slice(source));
    h.finish()
}

/// The prepared form of `source` that `tag` with `dims` names: one made earlier by any
/// workload of this process and still in use, else `make()`'s, kept for later ones.
pub(crate) fn shared(
    tag: &'static str,
    dims: [usize; 3],
    source: &[f32],
    make: impl FnOnce() -> Vec<f32>,
) -> Arc<Prepared> {
    let key: Key = (tag, dims, source.len(), digest(source));
    if let Some(found) = find(&entries(), &key) {
        return found;
    }
    let made = Arc::new(Prepared(make()));
    let mut entries = entries();
    if let Some(found) = find(&entries, &key) {
        return found; // made meanwhile by another thread: one copy is kept
    }
    entries.retain(|(_, w)| w.strong_count() > 0);
    entries.push((key, Arc::downgrade(&made)));
    made
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_weights_are_prepared_once_while_in_use() {
        let w = [1.0f32, 2.0, 3.0];
        let mut made = 0;
        let a = shared("test-double", [3, 0, 0], &w, || {
            made += 1;
            w.iter().map(|v| v * 2.0).collect()
        });
        let b = shared("test-double", [3, 0, 0], &w, || {
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
            &shared("test-double", [3, 0, 0], &other, || other.to_vec())
        ));
        assert!(!Arc::ptr_eq(
            &a,
            &shared("test-double", [1, 3, 0], &w, || w.to_vec())
        ));
        assert!(!Arc::ptr_eq(
            &a,
            &shared("test-other", [3, 0, 0], &w, || w.to_vec())
        ));
        // Once no workload holds it, it is made again.
        drop((a, b));
        let again = shared("test-double", [3, 0, 0], &w, || vec![9.0]);
        assert_eq!(&again[..], &[9.0]);
    }
}
