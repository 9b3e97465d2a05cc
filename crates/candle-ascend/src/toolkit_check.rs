//! What an installed CANN toolkit lacks for this backend, before any device is touched
//! (`npu_env --check-toolkit [ROOT]`): every runtime and HCCL function the backend loads, both
//! phases of every aclnn op it launches, and, where the toolkit ships its aclnn headers, each
//! op's phase-1 prototype against the one this backend was built for (`soc/cann/`).
use std::path::{Path, PathBuf};

use libloading::Library;

use crate::ffi::abi::AbiClass;
use crate::ffi::hccl::HcclApi;
use crate::ffi::loader::{find_lib, op_library_files, toolkit_version, RuntimeApi};
use crate::soc::AclnnOp;

/// Where a toolkit keeps the aclnn headers, relative to its root.
const HEADER_DIRS: [&str; 2] = ["include/aclnnop", "opp/built-in/op_impl/ai_core/tbe/op_api/include/aclnnop"];

/// The findings of [`check_toolkit`].
#[derive(Debug, Default)]
pub struct ToolkitReport {
    /// The root checked.
    pub root: PathBuf,
    /// `version.cfg`'s or `version.info`'s version, if found.
    pub version: Option<String>,
    /// What is absent: a library, or a library's symbol.
    pub missing: Vec<String>,
    /// Ops whose header prototype differs from the backend's.
    pub mismatched: Vec<String>,
    /// The aclnn headers read, if the toolkit has them.
    pub header_dir: Option<PathBuf>,
    /// Symbols and prototypes checked.
    pub checked: usize,
}

impl ToolkitReport {
    /// Whether the backend finds everything it needs.
    pub fn ok(&self) -> bool {
        self.missing.is_empty() && self.mismatched.is_empty()
    }
}

fn open(path: &Path) -> Option<Library> {
    // SAFETY: loading a CANN library runs its initialisers, which have no preconditions; nothing
    // from it is called here.
    unsafe { Library::new(path) }.ok()
}

fn has(lib: &Library, symbol: &str) -> bool {
    // SAFETY: only the address is looked up.
    unsafe { lib.get::<*const std::ffi::c_void>(symbol.as_bytes()) }.is_ok()
}

/// Check the toolkit at `root` (the folder holding `lib64/`) without initialising it.
pub fn check_toolkit(root: &Path) -> ToolkitReport {
    let mut report = ToolkitReport { root: root.to_path_buf(), version: toolkit_version(root), ..Default::default() };
    let library = |file: &str, report: &mut ToolkitReport| {
        let lib = find_lib(root, file).and_then(|p| open(&p));
        if lib.is_none() {
            report.missing.push(format!("{file} (in {})", root.join("lib64").display()));
        }
        lib
    };
    let runtime: Vec<Library> =
        ["libascendcl.so", "libnnopbase.so"].iter().filter_map(|f| library(f, &mut report)).collect();
    if runtime.len() == 2 {
        for name in RuntimeApi::NAMES {
            report.checked += 1;
            if !runtime.iter().any(|lib| has(lib, name)) {
                report.missing.push(format!("libascendcl.so/libnnopbase.so: {name}"));
            }
        }
    }
    if let Some(hccl) = library("libhccl.so", &mut report) {
        for name in HcclApi::NAMES {
            report.checked += 1;
            if !has(&hccl, name) {
                report.missing.push(format!("libhccl.so: {name}"));
            }
        }
    }
    let op_libs: Vec<Library> = op_library_files(root).iter().filter_map(|p| open(p)).collect();
    if op_libs.is_empty() {
        report
            .missing
            .push(format!("libopapi.so (or libopapi_*.so, libaclnn_*.so) in {}", root.join("lib64").display()));
    }
    // The ops the backend launches: every one the toolkit this backend follows declares.
    let launched: Vec<AclnnOp> = AclnnOp::ALL.into_iter().filter(|op| op.phase1_abi().is_some()).collect();
    for op in &launched {
        for symbol in [format!("{}GetWorkspaceSize", op.name()), op.name().to_string()] {
            report.checked += 1;
            if !op_libs.is_empty() && !op_libs.iter().any(|lib| has(lib, &symbol)) {
                report.missing.push(format!("op libraries: {symbol}"));
            }
        }
    }
    report.header_dir = HEADER_DIRS.iter().map(|d| root.join(d)).find(|d| d.is_dir());
    if let Some(dir) = &report.header_dir {
        let declared = header_prototypes(dir);
        for op in &launched {
            report.checked += 1;
            let ours = op.phase1_abi().unwrap_or(&[]);
            match declared.iter().find(|(name, _)| name == op.name()) {
                None => report.mismatched.push(format!(
                    "{}: no GetWorkspaceSize declaration in {}",
                    op.name(),
                    dir.display()
                )),
                Some((_, theirs)) if theirs.as_deref() != Some(ours) => report.mismatched.push(format!(
                    "{}: the header declares ({}), this backend calls ({})",
                    op.name(),
                    theirs.as_ref().map_or("a type it does not know".into(), |t| classes(t)),
                    classes(ours)
                )),
                Some(_) => {}
            }
        }
    }
    report
}

fn classes(c: &[AbiClass]) -> String {
    c.iter().map(|c| format!("{c:?}")).collect::<Vec<_>>().join(", ")
}

/// `(op, its phase-1 ABI classes before the workspace size and executor)` of every
/// `aclnn<Op>GetWorkspaceSize` declared in the folder's `aclnn_*.h`; `None` classes where a
/// parameter type is unknown or the two trailing parameters are not there.
pub fn header_prototypes(dir: &Path) -> Vec<(String, Option<Vec<AbiClass>>)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return found };
    let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    files.sort();
    for file in files.iter().filter(|f| {
        f.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("aclnn_") && n.ends_with(".h"))
    }) {
        let Ok(text) = std::fs::read_to_string(file) else { continue };
        let text = strip_comments(&text);
        let mut rest = text.as_str();
        while let Some(at) = rest.find("GetWorkspaceSize") {
            let (before, after) = rest.split_at(at);
            rest = &after["GetWorkspaceSize".len()..];
            let name_start = before.rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(0, |i| i + 1);
            let name = &before[name_start..];
            let (Some(open), Some(close)) = (rest.find('('), rest.find(')')) else { break };
            if !name.starts_with("aclnn") || rest[..open].trim() != "" || close < open {
                continue;
            }
            let params: Vec<&str> = rest[open + 1..close].split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
            let types: Vec<String> = params.iter().map(|p| drop_name(p)).collect();
            let classes = match types.split_last_chunk::<2>() {
                Some((head, [ws, exec]))
                    if ws.replace(' ', "") == "uint64_t*" && exec.replace(' ', "") == "aclOpExecutor**" =>
                {
                    head.iter().map(|t| AbiClass::of_c_type(t)).collect::<Option<Vec<_>>>()
                }
                _ => None,
            };
            if !found.iter().any(|(n, _): &(String, _)| n == name) {
                found.push((name.to_string(), classes));
            }
        }
    }
    found
}

/// A parameter declaration without its name: `const aclTensor* self` → `const aclTensor*`.
fn drop_name(param: &str) -> String {
    let spaced = param.replace('*', " * ");
    let mut words: Vec<&str> = spaced.split_whitespace().collect();
    let is_name = |w: &str| w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let type_words = ["int", "char", "float", "double", "bool", "int8_t", "int32_t", "int64_t", "uint64_t"];
    if words.len() > 1 && words.last().is_some_and(|w| is_name(w) && !type_words.contains(w) && !w.starts_with("acl")) {
        words.pop();
    }
    words.join(" ")
}

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("/*") {
            rest = r.find("*/").map_or("", |e| &r[e + 2..]);
            out.push(' ');
        } else if let Some(r) = rest.strip_prefix("//") {
            rest = r.find('\n').map_or("", |e| &r[e..]);
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}
