#!/usr/bin/env bash
# bench/scale-flow.sh FOLDER [WORKERS...] : mirror at scale against a local Hub.
#
# Serves FOLDER as org/repo on a local `brevis-hub serve` (temp store, no
# token), then:
#   - one-machine: `mirror org/repo --to org/one -T 0` (all cores), timed;
#   - for each N in WORKERS (default: 1 2 4):
#       plan   `mirror --plan P.json org/repo --to org/scaled-N` (timed),
#       N workers `mirror --plan P.json --worker K/N -T $THREADS` started
#         together as background processes (wall time until the last ends),
#       status `mirror --plan P.json --status` (units done / all),
#       commit `mirror --plan P.json --commit` (timed);
#     then the one-machine mirror again on that run's own server (a
#     fresh store per run: serve keeps LFS objects by content across repos),
#     and checks that org/scaled-N's `main` tree equals org/one's (path,
#     size, oid, lfs.oid of every entry but README.md, which names its own
#     repo).
# Prints one table (N = "one" is the one-machine mirror). Exits non-zero
# when a step fails or a tree differs. The temp dir and the server go away
# on exit.
#
# Env:
#   BIN         binary (default: target/release/brevis-hub under the repo)
#   THREADS     codec threads per worker process, `-T` (default 1)
#   STEP_THREADS  `-T` of the plan and commit steps, which run alone (default 0 = all cores)
#   UNIT_BYTES  `--unit-bytes` of the plan (default: the CLI's, 64 MiB)
#   KEEP=1      keep the temp dir (logs, reports, plans) and print its path
#
# Columns: units = the plan's units; "idle" = workers whose units_built is
# 0; downloaded MB = workers' + commit's downloaded_bytes (the plan step
# reports none, though it downloads its learning set: its stderr says how
# many files); status = units done / all, by --status before the commit;
# uploaded MB = workers' + commit's uploaded_bytes; work MB = bytes under brevis.work/<plan>/ on the
# mirror's work branch brevis-work-<plan> before the commit (what plan + workers sent);
# mirror bytes = the commit report's mirror_bytes.
#
# Example:
#   bash bench/scale-flow.sh /tmp/human-repo 1 2 4
#   UNIT_BYTES=1048576 bash bench/scale-flow.sh /tmp/human-repo 2 4
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ $# -lt 1 ]; then
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
FOLDER="$(cd "$1" && pwd)"; shift
WORKERS=("$@"); [ ${#WORKERS[@]} -gt 0 ] || WORKERS=(1 2 4)
BIN="${BIN:-target/release/brevis-hub}"
case "$BIN" in /*) ;; *) BIN="$ROOT/$BIN" ;; esac
THREADS="${THREADS:-1}"
STEP_THREADS="${STEP_THREADS:-0}"
UNIT_ARGS=(); [ -z "${UNIT_BYTES:-}" ] || UNIT_ARGS=(--unit-bytes "$UNIT_BYTES")
[ -x "$BIN" ] || { echo "scale-flow: no binary at $BIN" >&2; exit 2; }

TMP="$(mktemp -d "${TMPDIR:-/tmp}/brevis-scale.XXXXXX")"
SERVER=""
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in $SERVERS; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  if [ "${KEEP:-0}" = 1 ]; then echo "scale-flow: kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

# --- JSON helpers -----------------------------------------------------------
PY="$TMP/helper.py"
cat >"$PY" <<'EOF'
import json, re, sys, urllib.request

def load(p):
    with open(p) as f:
        return json.load(f)

def tree(url, repo, rev):
    out = []
    nxt = f"{url}/api/models/{repo}/tree/{rev}?recursive=true"
    while nxt:
        with urllib.request.urlopen(nxt) as r:
            out += json.load(r)
            m = re.search(r'<([^>]+)>;\s*rel="next"', r.headers.get("Link") or "")
            nxt = m.group(1) if m else None
    return out

def key(e):
    return (e.get("type"), e.get("size"), e.get("oid"), (e.get("lfs") or {}).get("oid"))

cmd, args = sys.argv[1], sys.argv[2:]
if cmd == "get":                      # FILE KEY...  -> values, tab-separated
    d = load(args[0])
    print("\t".join(str(d.get(k, "")) for k in args[1:]))
elif cmd == "one":                    # FILE -> seconds downloaded uploaded mirror source
    d = load(args[0])
    print(d["seconds"], d["downloaded_bytes"], d["uploaded_bytes"], d["mirror_bytes"], d["source_bytes"])
elif cmd == "workers":                # FILES -> units built idle downloaded ; per-worker lines on stderr
    units = built = idle = down = up = 0
    for p in args:
        d = load(p)
        units += d["units"]; built += d["units_built"]; down += d["downloaded_bytes"]
        up += d.get("uploaded_bytes", 0)
        idle += d["units_built"] == 0
        print(f"  worker {d['worker']}: units {d['units']} built {d['units_built']} "
              f"done_before {d['units_done_before']} source {d['source_bytes']} "
              f"mirror {d['mirror_bytes']} downloaded {d['downloaded_bytes']}", file=sys.stderr)
    print(units, built, idle, down, up)
elif cmd == "status":                 # FILE -> done/all committed/all
    d = load(args[0])
    done = sum(u["state"] == "done" for u in d["units"])
    c = len(d["committed"]); t = c + len(d["uncommitted"])
    print(f"{done}/{len(d['units'])}")
elif cmd == "commit":                 # FILE -> seconds downloaded uploaded mirror
    d = load(args[0])
    ms = d["mirrors"]
    print(d["seconds"], sum(m["downloaded_bytes"] for m in ms),
          sum(m["uploaded_bytes"] for m in ms), sum(m["mirror_bytes"] for m in ms))
elif cmd == "workbytes":              # URL REPO PLANID -> bytes under brevis.work/PLANID/ on brevis-work-PLANID
    url, repo, plan = args
    try:
        t = tree(url, repo, f"brevis-work-{plan}")
    except Exception as e:
        print(f"scale-flow: no brevis-work-{plan} tree for {repo}: {e}", file=sys.stderr)
        print("-"); sys.exit(0)
    print(sum(e.get("size", 0) for e in t
              if e.get("type") == "file" and e["path"].startswith(f"brevis.work/{plan}/")))
elif cmd == "compare":                # URL_A A URL_B B -> yes/no ; differences on stderr
    ua, a, ub, b = args
    ta = {e["path"]: e for e in tree(ua, a, "main") if e["path"] != "README.md"}
    tb = {e["path"]: e for e in tree(ub, b, "main") if e["path"] != "README.md"}
    diff = []
    for p in sorted(set(ta) | set(tb)):
        if p not in ta: diff.append(f"only in {b}: {p}")
        elif p not in tb: diff.append(f"only in {a}: {p}")
        elif key(ta[p]) != key(tb[p]): diff.append(f"differs: {p}: {key(ta[p])} vs {key(tb[p])}")
    for d in diff[:20]:
        print("  " + d, file=sys.stderr)
    if len(diff) > 20:
        print(f"  ... {len(diff) - 20} more", file=sys.stderr)
    print(f"  {a} vs {b}: {len(ta)} entries vs {len(tb)}, {len(diff)} difference(s)", file=sys.stderr)
    print("yes" if not diff else "no")
EOF
py() { python3 "$PY" "$@"; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
mb() { case "$1" in ''|-) echo "-" ;; *) awk -v x="$1" 'BEGIN { printf "%.2f", x / 1e6 }' ;; esac; }
tail_err() { echo "--- stderr tail of $1 ---" >&2; tail -n 20 "$1" >&2 || true; }

# --- servers ----------------------------------------------------------------
# One server (its own store) per run: `serve` keeps LFS objects by content
# across its repos, so a second mirror on one store would find the first's
# archives there and send nothing, and "bytes moved" would mean nothing.
SERVERS=""
URL=""
start_server() {  # NAME -> sets URL
  local dir="$TMP/store-$1" pid
  "$BIN" serve --root "$dir" --addr 127.0.0.1:0 --seed "org/repo=$FOLDER" >"$dir.out" 2>"$dir.err" &
  pid=$!
  SERVERS="$SERVERS $pid"
  URL=""
  for _ in $(seq 1 600); do
    if grep -q '^listening on ' "$dir.out" 2>/dev/null; then
      URL="$(head -1 "$dir.out" | sed 's/^listening on //')"
      break
    fi
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 0.1
  done
  if [ -z "$URL" ]; then
    echo "scale-flow: the server did not start" >&2
    cat "$dir.err" >&2
    exit 2
  fi
}
start_server one
export HF_HOME="$TMP/hf-home"
unset HF_TOKEN HF_HUB_CACHE HF_ENDPOINT || true
COMMON=(--no-progress --json)
echo "scale-flow: serving $FOLDER as org/repo at $URL; $BIN; THREADS=$THREADS STEP_THREADS=$STEP_THREADS${UNIT_BYTES:+ UNIT_BYTES=$UNIT_BYTES}" >&2

status=0
ROWS=()
FMT="%-4s %6s %5s %7s %9s %8s %8s %10s %10s %8s %12s %9s %9s\n"

# --- one machine ------------------------------------------------------------
t0=$(now)
if ! "$BIN" mirror org/repo --to org/one --work-dir "$TMP/work-one" -T 0 --endpoint "$URL" "${COMMON[@]}" >"$TMP/one.json" 2>"$TMP/one.err"; then
  tail_err "$TMP/one.err"
  echo "scale-flow: the one-machine mirror failed; nothing to compare against" >&2
  exit 1
fi
t1=$(now)
read -r one_s one_down one_up one_mirror one_src < <(py one "$TMP/one.json")
echo "scale-flow: one-machine: $(secs "$t0" "$t1") s wall (report: $one_s s), source $one_src B, mirror $one_mirror B" >&2
ROWS+=("$(printf "$FMT" one - - - - - "$(secs "$t0" "$t1")" "$(mb "$one_down")" "$(mb "$one_up")" - "$one_mirror" - -)")

# --- at scale ---------------------------------------------------------------
for N in "${WORKERS[@]}"; do
  D="$TMP/n$N"; mkdir -p "$D"
  start_server "n$N"
  COMMON=(--endpoint "$URL" --no-progress --json)
  P="$D/plan.json"
  fail() { echo "scale-flow: N=$N: $1 failed" >&2; [ -z "${2:-}" ] || tail_err "$2"; status=1
           ROWS+=("$(printf "$FMT" "$N" FAILED "$1" - - - - - - - - - -)"); }

  t0=$(now)
  if ! "$BIN" mirror --plan "$P" org/repo --to "org/scaled-$N" --work-dir "$D/work-plan" -T "$STEP_THREADS" \
      "${UNIT_ARGS[@]}" "${COMMON[@]}" >"$D/plan.out" 2>"$D/plan.err"; then fail plan "$D/plan.err"; continue; fi
  t1=$(now)
  IFS=$'\t' read -r plan_id units < <(py get "$D/plan.out" plan units)

  PIDS=()
  for ((k = 0; k < N; k++)); do
    "$BIN" mirror --plan "$P" --worker "$k/$N" --work-dir "$D/work-$k" -T "$THREADS" "${COMMON[@]}" \
      >"$D/worker-$k.json" 2>"$D/worker-$k.err" &
    PIDS+=($!)
  done
  wfail=()
  for ((k = 0; k < N; k++)); do
    if ! wait "${PIDS[$k]}"; then wfail+=("$k"); fi
  done
  PIDS=()
  t2=$(now)
  if [ ${#wfail[@]} -gt 0 ]; then
    for k in "${wfail[@]}"; do tail_err "$D/worker-$k.err"; done
    fail "worker(s) ${wfail[*]}"; continue
  fi
  echo "scale-flow: N=$N plan $plan_id, $units unit(s):" >&2
  sed 's/^/  plan: /' "$D/plan.err" >&2
  files=(); for ((k = 0; k < N; k++)); do files+=("$D/worker-$k.json"); done
  read -r w_units w_built w_idle w_down w_up < <(py workers "${files[@]}")
  [ "$w_units" = "$units" ] || echo "scale-flow: N=$N: workers' shares hold $w_units unit(s), the plan $units" >&2

  if "$BIN" mirror --plan "$P" --status --endpoint "$URL" --no-progress --json >"$D/status.json" 2>"$D/status.err"; then
    st_done="$(py status "$D/status.json")"
  else
    tail_err "$D/status.err"; st_done="ERR"; status=1
  fi
  work_bytes="$(py workbytes "$URL" "org/scaled-$N" "$plan_id")"

  t3=$(now)
  if ! "$BIN" mirror --plan "$P" --commit --work-dir "$D/work-commit" -T "$STEP_THREADS" "${COMMON[@]}" \
      >"$D/commit.json" 2>"$D/commit.err"; then fail commit "$D/commit.err"; continue; fi
  t4=$(now)
  read -r c_s c_down c_up c_mirror < <(py commit "$D/commit.json")

  # The one-machine mirror again, on this server (the source's commit id is
  # this store's: a manifest names it), after the scaled run (whose bytes
  # moved were counted on a store that held none of its objects).
  if "$BIN" mirror org/repo --to org/one --work-dir "$D/work-one" -T 0 "${COMMON[@]}" >"$D/one.json" 2>"$D/one.err"; then
    same="$(py compare "$URL" org/one "$URL" "org/scaled-$N")" || same="ERR"
  else
    tail_err "$D/one.err"; same="ERR"
  fi
  [ "$same" = yes ] || status=1
  [ "$c_mirror" = "$one_mirror" ] || echo "scale-flow: N=$N: mirror_bytes $c_mirror, one-machine $one_mirror" >&2

  ROWS+=("$(printf "$FMT" "$N" "$units" "$w_idle" "$(secs "$t0" "$t1")" "$(secs "$t1" "$t2")" \
    "$(secs "$t3" "$t4")" "$(secs "$t0" "$t4")" "$(mb $((w_down + c_down)))" "$(mb $((w_up + c_up)))" "$st_done" \
    "$c_mirror" "$(mb "$work_bytes")" "$same")")
done

echo
echo "FOLDER=$FOLDER WORKERS=${WORKERS[*]} THREADS=$THREADS STEP_THREADS=$STEP_THREADS UNIT_BYTES=${UNIT_BYTES:-default} cores=$(nproc)"
printf "$FMT" N units idle "plan s" "workers s" "commit s" "total s" "down MB" "up MB" "status" "mirror bytes" "work MB" identical
for r in "${ROWS[@]}"; do printf "%s\n" "$r"; done
exit "$status"
