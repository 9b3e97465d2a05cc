#!/usr/bin/env python3
"""Check candle-ascend's ACL/aclnn declarations against the vendor's own headers.

The torch-npu wheel on PyPI ships CANN's ACL headers, op-plugin's aclnn calling convention
(op_api_common_base.h) and libtorch_npu.so. This script fetches the wheel with pip into a cache
(never into the repository), then:
  1. compiles a C++ file against the vendor headers that compares every runtime and tensor-object
     prototype our FFI resolves (crates/candle-ascend/src/ffi/loader.rs, `runtime_api!`) with the
     vendor declaration: same arity, and per parameter the same type, or integers/enums of the same
     size, or pointers (the C ABI passes these alike);
     It also compiles every runtime and tensor-object function the emulator exports (csrc/**/*.c,
     everything but aclnn ops and the private aclsim* services) against the vendor declaration;
  2. compares every enum value and status code we use (src/ffi/types.rs) with the vendor's;
  3. looks up every aclnn op we call (soc/op_support.tsv) in libtorch_npu.so's strings, and lists
     the absent ones for review with their vendor document.
Exit status 0 when 1 and 2 hold; absent aclnn names are reported, not fatal.
Usage: python3 tools/check_vendor_abi.py [--cache DIR]
"""
import argparse, os, re, subprocess, sys, tempfile, zipfile
from pathlib import Path

WHEEL = "torch-npu==2.14.0"
ROOT = Path(__file__).resolve().parent.parent
CRATE = ROOT / "crates" / "candle-ascend"

RUST_TO_CPP = {"i32": "int32_t", "u32": "uint32_t", "i64": "int64_t", "u64": "uint64_t", "usize": "size_t",
               "i8": "int8_t", "bool": "bool", "f64": "double", "f32": "float"}


def fetch(cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob("torch_npu-2.14.0-*.whl"))
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(cache), WHEEL],
                       check=True)
        wheels = sorted(cache.glob("torch_npu-2.14.0-*.whl"))
    out = cache / "unpacked"
    if not (out / "torch_npu" / "lib" / "libtorch_npu.so").exists():
        with zipfile.ZipFile(wheels[0]) as z:
            for name in z.namelist():
                if name.startswith("torch_npu/include/third_party/") or name == "torch_npu/lib/libtorch_npu.so":
                    z.extract(name, out)
    return out / "torch_npu"


def our_prototypes(file="loader.rs", macro="runtime_api! {"):
    text = (CRATE / "src" / "ffi" / file).read_text()
    block = text[text.index(macro):]
    block = block[:block.index("\n}")]
    protos = []
    for m in re.finditer(r"(\w+): fn\(([^)]*)\)(?: -> (\w+))?;", block):
        name, args, ret = m.group(1), m.group(2), m.group(3) or "()"
        protos.append((name, [a.strip() for a in args.split(",") if a.strip()], ret))
    return protos


# Two opbase functions the wheel's headers do not declare, as hicann/opbase (aa3cd74) declares them in
# include/nnopbase/aclnn/acl_meta.h and aclnn_base.h.
OPBASE_ONLY = {
    "aclDestroyAclOpExecutor": "int32_t (*)(aclOpExecutor*)",
    "aclnnInit": "int32_t (*)(const char*)",
}


def emulator_prototypes():
    """(name, C prototype) of each public function the emulator defines, aclnn ops aside."""
    protos = []
    for src in sorted((CRATE / "csrc").rglob("*.c")):
        text = src.read_text()
        for m in re.finditer(r"SIM_EXPORT\s+([^;{]*?)\b((?:acl(?!sim)|Hccl)\w+)\s*\(([^)]*)\)\s*\{", text, re.S):
            ret, name, params = " ".join(m.group(1).split()), m.group(2), " ".join(m.group(3).split())
            if name.endswith("GetWorkspaceSize") or name + "GetWorkspaceSize" in text:
                continue
            protos.append((name, "%s %s(%s);" % (ret, name, params)))
    return protos


def cpp_type(rust: str) -> str:
    rust = rust.strip()
    if rust.startswith("*"):
        return "void*"
    if rust in ("AclError", "AclnnStatus"):
        return "int32_t"
    if rust.endswith("Ptr") or rust in ("AclrtStream", "AclrtEvent", "HcclComm"):
        return "void*"
    return RUST_TO_CPP[rust]


def our_constants():
    text = (CRATE / "src" / "ffi" / "types.rs").read_text()
    consts = {}
    for m in re.finditer(r"pub const (ACL_\w+): \w+ = ([\d_]+);", text):
        consts[m.group(1)] = int(m.group(2).replace("_", ""))
    for name, value, _ in acl_dtypes():
        consts["ACL_" + name] = value
    return consts


def acl_dtypes():
    """(name, value, bytes) of each aclDataType in soc/acl_dtypes.tsv, the crate's one list."""
    rows = []
    for line in (CRATE / "soc" / "acl_dtypes.tsv").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, value, size = (f.strip() for f in line.split("|"))
            rows.append((name, int(value), int(size)))
    return rows


def acl_dtypes_header():
    """The enum build.rs generates from the same table, for compiling sim.h here."""
    values = ", ".join("ACL_%s = %d" % (name, value) for name, value, _ in acl_dtypes())
    return "enum { ACL_DT_UNDEFINED = -1, %s };\n" % values


def our_hccl_constants():
    text = (CRATE / "src" / "ffi" / "hccl.rs").read_text()
    consts = {m.group(1): int(m.group(2).replace("_", "")) for m in re.finditer(r"pub const (HCCL_\w+): \w+ = ([\d_]+);", text)}
    return consts


CHECK = r"""
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include "acl/acl.h"
#include "acl/acl_rt.h"
#include "acl/error_codes/rt_error_codes.h"
#include "hccl/hccl.h"
typedef struct aclOpExecutor aclOpExecutor;
typedef struct aclTensor aclTensor;
typedef struct aclScalar aclScalar;
typedef struct aclIntArray aclIntArray;
typedef struct aclFloatArray aclFloatArray;
typedef struct aclBoolArray aclBoolArray;
typedef struct aclTensorList aclTensorList;
typedef struct aclScalarList aclScalarList;
%(nnopbase)s
// Same C ABI: identical types, integers/enums of one size, or any two data pointers.
template <class A, class B> constexpr bool same_abi() {
  if constexpr (std::is_same_v<A, B>) return true;
  else if constexpr (std::is_pointer_v<A> && std::is_pointer_v<B>) return true;
  else if constexpr ((std::is_integral_v<A> || std::is_enum_v<A>) && (std::is_integral_v<B> || std::is_enum_v<B>))
    return sizeof(A) == sizeof(B);
  else return false;
}
template <class F, class G> struct abi;
template <class R, class... A, class S, class... B> struct abi<R (*)(A...), S (*)(B...)> {
  static constexpr bool value = sizeof...(A) == sizeof...(B) && same_abi<R, S>() && (same_abi<A, B>() && ...);
};
template <class R, class S, class... B> struct abi<R (*)(), S (*)(B...)> {
  static constexpr bool value = sizeof...(B) == 0 && same_abi<R, S>();
};
// The emulator's own declarations, in a namespace of their own so they cannot clash with the vendor's.
%(hide)s
namespace sim {
#include "sim.h"
typedef struct { char internal[4108]; } HcclRootInfo;
typedef void *HcclComm;
typedef int32_t HcclResult;
%(emulator)s
}
%(unhide)s
%(checks)s
int main() { return 0; }
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default=os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                                    "codon-ascend", "torch-npu"))
    args = ap.parse_args()
    pkg = fetch(Path(args.cache))
    inc = pkg / "include" / "third_party"
    base = (inc / "op-plugin" / "op_plugin" / "utils" / "op_api_common_base.h").read_text()
    nnopbase = "\n".join(m.group(0) for m in re.finditer(r"typedef [^;]*\(\*_acl\w+\)\([^;]*\);", base))
    vendor_typedefs = set(re.findall(r"\(\*_(acl\w+)\)", nnopbase))
    checks, failures = [], []
    for name, params, ret in our_prototypes():
        ours = "%s (*)(%s)" % ("void" if ret == "()" else cpp_type(ret), ", ".join(cpp_type(p) for p in params))
        vendor = "_%s" % name if name in vendor_typedefs else "decltype(&%s)" % name
        checks.append('static_assert(abi<%s, %s>::value, "prototype of %s differs from the vendor header");'
                      % (vendor, ours, name))
    for name, params, ret in our_prototypes("hccl.rs", "hccl_api! {"):
        ours = "%s (*)(%s)" % (cpp_type(ret) if ret != "()" else "void", ", ".join(cpp_type(p) for p in params))
        checks.append('static_assert(abi<decltype(&::%s), %s>::value, "prototype of %s differs from the vendor header");'
                      % (name, ours, name))
    for const, value in sorted(our_hccl_constants().items()):
        checks.append('static_assert((long long)(%s) == %dLL, "%s is not %d in the vendor header");'
                      % (const, value, const, value))
    emulator = emulator_prototypes()
    for name, _ in emulator:
        vendor = ("_%s" % name if name in vendor_typedefs else OPBASE_ONLY[name] if name in OPBASE_ONLY
                  else "decltype(&::%s)" % name)
        checks.append('static_assert(abi<%s, decltype(&sim::%s)>::value, '
                      '"the emulator\'s %s differs from the vendor header");' % (vendor, name, name))
    for const, value in sorted(our_constants().items()):
        checks.append('static_assert((long long)(%s) == %dLL, "%s is not %d in the vendor header");'
                      % (const, value, const, value))
    # Vendor macros that share a name with an emulator enumerator are hidden while sim.h is read.
    sim_text = (CRATE / "csrc" / "sim.h").read_text() + acl_dtypes_header()
    sim_names = set(re.findall(r"\b(ACL\w+)\s*=", sim_text))
    vendor_macros = set()
    for header in (inc / "acl" / "inc").rglob("*.h"):
        vendor_macros |= set(re.findall(r"#define\s+(ACL\w+)", header.read_text(errors="replace")))
    clashes = sorted(sim_names & vendor_macros)
    hide = "\n".join('#pragma push_macro("%s")\n#undef %s' % (n, n) for n in clashes)
    unhide = "\n".join('#pragma pop_macro("%s")' % n for n in clashes)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "abi_check.cpp"
        (Path(tmp) / "acl_dtypes.h").write_text(acl_dtypes_header())
        src.write_text(CHECK % {"nnopbase": nnopbase, "checks": "\n".join(checks),
                                "emulator": "\n".join(proto for _, proto in emulator),
                                "hide": hide, "unhide": unhide})
        r = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-I", str(inc / "acl" / "inc"),
                            "-I", str(inc / "hccl" / "inc"), "-I", str(inc.parent),
                            "-I", str(CRATE / "csrc"), "-I", tmp, str(src)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            failures.append(r.stderr.strip())
    print("vendor ABI: %d FFI prototypes, %d emulator prototypes and %d constants compared against %s headers"
          % (len(our_prototypes()) + len(our_prototypes("hccl.rs", "hccl_api! {")), len(emulator),
             len(our_constants()) + len(our_hccl_constants()), WHEEL))
    strings = subprocess.run(["strings", str(pkg / "lib" / "libtorch_npu.so")], capture_output=True, text=True,
                             check=True).stdout.split()
    known = {s for s in strings if s.startswith("aclnn")}
    ops = []
    for line in (CRATE / "soc" / "op_support.tsv").read_text().splitlines():
        if line.startswith("aclnn"):
            f = [x.strip() for x in line.split("|")]
            if f[0] not in [o for o, _ in ops]:
                ops.append((f[0], f[4]))
    absent = [(op, src) for op, src in ops if op not in known]
    print("aclnn ops: %d used, %d named in libtorch_npu.so" % (len(ops), len(ops) - len(absent)))
    for op, src in absent:
        print("  review: %s is not called by torch_npu 2.14.0; vendor document: %s" % (op, src))
    if failures:
        print("vendor ABI check FAILED:\n" + "\n".join(failures))
        return 1
    print("vendor ABI check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
