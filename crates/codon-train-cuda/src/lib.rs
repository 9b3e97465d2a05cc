//! `codon-train-cuda`: the trainer on NVIDIA GPUs. NCCL's communicator is the trainer's
//! [`Collective`]: several GPUs of one process train data-parallel ([`fit_data_parallel`],
//! `--num_gpus N`), or one process per GPU joins the others through the rendezvous
//! ([`Nccl::join`], torchrun's variables). A crate of its own, beside the trainer and the ops, as
//! `codon-train-ascend` is for HCCL.
//!
//! NCCL is opened at run time ([`nccl`]), so a build links nothing of it and a machine without it
//! fails only when several GPUs are asked for.
#![warn(missing_docs)]
use std::path::Path;
use std::time::Duration;

use candle_core::{Device, Tensor};
use codon_train::rendezvous::{exchange, RankLayout, Rendezvous, RendezvousError};
use codon_train::{BatchSource, Collective, TrainReport, TrainableModel, Trainer};

pub mod nccl;

pub use nccl::NcclError;

/// One rank's NCCL communicator on one GPU, as the trainer's [`Collective`]. Every collective is
/// queued on the GPU's one stream (the one candle queues all its work on), so it is ordered
/// after the work that made its tensor and before the work that reads it, with no host wait.
pub struct Nccl {
    comm: nccl::Comm,
    rank: usize,
    ranks: usize,
    device: Device,
}

impl Nccl {
    /// One communicator per device, rank k on `devices[k]`, in this process
    /// (`ncclCommInitAll`). Each device must be a distinct GPU.
    pub fn init_all(devices: &[Device]) -> Result<Vec<Nccl>, NcclError> {
        let ordinals = devices.iter().map(nccl::ordinal).collect::<Result<Vec<_>, _>>()?;
        let comms = nccl::Comm::init_all(&ordinals)?;
        let ranks = devices.len();
        Ok(comms
            .into_iter()
            .zip(devices)
            .enumerate()
            .map(|(rank, (comm, d))| Nccl { comm, rank, ranks, device: d.clone() })
            .collect())
    }

    /// This process's rank on `device` in a run of one process per GPU: rank 0 makes NCCL's
    /// unique id and hands it to the others through `how`; every rank then joins
    /// (`ncclCommInitRank`). Waits up to `timeout` for the others.
    pub fn join(layout: &RankLayout, device: &Device, how: &Rendezvous, timeout: Duration) -> Result<Nccl, JoinError> {
        let own = match layout.rank {
            0 => Some(nccl::UniqueId::new()?),
            _ => None,
        };
        let bytes = exchange(layout, how, timeout, own.as_ref().map(nccl::UniqueId::as_bytes))?;
        let id = nccl::UniqueId::from_bytes(&bytes)?;
        let comm = nccl::Comm::init_rank(device, layout.world, layout.rank, &id)?;
        Ok(Nccl { comm, rank: layout.rank, ranks: layout.world, device: device.clone() })
    }
}

/// Why a rank of a multi-process run could not join NCCL.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The ranks did not find each other.
    #[error(transparent)]
    Rendezvous(#[from] RendezvousError),
    /// NCCL refused the id or the communicator.
    #[error(transparent)]
    Nccl(#[from] NcclError),
}

impl Collective for Nccl {
    fn rank(&self) -> usize {
        self.rank
    }
    fn ranks(&self) -> usize {
        self.ranks
    }
    fn broadcast(&self, t: &Tensor, root: usize) -> candle_core::Result<()> {
        self.comm.broadcast(t, root).map_err(candle_core::Error::wrap)
    }
    fn all_reduce_sum(&self, t: &Tensor) -> candle_core::Result<()> {
        self.comm.all_reduce_sum(t).map_err(candle_core::Error::wrap)
    }
    fn start_all_reduce_sum(&self, t: &Tensor) -> candle_core::Result<()> {
        // Already asynchronous: queued on the stream that later work waits behind.
        self.all_reduce_sum(t)
    }
    fn finish_started(&self) -> candle_core::Result<()> {
        // One stream orders the reductions before whatever is queued after them.
        Ok(())
    }
    fn synchronize(&self) -> candle_core::Result<()> {
        self.device.synchronize()?;
        self.comm.async_error().map_err(candle_core::Error::wrap)
    }
}

/// [`Trainer::fit_data_parallel`] over NCCL, one rank per replica: the replicas must live on
/// distinct NVIDIA GPUs; their communicators are set up here.
pub fn fit_data_parallel<M, S>(
    trainer: &Trainer,
    replicas: &[M],
    data: &S,
    resume: Option<&Path>,
) -> codon_train::Result<TrainReport>
where
    M: TrainableModel + Sync,
    S: BatchSource<Batch = M::Batch> + Sync,
{
    trainer.fit_data_parallel_over(replicas, data, resume, |devices| {
        if let Some(other) = devices.iter().find(|d| !d.is_cuda()) {
            return Err(format!(
                "data-parallel training over NCCL runs on NVIDIA GPUs (cuda:N); {} trains on one device",
                other.location()
            ));
        }
        Nccl::init_all(devices).map_err(|e| e.to_string())
    })
}
