#!/usr/bin/env python3
"""Search ablation: learned prior vs uniform prior; budget 0, the
default and 8x the default. For each model folder: archive ratio, compress
MB/s (one thread, whole process, --no-verify), candidates judged by the search,
search seconds, and the time to learn the prior as a share of the time to
compress the model with it. Prints a markdown table; nothing is asserted.

    python3 bench/ablation.py ~/.cache/brevis-data/models/{astra-i3resnet152-bf16,minilm-l6-v2}
"""
import json, os, subprocess, sys, tempfile, time, glob

BIN = os.environ.get("BREVIS_BIN", os.path.join(os.path.dirname(__file__), "..", "target", "release", "brevis-hub"))
DEFAULT = 24
# Each configuration runs REPEAT times; the fastest run counts (the machine's
# noise only ever slows a run down, and budget 0 is mostly file I/O).
REPEAT = int(os.environ.get("REPEAT", "3"))


def files_of(p):
    if os.path.isdir(p):
        return sorted(glob.glob(os.path.join(p, "**", "*.safetensors"), recursive=True))
    return [p]


def compress(files, out, extra):
    runs = [compress_once(files, out, extra) for _ in range(REPEAT)]
    return min(runs, key=lambda r: r[2])


def compress_once(files, out, extra):
    t = time.perf_counter()
    r = subprocess.run([BIN, "compress", "-q", "-f", "-T", "1", "--no-verify", "--json", "-o", out + "/", *extra, *files],
                       capture_output=True, text=True)
    secs = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"compress failed: {r.stderr}")
    j = json.loads(r.stdout)
    judged = sum(f["candidates_judged"] for f in j["files"])
    search = sum(f["search_seconds"] for f in j["files"])
    return j["original_bytes"], j["archive_bytes"], secs, judged, search


def main():
    rows = []
    for model in sys.argv[1:]:
        files = files_of(model)
        name = os.path.basename(model.rstrip("/"))
        with tempfile.TemporaryDirectory() as tmp:
            prior = os.path.join(tmp, "prior.json")
            t = time.perf_counter()
            subprocess.run([BIN, "prior", "learn", "-q", "-f", "-o", prior, *files], check=True)
            learn = time.perf_counter() - t
            runs = [
                ("uniform, budget 0", ["--no-prior", "--budget", "0"]),
                (f"uniform, budget {DEFAULT}", ["--no-prior"]),
                (f"uniform, budget {DEFAULT * 8}", ["--no-prior", "--budget", str(DEFAULT * 8)]),
                ("learned, budget 0", ["--prior", prior, "--budget", "0"]),
                (f"learned, budget {DEFAULT}", ["--prior", prior]),
                (f"learned, budget {DEFAULT * 8}", ["--prior", prior, "--budget", str(DEFAULT * 8)]),
            ]
            for label, extra in runs:
                out = os.path.join(tmp, "out")
                os.makedirs(out, exist_ok=True)
                orig, arch, secs, judged, search = compress(files, out, extra)
                rows.append((name, label, arch / orig, orig / 1e6 / secs, judged, search, secs, learn if label.startswith("learned, budget 24") else None))
    print(f"Fastest of {REPEAT} runs per row. 'of budget 0': compress speed as a share of the same prior's budget-0 speed.")
    print()
    print("| model | search | ratio | compress MB/s (1T) | of budget 0 | candidates judged | search s | prior learn s (share of compress) |")
    print("|---|---|---|---|---|---|---|---|")
    base = {}
    for name, label, ratio, mbs, judged, search, secs, learn in rows:
        prior_kind, budget = label.split(", budget ")
        if budget == "0":
            base[(name, prior_kind)] = mbs
        keep = f"{mbs / base[(name, prior_kind)]:.0%}" if budget != "0" else ""
        share = f"{learn:.2f} ({learn / secs:.0%})" if learn is not None else ""
        print(f"| {name} | {label} | {ratio:.4f} | {mbs:.1f} | {keep} | {judged} | {search:.2f} | {share} |")


if __name__ == "__main__":
    main()
