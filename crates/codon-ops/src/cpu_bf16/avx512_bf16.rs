//! The AVX512-BF16 path: `vdpbf16ps` products of bf16 pairs into f32 sums, 8 × 32 tiles with
//! the epilogue applied while they are in cache.
use std::arch::x86_64::*;

use candle_core::Result;
use half::bf16;
use rayon::prelude::*;

use super::{pair, Epilogue, OutPtr, Values, NR};

/// Rows of x per microkernel call.
pub(crate) const MR: usize = 8;
/// Rows of x per linear task.
const ROW_BLOCK: usize = 64;
pub fn available() -> bool {
    std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bf16")
}

/// Rows of bf16 pairs, `lda` pairs apart, shared by the tasks that read them.
#[derive(Clone, Copy)]
struct Pairs(*const u32);
// SAFETY: read only.
unsafe impl Send for Pairs {}
unsafe impl Sync for Pairs {}
impl Pairs {
    /// The first pair of row `row`, rows `lda` pairs apart.
    fn row(self, row: usize, lda: usize) -> *const u32 {
        self.0.wrapping_add(row * lda)
    }
}

#[allow(clippy::too_many_arguments)]
pub fn linear(
    x: Values,
    wp: &[u32],
    pairs: usize,
    rows: usize,
    k: usize,
    n: usize,
    epilogue: &Epilogue,
    out: OutPtr,
) -> Result<()> {
    let kp = k.div_ceil(2);
    // bf16 rows of even length are already pairs; others are rounded into pairs.
    let packed;
    let a = match x {
        Values::Bf16(v) if k.is_multiple_of(2) => Pairs(v.as_ptr().cast::<u32>()),
        Values::Bf16(v) => {
            let wide: Vec<f32> = v.iter().map(|e| e.to_f32()).collect();
            packed = pack_x(&wide, rows, k, kp, rows);
            Pairs(packed.as_ptr())
        }
        Values::F32(v) => {
            packed = pack_x(v, rows, k, kp, rows);
            Pairs(packed.as_ptr())
        }
    };
    let panels = n.div_ceil(NR);
    // Tasks of ROW_BLOCK rows × a group of panels: a task's rows of x and of the output stay
    // in L2 while it walks its panels (a task per panel over every row would write each
    // output row 64 bytes at a time, a page apart). Enough groups to feed every thread.
    let row_blocks = rows.div_ceil(ROW_BLOCK);
    let groups = (4 * rayon::current_num_threads()).div_ceil(row_blocks).clamp(1, panels);
    let per_group = panels.div_ceil(groups);
    (0..row_blocks * groups).into_par_iter().for_each(|task| {
        let (block, group) = (task / groups, task % groups);
        let block_rows = block * ROW_BLOCK..(block * ROW_BLOCK + ROW_BLOCK).min(rows);
        let mut tile = [0f32; MR * NR];
        for panel in group * per_group..((group + 1) * per_group).min(panels) {
            let b = &wp[panel * pairs * NR..(panel + 1) * pairs * NR];
            let cols = NR.min(n - panel * NR);
            for r0 in block_rows.clone().step_by(MR) {
                let mr = MR.min(block_rows.end - r0);
                // SAFETY: the CPU has avx512f and avx512bf16 (checked by `available`); `a`
                // holds `rows` rows of kp pairs and `b` ≥ kp × NR; rows r0..r0 + mr and
                // columns panel·NR..+cols of `out` (rows × n) are this task's alone.
                unsafe {
                    microkernel(a.row(r0, kp), kp, b.as_ptr(), kp, mr, &mut tile);
                    finish_tile(&mut tile, mr, cols, r0, panel * NR, n, epilogue, out);
                }
            }
        }
    });
    Ok(())
}

/// The epilogue over a tile's `mr` rows and `cols` columns, stored at (r0, col0).
///
/// # Safety
/// The CPU has avx512f (the loops are compiled for it); the tile's place in `out` is the
/// caller's alone.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn finish_tile(
    tile: &mut [f32; MR * NR],
    mr: usize,
    cols: usize,
    r0: usize,
    col0: usize,
    n: usize,
    epilogue: &Epilogue,
    out: OutPtr,
) {
    let additions = Epilogue { activation: None, ..*epilogue };
    for r in 0..mr {
        additions.apply(&mut tile[r * NR..r * NR + cols], r0 + r, col0, n);
    }
    // The activation over the whole tile in one call (its columns past `cols` are unused).
    if let Some(f) = epilogue.activation {
        f(&mut tile[..mr * NR]);
    }
    for r in 0..mr {
        // SAFETY: the caller's contract.
        unsafe { out.store((r0 + r) * n + col0, &tile[r * NR..r * NR + cols]) };
    }
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

/// `row` (k f32 values) rounded to bf16 into `dst` (⌈k/2⌉ pairs), 16 values per instruction.
#[target_feature(enable = "avx512f,avx512bf16")]
pub(crate) unsafe fn round_row_to_pairs(row: &[f32], dst: &mut [u32]) {
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

/// `tile[r][c] = Σ_p dot(a[r][p], b[p][c])` for r < mr ≤ MR, c < NR and p < kp; a's rows
/// are `lda` pairs apart (read unaligned), b's NR pairs; rows of `tile` past mr are left.
///
/// # Safety
/// The CPU has avx512f and avx512bf16; a holds mr rows of kp pairs, b kp × NR pairs.
#[inline(always)]
pub(crate) unsafe fn microkernel(
    a: *const u32,
    lda: usize,
    b: *const u32,
    kp: usize,
    mr: usize,
    tile: &mut [f32; MR * NR],
) {
    // A whole block of rows gets a body with its row loop unrolled (no test per row and
    // step, which costs most where k is short, as in attention's q·kᵀ over 32 pairs).
    let t = tile.as_mut_ptr();
    // SAFETY: the caller's contract; row r of the tile starts at t + r·NR.
    unsafe {
        if mr == MR {
            return rows_kernel::<MR>(a, lda, b, kp, t);
        }
        let mut r = 0;
        if mr >= 4 {
            rows_kernel::<4>(a, lda, b, kp, t);
            r = 4;
        }
        for r in r..mr {
            rows_kernel::<1>(a.add(r * lda), lda, b, kp, t.add(r * NR));
        }
    }
}

/// [`microkernel`] for exactly M rows, into M rows of NR f32 at `out`.
///
/// # Safety
/// As [`microkernel`] with mr = M; `out` holds M × NR values.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn rows_kernel<const M: usize>(a: *const u32, lda: usize, b: *const u32, kp: usize, out: *mut f32) {
    let mut acc = [[_mm512_setzero_ps(); 2]; M];
    for p in 0..kp {
        // SAFETY: b holds kp × NR values.
        let (b0, b1) = unsafe {
            (
                _mm512_loadu_si512(b.add(p * NR) as *const __m512i),
                _mm512_loadu_si512(b.add(p * NR + 16) as *const __m512i),
            )
        };
        let (b0, b1) = (as_bf16_pairs(b0), as_bf16_pairs(b1));
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: a holds M rows of kp pairs, lda apart.
            let pair = unsafe { a.add(r * lda + p).read_unaligned() };
            let av = as_bf16_pairs(_mm512_set1_epi32(pair as i32));
            acc[0] = _mm512_dpbf16_ps(acc[0], av, b0);
            acc[1] = _mm512_dpbf16_ps(acc[1], av, b1);
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        // SAFETY: row r < M of `out` holds NR = 32 values.
        unsafe {
            _mm512_storeu_ps(out.add(r * NR), acc[0]);
            _mm512_storeu_ps(out.add(r * NR + 16), acc[1]);
        }
    }
}

/// 32 bf16 values held in an integer register, as `vdpbf16ps` takes them.
fn as_bf16_pairs(v: __m512i) -> __m512bh {
    // SAFETY: both are 64 bytes of plain data; every bit pattern is valid for either.
    unsafe { std::mem::transmute::<__m512i, __m512bh>(v) }
}
