#!/usr/bin/env python3
"""Extract the facts the Ascend backend relies on from a CANN toolkit tree, into committed tables.

usage: python3 tools/cann_facts.py ROOT [--out crates/candle-ascend/soc/cann]

ROOT is a toolkit version folder: an installed toolkit (`$ASCEND_HOME_PATH`, e.g.
/usr/local/Ascend/ascend-toolkit/latest) or the public mirror of CANN 8.1.RC1
(github.com/leideng/CANN-8.1.RC1, folder Ascend/ascend-toolkit/8.1.RC1; `git archive` that folder's
`opp/built-in/op_impl/ai_core/tbe/op_api/include/aclnnop`, `aarch64-linux/data/platform_config` and
`opp/version.info` when the mirror has no work tree). Standard library only.

Writes, each stamped with the toolkit version it was read from:
- `aclnn_prototypes.tsv`: for every aclnn op in `soc/op_support.tsv`, the C parameter types of its
  phase-1 function `aclnn<Op>GetWorkspaceSize`, in order, the trailing workspace size and executor
  included. build.rs turns it into each op's ABI classes (checked at every launch) and into C
  declarations the emulator is compiled against.
- `platforms.tsv`: each supported SoC's platform parameters (core counts, HBM, L2, UB, cube).
- `runtime_prototypes.tsv`: the ABI of every ACL runtime, tensor-object and HCCL function the
  backend resolves (`runtime_api!` in src/ffi/loader.rs, `hccl_api!` in src/ffi/hccl.rs) and of each
  op's phase-2 function, read from `aarch64-linux/include/{acl,aclnn,hccl}/*.h`, typedefs resolved.
  tests/vendor_facts.rs compares each with the Rust declaration.
- `kernels.tsv`: for every kernel `soc/aclnn_kernels.tsv` names, the dtypes of its first input in
  each family's AI Core kernel table, and the dtypes the AI CPU kernel tables (`aicpu_kernel.json`,
  `tf_kernel.json`) list for it.
- `kernels_bf16.tsv`: per SoC family, how many AI Core kernels its kernel table
  (`opp/built-in/op_impl/ai_core/tbe/config/<soc>/aic-<soc>-ops-info.json`) has, and which list
  bfloat16 for any input or output (by name where there are few).

The tables hold facts (types, numbers) carried over in this project's own format; no vendor file
is copied.
"""
import argparse
import configparser
import json
import re
import sys
from pathlib import Path

CRATE = Path(__file__).resolve().parent.parent / "crates" / "candle-ascend"
INCLUDE = "opp/built-in/op_impl/ai_core/tbe/op_api/include/aclnnop"
PLATFORMS = "aarch64-linux/data/platform_config"
RUNTIME_HEADERS = ["aarch64-linux/include/acl", "aarch64-linux/include/aclnn", "aarch64-linux/include/hccl"]
# The driver's DCMI header, beside the toolkit in the mirror (Ascend/driver/include).
DCMI_HEADER = "../../driver/include/dcmi_interface_api.h"
KERNELS = "opp/built-in/op_impl/ai_core/tbe/config/{soc}/aic-{soc}-ops-info.json"
# The AI CPU engine's kernel tables: its own kernels and its TensorFlow kernels.
AICPU_KERNELS = ["opp/built-in/op_impl/aicpu/aicpu_kernel/config/aicpu_kernel.json",
                 "opp/built-in/op_impl/aicpu/tf_kernel/config/tf_kernel.json"]
# The support table's family keys and the kernel table folder of each.
KERNEL_FAMILIES = [("910", "ascend910"), ("910b", "ascend910b")]
# The parts the backend supports (soc.rs SocFamily) that have a platform file.
SOCS = ["Ascend910A", "Ascend910ProA", "Ascend910B1", "Ascend910B2", "Ascend910B3", "Ascend910B4"]
# (section, key) of each platform column, in order.
PLATFORM_KEYS = [
    ("SoCInfo", "ai_core_cnt"), ("SoCInfo", "cube_core_cnt"), ("SoCInfo", "vector_core_cnt"),
    ("SoCInfo", "ai_cpu_cnt"), ("SoCInfo", "memory_size"), ("SoCInfo", "l2_size"),
    ("AICoreSpec", "cube_freq"), ("AICoreSpec", "cube_m_size"), ("AICoreSpec", "cube_n_size"),
    ("AICoreSpec", "cube_k_size"), ("AICoreSpec", "ub_size"),
    # Bytes per cycle per AI Core between global memory (HBM) and the core.
    ("AICoreMemoryRates", "ddr_rate"), ("AICoreMemoryRates", "l2_rate"),
]


def version(root):
    for candidate in ["opp/version.info", "compiler/version.info", "version.cfg"]:
        path = root / candidate
        if path.is_file():
            text = path.read_text(errors="replace")
            m = re.search(r"version_dir=(\S+)", text) or re.search(r"[Vv]ersion=(\S+)", text)
            if m:
                return m.group(1)
    sys.exit(f"{root}: no version.info: is this a toolkit version folder?")


def our_ops():
    ops = []
    for line in (CRATE / "soc" / "op_support.tsv").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            op = line.split("|")[0].strip()
            if op not in ops:
                ops.append(op)
    return ops


def header_prototypes(include):
    """({op: (header, [C parameter type, ...])} of every `aclnn<Op>GetWorkspaceSize`, and the same of
    every phase 2 `aclnn<Op>`) declared under `include`, each header read once."""
    phase1, phase2 = {}, {}
    for header in sorted(include.glob("aclnn_*.h")):
        text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", header.read_text(errors="replace"), flags=re.S)
        for m in re.finditer(r"aclnnStatus\s+(aclnn\w+?)(GetWorkspaceSize)?\s*\(([^)]*)\)\s*;", text):
            params = [normalise(p) for p in m.group(3).split(",") if p.strip()]
            (phase1 if m.group(2) else phase2).setdefault(m.group(1), (header.name, params))
    return phase1, phase2


def normalise(param):
    """A parameter's C type, its name dropped and spacing made canonical (`const aclTensor *`)."""
    param = " ".join(param.replace("*", " * ").split())
    words = param.split(" ")
    # The last word is the name unless the declaration has none.
    if len(words) > 1 and re.fullmatch(r"[A-Za-z_]\w*", words[-1]) and words[-1] not in {"int", "char", "float", "double", "bool"}:
        words = words[:-1]
    text = " ".join(words)
    return re.sub(r" \*", "*", text).replace("*", " *").replace("* *", "**").strip()


def our_runtime_functions():
    """(name, library) of each function the backend's loader macros resolve."""
    found = []
    for file, macro, library in [("loader.rs", "runtime_api! {", "libascendcl/libnnopbase"),
                                 ("hccl.rs", "hccl_api! {", "libhccl"),
                                 ("dcmi.rs", "dcmi_api! {", "libdcmi")]:
        text = (CRATE / "src" / "ffi" / file).read_text()
        block = text[text.index(macro):]
        block = block[:block.index("\n}")]
        found += [(m.group(1), library) for m in re.finditer(r"(\w+): fn\(", block)]
    return found


# C scalar types by ABI class; anything with a `*` is a pointer, and an enum is an int.
C_CLASSES = {"void": "void", "int": "i32", "int32_t": "i32", "uint32_t": "u32", "int64_t": "i64",
             "uint64_t": "u64", "size_t": "usize", "bool": "bool", "float": "f32", "double": "f64",
             "char": "i8", "int8_t": "i8", "uint8_t": "u8", "int16_t": "i16", "uint16_t": "u16",
             "unsigned int": "u32", "unsigned char": "u8", "unsigned long long": "u64"}


def runtime_headers(root):
    """All declarations and typedefs of the runtime headers, comments stripped, as one text."""
    texts = []
    headers = [(root / folder).glob("*.h") for folder in RUNTIME_HEADERS]
    dcmi = root / DCMI_HEADER
    if not dcmi.is_file():
        sys.exit(f"{dcmi}: missing (the mirror's Ascend/driver/include)")
    for header in [h for found in headers for h in sorted(found)] + [dcmi]:
        text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", header.read_text(errors="replace"), flags=re.S)
        # Preprocessor lines (with their continuations) are not declarations.
        texts.append((header.name, re.sub(r"^\s*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)))
    return texts


def typedefs(texts):
    """{name: underlying C type} of the headers' typedefs; enums map to `int`."""
    found = {}
    for _, text in texts:
        for m in re.finditer(r"typedef\s+enum\s*\w*\s*\{[^}]*\}\s*(\w+)\s*;", text):
            found[m.group(1)] = "int"
        for m in re.finditer(r"typedef\s+([\w\s\*]+?)\s*\b(\w+)\s*;", text):
            if not m.group(1).startswith(("struct", "enum")):
                found.setdefault(m.group(2), m.group(1).strip())
        for m in re.finditer(r"typedef\s+struct\s+\w*\s*\{[^}]*\}\s*(\w+)\s*;", text):
            found[m.group(1)] = "struct"
        for m in re.finditer(r"typedef\s+struct\s+\w+\s+(\w+)\s*;", text):
            found[m.group(1)] = "struct"
    return found


def abi_class(c_type, aliases):
    """A C type's ABI class: `ptr`, or the scalar class of its resolved typedef."""
    c_type = " ".join(w for w in c_type.replace("*", " * ").split() if w not in {"const", "struct", "enum"})
    if "*" in c_type:
        return "ptr"
    seen = set()
    while c_type in aliases and c_type not in seen:
        seen.add(c_type)
        c_type = " ".join(w for w in aliases[c_type].replace("*", " * ").split() if w != "const")
        if "*" in c_type:
            return "ptr"
    return C_CLASSES.get(c_type, f"?{c_type}")


def declaration(texts, name):
    """(header, return type, [parameter types]) of `name`'s declaration, or None."""
    pattern = re.compile(r"(?:ACL_FUNC_VISIBILITY|extern|HCCL_API|DCMIDLLEXPORT)?\s*([\w\s\*]+?)\s*\b" + name + r"\s*\(([^)]*)\)\s*;")
    for header, text in texts:
        m = pattern.search(text)
        if m:
            ret = " ".join(w for w in m.group(1).split() if w not in {"ACL_FUNC_VISIBILITY", "extern", "HCCL_API", "DCMIDLLEXPORT"})
            params = [normalise(p) for p in m.group(2).split(",") if p.strip() and p.strip() != "void"]
            return header, normalise(ret + " r"), params
    return None


# Kernel-table dtype spellings in this project's (aclDataType) names; complex and quantised types,
# which candle does not have, are dropped.
KERNEL_DTYPES = {"float": "FLOAT", "float32": "FLOAT", "float16": "FLOAT16", "bfloat16": "BF16", "double": "DOUBLE",
                 "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64", "uint8": "UINT8",
                 "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64", "bool": "BOOL", "bf16": "BF16"}


def dtype_names(spellings):
    names = {KERNEL_DTYPES[d] for d in spellings if d in KERNEL_DTYPES}
    return " ".join(sorted(names)) or "none"


def our_kernels():
    """Every kernel soc/aclnn_kernels.tsv names: launched, rerouted (`>@K`) or AI CPU."""
    names = []
    for line in (CRATE / "soc" / "aclnn_kernels.tsv").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        f = [x.strip() for x in line.split("|")]
        for name in [f[2], f[5].removesuffix(":out")] + re.findall(r"@(\w+)", f[4]):
            if name != "-" and name not in names:
                names.append(name)
    return names


def ai_core_dtypes(table, kernel):
    """The first input's dtypes in an AI Core kernel table: a list, `runtime` or `absent`."""
    entry = table.get(kernel)
    if entry is None:
        return "absent"
    dtype = entry.get("input0", {}).get("dtype")
    return dtype_names(d.strip().lower() for d in dtype.split(",")) if dtype else "runtime"


def ai_cpu_dtypes(tables, kernel, key):
    """The dtypes of an AI CPU kernel's `key` (input0 or output0), over both tables. `opsFlag` is
    not read: StatelessDropOutGenMask is OPS_FLAG_CLOSE, yet aclnnDropoutGenMaskV2 launches it on the
    910 (ops-math stateless_dropout_gen_mask.cpp)."""
    found, listed = set(), False
    for table in tables:
        entry = table.get(kernel)
        if entry is None:
            continue
        listed = True
        found |= {t.strip().lower().removeprefix("dt_") for t in entry.get(key, {}).get("type", "").split(",")}
    return dtype_names(found) if listed else "absent"


def write_table(path, header_lines, rows):
    """A stamped table: its `#` header lines, then one row per line."""
    path.write_text("".join(f"# {line}\n" for line in header_lines) + "\n".join(rows) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root", type=Path)
    ap.add_argument("--out", type=Path, default=CRATE / "soc" / "cann")
    args = ap.parse_args()
    root = args.root
    stamp = version(root)
    args.out.mkdir(parents=True, exist_ok=True)

    prototypes, phase2 = header_prototypes(root / INCLUDE)
    rows = []
    for op in our_ops():
        # An op the toolkit does not declare (aclnnSquare: Ascend 950 only) is recorded as absent.
        header, params = prototypes.get(op, ("-", ["-"]))
        rows.append(f"{op} | {header} | {', '.join(params)}")
    write_table(args.out / "aclnn_prototypes.tsv", [
        f"CANN {stamp}: phase-1 parameter types of each aclnn op in soc/op_support.tsv, read from",
        f"{INCLUDE}/aclnn_*.h by tools/cann_facts.py (types only, in this table's own spelling).",
        "op | header | parameter types, in order (the last two: workspace size, executor); \"-\": not declared",
    ], rows)

    texts = runtime_headers(root)
    aliases = typedefs(texts)
    runtime_rows = []
    functions = our_runtime_functions() + [(op, "op library, phase 2") for op in our_ops()]
    for name, library in functions:
        found = declaration(texts, name)
        if found is None and name in phase2:
            header, params = phase2[name]
            found = (header, "aclnnStatus", params)
        if found is None:
            runtime_rows.append(f"{name} | {library} | - | - | - | -")
            continue
        header, ret, params = found
        classes = " ".join(abi_class(p, aliases) for p in params) or "-"
        runtime_rows.append(f"{name} | {library} | {header} | {abi_class(ret, aliases)} | {classes} | "
                            f"{ret} ({', '.join(params)})")
    write_table(args.out / "runtime_prototypes.tsv", [
        f"CANN {stamp}: the ABI of each runtime, tensor-object, HCCL and DCMI function the backend resolves, and",
        "of each aclnn op's phase 2, read from aarch64-linux/include/{acl,aclnn,hccl}/*.h, the aclnn headers and the",
        "driver's dcmi_interface_api.h (the mirror's Ascend/driver/include)",
        "by tools/cann_facts.py, typedefs resolved (an enum is i32; every pointer is ptr). \"-\": not declared.",
        "function | library | header | return class | parameter classes | declared types",
    ], runtime_rows)

    platform_rows = []
    for soc in SOCS:
        ini = configparser.ConfigParser(interpolation=None, strict=False)
        path = root / PLATFORMS / f"{soc}.ini"
        if not path.is_file():
            sys.exit(f"{path}: missing")
        ini.read_string(path.read_text(errors="replace"))
        values = [ini.get(section, key, fallback="").strip() or "-" for section, key in PLATFORM_KEYS]
        platform_rows.append(" | ".join([soc] + values))
    write_table(args.out / "platforms.tsv", [
        f"CANN {stamp}: platform parameters of each supported SoC, read from {PLATFORMS}/<SoC>.ini by",
        "tools/cann_facts.py. \"-\": the file has no such entry (sizes in bytes, cube_freq in MHz, rates in bytes",
        "per cycle per AI Core).",
        "soc | " + " | ".join(key for _, key in PLATFORM_KEYS),
    ], platform_rows)
    ai_core = [json.loads((root / KERNELS.format(soc=soc)).read_text()) for _, soc in KERNEL_FAMILIES]
    ai_cpu = [json.loads((root / path).read_text()) for path in AICPU_KERNELS]
    per_kernel = [" | ".join([k] + [ai_core_dtypes(t, k) for t in ai_core]
                             + [ai_cpu_dtypes(ai_cpu, k, "input0"), ai_cpu_dtypes(ai_cpu, k, "output0")])
                  for k in our_kernels()]
    write_table(args.out / "kernels.tsv", [
        f"CANN {stamp}: each kernel soc/aclnn_kernels.tsv names, read by tools/cann_facts.py from the AI Core",
        f"kernel tables ({KERNELS}) and the AI CPU",
        f"kernel tables ({', '.join(AICPU_KERNELS)}). AI Core: the first input's dtypes;",
        "\"runtime\": the table leaves them to the kernel at run time; \"absent\": no such kernel. AI CPU: the first",
        "input's, and the first output's, dtypes of the kernel in either table.",
        "kernel | " + " | ".join(f"{soc} AI Core" for _, soc in KERNEL_FAMILIES) + " | AI CPU input | AI CPU output",
    ], per_kernel)

    kernel_rows = []
    for family, soc in KERNEL_FAMILIES:
        table = json.loads((root / KERNELS.format(soc=soc)).read_text())
        bf16 = sorted(name for name, op in table.items()
                      if any(isinstance(v, dict) and "bfloat16" in str(v.get("dtype", "")) for v in op.values()))
        names = ", ".join(bf16) if len(bf16) <= 10 else f"({len(bf16)} kernels)"
        kernel_rows.append(f"{family} | {soc} | {len(table)} | {len(bf16)} | {names}")
    write_table(args.out / "kernels_bf16.tsv", [
        f"CANN {stamp}: AI Core kernels per SoC family, and those listing bfloat16 for an input or output,",
        f"read from {KERNELS} by tools/cann_facts.py.",
        "family | kernel table | kernels | kernels with bfloat16 | their names (when 10 or fewer)",
    ], kernel_rows)
    print(f"CANN {stamp}: {len(rows)} aclnn prototypes, {len(runtime_rows)} runtime prototypes, {len(platform_rows)} platforms, "
          f"{len(kernel_rows)} kernel tables -> {args.out}")


if __name__ == "__main__":
    main()
