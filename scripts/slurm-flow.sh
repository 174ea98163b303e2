#!/usr/bin/env bash
# slurm-flow.sh: run `brevis-hub mirror --plan` workers as a real Slurm job
# array on this machine, end to end, and check the result equals a
# one-machine mirror.
#
# Usage (as root, for bringing Slurm up; from anywhere):
#   scripts/slurm-flow.sh
#   BIN=/path/to/brevis-hub TASKS=3 scripts/slurm-flow.sh
#
# What it does:
#   1. Slurm: installs slurmctld slurmd slurm-client munge (Debian/Ubuntu,
#      --no-install-recommends) only if `slurmctld` is missing and apt-get is
#      there; writes a single-node
#      /etc/slurm/slurm.conf (no systemd, no cgroups) unless one not written by
#      this script is already there; starts munged, slurmctld and slurmd only
#      if they are not running; waits (60 s at most) for the node to be idle.
#   2. The flow: `brevis-hub serve` seeded with a small source (testdata/
#      hub-seed + testdata/tfjs as tfjs/) as org/many; a plan (--unit-bytes 1,
#      one unit per compressed file) to org/scaled; `sbatch --wait --array`
#      of TASKS workers (`--worker auto`); --status (every unit done);
#      --commit; a one-machine mirror to org/one; the two mirrors' main trees
#      compared (path, type, size, oid, lfs.oid of every entry but README.md).
#      Every array task must have built at least one unit.
#   At exit it stops serve and the daemons it started (not those it found
#   running; SLURM_FLOW_KEEP=1 leaves the ones it started running too).
#
# Environment:
#   BIN              brevis-hub binary (default <repo>/target/release/brevis-hub)
#   TASKS            array tasks, i.e. workers (default 2)
#   SLURM_FLOW_KEEP  1: leave the daemons this run started running
#   SLURM_FLOW_TMP   parent of the work folder (default $TMPDIR or /tmp); the
#                    folder is kept on failure, removed on success
#
# Exit status:
#   0   the flow worked and the two mirrors are equal
#   1   the flow failed (a worker failed, a unit not done, trees differ, ...)
#   2   usage/setup error (no binary, no testdata)
#   77  Slurm itself cannot be brought up here (no packages, not root, a
#       daemon would not start, the node never idle within 60 s, the array
#       never started; or jq/curl missing): "no scheduler here", not "the
#       flow is broken"
set -uo pipefail

T_START=$(date +%s.%N)
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${BIN:-$ROOT/target/release/brevis-hub}"
case "$BIN" in /*) ;; *) BIN="$ROOT/$BIN" ;; esac
TASKS="${TASKS:-2}"
KEEP="${SLURM_FLOW_KEEP:-0}"
CONF=/etc/slurm/slurm.conf
MARK="# Written by brevis scripts/slurm-flow.sh"
NODE="$(hostname -s)"

log() { printf 'slurm-flow: %s\n' "$*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

STARTED=()   # "name:pid" of the daemons this run started
SERVER=""
TMP=""
JOBNAME="brevis-flow-$$"
RC_FINAL=""

stop_pid() { # name pid
  local name=$1 pid=$2 i
  kill -0 "$pid" 2>/dev/null || return 0
  kill "$pid" 2>/dev/null || true
  local t0; t0=$(now)
  for i in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || { log "stopped $name (pid $pid) in $(since "$t0") s"; return 0; }; sleep 0.1; done
  log "$name (pid $pid) did not stop on TERM: KILL"
  kill -9 "$pid" 2>/dev/null || true
}

cleanup() {
  local rc=$?
  [ -n "$RC_FINAL" ] && rc=$RC_FINAL
  trap - EXIT INT TERM
  if [ -n "$TMP" ] && command -v squeue >/dev/null 2>&1; then
    if [ -n "$(squeue -h -n "$JOBNAME" -o %i 2>/dev/null)" ]; then
      log "cancelling job $JOBNAME"; scancel -n "$JOBNAME" 2>/dev/null || true; sleep 1
    fi
  fi
  if [ -n "$SERVER" ]; then kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; fi
  if [ "$KEEP" != 1 ]; then
    local i entry
    # slurmd, slurmctld, munged: reverse order of starting.
    for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do
      entry=${STARTED[$i]}
      stop_pid "${entry%%:*}" "${entry##*:}"
    done
  elif [ ${#STARTED[@]} -gt 0 ]; then
    log "leaving running (SLURM_FLOW_KEEP=1): ${STARTED[*]}"
  fi
  if [ -n "$TMP" ]; then
    if [ "$rc" -eq 0 ]; then rm -rf "$TMP"; else log "work folder kept: $TMP"; fi
  fi
  log "exit $rc after $(since "$T_START") s"
  exit "$rc"
}
trap cleanup EXIT
trap 'RC_FINAL=1; exit 1' INT TERM

noslurm() { log "NO SCHEDULER: $*"; RC_FINAL=77; exit 77; }
fail() { log "FAIL: $*"; RC_FINAL=1; exit 1; }
setup_err() { log "setup error: $*"; RC_FINAL=2; exit 2; }

# ---------------------------------------------------------------- checks
[ -x "$BIN" ] || setup_err "no brevis-hub binary at $BIN (build it, or set BIN)"
SEED_DIR="$ROOT/testdata/hub-seed"
TFJS_DIR="$ROOT/testdata/tfjs"
[ -d "$SEED_DIR" ] && [ -f "$TFJS_DIR/model.json" ] || setup_err "testdata/hub-seed or testdata/tfjs missing"
case "$TASKS" in '' | *[!0-9]* | 0) setup_err "TASKS must be a positive integer" ;; esac
IS_ROOT=0; [ "$(id -u)" -eq 0 ] && IS_ROOT=1

# ---------------------------------------------------------------- 1. install
T_INSTALL=""
need_pkgs=()
# The daemons, the client commands and munge: 8 packages (slurm-wlm would pull 43).
command -v slurmctld >/dev/null 2>&1 || need_pkgs+=(slurmctld slurmd slurm-client munge)
command -v jq >/dev/null 2>&1 || need_pkgs+=(jq)
command -v curl >/dev/null 2>&1 || need_pkgs+=(curl)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$IS_ROOT" -eq 1 ]; then
    log "installing ${need_pkgs[*]} with apt-get"
    t0=$(now)
    if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need_pkgs[@]}" >/tmp/slurm-flow-apt.log 2>&1 ||
      { apt-get update -q >>/tmp/slurm-flow-apt.log 2>&1 &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need_pkgs[@]}" >>/tmp/slurm-flow-apt.log 2>&1; }; }; then
      tail -n 20 /tmp/slurm-flow-apt.log >&2
      command -v slurmctld >/dev/null 2>&1 || noslurm "apt-get install ${need_pkgs[*]} failed (log: /tmp/slurm-flow-apt.log)"
    fi
    T_INSTALL=$(since "$t0")
    log "install took $T_INSTALL s"
  fi
fi
# Without them (apt-get could not bring them) the flow cannot be checked:
# an environment problem, like a scheduler that will not start.
command -v jq >/dev/null 2>&1 || noslurm "jq is needed (apt-get install jq)"
command -v curl >/dev/null 2>&1 || noslurm "curl is needed"
for c in slurmctld slurmd sbatch sinfo scontrol squeue scancel; do
  command -v "$c" >/dev/null 2>&1 || noslurm "$c not installed and cannot install it (apt-get: $(command -v apt-get || echo none), root: $IS_ROOT)"
done

# ---------------------------------------------------------------- 2. configure + start
ctld_up() { scontrol ping 2>/dev/null | grep -q 'is UP'; }
munge_ok() { command -v munge >/dev/null 2>&1 && munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

if [ -f "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
  log "using the existing $CONF (not written by this script)"
  OWN_CONF=0
else
  OWN_CONF=1
  [ "$IS_ROOT" -eq 1 ] || noslurm "not root: cannot write $CONF"
  CPUS=$(slurmd -C 2>/dev/null | sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' | head -1)
  [ -n "$CPUS" ] || CPUS=$(nproc)
  want="$(cat <<EOF
$MARK: a single-node test cluster, no systemd, no cgroups.
ClusterName=brevis
SlurmctldHost=$NODE
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
NodeName=$NODE CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
)"
  if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$want" ]; then
    mkdir -p /etc/slurm && printf '%s\n' "$want" >"$CONF" || noslurm "cannot write $CONF"
    log "wrote $CONF"
    if ctld_up; then scontrol reconfigure >/dev/null 2>&1 || true; fi
  fi
  mkdir -p /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
fi

# munge
if ! munge_ok; then
  [ "$IS_ROOT" -eq 1 ] || noslurm "munge does not work and not root to start munged"
  command -v munged >/dev/null 2>&1 || noslurm "munged not installed"
  KEY=/etc/munge/munge.key
  if [ ! -s "$KEY" ]; then
    mkdir -p /etc/munge
    if command -v mungekey >/dev/null 2>&1; then mungekey -c -f -k "$KEY" >/dev/null 2>&1; fi
    [ -s "$KEY" ] || dd if=/dev/urandom bs=1 count=1024 of="$KEY" 2>/dev/null
    log "created $KEY"
  fi
  chown munge:munge /etc/munge "$KEY" 2>/dev/null || true
  chmod 700 /etc/munge; chmod 400 "$KEY"
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  chmod 755 /run/munge
  if id munge >/dev/null 2>&1 && command -v runuser >/dev/null 2>&1; then
    runuser -u munge -- munged >/tmp/slurm-flow-munged.out 2>&1
  else
    munged --force >/tmp/slurm-flow-munged.out 2>&1
  fi
  for _ in $(seq 1 50); do munge_ok && break; sleep 0.1; done
  munge_ok || noslurm "munged would not start: $(cat /tmp/slurm-flow-munged.out)"
  pid=$(cat /run/munge/munged.pid 2>/dev/null || true)
  [ -n "$pid" ] && STARTED+=("munged:$pid")
  log "started munged${pid:+ (pid $pid)}"
fi

conf_val() { # key default: a value of slurm.conf
  local v; v=$(sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*\([^[:space:]#]*\).*/\1/Ip" "$CONF" 2>/dev/null | tail -1)
  echo "${v:-$2}"
}
CTLD_PIDFILE=$(conf_val SlurmctldPidFile /run/slurmctld.pid)
SLURMD_PIDFILE=$(conf_val SlurmdPidFile /run/slurmd.pid)
CTLD_LOG=$(conf_val SlurmctldLogFile /var/log/slurm/slurmctld.log)
SLURMD_LOG=$(conf_val SlurmdLogFile /var/log/slurm/slurmd.log)

pid_alive() { local p; p=$(cat "$1" 2>/dev/null) && [ -n "$p" ] && kill -0 "$p" 2>/dev/null && echo "$p"; }

T_UP=$(now)
if ! ctld_up; then
  [ "$IS_ROOT" -eq 1 ] || noslurm "slurmctld is not running and not root to start it"
  log "starting slurmctld"
  slurmctld >/tmp/slurm-flow-slurmctld.out 2>&1 || noslurm "slurmctld failed to start: $(cat /tmp/slurm-flow-slurmctld.out); last lines of $CTLD_LOG: $(tail -n 5 "$CTLD_LOG" 2>/dev/null)"
  for _ in $(seq 1 100); do ctld_up && break; sleep 0.2; done
  ctld_up || noslurm "slurmctld not answering after 20 s: $(tail -n 10 "$CTLD_LOG" 2>/dev/null)"
  pid=$(pid_alive "$CTLD_PIDFILE") && STARTED+=("slurmctld:$pid")
fi
if ! pid_alive "$SLURMD_PIDFILE" >/dev/null && ! pgrep -x slurmd >/dev/null 2>&1; then
  [ "$IS_ROOT" -eq 1 ] || noslurm "slurmd is not running and not root to start it"
  log "starting slurmd"
  slurmd >/tmp/slurm-flow-slurmd.out 2>&1 || noslurm "slurmd failed to start: $(cat /tmp/slurm-flow-slurmd.out); last lines of $SLURMD_LOG: $(tail -n 5 "$SLURMD_LOG" 2>/dev/null)"
  for _ in $(seq 1 50); do pid=$(pid_alive "$SLURMD_PIDFILE") && break; sleep 0.1; done
  pid=$(pid_alive "$SLURMD_PIDFILE") || noslurm "slurmd exited at start: $(tail -n 10 "$SLURMD_LOG" 2>/dev/null)"
  STARTED+=("slurmd:$pid")
fi

# The node idle (or mixed) within 60 s.
node_state() {
  if [ "$OWN_CONF" -eq 1 ]; then sinfo -h -N -n "$NODE" -o %T 2>/dev/null | head -1
  else sinfo -h -o %T 2>/dev/null | grep -m1 -E '^(idle|mixed)' || sinfo -h -o %T 2>/dev/null | head -1; fi
}
resumed=0; st=""
for i in $(seq 1 60); do
  st=$(node_state)
  case "$st" in idle | mixed | allocated) break ;; esac
  if [ "$OWN_CONF" -eq 1 ] && [ $i -ge 3 ] && [ $resumed -lt 3 ] && [[ "$st" =~ down|drain|fail ]]; then
    scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true; resumed=$((resumed + 1))
  fi
  sleep 1
done
case "$st" in
  idle | mixed | allocated) ;;
  *) noslurm "node $NODE not idle within 60 s (state: ${st:-none}); last lines of $SLURMD_LOG: $(tail -n 5 "$SLURMD_LOG" 2>/dev/null)" ;;
esac
log "Slurm up in $(since "$T_UP") s: node $NODE $st ($(sinfo -h -o '%P %C' | head -1) partition, CPUs A/I/O/T)"

# ---------------------------------------------------------------- 3. the flow
TMP="$(mktemp -d "${SLURM_FLOW_TMP:-${TMPDIR:-/tmp}}/slurm-flow.XXXXXX")"
chmod 755 "$TMP"
SRC="$TMP/src"
cp -r "$SEED_DIR" "$SRC"
mkdir -p "$SRC/tfjs"
cp "$TFJS_DIR"/model.json "$TFJS_DIR"/group1-shard*.bin "$SRC/tfjs/"

"$BIN" serve --root "$TMP/store" --addr 127.0.0.1:0 --seed "org/many=$SRC" >"$TMP/serve.out" 2>"$TMP/serve.err" &
SERVER=$!
URL=""
for _ in $(seq 1 200); do
  if grep -q '^listening on ' "$TMP/serve.out" 2>/dev/null; then
    URL="$(head -1 "$TMP/serve.out" | sed 's/^listening on //')"; break
  fi
  kill -0 "$SERVER" 2>/dev/null || break
  sleep 0.1
done
[ -n "$URL" ] || fail "brevis-hub serve did not start: $(cat "$TMP/serve.err")"
log "serving $SRC as org/many at $URL"

export HF_HOME="$TMP/hf-home" HF_ENDPOINT="$URL"
unset HF_TOKEN HF_HUB_CACHE BREVIS_WORK_DIR BREVIS_WORKERS JOB_COMPLETION_INDEX || true
PLAN="$TMP/plan.json"

t0=$(now)
"$BIN" mirror --plan "$PLAN" org/many --to org/scaled --endpoint "$URL" --work-dir "$TMP/plan-work" \
  --unit-bytes 1 --no-progress --json >"$TMP/plan.out" 2>"$TMP/plan.err" || fail "plan: $(cat "$TMP/plan.err")"
UNITS=$(jq -r .units "$TMP/plan.out")
log "plan: $UNITS unit(s) in $(since "$t0") s ($(jq -c . "$TMP/plan.out"))"
[ "$UNITS" -ge "$TASKS" ] || fail "plan has $UNITS unit(s), fewer than $TASKS tasks"

cat >"$TMP/worker.sbatch" <<'EOF'
#!/bin/bash
# One brevis-hub plan worker per array task; BIN, PLAN, URL, TMP come from
# the submitting environment (--export=ALL).
set -euo pipefail
echo "task $SLURM_ARRAY_TASK_ID of job $SLURM_ARRAY_JOB_ID (min $SLURM_ARRAY_TASK_MIN, count $SLURM_ARRAY_TASK_COUNT) on $(hostname -s), cpus $SLURM_CPUS_ON_NODE, start $(date +%s.%N)" >&2
"$BIN" mirror --plan "$PLAN" --worker auto --endpoint "$URL" \
  --work-dir "$TMP/work-$SLURM_ARRAY_TASK_ID" -T 1 --no-progress --json
echo "task $SLURM_ARRAY_TASK_ID end $(date +%s.%N)" >&2
EOF
chmod 755 "$TMP/worker.sbatch"
export BIN PLAN URL TMP

t0=$(now)
log "sbatch --wait --array=0-$((TASKS - 1)) (job name $JOBNAME)"
timeout 600 sbatch --wait --parsable --export=ALL --job-name="$JOBNAME" --array="0-$((TASKS - 1))" \
  --ntasks=1 --cpus-per-task=1 --time=10 --chdir="$TMP" \
  --output="$TMP/task-%a.out" --error="$TMP/task-%a.err" "$TMP/worker.sbatch" >"$TMP/sbatch.out" 2>"$TMP/sbatch.err"
SB=$?
T_ARRAY=$(since "$t0")
JID=$(head -1 "$TMP/sbatch.out" 2>/dev/null | cut -d';' -f1)
if [ $SB -eq 124 ]; then
  ls "$TMP"/task-*.err >/dev/null 2>&1 || noslurm "array job ${JID:-?} never started in 600 s: $(squeue -h -n "$JOBNAME" -o '%i %T %r' 2>/dev/null | head -3)"
  fail "array job $JID did not finish in 600 s"
fi
# Slurm answered (the node went idle above): a refused submission is this
# flow's fault (its options, its script), not a missing scheduler.
[ -n "$JID" ] || fail "sbatch could not submit: $(cat "$TMP/sbatch.err")"
log "array job $JID finished in $T_ARRAY s, sbatch exit $SB"

bad=0; starts=(); ends=()  # epoch seconds of each task
for ((k = 0; k < TASKS; k++)); do
  out="$TMP/task-$k.out" err="$TMP/task-$k.err"
  if [ ! -s "$out" ] || ! built=$(jq -er .units_built "$out" 2>/dev/null); then
    log "task $k: no worker report; stderr:"; sed 's/^/  | /' "$err" >&2 2>/dev/null; bad=1; continue
  fi
  log "task $k: $(head -1 "$err" | sed 's/, start.*//'): $(jq -c '{worker, units, units_built, units_done_before, source_bytes, mirror_bytes}' "$out")"
  starts+=("$(sed -n 's/.* start \([0-9.]*\)$/\1/p' "$err")"); ends+=("$(sed -n 's/.* end \([0-9.]*\)$/\1/p' "$err")")
  [ "$built" -ge 1 ] || { log "task $k built no unit"; bad=1; }
done
[ $SB -eq 0 ] || fail "sbatch --wait exit $SB (a task failed): $(cat "$TMP/sbatch.err")"
[ $bad -eq 0 ] || fail "a worker failed or built nothing"
if [ ${#starts[@]} -ge 2 ]; then
  # The most tasks running at once, from their start and end times.
  log "tasks: at most $(for ((k = 0; k < ${#starts[@]}; k++)); do echo "${starts[$k]} 1"; echo "${ends[$k]} -1"; done |
    sort -n -k1,1 -k2,2n | awk '{ c += $2; if (c > m) m = c } END { print m }') of ${#starts[@]} ran at once; starts $(printf '%s\n' "${starts[@]}" | sort -n |
    awk 'NR == 1 { f = $1 } { l = $1 } END { printf "%.2f s", l - f }') apart at most"
fi

"$BIN" mirror --plan "$PLAN" --status --json --endpoint "$URL" --no-progress >"$TMP/status.json" 2>"$TMP/status.err" || fail "status: $(cat "$TMP/status.err")"
notdone=$(jq '[.units[] | select(.state != "done")] | length' "$TMP/status.json")
ndone=$(jq '[.units[] | select(.state == "done")] | length' "$TMP/status.json")
log "status: $ndone done, $notdone not done"
[ "$notdone" -eq 0 ] && [ "$ndone" -eq "$UNITS" ] || fail "units not all done: $(jq -c '[.units[] | select(.state != "done")]' "$TMP/status.json")"

t0=$(now)
"$BIN" mirror --plan "$PLAN" --commit --endpoint "$URL" --work-dir "$TMP/commit-work" --no-progress --json \
  >"$TMP/commit.json" 2>"$TMP/commit.err" || fail "commit: $(cat "$TMP/commit.err")"
log "commit in $(since "$t0") s"

t0=$(now)
"$BIN" mirror org/many --to org/one --endpoint "$URL" --work-dir "$TMP/one-work" --no-progress --json \
  >"$TMP/one.json" 2>"$TMP/one.err" || fail "one-machine mirror: $(cat "$TMP/one.err")"
log "one-machine mirror in $(since "$t0") s"

tree() { # repo -> normalized main tree
  curl -fsS "$URL/api/models/$1/tree/main?recursive=true" |
    jq -S '[.[] | select(.path != "README.md") | {path, type, size, oid, lfs: (.lfs.oid // null)}] | sort_by(.path)'
}
tree org/scaled >"$TMP/tree-scaled.json" || fail "cannot read org/scaled's tree"
tree org/one >"$TMP/tree-one.json" || fail "cannot read org/one's tree"
n=$(jq length "$TMP/tree-one.json"); nlfs=$(jq '[.[] | select(.lfs != null)] | length' "$TMP/tree-one.json")
[ "$n" -gt 0 ] || fail "org/one's tree is empty"
if ! diff -u "$TMP/tree-one.json" "$TMP/tree-scaled.json" >"$TMP/tree.diff"; then
  cat "$TMP/tree.diff" >&2
  fail "org/scaled (Slurm array) and org/one (one machine) differ"
fi
log "org/scaled == org/one: $n entries ($nlfs LFS) equal in path, type, size, oid and lfs.oid (README.md aside)"
jq -r '.[] | "  \(.path)\t\(.size)\t\(.lfs // .oid)"' "$TMP/tree-scaled.json" >&2

log "OK: install $([ -n "$T_INSTALL" ] && echo "$T_INSTALL s" || echo "not needed"), array $T_ARRAY s, total $(since "$T_START") s"
exit 0
