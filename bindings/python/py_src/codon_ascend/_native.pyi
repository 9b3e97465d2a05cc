# Type stubs of the Rust extension module (bindings/python/src); its docstrings say the same.
# CI checks them against the built module with mypy's stubtest (tools/wheels.sh).
from os import PathLike
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union, final

__all__ = [
    "__version__",
    "Model",
    "MAX_NUM_SEQUENCES",
    "CUDA",
    "canonical_device",
    "load_model",
    "csi_weights",
    "csi_value",
    "gc",
    "codon_frequency_distribution",
    "min_max_percentage",
    "sequence_complexity",
    "sequence_similarity",
    "vocabulary",
    "preprocess_protein_sequence",
    "merged_sequence",
    "translate",
    "is_correct_seq",
]

__version__: str
MAX_NUM_SEQUENCES: int
CUDA: bool

_Organism = Union[int, str]

@final
class Model:
    @property
    def device(self) -> str: ...
    @property
    def organisms(self) -> List[str]: ...
    def predict(
        self,
        proteins: Sequence[str],
        organisms: Sequence[_Organism],
        *,
        deterministic: bool = True,
        temperature: float = 0.2,
        top_p: float = 0.95,
        num_sequences: int = 1,
        match_protein: bool = False,
        seed: int = 0,
        attention_type: Optional[str] = None,
        known_dna: Optional[Sequence[Optional[str]]] = None,
        avoid_sites: Sequence[str] = ...,
        avoid_motifs: Sequence[str] = ...,
        gc_window: Optional[Tuple[int, float, float]] = None,
        max_homopolymer: Optional[int] = None,
        max_repeat: Optional[int] = None,
        best_effort: bool = False,
        progress: Optional[Callable[[int, int], Any]] = None,
    ) -> List[Union[List[dict], BaseException]]: ...
    def score(
        self,
        dna: Sequence[str],
        organisms: Sequence[_Organism],
        *,
        match_protein: bool = False,
        attention_type: Optional[str] = None,
        progress: Optional[Callable[[int, int], Any]] = None,
    ) -> List[Union[dict, BaseException]]: ...

def load_model(
    model: Union[None, str, PathLike] = None,
    device: str = "cpu",
    dtype: str = "float32",
    attention_type: str = "original_full",
    config: Union[None, str, PathLike] = None,
) -> Model: ...
def canonical_device(device: str) -> str: ...
def csi_weights(sequences: List[str]) -> Dict[str, float]: ...
def csi_value(dna: str, weights: Dict[str, float]) -> float: ...
def gc(dna: str) -> float: ...
def codon_frequency_distribution(
    dna: str, codon_frequencies: Dict[str, Tuple[List[str], List[float]]], threshold: float
) -> float: ...
def min_max_percentage(
    dna: str, codon_frequencies: Dict[str, Tuple[List[str], List[float]]], window_size: int
) -> List[Optional[float]]: ...
def sequence_complexity(dna: str) -> float: ...
def sequence_similarity(original: str, predicted: str, window_length: int) -> float: ...
def vocabulary() -> List[str]: ...
def preprocess_protein_sequence(protein: str) -> str: ...
def merged_sequence(protein: str, dna: str = "") -> str: ...
def translate(dna: str) -> str: ...
def is_correct_seq(dna: str, protein: str) -> bool: ...
