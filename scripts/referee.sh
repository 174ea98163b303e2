#!/usr/bin/env bash
# Referee: check brevis-hub against the official Python huggingface_hub client.
#
#   scripts/referee.sh            # uses target/release/brevis-hub
#   BREVIS_BIN=path/to/brevis-hub BREVIS_REFEREE_VENV=~/.cache/brevis-venv scripts/referee.sh
#
# Starts two `brevis-hub serve` stores on 127.0.0.1 (port 0): A receives a real
# model through huggingface_hub's upload_folder, B receives the Brevis mirror
# and serves the source decoded on the fly. See scripts/referee.py.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${BREVIS_BIN:-$ROOT/target/release/brevis-hub}"
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

start_server() { # name -> sets URL
  local name="$1"
  "$BIN" serve --root "$TMP/$name" --addr 127.0.0.1:0 >"$TMP/$name.out" 2>"$TMP/$name.err" &
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

start_server store-a; URL_A="$URL"
start_server store-b; URL_B="$URL"
echo "referee: source store $URL_A, mirror store $URL_B, model $MODEL"

HF_HUB_DISABLE_XET=1 HF_ENDPOINT="$URL_A" HF_HOME="$TMP/hf-home" HF_HUB_DISABLE_TELEMETRY=1 \
  HF_HUB_DISABLE_PROGRESS_BARS=1 \
  "$VENV/bin/python" "$ROOT/scripts/referee.py" \
  --bin "$BIN" --model "$MODEL" --mirror-endpoint "$URL_B" --tmp "$TMP"
