"""The result types of ``CodonPrediction``: upstream's ``DNASequencePrediction`` and a score."""

from dataclasses import dataclass, field
from typing import List, Optional, Tuple


@dataclass
class DNASequencePrediction:
    """A predicted coding sequence, as upstream returns it, plus its score under the model.

    The first four fields are upstream's. ``log_likelihood`` is the sum over codons of the
    model's log-probability of each chosen codon, ``mean_log_likelihood`` that sum over the
    number of codons, and ``least_likely_codons`` the lowest (position from 0, log-probability)
    pairs, lowest first. With design constraints, ``edits`` lists each synonymous change made to
    meet them, ``repair_cost`` the log-probability given up, and ``unmet_constraints`` what is
    left (only with ``best_effort=True``).
    """

    organism: str
    protein: str
    processed_input: str
    predicted_dna: str
    log_likelihood: Optional[float] = None
    mean_log_likelihood: Optional[float] = None
    least_likely_codons: List[Tuple[int, float]] = field(default_factory=list)
    edits: Optional[List[dict]] = None
    repair_cost: Optional[float] = None
    unmet_constraints: Optional[List[str]] = None


@dataclass
class SequenceScore:
    """How likely the model finds an existing coding sequence (see ``DNASequencePrediction``)."""

    log_likelihood: float
    mean_log_likelihood: float
    least_likely_codons: List[Tuple[int, float]] = field(default_factory=list)
