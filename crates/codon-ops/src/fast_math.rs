//! The CPU kernels' element-wise loops, written so the compiler vectorises them and compiled
//! once per SIMD level: a branch-free f32 `exp` (libm's `expf` is a scalar call per element),
//! lane sums and maxima, softmax and LayerNorm rows, gelu_new and its derivative, and bf16
//! rounding and widening.

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// 1.5·2²³: adding and subtracting it rounds to the nearest integer.
const ROUND: f32 = 12_582_912.0;

/// exp(x) within about 1 ulp on the normal range; 0 below −87.3, clamped above 88.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let xc = x.clamp(-87.3, 88.0);
    // t's low mantissa bits hold the integer n (ROUND puts t in [2²³, 2²⁴), where the ulp is 1).
    let t = xc * LOG2E + ROUND;
    let n = t - ROUND;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    // Taylor polynomial of degree 7 on |r| ≤ ln2/2: truncation error below 1e-8 relative.
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    // 2ⁿ from t's bits: ROUND's low 9 bits are zero, so the shift keeps (n + 127) as the exponent
    // (n is in −126..=127 after the clamp). Integer lanes, unlike `n as i32`, which Rust
    // saturates element by element and so keeps the loop scalar.
    let scale = f32::from_bits(t.to_bits().wrapping_add(127) << 23);
    if x < -87.3 {
        0.0
    } else {
        p * scale
    }
}

/// Sum with eight independent lanes (vectorisable, unlike a sequential float sum).
#[inline]
pub fn sum(xs: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let chunks = xs.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for (l, x) in lanes.iter_mut().zip(c) {
            *l += x;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// Maximum with eight independent lanes.
#[inline]
pub fn max(xs: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let chunks = xs.chunks_exact(8);
    let tail = chunks.remainder().iter().fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a });
    for c in chunks {
        for (l, &x) in lanes.iter_mut().zip(c) {
            *l = if x > *l { x } else { *l };
        }
    }
    lanes.iter().fold(tail, |a, &b| if b > a { b } else { a })
}

/// In place: row ← softmax(row + bias).
#[inline(always)]
fn softmax_row_generic(row: &mut [f32], bias: &[f32]) {
    row.iter_mut().zip(bias).for_each(|(x, b)| *x += b);
    let m = max(row);
    row.iter_mut().for_each(|x| *x = exp(*x - m));
    let inv = 1.0 / sum(row);
    row.iter_mut().for_each(|x| *x *= inv);
}

/// `pub fn name(args) body`, compiled three times: for AVX-512, for AVX2 + FMA and for the
/// baseline CPU; the first the CPU has runs (checked at run time; `CODON_CPU_ISA=avx2` leaves
/// AVX-512 out). The loops of `body` then vectorise sixteen or eight lanes wide where they can.
macro_rules! per_simd_level {
    ($(#[$doc:meta])* pub fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)? $body:block) => {
        $(#[$doc])*
        pub fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx2,fma")]
            fn avx512($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            fn avx2($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            match crate::cpu_isa::simd_level() {
                // SAFETY: the CPU has the features each body was compiled for.
                crate::cpu_isa::SimdLevel::Avx512 => return unsafe { avx512($($arg),*) },
                crate::cpu_isa::SimdLevel::Avx2 => return unsafe { avx2($($arg),*) },
                crate::cpu_isa::SimdLevel::Baseline => {}
            }
            $body
        }
    };
}

per_simd_level! {
    /// Softmax of each `width`-long row of `rows` after adding `bias`.
    pub fn softmax_rows(rows: &mut [f32], width: usize, bias: &[f32]) {
        rows.chunks_mut(width).for_each(|row| softmax_row_generic(row, bias));
    }
}

per_simd_level! {
    /// The mean of `row` and 1/√(variance + eps), summed in eight lanes.
    pub fn moments(row: &[f32], eps: f32) -> (f32, f32) {
        let n = row.len() as f32;
        let mean = sum(row) / n;
        let mut lanes = [0f32; 8];
        let chunks = row.chunks_exact(8);
        let tail: f32 = chunks.remainder().iter().map(|x| (x - mean) * (x - mean)).sum();
        for c in chunks {
            for (l, x) in lanes.iter_mut().zip(c) {
                *l += (x - mean) * (x - mean);
            }
        }
        let var = (lanes.iter().sum::<f32>() + tail) / n;
        (mean, 1.0 / (var + eps).sqrt())
    }
}

per_simd_level! {
    /// `row` ← (row − mean)/√(variance + eps)·w + b.
    pub fn layer_norm_row(row: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
        let (mean, rstd) = moments(row, eps);
        for ((v, w), b) in row.iter_mut().zip(w).zip(b) {
            *v = (*v - mean) * rstd * w + b;
        }
    }
}

per_simd_level! {
    /// `dst[i]` ← `src[i]` rounded to bf16 (to nearest, ties to even).
    pub fn round_to_bf16(src: &[f32], dst: &mut [half::bf16]) {
        dst.iter_mut().zip(src).for_each(|(d, s)| *d = half::bf16::from_f32(*s));
    }
}

per_simd_level! {
    /// `dst[i]` ← `src[i]` as f32 (exact).
    pub fn widen_bf16(src: &[half::bf16], dst: &mut [f32]) {
        dst.iter_mut().zip(src).for_each(|(d, s)| *d = s.to_f32());
    }
}

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_CUBIC: f32 = 0.044_715;

/// gelu_new(x) = 0.5·x·(1 + tanh(u)) = x / (1 + exp(−2u)), u = √(2/π)·(x + 0.044715·x³).
#[inline(always)]
pub fn gelu_new(x: f32) -> f32 {
    let u = SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
    x / (1.0 + exp(-2.0 * u))
}

/// d/dx gelu_new(x) = s + x·s·(1 − s)·2u', with s = σ(2u) and u' = √(2/π)·(1 + 3·0.044715·x²).
#[inline(always)]
fn gelu_new_derivative(x: f32) -> f32 {
    let u = SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
    let s = 1.0 / (1.0 + exp(-2.0 * u));
    let du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_CUBIC * x * x);
    s + x * s * (1.0 - s) * 2.0 * du
}

per_simd_level! {
    /// `grads[i] *= gelu_new'(xs[i])`.
    pub fn gelu_new_grad(xs: &[f32], grads: &mut [f32]) {
        grads.iter_mut().zip(xs).for_each(|(g, &x)| *g *= gelu_new_derivative(x));
    }
}

per_simd_level! {
    /// gelu_new on every element.
    pub fn gelu_new_in_place(xs: &mut [f32]) {
        xs.iter_mut().for_each(|x| *x = gelu_new(*x));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn close_to_libm() {
        let mut worst = 0f32;
        let mut x = -87.0f32;
        while x < 88.0 {
            let (a, b) = (super::exp(x), x.exp());
            worst = worst.max(((a - b) / b).abs());
            x += 0.0137;
        }
        assert!(worst < 4e-7, "max relative error {worst:e}");
        assert_eq!(super::exp(-1000.0), 0.0);
        assert_eq!(super::exp(f32::MIN), 0.0);
        assert_eq!(super::exp(0.0), 1.0);
        assert!(super::exp(100.0).is_finite());
    }
}
