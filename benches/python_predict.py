"""Side by side, in one process: upstream CodonTransformer's `predict_dna_sequence` against this
project's Python package on the same model and proteins.

48 proteins of 80-600 residues (random residues, seeded), each with one of four organisms,
predicted deterministically with full attention, as upstream does by default:
  1. upstream: a Python loop over CodonTransformer 1.6.7's `predict_dna_sequence` (torch);
  2. ours, the same loop over `codon_ascend.CodonPrediction.predict_dna_sequence`;
  3. ours, one call to `predict_dna_sequences` (the batched predictor).
Ours are timed --repeats times after a warm-up round, upstream's loop (many times slower)
--upstream-repeats times; the medians and their ratios to upstream's are printed with the CPU and
thread counts. The DNA of each protein is compared too: both take the
argmax, so they agree wherever upstream's choice is a codon.

Set-up (outside the repository; the venv of bindings/python/tests/upstream/make_goldens.py,
plus this package's wheel):

    cargo run --release -- init-model --output /tmp/ct-random        # CodonTransformer's size, random
    /tmp/upenv/bin/pip install target/python/wheels/x86_64/codon_ascend-*.whl   # tools/wheels.sh x86_64
    /tmp/upenv/bin/python benches/python_predict.py --model /tmp/ct-random \
        --tokenizer ../shared/fixtures/tokenizer/CodonTransformerTokenizer.json
"""

import argparse
import importlib.machinery
import importlib.util
import os
import platform
import random
import re
import statistics
import sys
import time
import types

import torch
import transformers

# Upstream imports these at module level; prediction never uses them. Where they are not
# installed, stand-ins with a module spec (torch's dynamo asks importlib for one).
for name in ["onnxruntime", "sklearn"]:
    if importlib.util.find_spec(name) is None:
        for module in [name, name + ".utils"]:
            stub = types.ModuleType(module)
            stub.__spec__ = importlib.machinery.ModuleSpec(module, None)
            sys.modules[module] = stub
        sys.modules[name].utils = sys.modules[name + ".utils"]
        sys.modules[name + ".utils"].shuffle = None

from CodonTransformer import CodonPrediction as upstream  # noqa: E402

from codon_ascend import CodonPrediction as ours  # noqa: E402

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
ORGANISMS = ["Escherichia coli general", "Homo sapiens", "Saccharomyces cerevisiae", "Bacillus subtilis"]


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a transformers folder (config.json, model.safetensors)")
    ap.add_argument("--tokenizer", required=True, help="upstream's CodonTransformerTokenizer.json")
    ap.add_argument("--proteins", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of ours, after a warm-up")
    ap.add_argument("--upstream-repeats", type=int, default=1, help="timed runs of upstream's loop")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="torch's threads (Debian's torch starts with one); ours use every core")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    rng = random.Random(args.seed)
    proteins = ["M" + "".join(rng.choice(AMINO_ACIDS) for _ in range(rng.randint(80, 600) - 1))
                for _ in range(args.proteins)]
    organisms = [ORGANISMS[i % len(ORGANISMS)] for i in range(args.proteins)]
    residues = sum(map(len, proteins))

    torch_model = transformers.BigBirdForMaskedLM.from_pretrained(args.model)
    tokenizer = upstream.load_tokenizer(args.tokenizer)
    model = ours.load_model(args.model)
    device = torch.device("cpu")

    def upstream_loop():
        return [upstream.predict_dna_sequence(p, o, device, tokenizer=tokenizer, model=torch_model).predicted_dna
                for p, o in zip(proteins, organisms)]

    def our_loop():
        return [ours.predict_dna_sequence(p, o, "cpu", model=model).predicted_dna for p, o in zip(proteins, organisms)]

    def our_batch():
        return [p.predicted_dna for p in ours.predict_dna_sequences(proteins, organisms, model=model)]

    # Ours first, --repeats times each after a warm-up round (the first allocations and page
    # faults); upstream's loop, many times slower, --upstream-repeats times. Each time is printed as
    # it comes; the first outputs are compared.
    runs = {"ours, same loop": (our_loop, args.repeats), "ours, batch call": (our_batch, args.repeats),
            "upstream loop": (upstream_loop, args.upstream_repeats)}
    times = {name: [] for name in runs}
    outputs = {}
    for name, (fn, repeats) in runs.items():
        for i in range(repeats + (name != "upstream loop")):
            seconds, out = timed(fn)
            outputs.setdefault(name, out)
            if name == "upstream loop" or i > 0:
                times[name].append(seconds)
            print(f"  {name}: {seconds:.2f} s", file=sys.stderr, flush=True)
    print(f"CPU: {cpu_name()} ({os.cpu_count()} logical CPUs); torch {torch.__version__} with "
          f"{torch.get_num_threads()} threads, transformers {transformers.__version__}; "
          f"{args.proteins} proteins, {residues} residues; medians")
    base = statistics.median(times["upstream loop"])
    for name, t in times.items():
        median = statistics.median(t)
        print(f"{name:18} {median:8.2f} s  ({', '.join(f'{x:.2f}' for x in t)})  ratio {median / base:.2f}")

    codon = re.compile("[ACGT]{3}")
    agree = total = 0
    for theirs, mine, batch in zip(outputs["upstream loop"], outputs["ours, same loop"], outputs["ours, batch call"]):
        assert mine == batch, "the batch call and the loop disagree"
        for i in range(0, len(theirs), 3):
            if codon.fullmatch(theirs[i:i + 3]):
                total += 1
                agree += theirs[i:i + 3] == mine[i:i + 3]
    print(f"codons where upstream chose a codon: {agree} of {total} equal")


if __name__ == "__main__":
    main()
