"""Writing (or, with --check, comparing) a testdata folder's files: shared by
the make-*-sample.py scripts that build one folder in memory."""
import os
import sys


def write_or_check(files, out, check):
    """Write `files` (name -> bytes) into `out`, or compare them with what is there."""
    label = os.path.relpath(out, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if check:
        bad = []
        for k, v in files.items():
            p = os.path.join(out, k)
            if not os.path.exists(p) or open(p, "rb").read() != v:
                bad.append(k)
        if bad:
            sys.exit(f"{label}: differ: {bad}")
        print(f"{label}: same bytes")
        return
    os.makedirs(out, exist_ok=True)
    for k, v in files.items():
        with open(os.path.join(out, k), "wb") as f:
            f.write(v)
        print(f"{label}/{k}: {len(v)} bytes")
