//! The CUDA launches of the op's kernels (`kernels/codon_ops.cu`).
use crate::cuda::prelude::*;

/// x times a Philox dropout mask: kept where the mask's word is below `threshold`, scaled by
/// `scale` (see the module for the layout).
pub(crate) fn dropout(
    s: &CudaStorage,
    l: &Layout,
    seed: u64,
    offset: u64,
    threshold: u64,
    scale: f32,
) -> Result<CudaStorage> {
    let dev = &s.device;
    let n = l.shape().elem_count();
    if n == 0 {
        return s.try_clone(l);
    }
    let func = function!(dev, "dropout", s.dtype());
    let n64 = n as u64;
    with_float_type!(s.dtype(), "dropout", T => {
        let x = view::<T>(s, l, "dropout")?;
        // SAFETY: the arguments match the kernel's signature, and each thread writes a group of
        // four elements.
        Ok(unsafe {
            launch_into_fresh!(dev, func, elementwise_config(n.div_ceil(4)), T, n; &n64, &x, out, &seed, &offset, &threshold, &scale)
        })
    })
}
