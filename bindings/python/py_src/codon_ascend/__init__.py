"""CodonTransformer on Rust: upstream's Python API over the codon-ascend library.

Switching from upstream is one import::

    from codon_ascend.CodonPrediction import predict_dna_sequence   # was CodonTransformer.CodonPrediction

The modules mirror CodonTransformer 1.6.7's: ``CodonPrediction``, ``CodonEvaluation``,
``CodonData`` and ``CodonUtils``. torch is never needed; a ``torch.device`` is accepted where
upstream takes one.
"""

try:
    from codon_ascend import _native
except ImportError as error:
    # The GPU build links libcudart.so.13: take pip's copy when the loader's search has none.
    if "libcudart" not in str(error):
        raise
    from codon_ascend import _cuda

    if not _cuda.preload(["libcudart.so.13"]):
        raise ImportError(
            "codon_ascend: this is the GPU build, and it needs CUDA 13's libcudart.so.13: "
            "pip install 'nvidia-cuda-runtime>=13.0,<13.1' (or the package's [cuda] extra, or PyTorch for CUDA 13), "
            "or put CUDA 13's lib64 folder on LD_LIBRARY_PATH"
        ) from None
    from codon_ascend import _native

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
