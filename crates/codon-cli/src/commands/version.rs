//! `codon --version`: the version, the commit it was built from, the compiled features, the CPU
//! path its kernels take here, and whether an Ascend toolkit and an NVIDIA driver were found.

/// The lines `codon --version` prints after the name.
pub fn long_version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let features: Vec<&str> = [(cfg!(feature = "cuda"), "cuda"), (true, "ascend")]
            .into_iter()
            .filter_map(|(on, name)| on.then_some(name))
            .collect();
        let cann = candle_ascend::ffi::loader::candidate_roots().into_iter().find(|r| r.join("lib64").is_dir());
        let cann =
            cann.map_or_else(|| "not found (npu:N needs it; npu-sim:N does not)".into(), |r| r.display().to_string());
        let driver = std::path::Path::new("/proc/driver/nvidia/version");
        let cuda = if driver.exists() { "NVIDIA driver found" } else { "no NVIDIA driver" };
        format!(
            "{}\ncommit:   {}\nfeatures: {}\nCPU path: {}\nCANN:     {cann}\nCUDA:     {cuda}",
            env!("CARGO_PKG_VERSION"),
            option_env!("CODON_GIT_COMMIT").unwrap_or("unknown"),
            features.join(", "),
            cpu_path(),
        )
    })
}

/// The kernels this CPU runs: the widest instruction set found at run time (`CODON_CPU_ISA=avx2`
/// forces the portable path and `avx512` leaves AMX out, as the kernels do).
pub fn cpu_path() -> String {
    let forced = codon_ops::cpu_isa::portable_forced();
    #[cfg(target_arch = "x86_64")]
    {
        let avx512 = is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw");
        let amx = codon_ops::cpu_bf16::bf16_path() == codon_ops::cpu_bf16::Bf16Path::Amx;
        let path = match (forced, avx512, is_x86_feature_detected!("avx512bf16")) {
            (true, ..) => "AVX2 (forced by CODON_CPU_ISA=avx2)",
            (false, true, true) if amx => "AVX-512 with AVX512-BF16, AMX-BF16 for bf16 weights",
            (false, true, true) => "AVX-512 with AVX512-BF16",
            (false, true, false) => "AVX-512",
            _ if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") => "AVX2",
            _ => "scalar (no AVX2)",
        };
        path.to_string()
    }
    #[cfg(target_arch = "aarch64")]
    {
        let _ = forced;
        // The kernels are the portable loops, which compile to NEON; bf16 weights are widened to f32.
        if std::arch::is_aarch64_feature_detected!("bf16") {
            "NEON (this CPU's BF16 instructions are not used: bf16 weights are widened to f32)".into()
        } else {
            "NEON".into()
        }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = forced;
        "portable".into()
    }
}
