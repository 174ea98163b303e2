#!/usr/bin/env python3
"""The default budget's speed cost, interleaved: the share of budget-0 compress speed
the default budget keeps, for one or more brevis-hub builds on one model,
one thread (or -T N), the model's fixed prior (learned once by the first build into
--priors). Every round runs each build at budget 0 and at the default in
turn, so the VM's slow stretches fall on all of them alike (ablation.py runs
its configurations one after another, and a slow stretch lands on one row);
the fastest and the median of each are reported, CPU time (perf stat
task-clock) and wall time. Nothing is asserted.

    python3 bench/budget-share.py -r 9 --model human-tfjs old/brevis-hub target/release/brevis-hub
"""
import argparse, glob, os, statistics, subprocess, tempfile, time

MODELS = os.path.expanduser("~/.cache/brevis-data/models")


def run(cmd):
    t = time.perf_counter()
    p = subprocess.run(["perf", "stat", "-x,", "-e", "task-clock", *cmd], capture_output=True, text=True)
    wall = (time.perf_counter() - t) * 1000
    if p.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    cpu = float([l for l in p.stderr.splitlines() if "task-clock" in l][0].split(",")[0])
    return cpu, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bins", nargs="+", help="brevis-hub builds")
    ap.add_argument("--model", default="human-tfjs", help="model folder under " + MODELS)
    ap.add_argument("-r", "--rounds", type=int, default=9)
    ap.add_argument("--budget", default="24", help="the default budget")
    ap.add_argument("-T", "--threads", default="1", help="threads (0: all cores, the binary's default)")
    ap.add_argument("--priors", default=os.path.join(tempfile.gettempdir(), "brevis-ab-priors"))
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(MODELS, a.model, "**", "*.safetensors"), recursive=True))
    if not files:
        raise SystemExit(f"no safetensors under {os.path.join(MODELS, a.model)} (scripts/fetch-models.sh)")
    os.makedirs(a.priors, exist_ok=True)
    prior = os.path.join(a.priors, a.model + ".json")
    if not os.path.exists(prior):
        subprocess.run([a.bins[0], "prior", "learn", "-q", "-f", "-o", prior, *files], check=True)
    times = {(b, k): [] for b in a.bins for k in ("0", a.budget)}
    with tempfile.TemporaryDirectory() as out:
        for _ in range(a.rounds):
            for b in a.bins:
                for k in ("0", a.budget):
                    times[(b, k)].append(run([b, "compress", "-q", "-f", "-T", a.threads, "--no-verify",
                                              "--prior", prior, "--budget", k, "-o", out + "/", *files]))
    print(f"{a.model}, {a.rounds} rounds, -T {a.threads}: budget 0 and {a.budget}, ms (fastest / median); share kept")
    for b in a.bins:
        row = []
        for i, what in ((0, "cpu"), (1, "wall")):
            z = [t[i] for t in times[(b, "0")]]
            d = [t[i] for t in times[(b, a.budget)]]
            row.append(f"{what} {min(z):.0f}/{statistics.median(z):.0f} vs {min(d):.0f}/{statistics.median(d):.0f}: "
                       f"{min(z) / min(d):.1%} (median {statistics.median(z) / statistics.median(d):.1%})")
        print(f"{b}\n  " + "\n  ".join(row))


if __name__ == "__main__":
    main()
