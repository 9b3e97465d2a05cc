"""Side-by-side train-step timing: this crate's Trainer vs transformers + torch AdamW (CPU,
CodonTransformer configuration, random weights, one synthetic batch of 2 x 1024, training
mode with dropout, block-sparse attention, lr 5e-5, weight decay 0.01).

usage: python3 benches/compare_train_step.py [--steps 3] [--rounds 3] [--precision f32]

Each round runs both sides in fresh processes, one after the other. A side reports the median
of its steps 2..N (step 1 pays for fresh optimizer state and first-touch page faults); the
script prints the median round, the ratio (ours / torch) and peak RSS.
"""
import argparse

from side_by_side import have_torch, median_run, ours, python_snippet

TORCH_SNIPPET = r"""
import json, resource, sys, time, torch
from transformers import BigBirdConfig, BigBirdForMaskedLM
steps, b, n, precision = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.manual_seed(0)
config = BigBirdConfig(vocab_size=90, type_vocab_size=164, sep_token_id=2, attention_type="block_sparse")
model = BigBirdForMaskedLM(config).train()
opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
# The collator's TOKEN2MASK: a codon token (26 + its A<C<G<T index) becomes its amino acid's x_unk.
AMINO = "KNKNTTTTRSRSIIMIQHQHPPPPRRRRLLLLEDEDAAAAGGGGVVVV*Y*YSSSS*CWCLFLF"
UNK = {a: 5 + k for k, a in enumerate("ACDEFGHIKLMNPQRSTVWY")}
UNK["*"] = 25
ids, labels = [], []
for i in range(b * n):
    p = i % n
    tok = 1 if p == 0 else 2 if p == n - 1 else 26 + (p * 7 + i // n) % 64
    masked = i % 7 == 3 and tok >= 26
    ids.append(UNK[AMINO[tok - 26]] if masked else tok)
    labels.append(tok if masked else -100)
ids = torch.tensor(ids).view(b, n)
labels = torch.tensor(labels).view(b, n)
kw = dict(input_ids=ids, token_type_ids=torch.full_like(ids, 51), attention_mask=torch.ones_like(ids), labels=labels)
times, loss = [], float("nan")
for _ in range(steps):
    t = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        out = model(**kw)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    times.append(time.perf_counter() - t)
    loss = out.loss.item()
later = sorted(times[1:])
print(json.dumps({"first_s": times[0], "median_s": later[len(later) // 2], "loss": loss,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def ours_run(steps, precision):
    return ours("train_step_timing", ["--steps", steps, "--precision", precision])


def torch_run(steps, precision):
    return python_snippet(TORCH_SNIPPET, [steps, 2, 1024, precision])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--precision", default="f32")
    args = p.parse_args()
    torch_available = have_torch()
    a_runs, b_runs = [], []
    for r in range(args.rounds):
        a_runs.append(ours_run(args.steps, args.precision))
        b = torch_run(args.steps, args.precision) if torch_available else None
        if b:
            b_runs.append(b)
        print(f"round {r + 1}: ours {a_runs[-1]['median_s']:.2f} s, torch {b['median_s'] if b else float('nan'):.2f} s",
              flush=True)
    a = median_run(a_runs)
    b = median_run(b_runs) if b_runs else None
    ratio = f"{a['median_s'] / b['median_s']:.2f}" if b else "-"
    print(f"{'precision':>9} {'ours s':>8} {'torch s':>8} {'ratio':>6} {'ours RSS MB':>12} {'torch RSS MB':>13}")
    print(f"{args.precision:>9} {a['median_s']:8.2f} {b['median_s'] if b else float('nan'):8.2f} {ratio:>6} "
          f"{a['peak_rss_mb']:12.0f} {b['peak_rss_mb'] if b else float('nan'):13.0f}")


if __name__ == "__main__":
    main()
