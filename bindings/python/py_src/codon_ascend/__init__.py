"""CodonTransformer on Rust: upstream's Python API over the codon-ascend library.

Switching from upstream is one import::

    from codon_ascend.CodonPrediction import predict_dna_sequence   # was CodonTransformer.CodonPrediction

The modules mirror CodonTransformer 1.6.7's: ``CodonPrediction``, ``CodonEvaluation``,
``CodonData`` and ``CodonUtils``. torch is never needed; a ``torch.device`` is accepted where
upstream takes one.
"""

from codon_ascend._native import Model, __version__
from codon_ascend.CodonPrediction import (
    load_model,
    load_tokenizer,
    predict_dna_sequence,
    predict_dna_sequences,
    score_dna_sequences,
)
from codon_ascend.CodonUtils import DNASequencePrediction, SequenceScore

__all__ = [
    "DNASequencePrediction",
    "Model",
    "SequenceScore",
    "__version__",
    "load_model",
    "load_tokenizer",
    "predict_dna_sequence",
    "predict_dna_sequences",
    "score_dna_sequences",
]
