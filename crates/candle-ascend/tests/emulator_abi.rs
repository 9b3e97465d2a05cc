//! The emulated toolkit behaves like CANN where bugs hide, checked through its C ABI: single-use
//! executors, opbase's phase-2 rules, the default stream, pinned and ordered async copies,
//! documented status codes with messages, `aclInit` repeats, and copies of zero bytes.
use std::ffi::{c_void, CStr};
use std::ptr::null_mut;

use candle_ascend::ffi::types::*;
use candle_ascend::ffi::Toolkit;
use candle_ascend::ToolkitKind;

type T = AclTensorPtr;
type Unary = unsafe extern "C" fn(T, T, *mut u64, *mut AclExecutorPtr) -> i32;
type ReduceSum = unsafe extern "C" fn(T, AclIntArrayPtr, bool, i32, T, *mut u64, *mut AclExecutorPtr) -> i32;
type Bmm = unsafe extern "C" fn(T, T, T, i8, *mut u64, *mut AclExecutorPtr) -> i32;

struct Env {
    tk: std::sync::Arc<Toolkit>,
    stream: AclrtStream,
}

impl Env {
    fn new() -> Self {
        let tk = Toolkit::get(ToolkitKind::Emulated).unwrap();
        let mut stream = null_mut();
        unsafe {
            assert_eq!((tk.api.aclrtSetDevice)(0), 0);
            assert_eq!((tk.api.aclrtCreateStream)(&mut stream), 0);
        }
        Self { tk, stream }
    }

    fn malloc(&self, bytes: usize) -> *mut c_void {
        let mut p = null_mut();
        assert_eq!(unsafe { (self.tk.api.aclrtMalloc)(&mut p, bytes, 0) }, 0);
        p
    }

    fn tensor(&self, data: *mut c_void, dims: &[i64], dtype: i32) -> T {
        let n: i64 = dims.iter().product();
        let t = unsafe {
            (self.tk.api.aclCreateTensor)(dims.as_ptr(), dims.len() as u64, dtype, std::ptr::null(), 0, 2, &n, 1, data)
        };
        assert!(!t.is_null());
        t
    }

    /// Phase 1 of aclnnAbs in place over a fresh 4-float buffer: its executor, and phase 2.
    fn abs_in_place(&self) -> (AclExecutorPtr, Phase2) {
        let buf = self.malloc(64);
        let (x, y) = (self.tensor(buf, &[4], dtype::FLOAT), self.tensor(buf, &[4], dtype::FLOAT));
        let (p1, p2) = self.tk.op("aclnnAbs").unwrap();
        let p1: Unary = unsafe { std::mem::transmute(p1) };
        let (mut ws, mut exec) = (0u64, null_mut());
        assert_eq!(unsafe { p1(x, y, &mut ws, &mut exec) }, 0);
        (exec, p2)
    }

    fn message(&self) -> String {
        let p = unsafe { (self.tk.api.aclGetRecentErrMsg)() };
        assert!(!p.is_null(), "no error message");
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// Reusing an executor is a use after free on real CANN (opbase frees it after it runs): the
/// emulator stops the process. The test re-runs itself in a child that does the reuse.
#[test]
fn reusing_an_executor_aborts() {
    const CHILD: &str = "CANDLE_ASCEND_REUSE_EXECUTOR";
    if std::env::var_os(CHILD).is_some() {
        let env = Env::new();
        let (exec, p2) = env.abs_in_place();
        unsafe {
            assert_eq!(p2(null_mut(), 0, exec, env.stream), 0);
            p2(null_mut(), 0, exec, env.stream);
        }
        println!("the second launch returned");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "reusing_an_executor_aborts", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("second launch returned"), "{stderr}");
    assert!(stderr.contains("use after free"), "{stderr}");
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(6), "expected SIGABRT, got {:?}", out.status);
    }
}

/// opbase's phase 2: a positive size with a NULL workspace is 161001; the size itself is not
/// checked, so a short workspace fails when the kernel runs (an AI Core fault at the next
/// synchronisation); a NULL executor is 161001.
#[test]
fn phase_two_checks_the_workspace_as_opbase_does() {
    let env = Env::new();
    let buf = env.malloc(64);
    let out = env.malloc(64);
    let (x, y) = (env.tensor(buf, &[2, 4], dtype::FLOAT), env.tensor(out, &[2, 1], dtype::FLOAT));
    let dims = [1i64];
    let dims = unsafe { (env.tk.api.aclCreateIntArray)(dims.as_ptr(), 1) };
    let (p1, p2) = env.tk.op("aclnnReduceSum").unwrap();
    let p1: ReduceSum = unsafe { std::mem::transmute(p1) };
    let (mut ws, mut exec) = (0u64, null_mut());
    unsafe {
        assert_eq!(p1(x, dims, true, dtype::FLOAT, y, &mut ws, &mut exec), 0);
        assert!(ws > 0, "the reduction asks for an accumulator");
        assert_eq!(p2(null_mut(), ws, exec, env.stream), ACLNN_ERR_PARAM_NULLPTR, "positive size, NULL workspace");
        assert!(env.message().contains("null workspace"));
        assert_eq!(p2(null_mut(), 0, null_mut(), env.stream), ACLNN_ERR_PARAM_NULLPTR, "NULL executor");
        // Size 0 passes phase 2 (no size check), and the kernel then faults.
        assert_eq!(p1(x, dims, true, dtype::FLOAT, y, &mut ws, &mut exec), 0);
        assert_eq!(p2(null_mut(), 0, exec, env.stream), 0, "phase 2 does not compare sizes");
        assert_eq!((env.tk.api.aclrtSynchronizeStream)(env.stream), 507_015);
        assert!(env.message().contains("workspace"));
        // With the workspace it runs.
        assert_eq!(p1(x, dims, true, dtype::FLOAT, y, &mut ws, &mut exec), 0);
        let w = env.malloc(ws as usize);
        assert_eq!(p2(w, ws, exec, env.stream), 0);
        assert_eq!((env.tk.api.aclrtSynchronizeStream)(env.stream), 0);
    }
}

/// In ACL a NULL stream is the default stream, for launches and for synchronisation.
#[test]
fn a_null_stream_is_the_default_stream() {
    let env = Env::new();
    let (exec, p2) = env.abs_in_place();
    unsafe {
        assert_eq!(p2(null_mut(), 0, exec, null_mut()), 0, "launch on the default stream");
        assert_eq!((env.tk.api.aclrtSynchronizeStream)(null_mut()), 0, "synchronise the default stream");
    }
}

/// aclrtMemcpyAsync takes only pinned host memory (CANN 8.0 on Atlas training and A2), and the
/// copy happens when the stream gets to it: reading the destination before synchronising sees
/// the old bytes.
#[test]
fn async_copies_need_pinned_memory_and_a_synchronisation() {
    let env = Env::new();
    let api = &env.tk.api;
    let dev = env.malloc(16);
    let pageable = [7u8; 16];
    unsafe {
        let code = (api.aclrtMemcpyAsync)(dev, 16, pageable.as_ptr().cast(), 16, ACL_MEMCPY_HOST_TO_DEVICE, env.stream);
        assert_ne!(code, 0, "pageable host memory must be refused");
        assert!(env.message().contains("aclrtMallocHost"));
        let mut pinned = null_mut();
        assert_eq!((api.aclrtMallocHost)(&mut pinned, 16), 0);
        std::ptr::write_bytes(pinned.cast::<u8>(), 7, 16);
        assert_eq!((api.aclrtMemcpyAsync)(dev, 16, pinned, 16, ACL_MEMCPY_HOST_TO_DEVICE, env.stream), 0);
        let mut back = [0u8; 16];
        // A synchronous copy is not ordered after the stream: without a synchronisation it
        // reads the device memory as it was.
        assert_eq!((api.aclrtMemcpy)(back.as_mut_ptr().cast(), 16, dev, 16, ACL_MEMCPY_DEVICE_TO_HOST), 0);
        assert_ne!(back, [7u8; 16], "the async copy ran before the stream was synchronised");
        assert_eq!((api.aclrtSynchronizeStream)(env.stream), 0);
        assert_eq!((api.aclrtMemcpy)(back.as_mut_ptr().cast(), 16, dev, 16, ACL_MEMCPY_DEVICE_TO_HOST), 0);
        assert_eq!(back, [7u8; 16]);
        assert_eq!((api.aclrtFreeHost)(pinned), 0);
    }
}

/// An event orders one stream after another (`aclrtStreamWaitEvent` waits for the event's
/// latest record): a copy queued on a second stream after the wait sees what the first stream
/// wrote, though the host never waited for the first stream. An event never recorded cannot
/// be waited on.
#[test]
fn events_order_one_stream_after_another() {
    let env = Env::new();
    let api = &env.tk.api;
    let (src, dst) = (env.malloc(16), env.malloc(16));
    unsafe {
        let mut other = null_mut();
        assert_eq!((api.aclrtCreateStream)(&mut other), 0);
        let mut event = null_mut();
        assert_eq!((api.aclrtCreateEvent)(&mut event), 0);
        assert_eq!((api.aclrtStreamWaitEvent)(other, event), ACL_ERROR_RT_PARAM_INVALID);
        assert!(env.message().contains("not been recorded"));
        let mut pinned = null_mut();
        assert_eq!((api.aclrtMallocHost)(&mut pinned, 16), 0);
        std::ptr::write_bytes(pinned.cast::<u8>(), 9, 16);
        assert_eq!((api.aclrtMemcpyAsync)(src, 16, pinned, 16, ACL_MEMCPY_HOST_TO_DEVICE, env.stream), 0);
        assert_eq!((api.aclrtRecordEvent)(event, env.stream), 0);
        assert_eq!((api.aclrtStreamWaitEvent)(other, event), 0);
        assert_eq!((api.aclrtMemcpyAsync)(dst, 16, src, 16, ACL_MEMCPY_DEVICE_TO_DEVICE, other), 0);
        assert_eq!((api.aclrtSynchronizeStream)(other), 0);
        let mut back = [0u8; 16];
        assert_eq!((api.aclrtMemcpy)(back.as_mut_ptr().cast(), 16, dst, 16, ACL_MEMCPY_DEVICE_TO_HOST), 0);
        assert_eq!(back, [9u8; 16]);
        assert_eq!((api.aclrtDestroyEvent)(event), 0);
        assert_eq!((api.aclrtDestroyStream)(other), 0);
        assert_eq!((api.aclrtFreeHost)(pinned), 0);
    }
}

#[test]
fn unsupported_combinations_return_documented_codes() {
    let env = Env::new();
    let buf = env.malloc(256);
    let (p1, _) = env.tk.op("aclnnBatchMatMul").unwrap();
    let p1: Bmm = unsafe { std::mem::transmute(p1) };
    let (mut ws, mut exec) = (0u64, null_mut());
    let a = env.tensor(buf, &[1, 2, 2], dtype::UINT32);
    let code = unsafe { p1(a, a, a, 0, &mut ws, &mut exec) };
    assert_eq!(code, 161_002);
    assert!(env.message().contains("not supported"), "dtype error names the problem");
    let f = env.tensor(buf, &[1, 2, 2], dtype::FLOAT);
    assert_eq!(unsafe { p1(f, f, f, 4, &mut ws, &mut exec) }, 161_002, "cubeMathType out of range");
    assert_eq!(unsafe { p1(null_mut(), f, f, 0, &mut ws, &mut exec) }, ACLNN_ERR_PARAM_NULLPTR, "null operand");
    // The message is returned once, then cleared.
    let _ = unsafe { (env.tk.api.aclGetRecentErrMsg)() };
    assert!(unsafe { (env.tk.api.aclGetRecentErrMsg)() }.is_null());
    // A view outside device memory is refused.
    let host = [0f32; 4];
    let bad = env.tensor(host.as_ptr() as *mut c_void, &[1, 2, 2], dtype::FLOAT);
    let (p1, _) = env.tk.op("aclnnAbs").unwrap();
    let p1: Unary = unsafe { std::mem::transmute(p1) };
    assert_eq!(unsafe { p1(bad, bad, &mut ws, &mut exec) }, 161_002);
    assert!(env.message().contains("device memory"));
}

#[test]
fn runtime_edge_cases_match_cann() {
    let env = Env::new();
    let api = &env.tk.api;
    unsafe {
        assert_eq!((api.aclInit)(std::ptr::null()), ACL_ERROR_REPEAT_INITIALIZE);
        let mut p = null_mut();
        assert_ne!((api.aclrtMalloc)(&mut p, 0, 0), 0, "size 0 is an error");
        assert_ne!((api.aclrtFree)(null_mut()), 0, "freeing NULL is an error");
        let d = env.malloc(32);
        assert_eq!((api.aclrtMemcpyAsync)(d, 32, std::ptr::null(), 0, ACL_MEMCPY_HOST_TO_DEVICE, env.stream), 0);
        assert!((api.aclCreateScalar)(null_mut(), dtype::FLOAT).is_null());
        assert_eq!((api.aclDestroyTensor)(null_mut()), 0);
    }
}

/// The loss and linear operators refuse what ops-nn's op_api refuses (`aclnn_nll_loss.cpp`,
/// `aclnn_logsoftmax.cpp`, `aclnn_addmm.cpp` at e5c3fa932), with its status codes.
#[test]
fn loss_and_addmm_refuse_what_ops_nn_refuses() {
    type Nll = unsafe extern "C" fn(T, T, T, i64, i64, T, T, *mut u64, *mut AclExecutorPtr) -> i32;
    type LogSoftmax = unsafe extern "C" fn(T, i64, T, *mut u64, *mut AclExecutorPtr) -> i32;
    type Addmm = unsafe extern "C" fn(T, T, T, AclScalarPtr, AclScalarPtr, T, i8, *mut u64, *mut AclExecutorPtr) -> i32;
    let env = Env::new();
    let buf = env.malloc(1024);
    let (mut ws, mut exec) = (0u64, null_mut());
    let f = |dims: &[i64]| env.tensor(buf, dims, dtype::FLOAT);
    let (x, target, weight, scalar) = (f(&[4, 3]), env.tensor(buf, &[4], dtype::INT64), f(&[3]), f(&[]));

    let nll: Nll = unsafe { std::mem::transmute(env.tk.op("aclnnNLLLoss").unwrap().0) };
    let call = |x: T, t: T, w: T, reduction: i64| unsafe {
        let (mut ws, mut exec) = (0u64, null_mut());
        nll(x, t, w, reduction, -100, scalar, scalar, &mut ws, &mut exec)
    };
    assert_eq!(call(x, target, weight, 1), 0);
    assert_eq!(call(x, target, null_mut(), 1), ACLNN_ERR_PARAM_NULLPTR, "weight is required");
    assert_eq!(call(x, target, weight, 3), 161_002, "reduction beyond sum");
    assert_eq!(call(x, f(&[4]), weight, 1), 161_002, "a FLOAT target");
    assert_eq!(call(x, env.tensor(buf, &[5], dtype::INT64), weight, 1), 161_002, "5 targets for 4 rows");
    assert_eq!(call(x, target, f(&[4]), 1), 161_002, "weight of the wrong size");

    let log_softmax: LogSoftmax = unsafe { std::mem::transmute(env.tk.op("aclnnLogSoftmax").unwrap().0) };
    assert_eq!(unsafe { log_softmax(x, 1, x, &mut ws, &mut exec) }, 0);
    assert_eq!(unsafe { log_softmax(x, 2, x, &mut ws, &mut exec) }, 161_002, "dim = rank");

    let addmm: Addmm = unsafe { std::mem::transmute(env.tk.op("aclnnAddmm").unwrap().0) };
    let mut one = 1.0f64;
    let one = unsafe { (env.tk.api.aclCreateScalar)((&mut one as *mut f64).cast(), dtype::DOUBLE) };
    let (a, b, out) = (f(&[4, 2]), f(&[2, 3]), f(&[4, 3]));
    let call = |c: T, a: T, b: T, beta: AclScalarPtr, cube: i8| unsafe {
        let (mut ws, mut exec) = (0u64, null_mut());
        addmm(c, a, b, beta, one, out, cube, &mut ws, &mut exec)
    };
    let soc = unsafe { CStr::from_ptr((env.tk.api.aclrtGetSocName)()) }.to_string_lossy().into_owned();
    // KEEP_DTYPE is refused for FP32 on the Atlas training series (cube_util.cpp).
    let fp32_cube = if soc.starts_with("Ascend910B") { 0 } else { 1 };
    assert_eq!(call(f(&[3]), a, b, one, fp32_cube), 0, "a bias row broadcasts");
    assert_eq!(call(f(&[5, 3]), a, b, one, fp32_cube), 161_002, "self that does not broadcast");
    assert_eq!(call(f(&[3]), f(&[1, 4, 2]), b, one, fp32_cube), 161_002, "3-D mat1");
    assert_eq!(call(f(&[3]), a, b, null_mut(), fp32_cube), ACLNN_ERR_PARAM_NULLPTR, "null beta");
    assert_eq!(call(f(&[3]), a, b, one, 4), 161_002, "cubeMathType 4");
}

/// aclnnEmbedding, aclnnEmbeddingDenseBackward (ops-nn e5c3fa932), aclnnDropoutGenMaskV2,
/// aclnnDropoutDoMask (ops-math c41933244) and aclnnAddLayerNorm (ops-nn, A2 only) refuse in
/// phase 1 what their op_api sources refuse.
#[test]
fn embedding_dropout_and_add_layer_norm_refuse_what_the_vendor_refuses() {
    type Embedding = unsafe extern "C" fn(T, T, T, *mut u64, *mut AclExecutorPtr) -> i32;
    type DenseBackward = unsafe extern "C" fn(T, T, u64, u64, bool, T, *mut u64, *mut AclExecutorPtr) -> i32;
    type GenMask =
        unsafe extern "C" fn(*mut std::ffi::c_void, f64, i64, i64, i32, T, *mut u64, *mut AclExecutorPtr) -> i32;
    type DoMask = unsafe extern "C" fn(T, T, f64, T, *mut u64, *mut AclExecutorPtr) -> i32;
    type AddLayerNorm =
        unsafe extern "C" fn(T, T, T, T, T, f64, bool, T, T, T, T, *mut u64, *mut AclExecutorPtr) -> i32;
    let env = Env::new();
    let buf = env.malloc(4096);
    let (mut ws, mut exec) = (0u64, null_mut());
    let f = |dims: &[i64]| env.tensor(buf, dims, dtype::FLOAT);
    let ids = |n: i64, dt: i32| env.tensor(buf, &[n], dt);
    let soc = unsafe { CStr::from_ptr((env.tk.api.aclrtGetSocName)()) }.to_string_lossy().into_owned();
    let a2 = soc.starts_with("Ascend910B");

    let embedding: Embedding = unsafe { std::mem::transmute(env.tk.op("aclnnEmbedding").unwrap().0) };
    let (table, out) = (f(&[4, 3]), f(&[2, 3]));
    assert_eq!(unsafe { embedding(table, ids(2, dtype::INT64), out, &mut ws, &mut exec) }, 0);
    assert_eq!(
        unsafe { embedding(table, ids(2, dtype::INT64), f(&[2, 4]), &mut ws, &mut exec) },
        161_002,
        "out's last dim"
    );
    assert_eq!(unsafe { embedding(table, ids(2, dtype::FLOAT), out, &mut ws, &mut exec) }, 161_002, "FLOAT indices");
    let bf16 = |dims: &[i64]| env.tensor(buf, dims, dtype::BF16);
    let bf16_table = unsafe { embedding(bf16(&[4, 3]), ids(2, dtype::INT64), bf16(&[2, 3]), &mut ws, &mut exec) };
    assert_eq!(bf16_table == 0, a2, "BF16 tables only from the A2 on");

    let dense: DenseBackward = unsafe { std::mem::transmute(env.tk.op("aclnnEmbeddingDenseBackward").unwrap().0) };
    let call = |grad: T, idx: T, n: u64, out: T| unsafe {
        let (mut ws, mut exec) = (0u64, null_mut());
        dense(grad, idx, n, u64::MAX, false, out, &mut ws, &mut exec)
    };
    assert_eq!(call(out, ids(2, dtype::INT64), 4, table), 0);
    assert_eq!(call(out, ids(2, dtype::INT64), 5, table), 161_002, "out rows ≠ numWeights");
    assert_eq!(call(out, ids(3, dtype::INT64), 4, table), 161_002, "3 indices for 2 rows");

    let gen: GenMask = unsafe { std::mem::transmute(env.tk.op("aclnnDropoutGenMaskV2").unwrap().0) };
    let shape = [200i64];
    let shape = unsafe { (env.tk.api.aclCreateIntArray)(shape.as_ptr(), 1) };
    let mask = |bytes: i64| env.tensor(buf, &[bytes], dtype::UINT8);
    let call = |p: f64, m: T| unsafe {
        let (mut ws, mut exec) = (0u64, null_mut());
        gen(shape, p, 1, 0, dtype::FLOAT, m, &mut ws, &mut exec)
    };
    assert_eq!(call(0.1, mask(32)), 0, "align(200, 128)/8 = 32 bytes");
    assert_eq!(call(0.1, mask(31)), 161_002, "a mask one byte short");
    assert_eq!(call(1.5, mask(32)), 161_002, "prob above 1");

    let do_mask: DoMask = unsafe { std::mem::transmute(env.tk.op("aclnnDropoutDoMask").unwrap().0) };
    assert_eq!(unsafe { do_mask(f(&[200]), mask(32), 0.1, f(&[200]), &mut ws, &mut exec) }, 0);
    assert_eq!(unsafe { do_mask(f(&[200]), mask(16), 0.1, f(&[200]), &mut ws, &mut exec) }, 161_002, "short mask");
    assert_eq!(unsafe { do_mask(f(&[200]), mask(32), 0.1, f(&[100]), &mut ws, &mut exec) }, 161_002, "out shape");

    let add_ln: AddLayerNorm = unsafe { std::mem::transmute(env.tk.op("aclnnAddLayerNorm").unwrap().0) };
    let call = |mean: T| unsafe {
        let (mut ws, mut exec) = (0u64, null_mut());
        let (x, g) = (f(&[2, 3]), f(&[3]));
        add_ln(x, x, g, g, null_mut(), 1e-5, true, x, mean, mean, x, &mut ws, &mut exec)
    };
    if a2 {
        assert_eq!(call(f(&[2, 1])), 0);
        assert_eq!(call(f(&[2])), 561_002, "mean must keep x1's rank");
    } else {
        assert_ne!(call(f(&[2, 1])), 0, "no Atlas training series config");
    }
}

/// aclnnLayerNormBackward.md (ops-nn e5c3fa932): gradInputOut has the input's dtype,
/// gradWeightOut and gradBiasOut the weight's. op_api would cast other outputs; the emulator
/// holds to the document and refuses them.
#[test]
fn layer_norm_backward_writes_the_documented_dtypes() {
    type Backward = unsafe extern "C" fn(
        T,
        T,
        AclIntArrayPtr,
        T,
        T,
        T,
        T,
        AclBoolArrayPtr,
        T,
        T,
        T,
        *mut u64,
        *mut AclExecutorPtr,
    ) -> i32;
    let env = Env::new();
    let buf = env.malloc(4096);
    let backward: Backward = unsafe { std::mem::transmute(env.tk.op("aclnnLayerNormBackward").unwrap().0) };
    let half = |dims: &[i64]| env.tensor(buf, dims, dtype::FLOAT16);
    let float = |dims: &[i64]| env.tensor(buf, dims, dtype::FLOAT);
    let norm = [3i64];
    let norm = unsafe { (env.tk.api.aclCreateIntArray)(norm.as_ptr(), 1) };
    let mask = [true; 3];
    let mask = unsafe { (env.tk.api.aclCreateBoolArray)(mask.as_ptr(), 3) };
    let call = |dx: T, dw: T| unsafe {
        let (mut ws, mut exec) = (0u64, null_mut());
        let (x, stats, w) = (half(&[2, 3]), float(&[2, 1]), half(&[3]));
        backward(x, x, norm, stats, stats, w, null_mut(), mask, dx, dw, dw, &mut ws, &mut exec)
    };
    assert_eq!(call(half(&[2, 3]), half(&[3])), 0);
    assert_eq!(call(float(&[2, 3]), half(&[3])), 161_002, "an f32 gradInputOut for an f16 input");
    assert_eq!(call(half(&[2, 3]), float(&[3])), 161_002, "f32 gradWeightOut and gradBiasOut for an f16 weight");
}

/// aclnnFlashAttentionScore (ops-transformer c29bc10) exists on the A2 only, takes no
/// (B, 1, 1, S) key mask, needs keepProb in (0, 1] and at most 256 heads, and takes a bias
/// (realShiftOptional) only in query's dtype and the shapes [B,N,S,S], [B,N,1,Skv], [1,N,S,S];
/// its mask is [1,1,S,S], [B,1,S,S] or [B,N,S,S].
#[test]
fn flash_attention_refuses_what_ops_transformer_refuses() {
    type Fa = unsafe extern "C" fn(
        T,
        T,
        T,
        T,
        T,
        T,
        T,
        *mut std::ffi::c_void,
        f64,
        f64,
        i64,
        i64,
        i64,
        *const std::ffi::c_char,
        i64,
        i64,
        T,
        T,
        T,
        T,
        *mut u64,
        *mut AclExecutorPtr,
    ) -> i32;
    let env = Env::new();
    let buf = env.malloc(1 << 16);
    let f = |dims: &[i64]| env.tensor(buf, dims, dtype::FLOAT);
    let (q, stats) = (f(&[2, 4, 6]), f(&[2, 3, 4, 8]));
    let mask = |dims: &[i64]| env.tensor(buf, dims, dtype::UINT8);
    let fa: Fa = unsafe { std::mem::transmute(env.tk.op("aclnnFlashAttentionScore").unwrap().0) };
    let call_with_pse = |q: T, stats: T, heads: i64, m: T, pse: T, keep: f64, layout: &std::ffi::CStr| unsafe {
        let (mut ws, mut exec) = (0u64, null_mut());
        let n = null_mut();
        fa(
            q,
            q,
            q,
            pse,
            n,
            n,
            m,
            n,
            0.5,
            keep,
            i32::MAX.into(),
            i32::MAX.into(),
            heads,
            layout.as_ptr(),
            0,
            0,
            stats,
            stats,
            n,
            q,
            &mut ws,
            &mut exec,
        )
    };
    let call_with = |q: T, stats: T, heads: i64, m: T, keep: f64, layout: &std::ffi::CStr| {
        call_with_pse(q, stats, heads, m, null_mut(), keep, layout)
    };
    let call = |m: T, keep: f64, layout: &std::ffi::CStr| call_with(q, stats, 3, m, keep, layout);
    let soc = unsafe { CStr::from_ptr((env.tk.api.aclrtGetSocName)()) }.to_string_lossy().into_owned();
    if !soc.starts_with("Ascend910B") {
        assert_ne!(call(mask(&[2, 1, 4, 4]), 1.0, c"BSH"), 0, "no Atlas training series kernel");
        return;
    }
    assert_eq!(call(mask(&[2, 1, 4, 4]), 1.0, c"BSH"), 0);
    assert_eq!(call(mask(&[2, 1, 1, 4]), 1.0, c"BSH"), 561_002, "a (B, 1, 1, S) mask");
    assert_eq!(call(mask(&[2, 1, 4, 4]), 0.0, c"BSH"), 561_002, "keepProb 0");
    assert_eq!(call(mask(&[2, 1, 4, 4]), 1.0, c"BNSD"), 161_002, "a 3-D query in BNSD");
    // The tiling's mask shapes are [1,1,S,S], [B,1,S,S] and [B,N,S,S]: a per-head mask of one
    // sequence is [B,N,S,S] for one sequence and refused for two.
    assert_eq!(call(mask(&[2, 3, 4, 4]), 1.0, c"BSH"), 0);
    assert_eq!(call(mask(&[1, 1, 4, 4]), 1.0, c"BSH"), 0);
    assert_eq!(call(mask(&[1, 3, 4, 4]), 1.0, c"BSH"), 561_002, "[1,N,S,S] for two sequences");
    let (q1, stats1) = (f(&[1, 4, 6]), f(&[1, 3, 4, 8]));
    assert_eq!(call_with(q1, stats1, 3, mask(&[1, 3, 4, 4]), 1.0, c"BSH"), 0, "[1,N,S,S] for one sequence");
    // A bias per (B, N) row of keys, in query's dtype, with or without a mask.
    let pse = |dims: &[i64], dt: i32| env.tensor(buf, dims, dt);
    let with_pse = |p: T, m: T| call_with_pse(q, stats, 3, m, p, 1.0, c"BSH");
    assert_eq!(with_pse(pse(&[2, 3, 1, 4], dtype::FLOAT), null_mut()), 0);
    assert_eq!(with_pse(pse(&[2, 3, 4, 4], dtype::FLOAT), mask(&[2, 1, 4, 4])), 0);
    assert_eq!(with_pse(pse(&[2, 1, 1, 4], dtype::FLOAT), null_mut()), 161_002, "a bias without its N");
    assert_eq!(with_pse(pse(&[1, 3, 1, 4], dtype::FLOAT), null_mut()), 161_002, "[1,N,1,Skv]");
    assert_eq!(with_pse(pse(&[2, 3, 1, 4], dtype::FLOAT16), null_mut()), 161_002, "a bias in another dtype");
    // N is 1~256 (the doc's 约束说明): 257 heads of dim 1 are refused, 256 run.
    for (heads, code) in [(256, 0), (257, 161_002)] {
        let (q, stats) = (f(&[1, 2, heads]), f(&[1, heads, 2, 8]));
        assert_eq!(call_with(q, stats, heads, mask(&[1, 1, 2, 2]), 1.0, c"BSH"), code, "{heads} heads");
    }
}
