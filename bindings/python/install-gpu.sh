#!/usr/bin/env bash
# The GPU build of the Python package: builds codon_ascend with the `cuda` feature from this
# checkout and installs it, with CUDA 13's runtime libraries from PyPI (its `[cuda]` extra), into
# a Python (default: $PYTHON, else python3 on PATH; a venv's python installs into that venv):
#
#   bindings/python/install-gpu.sh [PYTHON]
#
# Run it on the GPU host. It needs Rust (rustup) and NVIDIA's driver for CUDA 13 (580 or later).
# The CUDA compiler is the CUDA 13 nvcc on PATH if there is one (a toolkit, `module load cuda`),
# else NVIDIA's from PyPI (tools/cuda-toolchain.sh, into target/cuda-13.0). The kernels are
# compiled for GPU 0's compute capability (nvidia-smi), or for CUDA_COMPUTE_CAP when set (90 for
# an H100, 80 for an A100). docs/python.md ("The GPU build") says more.
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${1:-${PYTHON:-python3}}
command -v cargo >/dev/null || { echo "install-gpu.sh: the build needs Rust: https://rustup.rs" >&2; exit 1; }
if [ -z "${CUDA_COMPUTE_CAP:-}" ] && command -v nvidia-smi >/dev/null; then
    CUDA_COMPUTE_CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')
    export CUDA_COMPUTE_CAP
fi
if command -v nvcc >/dev/null && nvcc --version | grep -q 'release 13\.'; then
    # A CUDA 13 toolkit: its runtime library is what the kernels link.
    cuda=$(cd "$(dirname "$(command -v nvcc)")/.." && pwd)
    export CUDA_ROOT=${CUDA_ROOT:-$cuda} LIBRARY_PATH="$cuda/lib64:$cuda/lib:${LIBRARY_PATH:-}"
else
    eval "$(tools/cuda-toolchain.sh)"
fi
echo "install-gpu.sh: building for compute capability ${CUDA_COMPUTE_CAP:-90} with $(command -v nvcc)" >&2
"$python" -m pip install "./bindings/python[cuda]" --config-settings=build-args="--features cuda"
"$python" -c 'from codon_ascend import _native; assert _native.CUDA; print("codon_ascend", _native.__version__, "with CUDA: load_model(device=\"cuda:0\")")'
