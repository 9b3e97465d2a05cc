//! HCCL, the vendor's collective library (`libhccl.so`), loaded at run time from the same toolkit
//! root as ACL. Declarations follow the vendor's `hccl.h` and `hccl_types.h` (torch-npu 2.14.0
//! wheel); `tools/check_vendor_abi.py` compares them with the headers.
use std::ffi::{c_char, c_void};

use super::types::AclrtStream;

/// `HcclComm` (`void*`).
pub type HcclComm = *mut c_void;

/// `HCCL_ROOT_INFO_BYTES`: the size of `HcclRootInfo`.
pub const HCCL_ROOT_INFO_BYTES: usize = 4108;

/// `HcclRootInfo`: what rank 0 shares with the others to build a communicator.
#[repr(C)]
#[derive(Clone)]
pub struct HcclRootInfo {
    /// Opaque bytes.
    pub internal: [u8; HCCL_ROOT_INFO_BYTES],
}

/// `HcclResult` values (hccl_types.h).
pub mod result {
    /// Success.
    pub const HCCL_SUCCESS: i32 = 0;
    /// Parameter error.
    pub const HCCL_E_PARA: i32 = 1;
    /// Timeout.
    pub const HCCL_E_TIMEOUT: i32 = 9;
}

/// `HcclDataType` values (hccl_types.h).
pub mod data_type {
    /// int8.
    pub const HCCL_DATA_TYPE_INT8: i32 = 0;
    /// int32.
    pub const HCCL_DATA_TYPE_INT32: i32 = 2;
    /// float16.
    pub const HCCL_DATA_TYPE_FP16: i32 = 3;
    /// float32.
    pub const HCCL_DATA_TYPE_FP32: i32 = 4;
    /// int64.
    pub const HCCL_DATA_TYPE_INT64: i32 = 5;
    /// uint8.
    pub const HCCL_DATA_TYPE_UINT8: i32 = 7;
    /// uint32.
    pub const HCCL_DATA_TYPE_UINT32: i32 = 9;
    /// float64.
    pub const HCCL_DATA_TYPE_FP64: i32 = 10;
    /// bfloat16.
    pub const HCCL_DATA_TYPE_BFP16: i32 = 11;
}

/// `HcclReduceOp` values (hccl_types.h).
pub mod reduce_op {
    /// Sum.
    pub const HCCL_REDUCE_SUM: i32 = 0;
    /// Product.
    pub const HCCL_REDUCE_PROD: i32 = 1;
    /// Maximum.
    pub const HCCL_REDUCE_MAX: i32 = 2;
    /// Minimum.
    pub const HCCL_REDUCE_MIN: i32 = 3;
}

macro_rules! hccl_api {
    ($($entry:tt)*) => {
        super::library::library_api! {
            /// The HCCL entry points we call, resolved when the library loads.
            HcclApi { $($entry)* }
        }
    };
}

hccl_api! {
    HcclGetRootInfo: fn(*mut HcclRootInfo) -> i32;
    HcclCommInitRootInfo: fn(u32, *const HcclRootInfo, u32, *mut HcclComm) -> i32;
    HcclCommInitAll: fn(u32, *mut i32, *mut HcclComm) -> i32;
    HcclAllReduce: fn(*mut c_void, *mut c_void, u64, i32, i32, HcclComm, AclrtStream) -> i32;
    HcclBroadcast: fn(*mut c_void, u64, i32, u32, HcclComm, AclrtStream) -> i32;
    HcclBarrier: fn(HcclComm, AclrtStream) -> i32;
    HcclCommDestroy: fn(HcclComm) -> i32;
    HcclGetErrorString: fn(i32) -> *const c_char;
}
