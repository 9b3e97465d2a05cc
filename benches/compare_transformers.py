"""Side-by-side forward timing: this crate vs Hugging Face transformers (CPU, f32, eval,
CodonTransformer configuration, random weights, batch 1).

usage: python3 benches/compare_transformers.py [--repeats 3] [--rounds 3] [--lengths 502 1002]

Each configuration runs in fresh processes, `--rounds` times, alternating the two
implementations within each round so both see the same machine load; the script prints
the median over rounds of each side's median seconds, the ratio (ours / torch) and the
peak RSS.
Without torch + transformers installed it reports this crate's figures only.
"""
import argparse

from side_by_side import have_torch, median_run, ours, python_snippet

TORCH_SNIPPET = r"""
import json, resource, sys, time, torch
from transformers import BigBirdConfig, BigBirdForMaskedLM
n, attention, repeats = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
torch.manual_seed(0)
config = BigBirdConfig(vocab_size=90, type_vocab_size=164, sep_token_id=2)
model = BigBirdForMaskedLM(config).eval()
ids = torch.tensor([[1] + [26 + (i * 7 % 64) for i in range(1, n - 1)] + [2]])
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


def ours_run(n, attention, repeats):
    return ours("forward_timing", ["--length", n, "--attention", attention, "--repeats", repeats])


def torch_run(n, attention, repeats):
    return python_snippet(TORCH_SNIPPET, [n, attention, repeats])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--lengths", type=int, nargs="*", default=[502, 1002])
    args = p.parse_args()
    torch_available = have_torch()
    configs = [(n, "full") for n in args.lengths] + [(2048, "full"), (2048, "block-sparse")]
    print(f"{'config':>22} {'ours s':>8} {'torch s':>8} {'ratio':>6} {'ours RSS MB':>12} {'torch RSS MB':>13}")
    for n, attention in configs:
        a_runs, b_runs = [], []
        for _ in range(args.rounds):
            a_runs.append(ours_run(n, attention, args.repeats))
            b = torch_run(n, attention, args.repeats) if torch_available else None
            if b:
                b_runs.append(b)
        a = median_run(a_runs)
        b = median_run(b_runs) if b_runs else None
        ratio = f"{a['median_s'] / b['median_s']:.2f}" if b else "-"
        print(f"{attention + ' ' + str(n):>22} {a['median_s']:8.3f} {b['median_s'] if b else float('nan'):8.3f} "
              f"{ratio:>6} {a['peak_rss_mb']:12.0f} {b['peak_rss_mb'] if b else float('nan'):13.0f}", flush=True)

if __name__ == "__main__":
    main()
