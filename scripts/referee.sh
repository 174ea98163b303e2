#!/usr/bin/env bash
# Referee: check brevis-hub against the official Python huggingface_hub client.
#
#   scripts/referee.sh            # uses target/release/brevis-hub
#   BREVIS_BIN=path/to/brevis-hub BREVIS_REFEREE_VENV=~/.cache/brevis-venv scripts/referee.sh
#   scripts/referee.sh --strict   # the servers in strict mode (like huggingface.co)
#   scripts/referee.sh --strict --official-only   # skip the brevis-hub steps
#
# Starts two `brevis-hub serve` stores on 127.0.0.1 (port 0): A receives a real
# model through huggingface_hub's upload_folder, B receives the Brevis mirror
# and serves the source decoded on the fly. See scripts/referee.py.
#
# --strict (or BREVIS_REFEREE_STRICT=1) starts them with `serve --strict`, a
# write token (HF_TOKEN, which the CDN must never see), a multipart threshold
# and part size small enough that the model's safetensors file goes up in
# parts, a loose rate limit, and a plain-GET cap of the largest model file
# (BREVIS_REFEREE_PLAIN_GET_CAP to change it: huggingface_hub downloads a file
# with one GET without Range, so a cap below a file's size fails it, as a
# file over 50 GB does on the Hub). A third strict server C with a tight rate
# limit checks the 429s. --official-only (or BREVIS_REFEREE_OFFICIAL_ONLY=1)
# skips the steps that run brevis-hub itself, printed as skipped.
set -euo pipefail

STRICT="${BREVIS_REFEREE_STRICT:-}"
OFFICIAL_ONLY="${BREVIS_REFEREE_OFFICIAL_ONLY:-}"
for arg in "$@"; do
  case "$arg" in
    --strict) STRICT=1 ;;
    --official-only) OFFICIAL_ONLY=1 ;;
    *) echo "referee: unknown argument $arg (--strict, --official-only)" >&2; exit 2 ;;
  esac
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${BREVIS_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/brevis-hub}"
if [ ! -x "$BIN" ]; then
  echo "referee: $BIN is not built (cargo build --release -p brevis-cli)" >&2
  exit 2
fi

if [ -n "${BREVIS_REFEREE_MODEL:-}" ]; then
  MODEL="$BREVIS_REFEREE_MODEL"
elif [ -d "$ROOT/testdata/hub-seed" ]; then
  MODEL="$ROOT/testdata/hub-seed"
else
  MODEL="$ROOT/testdata/silero-vad"
fi

TMP="$(mktemp -d "${TMPDIR:-/tmp}/brevis-referee.XXXXXX")"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -z "${BREVIS_REFEREE_KEEP:-}" ]; then rm -rf "$TMP"; else echo "referee: kept $TMP" >&2; fi
}
trap cleanup EXIT

VENV="${BREVIS_REFEREE_VENV:-$TMP/venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import huggingface_hub, safetensors, numpy" 2>/dev/null; then
  "$VENV/bin/pip" install -q --disable-pip-version-check huggingface_hub safetensors numpy
fi
"$VENV/bin/python" -c "import huggingface_hub as h; print('referee: huggingface_hub', h.__version__)"

SERVE_ARGS=()
PY_ARGS=()
if [ -n "$STRICT" ]; then
  # The largest model file: huggingface_hub GETs each file whole.
  BIGGEST="$("$VENV/bin/python" -c 'import os, sys
print(max(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(sys.argv[1]) if ".git" not in d for f in fs))' "$MODEL")"
  CAP="${BREVIS_REFEREE_PLAIN_GET_CAP:-$BIGGEST}"
  export HF_TOKEN=referee-write-token
  # brevis-hub mirror sends --to-token (or this) to the destination, B.
  export BREVIS_TO_TOKEN="$HF_TOKEN"
  # Parts of 256 KiB over 256 KiB: the safetensors file (hundreds of KB or
  # more) goes through the multipart transfer, smaller LFS files one PUT.
  SERVE_ARGS=(--strict --token "$HF_TOKEN" --plain-get-cap "$CAP" --rate-limit 1000/10
              --multipart-threshold 256KiB --multipart-chunk 256KiB)
  PY_ARGS+=(--strict --plain-get-cap "$CAP")
  echo "referee: strict mode (plain-GET cap $CAP B, largest model file $BIGGEST B)"
fi
if [ -n "$OFFICIAL_ONLY" ]; then
  PY_ARGS+=(--official-only)
fi

start_server() { # name [serve args...] -> sets URL
  local name="$1"
  shift
  "$BIN" serve --root "$TMP/$name" --addr 127.0.0.1:0 "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  PIDS+=("$!")
  for _ in $(seq 1 100); do
    if grep -q '^listening on ' "$TMP/$name.out" 2>/dev/null; then
      URL="$(head -1 "$TMP/$name.out" | sed 's/^listening on //')"
      return 0
    fi
    sleep 0.1
  done
  echo "referee: server $name did not start:" >&2
  cat "$TMP/$name.err" >&2
  exit 2
}

start_server store-a ${SERVE_ARGS[@]+"${SERVE_ARGS[@]}"}; URL_A="$URL"
start_server store-b ${SERVE_ARGS[@]+"${SERVE_ARGS[@]}"}; URL_B="$URL"
echo "referee: source store $URL_A, mirror store $URL_B, model $MODEL"
if [ -n "$STRICT" ]; then
  sed -n '2,3s/^/referee: store-a /p' "$TMP/store-a.out"
  # C: a tight rate limit for the 429 check, holding the model already.
  start_server store-c --strict --rate-limit 5/2 --seed "referee/limited=$MODEL"; URL_C="$URL"
  PY_ARGS+=(--limited-endpoint "$URL_C")
fi

HF_HUB_DISABLE_XET=1 HF_ENDPOINT="$URL_A" HF_HOME="$TMP/hf-home" HF_HUB_DISABLE_TELEMETRY=1 \
  HF_HUB_DISABLE_PROGRESS_BARS=1 \
  "$VENV/bin/python" "$ROOT/scripts/referee.py" \
  --bin "$BIN" --model "$MODEL" --mirror-endpoint "$URL_B" --tmp "$TMP" ${PY_ARGS[@]+"${PY_ARGS[@]}"}
