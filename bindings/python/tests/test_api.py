"""The package's surface: upstream's names, errors that are Python exceptions (never a Rust
panic), files left as they were, the batch call, and no `codon` program in the wheel."""

import hashlib
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import codon_ascend
from codon_ascend import CodonData, CodonEvaluation, CodonPrediction, CodonUtils, _native
from conftest import TINY_MODEL

# The names of upstream 1.6.7's modules that this package supports; docs/python.md lists them
# and says why each other one is left out.
SUPPORTED = {
    CodonPrediction: ["predict_dna_sequence", "load_model", "load_tokenizer"],
    CodonEvaluation: [
        "get_CSI_weights", "get_CSI_value", "get_organism_to_CSI_weights", "get_GC_content", "get_cfd",
        "get_min_max_percentage", "get_sequence_complexity", "get_sequence_similarity",
    ],
    CodonData: ["get_merged_seq", "preprocess_protein_sequence", "is_correct_seq", "get_amino_acid_sequence"],
    CodonUtils: ["DNASequencePrediction"],
}


def test_every_supported_upstream_name_is_importable():
    for module, names in SUPPORTED.items():
        for name in names:
            assert callable(getattr(module, name)), f"{module.__name__}.{name}"
    for name in codon_ascend.__all__:
        assert hasattr(codon_ascend, name), name


def test_the_batch_call_equals_one_call_per_protein(tiny_model):
    proteins = ["MKTAYIAKQR", "MALWMRLLPLLALLALWGPDPAAAFVNQ*", "M", "MSKGEELFTGVVPILVELDGDVNG"]
    organisms = ["Homo sapiens", 51, "Escherichia coli general", "Saccharomyces cerevisiae"]
    batch = CodonPrediction.predict_dna_sequences(proteins, organisms, model=tiny_model, match_protein=True)
    for protein, organism, ours in zip(proteins, organisms, batch):
        one = CodonPrediction.predict_dna_sequence(protein, organism, "cpu", model=tiny_model, match_protein=True)
        assert ours.predicted_dna == one.predicted_dna
        assert ours.log_likelihood == pytest.approx(one.log_likelihood, rel=1e-5)
        assert CodonData.get_amino_acid_sequence(ours.predicted_dna).rstrip("_") == protein.rstrip("*").upper()
    with pytest.raises(ValueError, match=r"^proteins\[1\]: Invalid characters in protein sequence"):
        CodonPrediction.predict_dna_sequences(["MKV", "MK1"], "Homo sapiens", model=tiny_model)


def test_sampling_is_seeded_and_gives_num_sequences(tiny_model):
    kwargs = dict(model=tiny_model, deterministic=False, num_sequences=3, temperature=1.0, seed=7)
    first = CodonPrediction.predict_dna_sequence("MKTAYIAKQRQISFVKSHFSRQ", "Homo sapiens", "cpu", **kwargs)
    again = CodonPrediction.predict_dna_sequence("MKTAYIAKQRQISFVKSHFSRQ", "Homo sapiens", "cpu", **kwargs)
    assert len(first) == 3
    assert [p.predicted_dna for p in first] == [p.predicted_dna for p in again]


def test_design_constraints_are_met_by_synonymous_changes(tiny_model):
    protein = "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRVGDGTQDNLSGAEKAVQVKVKALPDAQFEVVHSLAKWKRQTLGQHDFSAGEG"
    plain = CodonPrediction.predict_dna_sequence(protein, "Homo sapiens", "cpu", model=tiny_model, match_protein=True)
    designed = CodonPrediction.predict_dna_sequence(
        protein, "Homo sapiens", "cpu", model=tiny_model, match_protein=True,
        avoid_sites="EcoRI,BsaI", max_homopolymer=3,
    )
    for site in ["GAATTC", "GGTCTC", "GAGACC"]:
        assert site not in designed.predicted_dna
    for base in "ACGT":
        assert base * 4 not in designed.predicted_dna
    assert CodonData.get_amino_acid_sequence(designed.predicted_dna) == CodonData.get_amino_acid_sequence(
        plain.predicted_dna
    )
    assert designed.edits is not None and designed.repair_cost >= 0


def test_infill_keeps_the_known_codons(tiny_model):
    known = "ATGNNNGCCNNN"
    out = CodonPrediction.predict_dna_sequence("MKA", "Homo sapiens", "cpu", model=tiny_model, known_dna=known)
    assert out.predicted_dna[:3] == "ATG" and out.predicted_dna[6:9] == "GCC"


def test_scores_rank_the_models_own_choice_first(tiny_model):
    best = CodonPrediction.predict_dna_sequence("MKTAYIAKQR", "Homo sapiens", "cpu", model=tiny_model,
                                                match_protein=True)
    other = "ATGAAAACAGCATATATAGCAAAACAAAGATAA"
    scores = CodonPrediction.score_dna_sequences([best.predicted_dna, other], "Homo sapiens", model=tiny_model,
                                                 match_protein=True)
    assert scores[0].log_likelihood == pytest.approx(best.log_likelihood, rel=1e-5)
    assert scores[0].log_likelihood > scores[1].log_likelihood
    with pytest.raises(ValueError, match=r"^dna_sequences\[0\]"):
        CodonPrediction.score_dna_sequences(["ATGAA"], "Homo sapiens", model=tiny_model)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: CodonPrediction.predict_dna_sequences(["MKV"], ["Homo sapiens", 3], model=m),
        lambda m: CodonPrediction.predict_dna_sequence("MKV\u00e9", "Homo sapiens", "cpu", model=m),
        lambda m: CodonPrediction.predict_dna_sequence("MKV", "Homo sapiens", "cpu", model=m, gc_window=(0, 30, 70)),
        lambda m: CodonPrediction.predict_dna_sequence("MKV", "Homo sapiens", "cpu", model=m, avoid_sites="NoSuchI"),
        lambda m: CodonPrediction.predict_dna_sequence("MKV", "Homo sapiens", "cpu", model=m, known_dna="ATG"),
        lambda m: CodonPrediction.predict_dna_sequence("MKV", "Homo sapiens", "cpu", model=m, attention_type="x"),
        lambda m: CodonEvaluation.get_cfd("ATGNNN", {"M": (["ATG"], [1.0])}),
        lambda m: CodonEvaluation.get_CSI_value("ATGGCT", {"ATG": 1.0}),
        lambda m: CodonEvaluation.get_CSI_weights([]),
        lambda m: CodonEvaluation.get_min_max_percentage("ATGGCT", {"M": (["ATG"], [1.0, 2.0])}),
    ],
)
def test_bad_input_is_a_value_error_never_a_panic(tiny_model, call):
    with pytest.raises(ValueError):
        call(tiny_model)


def test_device_names_and_torch_devices():
    class TorchDevice:  # what torch.device exposes
        def __init__(self, type, index):
            self.type, self.index = type, index

    name = CodonPrediction.device_name
    assert [name(None), name("cpu"), name("cuda"), name("npu:1"), name("npu-sim:0")] == [
        "cpu", "cpu", "cuda:0", "npu:1", "npu-sim:0"
    ]
    assert name(TorchDevice("cuda", None)) == "cuda:0" and name(TorchDevice("cpu", None)) == "cpu"
    model = CodonPrediction.load_model(str(TINY_MODEL), device="npu-sim:0")
    assert model.device == "npu-sim:0"
    with pytest.raises(ValueError):
        CodonPrediction.load_model(str(TINY_MODEL), device="tpu:0")


def test_missing_and_corrupt_model_files_raise_and_stay_as_they_were(tmp_path):
    with pytest.raises(FileNotFoundError):
        CodonPrediction.load_model(str(tmp_path / "absent.safetensors"))
    folder = tmp_path / "model"
    shutil.copytree(TINY_MODEL, folder, ignore=shutil.ignore_patterns("case_*", "*.pt", "*.ckpt", "rand_*"))
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    before = hashlib.sha256(weights.read_bytes()).hexdigest()
    with pytest.raises(ValueError):
        CodonPrediction.load_model(str(folder))
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == before


def test_the_wheel_carries_no_program():
    # The `codon` program is `cargo install`'s (the README): the wheel links the library only.
    assert not (Path(sysconfig.get_path("scripts")) / "codon").exists()
    assert not hasattr(_native, "run_cli")


def test_num_sequences_is_capped_as_the_codon_program_caps_it(tiny_model):
    kwargs = dict(model=tiny_model, deterministic=False, temperature=1.0, seed=1)
    assert len(CodonPrediction.predict_dna_sequence("MKV", "Homo sapiens", "cpu", num_sequences=100, **kwargs)) == 100
    # 2**62 was a PanicException (a BaseException) with a Rust backtrace; 2**40 aborts the
    # interpreter, so it is tried in a child process below.
    for n in [101, 2**62, 2**64, 10**30]:
        with pytest.raises(ValueError, match="num_sequences"):
            CodonPrediction.predict_dna_sequence("MKV", "Homo sapiens", "cpu", num_sequences=n, **kwargs)
        with pytest.raises(ValueError, match="num_sequences"):
            CodonPrediction.predict_dna_sequences(["MKV"], "Homo sapiens", num_sequences=n, **kwargs)
    # The model's own method, which the Python layer's check does not guard.
    for n in [101, 2**62]:
        with pytest.raises(ValueError, match="at most 100"):
            tiny_model.predict(["MKV"], ["Homo sapiens"], deterministic=False, num_sequences=n)
    with pytest.raises(OverflowError):
        tiny_model.predict(["MKV"], ["Homo sapiens"], deterministic=False, num_sequences=2**64)
    child = subprocess.run(
        [sys.executable, "-c", f"""
from codon_ascend import CodonPrediction
model = CodonPrediction.load_model({str(TINY_MODEL)!r})
for call in [
    lambda: CodonPrediction.predict_dna_sequence("MKV", "Homo sapiens", "cpu", model=model, deterministic=False,
                                                 num_sequences=2**40),
    lambda: model.predict(["MKV"], ["Homo sapiens"], deterministic=False, num_sequences=2**40),
]:
    try:
        call()
    except ValueError as e:
        print("ValueError", e)
"""],
        capture_output=True, text=True, timeout=120,
    )
    assert child.returncode == 0 and child.stdout.count("ValueError") == 2, (child.returncode, child.stderr[-2000:])


def test_a_string_is_not_a_list_of_proteins(tiny_model):
    with pytest.raises(TypeError, match="proteins"):
        CodonPrediction.predict_dna_sequences("MKV", "Homo sapiens", model=tiny_model)
    with pytest.raises(TypeError, match="dna_sequences"):
        CodonPrediction.score_dna_sequences("ATGAAAGTTTAA", "Homo sapiens", model=tiny_model)
    with pytest.raises(TypeError):
        tiny_model.predict("MKV", ["Homo sapiens"] * 3)


def test_a_device_that_is_not_the_models_is_refused(tiny_model):
    # The model is on the CPU; the same device in any spelling, or none, is fine.
    for device in ["cpu", None, " cpu"]:
        CodonPrediction.predict_dna_sequence("MKV", "Homo sapiens", device, model=tiny_model)
    for device in ["cuda:0", "npu-sim:0", "cuda", 0]:
        with pytest.raises(ValueError, match="the model is on cpu"):
            CodonPrediction.predict_dna_sequence("MKV", "Homo sapiens", device, model=tiny_model)
        with pytest.raises(ValueError, match="the model is on cpu"):
            CodonPrediction.predict_dna_sequences(["MKV"], "Homo sapiens", device, model=tiny_model)
        with pytest.raises(ValueError, match="the model is on cpu"):
            CodonPrediction.score_dna_sequences(["ATGTAA"], "Homo sapiens", device, model=tiny_model)
    for device in ["bogus", "gpu:0", "cuda:x", ""]:
        with pytest.raises(ValueError, match="unknown device"):
            CodonPrediction.predict_dna_sequence("MKV", "Homo sapiens", device, model=tiny_model)


def test_a_huge_min_max_window_is_refused_not_allocated():
    frequencies = {"M": (["ATG"], [1.0]), "A": (["GCT", "GCC"], [0.6, 0.4])}
    # Upstream's padding (window_size // 2 Nones) is kept for windows past the sequence...
    assert CodonEvaluation.get_min_max_percentage("ATGGCT", frequencies, 18) == [None] * 9
    # ...up to a bound: 2**62 was a PanicException, and 2**40 aborts the interpreter (tried in a
    # child process).
    with pytest.raises(ValueError, match="window_size"):
        CodonEvaluation.get_min_max_percentage("ATGGCT", frequencies, 2**62)
    child = subprocess.run(
        [sys.executable, "-c", f"""
from codon_ascend import CodonEvaluation
try:
    CodonEvaluation.get_min_max_percentage("ATGGCT", {frequencies!r}, 2**40)
except ValueError as e:
    print("ValueError", e)
"""],
        capture_output=True, text=True, timeout=120,
    )
    assert child.returncode == 0 and "ValueError" in child.stdout, (child.returncode, child.stderr[-2000:])
