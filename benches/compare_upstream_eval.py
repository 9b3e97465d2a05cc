"""Side-by-side timing: upstream's evaluation metrics in Python against `evaluate`.

Generates N sequences of C codons (ATG, random sense codons with an E. coli-like skewed bias,
a stop) and a 500-ORF reference set, writes them as `evaluate`'s CSV and training JSONL, then in
one run:
  1. times `target/release/codon evaluate` on them (median of --repeats runs, whole command:
     reading, every metric, writing the CSV);
  2. times upstream's functions on the same data, once: CodonData.get_codon_frequencies and
     CodonEvaluation.get_CSI_weights for the reference, then per sequence get_CSI_value,
     get_GC_content, get_cfd and get_min_max_percentage (window 18). Sequence complexity is left
     out of the Python side: upstream's recursion fails above ~1,000 nt (and is O(n^3)), while
     the Rust run computes it for every sequence.
  3. checks the two agree (largest relative difference of CSI, GC, CFD and the %MinMax mean).

Needs the scratch environment of tools/make_eval_fixtures.py (CodonTransformer 1.6.7 with
--no-deps, CAI-PyPI 2.0.1, ...) and a release build of `codon`:

    cargo build --release --bin codon
    /tmp/evalenv/bin/python benches/compare_upstream_eval.py --sequences 10000 --codons 1000
"""

import argparse
import csv
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import make_eval_fixtures as fx  # noqa: E402  (installs the stubs and imports upstream)

ORGANISM = "Escherichia coli general"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sequences", type=int, default=10000)
    ap.add_argument("--codons", type=int, default=1000)
    ap.add_argument("--references", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--codon", default="target/release/codon")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    bias = fx.codon_bias(rng)
    references = [fx.random_orf(rng, rng.randrange(100, 400), bias) for _ in range(args.references)]
    sequences = [fx.random_orf(rng, args.codons, bias if i % 2 else None) for i in range(args.sequences)]

    work = tempfile.mkdtemp(prefix="bench-eval-")
    train, seqs, out = (os.path.join(work, f) for f in ("train.jsonl", "seqs.csv", "metrics.csv"))
    organism_id = fx.ORGANISM2ID[ORGANISM]
    with open(train, "w") as f:
        for i, dna in enumerate(references):
            protein = fx.CodonData.get_amino_acid_sequence(dna, return_correct_seq=False)
            tokens = " ".join(f"{a}_{dna[3 * k:3 * k + 3]}" for k, a in enumerate(protein))
            f.write(json.dumps({"idx": i, "codons": tokens, "organism": organism_id}) + "\n")
    with open(seqs, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["dna", "organism"])
        for dna in sequences:
            w.writerow([dna, ORGANISM])

    rust_times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        subprocess.run([args.codon, "evaluate", "--input", seqs, "--reference", train, "--output", out],
                       check=True, stdout=subprocess.DEVNULL)
        rust_times.append(time.perf_counter() - t0)

    E, D = fx.CodonEvaluation, fx.CodonData
    t0 = time.perf_counter()
    proteins = [D.get_amino_acid_sequence(dna, return_correct_seq=False) for dna in references]
    freqs = D.get_codon_frequencies(references, proteins)
    weights = E.get_CSI_weights(references)
    python = []
    for dna in sequences:
        profile = E.get_min_max_percentage(dna, freqs, window_size=18)
        values = [v for v in profile if v is not None]
        python.append((E.get_CSI_value(dna, weights), E.get_GC_content(dna), E.get_cfd(dna, freqs, threshold=0.3),
                       sum(values) / len(values)))
    python_time = time.perf_counter() - t0

    worst = 0.0
    with open(out) as f:
        for row, theirs in zip(csv.DictReader(f), python):
            ours = (float(row["csi"]), float(row["gc_content"]), float(row["cfd"]), float(row["minmax_mean"]))
            for a, b in zip(ours, theirs):
                worst = max(worst, abs(a - b) / max(abs(b), 1e-300))
    rust = statistics.median(rust_times)
    print(f"data: {args.sequences} sequences x {args.codons} codons, {args.references} reference ORFs ({work})")
    print(f"upstream Python (CSI, GC, CFD, %MinMax; one run): {python_time:.2f} s")
    print(f"evaluate (same metrics + complexity, whole command; median of {args.repeats}: "
          f"{', '.join(f'{t:.3f}' for t in rust_times)} s): {rust:.3f} s")
    print(f"ratio: {python_time / rust:.0f}x; largest relative difference over all values: {worst:.3g}")


if __name__ == "__main__":
    main()
