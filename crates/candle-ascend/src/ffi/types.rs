//! ACL/aclnn types and enum values, as in CANN's `acl_base_rt.h` and `acl_meta.h`.
#![allow(missing_docs)]
use std::ffi::c_void;

pub type AclError = i32;
pub type AclnnStatus = i32;
pub type AclrtStream = *mut c_void;
pub type AclrtEvent = *mut c_void;
/// Opaque `aclTensor*`, `aclScalar*`, `aclIntArray*`, `aclBoolArray*`, `aclOpExecutor*`.
pub type AclTensorPtr = *mut c_void;
pub type AclScalarPtr = *mut c_void;
pub type AclIntArrayPtr = *mut c_void;
pub type AclBoolArrayPtr = *mut c_void;
pub type AclExecutorPtr = *mut c_void;

pub const ACL_SUCCESS: AclError = 0;
pub const ACL_ERROR_REPEAT_INITIALIZE: AclError = 100_002;
pub const ACL_ERROR_BAD_ALLOC: AclError = 200_000;
pub const ACL_ERROR_RT_MEMORY_ALLOCATION: AclError = 207_001;
/// `ACL_ERROR_RT_PARAM_INVALID` (`rt_error_codes.h`).
pub const ACL_ERROR_RT_PARAM_INVALID: AclError = 107_000;
/// `ACL_ERROR_RT_INVALID_DEVICEID` (`rt_error_codes.h`).
pub const ACL_ERROR_RT_INVALID_DEVICEID: AclError = 107_001;
/// `ACLNN_ERR_PARAM_NULLPTR` (aclnn's `aclnn_base.h`; the emulator's sim.h): a required
/// operand or output was a null pointer.
pub const ACLNN_ERR_PARAM_NULLPTR: AclnnStatus = 161_001;
/// `ACL_ERROR_RT_DEVICE_OOM` (`rt_error_codes.h`).
pub const ACL_ERROR_RT_DEVICE_OOM: AclError = 207_018;

/// `aclDataType` (generated from `soc/acl_dtypes.tsv`).
pub mod dtype {
    include!(concat!(env!("OUT_DIR"), "/acl_dtypes.rs"));
}

pub const ACL_FORMAT_ND: i32 = 2;
pub const ACL_MEM_MALLOC_HUGE_FIRST: i32 = 0;
pub const ACL_MEMCPY_HOST_TO_DEVICE: i32 = 1;
pub const ACL_MEMCPY_DEVICE_TO_HOST: i32 = 2;
pub const ACL_MEMCPY_DEVICE_TO_DEVICE: i32 = 3;
pub const ACL_HBM_MEM: i32 = 1;

macro_rules! phase2 {
    (fn($($arg:ty),*) -> $ret:ty) => {
        /// Phase 2 of every aclnn op.
        pub type Phase2 = unsafe extern "C" fn($($arg),*) -> $ret;
        /// `Phase2`'s parameter and return types as declared, for the vendor-prototype check.
        pub const PHASE2_SIGNATURE: crate::ffi::abi::RustSignature =
            ("aclnn<Op>", &[$(stringify!($arg)),*], stringify!($ret));
    };
}
phase2!(fn(*mut c_void, u64, AclExecutorPtr, AclrtStream) -> AclnnStatus);
