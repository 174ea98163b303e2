#!/usr/bin/env bash
# Main job: build the release binary once, serve a local Hub store seeded
# with a small real checkpoint, then mirror -> pull -> verify against it and
# print the sizes. Exits non-zero on any failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

cargo build --release -p brevis-cli
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/brevis-hub"

if [ -d testdata/hub-seed ]; then
  SEED="$ROOT/testdata/hub-seed"
elif [ -d testdata/silero-vad ]; then
  SEED="$ROOT/testdata/silero-vad"
else
  f="$(find testdata -name '*.safetensors' -print -quit 2>/dev/null || true)"
  if [ -z "$f" ]; then echo "main-job: no checkpoint under testdata/" >&2; exit 2; fi
  SEED="$ROOT/$(dirname "$f")"
fi

TMP="$(mktemp -d "${TMPDIR:-/tmp}/brevis-main-job.XXXXXX")"
SERVER=""
cleanup() {
  if [ -n "$SERVER" ]; then kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT

"$BIN" serve --root "$TMP/store" --addr 127.0.0.1:0 --seed "org/model=$SEED" >"$TMP/serve.out" 2>"$TMP/serve.err" &
SERVER=$!
URL=""
for _ in $(seq 1 100); do
  if grep -q '^listening on ' "$TMP/serve.out" 2>/dev/null; then
    URL="$(head -1 "$TMP/serve.out" | sed 's/^listening on //')"
    break
  fi
  if ! kill -0 "$SERVER" 2>/dev/null; then break; fi
  sleep 0.1
done
if [ -z "$URL" ]; then
  echo "main-job: the server did not start" >&2
  cat "$TMP/serve.err" >&2
  exit 2
fi
echo "main-job: serving $SEED as org/model at $URL"

export HF_ENDPOINT="$URL" HF_HOME="$TMP/hf-home"
unset HF_TOKEN HF_HUB_CACHE || true

t0=$(date +%s.%N)
"$BIN" mirror org/model --to org/model-brevis --no-progress
t1=$(date +%s.%N)
"$BIN" pull org/model-brevis --cache-dir "$TMP/cache" --no-progress
t2=$(date +%s.%N)
"$BIN" verify org/model-brevis --no-progress
"$BIN" mirror org/model --to org/model-brevis --no-progress --json >"$TMP/again.json"
grep -q '"up_to_date": true' "$TMP/again.json" || { echo "main-job: a second mirror was not a no-op" >&2; exit 1; }

# Every original restored byte for byte under the source's name and commit.
SNAP="$(ls -d "$TMP"/cache/models--org--model/snapshots/*)"
fails=0
while IFS= read -r -d '' f; do
  rel="${f#"$SEED"/}"
  if ! cmp -s "$f" "$SNAP/$rel"; then echo "main-job: $rel differs" >&2; fails=$((fails + 1)); fi
done < <(find "$SEED" -type f -print0)
if [ "$fails" -ne 0 ]; then exit 1; fi

awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "main-job: mirror %.2f s, pull %.2f s; all files identical\n", b - a, c - b }'
