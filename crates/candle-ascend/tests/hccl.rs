//! The emulator's HCCL (`libhccl.so`) through `candle_ascend::Communicator`: all-reduce of each
//! reduction and dtype, broadcast and barrier across emulated devices of one process
//! (`HcclCommInitAll`) and across ranks that join from root info (`HcclCommInitRootInfo`, here
//! one thread per rank); ranks that disagree, and a rank that never arrives, fail at the
//! stream's synchronisation instead of hanging.
use candle_ascend::{AscendDevice, Communicator, ReduceOp};
use candle_core::{DType, Device, Tensor};

mod common;
use common::on_soc;

/// One test at a time: the tests share the devices' streams, and collectives of two
/// communicators queued in different orders on two streams wait on each other (as on hardware).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn devices(n: usize) -> (Vec<Device>, Vec<AscendDevice>) {
    let devs: Vec<Device> = (0..n).map(|i| candle_ascend::parse_device(&format!("npu-sim:{i}")).unwrap()).collect();
    let ascend = devs.iter().map(|d| candle_ascend::ascend_device(d).unwrap().clone()).collect();
    (devs, ascend)
}

fn has_bf16(d: &AscendDevice) -> bool {
    d.soc().name.starts_with("Ascend910B")
}

/// Rank r holds r + 1 + i·(r + 2) at element i.
fn rank_values(rank: usize, len: usize) -> Vec<f64> {
    (0..len).map(|i| (rank + 1) as f64 + (i * (rank + 2)) as f64 * 0.5).collect()
}

#[test]
fn all_reduce_reduces_every_dtype_and_op_across_two_and_four_devices() {
    let _serial = serial();
    for ranks in [2, 4] {
        let (devs, ascend) = devices(ranks);
        let comms = Communicator::init_all(&ascend).unwrap();
        let mut dtypes = vec![DType::F32, DType::F16, DType::I32, DType::I64];
        if has_bf16(&ascend[0]) {
            dtypes.push(DType::BF16);
        }
        for dtype in dtypes {
            for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min] {
                let len = 5;
                let inputs: Vec<Vec<f64>> = (0..ranks).map(|r| rank_values(r, len)).collect();
                let want: Vec<f64> = (0..len)
                    .map(|i| {
                        let col = inputs.iter().map(|v| if dtype.is_int() { v[i].floor() } else { v[i] });
                        match op {
                            ReduceOp::Sum => col.sum(),
                            ReduceOp::Prod => col.product(),
                            ReduceOp::Max => col.fold(f64::MIN, f64::max),
                            ReduceOp::Min => col.fold(f64::MAX, f64::min),
                        }
                    })
                    .collect();
                let tensors: Vec<Tensor> = inputs
                    .iter()
                    .zip(&devs)
                    .map(|(v, d)| Tensor::new(v.as_slice(), d).unwrap().to_dtype(dtype).unwrap())
                    .collect();
                for (c, t) in comms.iter().zip(&tensors) {
                    c.all_reduce(t, op).unwrap();
                }
                for (r, t) in tensors.iter().enumerate() {
                    let got = t.to_dtype(DType::F64).unwrap().to_vec1::<f64>().unwrap();
                    for (g, w) in got.iter().zip(&want) {
                        let tol =
                            if matches!(dtype, DType::F16 | DType::BF16) { 1e-2 * w.abs().max(1.0) } else { 1e-9 };
                        assert!((g - w).abs() <= tol, "{ranks} ranks, {dtype:?} {op:?}, rank {r}: {got:?} vs {want:?}");
                    }
                }
            }
        }
        let counted = ascend[0].counters();
        assert!(counted.collectives >= 16 && counted.collective_bytes > 0, "{counted:?}");
    }
}

#[test]
fn all_reduces_larger_than_the_emulators_slot_are_exact() {
    let _serial = serial();
    let (devs, ascend) = devices(2);
    let comms = Communicator::init_all(&ascend).unwrap();
    // 3M f32 elements: 12 MB, three rounds of the emulator's 4 MiB slots.
    let n = 3 << 20;
    let tensors: Vec<Tensor> =
        devs.iter().enumerate().map(|(r, d)| Tensor::full((r + 1) as f32, n, d).unwrap()).collect();
    for (c, t) in comms.iter().zip(&tensors) {
        c.all_reduce(t, ReduceOp::Sum).unwrap();
    }
    for t in &tensors {
        let v = t.to_vec1::<f32>().unwrap();
        assert!(v.iter().all(|&x| x == 3.0), "{:?}", &v[..4]);
    }
}

#[test]
fn broadcast_copies_the_roots_tensor_and_barrier_returns() {
    let _serial = serial();
    let (devs, ascend) = devices(3);
    let comms = Communicator::init_all(&ascend).unwrap();
    let tensors: Vec<Tensor> =
        devs.iter().enumerate().map(|(r, d)| Tensor::new(&[r as f32 * 10.0, 1.0 + r as f32], d).unwrap()).collect();
    let before = ascend[0].sim_counters().unwrap().collectives;
    for (c, t) in comms.iter().zip(&tensors) {
        c.broadcast(t, 1).unwrap();
        c.barrier().unwrap();
    }
    for t in &tensors {
        assert_eq!(t.to_vec1::<f32>().unwrap(), vec![10.0, 2.0]);
    }
    // The emulator counts each rank's collectives when they run: 3 broadcasts of 8 bytes and 3
    // barriers of none; the backend counts what each device issued.
    let after = ascend[0].sim_counters().unwrap().collectives;
    assert_eq!((after.0 - before.0, after.1 - before.1), (6, 24));
    assert!(ascend[2].counters().collectives >= 2);
    // A root outside the communicator is refused before HCCL is called.
    let err = comms[0].broadcast(&tensors[0], 3).unwrap_err().to_string();
    assert!(err.contains("root 3 of 3 ranks"), "{err}");
}

#[test]
fn ranks_that_join_from_root_info_reduce_together() {
    let _serial = serial();
    let (devs, ascend) = devices(3);
    let root = Communicator::root_info(&ascend[0]).unwrap();
    assert_eq!(root.as_bytes().len(), 4108);
    let results: Vec<Vec<f32>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|rank| {
                let (dev, asc, bytes) = (devs[rank].clone(), ascend[rank].clone(), root.as_bytes().to_vec());
                s.spawn(move || {
                    let info = candle_ascend::RootInfo::from_bytes(&bytes).unwrap();
                    let comm = Communicator::init_rank(&asc, 3, rank, &info).unwrap();
                    let t = Tensor::new(&[rank as f32, 1.0], &dev).unwrap();
                    comm.all_reduce(&t, ReduceOp::Sum).unwrap();
                    t.to_vec1::<f32>().unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in results {
        assert_eq!(r, vec![3.0, 3.0]);
    }
    let err = candle_ascend::RootInfo::from_bytes(&[0; 12]).unwrap_err().to_string();
    assert!(err.contains("4108 bytes"), "{err}");
}

#[test]
fn ranks_that_disagree_fail_at_synchronisation() {
    let _serial = serial();
    let (devs, ascend) = devices(2);
    let comms = Communicator::init_all(&ascend).unwrap();
    let a = Tensor::zeros(4, DType::F32, &devs[0]).unwrap();
    let b = Tensor::zeros(5, DType::F32, &devs[1]).unwrap();
    comms[0].all_reduce(&a, ReduceOp::Sum).unwrap();
    comms[1].all_reduce(&b, ReduceOp::Sum).unwrap();
    let err = ascend[0].synchronize().unwrap_err().to_string();
    assert!(err.contains("ranks disagree") && err.contains("count 4") && err.contains("count 5"), "{err}");
    assert!(ascend[1].synchronize().is_err());
}

#[test]
fn a_rank_that_never_arrives_times_the_others_out() {
    // HCCL_EXEC_TIMEOUT is read when the collective runs; the Atlas training series rounds it
    // down to a multiple of 68 s, so this short wait runs under the A2 profile.
    if !on_soc("Ascend910B3", "a_rank_that_never_arrives_times_the_others_out") {
        return;
    }
    let _serial = serial();
    let (devs, ascend) = devices(2);
    // SAFETY (env): no other test of this binary reads HCCL_EXEC_TIMEOUT's value differently.
    unsafe { std::env::set_var("HCCL_EXEC_TIMEOUT", "1") };
    let comms = Communicator::init_all(&ascend).unwrap();
    let a = Tensor::zeros(4, DType::F32, &devs[0]).unwrap();
    let start = std::time::Instant::now();
    comms[0].all_reduce(&a, ReduceOp::Sum).unwrap();
    let err = ascend[0].synchronize().unwrap_err().to_string();
    assert!(err.contains("HcclResult 9") && err.contains("HCCL_EXEC_TIMEOUT"), "{err}");
    assert!(start.elapsed() < std::time::Duration::from_secs(10), "{:?}", start.elapsed());
}

#[test]
fn no_bf16_tensor_reaches_a_collective_on_a_910a() {
    if !on_soc("Ascend910A", "no_bf16_tensor_reaches_a_collective_on_a_910a") {
        return;
    }
    let _serial = serial();
    let (devs, _) = devices(2);
    // A 910A has no BF16: the tensor a collective would take cannot be made.
    let err = Tensor::zeros(4, DType::BF16, &devs[0]).unwrap_err().to_string();
    assert!(err.contains("Ascend910A"), "{err}");
}

/// `start_all_reduce` runs on the communicator's own stream, after the work already queued on
/// the device stream (the emulator's device stream runs lazily, so without the event the
/// reduction would read the buffer before the kernel that writes it), and returns at once:
/// later device work is queued before `finish_started` waits.
#[test]
fn started_all_reduces_follow_earlier_kernels_and_finish_together() {
    let _serial = serial();
    let (devs, ascend) = devices(2);
    let comms = Communicator::init_all(&ascend).unwrap();
    let inputs: Vec<Vec<f64>> = (0..2).map(|r| rank_values(r, 6)).collect();
    let mut buckets = Vec::new();
    for (c, (v, d)) in comms.iter().zip(inputs.iter().zip(&devs)) {
        let x = Tensor::new(v.as_slice(), d).unwrap().to_dtype(DType::F32).unwrap();
        let doubled = (&x * 2.0).unwrap();
        c.start_all_reduce(&doubled, ReduceOp::Sum).unwrap();
        let later = (&x + 1.0).unwrap();
        buckets.push((doubled, later));
    }
    for c in &comms {
        c.finish_started().unwrap();
    }
    let want: Vec<f32> = (0..6).map(|i| (2.0 * (inputs[0][i] + inputs[1][i])) as f32).collect();
    for (r, (doubled, later)) in buckets.iter().enumerate() {
        assert_eq!(doubled.to_vec1::<f32>().unwrap(), want, "rank {r}");
        let plus_one: Vec<f32> = inputs[r].iter().map(|v| (v + 1.0) as f32).collect();
        assert_eq!(later.to_vec1::<f32>().unwrap(), plus_one, "rank {r}");
    }
    // Nothing started: finishing is a no-op.
    comms[0].finish_started().unwrap();
}

/// A started all-reduce whose peer never starts one fails, naming the rank, when the host
/// synchronises with the communicator.
#[test]
fn a_started_all_reduce_without_its_peer_fails_at_synchronisation() {
    if !on_soc("Ascend910B3", "a_started_all_reduce_without_its_peer_fails_at_synchronisation") {
        return;
    }
    let _serial = serial();
    let (devs, ascend) = devices(2);
    // SAFETY (env): no other test of this binary reads HCCL_EXEC_TIMEOUT's value differently.
    unsafe { std::env::set_var("HCCL_EXEC_TIMEOUT", "1") };
    let comms = Communicator::init_all(&ascend).unwrap();
    let a = Tensor::zeros(4, DType::F32, &devs[0]).unwrap();
    comms[0].start_all_reduce(&a, ReduceOp::Sum).unwrap();
    comms[0].finish_started().unwrap();
    let err = comms[0].synchronize().unwrap_err().to_string();
    assert!(err.contains("rank 0 of 2") && err.contains("HCCL_EXEC_TIMEOUT"), "{err}");
}

/// Integers reduce exactly (2^53 + 1 does not survive a trip through a double), and a NaN on
/// one rank stays NaN under max and min instead of being dropped.
#[test]
fn int64_sums_are_exact_and_nan_survives_max_and_min() {
    let _serial = serial();
    let (devs, ascend) = devices(2);
    let comms = Communicator::init_all(&ascend).unwrap();
    let big = (1i64 << 53) + 1;
    let ints: Vec<Tensor> = devs.iter().map(|d| Tensor::new(&[big, -3], d).unwrap()).collect();
    for (c, t) in comms.iter().zip(&ints) {
        c.all_reduce(t, ReduceOp::Sum).unwrap();
    }
    for t in &ints {
        assert_eq!(t.to_vec1::<i64>().unwrap(), vec![2 * big, -6]);
    }
    for op in [ReduceOp::Max, ReduceOp::Min] {
        let floats: Vec<Tensor> =
            devs.iter().zip([f32::NAN, 1.0]).map(|(d, v)| Tensor::new(&[v, 2.0], d).unwrap()).collect();
        for (c, t) in comms.iter().zip(&floats) {
            c.all_reduce(t, op).unwrap();
        }
        for t in &floats {
            let got = t.to_vec1::<f32>().unwrap();
            assert!(got[0].is_nan() && got[1] == 2.0, "{op:?}: {got:?}");
        }
    }
}

/// A rank number joins a communicator once: of two joins as rank 0, one forms the
/// communicator with rank 1 and the other is refused (as a duplicate, or because the
/// rendezvous has closed), whatever their order.
#[test]
fn a_rank_that_joins_twice_is_refused() {
    let _serial = serial();
    let (_, ascend) = devices(2);
    let root = Communicator::root_info(&ascend[0]).unwrap();
    let (zeros, one) = std::thread::scope(|s| {
        let twice: Vec<_> =
            (0..2).map(|_| s.spawn(|| Communicator::init_rank(&ascend[0], 2, 0, &root).map(|c| c.rank()))).collect();
        let one = Communicator::init_rank(&ascend[1], 2, 1, &root).map(|c| c.rank());
        let zeros: Vec<_> = twice.into_iter().map(|h| h.join().unwrap().map_err(|e| e.to_string())).collect();
        (zeros, one)
    });
    assert_eq!(one.map_err(|e| format!("{e} / {zeros:?}")).unwrap(), 1);
    let joined: Vec<_> = zeros.iter().filter(|r| r.is_ok()).collect();
    assert_eq!(joined.len(), 1, "{zeros:?}");
    let refused = zeros.iter().find_map(|r| r.as_ref().err()).unwrap();
    assert!(refused.contains("already joined") || refused.contains("rendezvous is gone"), "{refused}");
}
