"""Helpers shared by the side-by-side comparison scripts in this folder."""
import json
import subprocess
import sys


def have_torch():
    """Whether torch and transformers can be imported."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        return True
    except ImportError:
        print("torch/transformers not installed: reporting this crate only")
        return False


def ours(example, args):
    """Run one of `codon dev`'s timing tools; its last stdout line is a JSON object."""
    tool = example.replace("_", "-")
    out = subprocess.run(["cargo", "run", "--quiet", "--release", "--", "dev", tool, *map(str, args)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def python_snippet(snippet, args):
    """Run a torch snippet in a fresh interpreter; None (with the error's last line) if it fails."""
    out = subprocess.run([sys.executable, "-c", snippet, *map(str, args)], capture_output=True, text=True)
    if out.returncode != 0:
        print("torch failed:", out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def median_run(runs):
    """The run with the median `median_s`."""
    runs = sorted(runs, key=lambda r: r["median_s"])
    return runs[len(runs) // 2]
