"""The GPU build's CUDA 13 libraries, found where pip puts them.

A build with the ``cuda`` feature links ``libcudart.so.13`` (candle's kernels need it to load),
and candle opens the NVIDIA driver, cuBLAS, cuBLASLt, cuRAND and NVRTC when a model first runs on
a GPU. The dynamic loader finds them on ``LD_LIBRARY_PATH`` or in the system's folders; this
module also finds the copies that pip installs: NVIDIA's ``nvidia-*`` packages (the package's
``[cuda]`` extra, or PyTorch's CUDA 13 wheels) put them in ``site-packages/nvidia/cu13/lib``.
Loading one by its path makes a later load by its name (``libcublas.so.13``) find it, as
PyTorch does with the same packages. The CPU-only build never calls this.
"""

import ctypes
import glob
import os
import sys
from typing import Iterable, List

#: The libraries, in an order in which each one's own dependencies come first.
LIBRARIES = ["libcudart.so.13", "libcublasLt.so.13", "libcublas.so.13", "libcurand.so.10", "libnvrtc.so.13"]


def folders() -> List[str]:
    """The ``nvidia/cu13/lib`` folders of the entries of ``sys.path``, in its order."""
    found = []
    for entry in sys.path:
        for folder in glob.glob(os.path.join(entry or ".", "nvidia", "cu13", "lib")):
            if folder not in found:
                found.append(folder)
    return found


def preload(names: Iterable[str] = LIBRARIES) -> List[str]:
    """Load each of ``names`` found in ``folders()``; the paths loaded. A library not found, or
    one that does not load, is left for the dynamic loader's own search (and its error)."""
    loaded = []
    places = folders()
    for name in names:
        for folder in places:
            path = os.path.join(folder, name)
            if os.path.exists(path):
                try:
                    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                except OSError:
                    continue
                loaded.append(path)
                break
    return loaded
