"""Shared fixtures: the repository's tiny BigBird model and the committed upstream outputs."""

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
TINY_MODEL = REPO / "tests" / "fixtures" / "bigbird"


@pytest.fixture(scope="session")
def tiny_model():
    from codon_ascend.CodonPrediction import load_model

    return load_model(str(TINY_MODEL))


@pytest.fixture(scope="session")
def upstream_predictions():
    return json.loads((Path(__file__).parent / "upstream" / "predictions.json").read_text())


@pytest.fixture(scope="session")
def upstream_metrics():
    return json.loads((REPO / "tests" / "fixtures" / "eval" / "upstream_metrics.json").read_text())
