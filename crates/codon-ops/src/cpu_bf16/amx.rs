//! The AMX path: 16 × 16 f32 output tiles, four at a time (32 rows × 32 columns), each step
//! multiplying two 16-row tiles of x by two 16-column tiles of W over 32 values of k.
//! `../shared/reference/cpu.md` gives the tile layout; the instructions are written with `asm!`
//! (the AMX intrinsics are not stable Rust).
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
