#!/usr/bin/env python3
"""A/B of a codec change: archive bytes and CPU time per model, one thread,
each model with a fixed prior (learned once, by the first binary, into
--priors), and each file's archive against zstd -19 and ZipNN from a
`bench/bench.py --json` report. Nothing is asserted; the machine's noise
is 3-10% on CPU time, so alternate binaries and take the fastest of a few
runs (-r) before believing a difference.

    python3 bench/ab.py --bench /tmp/bench.json old/brevis-hub new/brevis-hub
    python3 bench/ab.py -r 3 --models human-tfjs,astra-i3resnet152-bf16 A B
"""
import argparse, glob, json, os, subprocess, sys, tempfile

MODELS = os.path.expanduser("~/.cache/brevis-data/models")


def cpu_ms(cmd):
    p = subprocess.run(["perf", "stat", "-x,", "-e", "task-clock", *cmd], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    line = [l for l in p.stderr.splitlines() if "task-clock" in l][0]
    return float(line.split(",")[0]), p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bins", nargs="+", help="brevis-hub binaries to compare")
    ap.add_argument("--models", default="", help="comma-separated model folders under " + MODELS)
    ap.add_argument("--bench", help="bench.py --json report: per-file zstd -19 and ZipNN bytes")
    ap.add_argument("--priors", default=os.path.join(tempfile.gettempdir(), "brevis-ab-priors"))
    ap.add_argument("-r", "--runs", type=int, default=2, help="runs per binary and model (fastest counts)")
    a = ap.parse_args()
    models = a.models.split(",") if a.models else sorted(
        d for d in os.listdir(MODELS) if os.path.isdir(os.path.join(MODELS, d)))
    ref = {}
    if a.bench:
        for m in json.load(open(a.bench))["models"]:
            for f in m["files"]:
                ref[(m["model"], os.path.basename(f["file"]))] = (f["zstd-19"]["bytes"], f["zipnn"]["bytes"])
    os.makedirs(a.priors, exist_ok=True)
    with tempfile.TemporaryDirectory() as out:
        for m in models:
            files = sorted(glob.glob(os.path.join(MODELS, m, "**", "*.safetensors"), recursive=True))
            prior = os.path.join(a.priors, m + ".json")
            if not os.path.exists(prior):
                subprocess.run([a.bins[0], "prior", "learn", "-q", "-f", "-o", prior, *files], check=True)
            best = {b: None for b in a.bins}
            report = {}
            for _ in range(a.runs):
                for b in a.bins:  # alternated
                    ms, stdout = cpu_ms([b, "compress", "-q", "-f", "-T", "1", "--no-verify", "--json",
                                         "-o", out + "/", "--prior", prior, *files])
                    best[b] = ms if best[b] is None else min(best[b], ms)
                    report[b] = json.loads(stdout)
            for b in a.bins:
                j = report[b]
                label = "/".join(os.path.abspath(b).split("/")[-2:])
                line = f"{m:24s} {label:28s} " \
                       f"{j['archive_bytes']:>11d} {j['archive_bytes'] / j['original_bytes']:.5f} " \
                       f"cpu {best[b]:7.0f} ms judged {sum(f['candidates_judged'] for f in j['files']):5d}"
                if ref:
                    z = max(((f["archive_bytes"] / ref[(m, os.path.basename(f["input"]))][0], os.path.basename(f["input"]))
                             for f in j["files"] if (m, os.path.basename(f["input"])) in ref), default=None)
                    p = max(((f["archive_bytes"] / ref[(m, os.path.basename(f["input"]))][1], os.path.basename(f["input"]))
                             for f in j["files"] if (m, os.path.basename(f["input"])) in ref), default=None)
                    if z and p:
                        line += f"  worst/zstd19 {z[0]:.4f} {z[1]}  worst/zipnn {p[0]:.4f} {p[1]}"
                print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
