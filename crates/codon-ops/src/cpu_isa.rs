//! Which instructions the CPU kernels may use: what the CPU has, narrowed by `CODON_CPU_ISA`
//! (`avx512` leaves AMX out, `avx2` every AVX-512 path), so one machine tests every path it has.

/// Whether `CODON_CPU_ISA=avx2` asks the kernels for the portable path (no AVX-512).
pub fn portable_forced() -> bool {
    forced_isa().is_some_and(|isa| isa.eq_ignore_ascii_case("avx2"))
}

/// Whether `CODON_CPU_ISA` (`avx512` or `avx2`) leaves AMX out.
pub fn amx_forced_off() -> bool {
    forced_isa().is_some_and(|isa| isa.eq_ignore_ascii_case("avx512") || isa.eq_ignore_ascii_case("avx2"))
}

fn forced_isa() -> Option<String> {
    std::env::var("CODON_CPU_ISA").ok()
}

/// The widest vector code the element-wise kernels (`fast_math`) run here.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SimdLevel {
    Avx512,
    Avx2,
    Baseline,
}

/// This machine's [`SimdLevel`], decided once.
#[cfg(target_arch = "x86_64")]
pub(crate) fn simd_level() -> SimdLevel {
    static LEVEL: std::sync::OnceLock<SimdLevel> = std::sync::OnceLock::new();
    *LEVEL.get_or_init(|| {
        let avx2 = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
        if avx2 && std::is_x86_feature_detected!("avx512f") && !portable_forced() {
            SimdLevel::Avx512
        } else if avx2 {
            SimdLevel::Avx2
        } else {
            SimdLevel::Baseline
        }
    })
}
