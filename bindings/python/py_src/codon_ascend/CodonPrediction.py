"""Prediction with upstream CodonTransformer 1.6.7's names, arguments, defaults and exceptions.

``predict_dna_sequence``, ``load_model`` and ``load_tokenizer`` behave as upstream's; the
batch call ``predict_dna_sequences``, ``score_dna_sequences`` and the design keyword arguments
are this package's own. Every call releases the GIL while the model runs.
"""

import errno
import functools
import json
import os
import random
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from codon_ascend import _cuda, _native
from codon_ascend._native import Model
from codon_ascend._progress import Progress, reporter
from codon_ascend.CodonUtils import DNASequencePrediction, SequenceScore

Organism = Union[int, str]

#: Upstream's published model, which ``model_path=None`` loads.
DEFAULT_MODEL = "adibvafa/CodonTransformer"

#: Most sequences one protein may ask for (``num_sequences``), as ``codon predict`` and the service.
MAX_NUM_SEQUENCES: int = _native.MAX_NUM_SEQUENCES


def _sequence_of_strings(name: str, value: Any) -> List[Any]:
    """``value`` as a list; a single string (which would become one item per letter) is a
    ``TypeError``."""
    if isinstance(value, (str, bytes)):
        raise TypeError(
            f"{name}: a list of sequences, not one {type(value).__name__}; wrap a single sequence in a list"
        )
    return list(value)


def device_name(device: Any) -> str:
    """``"cpu"``, ``"cuda:N"``, ``"npu:N"`` or ``"npu-sim:N"`` from a string, a ``torch.device`` or
    an int (a CUDA ordinal, as torch reads it).

    A bare ``"cuda"`` or ``"npu"`` means device 0; ``None`` means the CPU. Anything else raises
    ``ValueError``.
    """
    if device is None:
        return "cpu"
    index: Union[None, int, str]
    if isinstance(device, int) and not isinstance(device, bool):
        kind, index = "cuda", device
    elif hasattr(device, "type") and hasattr(device, "index"):  # a torch.device, without importing torch
        kind, index = device.type, device.index
    else:
        text = str(device).strip()
        kind, _, suffix = text.partition(":")
        index = int(suffix) if suffix.isdigit() else (suffix or None)
    name = "cpu" if kind == "cpu" else f"{kind}:{0 if index is None else index}"
    try:
        return _native.canonical_device(name)
    except ValueError:
        raise ValueError(
            f"unknown device {device!r} (expected cpu, cuda:N, npu:N or npu-sim:N, or a torch.device)"
        ) from None


class Tokenizer:
    """CodonTransformer's tokenizer. The vocabulary is built in; ``load_tokenizer`` checks a file
    against it, so a model is never fed ids from another vocabulary."""

    def __init__(self, path: Optional[str] = None):
        self.path = path
        self.vocab = {token: i for i, token in enumerate(_native.vocabulary())}

    def __len__(self) -> int:
        return len(self.vocab)

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={len(self)}, path={self.path!r})"


def load_tokenizer(tokenizer_path: Optional[str] = None) -> Tokenizer:
    """Upstream's ``load_tokenizer``: the tokenizer, checked against ``tokenizer_path`` if given.

    A file whose vocabulary differs from CodonTransformer's raises ``ValueError``.
    """
    tokenizer = Tokenizer(tokenizer_path)
    if tokenizer_path:
        with open(tokenizer_path, encoding="utf-8") as f:
            vocab = json.load(f).get("model", {}).get("vocab")
        if vocab != tokenizer.vocab:
            raise ValueError(f"{tokenizer_path}: not CodonTransformer's tokenizer (its vocabulary differs)")
    return tokenizer


def load_model(
    model_path: Optional[str] = None,
    device: Any = None,
    attention_type: str = "original_full",
    num_organisms: Optional[int] = None,
    remove_prefix: bool = True,
    *,
    dtype: str = "float32",
    config: Optional[str] = None,
) -> Model:
    """Upstream's ``load_model``: ``model_path`` is a folder (``config.json`` and
    ``model.safetensors``), a ``.ckpt``, ``.pt`` or ``.safetensors`` file, or a Hub id; ``None``
    loads ``adibvafa/CodonTransformer`` from the Hub.

    ``num_organisms`` and ``remove_prefix`` are accepted as upstream's: the checkpoint's own
    shapes give the organism count, and a Lightning ``model.`` prefix is always removed.
    ``dtype`` (``"float32"``, ``"bfloat16"``, ``"float16"``) and ``config`` (a checkpoint
    file's config.json, when it is not CodonTransformer's size) are this package's.
    A missing file raises ``FileNotFoundError``; a corrupt one ``ValueError``, and it is left
    untouched. ``device="cuda:N"`` needs the GPU build (docs/python.md); the CPU-only build
    raises ``RuntimeError`` saying how to install it.
    """
    if not model_path:
        warnings.warn("Model path not provided. Loading from HuggingFace.", UserWarning, stacklevel=2)
    elif _is_local_path(os.fspath(model_path)) and not os.path.exists(model_path):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", os.fspath(model_path))
    device = device_name(device)
    if _native.CUDA and device.startswith("cuda:"):
        _cuda.preload()
    return _native.load_model(os.fspath(model_path) if model_path else None, device, dtype, attention_type, config)


def _is_local_path(path: str) -> bool:
    """Whether ``path`` names a file or folder rather than a Hub id (``owner/name[@revision]``)."""
    return (
        os.path.isabs(path)
        or path.startswith((".", "~"))
        or path.endswith((".ckpt", ".pt", ".safetensors"))
        or path.count("/") != 1
    )


@functools.lru_cache(maxsize=2)
def _cached_model(model_path: Optional[str], device: str, attention_type: str) -> Model:
    return load_model(model_path, device, attention_type)


def _model_for(model: Union[None, str, Model], device: Any, attention_type: str) -> Model:
    if isinstance(model, Model):
        # A model runs where it was loaded: a device that names another place is a mistake to
        # report, not to ignore.
        if device is not None:
            name = device_name(device)
            if name != model.device:
                raise ValueError(
                    f"device {name!r}, but the model is on {model.device}: pass device={model.device!r} "
                    f"(or None), or load the model there with load_model(..., device={name!r})"
                )
        return model
    if model is None or isinstance(model, (str, os.PathLike)):
        # Upstream loads the model on every call; a loop over proteins loads it once here.
        return _cached_model(os.fspath(model) if model else None, device_name(device), attention_type)
    raise TypeError(
        f"model: a {type(model).__name__} cannot run here; pass a path, a Hub id or a model from load_model()"
    )


def _check_options(temperature: Any, top_p: Any, num_sequences: Any, deterministic: bool) -> None:
    # Upstream's checks, in its order and words, before anything is loaded.
    if not isinstance(temperature, (float, int)) or temperature <= 0:
        raise ValueError("Temperature must be a positive float.")
    if not isinstance(top_p, (float, int)) or not 0 < top_p <= 1.0:
        raise ValueError("top_p must be a float between 0 and 1.")
    if not isinstance(num_sequences, int) or num_sequences < 1:
        raise ValueError("num_sequences must be a positive integer.")
    if num_sequences > MAX_NUM_SEQUENCES:
        raise ValueError(
            f"num_sequences {num_sequences}: at most {MAX_NUM_SEQUENCES} sequences per protein "
            "(the codon program's and the service's limit)"
        )
    if deterministic and num_sequences > 1:
        raise ValueError("Multiple sequences can only be generated in non-deterministic mode.")


def _design_kwargs(
    avoid_sites: Union[None, str, Sequence[str]],
    avoid_motifs: Optional[Sequence[str]],
    gc_window: Optional[Tuple[int, float, float]],
    max_homopolymer: Optional[int],
    max_repeat: Optional[int],
    best_effort: bool,
) -> Dict[str, Any]:
    if isinstance(avoid_sites, str):
        avoid_sites = [s for s in avoid_sites.split(",") if s]
    if isinstance(avoid_motifs, str):
        avoid_motifs = [avoid_motifs]
    return {
        "avoid_sites": list(avoid_sites or []),
        "avoid_motifs": list(avoid_motifs or []),
        "gc_window": tuple(gc_window) if gc_window is not None else None,
        "max_homopolymer": max_homopolymer,
        "max_repeat": max_repeat,
        "best_effort": best_effort,
    }


def _prediction(d: Dict[str, Any]) -> DNASequencePrediction:
    return DNASequencePrediction(**d)


def _predict(
    proteins: List[str],
    organisms: List[Organism],
    device: Any,
    tokenizer: Union[None, str, Tokenizer],
    model: Union[None, str, Model],
    attention_type: str,
    deterministic: bool,
    temperature: float,
    top_p: float,
    num_sequences: int,
    match_protein: bool,
    seed: Optional[int],
    known_dna: Optional[List[Optional[str]]],
    design: Dict[str, Any],
    progress: Progress = False,
) -> List[Union[BaseException, List[DNASequencePrediction]]]:
    """Per protein, its predictions or the exception its input raised."""
    _check_options(temperature, top_p, num_sequences, deterministic)
    if tokenizer is not None and not isinstance(tokenizer, Tokenizer):
        load_tokenizer(tokenizer)
    runner = _model_for(model, device, attention_type)
    with reporter(progress, len(proteins), "protein", "predict_dna_sequences") as report:
        results = runner.predict(
            proteins,
            organisms,
            deterministic=deterministic,
            temperature=float(temperature),
            top_p=float(top_p),
            num_sequences=num_sequences,
            match_protein=match_protein,
            seed=random.getrandbits(63) if seed is None else seed,
            attention_type=attention_type,
            known_dna=known_dna,
            progress=report,
            **_design_kwargs(**design),
        )
    return [each if isinstance(each, BaseException) else [_prediction(d) for d in each] for each in results]


def predict_dna_sequences(
    proteins: Sequence[str],
    organisms: Union[Organism, Sequence[Organism]],
    device: Any = None,
    tokenizer: Union[None, str, Tokenizer] = None,
    model: Union[None, str, Model] = None,
    attention_type: str = "original_full",
    deterministic: bool = True,
    temperature: float = 0.2,
    top_p: float = 0.95,
    num_sequences: int = 1,
    match_protein: bool = False,
    *,
    seed: Optional[int] = None,
    known_dna: Optional[Sequence[Optional[str]]] = None,
    avoid_sites: Union[None, str, Sequence[str]] = None,
    avoid_motifs: Optional[Sequence[str]] = None,
    gc_window: Optional[Tuple[int, float, float]] = None,
    max_homopolymer: Optional[int] = None,
    max_repeat: Optional[int] = None,
    best_effort: bool = False,
    progress: Progress = None,
) -> List[Union[DNASequencePrediction, List[DNASequencePrediction]]]:
    """Predict DNA for many proteins at once, batching proteins of similar length.

    ``organisms`` is one organism (name or id) for every protein, or one per protein. Results keep
    the input order: a ``DNASequencePrediction`` per protein, or a list of them when
    ``num_sequences > 1``. A protein that cannot be predicted raises its exception (upstream's
    type), its message prefixed with its index.

    Design: ``known_dna`` (per protein, DNA with ``NNN`` at each codon to predict, or ``None``)
    keeps the given codons; ``avoid_sites`` (enzyme names), ``avoid_motifs`` (IUPAC),
    ``gc_window`` (window, lowest %, highest %), ``max_homopolymer`` and ``max_repeat`` are met by
    the cheapest synonymous changes under the model's scores; ``best_effort`` keeps a sequence
    whose constraints cannot all be met and lists what is left. ``seed`` fixes the sampler
    (``None``: a new seed each call, as upstream's unseeded sampling).

    Progress is reported after each chunk of about one forward pass: ``progress=None`` shows a
    tqdm bar when tqdm is installed and the session is interactive (Jupyter, IPython, a
    terminal), ``True`` always shows one (a line on stderr without tqdm), ``False`` none, and a
    callable is called as ``progress(done, total)``. Ctrl-C (``KeyboardInterrupt``) stops the call
    at the next chunk.
    """
    proteins = _sequence_of_strings("proteins", proteins)
    if known_dna is not None:
        known_dna = _sequence_of_strings("known_dna", known_dna)
    if isinstance(organisms, (str, int)):
        organisms = [organisms] * len(proteins)
    design = dict(avoid_sites=avoid_sites, avoid_motifs=avoid_motifs, gc_window=gc_window,
                  max_homopolymer=max_homopolymer, max_repeat=max_repeat, best_effort=best_effort)
    results = _predict(proteins, list(organisms), device, tokenizer, model, attention_type, deterministic,
                       temperature, top_p, num_sequences, match_protein, seed,
                       None if known_dna is None else list(known_dna), design, progress)
    out = []
    for i, each in enumerate(results):
        if isinstance(each, BaseException):
            raise type(each)(f"proteins[{i}]: {each}") from None
        out.append(each[0] if num_sequences == 1 else each)
    return out


def predict_dna_sequence(
    protein: str,
    organism: Organism,
    device: Any = None,
    tokenizer: Union[None, str, Tokenizer] = None,
    model: Union[None, str, Model] = None,
    attention_type: str = "original_full",
    deterministic: bool = True,
    temperature: float = 0.2,
    top_p: float = 0.95,
    num_sequences: int = 1,
    match_protein: bool = False,
    *,
    seed: Optional[int] = None,
    known_dna: Optional[str] = None,
    avoid_sites: Union[None, str, Sequence[str]] = None,
    avoid_motifs: Optional[Sequence[str]] = None,
    gc_window: Optional[Tuple[int, float, float]] = None,
    max_homopolymer: Optional[int] = None,
    max_repeat: Optional[int] = None,
    best_effort: bool = False,
) -> Union[DNASequencePrediction, List[DNASequencePrediction]]:
    """Upstream's ``predict_dna_sequence``: the DNA the model predicts for ``protein`` in
    ``organism`` (a name or an id), one ``DNASequencePrediction``, or a list when
    ``num_sequences > 1``.

    ``model`` is a model from ``load_model``, a path or Hub id (loaded once and kept), or
    ``None`` for upstream's published model. Bad input raises upstream's ``ValueError`` with
    upstream's message. The keyword-only arguments are ``predict_dna_sequences``' design options.
    """
    if not protein:
        raise ValueError("Protein sequence cannot be empty.")
    design = dict(avoid_sites=avoid_sites, avoid_motifs=avoid_motifs, gc_window=gc_window,
                  max_homopolymer=max_homopolymer, max_repeat=max_repeat, best_effort=best_effort)
    (each,) = _predict([protein], [organism], device, tokenizer, model, attention_type, deterministic,
                       temperature, top_p, num_sequences, match_protein, seed,
                       None if known_dna is None else [known_dna], design)
    if isinstance(each, BaseException):
        raise each
    return each[0] if num_sequences == 1 else each


def score_dna_sequences(
    dna_sequences: Sequence[str],
    organisms: Union[Organism, Sequence[Organism]],
    device: Any = None,
    model: Union[None, str, Model] = None,
    attention_type: str = "original_full",
    match_protein: bool = False,
    *,
    progress: Progress = None,
) -> List[SequenceScore]:
    """How likely the model finds each coding sequence in its organism: one forward pass over its
    protein, as prediction makes, then the log-likelihood of its own codons. A sequence that is
    not a coding sequence raises ``ValueError``, its message prefixed with its index. ``progress``
    is ``predict_dna_sequences``'."""
    dna_sequences = _sequence_of_strings("dna_sequences", dna_sequences)
    if isinstance(organisms, (str, int)):
        organisms = [organisms] * len(dna_sequences)
    runner = _model_for(model, device, attention_type)
    with reporter(progress, len(dna_sequences), "sequence", "score_dna_sequences") as report:
        scores = runner.score(dna_sequences, list(organisms), match_protein=match_protein,
                              attention_type=attention_type, progress=report)
    out = []
    for i, each in enumerate(scores):
        if isinstance(each, BaseException):
            raise type(each)(f"dna_sequences[{i}]: {each}") from None
        out.append(SequenceScore(**each))
    return out
