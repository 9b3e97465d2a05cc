#!/usr/bin/env bash
# This crate against PyTorch + transformers on one NVIDIA GPU, side by side in one run: the BigBird
# parity fixtures on cuda:0, forward 8 × 2048 (block-sparse and full, f32 and bf16), a bf16 training
# step of 6 × 2048, and `predict` of 48 proteins against upstream's per-protein loop.
#
#   benches/gpu_compare.sh BIN OUT [PART...]   # PART: parity forward train predict ops (default: all)
#
# BIN holds x86-64 builds with `--features cuda` (docs/cuda.md): the `codon` binary (its
# `predict` and `dev forward-timing`, `dev train-step-timing`, `dev predict-timing`, `dev op-timing`)
# and codon-model's test binary bigbird_parity. The GPU machine
# needs the NVIDIA driver, PyTorch and transformers; no Rust. Results land in OUT as JSON lines.
set -uo pipefail
bin=$(cd "$1" && pwd) out=$(mkdir -p "$2" && cd "$2" && pwd)
parts=" ${*:3} "
[ "$parts" = "  " ] && parts=" parity forward train predict ops "
want() { [[ $parts == *" $1 "* ]]; }
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
. benches/gpu_env.sh "$bin"

log() { echo "== $*" | tee -a "$out/log.txt"; }
run() { timeout "$1" "${@:2}" 2>>"$out/log.txt" | tee -a "$out/results.jsonl"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' | tee -a "$out/gpu.txt"

if want parity; then
    log parity
    CODON_TEST_DEVICE=cuda:0 timeout 180 "$bin/bigbird_parity" --test-threads=1 --nocapture >"$out/parity.txt" 2>&1
    echo "parity exit $?" | tee -a "$out/log.txt"
    tail -5 "$out/parity.txt"
fi

model=/tmp/codon-gpu-model
python3 benches/gpu_torch.py make "$model" 2>>"$out/log.txt"

want forward && for dtype in f32 bf16; do
    for attention in block-sparse full; do
        log "forward 8x2048 $attention $dtype"
        run 120 "$bin/codon" dev forward-timing --device cuda:0 --batch 8 --length 2048 --attention "$attention" --dtype "$dtype" --repeats 5
        run 120 python3 benches/gpu_torch.py forward 8 2048 "$attention" "$dtype"
    done
done

if want train; then
    log "train step 6x2048 bf16"
    run 240 "$bin/codon" dev train-step-timing --device cuda:0 --precision bf16 --batch 6 --length 2048 --steps 5 --attention block-sparse
    run 240 python3 benches/gpu_torch.py train 6 2048 block-sparse
fi

if want predict; then
    # Our batch prediction, timed as a whole process; its own rate line gives the batch's time.
    # `predict NAME FLAGS...` writes predictions_NAME.csv.
    predict() {
        local name=$1 start status ms
        log "predict 48 proteins, $name"
        start=$(date +%s%N)
        timeout 180 "$bin/codon" predict --device cuda:0 "${@:2}" --model "$model" --input "$model/proteins.csv" \
            --output "$out/predictions_$name.csv" 2>>"$out/predict.txt"
        status=$? ms=$((($(date +%s%N) - start) / 1000000))
        echo "{\"side\": \"ours\", \"what\": \"predict_process_$name\", \"exit\": $status, \"ms\": $ms}" | tee -a "$out/results.jsonl"
    }
    predict f32 --dtype f32
    run 180 python3 benches/gpu_torch.py predict-loop "$model" "$out/predictions_f32.csv"
    predict bf16 --dtype bf16
    predict tf32 --dtype f32 --tf32
    run 180 python3 benches/gpu_torch.py predict-loop "$model" "$out/predictions_tf32.csv" --tf32
    # The batch with the model loaded once: its first call, and the median of three after it (the
    # torch loop above is timed after a warm-up protein).
    for flags in "--dtype f32" "--dtype bf16" "--dtype f32 --tf32"; do
        log "predict_timing $flags"
        # shellcheck disable=SC2086
        run 180 "$bin/codon" dev predict-timing --device cuda:0 $flags --model "$model" --input "$model/proteins.csv" --repeats 3
    done
    grep "proteins/s" "$out/predict.txt"
    # How many codons bf16 and TF32 keep of f32's (which the torch loop checks against its argmax).
    python3 - "$out" <<'PY' | tee -a "$out/results.jsonl"
import csv, json, sys
read = lambda name: [row["predicted_dna"] for row in csv.DictReader(open(f"{sys.argv[1]}/predictions_{name}.csv"))]
codons = lambda s: [s[i:i + 3] for i in range(0, len(s), 3)]
f32 = read("f32")
for name in ["bf16", "tf32"]:
    same = sum(x == y for p, q in zip(f32, read(name)) for x, y in zip(codons(p), codons(q)))
    print(json.dumps({"what": f"{name}_vs_f32_codons", "identical": same, "of": sum(len(p) // 3 for p in f32)}))
PY
fi

if want ops; then
    log "op timing"
    for dtype in f32 bf16; do run 120 "$bin/codon" dev op-timing --device cuda:0 --dtype "$dtype"; done
fi
