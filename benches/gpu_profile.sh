#!/usr/bin/env bash
# Where the GPU time goes: this crate's training step, forward and batch prediction, and the same
# workloads in PyTorch, each run under the CUPTI kernel profiler of tools/cuda_profile (kernels by
# total device time, copies, and the share of the run the GPU was busy).
#
#   benches/gpu_profile.sh BIN OUT [WORKLOAD...]
#
# WORKLOADs (all by default): train_ours train_torch predict_ours predict_torch forward_full_ours.
# BIN holds the binaries of benches/gpu_compare.sh and libkprof.so (tools/cuda_profile/kprof.c,
# built against CUPTI 13.0). One report per workload lands in OUT.
set -uo pipefail
bin=$(cd "$1" && pwd) out=$(mkdir -p "$2" && cd "$2" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
. benches/gpu_env.sh "$bin"
model=/tmp/codon-gpu-model
[ -d "$model" ] || python3 benches/gpu_torch.py make "$model" 2>>"$out/log.txt"

want=" ${*:3} "
# profile NAME TIMEOUT COMMAND...: the command's output to OUT/NAME.log, its kernel report to OUT/NAME.prof.
profile() {
    local name=$1 limit=$2
    shift 2
    [ "$want" = "  " ] || [[ "$want" == *" $name "* ]] || return 0
    echo "== $name" | tee -a "$out/log.txt"
    CUDA_INJECTION64_PATH=$kprof KPROF_OUT=$out/$name.prof KPROF_TIMELINE=$out/$name.timeline timeout "$limit" "$@" >"$out/$name.log" 2>&1
    echo "exit $?" >>"$out/$name.log"
    tail -2 "$out/$name.log"
    head -28 "$out/$name.prof" 2>/dev/null | cut -c1-150
}
profile train_ours 180 "$bin/codon" dev train-step-timing --device cuda:0 --precision bf16 --batch 6 --length 2048 --steps 3 --attention block-sparse
profile train_torch 180 python3 benches/gpu_torch.py train 6 2048 block-sparse
profile predict_ours 120 "$bin/codon" predict --device cuda:0 --dtype bf16 --model "$model" --input "$model/proteins.csv" --output /tmp/p.csv
profile predict_torch 120 python3 benches/gpu_torch.py predict-loop "$model"
profile forward_full_ours 120 "$bin/codon" dev forward-timing --device cuda:0 --batch 8 --length 2048 --attention full --dtype bf16 --repeats 3
