#!/usr/bin/env python3
"""By hand, not in CI: an exported ONNX file through the ONNX project's own checker and
onnxruntime, against transformers' full-attention logits of the BigBird fixtures.

    pip install onnx onnxruntime safetensors numpy
    codon export --model tests/fixtures/bigbird --output /tmp/fixture.onnx [--dtype f16]
    python3 tools/check_onnx.py /tmp/fixture.onnx
"""
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from safetensors.numpy import load_file

path = Path(sys.argv[1])
onnx.checker.check_model(str(path), full_check=True)
session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
fixtures = Path(__file__).resolve().parent.parent / "tests/fixtures/bigbird"
worst = 0.0
for case in ["case_short_b2_24", "case_pad_b2_45", "case_even_b2_64"]:
    inputs = load_file(fixtures / case / "inputs.safetensors")
    feed = {k: inputs[k].astype(np.int64) for k in ["input_ids", "attention_mask", "token_type_ids"]}
    (logits,) = session.run(["logits"], feed)
    want = load_file(fixtures / case / "full_eval.safetensors")["logits"]
    difference = float(np.abs(logits.astype(np.float32) - want).max() / np.abs(want).max())
    worst = max(worst, difference)
    print(f"{case}: max |onnxruntime - transformers| / max |logit| = {difference:.2e}")
print(f"onnx.checker passed; onnxruntime {onnxruntime.__version__}; worst {worst:.2e}")
