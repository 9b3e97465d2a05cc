#!/usr/bin/env bash
# Install NVIDIA's CUDA 13.0 compiler from PyPI into a folder (no system CUDA, no GPU needed) and
# print the environment that builds the `cuda` feature:
#
#   eval "$(tools/cuda-toolchain.sh)"   # default folder: target/cuda-13.0
#   cargo build --release --features cuda
#
# Every package is pinned to 13.0, NVVM too: a newer NVVM writes PTX that 13.0's ptxas refuses
# ("Unsupported .version") and that a CUDA 13.0 driver cannot load. The build links no CUDA
# library but the CUDA runtime: cudarc loads the driver, cuBLAS, cuRAND and NVRTC at run time, and
# candle-kernels' static MoE kernels link libcudart (from nvidia-cuda-runtime, below).
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)/target/cuda-13.0}
if [ ! -x "$root/nvidia/cu13/bin/nvcc" ]; then
    python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location --target "$root" \
        nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 \
        nvidia-cuda-cccl==13.0.85 nvidia-cuda-runtime==13.0.96 >&2
fi
cuda=$root/nvidia/cu13
# The wheel ships only the versioned runtime; the linker's -lcudart looks for libcudart.so.
ln -sf libcudart.so.13 "$cuda/lib/libcudart.so"
# No GPU to detect here: build for Hopper (H100, H200), compute capability 9.0.
echo "export CUDA_ROOT='$cuda' CUDA_PATH='$cuda' CUDA_COMPUTE_CAP=\${CUDA_COMPUTE_CAP:-90} PATH='$cuda/bin':\"\$PATH\" LIBRARY_PATH='$cuda/lib':\"\${LIBRARY_PATH:-}\""
