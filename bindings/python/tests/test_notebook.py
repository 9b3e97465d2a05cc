"""Notebook habits: a long batch reports its progress and stops on Ctrl-C (KeyboardInterrupt);
a CPU-only build asked for a GPU says in one line which build to install and how."""

import _thread
import math
import sys
import threading
import time
import types

import pytest

from codon_ascend import CodonPrediction, _native
from conftest import REPO, TINY_MODEL

PROTEIN = "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRVGDGTQDNLSGAEKAVQVKVKALPDAQFEVVHSLAKWKRQTLGQHDFSAGEG"
# 1,000 proteins of 8 to 60 residues, about 36,000 tokens: some 35 chunks of 1,024 tokens on the
# CPU. Short, so that the aarch64 run under qemu-user (a hundred times slower) stays short.
BATCH = [PROTEIN[: 8 + (i * 7) % 53] for i in range(1000)]


@pytest.fixture(scope="module")
def timed_batch(tiny_model):
    """The 1,000-protein batch run once with a progress callback: its results, the callback's
    calls, and the times (from the start) at which they came."""
    calls, times = [], []

    def progress(done, total):
        calls.append((done, total))
        times.append(time.monotonic() - started)

    started = time.monotonic()
    out = CodonPrediction.predict_dna_sequences(BATCH, "Homo sapiens", model=tiny_model, progress=progress)
    return {"out": out, "calls": calls, "times": times, "whole_s": time.monotonic() - started}


def test_progress_is_called_after_each_chunk_of_a_1000_protein_batch(tiny_model, timed_batch):
    out, calls = timed_batch["out"], timed_batch["calls"]
    assert len(out) == 1000
    assert len(calls) > 5, calls  # one call per chunk of about one forward pass, not one at the end
    done = [d for d, _ in calls]
    assert done == sorted(set(done)) and done[-1] == 1000 and done[0] > 0, done
    assert {t for _, t in calls} == {1000}
    # The same predictions as without a callback.
    plain = CodonPrediction.predict_dna_sequences(BATCH[:40], "Homo sapiens", model=tiny_model, progress=False)
    assert [p.predicted_dna for p in plain] == [p.predicted_dna for p in out[:40]]


def test_scoring_reports_progress_too(tiny_model):
    # match_protein: the tiny random model would otherwise put stop codons inside some sequences.
    dna = [p.predicted_dna for p in CodonPrediction.predict_dna_sequences(BATCH[:300], "Homo sapiens",
                                                                          model=tiny_model, match_protein=True)]
    calls = []
    scores = CodonPrediction.score_dna_sequences(dna, "Homo sapiens", model=tiny_model,
                                                 progress=lambda done, total: calls.append((done, total)))
    assert len(scores) == 300 and len(calls) > 2 and calls[-1] == (300, 300)


def test_an_exception_from_the_callback_stops_the_batch(tiny_model):
    class Stop(Exception):
        pass

    calls = []

    def stop(done, total):
        calls.append(done)
        raise Stop(done)

    with pytest.raises(Stop):
        CodonPrediction.predict_dna_sequences(BATCH, "Homo sapiens", model=tiny_model, progress=stop)
    assert len(calls) == 1


def test_progress_true_draws_a_tqdm_bar_or_a_line_without_tqdm(tiny_model, capsys, monkeypatch):
    # Without tqdm (the test venv has none): one line on stderr, rewritten in place.
    monkeypatch.setitem(sys.modules, "tqdm", None)
    CodonPrediction.predict_dna_sequences(BATCH[:100], "Homo sapiens", model=tiny_model, progress=True)
    err = capsys.readouterr().err
    assert err.startswith("\rpredict_dna_sequences: ") and err.endswith("100/100 proteins\n"), err[-200:]
    assert err.count("\r") > 1, err  # rewritten after each chunk

    # With tqdm: tqdm.auto's bar, moved to the total and closed.
    bars = []

    class FakeBar:
        def __init__(self, total, unit, desc):
            self.total, self.unit, self.desc, self.n, self.closed = total, unit, desc, 0, False
            bars.append(self)

        def update(self, n):
            self.n += n

        def close(self):
            self.closed = True

    tqdm = types.ModuleType("tqdm")
    auto = types.ModuleType("tqdm.auto")
    auto.tqdm = FakeBar
    tqdm.auto = auto
    monkeypatch.setitem(sys.modules, "tqdm", tqdm)
    monkeypatch.setitem(sys.modules, "tqdm.auto", auto)
    CodonPrediction.predict_dna_sequences(BATCH[:100], "Homo sapiens", model=tiny_model, progress=True)
    (bar,) = bars
    assert (bar.total, bar.n, bar.unit, bar.closed) == (100, 100, "protein", True)
    # By default, a bar only where someone watches: pytest's captured stderr is no terminal.
    CodonPrediction.predict_dna_sequences(BATCH[:100], "Homo sapiens", model=tiny_model)
    assert len(bars) == 1 and capsys.readouterr().err == ""


def test_a_progress_that_is_not_callable_is_refused(tiny_model):
    with pytest.raises(TypeError, match="progress"):
        CodonPrediction.predict_dna_sequences(["MKV"], "Homo sapiens", model=tiny_model, progress="yes")
    with pytest.raises(TypeError, match="progress"):
        tiny_model.predict(["MKV"], ["Homo sapiens"], progress=3)


@pytest.mark.parametrize("with_progress", [False, True], ids=["no progress", "progress callback"])
def test_an_interrupt_mid_batch_raises_keyboard_interrupt_within_a_chunk(tiny_model, timed_batch, with_progress,
                                                                          record_property):
    # Ctrl-C as a notebook's "interrupt kernel" delivers it: the interrupt is set
    # (_thread.interrupt_main), here by another thread a quarter of the way through the batch. That
    # thread only runs if the call released the GIL; without a progress callback (Python code,
    # where the interpreter checks for signals itself) the call only stops early if it runs the
    # signal handlers between chunks itself.
    times = timed_batch["times"]
    chunk = max(b - a for a, b in zip([0.0] + times, times))
    # At least 1,000 proteins, and at least 2 s of them (the batch again where a CPU is fast).
    repeat = max(1, math.ceil(2.0 / timed_batch["whole_s"]))
    whole = repeat * timed_batch["whole_s"]
    progress = (lambda done, total: None) if with_progress else False
    sent = {}

    def interrupt():
        time.sleep(whole / 4)
        sent["at"] = time.monotonic()
        _thread.interrupt_main()

    interrupter = threading.Thread(target=interrupt, daemon=True)
    outcome = {}
    try:
        started = time.monotonic()
        interrupter.start()
        CodonPrediction.predict_dna_sequences(BATCH * repeat, "Homo sapiens", model=tiny_model, progress=progress)
        outcome["returned_s"] = time.monotonic() - started
        interrupter.join()  # an interrupt that comes after the call is raised here, not in pytest
        time.sleep(0.5)
    except KeyboardInterrupt:
        outcome["latency_s"] = time.monotonic() - sent["at"]
    interrupter.join()
    record_property("interrupt_latency_s", outcome.get("latency_s"))
    print(f"{1000 * repeat} proteins, about {whole:.2f} s in chunks of up to {chunk * 1000:.0f} ms; interrupted "
          f"{sent['at'] - started:.2f} s in; {outcome}")
    # Raised from inside the call, which never returned, within about one chunk of the interrupt
    # (without the signal check, at the end of the batch: three quarters of it later).
    assert "returned_s" not in outcome and "latency_s" in outcome, outcome
    assert outcome["latency_s"] < max(0.25 * whole, 3 * chunk), (outcome, whole, chunk)


@pytest.mark.skipif(getattr(_native, "CUDA", False), reason="the GPU build opens cuda:0")
def test_the_cpu_only_build_asked_for_a_gpu_says_which_build_to_install_and_how():
    with pytest.raises(RuntimeError) as error:
        CodonPrediction.load_model(str(TINY_MODEL), device="cuda:0")
    message = str(error.value)
    assert "\n" not in message and message.startswith("cuda:0: this codon_ascend is the CPU-only build"), message
    command = message.split("`")[1]  # the command, between backticks, is a file of the checkout
    assert command == "bindings/python/install-gpu.sh" and (REPO / command).is_file(), message
    assert "docs/python.md" in message
    with pytest.raises(RuntimeError, match="CPU-only build"):
        CodonPrediction.predict_dna_sequence("MKV", "Homo sapiens", "cuda:1", model=str(TINY_MODEL))
