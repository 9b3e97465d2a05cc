"""predict_dna_sequence against upstream CodonTransformer 1.6.7 on the same model
(upstream/predictions.json, made by upstream/make_goldens.py)."""

import re

import pytest

from codon_ascend.CodonPrediction import load_tokenizer, predict_dna_sequence

CODON = re.compile("[ACGT]{3}")


def codons(dna):
    return [dna[i : i + 3] for i in range(0, len(dna), 3)]


def test_deterministic_predictions_equal_upstreams_codon_for_codon(tiny_model, upstream_predictions):
    compared = 0
    for case in upstream_predictions["predictions"]:
        ours = predict_dna_sequence(
            case["protein"], case["organism"], "cpu", model=tiny_model, match_protein=case["match_protein"]
        )
        what = f"{case['protein'][:12]}… {case['organism']} match_protein={case['match_protein']}"
        assert ours.organism == case["organism_name"], what
        assert ours.processed_input == case["processed_input"], what
        theirs = codons(case["predicted_dna"])
        assert len(codons(ours.predicted_dna)) == len(theirs), what
        for i, (a, b) in enumerate(zip(codons(ours.predicted_dna), theirs)):
            # Upstream's argmax may pick a token that is not a codon ([PAD], an amino acid's
            # unknown codon) and writes its last three letters; ours picks among codons only.
            if CODON.fullmatch(b):
                assert a == b, f"{what}: codon {i}: ours {a}, upstream {b}"
                compared += 1
            else:
                assert CODON.fullmatch(a), f"{what}: codon {i}: {a}"
    assert compared > 1000, compared


def test_bad_inputs_raise_upstreams_exception(tiny_model, upstream_predictions):
    for case in upstream_predictions["errors"]:
        expected = case["error"]
        with pytest.raises(Exception) as raised:
            predict_dna_sequence(case["protein"], case["organism"], "cpu", model=tiny_model, **case["kwargs"])
        what = f"{case['protein']!r} {case['organism']!r} {case['kwargs']}"
        assert type(raised.value).__name__ == expected["type"], f"{what}: {raised.value!r}"
        # Upstream's words first; ours may add where the mistake is.
        assert str(raised.value).startswith(expected["message"].rstrip(".")), f"{what}: {raised.value}"


def test_a_tokenizer_file_with_another_vocabulary_is_refused(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"vocab": {"[UNK]": 0}}}')
    with pytest.raises(ValueError, match="not CodonTransformer's tokenizer"):
        load_tokenizer(str(bad))
    assert len(load_tokenizer()) == 90
