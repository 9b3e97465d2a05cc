"""Upstream CodonTransformer 1.6.7's evaluation metrics, same names and arguments.

Values equal upstream's (CSI to the last bit of CAI-PyPI 2.0.1's). Where upstream breaks, these
do not: lower-case DNA counts as upper case everywhere, and a window whose synonyms are all
equally frequent scores %MinMax 0 instead of dividing by zero.
"""

from typing import Any, Dict, Iterable, List, Optional, Tuple

from codon_ascend import _native

CodonFrequencies = Dict[str, Tuple[List[str], List[float]]]


def _table(codon_frequencies: CodonFrequencies) -> Dict[str, Tuple[List[str], List[float]]]:
    # Any pair of sequences (a JSON file gives lists) as the (codons, frequencies) tuple.
    return {amino: (list(codons), list(values)) for amino, (codons, values) in codon_frequencies.items()}


def get_CSI_weights(sequences: Iterable[str]) -> Dict[str, float]:
    """Each sense codon's relative adaptiveness in ``sequences`` (unseen codons count 0.5)."""
    return _native.csi_weights(list(sequences))


def get_CSI_value(dna: str, weights: Dict[str, float]) -> float:
    """The codon similarity index of ``dna``: the geometric mean of ``weights`` over its codons,
    skipping ATG, TGG and stops."""
    return _native.csi_value(dna, dict(weights))


def get_organism_to_CSI_weights(dataset: Any, organisms: List[str]) -> Dict[str, dict]:
    """CSI weights per organism from a table with ``organism`` and ``dna`` columns (a pandas
    DataFrame, as upstream takes)."""
    return {
        organism: get_CSI_weights(dataset.loc[dataset["organism"] == organism]["dna"].to_list())
        for organism in organisms
    }


def get_GC_content(dna: str, lower: bool = False) -> float:
    """The percentage of G and C in ``dna`` (either case; ``lower`` is accepted as upstream's)."""
    return _native.gc(dna)


def get_cfd(dna: str, codon_frequencies: CodonFrequencies, threshold: float = 0.3) -> float:
    """The percentage of codons whose frequency is below ``threshold`` of their amino acid's most
    frequent codon."""
    return _native.codon_frequency_distribution(dna, _table(codon_frequencies), threshold)


def get_min_max_percentage(
    dna: str, codon_frequencies: CodonFrequencies, window_size: int = 18
) -> List[Optional[float]]:
    """The %MinMax profile over windows of ``window_size`` codons, ``None``-padded at the end as
    upstream."""
    return _native.min_max_percentage(dna, _table(codon_frequencies), window_size)


def get_sequence_complexity(dna: str) -> float:
    """The sequence complexity score of ``dna``."""
    return _native.sequence_complexity(dna)


def get_sequence_similarity(
    original: str, predicted: str, truncate: bool = True, window_length: int = 1
) -> float:
    """The percentage of positions (``window_length`` 1) or windows the two sequences share.

    Only ``truncate=True``, upstream's default, is supported: ``False`` raises ``ValueError``.
    """
    if not truncate:
        raise ValueError("truncate=False is not supported: sequences are compared over the shorter one's length")
    return _native.sequence_similarity(original, predicted, window_length)
