"""Side by side on the CPU: this crate vs Hugging Face transformers (eval, CodonTransformer
configuration, random weights).

usage: python3 benches/compare_transformers.py [--repeats 3] [--rounds 3] [--lengths 502 1002]
           [--batch 1] [--dtypes f32 bf16] [--predict 48] [--score]

- Forward passes: each configuration (length, attention, dtype) runs in fresh processes,
  `--rounds` times, alternating the two implementations within each round so both see the same
  machine load; the script prints the median over rounds of each side's median seconds, the ratio
  (ours / torch) and the peak RSS. torch's bf16 is `model.bfloat16()`.
- `--predict N`: N seeded random proteins of 80 to 600 residues. Ours is one `predict --input`
  process (model load included); torch runs upstream's per-protein loop (one forward per
  protein, argmax) and a padded batch of 8 proteins at a time, both timed after the model load.
  Identical DNA is counted against ours.
- `--score`: our whole `codon score` process (start, model load, one forward at --batch × the
  first length, full attention, the output written) beside torch's in-process forward.
Without torch + transformers installed it reports this crate's figures only.
"""
import argparse
import csv
import json
import os
import random
import subprocess
import sys
import tempfile
import time

from side_by_side import have_torch, median_run, ours, python_snippet

TORCH_SNIPPET = r"""
import json, resource, sys, time, torch
from transformers import BigBirdConfig, BigBirdForMaskedLM
n, attention, repeats, batch, dtype = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
torch.manual_seed(0)
config = BigBirdConfig(vocab_size=90, type_vocab_size=164, sep_token_id=2)
model = BigBirdForMaskedLM(config).eval().to(torch.bfloat16 if dtype == "bf16" else torch.float32)
ids = torch.tensor([[1] + [26 + (i * 7 % 64) for i in range(1, n - 1)] + [2]] * batch)
kw = dict(input_ids=ids, token_type_ids=torch.full_like(ids, 51), attention_mask=torch.ones_like(ids))
times = []
with torch.no_grad():
    for i in range(repeats + 1):
        model.bert.set_attention_type("original_full" if attention == "full" else "block_sparse")
        t = time.perf_counter(); model(**kw); dt = time.perf_counter() - t
        if i: times.append(dt)
times.sort()
print(json.dumps({"median_s": times[len(times) // 2], "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


PREDICT_SNIPPET = r"""
import csv, json, sys, time, torch
from transformers import BigBirdForMaskedLM
folder, vocab, dtype, ours_csv = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
token_of = {t: i for i, t in enumerate(vocab)}
model = BigBirdForMaskedLM.from_pretrained(folder).eval().to(torch.bfloat16 if dtype == "bf16" else torch.float32)
proteins = [row["protein_sequence"] for row in csv.DictReader(open(folder + "/proteins.csv"))]
ids_of = lambda p: [1] + [token_of[a.lower() + "_unk"] for a in p + "_"] + [2]
decode = lambda best: "".join(vocab[i][-3:] for i in best).upper()

def forward(rows):
    # Upstream's predict_dna_sequence: amino-acid tokens with the stop, argmax over the codon tokens.
    n = max(map(len, rows))
    ids = torch.tensor([r + [0] * (n - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (n - len(r)) for r in rows])
    with torch.no_grad():
        logits = model(input_ids=ids, token_type_ids=torch.full_like(ids, 51), attention_mask=mask).logits
    best = logits[:, 1:, 26:].argmax(-1) + 26
    return [decode(best[i, :len(r) - 2].tolist()) for i, r in enumerate(rows)]

forward([ids_of(proteins[0])])
start = time.perf_counter()
loop = [forward([ids_of(p)])[0] for p in proteins]
loop_s = time.perf_counter() - start
start = time.perf_counter()
padded = [dna for i in range(0, len(proteins), 8) for dna in forward([ids_of(p) for p in proteins[i:i + 8]])]
padded_s = time.perf_counter() - start
ours = [row["predicted_dna"] for row in csv.DictReader(open(ours_csv))]
print(json.dumps({"loop_s": loop_s, "padded_s": padded_s, "loop_identical": sum(a == b for a, b in zip(loop, ours)),
                  "padded_identical": sum(a == b for a, b in zip(padded, ours))}))
"""


def ours_run(n, attention, repeats, batch, dtype):
    return ours("forward_timing", ["--length", n, "--attention", attention, "--repeats", repeats,
                                   "--batch", batch, "--dtype", dtype])


def torch_run(n, attention, repeats, batch, dtype):
    return python_snippet(TORCH_SNIPPET, [n, attention, repeats, batch, dtype])


def vocabulary():
    """The token strings in id order, read from the crate's vocabulary (one source)."""
    import re
    text = open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "crates/codon-vocab/src/vocab.rs")).read()
    body = text[text.index("pub const VOCAB:"):]
    return re.findall(r'"([^"]*)"', body[body.index("= [") + 3:body.index("];")])


def compare_predict(count, dtypes):
    """Batch prediction of `count` random proteins: ours as a whole process, torch's loop and padded batches."""
    import torch
    from transformers import BigBirdConfig, BigBirdForMaskedLM
    folder = tempfile.mkdtemp(prefix="codon-predict-")
    torch.manual_seed(0)
    BigBirdForMaskedLM(BigBirdConfig(vocab_size=90, type_vocab_size=164, sep_token_id=2)).save_pretrained(
        folder, safe_serialization=True)
    rng = random.Random(0)
    with open(os.path.join(folder, "proteins.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["protein_sequence", "organism"])
        for _ in range(count):
            w.writerow(["M" + "".join(rng.choice("ACDEFGHIKLMNPQRSTVWY") for _ in range(rng.randint(79, 599))),
                        "Escherichia coli general"])
    subprocess.run(["cargo", "build", "--quiet", "--release", "--bin", "codon"], check=True)
    print(f"{'predict ' + str(count):>22} {'ours s':>8} {'loop s':>8} {'ratio':>6} {'padded s':>9} {'same DNA':>9}")
    for dtype in dtypes:
        # Outside the model's folder: predict refuses to write beside its inputs.
        out = os.path.join(tempfile.mkdtemp(prefix="codon-predictions-"), f"ours_{dtype}.csv")
        start = time.perf_counter()
        subprocess.run(["target/release/codon", "predict", "--model", folder, "--input",
                        os.path.join(folder, "proteins.csv"), "--output", out, "--dtype", dtype],
                       check=True, capture_output=True)
        ours_s = time.perf_counter() - start
        t = python_snippet(PREDICT_SNIPPET, [folder, json.dumps(vocabulary()), dtype, out])
        if t:
            print(f"{dtype:>22} {ours_s:8.2f} {t['loop_s']:8.2f} {ours_s / t['loop_s']:6.2f} {t['padded_s']:9.2f} "
                  f"{t['loop_identical']:>4}/{count}", flush=True)


def compare_score(batch, n, dtypes, rounds, repeats):
    """Our whole `codon score` process (start, model load, one forward, write) on `batch`
    sequences of n tokens, beside torch's in-process forward (median of `repeats`), per dtype."""
    import torch
    from safetensors.torch import save_file
    from transformers import BigBirdConfig, BigBirdForMaskedLM
    folder = tempfile.mkdtemp(prefix="codon-score-")
    torch.manual_seed(0)
    BigBirdForMaskedLM(BigBirdConfig(vocab_size=90, type_vocab_size=164, sep_token_id=2)).save_pretrained(
        folder, safe_serialization=True)
    ids = torch.tensor([[1] + [26 + (i * 7 % 64) for i in range(1, n - 1)] + [2]] * batch)
    inputs = os.path.join(folder, "inputs.safetensors")
    save_file({"input_ids": ids, "token_type_ids": torch.full_like(ids, 51), "attention_mask": torch.ones_like(ids),
               "labels": torch.full_like(ids, -100)}, inputs)
    subprocess.run(["cargo", "build", "--quiet", "--release", "--bin", "codon"], check=True)
    out = os.path.join(tempfile.mkdtemp(prefix="codon-scores-"), "scores.safetensors")
    print(f"{'score process':>22} {'ours s':>8} {'torch s':>8} {'ratio':>6}")
    for dtype in dtypes:
        ours_s, torch_s = [], []
        for _ in range(rounds):
            start = time.perf_counter()
            subprocess.run(["target/release/codon", "score", "--model", folder, "--inputs", inputs, "--output", out,
                            "--dtype", dtype, "--attention", "full"], check=True, capture_output=True)
            ours_s.append(time.perf_counter() - start)
            t = torch_run(n, "full", repeats, batch, dtype)
            if t:
                torch_s.append(t["median_s"])
        a = sorted(ours_s)[len(ours_s) // 2]
        b = sorted(torch_s)[len(torch_s) // 2] if torch_s else float("nan")
        print(f"{f'{batch}x{n} {dtype}':>22} {a:8.3f} {b:8.3f} {a / b:6.2f}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--lengths", type=int, nargs="*", default=[502, 1002])
    p.add_argument("--batch", type=int, default=1, help="sequences per forward pass")
    p.add_argument("--dtypes", nargs="*", default=["f32"], choices=["f32", "bf16"])
    p.add_argument("--long", action="store_true", help="also 2048 tokens, full and block-sparse")
    p.add_argument("--predict", type=int, default=0, metavar="N", help="also batch prediction of N proteins")
    p.add_argument("--score", action="store_true",
                   help="also our whole `codon score` process beside torch's forward, at --batch × the first length")
    args = p.parse_args()
    torch_available = have_torch()
    shapes = [(n, "full") for n in args.lengths] + ([(2048, "full"), (2048, "block-sparse")] if args.long else [])
    configs = [(n, attention, dtype) for n, attention in shapes for dtype in args.dtypes]
    print(f"{'config':>22} {'ours s':>8} {'torch s':>8} {'ratio':>6} {'ours RSS MB':>12} {'torch RSS MB':>13}")
    for n, attention, dtype in configs:
        a_runs, b_runs = [], []
        for _ in range(args.rounds):
            a_runs.append(ours_run(n, attention, args.repeats, args.batch, dtype))
            b = torch_run(n, attention, args.repeats, args.batch, dtype) if torch_available else None
            if b:
                b_runs.append(b)
        a = median_run(a_runs)
        b = median_run(b_runs) if b_runs else None
        ratio = f"{a['median_s'] / b['median_s']:.2f}" if b else "-"
        label = f"{attention} {args.batch}x{n} {dtype}"
        print(f"{label:>22} {a['median_s']:8.3f} {b['median_s'] if b else float('nan'):8.3f} "
              f"{ratio:>6} {a['peak_rss_mb']:12.0f} {b['peak_rss_mb'] if b else float('nan'):13.0f}", flush=True)
    if args.score and torch_available:
        compare_score(args.batch, args.lengths[0], args.dtypes, args.rounds, args.repeats)
    if args.predict and not torch_available:
        print("--predict needs torch to make the model: skipped")
    elif args.predict:
        compare_predict(args.predict, args.dtypes)

if __name__ == "__main__":
    main()
