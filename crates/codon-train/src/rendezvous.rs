//! Several processes, one rank each: the rank layout from torchrun's environment variables, and
//! the rendezvous that hands rank 0's bytes (HCCL's root info, NCCL's unique id) to the other
//! ranks, over TCP on `MASTER_ADDR:MASTER_PORT` or through a file on a shared filesystem. Only
//! those bytes go this way; the collective library carries every tensor.
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What went wrong while ranks found each other.
#[derive(Debug, thiserror::Error)]
pub enum RendezvousError {
    /// An environment variable that is missing or does not parse.
    #[error("{name}={value:?}: {why}")]
    Env {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        why: &'static str,
    },
    /// The exchange did not complete in time, or failed.
    #[error("rank {rank} of {world}: rendezvous at {at} failed: {why}")]
    Exchange {
        /// This rank.
        rank: usize,
        /// The number of ranks.
        world: usize,
        /// The address or file.
        at: String,
        /// What happened.
        why: String,
    },
}

/// This process's place among the ranks (torchrun's `RANK`, `WORLD_SIZE`, `LOCAL_RANK`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankLayout {
    /// This rank, 0 … world − 1.
    pub rank: usize,
    /// The number of ranks.
    pub world: usize,
    /// This rank's device index on its machine.
    pub local_rank: usize,
    /// The ranks on this machine (torchrun's `LOCAL_WORLD_SIZE`; without it, every rank when
    /// `LOCAL_RANK` is unset too, as on one machine, else this rank alone).
    pub local_world: usize,
}

fn env_number(var: &impl Fn(&str) -> Option<String>, name: &'static str) -> Result<Option<usize>, RendezvousError> {
    match var(name) {
        Some(v) => v.trim().parse().map(Some).map_err(|_| RendezvousError::Env { name, value: v, why: "not a number" }),
        None => Ok(None),
    }
}

impl RankLayout {
    /// The layout from `WORLD_SIZE`, `RANK`, `LOCAL_RANK` (default: `RANK`) and
    /// `LOCAL_WORLD_SIZE`; `None` when `WORLD_SIZE` is unset or 1.
    pub fn from_env() -> Result<Option<Self>, RendezvousError> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// [`Self::from_env`] over the variables `var` gives.
    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, RendezvousError> {
        let env_number = |name| env_number(&var, name);
        let Some(world) = env_number("WORLD_SIZE")?.filter(|&w| w > 1) else { return Ok(None) };
        let rank = env_number("RANK")?.ok_or(RendezvousError::Env {
            name: "RANK",
            value: String::new(),
            why: "must be set when WORLD_SIZE > 1",
        })?;
        if rank >= world {
            return Err(RendezvousError::Env {
                name: "RANK",
                value: rank.to_string(),
                why: "must be below WORLD_SIZE",
            });
        }
        let local = env_number("LOCAL_RANK")?;
        let local_rank = local.unwrap_or(rank);
        let local_world = match env_number("LOCAL_WORLD_SIZE")? {
            Some(n) => n.max(local_rank + 1),
            None if local.is_none() => world,
            None => local_rank + 1,
        };
        Ok(Some(Self { rank, world, local_rank, local_world }))
    }
}

/// Where the ranks meet.
#[derive(Debug, Clone)]
pub enum Rendezvous {
    /// Rank 0 listens on `MASTER_ADDR:MASTER_PORT`; the others connect.
    Tcp(String),
    /// Rank 0 writes the root info to a file (atomically); the others wait for it.
    File(PathBuf),
}

impl Rendezvous {
    /// `--rendezvous FILE` when given, else `MASTER_ADDR:MASTER_PORT` (torchrun's defaults:
    /// 127.0.0.1 and 29500).
    pub fn from_env(file: Option<PathBuf>) -> Self {
        match file {
            Some(f) => Self::File(f),
            None => {
                let addr = std::env::var("MASTER_ADDR").unwrap_or_else(|_| "127.0.0.1".into());
                let port = std::env::var("MASTER_PORT").unwrap_or_else(|_| "29500".into());
                Self::Tcp(format!("{addr}:{port}"))
            }
        }
    }

    fn at(&self) -> String {
        match self {
            Self::Tcp(a) => a.clone(),
            Self::File(f) => f.display().to_string(),
        }
    }
}

/// What a rank waits for, where and until when, said before it waits (a silent wait of minutes
/// looks like a hang): rank 0 for the others to fetch the root info, the others for rank 0.
/// `setting` names what sets the timeout (an environment variable), where something does.
pub fn waiting_line(layout: &RankLayout, how: &Rendezvous, timeout: Duration, setting: Option<&str>) -> String {
    let whom = match (layout.rank, how) {
        (0, Rendezvous::Tcp(at)) => format!("ranks 1-{} to connect to {at}", layout.world - 1),
        (0, Rendezvous::File(path)) => format!("ranks 1-{} to read {}", layout.world - 1, path.display()),
        (_, Rendezvous::Tcp(at)) => format!("rank 0 at {at} (MASTER_ADDR:MASTER_PORT)"),
        (_, Rendezvous::File(path)) => format!("rank 0 to write {}", path.display()),
    };
    let until = std::time::SystemTime::now() + timeout;
    let seconds = until.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) % 86_400;
    format!(
        "rank {} of {}: waiting for {whom}, for up to {} s (until {:02}:{:02}:{:02} UTC{})",
        layout.rank,
        layout.world,
        timeout.as_secs(),
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60,
        setting.map_or_else(String::new, |s| format!("; {s} sets it"))
    )
}

/// Rank 0's bytes on every rank: rank 0 passes them (`own`) and hands them to the others
/// through `how`, waiting up to `timeout` for each to fetch them; the others pass `None` and
/// wait as long for them.
pub fn exchange(
    layout: &RankLayout,
    how: &Rendezvous,
    timeout: Duration,
    own: Option<&[u8]>,
) -> Result<Vec<u8>, RendezvousError> {
    let fail = |why: String| RendezvousError::Exchange { rank: layout.rank, world: layout.world, at: how.at(), why };
    match (layout.rank, own) {
        (0, Some(bytes)) => {
            share(how, bytes, layout.world - 1, timeout).map_err(fail)?;
            Ok(bytes.to_vec())
        }
        (0, None) => Err(fail("rank 0 has nothing to share".into())),
        _ => receive(how, timeout).map_err(fail),
    }
}

fn share(how: &Rendezvous, bytes: &[u8], peers: usize, timeout: Duration) -> Result<(), String> {
    match how {
        Rendezvous::File(path) => {
            // Peers poll for the file: it appears whole or not at all (a temporary beside it, renamed).
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
            let mut file = tempfile::NamedTempFile::new_in(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            file.write_all(bytes).map_err(|e| e.to_string())?;
            file.persist(path).map(|_| ()).map_err(|e| format!("{}: {e}", path.display()))
        }
        Rendezvous::Tcp(addr) => {
            let listener = TcpListener::bind(addr).map_err(|e| format!("cannot listen: {e}"))?;
            listener.set_nonblocking(true).map_err(|e| e.to_string())?;
            let deadline = Instant::now() + timeout;
            let mut served = 0;
            while served < peers {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        stream.set_nonblocking(false).map_err(|e| e.to_string())?;
                        stream.write_all(bytes).map_err(|e| e.to_string())?;
                        served += 1;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        return Err(format!("{served} of {peers} ranks connected within {} s", timeout.as_secs()));
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
            Ok(())
        }
    }
}

fn receive(how: &Rendezvous, timeout: Duration) -> Result<Vec<u8>, String> {
    let deadline = Instant::now() + timeout;
    loop {
        let got = match how {
            Rendezvous::File(path) => std::fs::read(path).ok(),
            Rendezvous::Tcp(addr) => {
                let target = addr.to_socket_addrs().map_err(|e| e.to_string())?.next().ok_or("no address")?;
                TcpStream::connect_timeout(&target, Duration::from_millis(500)).ok().and_then(|mut s| {
                    let mut buf = Vec::new();
                    s.read_to_end(&mut buf).ok().map(|_| buf)
                })
            }
        };
        match got {
            Some(bytes) if !bytes.is_empty() => return Ok(bytes),
            _ if Instant::now() >= deadline => {
                return Err(format!("rank 0 did not answer within {} s", timeout.as_secs()))
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RankLayout;

    fn layout(vars: &[(&str, &str)]) -> Option<RankLayout> {
        RankLayout::from_vars(|name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())).unwrap()
    }

    /// torchrun sets LOCAL_WORLD_SIZE; without it a launch that sets no LOCAL_RANK is one
    /// machine's, and one that sets it says nothing of the other local ranks.
    #[test]
    fn the_ranks_on_this_machine() {
        assert_eq!(layout(&[("WORLD_SIZE", "1"), ("RANK", "0")]), None);
        let l = layout(&[("WORLD_SIZE", "16"), ("RANK", "9"), ("LOCAL_RANK", "1"), ("LOCAL_WORLD_SIZE", "8")]).unwrap();
        assert_eq!((l.rank, l.world, l.local_rank, l.local_world), (9, 16, 1, 8));
        let l = layout(&[("WORLD_SIZE", "4"), ("RANK", "0")]).unwrap();
        assert_eq!((l.local_rank, l.local_world), (0, 4));
        let l = layout(&[("WORLD_SIZE", "4"), ("RANK", "2"), ("LOCAL_RANK", "2")]).unwrap();
        assert_eq!((l.local_rank, l.local_world), (2, 3));
        assert!(RankLayout::from_vars(|n| (n == "WORLD_SIZE").then(|| "2".into())).is_err(), "RANK unset");
    }
}
