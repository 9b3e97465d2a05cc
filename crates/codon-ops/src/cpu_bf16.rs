//! `y = act(x·Wᵀ + bias + residual)` with bf16 weights on the CPU, at the speed the CPU has
//! for bf16, picked at run time:
//! - AMX-BF16 (Sapphire Rapids and later, [`amx`]): each `tdpbf16ps` multiplies a 16 × 32 tile
//!   of x by a 32 × 16 tile of W into 16 × 16 f32 sums.
//! - AVX512-BF16 (`vdpbf16ps`): each instruction multiplies 16 pairs of bf16 values and adds
//!   them into 16 f32 sums, twice the work of an f32 FMA. The bias, the residual, the
//!   activation and the rounding to the output's dtype are applied to each 8 × 32 tile of sums
//!   while it is in cache, and bf16 activations are read in place as pairs.
//! - Elsewhere (AVX2, aarch64): W is widened to f32 once and the product is the `gemm` crate's.
//!
//! A weight is packed into its path's layout once ([`PackedWeight`]); a layer whose weight
//! cannot change keeps the packed copy (`linear::LinearLayer`). x is rounded to bf16 on the
//! fast paths; sums, the epilogue and the softmax of [`attention`] are f32.
//!
//! `CODON_CPU_ISA` ([`crate::cpu_isa`]) leaves AMX or every fast path out, so one machine tests
//! every path it has.

use candle_core::Result;
use half::bf16;
use rayon::prelude::*;

use crate::cpu_gemm::{matmul_into, Mat};
use crate::cpu_isa::{amx_forced_off, portable_forced};

/// Which kernel [`linear`] runs on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bf16Path {
    /// `tdpbf16ps` on tiles of packed bf16 pairs.
    Amx,
    /// `vdpbf16ps` on packed bf16 pairs.
    Avx512Bf16,
    /// f32 `gemm` on widened weights.
    WidenedF32,
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

/// Values per task when bf16 values are widened.
const WIDEN_CHUNK: usize = 64 * 1024;

/// Row-major values a kernel reads: f32, or bf16 as stored.
#[derive(Debug, Clone, Copy)]
pub enum Values<'a> {
    /// f32 values.
    F32(&'a [f32]),
    /// bf16 values.
    Bf16(&'a [bf16]),
}

impl Values<'_> {
    fn len(&self) -> usize {
        match self {
            Values::F32(v) => v.len(),
            Values::Bf16(v) => v.len(),
        }
    }

    /// The values as f32: borrowed when they are f32, widened otherwise.
    fn widened(&self) -> std::borrow::Cow<'_, [f32]> {
        match self {
            Values::F32(v) => std::borrow::Cow::Borrowed(v),
            Values::Bf16(v) => {
                let mut wide = vec![0f32; v.len()];
                wide.par_chunks_mut(WIDEN_CHUNK)
                    .zip(v.par_chunks(WIDEN_CHUNK))
                    .for_each(|(d, s)| crate::fast_math::widen_bf16(s, d));
                std::borrow::Cow::Owned(wide)
            }
        }
    }
}

/// Row-major values a kernel writes: f32, or bf16 rounded to nearest (ties to even).
#[derive(Debug)]
pub enum ValuesMut<'a> {
    /// f32 values.
    F32(&'a mut [f32]),
    /// bf16 values.
    Bf16(&'a mut [bf16]),
}

impl ValuesMut<'_> {
    fn len(&self) -> usize {
        match self {
            ValuesMut::F32(v) => v.len(),
            ValuesMut::Bf16(v) => v.len(),
        }
    }

    fn ptr(&mut self) -> OutPtr {
        match self {
            ValuesMut::F32(v) => OutPtr::F32(v.as_mut_ptr()),
            ValuesMut::Bf16(v) => OutPtr::Bf16(v.as_mut_ptr()),
        }
    }
}

/// An output's first element, shared by tasks that write disjoint parts of it.
#[derive(Clone, Copy)]
enum OutPtr {
    F32(*mut f32),
    Bf16(*mut bf16),
}
// SAFETY: every task writes only its own elements (see the callers).
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// Write `vals` at element `offset`, rounded to the output's dtype.
    ///
    /// # Safety
    /// `offset..offset + vals.len()` lies inside the output and no other task writes there.
    #[inline(always)]
    unsafe fn store(self, offset: usize, vals: &[f32]) {
        match self {
            // SAFETY: in bounds and unshared (the caller's contract).
            OutPtr::F32(p) => unsafe { std::ptr::copy_nonoverlapping(vals.as_ptr(), p.add(offset), vals.len()) },
            OutPtr::Bf16(p) => {
                // SAFETY: as above.
                let dst = unsafe { std::slice::from_raw_parts_mut(p.add(offset), vals.len()) };
                crate::fast_math::round_to_bf16(vals, dst);
            }
        }
    }
}

/// What follows the product, per output row: `+ bias[col]`, `+ residual[row][col]`, then
/// `activation` over the row's values.
#[derive(Debug, Clone, Copy, Default)]
pub struct Epilogue<'a> {
    /// The bias, one value per output column.
    pub bias: Option<&'a [f32]>,
    /// A residual shaped like the output.
    pub residual: Option<Values<'a>>,
    /// An element-wise activation, applied in place.
    pub activation: Option<fn(&mut [f32])>,
}

impl Epilogue<'_> {
    /// `vals` (the sums of row `row`, columns `col0..`, of an n-column output) finished.
    #[inline(always)]
    fn apply(&self, vals: &mut [f32], row: usize, col0: usize, n: usize) {
        if let Some(bias) = self.bias {
            vals.iter_mut().zip(&bias[col0..]).for_each(|(v, b)| *v += b);
        }
        let start = row * n + col0;
        match self.residual {
            Some(Values::F32(r)) => vals.iter_mut().zip(&r[start..]).for_each(|(v, r)| *v += r),
            Some(Values::Bf16(r)) => vals.iter_mut().zip(&r[start..]).for_each(|(v, r)| *v += r.to_f32()),
            None => {}
        }
        if let Some(f) = self.activation {
            f(vals);
        }
    }
}

/// W (n × k, bf16) in the layout one path's kernel reads; made once per weight.
pub struct PackedWeight {
    path: Bf16Path,
    n: usize,
    k: usize,
    data: Packed,
}

enum Packed {
    /// Panels of NR columns, `pairs` pairs of k each (see [`pack_w`]).
    Panels { pairs: usize, data: Vec<u32> },
    /// W widened to f32, row-major.
    Widened(Vec<f32>),
}

impl std::fmt::Debug for PackedWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedWeight({}×{} for {:?})", self.n, self.k, self.path)
    }
}

impl PackedWeight {
    /// W (n × k, row-major) packed for this machine's path.
    pub fn new(w: &[bf16], n: usize, k: usize) -> Result<Self> {
        Self::for_path(bf16_path(), w, n, k)
    }

    /// W packed for `path`, which must be one of [`available_paths`].
    pub fn for_path(path: Bf16Path, w: &[bf16], n: usize, k: usize) -> Result<Self> {
        if w.len() != n * k || n == 0 || k == 0 {
            candle_core::bail!("bf16 linear: a weight of {} values is not {n}×{k}", w.len());
        }
        if !available_paths().contains(&path) {
            candle_core::bail!("bf16 linear: this CPU has no {path:?} path");
        }
        let data = match path {
            Bf16Path::Amx => {
                let pairs = k.div_ceil(2).next_multiple_of(amx::KP);
                Packed::Panels { pairs, data: pack_w(w, k, n, pairs) }
            }
            Bf16Path::Avx512Bf16 => Packed::Panels { pairs: k.div_ceil(2), data: pack_w(w, k, n, k.div_ceil(2)) },
            Bf16Path::WidenedF32 => Packed::Widened(w.par_iter().map(|v| v.to_f32()).collect()),
        };
        Ok(Self { path, n, k, data })
    }

    /// The path it was packed for.
    pub fn path(&self) -> Bf16Path {
        self.path
    }

    /// (n, k): output and input features.
    pub fn dims(&self) -> (usize, usize) {
        (self.n, self.k)
    }
}

/// Output columns per panel of a packed weight (two registers of 16; AMX's two B tiles).
const NR: usize = 32;

/// Two bf16 values in one u32, the first in the low half (the layout `vdpbf16ps` pairs).
fn pair(lo: bf16, hi: bf16) -> u32 {
    u32::from(lo.to_bits()) | (u32::from(hi.to_bits()) << 16)
}

/// W (n × k) in panels of NR columns, `pairs` ≥ ⌈k/2⌉ rows each: panel[p][lane] pairs
/// w[col][2p], w[col][2p + 1] (the layout `vdpbf16ps` and AMX's B tiles take); columns past
/// n and pairs past ⌈k/2⌉ are 0.
fn pack_w(w: &[bf16], k: usize, n: usize, pairs: usize) -> Vec<u32> {
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

/// `out = epilogue(x·Wᵀ)` for x (rows × k), W packed (n × k) and out (rows × n), row-major.
pub fn linear(x: Values, w: &PackedWeight, rows: usize, epilogue: &Epilogue, mut out: ValuesMut) -> Result<()> {
    let (n, k) = (w.n, w.k);
    let residual_fits = epilogue.residual.is_none_or(|r| r.len() == rows * n);
    if x.len() != rows * k || out.len() != rows * n || epilogue.bias.is_some_and(|b| b.len() != n) || !residual_fits {
        candle_core::bail!(
            "bf16 linear: x {} of {rows}×{k}, out {} of {rows}×{n}, bias {:?}, residual {:?}",
            x.len(),
            out.len(),
            epilogue.bias.map(<[f32]>::len),
            epilogue.residual.map(|r| r.len())
        );
    }
    if rows == 0 {
        return Ok(());
    }
    match (&w.data, w.path) {
        (Packed::Panels { pairs, data }, Bf16Path::Avx512Bf16) => {
            avx512_bf16::linear(x, data, *pairs, rows, k, n, epilogue, out.ptr())
        }
        (Packed::Panels { pairs, data }, _) => {
            let mut sums = vec![0f32; rows * n];
            amx::linear_into(&mut sums, &x.widened(), data, *pairs, rows, k, n)?;
            finish_rows(sums, n, epilogue, out.ptr());
            Ok(())
        }
        (Packed::Widened(wide), _) => {
            let mut sums = vec![0f32; rows * n];
            let xf = x.widened();
            matmul_into(&mut sums, n, Mat::rows(&xf, rows, k, k), Mat::rows(wide, n, k, k).t(), 1.0, false, true)?;
            finish_rows(sums, n, epilogue, out.ptr());
            Ok(())
        }
    }
}

/// The epilogue over whole rows of sums, written to `out`.
fn finish_rows(mut sums: Vec<f32>, n: usize, epilogue: &Epilogue, out: OutPtr) {
    sums.par_chunks_mut(n).enumerate().for_each(|(row, vals)| {
        epilogue.apply(vals, row, 0, n);
        // SAFETY: row `row` of out (rows × n) is this task's alone.
        unsafe { out.store(row * n, vals) };
    });
}

/// `out += x·Wᵀ` for x (rows × k) f32, W (n × k) bf16 and out (rows × n) f32 on `path`, W
/// packed on each call (for side-by-side timings of the paths and their tests).
pub fn linear_on(
    path: Bf16Path,
    out: &mut [f32],
    x: &[f32],
    w: &[bf16],
    rows: usize,
    k: usize,
    n: usize,
) -> Result<()> {
    let packed = PackedWeight::for_path(path, w, n, k)?;
    let residual: Vec<f32> = out.to_vec();
    let epilogue = Epilogue { residual: Some(Values::F32(&residual)), ..Default::default() };
    linear(Values::F32(x), &packed, rows, &epilogue, ValuesMut::F32(out))
}

/// Full attention for bf16 inference: `softmax(q·kᵀ·scale + bias)·v` per (batch, head), for q,
/// k, v and out (batch, n, heads·d) as the projections leave them (no head split or merge copy)
/// and `bias` (batch, n) f32, the key mask's penalties. The products run on `vdpbf16ps` with f32
/// sums, the softmax in f32, and the probabilities are rounded to bf16 for the product with v.
/// `Ok(false)` where d is odd or this machine's bf16 path is not AVX512-BF16 (the caller then
/// takes another path): without it there is no fast bf16 product, and on AMX parts `vdpbf16ps`
/// ran at half the f32 FMAs' rate (docs/model.md), so they keep the f32 attention.
#[allow(clippy::too_many_arguments)]
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
    avx512_bf16::attention(q, k, v, (batch, n, heads, d), scale, bias, out);
    Ok(true)
}

#[cfg(target_arch = "x86_64")]
mod avx512_bf16 {
    use std::arch::x86_64::*;

    use candle_core::Result;
    use half::bf16;
    use rayon::prelude::*;

    use super::{pair, Epilogue, OutPtr, Values, NR};

    /// Rows of x per microkernel call.
    const MR: usize = 8;
    /// Rows of x per linear task.
    const ROW_BLOCK: usize = 64;
    /// Query rows per attention task: its scores (rows × keys, f32) stay in L2.
    const QUERY_CHUNK: usize = 64;

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

    /// `tile[r][c] = Σ_p dot(a[r][p], b[p][c])` for r < mr ≤ MR, c < NR and p < kp; a's rows
    /// are `lda` pairs apart (read unaligned), b's NR pairs; rows of `tile` past mr are left.
    ///
    /// # Safety
    /// The CPU has avx512f and avx512bf16; a holds mr rows of kp pairs, b kp × NR pairs.
    #[inline(always)]
    unsafe fn microkernel(a: *const u32, lda: usize, b: *const u32, kp: usize, mr: usize, tile: &mut [f32; MR * NR]) {
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

/// The AMX path: 16 × 16 f32 output tiles, four at a time (32 rows × 32 columns), each step
/// multiplying two 16-row tiles of x by two 16-column tiles of W over 32 values of k.
/// `../shared/reference/cpu.md` gives the tile layout; the instructions are written with `asm!`
/// (the AMX intrinsics are not stable Rust).
#[cfg(target_arch = "x86_64")]
mod amx {
    use std::arch::asm;

    use candle_core::Result;
    use rayon::prelude::*;

    use super::avx512_bf16::pack_x;
    use super::NR;

    /// Rows per block (two A tiles), pairs of k per step; a task takes NR output columns (two B
    /// tiles).
    const MR: usize = 32;
    pub(super) const KP: usize = 16;

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

    /// A raw pointer that tasks writing disjoint parts of one buffer share.
    #[derive(Clone, Copy)]
    struct SendPtr(*mut f32);
    // SAFETY: each task writes only its own columns (see `linear_into`).
    unsafe impl Send for SendPtr {}
    unsafe impl Sync for SendPtr {}
    impl SendPtr {
        fn get(self) -> *mut f32 {
            self.0
        }
    }

    /// `out += x·Wᵀ` for x (rows × k) f32 and W packed in panels of `pairs` (a multiple of KP)
    /// pairs.
    pub fn linear_into(
        out: &mut [f32],
        x: &[f32],
        wp: &[u32],
        pairs: usize,
        rows: usize,
        k: usize,
        n: usize,
    ) -> Result<()> {
        if rows == 0 || n == 0 || k == 0 {
            return Ok(());
        }
        if !pairs.is_multiple_of(KP) || pairs < k.div_ceil(2) || wp.len() != n.div_ceil(NR) * pairs * NR {
            candle_core::bail!("amx linear: a weight packed with {pairs} pairs does not fit k = {k}");
        }
        // k in steps of 32 values (16 pairs) and rows in blocks of 32, both zero-padded.
        let padded_rows = rows.next_multiple_of(MR);
        let xp = pack_x(x, rows, k, pairs, padded_rows);
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

    pub(super) const KP: usize = 16;

    pub fn available() -> bool {
        false
    }

    pub fn linear_into(_: &mut [f32], _: &[f32], _: &[u32], _: usize, _: usize, _: usize, _: usize) -> Result<()> {
        candle_core::bail!("amx linear: not an x86_64 CPU")
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod avx512_bf16 {
    use candle_core::Result;
    use half::bf16;

    use super::{Epilogue, OutPtr, Values};

    pub fn available() -> bool {
        false
    }

    #[allow(clippy::too_many_arguments)]
    pub fn linear(_: Values, _: &[u32], _: usize, _: usize, _: usize, _: usize, _: &Epilogue, _: OutPtr) -> Result<()> {
        candle_core::bail!("bf16 linear: not an x86_64 CPU")
    }

    pub fn attention(
        _: &[bf16],
        _: &[bf16],
        _: &[bf16],
        _: (usize, usize, usize, usize),
        _: f32,
        _: &[f32],
        _: &mut [bf16],
    ) {
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
        linear_on(bf16_path(), &mut fast, &x, &w, rows, k, n).unwrap();
        let mut portable = vec![0.0; rows * n];
        linear_on(Bf16Path::WidenedF32, &mut portable, &x, &w, rows, k, n).unwrap();
        // The fast path rounds x to bf16 (8 bits of mantissa): sums of 150 terms agree to ~1e-2.
        for (a, b) in fast.iter().zip(&portable) {
            assert!((a - b).abs() <= 2e-2 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }

    fn gelu_new_f64(z: f64) -> f64 {
        0.5 * z * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (z + 0.044715 * z * z * z)).tanh())
    }

    /// bf16 activations in, bf16 out, with every part of the epilogue, on each path: x read in
    /// place (even k) or copied into pairs (odd k), tails of rows and columns.
    #[test]
    fn bf16_rows_with_bias_residual_and_gelu_match_the_reference() {
        for path in available_paths() {
            for (rows, k, n) in [(11, 64, 45), (9, 33, 70), (1, 768, 96)] {
                let x: Vec<bf16> =
                    (0..rows * k).map(|i| bf16::from_f32(((i * 29 % 97) as f32 - 48.0) / 40.0)).collect();
                let w: Vec<bf16> = (0..n * k).map(|i| bf16::from_f32(((i * 53 % 89) as f32 - 44.0) / 300.0)).collect();
                let bias: Vec<f32> = (0..n).map(|c| c as f32 * 0.01 - 0.2).collect();
                let residual: Vec<bf16> = (0..rows * n).map(|i| bf16::from_f32((i % 7) as f32 * 0.1)).collect();
                let packed = PackedWeight::for_path(path, &w, n, k).unwrap();
                let epilogue = Epilogue {
                    bias: Some(&bias),
                    residual: Some(Values::Bf16(&residual)),
                    activation: Some(crate::fast_math::gelu_new_in_place),
                };
                let mut out = vec![bf16::ZERO; rows * n];
                linear(Values::Bf16(&x), &packed, rows, &epilogue, ValuesMut::Bf16(&mut out)).unwrap();
                for i in 0..rows * n {
                    let (r, c) = (i / n, i % n);
                    let dot: f64 =
                        (0..k).map(|j| f64::from(x[r * k + j].to_f32()) * f64::from(w[c * k + j].to_f32())).sum();
                    let want = gelu_new_f64(dot + f64::from(bias[c]) + f64::from(residual[i].to_f32()));
                    let got = f64::from(out[i].to_f32());
                    // One bf16 rounding of the output (2⁻⁸ relative) and f32 sums.
                    assert!(
                        (got - want).abs() <= 4e-3 * want.abs() + 1e-4,
                        "{path:?} {rows}×{k}×{n} at {i}: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_weight_packed_for_a_path_this_cpu_lacks_is_an_error() {
        let w = vec![bf16::ONE; 4];
        for path in [Bf16Path::Amx, Bf16Path::Avx512Bf16] {
            if !available_paths().contains(&path) {
                assert!(PackedWeight::for_path(path, &w, 2, 2).is_err());
            }
        }
        assert!(PackedWeight::for_path(Bf16Path::WidenedF32, &w, 3, 2).is_err(), "4 values are not 3×2");
    }

    /// softmax(q·kᵀ·scale + bias)·v per (batch, head) in f64 from the bf16 operands.
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
            if !avx512_bf16::available() {
                continue;
            }
            avx512_bf16::attention(&q, &k, &v, (batch, n, heads, d), scale, &bias, &mut out);
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
        let odd_d = vec![bf16::ONE; 3];
        let mut out = vec![bf16::ZERO; 3];
        assert!(!attention(&odd_d, &odd_d, &odd_d, (1, 1, 1, 3), 1.0, &[0.0], &mut out).unwrap(), "odd d declines");
    }
}
