//! What the trainer needs from a collective-communication library, as one small trait: its
//! rank, broadcast, sum all-reduce (blocking, or started and finished later so a reduction
//! overlaps the backward pass), and synchronisation. HCCL's communicator implements it
//! (`crate::ascend`); a CUDA/NCCL or CPU/gloo one would plug in without touching the trainer.

use candle_core::{Result, Tensor};

/// One rank's handle on a group of ranks that reduce gradients together. Errors are candle's,
/// as the gradient observer that starts reductions during the backward pass returns them.
pub trait Collective: Sync {
    /// This rank, 0 … ranks − 1.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn ranks(&self) -> usize;
    /// Overwrite `t` on every rank with root's `t`.
    fn broadcast(&self, t: &Tensor, root: usize) -> Result<()>;
    /// Sum `t` over the ranks, in place; done when the call returns.
    fn all_reduce_sum(&self, t: &Tensor) -> Result<()>;
    /// Start summing `t` over the ranks in place; [`Collective::finish_started`] makes every
    /// started reduction complete before later device work.
    fn start_all_reduce_sum(&self, t: &Tensor) -> Result<()>;
    /// Order every started reduction before the work queued after this call.
    fn finish_started(&self) -> Result<()>;
    /// Wait for every collective issued so far; a peer that failed or never arrived is an error.
    fn synchronize(&self) -> Result<()>;
}
