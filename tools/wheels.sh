#!/usr/bin/env bash
# The Python package's wheels, built on this x86_64 machine to install on most Linux systems, and
# each one tested where it runs (tools/test's Python step; docs/python.md):
#
#   tools/wheels.sh                  both wheels, checked and tested (what CI runs)
#   tools/wheels.sh x86_64|aarch64   one of them
#   tools/wheels.sh check WHEEL ARCH the checks of a wheel's tag and glibc alone
#
# 1. maturin builds each wheel with zig as the C compiler and linker (`--zig`, ziglang from PyPI),
#    against glibc 2.17's symbols: tagged manylinux2014 (manylinux_2_17), the wheel installs on
#    glibc 2.17 or later (RHEL/CentOS 7 and 8, Ubuntu 18.04 on, Debian 10 on, openEuler, Kylin).
# 2. `check`: the platform tag is manylinux, for the arch, no newer than FLOOR (2.28: RHEL 8); the
#    WHEEL file names the same tags; every shared object is built for the arch, needs no
#    GLIBC_ symbol version newer than its tag's glibc, and links only libraries every manylinux
#    system has.
# 3. The wheel is installed into a fresh venv (with pytest and nothing else) and
#    bindings/python/tests run there. x86_64: then mypy's stubtest checks the type stubs
#    (_native.pyi) against the built module, and mypy the package's Python against them.
#    aarch64: Debian's arm64 CPython (its packages unpacked into a folder, no system change) runs
#    under qemu-user; its venv's pip installs the wheel and pytest's arm64 wheels, offline.
#
# The GPU build (bindings/python/install-gpu.sh) is not built here: type-checking the package's
# `cuda` feature alone compiled candle's kernels again (3 min 27 s; tools/test's cuda step does not
# share them), and the Python package adds no CUDA code of its own (docs/python.md).
#
# Wheels go to target/python/wheels; the tools, venvs and the arm64 Python to target/python.
set -euo pipefail
cd "$(dirname "$0")/.."

MATURIN=maturin==1.16.0
ZIG=ziglang==0.14.1
PYTEST=pytest==9.2.0
MYPY=mypy==1.19.1
PIP=pip==25.3
# The glibc the wheels are built against, and the newest a wheel's tag may ask for.
GLIBC=2.17
FLOOR=2.28

py=target/python
pip_quiet=(--quiet --disable-pip-version-check --no-warn-script-location)
step() { printf '\n-- %s (%d s in)\n' "$*" "$SECONDS"; }

# What a wheel's tag promises, and what its shared objects need.
check() {
    local wheel=$1 arch=$2
    python3 - "$wheel" "$arch" "$FLOOR" <<'EOF'
import os, re, subprocess, sys, tempfile, zipfile

wheel, arch, floor = sys.argv[1], sys.argv[2], tuple(map(int, sys.argv[3].split(".")))
machine = {"x86_64": "Advanced Micro Devices X86-64", "aarch64": "AArch64"}[arch]
# Libraries every manylinux system has (PEP 600's policy; auditwheel's list, less X11 and GL).
allowed = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "libgcc_s.so.1",
           "libutil.so.1", "libresolv.so.2", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}
legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
failures = []
fail = failures.append
version = lambda v: ".".join(map(str, v))

name = os.path.basename(wheel)
platforms = name[: -len(".whl")].split("-")[-1].split(".")
tags = []
for platform in platforms:
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", platform) or re.fullmatch(r"(manylinux\w+?)_(\w+)", platform)
    if not m:
        fail(f"{platform}: not a manylinux tag (pip installs it only on the system that built it)")
        continue
    glibc, tag_arch = ((int(m[1]), int(m[2])), m[3]) if m.lastindex == 3 else (legacy.get(m[1]), m[2])
    if glibc is None or tag_arch != arch:
        fail(f"{platform}: expected a manylinux tag for {arch}")
        continue
    if glibc > floor:
        fail(f"{platform}: asks for glibc {version(glibc)}, newer than {version(floor)} (RHEL 8's)")
    tags.append(glibc)
tag_glibc = min(tags) if tags else None

with zipfile.ZipFile(wheel) as z, tempfile.TemporaryDirectory() as tmp:
    info = [n for n in z.namelist() if n.endswith(".dist-info/WHEEL")]
    listed = {l.split(":", 1)[1].strip().split("-")[-1] for l in z.read(info[0]).decode().splitlines()
              if l.startswith("Tag:")} if info else set()
    if listed != set(platforms):
        fail(f"the WHEEL file's tags {sorted(listed)} are not the name's {platforms}")
    objects = [n for n in z.namelist() if re.search(r"\.so(\.|$)", n)]
    if not objects:
        fail("no shared object in the wheel")
    for member in objects:
        path = z.extract(member, tmp)
        header = subprocess.run(["readelf", "-h", path], capture_output=True, text=True, check=True).stdout
        if machine not in header:
            fail(f"{member}: not built for {arch}")
        needs = subprocess.run(["readelf", "-V", "-W", path], capture_output=True, text=True, check=True).stdout
        versions = sorted({tuple(map(int, v.split("."))) for v in re.findall(r"Name: GLIBC_([\d.]+)", needs)})
        newest = versions[-1] if versions else (0, 0)
        print(f"{member}: newest GLIBC_ symbol version {version(newest)}, tag {version(tag_glibc) if tag_glibc else 'none'}")
        if tag_glibc and newest > tag_glibc:
            fail(f"{member}: needs GLIBC_{version(newest)}, newer than its tag's glibc {version(tag_glibc)}")
        dynamic = subprocess.run(["readelf", "-d", "-W", path], capture_output=True, text=True, check=True).stdout
        for library in re.findall(r"\(NEEDED\).*\[(.+)\]", dynamic):
            if library not in allowed:
                fail(f"{member}: links {library}, which a manylinux system need not have")
print(f"{name}: {os.path.getsize(wheel):,} bytes")
for f in failures:
    print(f"FAIL {f}", file=sys.stderr)
sys.exit(1 if failures else 0)
EOF
}

tools() {
    [ -x "$py/build/bin/maturin" ] && "$py/build/bin/python" -m ziglang version >/dev/null 2>&1 \
        && "$py/build/bin/maturin" --version | grep -qx "maturin ${MATURIN#maturin==}" \
        || { python3 -m venv --clear "$py/build"; "$py/build/bin/pip" install "${pip_quiet[@]}" "$MATURIN" "$ZIG"; }
}

# Build the wheel for `$1-unknown-linux-gnu` into target/python/wheels/$1 and check it.
build() {
    local arch=$1
    tools
    rustup target list --installed | grep -qx "$arch-unknown-linux-gnu" || rustup target add "$arch-unknown-linux-gnu" >&2
    rm -rf "$py/wheels/$arch"
    local start=$SECONDS
    # maturin runs zig through the tools venv's Python (`python -m ziglang`).
    PATH="$PWD/$py/build/bin:$PATH" maturin build --release --manifest-path bindings/python/Cargo.toml \
        --zig --target "$arch-unknown-linux-gnu" --compatibility "manylinux_${GLIBC/./_}" --out "$py/wheels/$arch"
    echo "built in $((SECONDS - start)) s"
    check "$py"/wheels/"$arch"/codon_ascend-*.whl "$arch"
}

x86_64() {
    step "x86_64: the wheel"
    build x86_64
    step "x86_64: installed into a fresh venv, tested by pytest"
    python3 -m venv --clear "$py/fresh"
    "$py/fresh/bin/pip" install "${pip_quiet[@]}" "$py"/wheels/x86_64/codon_ascend-*.whl "$PYTEST"
    "$py/fresh/bin/python" -m pytest -q -p no:cacheprovider bindings/python/tests
    step "x86_64: the type stubs against the built module (stubtest), the package's Python against the stubs (mypy)"
    "$py/fresh/bin/pip" install "${pip_quiet[@]}" "$MYPY"
    # From outside the checkout, so that the installed package is the one checked.
    (cd "$py/fresh" && bin/python -m mypy.stubtest codon_ascend._native && bin/python -m mypy -p codon_ascend)
}

# Debian's arm64 CPython, unpacked into $sysroot from this system's Debian sources through an apt
# of its own (its own lists and cache: nothing is installed, the system's apt is not touched).
arm64_python() {
    local sysroot=$1 apt=$py/aarch64/apt
    [ -x "$sysroot/usr/bin/python3" ] && return
    rm -rf "$apt" "$sysroot"
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs" "$sysroot"
    touch "$apt/status"
    local opts=(-q -o Dir::State::Lists="$PWD/$apt/lists" -o Dir::State::Status="$PWD/$apt/status"
        -o Dir::Cache="$PWD/$apt/cache" -o APT::Architecture=arm64 -o APT::Architectures::=arm64
        -o Debug::NoLocking=1 -o APT::Sandbox::User="$(id -un)")
    apt-get "${opts[@]}" update >/dev/null
    # The interpreter, its standard library and the libraries they load; not what only Debian's
    # maintainer scripts use (perl, dpkg, tar).
    local packages
    packages=$(apt-cache "${opts[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
        --no-replaces --no-enhances python3-minimal libpython3-stdlib | grep -v '^[ <]' | sort -u \
        | grep -vxE 'perl|perl-base|perl-modules-.*|libperl.*|libgdbm-compat4|dpkg|tar|install-info|mailcap|mime-support')
    # shellcheck disable=SC2086
    (cd "$apt/debs" && apt-get "${opts[@]}" download $packages >/dev/null)
    for deb in "$apt"/debs/*.deb; do dpkg-deb -x "$deb" "$sysroot"; done
}

aarch64() {
    step "aarch64: the wheel"
    command -v qemu-aarch64 >/dev/null || tools/aarch64-toolchain.sh >/dev/null
    build aarch64
    step "aarch64: installed into a fresh venv of Debian's arm64 CPython under qemu-user, tested by pytest"
    local arm=$py/aarch64 start=$SECONDS
    local sysroot=$PWD/$arm/sysroot venv=$PWD/$arm/venv
    arm64_python "$sysroot"
    local run=(qemu-aarch64 -L "$sysroot")
    local version
    version=$("${run[@]}" "$sysroot/usr/bin/python3" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    rm -rf "$venv" "$arm/wheelhouse"
    "${run[@]}" "$sysroot/usr/bin/python3" -m venv --without-pip "$venv"
    # The venv's python starts the arm64 interpreter under qemu-user, named as the venv's (so it
    # finds pyvenv.cfg, and sys.executable starts the same way for the tests' child processes:
    # without binfmt_misc, qemu-user cannot start another arm64 program).
    rm -f "$venv"/bin/python*
    printf '#!/bin/sh\nexec qemu-aarch64 -L "%s" -0 "$0" "%s" "$@"\n' "$sysroot" "$sysroot/usr/bin/python3" >"$venv/bin/python"
    chmod +x "$venv/bin/python"
    ln -s python "$venv/bin/python3"
    # pytest and its dependencies as arm64 wheels, and pip itself, fetched by this machine's pip;
    # the venv's pip (run from its wheel) installs them and ours with its own arm64 tags.
    "$py/build/bin/pip" download --quiet --disable-pip-version-check --only-binary=:all: --platform manylinux2014_aarch64 \
        --python-version "$version" --implementation cp -d "$arm/wheelhouse" "$PYTEST" "$PIP"
    "$venv/bin/python" "$(echo "$arm"/wheelhouse/pip-*.whl)/pip" install "${pip_quiet[@]}" --no-index \
        --find-links "$arm/wheelhouse" "$py"/wheels/aarch64/codon_ascend-*.whl "$PYTEST"
    echo "arm64 Python $version and the venv ready in $((SECONDS - start)) s"
    CODON_ASCEND_TEST_UNDER_QEMU=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider bindings/python/tests
}

trap 'status=$?; [ "$status" = 0 ] && echo "tools/wheels.sh: done in $SECONDS s"' EXIT
case "${1:-all}" in
    all) x86_64; aarch64 ;;
    x86_64) x86_64 ;;
    aarch64) aarch64 ;;
    check) check "${2:?usage: tools/wheels.sh check WHEEL x86_64|aarch64}" "${3:?usage: tools/wheels.sh check WHEEL x86_64|aarch64}" ;;
    *) echo "usage: tools/wheels.sh [all|x86_64|aarch64|check WHEEL ARCH]" >&2; exit 2 ;;
esac
