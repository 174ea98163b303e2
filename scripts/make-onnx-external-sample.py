#!/usr/bin/env python3
"""Regenerate testdata/onnx-external/ (a REAL ONNX model whose large tensors
live in an external data file) from testdata/onnx/silero_vad_half.onnx.

    ~/.cache/brevis-data/venv/bin/python scripts/make-onnx-external-sample.py [--check]

Needs the `onnx` package (pip install onnx; made with 1.23.2). The model is
loaded and saved by onnx's own external-data writer, as exporters do for
models over 2 GB:
  convert_model_to_external_data(all_tensors_to_one_file=True,
      location="silero_vad_half.onnx_data", size_threshold=1024)
so each tensor of 1 KiB or more (9 of them, 1.24 MB) moves to
silero_vad_half.onnx_data, named in the model by `external_data` entries
(location, offset, length); the small ones stay inline. Deterministic.
With --check, the files are rebuilt in a temporary folder and compared.
"""
import argparse
import hashlib
import json
import os
import sys
import tempfile

import onnx
from onnx.external_data_helper import convert_model_to_external_data

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testdata_out import write_or_check  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SRC = os.path.join(REPO, "testdata", "onnx", "silero_vad_half.onnx")
OUT = os.path.join(REPO, "testdata", "onnx-external")
MODEL = "silero_vad_half.onnx"
DATA_FILE = "silero_vad_half.onnx_data"


def build(to):
    m = onnx.load(SRC)
    convert_model_to_external_data(m, all_tensors_to_one_file=True, location=DATA_FILE, size_threshold=1024)
    onnx.save_model(m, os.path.join(to, MODEL))
    files = {}
    for k in (MODEL, DATA_FILE):
        with open(os.path.join(to, k), "rb") as f:
            files[k] = f.read()
    with open(SRC, "rb") as f:
        src = f.read()
    source = {
        "source": {
            "package": "pypi:silero-vad==6.2.3",
            "license": "MIT",
            "original": "silero_vad/data/silero_vad_half.onnx (= testdata/onnx/silero_vad_half.onnx)",
            "conversion": f"onnx {onnx.__version__} convert_model_to_external_data(all_tensors_to_one_file=True, "
                          f"location={DATA_FILE!r}, size_threshold=1024) + save_model",
        },
        "source_sha256": hashlib.sha256(src).hexdigest(),
        "files": {k: {"bytes": len(v), "sha256": hashlib.sha256(v).hexdigest()} for k, v in files.items()},
    }
    files["SOURCE.json"] = (json.dumps(source, indent=1) + "\n").encode()
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed files")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as t:
        files = build(t)
    write_or_check(files, OUT, args.check)

if __name__ == "__main__":
    main()
