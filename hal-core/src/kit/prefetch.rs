//! A hint that this thread will write a cache line soon: the processor
//! fetches the line for ownership now, while the thread has nothing better
//! to do, instead of stalling when the write comes.
//!
//! A channel's publisher uses it for the slot it loans next: that slot's
//! descriptor and first bytes were last written or read by its
//! subscribers, so the line lives in their caches.

use std::sync::atomic::{AtomicU8, Ordering};

/// Hint that the cache line holding `p` will be written soon.
///
/// Only a hint: it reads and writes nothing, never faults (an address that
/// is not mapped is ignored), and does nothing where the processor has no
/// such instruction (x86-64 without `PREFETCHW`, other architectures than
/// x86-64 and AArch64).
#[inline]
pub fn for_write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    if has_prefetchw() {
        // SAFETY: PREFETCHW only hints the cache: it makes no architectural
        // access to memory, raises no fault for any address, and changes no
        // register or flag. `has_prefetchw` checked that the processor has
        // it (CPUID), so it is never an undefined opcode.
        unsafe {
            std::arch::asm!(
                "prefetchw [{p}]",
                p = in(reg) p,
                options(nostack, readonly, preserves_flags)
            );
        }
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: PRFM is a hint in every AArch64 processor: it makes no
    // architectural access to memory, raises no fault for any address, and
    // changes no register or flag.
    unsafe {
        std::arch::asm!(
            "prfm pstl1keep, [{p}]",
            p = in(reg) p,
            options(nostack, readonly, preserves_flags)
        );
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = p;
}

/// Whether this x86-64 processor has `PREFETCHW` (CPUID leaf 0x8000_0001,
/// ECX bit 8), asked once per process.
#[cfg(target_arch = "x86_64")]
#[inline]
fn has_prefetchw() -> bool {
    // 0: not asked yet, 1: no, 2: yes.
    static KNOWN: AtomicU8 = AtomicU8::new(0);
    match KNOWN.load(Ordering::Relaxed) {
        0 => {
            let yes = ask_cpuid();
            KNOWN.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
            yes
        }
        known => known == 2,
    }
}

#[cfg(target_arch = "x86_64")]
#[cold]
fn ask_cpuid() -> bool {
    use std::arch::x86_64::__cpuid;
    const EXTENDED: u32 = 0x8000_0000;
    const FEATURES: u32 = 0x8000_0001;
    const PREFETCHW: u32 = 1 << 8;
    // SAFETY: CPUID exists on every x86-64 processor; leaf 0x8000_0000
    // states the highest extended leaf, and 0x8000_0001 is asked only when
    // it is there. (`__cpuid` is a safe function in newer Rust releases
    // than the oldest this workspace supports.)
    #[allow(unused_unsafe)]
    unsafe {
        __cpuid(EXTENDED).eax >= FEATURES && __cpuid(FEATURES).ecx & PREFETCHW != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_changes_nothing_and_never_faults() {
        let mut line = [7u8; 64];
        for_write(line.as_ptr());
        assert_eq!(line, [7u8; 64]);
        line[0] = 8;
        assert_eq!(line[0], 8);
        // Addresses nothing maps: a hint, never a fault.
        for_write(std::ptr::null());
        for_write(usize::MAX as *const u8);
        for_write(0x10 as *const u8);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn prefetchw_is_known_as_cpuinfo_states_it() {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
        let flags = cpuinfo
            .lines()
            .find(|l| l.starts_with("flags"))
            .expect("/proc/cpuinfo has flags");
        let listed = flags.split_whitespace().any(|f| f == "3dnowprefetch");
        assert_eq!(has_prefetchw(), listed);
        assert_eq!(has_prefetchw(), listed, "asked twice, the same answer");
    }
}
