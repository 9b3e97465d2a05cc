#!/usr/bin/env bash
# This crate against PyTorch + transformers on one NVIDIA GPU, side by side in one run: the BigBird
# parity fixtures on cuda:0, forward 8 × 2048 (block-sparse and full, f32 and bf16), a bf16 training
# step of 6 × 2048, and `predict` of 48 proteins against upstream's per-protein loop.
#
#   benches/gpu_compare.sh BIN OUT
#
# BIN holds x86-64 builds with `--features cuda` (docs/cuda.md): the `codon` binary (its
# `predict` and `dev forward-timing`, `dev train-step-timing`, `dev predict-timing`, `dev op-timing`)
# and codon-model's test binary bigbird_parity. The GPU machine
# needs the NVIDIA driver, PyTorch and transformers; no Rust. Results land in OUT as JSON lines.
set -uo pipefail
bin=$(cd "$1" && pwd) out=$(mkdir -p "$2" && cd "$2" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
. benches/gpu_env.sh "$bin"

log() { echo "== $*" | tee -a "$out/log.txt"; }
run() { timeout "$1" "${@:2}" 2>>"$out/log.txt" | tee -a "$out/results.jsonl"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' | tee -a "$out/gpu.txt"

log parity
CODON_TEST_DEVICE=cuda:0 timeout 180 "$bin/bigbird_parity" --test-threads=1 --nocapture >"$out/parity.txt" 2>&1
echo "parity exit $?" | tee -a "$out/log.txt"
tail -5 "$out/parity.txt"

model=/tmp/codon-gpu-model
python3 benches/gpu_torch.py make "$model" 2>>"$out/log.txt"

for dtype in f32 bf16; do
    for attention in block-sparse full; do
        log "forward 8x2048 $attention $dtype"
        run 120 "$bin/codon" dev forward-timing --device cuda:0 --batch 8 --length 2048 --attention "$attention" --dtype "$dtype" --repeats 5
        run 120 python3 benches/gpu_torch.py forward 8 2048 "$attention" "$dtype"
    done
done

log "train step 6x2048 bf16"
run 240 "$bin/codon" dev train-step-timing --device cuda:0 --precision bf16 --batch 6 --length 2048 --steps 5 --attention block-sparse
run 240 python3 benches/gpu_torch.py train 6 2048 block-sparse

# Our batch prediction, timed as a whole process; its own rate line gives the batch's time.
predict() {
    local dtype=$1 file=$2 start status ms
    log "predict 48 proteins, $dtype"
    start=$(date +%s%N)
    timeout 180 "$bin/codon" predict --device cuda:0 --dtype "$dtype" --model "$model" --input "$model/proteins.csv" \
        --output "$out/$file" 2>>"$out/predict.txt"
    status=$? ms=$((($(date +%s%N) - start) / 1000000))
    echo "{\"side\": \"ours\", \"what\": \"predict_process_$dtype\", \"exit\": $status, \"ms\": $ms}" | tee -a "$out/results.jsonl"
}
predict f32 predictions.csv
run 180 python3 benches/gpu_torch.py predict-loop "$model" "$out/predictions.csv"
predict bf16 predictions_bf16.csv
# The batch with the model loaded once: its first call, and the median of three after it (the
# torch loop above is timed after a warm-up protein).
if [ -x "$bin/codon" ]; then
    for dtype in f32 bf16; do
        log "predict_timing $dtype"
        run 180 "$bin/codon" dev predict-timing --device cuda:0 --dtype "$dtype" --model "$model" --input "$model/proteins.csv" --repeats 3
    done
fi
grep "proteins/s" "$out/predict.txt"
python3 - "$out/predictions.csv" "$out/predictions_bf16.csv" <<'PY' | tee -a "$out/results.jsonl"
import csv, json, sys
a, b = ([row["predicted_dna"] for row in csv.DictReader(open(f))] for f in sys.argv[1:3])
codons = lambda s: [s[i:i + 3] for i in range(0, len(s), 3)]
same = sum(x == y for p, q in zip(a, b) for x, y in zip(codons(p), codons(q)))
print(json.dumps({"what": "bf16_vs_f32_codons", "identical": same, "of": sum(len(p) // 3 for p in a)}))
PY

if [ -x "$bin/codon" ]; then
    log "op timing"
    for dtype in f32 bf16; do run 120 "$bin/codon" dev op-timing --device cuda:0 --dtype "$dtype"; done
fi
