//! The memory budget of one load: every allocation that a model's declared sizes drive (the
//! constants the importer decodes, folds and copies; a loaded network's constants block,
//! its planned tensors and the outputs a run hands back) is charged to it before it is made,
//! so that a small file declaring huge tensors is an error naming the layer and the sizes,
//! not an allocation the kernel kills the process for.

use std::sync::atomic::{AtomicU64, Ordering};

/// A budget in bytes, shared by everything one load charges (a session's import and each
/// of its plans' loads).
#[derive(Debug)]
pub struct MemoryBudget {
    limit: u64,
    used: AtomicU64,
}

/// A charge the budget cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} needs {bytes} bytes, over the memory budget of {limit} bytes ({used} bytes already \
     charged); give a larger --max-memory (SessionOptions::set_max_memory) to allow it"
)]
pub struct OverBudget {
    /// What asked (a layer, a constant), with its sizes.
    pub what: String,
    /// The bytes it asked for.
    pub bytes: u64,
    /// The budget.
    pub limit: u64,
    /// What was charged before it.
    pub used: u64,
}

impl MemoryBudget {
    /// A budget of `limit` bytes, nothing charged.
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            used: AtomicU64::new(0),
        }
    }

    /// A budget of this machine's physical memory ([`physical_memory`]).
    pub fn physical() -> Self {
        Self::new(physical_memory())
    }

    /// The limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The bytes charged so far.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The bytes left.
    pub fn left(&self) -> u64 {
        self.limit.saturating_sub(self.used())
    }

    /// Charges `bytes`, or refuses them (nothing charged) with `what` (called only then)
    /// naming who asked.
    ///
    /// # Errors
    /// [`OverBudget`] when `bytes` do not fit in what is left.
    pub fn charge(&self, bytes: u64, what: impl FnOnce() -> String) -> Result<(), OverBudget> {
        let limit = self.limit;
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&after| after <= limit)
            })
            .map(|_| ())
            .map_err(|used| OverBudget {
                what: what(),
                bytes,
                limit,
                used,
            })
    }

    /// Gives back `bytes` charged before (what a dropped plan held).
    pub fn release(&self, bytes: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                Some(u.saturating_sub(bytes))
            });
    }
}

impl Default for MemoryBudget {
    fn default() -> Self {
        Self::physical()
    }
}

/// This machine's physical memory in bytes (`MemTotal` of `/proc/meminfo`); `u64::MAX` when
/// it cannot be read. Read once per process: every load without a budget of its own asks.
pub fn physical_memory() -> u64 {
    static TOTAL: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TOTAL.get_or_init(|| {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| mem_total(&text))
            .unwrap_or(u64::MAX)
    })
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn mem_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line["MemTotal:".len()..].split_whitespace();
    let n: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => n.checked_mul(1024),
        None => Some(n),
        Some(_) => None,
    }
}

/// Reads a byte count as people write one: `123`, or with a binary suffix `K`, `M`, `G`,
/// `T` (`KiB`... and `KB`... alike, all powers of 1024), e.g. `4G`, `512MiB`.
///
/// # Errors
/// What is wrong with the text.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a byte count (e.g. 4G, 512M, 1048576)"))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(format!("{text:?}: unknown unit (K, M, G or T)")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{text:?} is more bytes than can be counted"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Charges add up to the limit and no further; a refused charge takes nothing and says
    /// who asked, how much, and what was charged before; released bytes can be charged again.
    #[test]
    fn charges_stop_at_the_limit() {
        let b = MemoryBudget::new(1000);
        b.charge(600, || unreachable!()).unwrap();
        b.charge(400, || unreachable!()).unwrap();
        let e = b.charge(1, || "layer x (1 byte)".into()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "layer x (1 byte) needs 1 bytes, over the memory budget of 1000 bytes (1000 bytes \
             already charged); give a larger --max-memory (SessionOptions::set_max_memory) to \
             allow it"
        );
        assert_eq!(b.used(), 1000);
        b.release(500);
        assert_eq!(b.left(), 500);
        assert!(b.charge(u64::MAX, String::new).is_err());
        assert_eq!(b.used(), 500);
    }

    #[test]
    fn byte_counts_parse_as_written() {
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes("4G"), Ok(4 << 30));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("2 kb"), Ok(2048));
        assert!(parse_bytes("1.5G").is_err());
        assert!(parse_bytes("-1").is_err());
        assert!(parse_bytes("99999999999T").is_err());
        assert!(parse_bytes("4X").unwrap_err().contains("unknown unit"));
    }

    #[test]
    fn physical_memory_reads_meminfo() {
        assert_eq!(
            mem_total("MemTotal:       24576000 kB\nMemFree: 1 kB\n"),
            Some(24576000 * 1024)
        );
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
        assert!(physical_memory() > 1 << 20);
    }
}
