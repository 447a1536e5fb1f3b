//! The data caches of the CPU this process runs on, read once at run time, and the block sizes
//! of the kernels derived from them (no kernel's blocking is a constant of one
//! microarchitecture).
//!
//! On Linux the sizes come from sysfs (`/sys/devices/system/cpu/cpu0/cache/index*/`: level,
//! type, size), as the kernel reads them from the CPU (CPUID on x86-64, the cache ID registers
//! or the device tree on aarch64); elsewhere, or when sysfs says nothing usable, the sizes of
//! the Intel Xeon the rules were calibrated on (48 KiB L1d, 2 MiB L2 per core). They are
//! reported as the capabilities [`L1D_BYTES`] and [`L2_BYTES`].
//!
//! Each rule below was a constant, first tuned on an AMD EPYC (Zen 4: 32 KiB, 1 MiB) and kept
//! on the Intel Xeon; each is now that constant's fraction of the Xeon's cache, so the Xeon
//! runs as before. Blocks of the whole L2 there were measured against them (per layer,
//! alternating, ResNet-50 and the PP-OCRv4 detector in float, ResNet-50 int8): the 7×7 stage
//! 5–10 % faster, Winograd's 14×14 layers 18–22 % and the stem 14 % slower, the int8
//! products' longer reductions no faster; so the fractions stay. On the EPYC they give half
//! its tuned blocks (not measured since).

use std::sync::OnceLock;

/// The capability (integer) reporting the L1 data cache of a core, in bytes.
pub const L1D_BYTES: &str = "CacheL1dBytes";
/// The capability (integer) reporting the L2 cache of a core, in bytes.
pub const L2_BYTES: &str = "CacheL2Bytes";

/// The cache sizes the kernels block for, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CacheSizes {
    /// A core's L1 data cache.
    pub(crate) l1d: usize,
    /// A core's L2 cache.
    pub(crate) l2: usize,
}

/// The sizes assumed where none can be read: the Xeon's.
const FALLBACK: CacheSizes = CacheSizes {
    l1d: 48 << 10,
    l2: 2 << 20,
};

impl CacheSizes {
    /// This process's CPU, read once.
    pub(crate) fn get() -> Self {
        static SIZES: OnceLock<CacheSizes> = OnceLock::new();
        *SIZES.get_or_init(|| {
            let sizes = read(std::path::Path::new("/sys/devices/system/cpu/cpu0/cache"))
                .unwrap_or(FALLBACK);
            log::debug!(
                "CpuFast blocks for a {} KiB L1d and a {} KiB L2",
                sizes.l1d >> 10,
                sizes.l2 >> 10
            );
            sizes
        })
    }

    /// Elements (`f32`) of one im2col block of a float convolution, or of one block of a
    /// transposed convolution's columns: half the L2 cache's bytes (1 << 18 on the Xeon), so
    /// that the GEMM still finds the block there.
    pub(crate) fn im2col_elements(self) -> usize {
        self.l2 / 2 / 4
    }

    /// Outputs (`f32`) of a pointwise block whose bias and activation are applied while they
    /// are in the L2 cache: an eighth of it (1 << 16 on the Xeon).
    pub(crate) fn finish_elements(self) -> usize {
        self.l2 / 8 / 4
    }

    /// Elements (`f32`) of one Winograd block's transformed inputs and products together:
    /// the L2 cache's bytes (1 << 19 on the Xeon).
    pub(crate) fn winograd_elements(self) -> usize {
        self.l2 / 4
    }

    /// Elements (`f32`) of a float depthwise band, which with the input rows it reads and the
    /// output rows it writes stays in the L1 cache: a sixth of it (2048 on the Xeon).
    pub(crate) fn depthwise_band(self) -> usize {
        self.l1d / 6 / 4
    }

    /// Groups of four (`k4`) of an int8 product's reduction block: a tile's block of
    /// activations (`k4 · 128` bytes) takes a third of the L1 cache (128 on the Xeon).
    pub(crate) fn int8_reduction_groups(self) -> usize {
        (self.l1d / 3 / 128).max(1)
    }

    /// Bytes of activations one run of an implicit int8 convolution's taps reads for a tile
    /// (re-read by every panel): two thirds of the L1 cache (32 KiB on the Xeon).
    pub(crate) fn int8_tap_run_bytes(self) -> usize {
        self.l1d * 2 / 3
    }

    /// Bytes of one chunk of an int8 convolution's im2col rows before they are packed: an
    /// eighth of the L2 cache (256 KiB on the Xeon).
    pub(crate) fn int8_im2col_bytes(self) -> usize {
        self.l2 / 8
    }
}

/// The first level-1 data cache and level-2 cache listed under `dir` (`index0`, `index1`, …),
/// each within sane bounds, or `None` when either is missing or unreadable.
fn read(dir: &std::path::Path) -> Option<CacheSizes> {
    let (mut l1d, mut l2) = (None, None);
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("index") {
            continue;
        }
        let field = |f: &str| std::fs::read_to_string(entry.path().join(f)).ok();
        let (Some(level), Some(kind), Some(size)) = (field("level"), field("type"), field("size"))
        else {
            continue;
        };
        let Some(bytes) = parse_size(&size) else {
            continue;
        };
        match (level.trim(), kind.trim()) {
            ("1", "Data" | "Unified") => l1d = l1d.or(Some(bytes)),
            ("2", "Data" | "Unified") => l2 = l2.or(Some(bytes)),
            _ => {}
        }
    }
    Some(CacheSizes {
        l1d: l1d?.clamp(16 << 10, 256 << 10),
        l2: l2?.clamp(256 << 10, 8 << 20),
    })
}

/// A sysfs cache size (`48K`, `2048K`, `1M`, or bytes) in bytes.
fn parse_size(text: &str) -> Option<usize> {
    let text = text.trim();
    let (digits, unit) = match text.as_bytes().last()? {
        b'K' => (&text[..text.len() - 1], 1 << 10),
        b'M' => (&text[..text.len() - 1], 1 << 20),
        b'G' => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    digits.parse::<usize>().ok()?.checked_mul(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_sysfs_writes_them() {
        assert_eq!(parse_size("48K\n"), Some(48 << 10));
        assert_eq!(parse_size("2048K"), Some(2 << 20));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("32768"), Some(32768));
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size("-1K"), None);
    }

    #[test]
    fn a_cache_directory_gives_its_l1d_and_l2() {
        let dir = std::env::temp_dir().join(format!("cpufast-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let write = |index: &str, level: &str, kind: &str, size: &str| {
            let d = dir.join(index);
            std::fs::create_dir_all(&d).expect("a test directory");
            for (f, v) in [("level", level), ("type", kind), ("size", size)] {
                std::fs::write(d.join(f), format!("{v}\n")).expect("a test file");
            }
        };
        // An instruction cache first, an L3 and an entry without a size: ignored.
        write("index0", "1", "Instruction", "32K");
        write("index1", "1", "Data", "48K");
        write("index2", "2", "Unified", "2048K");
        write("index3", "3", "Unified", "307200K");
        std::fs::create_dir_all(dir.join("index4")).expect("a test directory");
        assert_eq!(
            read(&dir),
            Some(CacheSizes {
                l1d: 48 << 10,
                l2: 2 << 20
            })
        );
        // The Xeon's sizes give the constants the kernels ran with before.
        assert_eq!(FALLBACK.im2col_elements(), 1 << 18);
        assert_eq!(FALLBACK.finish_elements(), 1 << 16);
        assert_eq!(FALLBACK.winograd_elements(), 1 << 19);
        assert_eq!(FALLBACK.depthwise_band(), 2048);
        assert_eq!(FALLBACK.int8_reduction_groups(), 128);
        assert_eq!(FALLBACK.int8_tap_run_bytes(), 32 << 10);
        assert_eq!(FALLBACK.int8_im2col_bytes(), 1 << 18);
        // Without an L2 entry: nothing usable.
        std::fs::remove_dir_all(dir.join("index2")).expect("remove");
        assert_eq!(read(&dir), None);
        // Absurd sizes are bounded.
        write("index2", "2", "Unified", "1K");
        assert_eq!(read(&dir).map(|s| s.l2), Some(256 << 10));
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
