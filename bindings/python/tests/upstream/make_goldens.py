"""Golden outputs of upstream CodonTransformer 1.6.7 for the Python package's tests.

Runs upstream's own `predict_dna_sequence` on the repository's tiny BigBird fixture model
(tests/fixtures/bigbird: CodonTransformer's vocabulary and organism table, hidden size 32) and
its `CodonData` helpers, and writes what they return, or the exception they raise, to
`predictions.json` beside this script. CI compares the package against that file; it never
installs torch.

Made on Debian 12 (x86_64) with Debian's CPU build of torch and a venv over it, outside the
repository, run from the repository root:

    apt-get install python3-torch python3-venv          # torch 1.13.1, numpy 1.24.2
    python3 -m venv --system-site-packages /tmp/upenv
    /tmp/upenv/bin/pip install --no-deps CodonTransformer==1.6.7
    /tmp/upenv/bin/pip install numpy==1.24.2 transformers==4.46.3 pandas==2.0.3 \
        biopython==1.83 python_codon_tables==0.1.18 requests tqdm
    /tmp/upenv/bin/python bindings/python/tests/upstream/make_goldens.py \
        --tokenizer ../shared/fixtures/tokenizer/CodonTransformerTokenizer.json

onnxruntime and scikit-learn, which upstream imports at module level but these calls never use,
are replaced by empty modules. Proteins with ambiguous letters (B, Z, J, X) are left out:
upstream resolves them with Python's `random`, which no other implementation reproduces.
"""

import argparse
import importlib.metadata
import json
import platform
import sys
import types
import warnings
from pathlib import Path

import torch
import transformers

# After transformers, which looks for scikit-learn's real module spec when it is imported.
for name in ["onnxruntime", "sklearn", "sklearn.utils"]:
    sys.modules[name] = types.ModuleType(name)
sys.modules["sklearn.utils"].shuffle = None

from CodonTransformer import CodonData, CodonPrediction  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]

# Lengths 1 to 600 residues; upper and lower case; with and without a final stop; organisms by
# name and by id.
PROTEINS = [
    "M",
    "MKV*",
    "mktayiakqr",
    "MALWMRLLPLLALLALWGPDPAAAFVNQHLCGSHLVEALYLVCGERGFFYTPKT",
    "MSKGEELFTGVVPILVELDGDVNGHKFSVSGEGEGDATYGKLTLKFICTTGKLPVPWPTLVTTFSYGVQCFSRYPDHMKQHDFFKSAMPEGYVQERTIFFKDDGNYKTRAEVKFEGDTLVNRIELKGIDFKEDGNILGHKLEYNYNSHNVYIMADKQKNGIKVNFKIRHNIEDGSVQLADHYQQNTPIGDGPVLLPDNHYLSTQSALSKDPNEKRDHMVLLEFVTAAGITHGMDELYK*",
    "MTEYKLVVVGAGGVGKSALTIQLIQNHFVDEYDPTIEDSYRKQVVIDGETCLLDILDTAGQEEYSAMRDQYMRTGEGFLCVFAINNTKSFEDIHQYREQIKRVKDSDDVPMVLVGNKCDLAARTVESRQAQDLARSYGIPYIETSAKTRQGVEDAFYTLVREIRQH_",
]
LONG = ("MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRVGDGTQDNLSGAEKAVQVKVKALPDAQFEVVHSLAKWKRQTLGQHDFSAGEGLYTHMKALRPDEDRLSPLHSVYVDQWDWERVMGDGERQFSTLKSTVEAIWAGIKATEAAVSEEFGLAPFLPDQIHFVHSQELLSRYPDLDAKGRERAIAKDLGAVFLVGIGGKLSDGHRHDVRAPDYDDWUAVYEGHQIADSEPAPK" * 3)[:600]
PROTEINS.append(LONG.replace("U", "C"))
ORGANISMS = ["Escherichia coli general", "Homo sapiens", 51, "Saccharomyces cerevisiae"]

# Each bad input once: (protein, organism, keyword arguments).
BAD_INPUTS = [
    ("", "Homo sapiens", {}),
    ("MKV", "Homo sapiens nonexistent", {}),
    ("MKV", 100000, {}),
    ("MKV", -1, {}),
    ("MK1V", "Homo sapiens", {}),
    ("MK-V", "Homo sapiens", {}),
    ("MKV", "Homo sapiens", {"temperature": 0}),
    ("MKV", "Homo sapiens", {"top_p": 1.5}),
    ("MKV", "Homo sapiens", {"num_sequences": 0}),
    ("MKV", "Homo sapiens", {"num_sequences": 2}),
]

DATA_CASES = {
    "get_merged_seq": [
        {"protein": "MAV_", "dna": "ATGGCTGTGTAA"},
        {"protein": "qhh", "dna": ""},
        {"protein": "MKV*", "dna": "atgaaagtttga"},
        {"protein": "MKV", "dna": "ATGAAA"},
        {"protein": "", "dna": ""},
        {"protein": "M K\tV\n", "dna": ""},
        {"protein": "MK9", "dna": ""},
    ],
    "preprocess_protein_sequence": [
        {"protein": p} for p in ["MKV", "mkv*", " M K V _ ", "", "MKV-", "MK*V", "MKV**", "M1"]
    ],
    "is_correct_seq": [
        {"dna": "ATGAAAGTTTAA", "protein": "MKV_"},
        {"dna": "ATGAAAGTTTAA", "protein": "MKV"},
        {"dna": "GTGAAAGTTTAA", "protein": "VKV_"},
        {"dna": "ATGAAAGTTTA", "protein": "MKV_"},
        {"dna": "ATGTAAGTTTAA", "protein": "M_V_"},
        {"dna": "ATGATGATGTAA", "protein": "MMM_"},
        {"dna": "TTGCCCGGGTAG", "protein": "LPG_"},
    ],
    "get_amino_acid_sequence": [
        {"dna": "ATGAAAGTTTAA"},
        {"dna": "ATGAAAGTTTAA", "stop_symbol": "*"},
        {"dna": "atggcctgatag", "return_correct_seq": True},
        {"dna": "ATGAAAGTTTAA", "return_correct_seq": True},
        {"dna": "ATGAAAGTTTAA", "codon_table": 11},
        {"dna": "ATGNNNGTTTAA"},
        {"dna": " ATGAAATAA "},
    ],
}


def call(fn, **kwargs):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = fn(**kwargs)
    except Exception as e:  # noqa: BLE001 (the type is what is recorded)
        return {"error": {"type": type(e).__name__, "message": str(e)}}
    return {"result": list(result) if isinstance(result, tuple) else result}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True, help="upstream's CodonTransformerTokenizer.json")
    parser.add_argument("--output", default=str(HERE / "predictions.json"))
    args = parser.parse_args()

    torch.manual_seed(0)
    model_dir = REPO / "tests" / "fixtures" / "bigbird"
    model = transformers.BigBirdForMaskedLM.from_pretrained(str(model_dir))
    tokenizer = CodonPrediction.load_tokenizer(args.tokenizer)
    device = torch.device("cpu")

    predictions = []
    for protein in PROTEINS:
        for organism in ORGANISMS:
            for match_protein in (False, True):
                out = CodonPrediction.predict_dna_sequence(
                    protein, organism, device, tokenizer=tokenizer, model=model, match_protein=match_protein
                )
                predictions.append({
                    "protein": protein,
                    "organism": organism,
                    "match_protein": match_protein,
                    "organism_name": out.organism,
                    "processed_input": out.processed_input,
                    "predicted_dna": out.predicted_dna,
                })
    errors = []
    for protein, organism, kwargs in BAD_INPUTS:
        outcome = call(
            CodonPrediction.predict_dna_sequence,
            protein=protein, organism=organism, device=device, tokenizer=tokenizer, model=model, **kwargs,
        )
        assert "error" in outcome, (protein, organism, kwargs)
        errors.append({"protein": protein, "organism": organism, "kwargs": kwargs, **outcome})
    data = {name: [{"args": case, **call(getattr(CodonData, name), **case)} for case in cases]
            for name, cases in DATA_CASES.items()}

    versions = {p: importlib.metadata.version(p) for p in ["CodonTransformer", "transformers", "numpy", "biopython"]}
    versions["torch"] = torch.__version__
    out = {
        "generator": "bindings/python/tests/upstream/make_goldens.py",
        "versions": versions,
        "python": platform.python_version(),
        "model": "tests/fixtures/bigbird",
        "predictions": predictions,
        "errors": errors,
        "codon_data": data,
    }
    Path(args.output).write_text(json.dumps(out, indent=1) + "\n")
    print(f"{args.output}: {len(predictions)} predictions, {len(errors)} errors")


if __name__ == "__main__":
    main()
