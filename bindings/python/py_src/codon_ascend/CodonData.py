"""Upstream CodonTransformer 1.6.7's sequence helpers that users call, same names and arguments."""

from typing import Tuple, Union

from codon_ascend import _native

#: The stop symbol of the model's proteins.
STOP_SYMBOL = "_"


def preprocess_protein_sequence(protein: str) -> str:
    """Upper case, whitespace removed, ambiguous letters (B, Z, J, X, U, O) resolved at random as
    upstream, letters checked, a final ``*`` turned into ``_`` and ``_`` appended if missing.
    Raises upstream's ``ValueError``."""
    return _native.preprocess_protein_sequence(protein)


def get_merged_seq(protein: str, dna: str = "", separator: str = "_") -> str:
    """The model's input text: ``'M_ATG A_GCT V_GTG __TAA'``, or ``'M_UNK …'`` without DNA.

    Only upstream's separator ``"_"`` is supported: the tokenizer knows no other.
    """
    if separator != "_":
        raise ValueError(f"separator {separator!r}: only '_' is supported (the tokenizer's tokens use it)")
    return _native.merged_sequence(protein, dna)


def is_correct_seq(dna: str, protein: str, stop_symbol: str = STOP_SYMBOL) -> bool:
    """Upstream's check: whole codons, a start codon, exactly one stop symbol and at the end, and
    the DNA made of exactly four distinct letters."""
    if stop_symbol != STOP_SYMBOL:
        # Only the given stop symbol counts as a stop, as upstream.
        protein = protein.replace(STOP_SYMBOL, "X").replace(stop_symbol, STOP_SYMBOL)
    return _native.is_correct_seq(str(dna), protein)


def get_amino_acid_sequence(
    dna: str,
    stop_symbol: str = "_",
    codon_table: int = 1,
    return_correct_seq: bool = False,
) -> Union[str, Tuple[str, bool]]:
    """The protein ``dna`` codes for (Biopython's translation, as upstream), and with
    ``return_correct_seq`` whether it passes ``is_correct_seq``.

    NCBI tables 1 and 11 (which translate alike) are supported; another ``codon_table`` raises
    ``ValueError``.
    """
    if codon_table not in (1, 11):
        raise ValueError(f"codon_table {codon_table}: only NCBI tables 1 and 11 are supported")
    dna = dna.strip()
    protein = _native.translate(dna).replace(STOP_SYMBOL, stop_symbol).strip()
    if not return_correct_seq:
        return protein
    return protein, is_correct_seq(dna, protein, stop_symbol)
