//! Finds a CANN toolkit and loads its libraries with libloading. Runtime and tensor-object
//! symbols are resolved when the toolkit loads; aclnn ops are resolved on first use, so an op
//! missing from an older CANN is an "unsupported on this CANN" error, not a load failure.
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use libloading::Library;

use super::dcmi::DcmiApi;
use super::hccl::HcclApi;
use super::types::*;
use crate::error::{AscendError, Result};

/// Which toolkit a device uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolkitKind {
    /// A real CANN install.
    Cann,
    /// The emulated toolkit built with this crate.
    Emulated,
}

impl ToolkitKind {
    /// Both kinds.
    pub const ALL: [ToolkitKind; 2] = [ToolkitKind::Cann, ToolkitKind::Emulated];

    /// The device-name prefix of this toolkit's devices: `npu` or `npu-sim`.
    pub fn device_prefix(self) -> &'static str {
        match self {
            ToolkitKind::Cann => "npu",
            ToolkitKind::Emulated => "npu-sim",
        }
    }
}

macro_rules! runtime_api {
    ($($name:ident : fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        /// ACL runtime and nnopbase entry points, resolved at load time.
        #[allow(non_snake_case, missing_docs)]
        pub struct RuntimeApi { $(pub $name: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)* }

        impl RuntimeApi {
            /// The entry points' names, looked up in libascendcl, then libnnopbase.
            pub const NAMES: &[&str] = &[$(stringify!($name)),*];

            /// Each entry point's Rust parameter and return types as declared here, which
            /// tests/vendor_facts.rs compares with the vendor's headers (`soc/cann/runtime_prototypes.tsv`).
            pub const SIGNATURES: &[crate::ffi::abi::RustSignature] =
                &[$((stringify!($name), &[$(stringify!($arg)),*], stringify!($($ret)?))),*];

            fn load(acl: &Library, nnopbase: &Library) -> Result<Self> {
                Ok(Self { $($name: resolve(acl, nnopbase, stringify!($name))?,)* })
            }
        }
    };
}

runtime_api! {
    aclInit: fn(*const c_char) -> AclError;
    aclrtSetDevice: fn(i32) -> AclError;
    aclrtGetDeviceCount: fn(*mut u32) -> AclError;
    aclrtCreateStream: fn(*mut AclrtStream) -> AclError;
    aclrtSynchronizeStream: fn(AclrtStream) -> AclError;
    aclrtDestroyStream: fn(AclrtStream) -> AclError;
    aclrtCreateEvent: fn(*mut AclrtEvent) -> AclError;
    aclrtDestroyEvent: fn(AclrtEvent) -> AclError;
    aclrtRecordEvent: fn(AclrtEvent, AclrtStream) -> AclError;
    aclrtStreamWaitEvent: fn(AclrtStream, AclrtEvent) -> AclError;
    aclrtMalloc: fn(*mut *mut c_void, usize, i32) -> AclError;
    aclrtFree: fn(*mut c_void) -> AclError;
    aclrtMemcpy: fn(*mut c_void, usize, *const c_void, usize, i32) -> AclError;
    aclrtMemcpyAsync: fn(*mut c_void, usize, *const c_void, usize, i32, AclrtStream) -> AclError;
    aclrtMallocHost: fn(*mut *mut c_void, usize) -> AclError;
    aclrtFreeHost: fn(*mut c_void) -> AclError;
    aclrtGetMemInfo: fn(i32, *mut usize, *mut usize) -> AclError;
    aclrtGetSocName: fn() -> *const c_char;
    aclGetRecentErrMsg: fn() -> *const c_char;
    aclCreateTensor: fn(*const i64, u64, i32, *const i64, i64, i32, *const i64, u64, *mut c_void) -> AclTensorPtr;
    aclDestroyTensor: fn(AclTensorPtr) -> AclnnStatus;
    aclCreateScalar: fn(*mut c_void, i32) -> AclScalarPtr;
    aclDestroyScalar: fn(AclScalarPtr) -> AclnnStatus;
    aclCreateIntArray: fn(*const i64, u64) -> AclIntArrayPtr;
    aclDestroyIntArray: fn(AclIntArrayPtr) -> AclnnStatus;
    aclCreateBoolArray: fn(*const bool, u64) -> AclBoolArrayPtr;
    aclDestroyBoolArray: fn(AclBoolArrayPtr) -> AclnnStatus;
}

/// Symbols are looked up in libascendcl first, then libnnopbase.
fn resolve<T: Copy>(acl: &Library, nnopbase: &Library, name: &str) -> Result<T> {
    for lib in [acl, nnopbase] {
        // SAFETY: the symbol's type is the C prototype declared in `runtime_api!`.
        if let Ok(sym) = unsafe { lib.get::<T>(name.as_bytes()) } {
            return Ok(*sym);
        }
    }
    Err(AscendError::MissingSymbol { library: "libascendcl.so/libnnopbase.so".into(), symbol: name.into() })
}

/// A loaded toolkit: its root, its libraries, the runtime API and the lazily resolved ops.
pub struct Toolkit {
    /// The toolkit root (the folder holding `lib64/`).
    pub root: PathBuf,
    /// Real CANN or the emulator.
    pub kind: ToolkitKind,
    /// The library files that were loaded, in load order.
    pub libraries: Vec<PathBuf>,
    /// Runtime and tensor-object entry points.
    pub api: RuntimeApi,
    acl: Library,
    nnopbase: Library,
    op_libs: Vec<Library>,
    ops: Mutex<HashMap<&'static str, Option<(usize, usize)>>>,
    hccl: Mutex<Option<Arc<HcclApi>>>,
    dcmi: OnceLock<std::result::Result<Arc<DcmiApi>, String>>,
}

impl std::fmt::Debug for Toolkit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolkit").field("root", &self.root).field("kind", &self.kind).finish()
    }
}

/// The library folders of a toolkit root.
fn lib_dirs(root: &Path) -> Vec<PathBuf> {
    let arch = if cfg!(target_arch = "aarch64") { "aarch64-linux" } else { "x86_64-linux" };
    vec![root.join("lib64"), root.join(arch).join("lib64"), root.join("runtime").join("lib64")]
}

pub(crate) fn find_lib(root: &Path, file: &str) -> Option<PathBuf> {
    lib_dirs(root).into_iter().map(|d| d.join(file)).find(|p| p.is_file())
}

/// The version of the toolkit at `root`: `version.cfg`'s `version=`, else the `version_dir=` of
/// `opp/version.info` or `compiler/version.info` (a toolkit tree without a version.cfg).
pub fn toolkit_version(root: &Path) -> Option<String> {
    let read = |file: &str, key: &str| {
        let text = std::fs::read_to_string(root.join(file)).ok()?;
        text.lines().find_map(|l| l.trim().strip_prefix(key).map(str::to_string))
    };
    read("version.cfg", "version=")
        .or_else(|| read("opp/version.info", "version_dir="))
        .or_else(|| read("compiler/version.info", "version_dir="))
}

/// Roots searched for a real toolkit, in order.
pub fn candidate_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    for var in ["ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ASCEND_INSTALL_PATH"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            roots.push(PathBuf::from(v));
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        let home = PathBuf::from(home);
        roots.push(home.join("Ascend/ascend-toolkit/latest"));
        roots.push(home.join("Ascend/cann"));
    }
    for p in ["/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann", "/opt/Ascend/cann"] {
        roots.push(PathBuf::from(p));
    }
    roots
}

/// The root of the emulated toolkit: `CANDLE_ASCEND_SIM_ROOT` at run time, else the one built
/// with this crate.
pub fn emulated_root() -> PathBuf {
    std::env::var_os("CANDLE_ASCEND_SIM_ROOT")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CANDLE_ASCEND_SIM_ROOT")))
}

/// The op libraries of a toolkit, in torch_npu's search order (op-plugin `op_api_common.cpp`):
/// every `libopapi_*.so` (math, nn, cv, transformer, and opbase's `_legacy` and `_oam`), then
/// `libopapi.so`, then the older `libaclnn_*.so` set. An op is looked up in this order.
pub fn op_library_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in lib_dirs(root) {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut split: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                name.starts_with("libopapi_") && name.ends_with(".so")
            })
            .collect();
        split.sort();
        files.extend(split);
    }
    const OLDER: [&str; 7] = [
        "libopapi.so",
        "libaclnn_ops_infer.so",
        "libaclnn_ops_train.so",
        "libaclnn_math.so",
        "libaclnn_sparse.so",
        "libaclnn_fft.so",
        "libaclnn_rand.so",
    ];
    for file in OLDER {
        if let Some(p) = find_lib(root, file) {
            files.push(p);
        }
    }
    let mut seen = std::collections::HashSet::new();
    files.retain(|p| seen.insert(p.canonicalize().unwrap_or_else(|_| p.clone())));
    files
}

fn open(path: &Path) -> Result<Library> {
    // SAFETY: loading a CANN library runs its initialisers, which have no preconditions.
    unsafe { Library::new(path) }.map_err(|source| AscendError::Library { path: path.to_path_buf(), source })
}

impl Toolkit {
    /// The toolkit of this kind, loaded once per process.
    pub fn get(kind: ToolkitKind) -> Result<Arc<Toolkit>> {
        static LOADED: OnceLock<Mutex<HashMap<ToolkitKind, Arc<Toolkit>>>> = OnceLock::new();
        let mut loaded = LOADED.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = loaded.get(&kind) {
            return Ok(t.clone());
        }
        let root = match kind {
            ToolkitKind::Emulated => emulated_root(),
            ToolkitKind::Cann => {
                let roots = candidate_roots();
                roots
                    .iter()
                    .find(|r| find_lib(r, "libascendcl.so").is_some())
                    .cloned()
                    .ok_or(AscendError::ToolkitNotFound { searched: roots })?
            }
        };
        let toolkit = Arc::new(Self::load(&root, kind)?);
        loaded.insert(kind, toolkit.clone());
        Ok(toolkit)
    }

    fn load(root: &Path, kind: ToolkitKind) -> Result<Self> {
        let need =
            |file: &str| find_lib(root, file).ok_or_else(|| AscendError::ToolkitNotFound { searched: lib_dirs(root) });
        let acl_path = need("libascendcl.so")?;
        let nnopbase_path = need("libnnopbase.so")?;
        let acl = open(&acl_path)?;
        let nnopbase = open(&nnopbase_path)?;
        let mut libraries = vec![acl_path, nnopbase_path];
        let mut op_libs = Vec::new();
        for p in op_library_files(root) {
            op_libs.push(open(&p)?);
            libraries.push(p);
        }
        if op_libs.is_empty() {
            return Err(AscendError::MissingSymbol {
                library: format!("{}/lib64", root.display()),
                symbol: "libopapi.so, libopapi_*.so or libaclnn_*.so".into(),
            });
        }
        let api = RuntimeApi::load(&acl, &nnopbase)?;
        // SAFETY: aclInit takes a nullable config path; a repeat returns 100002, which is fine.
        let code = unsafe { (api.aclInit)(std::ptr::null()) };
        if code != ACL_SUCCESS && code != ACL_ERROR_REPEAT_INITIALIZE {
            return Err(AscendError::Runtime { call: "aclInit", code, message: recent_message(&api) });
        }
        Ok(Self {
            root: root.to_path_buf(),
            kind,
            libraries,
            api,
            acl,
            nnopbase,
            op_libs,
            ops: Mutex::default(),
            hccl: Mutex::default(),
            dcmi: OnceLock::new(),
        })
    }

    /// Where this toolkit's `libhccl.so` is, if it has one.
    pub fn hccl_path(&self) -> Option<PathBuf> {
        find_lib(&self.root, "libhccl.so")
    }

    /// HCCL (`libhccl.so`) from this toolkit's root, loaded on first use.
    pub fn hccl(&self) -> Result<Arc<HcclApi>> {
        let mut slot = self.hccl.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(api) = &*slot {
            return Ok(api.clone());
        }
        let path = self.hccl_path().ok_or_else(|| AscendError::MissingSymbol {
            library: format!("{} (lib64)", self.root.display()),
            symbol: "libhccl.so".into(),
        })?;
        let api = Arc::new(HcclApi::load(&path)?);
        *slot = Some(api.clone());
        Ok(api)
    }

    /// The driver's DCMI, loaded and initialised on first use: the emulated one beside the
    /// emulated toolkit, else the first `libdcmi.so` of [`super::dcmi::driver_candidates`]. The
    /// error says why monitoring is off.
    pub fn dcmi(&self) -> std::result::Result<Arc<DcmiApi>, String> {
        self.dcmi
            .get_or_init(|| {
                let candidates = match self.kind {
                    ToolkitKind::Emulated => vec![find_lib(&self.root, "libdcmi.so")
                        .unwrap_or_else(|| self.root.join("lib64").join("libdcmi.so"))],
                    ToolkitKind::Cann => super::dcmi::driver_candidates(),
                };
                match candidates.iter().find(|p| p.is_file()) {
                    Some(path) => DcmiApi::open(path).map(Arc::new).map_err(|e| e.to_string()),
                    // A real driver's DCMI may also be on the loader's own search path.
                    None if self.kind == ToolkitKind::Cann => DcmiApi::open(Path::new("libdcmi.so"))
                        .map(Arc::new)
                        .map_err(|_| AscendError::DcmiNotFound { searched: candidates }.to_string()),
                    None => Err(AscendError::DcmiNotFound { searched: candidates }.to_string()),
                }
            })
            .clone()
    }

    /// The two phases of aclnn op `name` (e.g. `"aclnnAdd"`), as raw function addresses.
    pub fn op(&self, name: &'static str) -> Result<(usize, Phase2)> {
        let mut ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        let entry = *ops.entry(name).or_insert_with(|| {
            let phase1 = format!("{name}GetWorkspaceSize");
            self.op_libs.iter().find_map(|lib| {
                // SAFETY: only the addresses are taken here; callers cast them to the op's prototype.
                let p1 = unsafe { lib.get::<*const c_void>(phase1.as_bytes()) }.ok()?;
                let p2 = unsafe { lib.get::<*const c_void>(name.as_bytes()) }.ok()?;
                Some((*p1 as usize, *p2 as usize))
            })
        });
        match entry {
            // SAFETY: every aclnn phase-2 function has the `Phase2` prototype.
            Some((p1, p2)) => Ok((p1, unsafe { std::mem::transmute::<usize, Phase2>(p2) })),
            None => Err(AscendError::OpUnavailable { op: name, symbol: format!("{name}GetWorkspaceSize") }),
        }
    }

    /// An optional symbol of libascendcl or libnnopbase (e.g. `aclDestroyAclOpExecutor`, or
    /// the emulator's `aclsim*` counters).
    pub fn optional_symbol(&self, name: &str) -> Option<usize> {
        [&self.acl, &self.nnopbase].into_iter().find_map(|lib| {
            // SAFETY: only the address is taken.
            unsafe { lib.get::<*const c_void>(name.as_bytes()) }.ok().map(|s| *s as usize)
        })
    }

    /// The toolkit version from `version.cfg`, if present.
    pub fn version(&self) -> Option<String> {
        toolkit_version(&self.root)
    }

    /// The most recent error message of this thread (`aclGetRecentErrMsg`), consumed.
    pub fn recent_message(&self) -> Option<String> {
        recent_message(&self.api)
    }
}

fn recent_message(api: &RuntimeApi) -> Option<String> {
    // SAFETY: aclGetRecentErrMsg returns NULL or a NUL-terminated thread-local string.
    let p = unsafe { (api.aclGetRecentErrMsg)() };
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_libraries_are_searched_in_torch_npus_order() {
        let root = tempfile::tempdir().unwrap();
        let lib64 = root.path().join("lib64");
        std::fs::create_dir_all(&lib64).unwrap();
        for file in [
            "libaclnn_ops_train.so",
            "libopapi.so",
            "libopapi_nn.so",
            "libopapi_math.so",
            "libopapi_legacy.so",
            "libopapi_oam.so",
            "libaclnn_math.so",
            "libascendcl.so",
            "libopapi_math.so.bak",
        ] {
            std::fs::write(lib64.join(file), b"").unwrap();
        }
        let found: Vec<String> = op_library_files(root.path())
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            found,
            [
                "libopapi_legacy.so",
                "libopapi_math.so",
                "libopapi_nn.so",
                "libopapi_oam.so",
                "libopapi.so",
                "libaclnn_ops_train.so",
                "libaclnn_math.so",
            ]
        );
    }
}
