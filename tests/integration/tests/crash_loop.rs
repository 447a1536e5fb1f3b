//! 1,000 out-of-process backend crashes in a row leave the host's descriptors and resident
//! memory flat. A test binary of its own: descriptors and RSS are counted for the whole
//! process, which other tests would disturb.

#[allow(
    dead_code,
    reason = "the shared fixtures of the root test binary; this one uses a few"
)]
mod fixtures;

use std::time::Duration;

use backplane::{ExecuteError, OptimizerOptions, Runtime, plugins::paths::PathSource};
use backplane_api::ActivationFunction;

use fixtures::{PluginDir, chain, enqueue_single, f32t};

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// One runtime's life: its ExecSegv server crashes on the third inference.
fn crash_once(dir: &PluginDir) {
    let rt = Runtime::with_path_list(
        fixtures::out_of_process(&["ExecSegv"], Duration::from_secs(30)),
        PathSource::Option,
        dir.as_str(),
    );
    let net = chain(&[2, 3], &[("relu", ActivationFunction::ReLU)]);
    let optimized = rt
        .optimize(&net, &["ExecSegv", "CpuRef"], &OptimizerOptions::default())
        .unwrap();
    let id = rt.load_network(&optimized).unwrap();
    let info = f32t(&[2, 3]);
    let x = [1.0; 6];
    for _ in 0..2 {
        enqueue_single(&rt, id, &info, &x, &info).unwrap();
    }
    let err = enqueue_single(&rt, id, &info, &x, &info).unwrap_err();
    assert!(
        matches!(&err, ExecuteError::Backend { error, .. }
            if error.message.contains("signal 11 (SIGSEGV)")),
        "{err}"
    );
}

#[test]
fn a_thousand_crashes_leave_descriptors_and_memory_flat() {
    let dir = PluginDir::new();
    dir.add("exec-segfaults", "Test_ExecSegv_backend.so");
    // Warm up: the allocator's pools, the logger, lazily made statics.
    for _ in 0..50 {
        crash_once(&dir);
    }
    let (fds, rss) = (open_descriptors(), resident_kib());
    let started = std::time::Instant::now();
    for _ in 0..1000 {
        crash_once(&dir);
    }
    let (fds_after, rss_after) = (open_descriptors(), resident_kib());
    eprintln!(
        "1000 crashes in {:.1} s: descriptors {fds} -> {fds_after}, RSS {rss} -> {rss_after} KiB",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(fds_after, fds, "descriptors leaked");
    assert!(
        rss_after <= rss + 2048,
        "RSS grew from {rss} to {rss_after} KiB over 1000 crashes"
    );
}
