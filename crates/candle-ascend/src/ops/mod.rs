//! aclnn operators, grouped by family. Every op has the same small shape: build the views
//! (`View::acl`), call phase 1 for the workspace size, launch phase 2 on the device's stream
//! (`launch`). `View` is the one place where a candle layout becomes an `aclTensor`.
pub mod activation;
pub mod attention;
pub mod copy;
pub mod elementwise;
pub mod index;
pub mod loss;
pub mod matmul;
pub mod norm;
pub mod optim;
pub mod random;
pub mod reduce;

use crate::soc::AclnnOp;
use std::ffi::c_void;
use std::sync::Arc;

use candle_core::{DType, Layout};

use crate::error::{AscendError, Result};
use crate::ffi::types::*;
use crate::runtime::device::DeviceInner;
use crate::runtime::time_model::{CubeWork, Work};
use crate::runtime::DeviceBuffer;

/// The `aclDataType` of a candle dtype.
pub fn acl_dtype(dtype: DType) -> Result<i32> {
    Ok(match dtype {
        DType::F32 => dtype::FLOAT,
        DType::F16 => dtype::FLOAT16,
        DType::BF16 => dtype::BF16,
        DType::F64 => dtype::DOUBLE,
        DType::U8 => dtype::UINT8,
        DType::U32 => dtype::UINT32,
        DType::I16 => dtype::INT16,
        DType::I32 => dtype::INT32,
        DType::I64 => dtype::INT64,
        other => return Err(AscendError::Unsupported { op: "dtype", detail: format!("{other:?} has no aclDataType") }),
    })
}

/// A strided view of a device buffer: dims, element strides and element offset (broadcast
/// dimensions have stride 0), in a given `aclDataType`.
#[derive(Debug, Clone)]
pub struct View {
    pub(crate) ptr: *mut c_void,
    pub(crate) capacity_elems: usize,
    pub(crate) acl_dtype: i32,
    pub(crate) dims: Vec<i64>,
    pub(crate) strides: Vec<i64>,
    pub(crate) offset: i64,
}

impl View {
    /// The view of `layout` over `buffer` holding elements of `dtype`.
    pub fn of(buffer: &DeviceBuffer, dtype: DType, layout: &Layout) -> Result<Self> {
        Ok(Self {
            ptr: buffer.ptr(),
            capacity_elems: buffer.size() / dtype.size_in_bytes(),
            acl_dtype: acl_dtype(dtype)?,
            dims: layout.dims().iter().map(|&d| d as i64).collect(),
            strides: layout.stride().iter().map(|&s| s as i64).collect(),
            offset: layout.start_offset() as i64,
        })
    }

    /// The same memory read as another dtype of the same width (e.g. u32 ids as INT32).
    pub fn reinterpret(mut self, acl_dtype: i32) -> Self {
        self.acl_dtype = acl_dtype;
        self
    }

    /// Shape and dtype, for error messages.
    pub fn describe(&self) -> String {
        let contiguous = self.strides == contiguous_strides(&self.dims);
        // candle's name where the aclDataType is a candle dtype (masks are BOOL), else the vendor's.
        let dt = [
            DType::F32,
            DType::F16,
            DType::BF16,
            DType::F64,
            DType::U8,
            DType::U32,
            DType::I16,
            DType::I32,
            DType::I64,
        ]
        .into_iter()
        .find(|&d| acl_dtype(d).ok() == Some(self.acl_dtype))
        .map_or_else(|| crate::soc::dtype_name(self.acl_dtype), |d| d.as_str());
        if contiguous && self.offset == 0 {
            format!("{dt}{:?}", self.dims)
        } else {
            format!("{dt}{:?} (strides {:?}, offset {})", self.dims, self.strides, self.offset)
        }
    }

    /// Create the `aclTensor`; storage dims are the whole buffer, as torch_npu passes them.
    pub(crate) fn acl(&self, dev: &DeviceInner) -> Result<AclObject> {
        let storage = [self.capacity_elems as i64];
        let api = &dev.toolkit.api;
        // SAFETY: dims/strides have `dims.len()` entries and are copied by aclCreateTensor; the
        // data pointer is the device buffer's start and the view lies inside it.
        let ptr = unsafe {
            (api.aclCreateTensor)(
                self.dims.as_ptr(),
                self.dims.len() as u64,
                self.acl_dtype,
                self.strides.as_ptr(),
                self.offset,
                ACL_FORMAT_ND,
                storage.as_ptr(),
                1,
                self.ptr,
            )
        };
        AclObject::new(dev, ptr, api.aclDestroyTensor, "aclCreateTensor")
    }
}

/// Row-major strides of `dims`.
pub fn contiguous_strides(dims: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1];
    }
    strides
}

/// An `aclTensor*`, `aclScalar*` or `aclIntArray*`, destroyed on drop.
pub(crate) struct AclObject {
    ptr: *mut c_void,
    destroy: unsafe extern "C" fn(*mut c_void) -> AclnnStatus,
}

impl AclObject {
    fn new(
        dev: &DeviceInner,
        ptr: *mut c_void,
        destroy: unsafe extern "C" fn(*mut c_void) -> AclnnStatus,
        call: &'static str,
    ) -> Result<Self> {
        if ptr.is_null() {
            return Err(AscendError::Runtime {
                call,
                code: crate::ffi::types::ACLNN_ERR_PARAM_NULLPTR,
                message: dev.toolkit.recent_message(),
            });
        }
        Ok(Self { ptr, destroy })
    }

    pub(crate) fn ptr(&self) -> *mut c_void {
        self.ptr
    }
}

impl Drop for AclObject {
    fn drop(&mut self) {
        // SAFETY: the object came from the matching aclCreate* and is destroyed once.
        unsafe { (self.destroy)(self.ptr) };
    }
}

/// A host scalar for an op on tensors of `acl_dtype`, in that dtype's kind, as torch_npu passes
/// it (op-plugin `op_api_common.cpp`): DOUBLE for floating tensors, INT64 for integral and BOOL
/// ones, since aclnnAdd/Sub/Adds refuse an alpha that cannot be cast to the tensor's type (opbase
/// `CanCast`: floating to integral never casts). A fractional value for an integral tensor is an
/// error here, not a silent truncation.
pub(crate) fn scalar(dev: &DeviceInner, value: f64, acl_dtype: i32) -> Result<AclObject> {
    let api = &dev.toolkit.api;
    let floating = matches!(acl_dtype, dtype::FLOAT | dtype::FLOAT16 | dtype::BF16 | dtype::DOUBLE);
    let ptr = if floating {
        let mut v = value;
        // SAFETY: aclCreateScalar copies the value it points to.
        unsafe { (api.aclCreateScalar)((&mut v as *mut f64).cast(), dtype::DOUBLE) }
    } else {
        if value.fract() != 0.0 || !value.is_finite() {
            return Err(AscendError::Unsupported {
                op: "scalar",
                detail: format!("{value} is not an integer, but the tensor is {}", crate::soc::dtype_name(acl_dtype)),
            });
        }
        let mut v = value as i64;
        // SAFETY: as above.
        unsafe { (api.aclCreateScalar)((&mut v as *mut i64).cast(), dtype::INT64) }
    };
    AclObject::new(dev, ptr, api.aclDestroyScalar, "aclCreateScalar")
}

/// An `aclBoolArray`.
pub(crate) fn bool_array(dev: &DeviceInner, values: &[bool]) -> Result<AclObject> {
    let api = &dev.toolkit.api;
    // SAFETY: the values are copied.
    let ptr = unsafe { (api.aclCreateBoolArray)(values.as_ptr(), values.len() as u64) };
    AclObject::new(dev, ptr, api.aclDestroyBoolArray, "aclCreateBoolArray")
}

/// An `aclIntArray`.
pub(crate) fn int_array(dev: &DeviceInner, values: &[i64]) -> Result<AclObject> {
    let api = &dev.toolkit.api;
    // SAFETY: the values are copied.
    let ptr = unsafe { (api.aclCreateIntArray)(values.as_ptr(), values.len() as u64) };
    AclObject::new(dev, ptr, api.aclDestroyIntArray, "aclCreateIntArray")
}

/// One op's phase-1 function: its address, reached only through [`Phase1Fn::checked`].
pub(crate) struct Phase1Fn {
    addr: usize,
    op: AclnnOp,
    mismatch: std::cell::RefCell<Option<String>>,
}

impl Phase1Fn {
    /// The address, once the call site's parameter types (`passed`, as it spells them) fit the
    /// prototype the vendor's header declares for the op; else `None`, the reason kept for
    /// [`launch`], which reports it.
    pub(crate) fn checked(&self, passed: &[&str]) -> Option<usize> {
        let why = crate::ffi::abi::mismatch(self.op.name(), self.op.phase1_abi(), passed);
        let ok = why.is_none();
        *self.mismatch.borrow_mut() = why;
        ok.then_some(self.addr)
    }
}

/// Run one aclnn op: `phase1(&fn, &mut workspace_size, &mut executor)` returns the phase-1
/// status (the [`phase1!`] macro checks the call's types against the vendor's prototype first);
/// then the workspace is taken from the device cache and phase 2 is enqueued. `operands` describe
/// the views for error messages.
pub(crate) fn launch(
    dev: &Arc<DeviceInner>,
    aclnn: AclnnOp,
    operands: &[&View],
    phase1: impl FnOnce(&Phase1Fn, *mut u64, *mut AclExecutorPtr) -> AclnnStatus,
) -> Result<()> {
    launch_with(dev, aclnn, operands, None, phase1)
}

/// [`launch`] for a cube op, whose matrix products `cube` the time model counts.
pub(crate) fn launch_cube(
    dev: &Arc<DeviceInner>,
    aclnn: AclnnOp,
    operands: &[&View],
    cube: CubeWork,
    phase1: impl FnOnce(&Phase1Fn, *mut u64, *mut AclExecutorPtr) -> AclnnStatus,
) -> Result<()> {
    launch_with(dev, aclnn, operands, Some(cube), phase1)
}

/// `count` matrix products per batch entry whose output is `out` (…, m, n), over `k`.
pub(crate) fn cube_work(out: &View, k: i64, count: u64) -> CubeWork {
    let dims: Vec<u64> = out.dims.iter().map(|&d| d.max(0) as u64).collect();
    let (m, n) = match dims.as_slice() {
        [.., m, n] => (*m, *n),
        [n] => (1, *n),
        [] => (1, 1),
    };
    let batch = dims.iter().rev().skip(2).product();
    CubeWork { batch, m, n, k: k.max(0) as u64, count }
}

/// The bytes of the views' distinct elements (a broadcast dimension is read once).
fn operand_bytes(operands: &[&View]) -> u64 {
    operands
        .iter()
        .map(|v| {
            let elems: i64 = v.dims.iter().zip(&v.strides).filter(|(_, s)| **s != 0).map(|(d, _)| *d).product();
            elems.max(0) as u64 * dtype::describe(v.acl_dtype).map_or(0, |(_, size)| size as u64)
        })
        .sum()
}

fn launch_with(
    dev: &Arc<DeviceInner>,
    aclnn: AclnnOp,
    operands: &[&View],
    cube: Option<CubeWork>,
    phase1: impl FnOnce(&Phase1Fn, *mut u64, *mut AclExecutorPtr) -> AclnnStatus,
) -> Result<()> {
    dev.bind_thread()?;
    let op = aclnn.name();
    let describe = || operands.iter().map(|v| v.describe()).collect::<Vec<_>>().join(", ");
    let (p1, p2) = match dev.toolkit.op(op) {
        Ok(f) => f,
        Err(e) if dev.preflight_refuse(|| format!("{op} ({}): {e}", describe())) => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut ws_size = 0u64;
    let mut exec: AclExecutorPtr = std::ptr::null_mut();
    let p1 = Phase1Fn { addr: p1, op: aclnn, mismatch: std::cell::RefCell::new(None) };
    let code = phase1(&p1, &mut ws_size, &mut exec);
    if let Some(detail) = p1.mismatch.take() {
        return Err(AscendError::Abi { op, detail });
    }
    if code != 0 {
        let message = dev.toolkit.recent_message();
        if dev.preflight_refuse(|| {
            format!("{op} ({}): status {code}: {}", describe(), message.clone().unwrap_or_default())
        }) {
            return Ok(());
        }
        return Err(AscendError::Op { op, code, operands: describe(), message });
    }
    if dev.in_preflight() {
        dev.destroy_executor(exec);
        return Ok(());
    }
    // The workspace goes back to the cache right after the launch: the stream orders its reuse.
    let workspace = if ws_size > 0 { Some(DeviceBuffer::new(dev, ws_size as usize)?) } else { None };
    let ws_ptr = workspace.as_ref().map_or(std::ptr::null_mut(), |w| w.ptr());
    // SAFETY: phase 2 consumes the executor that phase 1 produced, on this device's stream.
    let code = unsafe { p2(ws_ptr, ws_size, exec, dev.stream()) };
    if code != 0 {
        return Err(AscendError::Op { op, code, operands: describe(), message: dev.toolkit.recent_message() });
    }
    // The dtype op_support.tsv keys on: the first operand's, except aclnnSWhere's self, which
    // follows its condition (ops keyed otherwise, such as aclnnDropoutGenMaskV2, have one engine).
    let self_dtype = operands.get(usize::from(aclnn == AclnnOp::SWhere)).map(|v| v.acl_dtype);
    let bytes = operand_bytes(operands);
    let work = match (dev.soc.engine(aclnn, self_dtype), cube) {
        (Some(crate::soc::Engine::AiCpu), _) => Work::AiCpu { bytes },
        (_, Some(cube)) => Work::Cube { cube, bytes },
        _ => Work::Vector { bytes },
    };
    if let (Some(us), Some(busy)) = (dev.counters.launched_work(op, work), dev.sim_busy) {
        // SAFETY: the emulator's `void aclsimAddBusyUs(double)`, on this device's thread.
        unsafe { busy(us) };
    }
    Ok(())
}

/// Call a phase-1 function with the given C prototype and arguments, once the prototype's
/// parameter types are checked against the vendor's declaration of the op.
macro_rules! phase1 {
    ($p1:expr, $ws:expr, $exec:expr, fn($($ty:ty),*), $($arg:expr),*) => {{
        match $p1.checked(&[$(stringify!($ty)),*]) {
            // `launch` reports the mismatch; nothing is called.
            None => -1,
            // SAFETY: `addr` is the op's GetWorkspaceSize symbol, and the types given match, class
            // by class, the C prototype in the vendor's header (soc/cann/aclnn_prototypes.tsv,
            // extracted from CANN's aclnn_*.h), followed by CANN's workspace size and executor;
            // every pointer argument is live.
            Some(addr) => unsafe {
                let f: unsafe extern "C" fn($($ty),*, *mut u64, *mut $crate::ffi::types::AclExecutorPtr) -> i32 =
                    std::mem::transmute::<usize, _>(addr);
                f($($arg),*, $ws, $exec)
            },
        }
    }};
}
pub(crate) use phase1;
