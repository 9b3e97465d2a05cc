//! `out += x·Wᵀ` with bf16 weights on the CPU, at the speed the CPU has for bf16, picked at run
//! time:
//! - AMX-BF16 (Sapphire Rapids and later, [`amx`]): x is rounded to bf16 and each `tdpbf16ps`
//!   multiplies a 16 × 32 tile of x by a 32 × 16 tile of W into 16 × 16 f32 sums.
//! - AVX512-BF16 (`vdpbf16ps`): x is rounded to bf16 and each instruction multiplies 16 pairs of
//!   bf16 values and adds them into 16 f32 sums, twice the work of an f32 FMA.
//! - Elsewhere (AVX2, aarch64): W is widened to f32 and the product is the `gemm` crate's f32 one.
//!
//! `CODON_CPU_ISA=avx512` leaves AMX out and `CODON_CPU_ISA=avx2` forces the portable path, so
//! one machine tests every path it has.

use candle_core::Result;
use half::bf16;

use crate::cpu_gemm::{matmul_into, Mat};

/// Which kernel [`bf16_linear_into`] runs on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bf16Path {
    /// `tdpbf16ps` on tiles of packed bf16 pairs.
    Amx,
    /// `vdpbf16ps` on packed bf16 pairs.
    Avx512Bf16,
    /// f32 `gemm` on widened weights.
    WidenedF32,
}

/// Whether `CODON_CPU_ISA=avx2` asks the kernels for the portable path.
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

/// The paths this machine has, fastest first.
pub fn available_paths() -> Vec<Bf16Path> {
    let mut paths = Vec::new();
    if avx512_bf16::available() && amx::available() {
        paths.push(Bf16Path::Amx);
    }
    if avx512_bf16::available() {
        paths.push(Bf16Path::Avx512Bf16);
    }
    paths.push(Bf16Path::WidenedF32);
    paths
}

/// The path this machine takes (see the module doc).
pub fn bf16_path() -> Bf16Path {
    static PATH: std::sync::OnceLock<Bf16Path> = std::sync::OnceLock::new();
    *PATH.get_or_init(|| {
        let allowed = |p: &Bf16Path| match p {
            Bf16Path::Amx => !amx_forced_off(),
            Bf16Path::Avx512Bf16 => !portable_forced(),
            Bf16Path::WidenedF32 => true,
        };
        available_paths().into_iter().find(allowed).unwrap_or(Bf16Path::WidenedF32)
    })
}

/// `out[i][j] += Σ_k x[i][k]·w[j][k]` for x (rows × k) f32, w (n × k) bf16 and out (rows × n),
/// all row-major and contiguous.
pub fn bf16_linear_into(out: &mut [f32], x: &[f32], w: &[bf16], rows: usize, k: usize, n: usize) -> Result<()> {
    if x.len() != rows * k || w.len() != n * k || out.len() != rows * n {
        candle_core::bail!("bf16 linear: x {} of {rows}×{k}, w {} of {n}×{k}, out {}", x.len(), w.len(), out.len());
    }
    linear_on(bf16_path(), out, x, w, rows, k, n)
}

/// [`bf16_linear_into`] on `path`, which must be one of [`available_paths`] (for tests and
/// side-by-side timings).
pub fn linear_on(
    path: Bf16Path,
    out: &mut [f32],
    x: &[f32],
    w: &[bf16],
    rows: usize,
    k: usize,
    n: usize,
) -> Result<()> {
    match path {
        Bf16Path::Amx => amx::linear_into(out, x, w, rows, k, n),
        Bf16Path::Avx512Bf16 => avx512_bf16::linear_into(out, x, w, rows, k, n),
        Bf16Path::WidenedF32 => widened_linear_into(out, x, w, rows, k, n),
    }
}

/// The portable path: W widened to f32, then the f32 product.
fn widened_linear_into(out: &mut [f32], x: &[f32], w: &[bf16], rows: usize, k: usize, n: usize) -> Result<()> {
    use rayon::prelude::*;
    let wide: Vec<f32> = w.par_iter().map(|v| v.to_f32()).collect();
    matmul_into(out, n, Mat::rows(x, rows, k, k), Mat::rows(&wide, n, k, k).t(), 1.0, true, true)
}

#[cfg(target_arch = "x86_64")]
mod avx512_bf16 {
    use std::arch::x86_64::*;

    use candle_core::Result;
    use half::bf16;
    use rayon::prelude::*;

    /// Rows of x per microkernel call, and output columns (two registers of 16; AMX's two B tiles).
    const MR: usize = 8;
    pub(super) const NR: usize = 32;

    pub fn available() -> bool {
        std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bf16")
    }

    /// Two bf16 values in one u32, the first in the low half (the layout `vdpbf16ps` pairs).
    fn pair(lo: bf16, hi: bf16) -> u32 {
        u32::from(lo.to_bits()) | (u32::from(hi.to_bits()) << 16)
    }

    pub fn linear_into(out: &mut [f32], x: &[f32], w: &[bf16], rows: usize, k: usize, n: usize) -> Result<()> {
        let pairs = k.div_ceil(2);
        let xp = pack_x(x, rows, k, pairs, rows);
        let wp = pack_w(w, k, n, pairs);
        let panels = n.div_ceil(NR);
        // One task per panel of NR output columns; each writes its own columns of `out`.
        let out_ptr = SendPtr(out.as_mut_ptr());
        (0..panels).into_par_iter().for_each(|panel| {
            let b = &wp[panel * pairs * NR..(panel + 1) * pairs * NR];
            let cols = NR.min(n - panel * NR);
            for r0 in (0..rows).step_by(MR) {
                let mr = MR.min(rows - r0);
                let a = &xp[r0 * pairs..(r0 + mr) * pairs];
                // SAFETY: the CPU has avx512f and avx512bf16 (checked by `available`); `a` holds
                // mr rows of `pairs` pairs and `b` `pairs` × NR; rows r0..r0+mr and columns
                // panel·NR..+cols of `out` (rows × n) are this task's alone.
                unsafe {
                    let dst = out_ptr.get().add(r0 * n + panel * NR);
                    microkernel(a, b, pairs, mr, dst, n, cols);
                }
            }
        });
        Ok(())
    }

    /// x (rows × k) rounded to bf16 (to nearest, even on ties) as `pairs` ≥ ⌈k/2⌉ pairs per row,
    /// in `padded_rows` ≥ rows rows; what lies past x (an odd k's last half, padding) is 0.
    pub(super) fn pack_x(x: &[f32], rows: usize, k: usize, pairs: usize, padded_rows: usize) -> Vec<u32> {
        let mut xp = vec![0u32; padded_rows * pairs];
        xp.par_chunks_mut(pairs.max(1)).zip(x.par_chunks(k.max(1))).take(rows).for_each(|(dst, row)| {
            // SAFETY: the CPU has avx512f and avx512bf16 (checked by the callers' `available`).
            unsafe { round_row_to_pairs(row, &mut dst[..k.div_ceil(2)]) }
        });
        xp
    }

    /// W (n × k) in panels of NR columns, `pairs` ≥ ⌈k/2⌉ rows each: panel[p][lane] pairs
    /// w[col][2p], w[col][2p + 1] (the layout `vdpbf16ps` and AMX's B tiles take); columns past
    /// n and pairs past ⌈k/2⌉ are 0.
    pub(super) fn pack_w(w: &[bf16], k: usize, n: usize, pairs: usize) -> Vec<u32> {
        let mut wp = vec![0u32; n.div_ceil(NR) * pairs * NR];
        wp.par_chunks_mut((pairs * NR).max(1)).enumerate().for_each(|(panel, dst)| {
            for lane in 0..NR.min(n - panel * NR) {
                let col = panel * NR + lane;
                for (p, v) in w[col * k..(col + 1) * k].chunks(2).enumerate() {
                    dst[p * NR + lane] = pair(v[0], v.get(1).copied().unwrap_or(bf16::ZERO));
                }
            }
        });
        wp
    }

    /// A raw pointer that tasks writing disjoint parts of one buffer share.
    #[derive(Clone, Copy)]
    pub(super) struct SendPtr(pub(super) *mut f32);
    // SAFETY: each task writes only its own columns (see `linear_into`).
    unsafe impl Send for SendPtr {}
    unsafe impl Sync for SendPtr {}
    impl SendPtr {
        pub(super) fn get(self) -> *mut f32 {
            self.0
        }
    }

    /// `row` (k f32 values) rounded to bf16 into `dst` (⌈k/2⌉ pairs), 16 values per instruction.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn round_row_to_pairs(row: &[f32], dst: &mut [u32]) {
        let mut chunks = row.chunks_exact(16);
        for (c, v) in chunks.by_ref().enumerate() {
            // SAFETY: `v` holds 16 f32 values and dst[8c..8c + 8] is inside dst (⌈k/2⌉ ≥ 8c + 8).
            unsafe {
                let rounded = _mm512_cvtneps_pbh(_mm512_loadu_ps(v.as_ptr()));
                let bits = std::mem::transmute::<__m256bh, __m256i>(rounded);
                _mm256_storeu_si256(dst[8 * c..8 * c + 8].as_mut_ptr() as *mut __m256i, bits);
            }
        }
        let done = row.len() - chunks.remainder().len();
        for (i, v) in chunks.remainder().chunks(2).enumerate() {
            let hi = v.get(1).map_or(bf16::ZERO, |&h| bf16::from_f32(h));
            dst[done / 2 + i] = pair(bf16::from_f32(v[0]), hi);
        }
    }

    /// `dst[r][c] += Σ_p dot(a[r][p], b[p][c])` for r < mr ≤ MR and c < cols ≤ NR, `dst` rows
    /// `ld` apart.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn microkernel(a: &[u32], b: &[u32], pairs: usize, mr: usize, dst: *mut f32, ld: usize, cols: usize) {
        let mut acc = [[_mm512_setzero_ps(); 2]; MR];
        let bp = b.as_ptr();
        for p in 0..pairs {
            // SAFETY: b holds `pairs` × NR values.
            let (b0, b1) = unsafe {
                (
                    _mm512_loadu_si512(bp.add(p * NR) as *const __m512i),
                    _mm512_loadu_si512(bp.add(p * NR + 16) as *const __m512i),
                )
            };
            let (b0, b1) = (as_bf16_pairs(b0), as_bf16_pairs(b1));
            for (r, acc) in acc.iter_mut().enumerate().take(mr) {
                // SAFETY: a holds mr rows of `pairs` pairs.
                let pair = unsafe { *a.get_unchecked(r * pairs + p) };
                let av = as_bf16_pairs(_mm512_set1_epi32(pair as i32));
                acc[0] = _mm512_dpbf16_ps(acc[0], av, b0);
                acc[1] = _mm512_dpbf16_ps(acc[1], av, b1);
            }
        }
        let masks = [lane_mask(cols.min(16)), lane_mask(cols.saturating_sub(16))];
        for (r, acc) in acc.iter().enumerate().take(mr) {
            for (half, (&sum, &mask)) in acc.iter().zip(&masks).enumerate() {
                // SAFETY: row r < mr and the masked lanes are columns < cols of this tile.
                unsafe {
                    let ptr = dst.add(r * ld + 16 * half);
                    let old = _mm512_maskz_loadu_ps(mask, ptr);
                    _mm512_mask_storeu_ps(ptr, mask, _mm512_add_ps(old, sum));
                }
            }
        }
    }

    /// 32 bf16 values held in an integer register, as `vdpbf16ps` takes them.
    fn as_bf16_pairs(v: __m512i) -> __m512bh {
        // SAFETY: both are 64 bytes of plain data; every bit pattern is valid for either.
        unsafe { std::mem::transmute::<__m512i, __m512bh>(v) }
    }

    /// The first `lanes` (≤ 16) of 16.
    fn lane_mask(lanes: usize) -> __mmask16 {
        ((1u32 << lanes) - 1) as __mmask16
    }
}

/// The AMX path: 16 × 16 f32 output tiles, four at a time (32 rows × 32 columns), each step
/// multiplying two 16-row tiles of x by two 16-column tiles of W over 32 values of k.
/// `../shared/reference/cpu.md` gives the tile layout; the instructions are written with `asm!`
/// (the AMX intrinsics are not stable Rust).
#[cfg(target_arch = "x86_64")]
mod amx {
    use std::arch::asm;

    use candle_core::Result;
    use half::bf16;
    use rayon::prelude::*;

    use super::avx512_bf16::{pack_w, pack_x, SendPtr, NR};

    /// Rows per block (two A tiles), pairs of k per step; a task takes NR output columns (two B
    /// tiles).
    const MR: usize = 32;
    const KP: usize = 16;

    /// Whether the CPU has AMX-TILE and AMX-BF16, the OS saves their state, and Linux has given
    /// this process the tile data (`ARCH_REQ_XCOMP_PERM`, asked once).
    pub fn available() -> bool {
        static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AVAILABLE.get_or_init(|| {
            // CPUID leaf 7, sub-leaf 0: EDX bit 22 AMX-BF16, bit 24 AMX-TILE.
            if std::arch::x86_64::__cpuid(0).eax < 7 {
                return false;
            }
            let leaf7 = std::arch::x86_64::__cpuid_count(7, 0);
            let cpu = leaf7.edx & (1 << 22) != 0 && leaf7.edx & (1 << 24) != 0;
            // XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA): the OS saves the tile state.
            cpu && std::is_x86_feature_detected!("xsave") && os_saves_tiles() && request_tile_data()
        })
    }

    fn os_saves_tiles() -> bool {
        // SAFETY: XGETBV(0) is allowed wherever XSAVE is enabled (OSXSAVE), checked by the caller.
        let xcr0 = unsafe { xgetbv0() };
        xcr0 & (0b11 << 17) == 0b11 << 17
    }

    #[target_feature(enable = "xsave")]
    unsafe fn xgetbv0() -> u64 {
        std::arch::x86_64::_xgetbv(0)
    }

    /// Linux 5.16+ gives a process the tile data only when asked; the first tile instruction
    /// without it is SIGILL.
    fn request_tile_data() -> bool {
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: arch_prctl with these arguments only changes this process's permissions.
        unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 }
    }

    /// The tile configuration: palette 1, every tile 16 rows of 64 bytes.
    #[repr(C, align(64))]
    struct TileConfig([u8; 64]);

    impl TileConfig {
        fn all_full() -> Self {
            let mut c = [0u8; 64];
            c[0] = 1;
            for t in 0..8 {
                c[16 + 2 * t..18 + 2 * t].copy_from_slice(&64u16.to_le_bytes());
                c[48 + t] = 16;
            }
            TileConfig(c)
        }
    }

    pub fn linear_into(out: &mut [f32], x: &[f32], w: &[bf16], rows: usize, k: usize, n: usize) -> Result<()> {
        if rows == 0 || n == 0 || k == 0 {
            return Ok(());
        }
        // k in steps of 32 values (16 pairs) and rows in blocks of 32, both zero-padded.
        let pairs = k.div_ceil(2).next_multiple_of(KP);
        let padded_rows = rows.next_multiple_of(MR);
        let xp = pack_x(x, rows, k, pairs, padded_rows);
        let wp = pack_w(w, k, n, pairs);
        let panels = n.div_ceil(NR);
        let out_ptr = SendPtr(out.as_mut_ptr());
        (0..panels).into_par_iter().for_each(|panel| {
            let b = &wp[panel * pairs * NR..(panel + 1) * pairs * NR];
            let cols = NR.min(n - panel * NR);
            let mut block = [0f32; MR * NR];
            // SAFETY: the caller checked AMX (and the tile data permission); every tile access
            // below reads inside `xp`/`b` (rows r0..r0 + 32 of padded x, all `pairs` rows of the
            // panel) or writes inside `block`, and the configuration is loaded on this thread
            // before the first tile instruction.
            unsafe {
                let config = TileConfig::all_full();
                asm!("ldtilecfg [{}]", in(reg) config.0.as_ptr(), options(nostack, readonly));
                for r0 in (0..rows).step_by(MR) {
                    tile_block(&xp[r0 * pairs..(r0 + MR) * pairs], b, pairs, &mut block);
                    for r in 0..MR.min(rows - r0) {
                        let dst = out_ptr.get().add((r0 + r) * n + panel * NR);
                        for (c, v) in block[r * NR..r * NR + cols].iter().enumerate() {
                            *dst.add(c) += v;
                        }
                    }
                }
                asm!("tilerelease", options(nostack, nomem));
            }
        });
        Ok(())
    }

    /// `block` (MR × NR f32, row-major) = a (MR rows of `pairs` pairs) · b (`pairs` rows of NR
    /// pairs), in four output tiles: tmm0..3 the sums, tmm4/5 two A tiles, tmm6/7 two B tiles.
    ///
    /// # Safety
    /// The tile configuration of [`TileConfig::all_full`] is loaded on this thread; `a` holds
    /// MR × `pairs` values, `b` `pairs` × NR, `pairs` is a multiple of KP.
    unsafe fn tile_block(a: &[u32], b: &[u32], pairs: usize, block: &mut [f32; MR * NR]) {
        let (a_stride, b_stride, c_stride) = (pairs * 4, NR * 4, NR * 4);
        let (a0, b0) = (a.as_ptr(), b.as_ptr());
        unsafe {
            asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
            for p in (0..pairs).step_by(KP) {
                let a_top = a0.add(p);
                let a_bottom = a0.add(16 * pairs + p);
                let b_left = b0.add(p * NR);
                let b_right = b0.add(p * NR + 16);
                asm!(
                    "tileloadd tmm4, [{a_top} + {a_stride}*1]",
                    "tileloadd tmm5, [{a_bottom} + {a_stride}*1]",
                    "tileloadd tmm6, [{b_left} + {b_stride}*1]",
                    "tileloadd tmm7, [{b_right} + {b_stride}*1]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    a_top = in(reg) a_top,
                    a_bottom = in(reg) a_bottom,
                    b_left = in(reg) b_left,
                    b_right = in(reg) b_right,
                    a_stride = in(reg) a_stride,
                    b_stride = in(reg) b_stride,
                    options(nostack, readonly),
                );
            }
            let c = block.as_mut_ptr();
            asm!(
                "tilestored [{c00} + {s}*1], tmm0",
                "tilestored [{c01} + {s}*1], tmm1",
                "tilestored [{c10} + {s}*1], tmm2",
                "tilestored [{c11} + {s}*1], tmm3",
                c00 = in(reg) c,
                c01 = in(reg) c.add(16),
                c10 = in(reg) c.add(16 * NR),
                c11 = in(reg) c.add(16 * NR + 16),
                s = in(reg) c_stride,
                options(nostack),
            );
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod amx {
    use candle_core::Result;
    use half::bf16;

    pub fn available() -> bool {
        false
    }

    pub fn linear_into(out: &mut [f32], x: &[f32], w: &[bf16], rows: usize, k: usize, n: usize) -> Result<()> {
        super::widened_linear_into(out, x, w, rows, k, n)
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod avx512_bf16 {
    use candle_core::Result;
    use half::bf16;

    pub fn available() -> bool {
        false
    }

    pub fn linear_into(out: &mut [f32], x: &[f32], w: &[bf16], rows: usize, k: usize, n: usize) -> Result<()> {
        super::widened_linear_into(out, x, w, rows, k, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// out + x·Wᵀ in f64 from the bf16-rounded operands: what both paths compute, up to f32
    /// rounding of the sums.
    fn reference(out: &[f32], x: &[f32], w: &[bf16], rows: usize, k: usize, n: usize, round_x: bool) -> Vec<f64> {
        let xr = |v: f32| if round_x { f64::from(bf16::from_f32(v).to_f32()) } else { f64::from(v) };
        (0..rows * n)
            .map(|i| {
                let (r, c) = (i / n, i % n);
                f64::from(out[i]) + (0..k).map(|j| xr(x[r * k + j]) * f64::from(w[c * k + j].to_f32())).sum::<f64>()
            })
            .collect()
    }

    /// Every path this machine has, against the reference, on shapes with every kind of tail:
    /// odd k (below and above one rounding step of 16 and one AMX step of 32), row and column
    /// tails of each path's blocks, a single row.
    #[test]
    fn each_path_matches_the_reference_on_awkward_shapes() {
        eprintln!("bf16 linear on this machine: {:?} of {:?}", bf16_path(), available_paths());
        let shapes = [(1, 1, 1), (9, 7, 33), (5, 37, 20), (17, 64, 48), (3, 768, 90), (502, 96, 70), (33, 70, 65)];
        for path in available_paths() {
            for (rows, k, n) in shapes {
                let x: Vec<f32> = (0..rows * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 23.0).collect();
                let w: Vec<bf16> = (0..n * k).map(|i| bf16::from_f32(((i * 53 % 89) as f32 - 44.0) / 31.0)).collect();
                let start: Vec<f32> = (0..rows * n).map(|i| (i % 5) as f32).collect();
                let mut out = start.clone();
                linear_on(path, &mut out, &x, &w, rows, k, n).unwrap();
                let round_x = path != Bf16Path::WidenedF32;
                let want = reference(&start, &x, &w, rows, k, n, round_x);
                for (i, (&got, &want)) in out.iter().zip(&want).enumerate() {
                    let scale: f64 = 1.0 + want.abs();
                    assert!(
                        (f64::from(got) - want).abs() <= 1e-5 * scale * k as f64,
                        "{path:?} {rows}×{k}×{n} at {i}: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_portable_path_agrees_with_the_fast_one() {
        let (rows, k, n) = (13, 150, 40);
        let x: Vec<f32> = (0..rows * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let w: Vec<bf16> = (0..n * k).map(|i| bf16::from_f32((i as f32 * 0.11).cos())).collect();
        let mut fast = vec![0.0; rows * n];
        bf16_linear_into(&mut fast, &x, &w, rows, k, n).unwrap();
        let mut portable = vec![0.0; rows * n];
        widened_linear_into(&mut portable, &x, &w, rows, k, n).unwrap();
        // The fast path rounds x to bf16 (8 bits of mantissa): sums of 150 terms agree to ~1e-2.
        for (a, b) in fast.iter().zip(&portable) {
            assert!((a - b).abs() <= 2e-2 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }
}
