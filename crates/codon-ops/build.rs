//! With the `cuda` feature, compile `kernels/codon_ops.cu` to PTX with nvcc for the compute
//! capability in CUDA_COMPUTE_CAP (as candle-kernels does; docs/cuda.md), into OUT_DIR.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    println!("cargo:rerun-if-env-changed=CUDA_ROOT");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("codon_ops.ptx");
    let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "90".to_string());
    let cap = cap.trim().trim_start_matches("sm_").replace('.', "");
    let nvcc = std::env::var_os("CUDA_ROOT")
        .map(|root| std::path::PathBuf::from(root).join("bin").join("nvcc"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| "nvcc".into());
    let status = std::process::Command::new(&nvcc)
        .args(["--ptx", "-O3", "-std=c++17", &format!("-arch=compute_{cap}"), "kernels/codon_ops.cu", "-o"])
        .arg(&out)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("nvcc failed on kernels/codon_ops.cu ({s}); docs/cuda.md says how to build with CUDA"),
        Err(e) => panic!("could not run {}: {e}; docs/cuda.md says how to get nvcc", nvcc.display()),
    }
}
