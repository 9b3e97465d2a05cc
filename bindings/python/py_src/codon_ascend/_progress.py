"""Progress of the batch calls (``predict_dna_sequences``, ``score_dna_sequences``).

The native calls run a batch in chunks of about one forward pass and, after each chunk, call a
``progress(done, total)`` callable with the GIL held. ``reporter`` turns the ``progress=``
argument into that callable:

- ``None`` (the default): a tqdm bar (``tqdm.auto``: a widget in Jupyter) when tqdm is installed
  and the session is interactive (IPython or Jupyter, or stderr a terminal); nothing otherwise;
- ``True``: a tqdm bar, or a line on stderr rewritten in place when tqdm is not installed;
- ``False``: nothing;
- a callable: called as ``progress(done, total)`` after each chunk; an exception it raises stops
  the batch and comes out of the call.
"""

import contextlib
import sys
from typing import Any, Callable, Iterator, Optional, Union

#: What ``progress=`` takes.
Progress = Union[None, bool, Callable[[int, int], Any]]


def _tqdm() -> Optional[Any]:
    try:
        from tqdm.auto import tqdm  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return None
    return tqdm


def interactive() -> bool:
    """Whether a person is likely watching: an IPython or Jupyter session, or stderr a terminal."""
    ipython = sys.modules.get("IPython")
    get_ipython = getattr(ipython, "get_ipython", None)
    if get_ipython is not None:
        try:
            if get_ipython() is not None:
                return True
        except Exception:  # an IPython too broken to ask is not a session
            pass
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


class _Line:
    """A progress line on stderr (``what: done/total unit``), rewritten in place; for
    ``progress=True`` without tqdm."""

    def __init__(self, total: int, unit: str, what: str):
        self.total, self.unit, self.what = total, unit, what

    def update_to(self, done: int) -> None:
        stream = sys.stderr
        if stream is not None:
            stream.write(f"\r{self.what}: {done}/{self.total} {self.unit}s")
            stream.flush()

    def close(self) -> None:
        stream = sys.stderr
        if stream is not None:
            stream.write("\n")
            stream.flush()


class _Bar:
    """A tqdm bar moved to ``done`` of ``total``."""

    def __init__(self, tqdm: Any, total: int, unit: str, what: str):
        self.bar = tqdm(total=total, unit=unit, desc=what)
        self.at = 0

    def update_to(self, done: int) -> None:
        self.bar.update(done - self.at)
        self.at = done

    def close(self) -> None:
        self.bar.close()


@contextlib.contextmanager
def reporter(progress: Progress, total: int, unit: str, what: str) -> Iterator[Optional[Callable[[int, int], Any]]]:
    """The ``progress(done, total)`` callable for the native call (``None`` for none); a bar or
    line it opens is closed when the block ends, whether the call finished, failed or was
    interrupted."""
    if progress is None:
        progress = total > 0 and interactive() and _tqdm() is not None
    if progress is False or total == 0:
        yield None
        return
    if progress is True:
        tqdm = _tqdm()
        shown = _Line(total, unit, what) if tqdm is None else _Bar(tqdm, total, unit, what)
        try:
            yield lambda done, _total: shown.update_to(done)
        finally:
            shown.close()
        return
    if not callable(progress):
        raise TypeError(
            f"progress: True, False, None or a callable progress(done, total), not a {type(progress).__name__}"
        )
    yield progress
