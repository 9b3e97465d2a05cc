//! Throughput of the `gemm` crate on the matrix shapes of a CodonTransformer train step
//! (batch 2 × 1024): the linear layers' forward, dx and dW products on all threads, and
//! attention's per-block products on one thread. It bounds what the CPU train step can reach.
//!
//! ```text
//! codon gemm-throughput
//! ```
use crate::outln;
use std::time::Instant;

/// Best-of-5 GFLOP/s of a (m × k)·(k × n) product; `lhs_t`/`rhs_t` read an operand transposed.
fn gflops(m: usize, n: usize, k: usize, lhs_t: bool, rhs_t: bool, parallelism: gemm::Parallelism) -> f64 {
    let lhs: Vec<f32> = (0..m * k).map(|i| (i % 17) as f32 * 0.01).collect();
    let rhs: Vec<f32> = (0..k * n).map(|i| (i % 13) as f32 * 0.01).collect();
    let mut dst = vec![0f32; m * n];
    let (lhs_cs, lhs_rs) = if lhs_t { (m as isize, 1) } else { (1, k as isize) };
    let (rhs_cs, rhs_rs) = if rhs_t { (k as isize, 1) } else { (1, n as isize) };
    let mut best = f64::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        // SAFETY: lhs, rhs and dst hold m·k, k·n and m·n elements, and the strides above
        // address exactly those matrices (row-major, or its transpose).
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                dst.as_mut_ptr(),
                1,
                n as isize,
                false,
                lhs.as_ptr(),
                lhs_cs,
                lhs_rs,
                rhs.as_ptr(),
                rhs_cs,
                rhs_rs,
                1.0,
                1.0,
                false,
                false,
                false,
                parallelism,
            );
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    2.0 * (m * n * k) as f64 / best / 1e9
}

/// Best-of-5 GFLOP/s of x·Wᵀ (x m × k, W n × k) through the fused kernels' `matmul_into`, which
/// runs one column strip per thread where the strips are wide enough.
fn strips_gflops(m: usize, n: usize, k: usize) -> f64 {
    use codon_ops::cpu_gemm::{matmul_into, Mat};
    let x: Vec<f32> = (0..m * k).map(|i| (i % 17) as f32 * 0.01).collect();
    let w: Vec<f32> = (0..n * k).map(|i| (i % 13) as f32 * 0.01).collect();
    let mut out = vec![0f32; m * n];
    let mut best = f64::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        matmul_into(&mut out, n, Mat::rows(&x, m, k, k), Mat::rows(&w, n, k, k).t(), 1.0, false, true)
            .expect("shapes match");
        best = best.min(start.elapsed().as_secs_f64());
    }
    2.0 * (m * n * k) as f64 / best / 1e9
}

/// Best-of-5 GFLOP/s of x·Wᵀ with x (m × k) f32 and W (n × k) bf16, on `path`.
fn bf16_gflops(path: codon_ops::cpu_bf16::Bf16Path, m: usize, n: usize, k: usize) -> f64 {
    let x: Vec<f32> = (0..m * k).map(|i| (i % 17) as f32 * 0.01).collect();
    let w: Vec<half::bf16> = (0..n * k).map(|i| half::bf16::from_f32((i % 13) as f32 * 0.01)).collect();
    let mut out = vec![0f32; m * n];
    let mut best = f64::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        codon_ops::cpu_bf16::linear_on(path, &mut out, &x, &w, m, k, n).expect("shapes match");
        best = best.min(start.elapsed().as_secs_f64());
    }
    2.0 * (m * n * k) as f64 / best / 1e9
}

/// Print the throughput table.
pub fn run() -> anyhow::Result<()> {
    let threads = rayon::current_num_threads();
    let all = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    outln!("{threads} threads");
    let layers = [
        (2048, 768, 768, false, true, "q/k/v/output forward, x·Wᵀ"),
        (2048, 3072, 768, false, true, "intermediate forward"),
        (2048, 768, 3072, false, true, "output dense forward"),
        (2048, 768, 3072, false, false, "intermediate dx = dz·W"),
        (768, 3072, 2048, true, false, "output dense dW = dzᵀ·x"),
        (768, 768, 2048, true, false, "q/k/v dW = dzᵀ·x"),
    ];
    // A listing: once its reader is gone (`| head -2`), the rest is not measured.
    for (m, n, k, lhs_t, rhs_t, what) in layers.into_iter().take_while(|_| !crate::output::stdout_closed()) {
        outln!("{what:32} {m}×{k}·{k}×{n}: {:.0} GFLOP/s (all threads)", gflops(m, n, k, lhs_t, rhs_t, all));
    }
    // The forward products at one 352-token protein (a prediction pass) and at 2048 rows: gemm's
    // own threads against one column strip per thread (`matmul_into`).
    for m in [352, 2048] {
        for (_, n, k, _, _, what) in
            layers.iter().filter(|l| !l.3 && l.4).take_while(|_| !crate::output::stdout_closed())
        {
            outln!(
                "{what:32} {m}×{k}·{k}×{n}: {:.0} GFLOP/s gemm's threads, {:.0} column strips",
                gflops(m, *n, *k, false, true, all),
                strips_gflops(m, *n, *k)
            );
        }
    }
    // The forward products again with bf16 weights, on each path this CPU has, side by side (the
    // model takes the first).
    let paths = codon_ops::cpu_bf16::available_paths();
    for m in [352, 2048] {
        for (_, n, k, _, _, what) in
            layers.iter().filter(|l| !l.3 && l.4).take_while(|_| !crate::output::stdout_closed())
        {
            let rates: Vec<String> = paths.iter().map(|&p| format!("{:.0} {p:?}", bf16_gflops(p, m, *n, *k))).collect();
            outln!("{what:32} {m}×{k}·{k}×{n}: GFLOP/s with bf16 weights: {}", rates.join(", "));
        }
    }
    let blocks = [
        (64, 512, 64, false, true, "attention scores q·kᵀ"),
        (64, 64, 512, false, false, "attention context p·v"),
        (512, 64, 64, true, false, "attention dk = dsᵀ·q"),
    ];
    for (m, n, k, lhs_t, rhs_t, what) in blocks.into_iter().take_while(|_| !crate::output::stdout_closed()) {
        let rate = gflops(m, n, k, lhs_t, rhs_t, gemm::Parallelism::None);
        outln!("{what:32} {m}×{k}·{k}×{n}: {rate:.0} GFLOP/s (one thread)");
    }
    Ok(())
}
