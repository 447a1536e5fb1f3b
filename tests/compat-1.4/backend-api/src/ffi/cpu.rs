//! The CPU's vector state at the boundary between a plugin and the host.
//!
//! A library that runs AVX or AVX-512 code (faer's GEMM, for one) can return with the upper
//! halves of the vector registers "dirty". SSE code compiled for the default x86-64 target
//! (the host, CpuRef, most of a plugin) then runs much slower on that thread until the state
//! is cleared: up to 2.4× on an AMD EPYC (Zen 4), measured on CpuRef's 3×3 convolution right
//! after CpuFast's GEMM (docs/PERFORMANCE.md). `vzeroupper` clears it for about a cycle.

/// Clears the upper halves of the calling thread's vector registers (`vzeroupper`) when the
/// CPU has AVX; does nothing elsewhere. Call it after AVX code from a library whose return
/// state you do not control, before SSE code runs on the same thread. The host calls it after
/// every workload a backend executes.
#[inline]
pub fn clean_vector_state() {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        zero_upper();
    }
}

/// `vzeroupper`, as inline assembly: the crate's minimum compiler (1.85) has neither safe
/// `#[target_feature]` functions nor safe intrinsics. Only call it when the CPU has AVX.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn zero_upper() {
    // SAFETY: the caller checked that the CPU has AVX, so the instruction exists. It zeroes
    // the upper halves of ymm0-15; `clobber_abi("C")` tells the compiler that every
    // caller-saved register, all vector registers among them, may change, so no live value is
    // kept in one across it. It touches no memory, no stack and no flags.
    unsafe {
        std::arch::asm!(
            "vzeroupper",
            clobber_abi("C"),
            options(nomem, nostack, preserves_flags)
        );
    }
}
