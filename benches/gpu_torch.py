"""PyTorch + transformers on an NVIDIA GPU: the side of `benches/gpu_compare.sh` that this crate is
compared with. One JSON line per measurement on stdout.

usage:
  python3 benches/gpu_torch.py make DIR            # random CodonTransformer-size model + 48 proteins
  python3 benches/gpu_torch.py forward B N ATTENTION DTYPE
  python3 benches/gpu_torch.py train B N ATTENTION  # one AdamW step, bf16 autocast (Lightning's bf16-mixed)
  python3 benches/gpu_torch.py predict-loop DIR [OURS.csv] [--tf32]  # upstream's per-protein loop,
                                                           # argmax; counts proteins whose DNA equals
                                                           # ours; --tf32 allows TF32 in f32 GEMMs

The model is BigBirdForMaskedLM with CodonTransformer's configuration (vocabulary 90, 164
organisms) and seed-0 random weights; the proteins are 48 seeded random sequences of 100 to 600
residues for Escherichia coli general (organism id 51).
"""
import csv
import json
import os
import random
import re
import sys
import time

import torch
from transformers import BigBirdConfig, BigBirdForMaskedLM

ORGANISM, ORGANISM_ID = "Escherichia coli general", 51
AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def config():
    return BigBirdConfig(vocab_size=90, type_vocab_size=164, sep_token_id=2)


def vocabulary():
    """The token strings in id order, read from the crate's vocabulary (one source)."""
    text = open(os.path.join(REPO, "crates/codon-vocab/src/vocab.rs")).read()
    body = text[text.index("pub const VOCAB:"):]
    body = body[body.index("= [") + 3:body.index("];")]
    return re.findall(r'"([^"]*)"', body)


def timed(fn, repeats):
    """Median seconds of `repeats` calls after one warm-up, each ended by a device synchronisation."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def batch(b, n):
    ids = torch.tensor([[1] + [26 + (p * 7 % 64) for p in range(1, n - 1)] + [2]] * b, device="cuda")
    return dict(input_ids=ids, token_type_ids=torch.full_like(ids, ORGANISM_ID), attention_mask=torch.ones_like(ids))


def make(folder):
    torch.manual_seed(0)
    BigBirdForMaskedLM(config()).save_pretrained(folder, safe_serialization=True)
    rng = random.Random(0)
    with open(os.path.join(folder, "proteins.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["protein_sequence", "organism"])
        for _ in range(48):
            w.writerow(["M" + "".join(rng.choice(AMINO_ACIDS) for _ in range(rng.randint(99, 599))), ORGANISM])


DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def forward(b, n, attention, dtype):
    torch.manual_seed(0)
    model = BigBirdForMaskedLM(config()).cuda().eval().to(DTYPES[dtype])
    model.bert.set_attention_type("original_full" if attention == "full" else "block_sparse")
    kw = batch(b, n)
    with torch.no_grad():
        median = timed(lambda: model(**kw), 5)
    print(json.dumps({"side": "torch", "what": "forward", "batch": b, "length": n, "attention": attention,
                      "dtype": dtype, "median_s": median, "peak_mib": torch.cuda.max_memory_allocated() / 2**20}))


def train(b, n, attention):
    torch.manual_seed(0)
    model = BigBirdForMaskedLM(config()).cuda().train()
    model.bert.set_attention_type("original_full" if attention == "full" else "block_sparse")
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
    kw = batch(b, n)
    labels = torch.where(torch.arange(n, device="cuda") % 7 == 3, kw["input_ids"], torch.full_like(kw["input_ids"], -100))

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**kw, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    median = timed(step, 4)
    print(json.dumps({"side": "torch", "what": "train_step", "batch": b, "length": n, "attention": attention,
                      "precision": "bf16-mixed", "median_s": median, "peak_mib": torch.cuda.max_memory_allocated() / 2**20}))


def predict_loop(folder, ours=None, tf32=False):
    # PyTorch's own switch for TF32 in f32 matrix products (off by default, as ours).
    torch.backends.cuda.matmul.allow_tf32 = tf32
    vocab = vocabulary()
    token_of = {t: i for i, t in enumerate(vocab)}
    model = BigBirdForMaskedLM.from_pretrained(folder).cuda().eval()
    with open(os.path.join(folder, "proteins.csv")) as f:
        proteins = [row["protein_sequence"] for row in csv.DictReader(f)]

    def one(protein):
        # Upstream's predict_dna_sequence: amino-acid tokens with the stop, one forward, argmax, decode.
        ids = [1] + [token_of[a.lower() + "_unk"] for a in protein + "_"] + [2]
        ids = torch.tensor([ids], device="cuda")
        with torch.no_grad():
            logits = model(input_ids=ids, token_type_ids=torch.full_like(ids, ORGANISM_ID),
                           attention_mask=torch.ones_like(ids)).logits
        # The most likely codon token (ids 26-89), as this crate's argmax without --match-protein.
        best = (logits[0, 1:-1, 26:].argmax(-1) + 26).cpu().tolist()
        return "".join(vocab[i][-3:] for i in best).upper()

    one(proteins[0])
    torch.cuda.synchronize()
    start = time.perf_counter()
    dna = [one(p) for p in proteins]
    seconds = time.perf_counter() - start
    result = {"side": "torch", "what": "predict_loop", "tf32": tf32, "proteins": len(proteins), "seconds": seconds,
              "proteins_per_s": len(proteins) / seconds}
    if ours:
        with open(ours) as f:
            theirs = [row["predicted_dna"] for row in csv.DictReader(f)]
        result["identical_dna"] = sum(a == b for a, b in zip(dna, theirs))
        codons = lambda s: [s[i:i + 3] for i in range(0, len(s), 3)]
        result["identical_codons"] = sum(x == y for a, b in zip(dna, theirs) for x, y in zip(codons(a), codons(b)))
        result["codons"] = sum(len(a) // 3 for a in dna)
    print(json.dumps(result))


if __name__ == "__main__":
    what, args = sys.argv[1], sys.argv[2:]
    if what == "make":
        make(args[0])
    elif what == "forward":
        forward(int(args[0]), int(args[1]), args[2], args[3])
    elif what == "train":
        train(int(args[0]), int(args[1]), args[2])
    elif what == "predict-loop":
        predict_loop(*[a for a in args if a != "--tf32"], tf32="--tf32" in args)
    else:
        sys.exit(f"unknown measurement {what!r}")
