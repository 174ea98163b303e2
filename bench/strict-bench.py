#!/usr/bin/env python3
"""Hub-flow timings against `brevis-hub serve --strict`.

    python3 bench/strict-bench.py BIN MODEL_DIR [--cdn-rate 50MB/s]
                                    [--s3-rate 20MB/s] [-r 3] [--json]

1. pull through a CDN capped per connection: the default ranged chunks
   (BREVIS_DOWNLOAD_CONNECTIONS unset) against one stream
   (BREVIS_DOWNLOAD_CONNECTIONS=1), runs alternated, fresh caches;
2. mirror (--jobs 1) with uploads read at --s3-rate: wall time beside its
   two phases alone: the same mirror with S3 unthrottled (download, prior,
   compression, proof) and the upload at the S3 rate (bytes / rate);
3. time to fail without write permission (a read-only token).

Everything runs on 127.0.0.1 in a temp folder, removed at the end.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def start(bin_, root, seed, args):
    p = subprocess.Popen(
        [bin_, "serve", "--root", root, "--addr", "127.0.0.1:0", "--strict",
         "--token", "w", "--read-token", "r", "--seed", f"org/model={seed}", *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    if not line.startswith("listening on "):
        p.kill()
        sys.exit(f"serve did not start: {line!r}")
    return p, line.split()[-1]


def run(bin_, args, env, expect_fail=False):
    t = time.perf_counter()
    r = subprocess.run([bin_, *args], env=env, capture_output=True, text=True)
    took = time.perf_counter() - t
    if (r.returncode != 0) != expect_fail:
        sys.exit(f"{' '.join(args)}: exit {r.returncode}:\n{r.stderr[-2000:]}")
    return took, r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("model")
    ap.add_argument("--cdn-rate", default="50MB/s")
    ap.add_argument("--s3-rate", default="20MB/s")
    ap.add_argument("-r", "--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="brevis-strict-bench.")
    caps = ["--cdn-rate", a.cdn_rate, "--s3-rate", a.s3_rate]
    out = {}
    try:
        base = dict(os.environ, HF_HOME=os.path.join(tmp, "home"))
        for k in ("HF_TOKEN", "HF_ENDPOINT", "BREVIS_DOWNLOAD_CONNECTIONS", "BREVIS_CHUNK_SIZE"):
            base.pop(k, None)
        srv, url = start(a.bin, os.path.join(tmp, "store"), a.model, caps)
        try:
            env = dict(base, HF_ENDPOINT=url, HF_TOKEN="w")
            # 3. No write permission: fails before any download.
            t, r = run(a.bin, ["mirror", "org/model", "--to", "org/nope-brevis", "--token", "r"],
                       env, expect_fail=True)
            out["fail_without_write_s"] = round(t, 2)
            out["fail_message"] = r.stderr.strip().splitlines()[-1][:240]
            # 2. Mirror with throttled uploads, each run on a fresh store
            # (objects already there are not sent), beside its phases alone.
            # One upload at a time (--jobs 1), so uploading alone takes
            # bytes / rate; "the rest" is the same mirror with S3 unthrottled
            # (download, prior, compression, proof).
            def mirror_runs(throttled):
                walls, sent = [], 0
                for i in range(a.runs):
                    root = os.path.join(tmp, f"store-{throttled}-{i}")
                    s2, u2 = start(a.bin, root, a.model,
                                   caps if throttled else ["--cdn-rate", a.cdn_rate])
                    try:
                        t, r = run(a.bin, ["mirror", "org/model", "--to", "org/m-brevis", "--json",
                                           "--jobs", "1", "--work-dir",
                                           os.path.join(tmp, f"mw-{throttled}-{i}")],
                                   dict(env, HF_ENDPOINT=u2))
                    finally:
                        s2.kill()
                        s2.wait()
                        shutil.rmtree(root, ignore_errors=True)
                    walls.append(t)
                    sent = json.loads(r.stdout).get("uploaded_bytes", 0)
                return walls, sent
            rest, _ = mirror_runs(False)
            walls, sent = mirror_runs(True)
            upload = sent / parse_rate(a.s3_rate)
            c = statistics.median(rest)
            out["mirror"] = {
                "wall_s": [round(x, 2) for x in walls],
                "rest_unthrottled_s": [round(x, 2) for x in rest],
                "upload_alone_s": round(upload, 2),
                "uploaded_bytes": sent,
                "sum_of_phases_s": round(c + upload, 2),
                "slower_phase_s": round(max(c, upload), 2),
            }
            # 1. Pull: ranged chunks against one stream, alternated.
            run(a.bin, ["mirror", "org/model", "--to", "org/m-brevis", "-q",
                        "--work-dir", os.path.join(tmp, "mw")], env)
            times = {"ranged": [], "one_stream": []}
            for i in range(a.runs):
                for name, extra in (("ranged", {}),
                                    ("one_stream", {"BREVIS_DOWNLOAD_CONNECTIONS": "1"})):
                    cache = os.path.join(tmp, f"cache-{name}-{i}")
                    t, _ = run(a.bin, ["pull", "org/m-brevis", "--cache-dir", cache, "-q",
                                       "--work-dir", os.path.join(tmp, f"pw-{name}-{i}")],
                               dict(env, **extra))
                    times[name].append(t)
                    shutil.rmtree(cache, ignore_errors=True)
            out["pull"] = {k: [round(x, 2) for x in v] for k, v in times.items()}
            out["pull"]["speedup_median"] = round(
                statistics.median(times["one_stream"]) / statistics.median(times["ranged"]), 2)
        finally:
            srv.kill()
            srv.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k}: {v}")


def parse_rate(s):
    s = s.strip().removesuffix("/s")
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 10**3, "MB": 10**6, "GB": 10**9, "B": 1}
    for u, m in units.items():
        if s.endswith(u):
            return float(s[: -len(u)]) * m
    return float(s)


if __name__ == "__main__":
    main()
