# Sourced by the GPU scripts with BIN: unpacks the xz-compressed binaries carried in BIN (the CUDA
# kernels are most of their size) and puts the CUDA libraries that PyTorch ships on
# LD_LIBRARY_PATH (cudarc loads cuBLAS, cuRAND and NVRTC at run time). Sets bin and kprof.
bin=$1
if compgen -G "$bin/*.xz" >/dev/null; then
    mkdir -p /tmp/codon-bin
    for f in "$bin"/*.xz; do
        python3 -c 'import lzma, sys; open(sys.argv[2], "wb").write(lzma.open(sys.argv[1]).read())' "$f" "/tmp/codon-bin/$(basename "$f" .xz)"
    done
    cp "$bin"/*.so /tmp/codon-bin/ 2>/dev/null
    chmod +x /tmp/codon-bin/*
    bin=/tmp/codon-bin
fi
kprof=$bin/libkprof.so
libs=$(python3 -c 'import glob, os, site
print(":".join(sorted({os.path.dirname(f) for r in site.getsitepackages() for f in glob.glob(os.path.join(r, "nvidia", "**", "lib*.so*"), recursive=True)})))')
export LD_LIBRARY_PATH=$libs:${LD_LIBRARY_PATH:-}
