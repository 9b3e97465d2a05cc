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
//! fast paths; sums and the epilogue are f32. The bf16 attention kernel built on these
//! products is attention's own (its `cpu_bf16` module).
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
pub(crate) enum OutPtr {
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
    pub(crate) unsafe fn store(self, offset: usize, vals: &[f32]) {
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
pub(crate) const NR: usize = 32;

/// Two bf16 values in one u32, the first in the low half (the layout `vdpbf16ps` pairs).
pub(crate) fn pair(lo: bf16, hi: bf16) -> u32 {
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

#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512_bf16;
#[cfg(test)]
mod tests;

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

    use super::{Epilogue, OutPtr, Values};

    pub fn available() -> bool {
        false
    }

    #[allow(clippy::too_many_arguments)]
    pub fn linear(_: Values, _: &[u32], _: usize, _: usize, _: usize, _: usize, _: &Epilogue, _: OutPtr) -> Result<()> {
        candle_core::bail!("bf16 linear: not an x86_64 CPU")
    }
}
