"""Golden values for the evaluation metrics, computed by upstream's own functions.

Writes tests/fixtures/eval/upstream_metrics.json from CodonTransformer 1.6.7
(CodonEvaluation, CodonData, CodonPrediction) and CAI-PyPI 2.0.1 (the package upstream
uses for CSI/CAI). Nothing here needs torch, transformers, lightning, onnxruntime or
scikit-learn: those imports are replaced by stubs before CodonTransformer is imported, and
only pure-Python metric functions are called.

Set up a scratch environment OUTSIDE the repository (Python 3.11; the golden values were
made with CPython 3.11.7 on x86_64 Linux) and run from the repository root:

    python3 -m venv /tmp/evalenv
    /tmp/evalenv/bin/pip install --no-deps CodonTransformer==1.6.7 CAI-PyPI==2.0.1
    /tmp/evalenv/bin/pip install numpy==1.26.4 scipy==1.17.1 pandas==2.3.3 \
        biopython==1.88 tqdm==4.70.1 python_codon_tables==0.1.18 requests==2.34.2
    /tmp/evalenv/bin/python tools/make_eval_fixtures.py

(`--no-deps` keeps torch, transformers, pytorch_lightning, onnxruntime, scikit-learn and
ipywidgets out; CodonData imports python_codon_tables and CodonUtils imports requests at
module level, so those two small packages are installed for real. An optional first
argument overrides the output path.)

The Python version matters for one metric: %MinMax averages each amino acid's frequencies
with the builtin sum(), which is plain left-to-right addition up to Python 3.11 and
Neumaier-compensated summation from Python 3.12 on, so the last bits of %MinMax values can
differ under 3.12+. CSI = scipy.stats.gmean = exp(numpy pairwise sum of ln(w) / n).

Output layout (all floats are Python repr, i.e. shortest round-trip decimal; a NaN or
infinite float is written as the string "NaN" / "Infinity" / "-Infinity"; a Python None is
null; a call that raised is recorded as {"error": {"type": ..., "message": str(exc)}}):

  versions, python, notes
  organisms[name] = {id, codon_table, references: [{dna, protein}],
                     codon_frequencies, codon_frequencies_via_organism_arg,
                     csi_weights, csi_weights_order, tests: [...], baseline}
  edge_cases = hand-made inputs for each function, with result or error
"""

import importlib.metadata
import json
import math
import os
import platform
import random
import sys
import warnings
from unittest import mock

# Real scientific packages first: scipy's array-API helpers look at sys.modules["torch"],
# so torch must not be a bare stub when scipy inspects arrays.
import numpy as np
import pandas as pd
import scipy.stats  # noqa: F401  (imported before the torch stub on purpose)
import Bio
import Bio.Data.CodonTable as CodonTable
import CAI

# `import CAI.CAI as m` would give the function: CAI/__init__.py rebinds the name CAI.CAI.
CAI_module = sys.modules["CAI.CAI"]


def _install_stubs():
    """Stand-ins for the heavy packages CodonTransformer imports at module level."""
    torch = mock.MagicMock(name="torch")

    class Tensor:  # scipy calls issubclass(x, torch.Tensor): must be a real class
        pass

    class IterableDataset:  # CodonUtils subclasses torch.utils.data.IterableDataset
        pass

    torch.Tensor = Tensor
    torch.utils.data.IterableDataset = IterableDataset
    sys.modules["torch"] = torch
    sys.modules["torch.utils"] = torch.utils
    sys.modules["torch.utils.data"] = torch.utils.data
    for name in ("transformers", "onnxruntime", "sklearn", "sklearn.utils"):
        sys.modules[name] = mock.MagicMock(name=name)
    # Make sure nothing real slipped through.
    assert isinstance(sys.modules["torch"], mock.MagicMock)


_install_stubs()

from CodonTransformer import CodonData, CodonEvaluation, CodonPrediction  # noqa: E402
from CodonTransformer.CodonUtils import ORGANISM2ID  # noqa: E402

ORGANISMS = ["Escherichia coli general", "Homo sapiens", "Bacillus subtilis"]
REF_SEED = 20240917  # random.Random seed for the synthetic references and test sequences
NUMPY_SEED = 42  # np.random.seed used before the (non-reproducible) BFC/URC property checks
WINDOW = 18
CFD_THRESHOLD = 0.3

BASELINE_PROTEINS = {
    "Escherichia coli general": "MKTAYIAKQRQISFVKSHFSRQ_",
    "Homo sapiens": "MALWMRLLPLLALLALWGPDPAAAC_",
    "Bacillus subtilis": "MSKGEELFTGVVPILVELDGDVNGHKF_",
}

# ---------------------------------------------------------------------------------------
# JSON helpers


def jfloat(x):
    if isinstance(x, float):
        if math.isnan(x):
            return "NaN"
        if math.isinf(x):
            return "Infinity" if x > 0 else "-Infinity"
    return x


def jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return jsonable(obj.item())
    if isinstance(obj, float):
        return jfloat(obj)
    return obj


def call(fn, *args, **kwargs):
    """Run an upstream function; return its value or a recorded error."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = fn(*args, **kwargs)
    except BaseException as exc:  # RecursionError, ZeroDivisionError, KeyError, ...
        return {"error": {"type": type(exc).__name__, "message": str(exc)}}
    if caught:
        return {"value": jsonable(value), "warnings": [str(w.message) for w in caught]}
    return jsonable(value)


def value_of(result):
    if isinstance(result, dict) and "error" in result:
        return None
    if isinstance(result, dict) and "value" in result:
        return result["value"]
    return result


# ---------------------------------------------------------------------------------------
# Synthetic sequences (standard genetic code; tables 1 and 11 translate identically)

FORWARD = CodonTable.unambiguous_dna_by_id[11].forward_table  # 61 sense codons
STOPS = sorted(CodonTable.unambiguous_dna_by_id[11].stop_codons)  # TAA TAG TGA
FAMILIES = {}
for _codon, _aa in sorted(FORWARD.items()):
    FAMILIES.setdefault(_aa, []).append(_codon)
AMINO_ACIDS = sorted(FAMILIES)  # 20 one-letter codes


def codon_bias(rng):
    """Per amino acid: skewed codon weights, with some codons of size>=4 families at 0."""
    bias = {}
    for aa in AMINO_ACIDS + ["_"]:
        codons = FAMILIES[aa] if aa != "_" else STOPS
        weights = [rng.random() ** 3 + 0.02 for _ in codons]
        if len(codons) >= 4:
            weights[rng.randrange(len(codons))] = 0.0  # never used: exercises pseudocounts
        bias[aa] = (codons, weights)
    return bias


def random_orf(rng, n_codons, bias=None, internal_stop_at=None):
    """ATG + (n_codons - 2) random sense codons + a stop codon."""
    codons = ["ATG"]
    for i in range(n_codons - 2):
        if internal_stop_at is not None and i + 1 == internal_stop_at:
            codons.append("TAG")
            continue
        aa = rng.choice(AMINO_ACIDS)
        if bias is None:
            codons.append(rng.choice(FAMILIES[aa]))
        else:
            fam, w = bias[aa]
            codons.append(rng.choices(fam, weights=w)[0])
    if bias is None:
        codons.append(rng.choice(STOPS))
    else:
        fam, w = bias["_"]
        codons.append(rng.choices(fam, weights=w)[0])
    return "".join(codons)


# ---------------------------------------------------------------------------------------


def metrics_for(dna, weights, freqs, organism):
    """Every metric upstream offers, on one test sequence, plus its similarity pair."""
    out = {"dna": dna, "length": len(dna)}
    out["csi"] = call(CodonEvaluation.get_CSI_value, dna, weights)
    out["gc_content"] = call(CodonEvaluation.get_GC_content, dna, lower=False)
    out["cfd"] = call(CodonEvaluation.get_cfd, dna, freqs, threshold=CFD_THRESHOLD)
    profile = call(CodonEvaluation.get_min_max_percentage, dna, freqs, window_size=WINDOW)
    out["minmax"] = profile
    values = value_of(profile)
    if values is None:
        out["minmax_mean_ignoring_none"] = None
    else:
        present = [v for v in values if v is not None]
        total = 0.0
        for v in present:  # left-to-right, like Python 3.11's sum()
            total += v
        out["minmax_n_none"] = len(values) - len(present)
        out["minmax_mean_ignoring_none"] = jfloat(total / len(present)) if present else None
        out["minmax_mean_np_mean_of_raw_list"] = call(np.mean, values)
    out["complexity"] = call(CodonEvaluation.get_sequence_complexity, dna)

    # Similarity pair: the sequence vs the high-frequency-choice DNA of its own protein.
    table = CodonData.get_codon_table(organism)
    protein = CodonData.get_amino_acid_sequence(dna, codon_table=table)
    predicted = CodonPrediction.get_high_frequency_choice_sequence(protein, freqs)
    out["similarity"] = {
        "original": dna,
        "predicted": predicted,
        "predicted_is": "get_high_frequency_choice_sequence(translation of original)",
        "window_1": call(CodonEvaluation.get_sequence_similarity, dna, predicted,
                         truncate=True, window_length=1),
        "window_3": call(CodonEvaluation.get_sequence_similarity, dna, predicted,
                         truncate=True, window_length=3),
    }
    return out


def numpy_pairwise_sum(a):
    """numpy's float64 add.reduce for a contiguous 1-D array (PW_BLOCKSIZE 128)."""
    n = len(a)
    if n < 8:
        res = 0.0
        for x in a:
            res += x
        return res
    if n <= 128:
        r = list(a[:8])
        i = 8
        while i < n - (n % 8):
            for j in range(8):
                r[j] += a[i + j]
            i += 8
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        while i < n:
            res += a[i]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return numpy_pairwise_sum(a[:n2]) + numpy_pairwise_sum(a[n2:])


def csi_by_formula(dna, weights):
    dna = dna.upper()
    ws = []
    for i in range(0, len(dna), 3):
        c = dna[i:i + 3]
        if c in ("ATG", "TGG"):
            continue
        if c in weights:
            ws.append(weights[c])
        elif c not in STOPS:
            raise KeyError(c)
    if not ws:
        return float("nan")
    return math.exp(0.0 + numpy_pairwise_sum([math.log(w) for w in ws]) / len(ws))


def organism_section(rng, organism, other_bias):
    table = CodonData.get_codon_table(organism)
    bias = codon_bias(rng)
    lengths = [rng.randint(30, 120) for _ in range(7)]
    refs = [random_orf(rng, n, bias) for n in lengths]
    proteins = [CodonData.get_amino_acid_sequence(d, codon_table=table) for d in refs]
    seen = set("".join(proteins))
    assert set(AMINO_ACIDS) <= seen, f"{organism}: references miss {set(AMINO_ACIDS) - seen}"

    df = pd.DataFrame({"dna": refs, "protein": proteins, "organism": organism})
    freqs = CodonData.get_organism_to_codon_frequencies(df, [organism])[organism]
    freqs_org = CodonData.get_codon_frequencies(refs, organism=organism)
    assert freqs == freqs_org
    weights = CodonEvaluation.get_organism_to_CSI_weights(df, [organism])[organism]
    assert weights == CodonEvaluation.get_CSI_weights(refs)

    tests = []
    specs = [
        ("same codon bias as the references", random_orf(rng, 60, bias)),
        ("uniform choice among synonymous codons", random_orf(rng, 45, None)),
        ("another organism's codon bias", random_orf(rng, 90, other_bias)),
    ]
    if organism == "Escherichia coli general":
        specs.append(("lower-case copy of the first test sequence", specs[0][1].lower()))
    elif organism == "Homo sapiens":
        specs.append(("12 codons (< window 18) with an internal TAG stop",
                      random_orf(rng, 12, bias, internal_stop_at=5)))
    else:
        specs.append(("340 codons = 1020 nt (complexity recursion limit)",
                      random_orf(rng, 340, bias)))
    for kind, dna in specs:
        entry = {"kind": kind}
        entry.update(metrics_for(dna, weights, freqs, organism))
        csi = value_of(entry["csi"])
        if csi is not None and csi != "NaN":
            formula = csi_by_formula(dna, weights)
            entry["csi_equals_exp_pairwise_mean_ln"] = formula == csi
            assert abs(formula - csi) <= 1e-15 * max(1.0, abs(csi)), (formula, csi)
        tests.append(entry)

    # Baselines.
    protein = BASELINE_PROTEINS[organism]
    hfc = CodonPrediction.get_high_frequency_choice_sequence(protein, freqs)
    hfc_opt = CodonPrediction.get_high_frequency_choice_sequence_optimized(protein, freqs)
    assert hfc == hfc_opt
    np.random.seed(NUMPY_SEED)
    bfc = CodonPrediction.get_background_frequency_choice_sequence(protein, freqs)
    bfc_opt = CodonPrediction.get_background_frequency_choice_sequence_optimized(protein, freqs)
    urc = CodonPrediction.get_uniform_random_choice_sequence(protein, freqs)
    used = {c for aa, (cs, fs) in freqs.items() for c, f in zip(cs, fs) if f > 0}

    def translates(dna):
        return CodonData.get_amino_acid_sequence(dna, codon_table=table) == protein

    def codons_of(dna):
        return [dna[i:i + 3] for i in range(0, len(dna), 3)]

    baseline = {
        "protein": protein,
        "high_frequency_choice": hfc,
        "high_frequency_choice_optimized_equal": hfc == hfc_opt,
        "random_baselines_not_recorded": (
            "get_background_frequency_choice_sequence (np.random.choice(codons, p=freqs)), "
            "its _optimized variant (np.searchsorted(np.cumsum(freqs), np.random.rand())) "
            "and get_uniform_random_choice_sequence (np.random.randint(0, len(codons))) draw "
            "from numpy's global legacy RandomState (MT19937); they take no seed argument. "
            "Draws cannot be reproduced outside numpy, so only properties are recorded."
        ),
        "random_baseline_properties_with_np_random_seed_42": {
            "bfc_translates_to_protein": translates(bfc),
            "bfc_uses_only_codons_with_frequency_gt_0": set(codons_of(bfc)) <= used,
            "bfc_optimized_translates_to_protein": translates(bfc_opt),
            "bfc_optimized_uses_only_codons_with_frequency_gt_0": set(codons_of(bfc_opt)) <= used,
            "urc_translates_to_protein": translates(urc),
        },
    }

    return {
        "id": ORGANISM2ID[organism],
        "codon_table": table,
        "reference_generator": (
            f"random.Random({REF_SEED}) shared across organisms in order {ORGANISMS}; "
            "ATG + random sense codons (amino acid uniform over 20, codon by a per-organism "
            "skewed weight table with one never-used codon in each family of >= 4) + stop"
        ),
        "references": [{"dna": d, "protein": p} for d, p in zip(refs, proteins)],
        "codon_frequencies": jsonable(freqs),
        "codon_frequencies_via_organism_arg_equal": freqs == freqs_org,
        "csi_weights": jsonable(weights),
        "tests": tests,
        "baseline": baseline,
    }, bias


def edge_cases():
    E, D, P = CodonEvaluation, CodonData, CodonPrediction
    # Hand-made frequency table (reference notes §9): A, M and _ only.
    toy = {
        "A": (["GCA", "GCC", "GCG", "GCT"], [0.2, 0.3, 0.4, 0.1]),
        "M": (["ATG"], [1.0]),
        "_": (["TAA", "TAG", "TGA"], [0.6, 0.1, 0.3]),
    }
    toy_zero = dict(toy, C=(["TGC", "TGT"], [0.0, 0.0]))  # an amino acid never seen
    weights = E.get_CSI_weights(["ATGGCTGCAGCGGCCTAA", "ATGGCGGCGAAATAG"])
    long_dna = ("ATGC" * 300)[:1000]
    cases = {
        "toy_codon_frequencies": jsonable(toy),
        "toy_csi_weights_from": ["ATGGCTGCAGCGGCCTAA", "ATGGCGGCGAAATAG"],
        "toy_csi_weights": jsonable(weights),
        "gc_content": [
            {"dna": d, "lower": low, "result": call(E.get_GC_content, d, lower=low)}
            for d, low in [("ATGC", False), ("ATGGCCTAA", False), ("ATGC", True),
                           ("atgc", False), ("AtGc", False), ("", False)]
        ],
        "cfd": [
            {"dna": d, "table": t, "threshold": th,
             "result": call(E.get_cfd, d, toy if t == "toy" else toy_zero, threshold=th)}
            for d, t, th in [("ATGGCTGCATAA", "toy", 0.3), ("ATGGCTGCATAG", "toy", 0.3),
                             ("ATGGCTGCATAG", "toy", 0.25), ("ATGGCGTAA", "toy", 0.3),
                             ("ATGGCTGCATAA", "toy_zero", 0.3), ("atggcttaa", "toy", 0.3),
                             ("ATGGCTGC", "toy", 0.3), ("", "toy", 0.3)]
        ],
        "min_max_percentage": [
            {"dna": d, "window_size": w,
             "result": call(E.get_min_max_percentage, d, toy, window_size=w)}
            for d, w in [("ATGGCTGCAGCGGCCTAA", 3), ("ATGGCTGCAGCGGCCTAA", 4),
                         ("ATGGCTGCAGCGGCCTAA", 18), ("ATGATGATGGCT", 3),
                         ("ATGGCTGCAGCGGCCTAA", 1), ("ATGGCTGCAGCGGCCTAA", 6),
                         ("ATGGCTGCAGCGGCCTAA", 7), ("GCTGCT", 0)]
        ],
        "sequence_complexity": [
            {"dna": d if len(d) < 40 else f"('ATGC' * 300)[:{len(d)}]", "length": len(d),
             "result": call(E.get_sequence_complexity, d)}
            for d in ["", "A", "AT", "AAAA", "ATGC", "ATGCATGC", "AAAAAAAAAA",
                      "ATGGCCTAAGCT", long_dna, long_dna[:900]]
        ],
        "sequence_similarity": [
            {"original": o, "predicted": p, "truncate": t, "window_length": w,
             "result": call(E.get_sequence_similarity, o, p, truncate=t, window_length=w)}
            for o, p, t, w in [
                ("ATGGCC", "ATGGCA", True, 1), ("ATGGCCTAA", "ATGGCA", True, 1),
                ("ATGGCCTAA", "ATGGCA", True, 3), ("MKV", "MKV", True, 1),
                ("ATGGCC", "ATGGCCA", True, 1), ("ATGGCC", "ATGGCCA", True, 3),
                ("ATGGCCAAA", "ATGGC", True, 3), ("ATGGCCTAA", "ATGGCC", False, 1),
                (" ATG", "ATG ", False, 1), (" ATGG", "ATG", True, 1),
                ("ATG", "", True, 1), ("atg", "ATG", True, 1),
                ("ATGGCCTAA", "ATGGCCTAA", True, 2), ("ATGGCCTAA", "ATGGCCTAA", True, 4)]
        ],
        "csi_value": [
            {"dna": d, "result": call(E.get_CSI_value, d, weights)}
            for d in ["ATGGCTGCATAA", "atggctgcataa", "ATGGCTTAAGCTTGA", "ATGTGGTAA",
                      "ATGAAAGCT", "ATGNNNGCT", "ATGGC", ""]
        ],
        "csi_weights_errors": [
            {"sequences": s, "result": call(E.get_CSI_weights, s)}
            for s in [[], [""], ["ATGGC"], ["atggcttaa"], "ATGGCTTAA"]
        ],
        "codon_frequencies": [
            {"dna": ds, "protein": ps, "organism": org,
             "result": call(D.get_codon_frequencies, ds, ps, org)}
            for ds, ps, org in [
                (["ATGGCTGCCTAA"], ["MAA_"], None),
                (["ATGGCTGCCTAA"], ["XXXX"], "Homo sapiens"),
                (["atggcttaa"], ["MA_"], None),
                (["ATGGCTTAA"], ["MA"], None),
                (["ATGGCT"], ["MAA"], None)]
        ],
        "high_frequency_choice": [
            {"protein": p, "table": "toy_zero",
             "result": call(P.get_high_frequency_choice_sequence, p, toy_zero)}
            for p in ["MAC_", "MAW"]
        ],
        "codon_table_by_organism": {
            name: D.get_codon_table(name) for name in
            ["Homo sapiens", "Saccharomyces cerevisiae", "Zea mays", "homo sapiens",
             "Nicotiana tabacum chloroplast", "Escherichia coli general", ""]
        },
    }
    return cases


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "eval",
        "upstream_metrics.json")
    rng = random.Random(REF_SEED)
    organisms = {}
    # A fixed "other" bias, drawn first, for the cross-organism test sequences.
    other = codon_bias(rng)
    for organism in ORGANISMS:
        section, _bias = organism_section(rng, organism, other)
        organisms[organism] = section

    table1 = [o for o in ORGANISM2ID if CodonData.get_codon_table(o) == 1]
    doc = {
        "generator": "tools/make_eval_fixtures.py",
        "versions": {
            "CodonTransformer": importlib.metadata.version("CodonTransformer"),
            "CAI-PyPI": importlib.metadata.version("CAI-PyPI"),
            "CAI.__version__ (as the wheel reports it)": CAI.__version__,
            "biopython": Bio.__version__,
            "numpy": np.__version__,
            "scipy": importlib.metadata.version("scipy"),
            "pandas": pd.__version__,
        },
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "parameters": {"cfd_threshold": CFD_THRESHOLD, "minmax_window": WINDOW,
                       "reference_seed": REF_SEED, "numpy_seed": NUMPY_SEED},
        "cai_default_genetic_code": {
            "number": CAI_module.CAI.__defaults__[-1],  # CAI(..., genetic_code=11)
            "names": [n for n in CodonTable.unambiguous_dna_by_id[11].names if n],
        },
        "cai_skipped_codons": sorted(CAI_module._non_synonymous_codons[11]),
        "cai_stop_codons": STOPS,
        "table1_organisms_in_ORGANISM2ID": table1,
        "notes": [
            "codon_frequencies: {amino acid: [[codons], [frequencies]]} (upstream: "
            "Dict[str, Tuple[List[str], List[float]]]); keys sorted ('A'..'Y', then '_'), 21 "
            "keys, codons sorted ascending per amino acid, frequency = count / (family total "
            "+ 1e-100), so unseen amino acids have all 0.0.",
            "csi_weights: {codon: weight} for the 61 sense codons in Biopython's "
            "forward_table order (TTT, TTC, TTA, ...); no stop codons; ATG and TGG are 1.0.",
            "minmax: the list upstream returns; None padding (floor(window/2) entries) only "
            "at the end. Upstream has no mean function; minmax_mean_ignoring_none is the "
            "left-to-right sum of the non-None values / their count (our definition). "
            "np.mean of the raw list raises TypeError because of the None entries.",
            "similarity pairs: original = the test sequence, predicted = upstream's "
            "high-frequency-choice DNA of its translation (same length).",
            "csi_equals_exp_pairwise_mean_ln: whether CSI is bit-identical to "
            "exp((0.0 + numpy pairwise sum of ln w) / n) computed with libm (math.log/exp).",
        ],
        "organisms": organisms,
        "edge_cases": edge_cases(),
    }
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    text = json.dumps(doc, indent=1, allow_nan=False, ensure_ascii=True)
    with open(out_path, "w") as fh:
        fh.write(text + "\n")
    print(f"wrote {os.path.normpath(out_path)} ({len(text) + 1} bytes)")


if __name__ == "__main__":
    main()
