//! Attention's bf16 CPU body: full attention for inference with the products on AVX512-BF16
//! (`vdpbf16ps`, the linear layer's microkernel in [`crate::cpu_bf16`]) and the softmax in f32.
use candle_core::Result;
use half::bf16;

use crate::cpu_bf16::{bf16_path, Bf16Path};

/// Full attention for bf16 inference: `softmax(q·kᵀ·scale + bias)·v` per (batch, head), for q,
/// k, v and out (batch, n, heads·d) as the projections leave them (no head split or merge copy)
/// and `bias` (batch, n) f32, the key mask's penalties. The products run on `vdpbf16ps` with f32
/// sums, the softmax in f32, and the probabilities are rounded to bf16 for the product with v.
/// `Ok(false)` where d is odd or this machine's bf16 path is not AVX512-BF16 (the caller then
/// takes another path): without it there is no fast bf16 product, and on AMX parts `vdpbf16ps`
/// ran at half the f32 FMAs' rate (docs/model.md), so they keep the f32 attention.
// Only x86_64 has the AVX512-BF16 kernel; elsewhere the scale is never read.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
pub fn attention(
    q: &[bf16],
    k: &[bf16],
    v: &[bf16],
    (batch, n, heads, d): (usize, usize, usize, usize),
    scale: f32,
    bias: &[f32],
    out: &mut [bf16],
) -> Result<bool> {
    let len = batch * n * heads * d;
    if [q.len(), k.len(), v.len(), out.len()].iter().any(|&l| l != len) || bias.len() != batch * n {
        candle_core::bail!("bf16 attention: operands do not fit ({batch}, {n}, {heads}×{d})");
    }
    if bf16_path() != Bf16Path::Avx512Bf16 || !d.is_multiple_of(2) {
        return Ok(false);
    }
    #[cfg(target_arch = "x86_64")]
    kernel::attention(q, k, v, (batch, n, heads, d), scale, bias, out);
    Ok(true)
}

#[cfg(target_arch = "x86_64")]
mod kernel {
    use half::bf16;
    use rayon::prelude::*;

    use crate::cpu_bf16::avx512_bf16::{microkernel, round_row_to_pairs, MR};
    use crate::cpu_bf16::{pair, OutPtr, NR};

    /// Query rows per task.
    const QUERY_CHUNK: usize = 64;

    /// Per-task buffers of [`attention`].
    #[derive(Default)]
    struct Scratch {
        scores: Vec<f32>,
        probs: Vec<u32>,
    }

    /// The operands of [`attention`]'s tasks: q (batch, n, heads·d), and each (batch, head)'s k
    /// and vᵀ packed as weights.
    struct Heads<'a> {
        q: &'a [bf16],
        keys: &'a [u32],
        values: &'a [u32],
        dims: (usize, usize, usize, usize),
        scale: f32,
        bias: &'a [f32],
        out: OutPtr,
    }

    /// See [`super::attention`]; the caller checked the CPU, the lengths and an even d.
    pub fn attention(
        q: &[bf16],
        k: &[bf16],
        v: &[bf16],
        dims: (usize, usize, usize, usize),
        scale: f32,
        bias: &[f32],
        out: &mut [bf16],
    ) {
        let (batch, n, heads, d) = dims;
        let (key_size, value_size) = packed_sizes(n, d);
        // Each (batch, head)'s keys and values are packed once, then shared by its query chunks.
        let mut keys = vec![0u32; batch * heads * key_size];
        let mut values = vec![0u32; batch * heads * value_size];
        keys.par_chunks_mut(key_size)
            .zip(values.par_chunks_mut(value_size))
            .enumerate()
            .for_each(|(bh, (keys, values))| pack_head(k, v, dims, bh / heads, bh % heads, keys, values));
        let chunks = n.div_ceil(QUERY_CHUNK);
        let ops = Heads { q, keys: &keys, values: &values, dims, scale, bias, out: OutPtr::Bf16(out.as_mut_ptr()) };
        (0..batch * heads * chunks).into_par_iter().for_each_init(Scratch::default, |scratch, task| {
            let (bh, chunk) = (task / chunks, task % chunks);
            // SAFETY: the caller checked the CPU; each task writes its own rows of its own head.
            unsafe { head_chunk(&ops, bh, chunk * QUERY_CHUNK, scratch) }
        });
    }

    /// u32s of one head's packed keys (⌈n/NR⌉ panels of d/2 pairs) and values (⌈d/NR⌉ panels of
    /// ⌈n/2⌉ pairs).
    fn packed_sizes(n: usize, d: usize) -> (usize, usize) {
        (n.div_ceil(NR) * (d / 2) * NR, d.div_ceil(NR) * n.div_ceil(2) * NR)
    }

    /// Head h of batch item b: k as a packed weight (panel[p][lane] pairs k[j][2p], k[j][2p + 1],
    /// j = panel·NR + lane) and vᵀ as one (panel[p][lane] pairs v[2p][c], v[2p + 1][c],
    /// c = panel·NR + lane), zero past n and d.
    fn pack_head(
        k: &[bf16],
        v: &[bf16],
        (_, n, heads, d): (usize, usize, usize, usize),
        b: usize,
        h: usize,
        keys: &mut [u32],
        values: &mut [u32],
    ) {
        let (dp, np) = (d / 2, n.div_ceil(2));
        // Element (token t, column c) of this head is at (b·n + t)·heads·d + h·d + c.
        let at = |t: usize| (b * n + t) * heads * d + h * d;
        for j in 0..n {
            for (p, two) in k[at(j)..at(j) + d].chunks_exact(2).enumerate() {
                keys[((j / NR) * dp + p) * NR + j % NR] = pair(two[0], two[1]);
            }
        }
        for p in 0..np {
            let first = &v[at(2 * p)..at(2 * p) + d];
            let second = (2 * p + 1 < n).then(|| &v[at(2 * p + 1)..at(2 * p + 1) + d]);
            for c in 0..d {
                let hi = second.map_or(bf16::ZERO, |row| row[c]);
                values[((c / NR) * np + p) * NR + c % NR] = pair(first[c], hi);
            }
        }
    }

    /// Query rows `start..start + QUERY_CHUNK` (or fewer) of (batch, head) pair `bh`.
    ///
    /// # Safety
    /// The CPU has avx512f and avx512bf16; the operands fit `ops.dims` with d even; no other task
    /// writes these rows of this head.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn head_chunk(ops: &Heads, bh: usize, start: usize, s: &mut Scratch) {
        let (_, n, heads, d) = ops.dims;
        let (b, h, hd) = (bh / heads, bh % heads, heads * d);
        let (dp, np) = (d / 2, n.div_ceil(2));
        let (key_size, value_size) = packed_sizes(n, d);
        let keys = &ops.keys[bh * key_size..(bh + 1) * key_size];
        let values = &ops.values[bh * value_size..(bh + 1) * value_size];
        let at = |t: usize| (b * n + t) * hd + h * d;
        let m = QUERY_CHUNK.min(n - start);
        s.scores.clear();
        s.scores.resize(m * n, 0.0);
        let q = ops.q.as_ptr().cast::<u32>();
        let mut tile = [0f32; MR * NR];
        for r0 in (0..m).step_by(MR) {
            let mr = MR.min(m - r0);
            for panel in 0..n.div_ceil(NR) {
                let cols = NR.min(n - panel * NR);
                // SAFETY: mr rows of this head's q from row start + r0 (dp pairs each, hd/2 apart;
                // the element index is even, so pairs are whole) and a key panel of dp × NR pairs.
                unsafe {
                    microkernel(q.add(at(start + r0) / 2), hd / 2, keys[panel * dp * NR..].as_ptr(), dp, mr, &mut tile)
                };
                for r in 0..mr {
                    let dst = &mut s.scores[(r0 + r) * n + panel * NR..][..cols];
                    dst.iter_mut().zip(&tile[r * NR..]).for_each(|(d, t)| *d = t * ops.scale);
                }
            }
        }
        crate::fast_math::softmax_rows(&mut s.scores, n, &ops.bias[b * n..(b + 1) * n]);
        s.probs.clear();
        s.probs.resize(m * np, 0);
        for (dst, row) in s.probs.chunks_mut(np).zip(s.scores.chunks(n)) {
            // SAFETY: the CPU has the features (this function's contract).
            unsafe { round_row_to_pairs(row, dst) }
        }
        for r0 in (0..m).step_by(MR) {
            let mr = MR.min(m - r0);
            for panel in 0..d.div_ceil(NR) {
                let cols = NR.min(d - panel * NR);
                // SAFETY: mr rows of np probability pairs and a value panel of np × NR pairs; the
                // output rows start + r0.. of this head's columns are this task's alone.
                unsafe {
                    let panel_values = values[panel * np * NR..].as_ptr();
                    microkernel(s.probs[r0 * np..].as_ptr(), np, panel_values, np, mr, &mut tile);
                    for r in 0..mr {
                        ops.out.store(at(start + r0 + r) + panel * NR, &tile[r * NR..r * NR + cols]);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use half::bf16;

    use super::*;

    /// softmax(q·kᵀ·scale + bias)·v per (batch, head) in f64 from the bf16 operands.
    #[cfg(target_arch = "x86_64")]
    fn attention_reference(
        q: &[bf16],
        k: &[bf16],
        v: &[bf16],
        dims: (usize, usize, usize, usize),
        bias: &[f32],
    ) -> Vec<f64> {
        let (batch, n, heads, d) = dims;
        let hd = heads * d;
        let f = |x: bf16| f64::from(x.to_f32());
        let mut out = vec![0.0; batch * n * hd];
        for b in 0..batch {
            for h in 0..heads {
                for i in 0..n {
                    let at = |t: usize, c: usize| (b * n + t) * hd + h * d + c;
                    let scores: Vec<f64> = (0..n)
                        .map(|j| {
                            let dot: f64 = (0..d).map(|c| f(q[at(i, c)]) * f(k[at(j, c)])).sum();
                            dot / (d as f64).sqrt() + f64::from(bias[b * n + j])
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let exp: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let total: f64 = exp.iter().sum();
                    for c in 0..d {
                        out[at(i, c)] = (0..n).map(|j| exp[j] / total * f(v[at(j, c)])).sum();
                    }
                }
            }
        }
        out
    }

    /// Lengths around the query chunk (64) and the key panel (32), odd and even, masked keys,
    /// a head narrower than a panel.
    #[test]
    fn bf16_attention_matches_the_reference() {
        for (batch, n, heads, d) in [(2, 37, 3, 64), (1, 130, 2, 8), (1, 64, 1, 64), (3, 1, 2, 4)] {
            let len = batch * n * heads * d;
            let val = |seed: usize| -> Vec<bf16> {
                (0..len).map(|i| bf16::from_f32((((i * seed) % 113) as f32 - 56.0) / 30.0)).collect()
            };
            let (q, k, v) = (val(31), val(47), val(59));
            // The last key of each batch item is padding; one in five has a finite penalty.
            let bias: Vec<f32> = (0..batch * n)
                .map(|i| {
                    if n > 1 && i % n == n - 1 {
                        f32::MIN
                    } else if i % 5 == 0 {
                        -1.5
                    } else {
                        0.0
                    }
                })
                .collect();
            let mut out = vec![bf16::ZERO; len];
            let scale = 1.0 / (d as f32).sqrt();
            let ran = attention(&q, &k, &v, (batch, n, heads, d), scale, &bias, &mut out).unwrap();
            assert_eq!(ran, bf16_path() == Bf16Path::Avx512Bf16);
            // The kernel itself wherever the CPU has it (an AMX part included).
            #[cfg(target_arch = "x86_64")]
            if crate::cpu_bf16::avx512_bf16::available() {
                kernel::attention(&q, &k, &v, (batch, n, heads, d), scale, &bias, &mut out);
                let want = attention_reference(&q, &k, &v, (batch, n, heads, d), &bias);
                for (i, (&got, &want)) in out.iter().zip(&want).enumerate() {
                    let got = f64::from(got.to_f32());
                    // Probabilities and the output are rounded to bf16 (2⁻⁹ each), the sums are f32.
                    assert!(
                        (got - want).abs() <= 1e-2 * (1.0 + want.abs()),
                        "({batch}, {n}, {heads}, {d}) at {i}: {got} vs {want}"
                    );
                }
            }
        }
        let odd_d = vec![bf16::ONE; 3];
        let mut out = vec![bf16::ZERO; 3];
        assert!(!attention(&odd_d, &odd_d, &odd_d, (1, 1, 1, 3), 1.0, &[0.0], &mut out).unwrap(), "odd d declines");
    }
}
